/* test_store.c — the keyed store with indexers (CLIENTGO.md 4, T-11..T-13):
 * MetaNamespaceKeys, Add/Update/Delete/Get/List, Replace, the namespace,
 * label and controller-uid built-ins, custom index functions (multi-valued,
 * duplicates, errors that leave the store unchanged, impure ones that the
 * store repairs), AddIndexers on a populated store and its conflicts,
 * Index(), sets that grow past their vector form and shrink back, the
 * iteration guard, and the memory an entry costs. Each test ends with a leak
 * check on the heap (and ASan's at exit in the sanitizer build). */
#include <malloc.h>
#include <stdint.h>
#include <unistd.h>

#include "error.h"
#include "json.h"
#include "mem.h"
#include "object.h"
#include "store.h"
#include "test.h"
#include "kt_heap.h"

#define K(s) s, sizeof s - 1

/* Bytes in use on the heap. glibc counts chunks parked in its per-thread
 * cache as used, so main() runs the tests with that cache off (re-executing
 * itself once with GLIBC_TUNABLES set); then "in use" is exact and each test
 * checks it ends where it began. Under ASan the count means nothing and
 * LeakSanitizer checks at exit instead. */

/* ---- objects ---- */

/* An object from its parts; labels is the body of a JSON object
 * ("\"app\":\"x\"") or NULL; owner a controller uid or NULL. */
static kl_obj_t *mk(const char *ns, const char *name, const char *rv,
                    const char *labels, const char *owner) {
  char json[1024], err[256];
  int n = snprintf(json, sizeof json,
                   "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{"
                   "\"name\":\"%s\"",
                   name);
  if (ns && ns[0])
    n += snprintf(json + n, sizeof json - n, ",\"namespace\":\"%s\"", ns);
  if (rv)
    n += snprintf(json + n, sizeof json - n, ",\"resourceVersion\":\"%s\"", rv);
  if (labels)
    n += snprintf(json + n, sizeof json - n, ",\"labels\":{%s}", labels);
  if (owner)
    n += snprintf(json + n, sizeof json - n,
                  ",\"ownerReferences\":[{\"apiVersion\":\"apps/v1\","
                  "\"kind\":\"ReplicaSet\",\"name\":\"rs\",\"uid\":\"%s\","
                  "\"controller\":true}]",
                  owner);
  snprintf(json + n, sizeof json - n, "}}");
  kl_json_value_t v;
  kl_obj_t *o = NULL;
  if (kl_json_check(json, strlen(json), &v, err, sizeof err) != KL_OK ||
      kl_obj_parse(&v, NULL, &o, err, sizeof err) != KL_OK) {
    fprintf(stderr, "mk %s: %s\n", json, err);
    abort();
  }
  return o;
}

/* ---- collecting iterations into sorted, comma-separated strings ---- */

typedef struct strs {
  char *v[4096];
  size_t n;
} strs;

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *join(strs *s) {
  static char out[65536];
  size_t k = 0;
  qsort(s->v, s->n, sizeof s->v[0], cmp_str);
  out[0] = '\0';
  for (size_t i = 0; i < s->n; i++) {
    k += (size_t)snprintf(out + k, sizeof out - k, "%s%s", i ? "," : "",
                          s->v[i]);
    free(s->v[i]);
  }
  s->n = 0;
  return out;
}

/* Records "key" or, with rv set, "key@rv". */
static int add_key(void *ud, const char *key, size_t len, kl_obj_t *o) {
  strs *s = ud;
  char buf[512];
  kl_json_span_t rv = kl_obj_resource_version(o);
  KT_TRUE(key[len] == '\0');
  snprintf(buf, sizeof buf, "%.*s@%.*s", (int)len, key, (int)rv.n, rv.p);
  s->v[s->n++] = kl_xstrdup(buf);
  return 0;
}

static int add_val(void *ud, const char *val, size_t len) {
  strs *s = ud;
  KT_TRUE(val[len] == '\0');
  s->v[s->n++] = kl_xstrndup(val, len);
  return 0;
}

static strs acc;

static const char *list_all(kl_store_t *s) {
  KT_EQ_INT(kl_store_list(s, add_key, &acc), 0);
  return join(&acc);
}

static const char *by_index(kl_store_t *s, const char *ix, const char *val) {
  int rc = kl_store_by_index(s, ix, val, strlen(val), add_key, &acc);
  if (rc) return rc == KL_ENOENT ? "ENOENT" : "ERR";
  return join(&acc);
}

static const char *values(kl_store_t *s, const char *ix) {
  int rc = kl_store_index_values(s, ix, add_val, &acc);
  if (rc) return rc == KL_ENOENT ? "ENOENT" : "ERR";
  return join(&acc);
}

static const kl_store_indexer_t ns_ix = {
    KL_STORE_NAMESPACE, KL_STORE_INDEX_NAMESPACE, NULL, NULL, NULL, NULL};

/* ---- basic operations ---- */

static void test_keys_add_update_delete_get(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  kl_obj_t *a1 = mk("ns", "a", "1", NULL, NULL);
  kl_obj_t *a2 = mk("ns", "a", "2", NULL, NULL);
  kl_obj_t *c = mk(NULL, "cluster", "5", NULL, NULL);
  kl_obj_t *old = (kl_obj_t *)1;
  char err[128];
  KT_EQ_INT(kl_store_add(s, a1, &old, err, sizeof err), 0);
  KT_TRUE(old == NULL);
  KT_EQ_INT(kl_store_add(s, c, NULL, NULL, 0), 0);
  KT_TRUE(kl_store_get(s, K("ns/a")) == a1);
  KT_TRUE(kl_store_get(s, K("cluster")) == c);
  KT_TRUE(kl_store_get(s, K("a")) == NULL);
  KT_TRUE(kl_store_get_obj(s, a2) == a1); /* Get(obj) by its key */
  KT_EQ_INT(kl_store_len(s), 2);
  KT_EQ_STR(list_all(s), "cluster@5,ns/a@1");
  /* Update hands back the previous object. */
  KT_EQ_INT(kl_store_update(s, a2, &old, err, sizeof err), 0);
  KT_TRUE(old == a1);
  kl_obj_unref(old);
  KT_TRUE(kl_store_get(s, K("ns/a")) == a2);
  /* Add of a cached key is an update too. */
  KT_EQ_INT(kl_store_add(s, a2, &old, NULL, 0), 0);
  KT_TRUE(old == a2);
  kl_obj_unref(old);
  /* Delete; a missing key is a no-op reported as KL_ENOENT. */
  KT_EQ_INT(kl_store_delete(s, K("ns/a"), &old), 0);
  KT_TRUE(old == a2);
  kl_obj_unref(old);
  KT_EQ_INT(kl_store_delete(s, K("ns/a"), &old), KL_ENOENT);
  KT_TRUE(old == NULL);
  KT_EQ_INT(kl_store_delete_obj(s, c, NULL), 0);
  KT_EQ_INT(kl_store_len(s), 0);
  KT_EQ_STR(list_all(s), "");
  /* No name, no key. */
  kl_obj_t *noname = mk("ns", "", "1", NULL, NULL);
  KT_EQ_INT(kl_store_add(s, noname, NULL, err, sizeof err), KL_EINVAL);
  KT_EQ_STR(err, "object has no name");
  kl_obj_unref(noname);
  kl_obj_unref(a1);
  kl_obj_unref(a2);
  kl_obj_unref(c);
  kl_store_resync(s);
  kl_store_free(s);
  kl_store_free(NULL);
  KT_EQ_INT(heap_used(), heap0);
}

/* Swap puts another form of the cached object in its place, indices
 * untouched, only while that object is the one cached. */
static void test_swap(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  KT_EQ_INT(kl_store_add_indexers(s, &ns_ix, 1, NULL, 0), 0);
  kl_obj_t *a1 = mk("ns", "a", "1", NULL, NULL);
  kl_obj_t *a1b = mk("ns", "a", "1", NULL, NULL);
  kl_obj_t *a2 = mk("ns", "a", "2", NULL, NULL);
  kl_obj_t *b = mk("ns", "b", "1", NULL, NULL);
  KT_EQ_INT(kl_store_add(s, a1, NULL, NULL, 0), 0);
  KT_EQ_INT(kl_store_swap(s, a1, a1b), 0);
  KT_TRUE(kl_store_get(s, K("ns/a")) == a1b);
  KT_EQ_STR(by_index(s, KL_STORE_NAMESPACE, "ns"), "ns/a@1");
  /* a1 is no longer the cached object, nor is b cached */
  KT_EQ_INT(kl_store_swap(s, a1, a2), KL_ENOENT);
  KT_EQ_INT(kl_store_swap(s, b, a2), KL_ENOENT);
  KT_TRUE(kl_store_get(s, K("ns/a")) == a1b);
  KT_EQ_INT(kl_store_len(s), 1);
  kl_obj_unref(a1);
  kl_obj_unref(a1b);
  kl_obj_unref(a2);
  kl_obj_unref(b);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_long_keys(void) {
  size_t heap0 = heap_used();
  char name[300], key[400];
  memset(name, 'n', 299);
  name[299] = '\0';
  snprintf(key, sizeof key, "ns/%s", name);
  kl_store_t *s = kl_store_new();
  kl_obj_t *o = mk("ns", name, "1", NULL, NULL);
  KT_EQ_INT(kl_store_add(s, o, NULL, NULL, 0), 0);
  KT_TRUE(kl_store_get(s, key, strlen(key)) == o);
  KT_TRUE(kl_store_get_obj(s, o) == o);
  KT_EQ_INT(kl_store_delete_obj(s, o, NULL), 0);
  kl_obj_unref(o);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

static int stop_at_two(void *ud, const char *key, size_t len, kl_obj_t *o) {
  (void)key;
  (void)len;
  (void)o;
  return ++*(int *)ud == 2 ? 7 : 0;
}

static kl_store_t *guard_store;
static int guard_rc;
static int mutate_inside(void *ud, const char *key, size_t len, kl_obj_t *o) {
  (void)ud;
  char err[128];
  guard_rc = kl_store_add(guard_store, o, NULL, err, sizeof err);
  if (guard_rc == KL_EINVAL)
    KT_EQ_STR(err, "store modified during an iteration or an index function");
  KT_EQ_INT(kl_store_delete(guard_store, key, len, NULL), KL_EINVAL);
  KT_EQ_INT(kl_store_replace(guard_store, NULL, 0, NULL, 0), KL_EINVAL);
  KT_EQ_INT(kl_store_add_indexers(guard_store, &ns_ix, 1, NULL, 0), KL_EINVAL);
  KT_EQ_INT(kl_store_remove_indexer(guard_store, "x"), KL_EINVAL);
  return 0;
}

static void test_iteration_stops_and_guards(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  for (int i = 0; i < 5; i++) {
    char name[16];
    snprintf(name, sizeof name, "o%d", i);
    kl_obj_t *o = mk("ns", name, "1", NULL, NULL);
    kl_store_add(s, o, NULL, NULL, 0);
    kl_obj_unref(o);
  }
  int seen = 0;
  KT_EQ_INT(kl_store_list(s, stop_at_two, &seen), 7);
  KT_EQ_INT(seen, 2);
  guard_store = s;
  KT_EQ_INT(kl_store_list(s, mutate_inside, NULL), 0);
  KT_EQ_INT(guard_rc, KL_EINVAL);
  KT_EQ_INT(kl_store_len(s), 5);
  /* The guard is released afterwards. */
  KT_EQ_INT(kl_store_delete(s, K("ns/o1"), NULL), 0);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-11: index maintenance ---- */

static void test_t11_index_maintenance(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  kl_store_indexer_t by_label = {
      "byLabel", KL_STORE_INDEX_LABEL, "app", NULL, NULL, NULL};
  KT_EQ_INT(kl_store_add_indexers(s, &by_label, 1, NULL, 0), 0);
  kl_obj_t *x = mk("ns", "p1", "1", "\"app\":\"x\"", NULL);
  kl_obj_t *y = mk("ns", "p1", "2", "\"app\":\"y\",\"tier\":\"t\"", NULL);
  KT_EQ_INT(kl_store_add(s, x, NULL, NULL, 0), 0);
  KT_EQ_STR(by_index(s, "byLabel", "x"), "ns/p1@1");
  KT_EQ_STR(values(s, "byLabel"), "x");
  KT_EQ_INT(kl_store_update(s, y, NULL, NULL, 0), 0);
  KT_EQ_STR(by_index(s, "byLabel", "x"), "");
  KT_EQ_STR(by_index(s, "byLabel", "y"), "ns/p1@2");
  KT_EQ_STR(values(s, "byLabel"), "y"); /* the empty set for x is pruned */
  KT_EQ_INT(kl_store_index_len(s, "byLabel", K("x")), 0);
  KT_EQ_INT(kl_store_index_len(s, "byLabel", K("y")), 1);
  KT_EQ_INT(kl_store_delete(s, K("ns/p1"), NULL), 0);
  KT_EQ_STR(by_index(s, "byLabel", "y"), "");
  KT_EQ_STR(values(s, "byLabel"), "");
  /* Objects without the label are in no set. */
  kl_obj_t *none = mk("ns", "p2", "3", "\"other\":\"x\"", NULL);
  KT_EQ_INT(kl_store_add(s, none, NULL, NULL, 0), 0);
  KT_EQ_STR(values(s, "byLabel"), "");
  /* Unknown index names. */
  KT_EQ_STR(by_index(s, "nope", "x"), "ENOENT");
  KT_EQ_STR(values(s, "nope"), "ENOENT");
  KT_EQ_INT(kl_store_index(s, "nope", none, add_key, &acc), KL_ENOENT);
  KT_TRUE(kl_store_has_index(s, "byLabel") && !kl_store_has_index(s, "nope"));
  kl_obj_unref(x);
  kl_obj_unref(y);
  kl_obj_unref(none);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_builtin_namespace_and_controller(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  kl_store_indexer_t ix[2] = {
      ns_ix, {"owner", KL_STORE_INDEX_CONTROLLER, NULL, NULL, NULL, NULL}};
  KT_EQ_INT(kl_store_add_indexers(s, ix, 2, NULL, 0), 0);
  kl_obj_t *o[4] = {
      mk("a", "p1", "1", NULL, "u1"), mk("a", "p2", "1", NULL, "u2"),
      mk("b", "p1", "1", NULL, "u1"), mk(NULL, "node", "1", NULL, NULL)};
  for (int i = 0; i < 4; i++)
    KT_EQ_INT(kl_store_add(s, o[i], NULL, NULL, 0), 0);
  KT_EQ_STR(by_index(s, "namespace", "a"), "a/p1@1,a/p2@1");
  KT_EQ_STR(by_index(s, "namespace", ""), "node@1"); /* cluster scope */
  KT_EQ_STR(values(s, "namespace"), ",a,b");
  KT_EQ_STR(by_index(s, "owner", "u1"), "a/p1@1,b/p1@1");
  KT_EQ_STR(values(s, "owner"), "u1,u2");
  /* The controller changes; the namespace does not (fast path). */
  kl_obj_t *p2 = mk("a", "p2", "2", NULL, "u1");
  KT_EQ_INT(kl_store_update(s, p2, NULL, NULL, 0), 0);
  KT_EQ_STR(by_index(s, "owner", "u1"), "a/p1@1,a/p2@2,b/p1@1");
  KT_EQ_STR(values(s, "owner"), "u1");
  KT_EQ_STR(by_index(s, "namespace", "a"), "a/p1@1,a/p2@2");
  /* Index(name, obj): objects sharing a value with the object. */
  KT_EQ_INT(kl_store_index(s, "owner", o[0], add_key, &acc), 0);
  KT_EQ_STR(join(&acc), "a/p1@1,a/p2@2,b/p1@1");
  for (int i = 0; i < 4; i++)
    kl_obj_unref(o[i]);
  kl_obj_unref(p2);
  KT_EQ_INT(kl_store_repairs(s), 0);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- custom index functions ---- */

/* Emits each label value, and the "dup" value twice; fails with KL_EPARSE
 * (and a message) on objects labelled fail=yes; emits too much for
 * flood=yes. */
static int labels_fn(const kl_obj_t *o, void *ud, kl_store_emit_fn *emit,
                     void *ctx) {
  kl_json_span_t v;
  int *calls = ud;
  (*calls)++;
  if (kl_obj_label_get(o, K("fail"), &v)) {
    kl_store_index_fail(ctx, "bad object");
    return KL_EPARSE;
  }
  if (kl_obj_label_get(o, K("flood"), &v)) {
    for (int i = 0;; i++) {
      char b[16];
      int n = snprintf(b, sizeof b, "%d", i);
      int rc = emit(ctx, b, (size_t)n);
      if (rc) return rc;
    }
  }
  for (size_t i = 0; i < kl_obj_label_count(o); i++) {
    kl_json_span_t k;
    kl_obj_label(o, i, &k, &v);
    emit(ctx, v.p, v.n);
    emit(ctx, v.p, v.n); /* duplicates count once */
  }
  return 0;
}

/* Fails (without a message) on objects named "c". */
static int fail_on_c(const kl_obj_t *o, void *ud, kl_store_emit_fn *emit,
                     void *ctx) {
  (void)ud;
  kl_json_span_t n = kl_obj_name(o);
  if (n.n == 1 && n.p[0] == 'c') return KL_EIO;
  return emit(ctx, n.p, n.n);
}

static int freed_ud;
static void free_ud(void *ud) {
  (void)ud;
  freed_ud++;
}

static void test_custom_multi_valued(void) {
  size_t heap0 = heap_used();
  int calls = 0;
  char err[256];
  kl_store_t *s = kl_store_new();
  kl_store_indexer_t ix = {
      "vals", KL_STORE_INDEX_CUSTOM, NULL, labels_fn, &calls, free_ud};
  KT_EQ_INT(kl_store_add_indexers(s, &ix, 1, err, sizeof err), 0);
  kl_obj_t *a = mk("n", "a", "1", "\"x\":\"1\",\"y\":\"2\",\"z\":\"1\"", NULL);
  kl_obj_t *b = mk("n", "b", "1", "\"x\":\"2\",\"y\":\"3\"", NULL);
  KT_EQ_INT(kl_store_add(s, a, NULL, NULL, 0), 0);
  KT_EQ_INT(kl_store_add(s, b, NULL, NULL, 0), 0);
  KT_EQ_STR(values(s, "vals"), "1,2,3");
  KT_EQ_STR(by_index(s, "vals", "2"), "n/a@1,n/b@1");
  KT_EQ_INT(kl_store_index_len(s, "vals", K("1")), 1);
  /* Index(): a is reached through two values, listed once. */
  KT_EQ_INT(kl_store_index(s, "vals", b, add_key, &acc), 0);
  KT_EQ_STR(join(&acc), "n/a@1,n/b@1");

  /* An error on Add leaves the store as it was, with the message. */
  kl_obj_t *bad = mk("n", "c", "1", "\"fail\":\"yes\"", NULL);
  KT_EQ_INT(kl_store_add(s, bad, NULL, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "index vals: bad object");
  KT_TRUE(kl_store_get(s, K("n/c")) == NULL);
  /* On Update, the old object stays, indexed as before. */
  kl_obj_t *abad = mk("n", "a", "2", "\"fail\":\"yes\"", NULL);
  KT_EQ_INT(kl_store_update(s, abad, NULL, err, sizeof err), KL_EPARSE);
  KT_TRUE(kl_store_get(s, K("n/a")) == a);
  KT_EQ_STR(values(s, "vals"), "1,2,3");
  /* Too many values: KL_ELIMIT, store unchanged. */
  kl_obj_t *flood = mk("n", "a", "3", "\"flood\":\"yes\"", NULL);
  KT_EQ_INT(kl_store_update(s, flood, NULL, err, sizeof err), KL_ELIMIT);
  KT_EQ_STR(err, "index vals: more than 4096 values or 1048576 bytes");
  KT_TRUE(kl_store_get(s, K("n/a")) == a);
  /* Replace with a failing object: unchanged. */
  kl_obj_t *list[2] = {b, bad};
  KT_EQ_INT(kl_store_replace(s, list, 2, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(list_all(s), "n/a@1,n/b@1");
  KT_EQ_STR(values(s, "vals"), "1,2,3");
  /* Indexers that fail on an existing item: nothing is added (not even
   * the good one), the memberships are rolled back, and the caller keeps
   * its ud (free_ud is not called). */
  KT_EQ_INT(kl_store_add(s, b, NULL, NULL, 0), 0);
  kl_obj_t *c = mk("n", "c", "1", "\"k\":\"v\"", NULL);
  KT_EQ_INT(kl_store_add(s, c, NULL, NULL, 0), 0);
  kl_store_indexer_t failing[2] = {
      {"ns", KL_STORE_INDEX_NAMESPACE, NULL, NULL, NULL, NULL},
      {"c-fails", KL_STORE_INDEX_CUSTOM, NULL, fail_on_c, NULL, free_ud}};
  KT_EQ_INT(kl_store_add_indexers(s, failing, 2, err, sizeof err), KL_EIO);
  KT_EQ_STR(err, "index c-fails: input/output error");
  KT_TRUE(!kl_store_has_index(s, "ns") && !kl_store_has_index(s, "c-fails"));
  KT_EQ_INT(freed_ud, 0);
  kl_store_indexer_t two[2] = {
      {"ns", KL_STORE_INDEX_NAMESPACE, NULL, NULL, NULL, NULL},
      {"vals2", KL_STORE_INDEX_CUSTOM, NULL, labels_fn, &calls, free_ud}};
  KT_EQ_INT(kl_store_add_indexers(s, two, 2, err, sizeof err), 0);
  KT_EQ_STR(by_index(s, "vals2", "v"), "n/c@1");
  KT_EQ_STR(by_index(s, "ns", "n"), "n/a@1,n/b@1,n/c@1");
  KT_EQ_INT(kl_store_remove_indexer(s, "vals2"), 0);
  KT_EQ_INT(freed_ud, 1);
  KT_EQ_INT(kl_store_remove_indexer(s, "vals2"), KL_ENOENT);
  KT_EQ_STR(by_index(s, "vals2", "v"), "ENOENT");
  /* Delete unindexes everywhere; nothing needed repair. */
  KT_EQ_INT(kl_store_delete(s, K("n/a"), NULL), 0);
  KT_EQ_STR(values(s, "vals"), "2,3,v");
  KT_EQ_INT(kl_store_repairs(s), 0);
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_obj_unref(c);
  kl_obj_unref(bad);
  kl_obj_unref(abad);
  kl_obj_unref(flood);
  kl_store_free(s);
  KT_EQ_INT(freed_ud, 2); /* vals2 removed, then vals with the store */
  KT_EQ_INT(heap_used(), heap0);
  freed_ud = 0;
}

/* An index function that is not pure: its value is "<mood>:<rv>", and it
 * fails while mood < 0. The store must notice and repair its sets. */
static int mood;
static int impure_fn(const kl_obj_t *o, void *ud, kl_store_emit_fn *emit,
                     void *ctx) {
  (void)ud;
  char b[32];
  kl_json_span_t rv = kl_obj_resource_version(o);
  if (mood < 0) return KL_EIO;
  int n = snprintf(b, sizeof b, "%d:%.*s", mood, (int)rv.n, rv.p);
  return emit(ctx, b, (size_t)n);
}

static void test_impure_index_functions_are_repaired(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  kl_store_indexer_t ix[2] = {
      ns_ix, {"mood", KL_STORE_INDEX_CUSTOM, NULL, impure_fn, NULL, NULL}};
  KT_EQ_INT(kl_store_add_indexers(s, ix, 2, NULL, 0), 0);
  kl_obj_t *a1 = mk("n", "a", "1", NULL, NULL);
  kl_obj_t *a2 = mk("n", "a", "2", NULL, NULL);
  kl_obj_t *b = mk("n", "b", "1", NULL, NULL);
  kl_obj_t *c = mk("n", "c", "1", NULL, NULL);
  mood = 1;
  KT_EQ_INT(kl_store_add(s, a1, NULL, NULL, 0), 0);
  KT_EQ_INT(kl_store_add(s, b, NULL, NULL, 0), 0);
  KT_EQ_STR(values(s, "mood"), "1:1");
  /* Update: the old object now gives 2:1, which does not hold a: the
   * mismatch is seen and a's memberships are rebuilt. */
  mood = 2;
  KT_EQ_INT(kl_store_update(s, a2, NULL, NULL, 0), 0);
  KT_EQ_INT(kl_store_repairs(s), 1);
  KT_EQ_STR(by_index(s, "mood", "1:1"), "n/b@1");
  KT_EQ_STR(by_index(s, "mood", "2:2"), "n/a@2");
  KT_EQ_STR(by_index(s, "namespace", "n"), "n/a@2,n/b@1");
  /* Delete: b gives 3:1, not where it is; the membership count exposes
   * it and the scan removes it, so no set points at the freed entry. */
  mood = 3;
  KT_EQ_INT(kl_store_delete(s, K("n/b"), NULL), 0);
  KT_EQ_INT(kl_store_repairs(s), 2);
  KT_EQ_STR(values(s, "mood"), "2:2");
  /* When old and new values agree the update takes the fast path and a
   * stale membership stays (as in client-go) until the delete finds it. */
  mood = 4;
  KT_EQ_INT(kl_store_add(s, c, NULL, NULL, 0), 0);
  mood = 5;
  KT_EQ_INT(kl_store_update(s, c, NULL, NULL, 0), 0);
  KT_EQ_INT(kl_store_repairs(s), 2);
  KT_EQ_STR(values(s, "mood"), "2:2,4:1");
  KT_EQ_INT(kl_store_delete(s, K("n/c"), NULL), 0);
  KT_EQ_INT(kl_store_repairs(s), 3);
  KT_EQ_STR(values(s, "mood"), "2:2");
  /* A function failing on delete: purged all the same. */
  mood = -1;
  KT_EQ_INT(kl_store_delete(s, K("n/a"), NULL), 0);
  KT_EQ_INT(kl_store_repairs(s), 4);
  KT_EQ_STR(values(s, "mood"), "");
  KT_EQ_STR(values(s, "namespace"), "");
  kl_obj_unref(a1);
  kl_obj_unref(a2);
  kl_obj_unref(b);
  kl_obj_unref(c);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-12: AddIndexers on a populated store ---- */

static void test_t12_add_indexers_populated_and_conflict(void) {
  size_t heap0 = heap_used();
  char err[128];
  kl_store_t *s = kl_store_new();
  kl_obj_t *a = mk("a", "p", "1", "\"app\":\"x\"", NULL);
  kl_obj_t *b = mk("b", "p", "1", "\"app\":\"x\"", NULL);
  kl_store_add(s, a, NULL, NULL, 0);
  kl_store_add(s, b, NULL, NULL, 0);
  kl_store_indexer_t app = {"app", KL_STORE_INDEX_LABEL, "app", NULL, NULL,
                            NULL};
  KT_EQ_INT(kl_store_add_indexers(s, &app, 1, err, sizeof err), 0);
  KT_EQ_STR(by_index(s, "app", "x"), "a/p@1,b/p@1");
  /* Duplicate name: rejected, nothing added. */
  kl_store_indexer_t two[2] = {ns_ix, app};
  KT_EQ_INT(kl_store_add_indexers(s, two, 2, err, sizeof err), KL_EEXIST);
  KT_EQ_STR(err, "indexer conflict: app");
  KT_TRUE(!kl_store_has_index(s, "namespace"));
  /* The same name twice in one call. */
  kl_store_indexer_t twice[2] = {ns_ix, ns_ix};
  KT_EQ_INT(kl_store_add_indexers(s, twice, 2, err, sizeof err), KL_EEXIST);
  KT_EQ_STR(err, "indexer conflict: namespace");
  /* Malformed indexers. */
  kl_store_indexer_t bad[3] = {
      {"", KL_STORE_INDEX_NAMESPACE, NULL, NULL, NULL, NULL},
      {"l", KL_STORE_INDEX_LABEL, NULL, NULL, NULL, NULL},
      {"c", KL_STORE_INDEX_CUSTOM, NULL, NULL, NULL, NULL}};
  KT_EQ_INT(kl_store_add_indexers(s, &bad[0], 1, err, sizeof err), KL_EINVAL);
  KT_EQ_STR(err, "indexer without a name");
  KT_EQ_INT(kl_store_add_indexers(s, &bad[1], 1, err, sizeof err), KL_EINVAL);
  KT_EQ_STR(err, "indexer l: no label key");
  KT_EQ_INT(kl_store_add_indexers(s, &bad[2], 1, err, sizeof err), KL_EINVAL);
  KT_EQ_STR(err, "indexer c: no index function");
  KT_EQ_INT(kl_store_add_indexers(s, &ns_ix, 1, err, sizeof err), 0);
  KT_EQ_STR(by_index(s, "namespace", "b"), "b/p@1");
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-13: Replace rebuilds and emits nothing ---- */

static void test_t13_replace_rebuilds_indices(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  kl_store_indexer_t ix[2] = {
      ns_ix, {"app", KL_STORE_INDEX_LABEL, "app", NULL, NULL, NULL}};
  KT_EQ_INT(kl_store_add_indexers(s, ix, 2, NULL, 0), 0);
  kl_obj_t *a = mk("x", "a", "1", "\"app\":\"one\"", NULL);
  kl_obj_t *b = mk("y", "b", "7", "\"app\":\"two\"", NULL);
  kl_obj_t *b8 = mk("y", "b", "8", "\"app\":\"two\"", NULL);
  KT_EQ_INT(kl_store_add(s, a, NULL, NULL, 0), 0);
  kl_obj_t *list[2] = {b, b8}; /* a key listed twice keeps the last */
  KT_EQ_INT(kl_store_replace(s, list, 2, NULL, 0), 0);
  KT_EQ_STR(list_all(s), "y/b@8");
  KT_EQ_STR(values(s, "namespace"), "y");
  KT_EQ_STR(values(s, "app"), "two");
  KT_EQ_STR(by_index(s, "app", "two"), "y/b@8");
  KT_EQ_STR(by_index(s, "app", "one"), "");
  KT_EQ_INT(kl_store_replace(s, NULL, 0, NULL, 0), 0);
  KT_EQ_INT(kl_store_len(s), 0);
  KT_EQ_STR(values(s, "app"), "");
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_obj_unref(b8);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* Sets go from inline to vector to table and back as members come and
 * go; every step checked against the expected membership. */
static void test_large_sets_grow_and_shrink(void) {
  size_t heap0 = heap_used();
  enum { N = 300 };
  kl_store_t *s = kl_store_new();
  KT_EQ_INT(kl_store_add_indexers(s, &ns_ix, 1, NULL, 0), 0);
  kl_obj_t *o[N];
  bool in[N] = {0};
  uint64_t r = 12345;
  for (int i = 0; i < N; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%03d", i);
    o[i] = mk("big", name, "1", NULL, NULL);
  }
  for (int step = 0; step < 6000; step++) {
    r = r * 6364136223846793005u + 1442695040888963407u;
    int i = (int)((r >> 33) % N);
    bool grow = ((r >> 20) % 100) < (step < 3000 ? 70 : 30);
    if (grow) {
      KT_EQ_INT(kl_store_add(s, o[i], NULL, NULL, 0), 0);
      in[i] = true;
    } else {
      char key[32];
      snprintf(key, sizeof key, "big/p%03d", i);
      KT_EQ_INT(kl_store_delete(s, key, strlen(key), NULL),
                in[i] ? 0 : KL_ENOENT);
      in[i] = false;
    }
    size_t want = 0;
    for (int k = 0; k < N; k++)
      want += in[k];
    KT_EQ_INT(kl_store_index_len(s, "namespace", K("big")), want);
    if (step % 97 == 0 || want < 3) {
      int seen = 0;
      kl_store_by_index(s, "namespace", K("big"), stop_at_two, &seen);
      KT_EQ_INT(seen, want < 2 ? (int)want : 2);
    }
  }
  /* Empty it; the value disappears. */
  for (int i = 0; i < N; i++) {
    char key[32];
    snprintf(key, sizeof key, "big/p%03d", i);
    kl_store_delete(s, key, strlen(key), NULL);
    kl_obj_unref(o[i]);
  }
  KT_EQ_STR(values(s, "namespace"), "");
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* Memory the store spends per entry, beyond the objects: measured with the
 * allocator's own count (meaningless under ASan, which replaces it). */
static void test_memory_per_entry(void) {
  enum { N = 20000 };
  size_t heap0 = heap_used();
  kl_obj_t **o = malloc(N * sizeof *o);
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "web-%05d-abcde", i); /* 15 bytes */
    o[i] = mk("ns-7", name, "1234", "\"app\":\"web\"", NULL);
  }
  kl_store_t *s = kl_store_new();
  size_t before = heap_used();
  for (int i = 0; i < N; i++)
    kl_store_add(s, o[i], NULL, NULL, 0);
  size_t plain = heap_used() - before;
  KT_EQ_INT(kl_store_add_indexers(s, &ns_ix, 1, NULL, 0), 0);
  size_t with_ns = heap_used() - before;
  if (before) {
    printf("# store: %.1f bytes/entry (key \"ns-7/web-00000-abcde\", 20 "
           "bytes), %.1f with the namespace index\n",
           (double)plain / N, (double)with_ns / N);
    /* The entry is 16 bytes (a 32-byte chunk: the key is the object's),
     * plus a 16-byte slot of the items' table, 32,768 of them. */
    KT_EQ_INT(plain / N, 58);
    KT_TRUE((with_ns - plain) / N <= 24);
  }
  kl_store_free(s);
  for (int i = 0; i < N; i++)
    kl_obj_unref(o[i]);
  free(o);
  KT_EQ_INT(heap_used(), heap0);
}

int main(int argc, char **argv) {
  (void)argc;
  without_tcache(argv);
  warm_up();
  KT_RUN(test_keys_add_update_delete_get);
  KT_RUN(test_swap);
  KT_RUN(test_long_keys);
  KT_RUN(test_iteration_stops_and_guards);
  KT_RUN(test_t11_index_maintenance);
  KT_RUN(test_builtin_namespace_and_controller);
  KT_RUN(test_custom_multi_valued);
  KT_RUN(test_impure_index_functions_are_repaired);
  KT_RUN(test_t12_add_indexers_populated_and_conflict);
  KT_RUN(test_t13_replace_rebuilds_indices);
  KT_RUN(test_large_sets_grow_and_shrink);
  KT_RUN(test_memory_per_entry);
  return KT_DONE();
}
