/* test_deltafifo.c — client-go's DeltaFIFO, classic profile (CLIENTGO.md 7,
 * T-01..T-05, T-07..T-10): coalescing per key with a fixed queue position,
 * the Deleted dedup and tombstones, Delete of unknown keys, Replace with
 * Replaced/Sync deltas and tombstones from the queue and from knownObjects,
 * HasSynced and isInInitialList, Resync, the transformer's rules, Pop on an
 * empty or closed queue, requeue, re-entrant producers, the callbacks and
 * the limits. knownObjects is a real store. Each test ends with a heap leak
 * check (see test_store.c for how it is made exact). */
#include <malloc.h>
#include <stdint.h>
#include <unistd.h>

#include "deltafifo.h"
#include "error.h"
#include "json.h"
#include "object.h"
#include "store.h"
#include "test.h"
#include "kt_heap.h"
#include "kt_obj.h"

#define K(s) s, sizeof s - 1

/* "Added a@1,Deleted TS(b@1)" */
static const char *deltas_str(const kl_delta_t *d, size_t n) {
  static char out[4096];
  size_t k = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    char o[128];
    obj_str(o, sizeof o, d[i].obj);
    k += (size_t)snprintf(out + k, sizeof out - k,
                          d[i].tombstone ? "%s%s TS(%s)" : "%s%s %s",
                          i ? "," : "", kl_delta_type_name(d[i].type), o);
  }
  return out;
}

static const char *queued(kl_fifo_t *f, const char *key) {
  const kl_delta_t *d = NULL;
  size_t n = kl_fifo_get(f, key, strlen(key), &d);
  return deltas_str(d, n);
}

static int add_key(void *ctx, const char *key, size_t len) {
  char *b = ctx;
  size_t k = strlen(b);
  snprintf(b + k, 1024 - k, "%s%.*s", k ? "," : "", (int)len, key);
  return 0;
}

static const char *keys(kl_fifo_t *f) {
  static char b[1024];
  b[0] = '\0';
  kl_fifo_list_keys(f, add_key, b);
  return b;
}

/* ---- popping ---- */

typedef struct popper {
  char log[4096];
  int rc;       /* returned by process */
  bool requeue; /* asked for by process */
  void (*also)(struct popper *p, kl_fifo_popped_t *it);
  kl_fifo_t *f;
} popper;

/* Logs "key:[deltas](i)" with (i) for an initial-list pop, then does what
 * the popper says. */
static int record(void *ud, kl_fifo_popped_t *it) {
  popper *p = ud;
  size_t k = strlen(p->log);
  KT_TRUE(it->key[it->len] == '\0');
  snprintf(p->log + k, sizeof p->log - k, "%s%s:[%s]%s", k ? " " : "", it->key,
           deltas_str(it->deltas, it->n), it->initial ? "(i)" : "");
  it->requeue = p->requeue;
  if (p->also) p->also(p, it);
  return p->rc;
}

/* Pops until empty; returns the log. */
static const char *pop_all(kl_fifo_t *f) {
  static popper p;
  memset(&p, 0, sizeof p);
  while (kl_fifo_pop(f, record, &p) == 0) {
  }
  static char out[4096];
  snprintf(out, sizeof out, "%s", p.log);
  return out;
}

static const char *pop_one(kl_fifo_t *f) {
  static popper p;
  memset(&p, 0, sizeof p);
  int rc = kl_fifo_pop(f, record, &p);
  if (rc == KL_EAGAIN) return "EAGAIN";
  if (rc == KL_ESHUTDOWN) return "ESHUTDOWN";
  return p.log;
}

static int nready, nsynced;
static void on_ready(kl_fifo_t *f, void *ud) {
  (void)f;
  (void)ud;
  nready++;
}
static void on_synced(kl_fifo_t *f, void *ud) {
  (void)ud;
  KT_TRUE(kl_fifo_has_synced(f));
  nsynced++;
}

static kl_fifo_t *new_fifo(kl_store_t *known) {
  kl_fifo_opts_t o = {{0}, false, NULL, on_ready, on_synced, NULL};
  if (known) o.known = kl_fifo_known_store(known);
  nready = nsynced = 0;
  return kl_fifo_new(&o);
}

static void store_put(kl_store_t *s, kl_obj_t *o) {
  KT_EQ_INT(kl_store_add(s, o, NULL, NULL, 0), 0);
  kl_obj_unref(o);
}

/* ---- T-01 ---- */

static void test_t01_coalesces_per_key_keeps_position(void) {
  size_t heap0 = heap_used();
  kl_fifo_t *f = new_fifo(NULL);
  kl_obj_t *a1 = P("a", "1"), *b1 = P("b", "1"), *a2 = P("a", "2");
  KT_EQ_INT(kl_fifo_add(f, a1), 0);
  KT_EQ_INT(nready, 1);
  KT_EQ_INT(kl_fifo_add(f, b1), 0);
  KT_EQ_INT(kl_fifo_update(f, a2), 0);
  KT_EQ_INT(nready, 1); /* only empty -> non-empty */
  KT_EQ_INT(kl_fifo_len(f), 2);
  KT_EQ_STR(keys(f), "ns/a,ns/b");
  KT_EQ_STR(pop_one(f), "ns/a:[Added a@1,Updated a@2]");
  KT_EQ_STR(pop_one(f), "ns/b:[Added b@1]");
  KT_EQ_STR(pop_one(f), "EAGAIN");
  /* Nothing else merges: Added, Updated, Updated stays three. */
  kl_fifo_add(f, a1);
  kl_fifo_update(f, a2);
  kl_fifo_update(f, a2);
  KT_EQ_STR(queued(f, "ns/a"), "Added a@1,Updated a@2,Updated a@2");
  KT_EQ_INT(nready, 2);
  kl_obj_unref(a1);
  kl_obj_unref(b1);
  kl_obj_unref(a2);
  kl_fifo_free(f);
  kl_fifo_free(NULL);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-02, T-03, T-04 ---- */

static void test_t02_consecutive_deletes_dedup_keep_older(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  store_put(s, P("a", "1"));
  kl_fifo_t *f = new_fifo(s);
  kl_obj_t *d1 = P("a", "2"), *d2 = P("a", "3");
  KT_EQ_INT(kl_fifo_delete(f, d1), 0);
  KT_EQ_INT(kl_fifo_delete(f, d2), 0);
  KT_EQ_STR(queued(f, "ns/a"), "Deleted a@2");
  const kl_delta_t *d;
  KT_EQ_INT(kl_fifo_get(f, K("ns/a"), &d), 1);
  KT_TRUE(d[0].obj == d1 && !d[0].tombstone);
  /* Only the last two are looked at: Deleted, Added, Deleted stays. */
  kl_obj_t *a4 = P("a", "4");
  kl_fifo_add(f, a4);
  kl_fifo_delete(f, d2);
  KT_EQ_STR(queued(f, "ns/a"), "Deleted a@2,Added a@4,Deleted a@3");
  kl_obj_unref(d1);
  kl_obj_unref(d2);
  kl_obj_unref(a4);
  kl_fifo_free(f);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_t03_tombstone_loses_to_real_delete(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  store_put(s, P("a", "1"));
  kl_fifo_t *f = new_fifo(s);
  KT_EQ_INT(kl_fifo_replace(f, NULL, 0), 0); /* a known, not listed */
  KT_EQ_STR(queued(f, "ns/a"), "Deleted TS(a@1)");
  kl_obj_t *fin = P("a", "9");
  KT_EQ_INT(kl_fifo_delete(f, fin), 0);
  KT_EQ_STR(queued(f, "ns/a"), "Deleted a@9");
  /* The other way round, the real delete is kept. */
  KT_EQ_INT(kl_fifo_replace(f, NULL, 0), 0);
  KT_EQ_STR(queued(f, "ns/a"), "Deleted a@9");
  kl_obj_unref(fin);
  kl_fifo_free(f);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

static int failing_get(void *ud, const char *key, size_t len, kl_obj_t **o) {
  (void)ud;
  (void)key;
  (void)len;
  *o = NULL;
  return KL_EIO;
}
static int no_keys(void *ud, kl_fifo_key_fn *fn, void *ctx) {
  (void)ud;
  (void)fn;
  (void)ctx;
  return 0;
}

static void test_t04_delete_of_unknown_key_ignored(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  kl_fifo_t *f = new_fifo(s);
  kl_obj_t *x = P("x", "1");
  KT_EQ_INT(kl_fifo_delete(f, x), 0);
  KT_EQ_INT(kl_fifo_len(f), 0);
  KT_EQ_STR(pop_one(f), "EAGAIN");
  KT_EQ_INT(nready, 0);
  /* Delete counts as the first producer call: synced. */
  KT_TRUE(kl_fifo_has_synced(f));
  KT_EQ_INT(nsynced, 1);
  kl_fifo_free(f);
  /* Without knownObjects: ignored unless the key is queued. */
  f = new_fifo(NULL);
  KT_EQ_INT(kl_fifo_delete(f, x), 0);
  KT_EQ_INT(kl_fifo_len(f), 0);
  kl_fifo_add(f, x);
  KT_EQ_INT(kl_fifo_delete(f, x), 0);
  KT_EQ_STR(queued(f, "ns/x"), "Added x@1,Deleted x@1");
  kl_fifo_free(f);
  /* A lookup that fails is not "unknown": the delete is queued. */
  kl_fifo_opts_t o = {
      {no_keys, failing_get, NULL}, false, NULL, NULL, NULL, NULL};
  f = kl_fifo_new(&o);
  KT_EQ_INT(kl_fifo_delete(f, x), 0);
  KT_EQ_STR(queued(f, "ns/x"), "Deleted x@1");
  kl_fifo_free(f);
  /* An object without a name has no key. */
  f = new_fifo(NULL);
  kl_obj_t *noname = P("", "1");
  KT_EQ_INT(kl_fifo_add(f, noname), KL_EINVAL);
  KT_EQ_INT(kl_fifo_delete(f, noname), KL_EINVAL);
  KT_EQ_INT(kl_fifo_replace(f, &noname, 1), KL_EINVAL);
  KT_TRUE(!kl_fifo_has_synced(f));
  kl_obj_unref(noname);
  kl_fifo_free(f);
  kl_obj_unref(x);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-05 ---- */

static void test_t05_replace_emits_replaced_and_tombstones(void) {
  size_t heap0 = heap_used();
  for (int sync = 0; sync < 2; sync++) {
    kl_store_t *s = kl_store_new();
    store_put(s, P("a", "1"));
    store_put(s, P("b", "1"));
    kl_fifo_opts_t o = {
        kl_fifo_known_store(s), sync != 0, NULL, NULL, NULL, NULL};
    kl_fifo_t *f = kl_fifo_new(&o);
    kl_obj_t *list[2] = {P("a", "2"), P("c", "1")};
    KT_EQ_INT(kl_fifo_replace(f, list, 2), 0);
    KT_EQ_STR(keys(f), "ns/a,ns/c,ns/b");
    KT_EQ_STR(queued(f, "ns/a"), sync ? "Sync a@2" : "Replaced a@2");
    KT_EQ_STR(queued(f, "ns/c"), sync ? "Sync c@1" : "Replaced c@1");
    KT_EQ_STR(queued(f, "ns/b"), "Deleted TS(b@1)");
    /* First Replace: 2 listed + 1 deletion before synced. */
    KT_TRUE(!kl_fifo_has_synced(f));
    KT_EQ_STR(pop_one(f),
              sync ? "ns/a:[Sync a@2](i)" : "ns/a:[Replaced a@2](i)");
    KT_EQ_STR(pop_one(f),
              sync ? "ns/c:[Sync c@1](i)" : "ns/c:[Replaced c@1](i)");
    KT_TRUE(!kl_fifo_has_synced(f));
    KT_EQ_STR(pop_one(f), "ns/b:[Deleted TS(b@1)](i)");
    KT_TRUE(kl_fifo_has_synced(f));
    kl_obj_unref(list[0]);
    kl_obj_unref(list[1]);
    kl_fifo_free(f);
    kl_store_free(s);
  }
  KT_EQ_INT(heap_used(), heap0);
}

/* Queued keys missing from a Replace get a tombstone with their newest
 * object (unwrapped when it is a tombstone itself); known keys with queued
 * deltas get none from knownObjects. */
static void test_replace_tombstones_from_queue(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  store_put(s, P("k", "1"));
  kl_fifo_t *f = new_fifo(s);
  kl_obj_t *q1 = P("q", "1"), *q2 = P("q", "2"), *k5 = P("k", "5");
  kl_fifo_add(f, q1);
  kl_fifo_update(f, q2);
  kl_fifo_update(f, k5);
  KT_EQ_INT(nsynced, 1); /* Add came first: synced */
  KT_EQ_INT(kl_fifo_replace(f, NULL, 0), 0);
  KT_EQ_STR(queued(f, "ns/q"), "Added q@1,Updated q@2,Deleted TS(q@2)");
  KT_EQ_STR(queued(f, "ns/k"), "Updated k@5,Deleted TS(k@5)");
  /* Again: the newer tombstone replaces the older, with the same object. */
  KT_EQ_INT(kl_fifo_replace(f, NULL, 0), 0);
  KT_EQ_STR(queued(f, "ns/q"), "Added q@1,Updated q@2,Deleted TS(q@2)");
  KT_EQ_STR(keys(f), "ns/q,ns/k");
  KT_EQ_STR(pop_all(f), "ns/q:[Added q@1,Updated q@2,Deleted TS(q@2)] "
                        "ns/k:[Updated k@5,Deleted TS(k@5)]");
  /* A known key whose lookup fails gets a tombstone without object. */
  kl_fifo_free(f);
  kl_fifo_opts_t o = {{NULL, NULL, NULL}, false, NULL, NULL, NULL, NULL};
  o.known = kl_fifo_known_store(s);
  o.known.get = failing_get;
  f = kl_fifo_new(&o);
  KT_EQ_INT(kl_fifo_replace(f, NULL, 0), 0);
  KT_EQ_STR(queued(f, "ns/k"), "Deleted TS(-)");
  KT_EQ_STR(pop_one(f), "ns/k:[Deleted TS(-)](i)");
  KT_TRUE(kl_fifo_has_synced(f));
  kl_fifo_free(f);
  kl_obj_unref(q1);
  kl_obj_unref(q2);
  kl_obj_unref(k5);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-07, T-08 ---- */

static void test_t07_has_synced_after_first_replace(void) {
  size_t heap0 = heap_used();
  kl_fifo_t *f = new_fifo(NULL);
  kl_obj_t *list[3] = {P("x", "1"), P("y", "1"), P("x", "2")};
  KT_EQ_INT(kl_fifo_replace(f, list, 3), 0); /* x twice: 2 distinct keys */
  KT_TRUE(!kl_fifo_has_synced(f));
  KT_EQ_INT(nready, 1);
  KT_EQ_STR(pop_one(f), "ns/x:[Replaced x@1,Replaced x@2](i)");
  KT_TRUE(!kl_fifo_has_synced(f));
  KT_EQ_INT(nsynced, 0);
  /* The last initial item is still initial; synced is true by the time
   * process runs (counted before, as client-go does). */
  KT_EQ_STR(pop_one(f), "ns/y:[Replaced y@1](i)");
  KT_TRUE(kl_fifo_has_synced(f));
  KT_EQ_INT(nsynced, 1);
  kl_fifo_add(f, list[0]);
  KT_EQ_STR(pop_one(f), "ns/x:[Added x@1]");
  /* A later relist does not reopen it. */
  kl_fifo_replace(f, list, 1);
  KT_TRUE(kl_fifo_has_synced(f));
  KT_EQ_STR(pop_one(f), "ns/x:[Replaced x@1]");
  KT_EQ_INT(nsynced, 1);
  for (int i = 0; i < 3; i++)
    kl_obj_unref(list[i]);
  kl_fifo_free(f);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_t08_empty_first_replace_syncs_at_once(void) {
  size_t heap0 = heap_used();
  kl_fifo_t *f = new_fifo(NULL);
  KT_TRUE(!kl_fifo_has_synced(f));
  KT_EQ_INT(kl_fifo_replace(f, NULL, 0), 0);
  KT_TRUE(kl_fifo_has_synced(f));
  KT_EQ_INT(nsynced, 1);
  KT_EQ_INT(nready, 0);
  kl_fifo_free(f);
  /* Deletions count towards the initial population. */
  kl_store_t *s = kl_store_new();
  store_put(s, P("gone", "1"));
  f = new_fifo(s);
  KT_EQ_INT(kl_fifo_replace(f, NULL, 0), 0);
  KT_TRUE(!kl_fifo_has_synced(f));
  KT_EQ_STR(pop_one(f), "ns/gone:[Deleted TS(gone@1)](i)");
  KT_TRUE(kl_fifo_has_synced(f));
  kl_fifo_free(f);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-09 ---- */

static int ntransform;
static kl_obj_t *swap_to; /* when set, the transform returns it instead */
static int transform(void *ud, kl_obj_t *in, kl_obj_t **out) {
  (void)ud;
  ntransform++;
  kl_json_span_t n = kl_obj_name(in);
  if (n.n == 4 && memcmp(n.p, "fail", 4) == 0) return KL_EPARSE;
  *out = kl_obj_ref(swap_to ? swap_to : in);
  return 0;
}

static void test_t09_resync_skips_pending_keys(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  kl_obj_t *a = P("a", "1"), *b = P("b", "1"), *a2 = P("a", "2");
  kl_store_add(s, a, NULL, NULL, 0);
  kl_store_add(s, b, NULL, NULL, 0);
  kl_fifo_opts_t o = {
      kl_fifo_known_store(s), false, transform, NULL, NULL, NULL};
  kl_fifo_t *f = kl_fifo_new(&o);
  ntransform = 0;
  KT_EQ_INT(kl_fifo_update(f, a2), 0);
  KT_EQ_INT(ntransform, 1);
  KT_EQ_INT(kl_fifo_resync(f), 0);
  KT_EQ_INT(ntransform, 1); /* Sync deltas are not transformed */
  KT_EQ_STR(queued(f, "ns/a"), "Updated a@2");
  KT_EQ_STR(queued(f, "ns/b"), "Sync b@1");
  const kl_delta_t *d;
  kl_fifo_get(f, K("ns/b"), &d);
  KT_TRUE(d[0].obj == b); /* the known object itself */
  /* Again: b has a pending delta now, nothing changes. */
  KT_EQ_INT(kl_fifo_resync(f), 0);
  KT_EQ_STR(queued(f, "ns/b"), "Sync b@1");
  kl_fifo_free(f);
  /* Without knownObjects, Resync does nothing. */
  f = new_fifo(NULL);
  KT_EQ_INT(kl_fifo_resync(f), 0);
  KT_EQ_INT(kl_fifo_len(f), 0);
  kl_fifo_free(f);
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_obj_unref(a2);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-10 ---- */

static void test_t10_transformer_rules(void) {
  size_t heap0 = heap_used();
  kl_store_t *s = kl_store_new();
  kl_obj_t *k1 = P("known", "1");
  kl_store_add(s, k1, NULL, NULL, 0);
  kl_fifo_opts_t o = {
      kl_fifo_known_store(s), false, transform, NULL, NULL, NULL};
  kl_fifo_t *f = kl_fifo_new(&o);
  kl_obj_t *a = P("a", "1"), *b = P("b", "1"), *c = P("c", "1");
  ntransform = 0;
  kl_fifo_add(f, a);
  kl_fifo_update(f, a);
  kl_fifo_delete(f, a);
  KT_EQ_INT(ntransform, 3);
  kl_obj_t *list[2] = {b, c};
  /* Replace: once per item; not for the tombstones of a (queued) and of
   * known (from knownObjects). */
  KT_EQ_INT(kl_fifo_replace(f, list, 2), 0);
  KT_EQ_INT(ntransform, 5);
  KT_EQ_STR(queued(f, "ns/a"), "Added a@1,Updated a@1,Deleted a@1");
  KT_EQ_STR(queued(f, "ns/known"), "Deleted TS(known@1)");
  /* Resync: Sync deltas are never transformed. */
  pop_all(f);
  KT_EQ_INT(kl_fifo_resync(f), 0);
  KT_EQ_INT(ntransform, 5);
  KT_EQ_STR(queued(f, "ns/known"), "Sync known@1");
  /* Replace with replace_as_sync is still transformed (internal action
   * Replaced). */
  kl_fifo_free(f);
  o.replace_as_sync = true;
  f = kl_fifo_new(&o);
  KT_EQ_INT(kl_fifo_replace(f, list, 1), 0);
  KT_EQ_INT(ntransform, 6);
  KT_EQ_STR(queued(f, "ns/b"), "Sync b@1");
  /* The transformed object is what is queued, under the original key. */
  swap_to = c;
  kl_fifo_update(f, b);
  swap_to = NULL;
  KT_EQ_STR(queued(f, "ns/b"), "Sync b@1,Updated c@1");
  /* A transform error aborts the enqueue (and a Replace there). */
  kl_obj_t *bad = P("fail", "1");
  KT_EQ_INT(kl_fifo_add(f, bad), KL_EPARSE);
  KT_EQ_INT(kl_fifo_get(f, K("ns/fail"), NULL), 0);
  kl_obj_t *list2[2] = {bad, a};
  KT_EQ_INT(kl_fifo_replace(f, list2, 2), KL_EPARSE);
  KT_EQ_INT(kl_fifo_get(f, K("ns/a"), NULL), 0);
  kl_obj_unref(bad);
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_obj_unref(c);
  kl_obj_unref(k1);
  kl_fifo_free(f);
  kl_store_free(s);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- Pop: close, errors, requeue, re-entrancy ---- */

static void test_pop_close_and_errors(void) {
  size_t heap0 = heap_used();
  kl_fifo_t *f = new_fifo(NULL);
  kl_obj_t *a = P("a", "1"), *b = P("b", "1");
  kl_fifo_add(f, a);
  kl_fifo_add(f, b);
  kl_fifo_close(f);
  KT_TRUE(kl_fifo_closed(f));
  /* Queued keys are still handed out, then ESHUTDOWN. */
  popper p = {0};
  p.rc = KL_EIO;
  KT_EQ_INT(kl_fifo_pop(f, record, &p), KL_EIO); /* process's error */
  KT_EQ_STR(p.log, "ns/a:[Added a@1]");
  KT_EQ_STR(pop_one(f), "ns/b:[Added b@1]");
  KT_EQ_STR(pop_one(f), "ESHUTDOWN");
  /* Producers still work after Close. */
  KT_EQ_INT(kl_fifo_add(f, a), 0);
  KT_EQ_STR(pop_one(f), "ns/a:[Added a@1]");
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_fifo_free(f);
  KT_EQ_INT(heap_used(), heap0);
}

static kl_obj_t *during;
static void add_during(popper *p, kl_fifo_popped_t *it) {
  (void)it;
  kl_fifo_update(p->f, during);
}

static void test_requeue(void) {
  size_t heap0 = heap_used();
  kl_fifo_t *f = new_fifo(NULL);
  kl_obj_t *a = P("a", "1"), *b = P("b", "1"), *a2 = P("a", "2");
  kl_fifo_add(f, a);
  kl_fifo_add(f, b);
  popper p = {0};
  p.requeue = true;
  KT_EQ_INT(kl_fifo_pop(f, record, &p), 0);
  /* a goes to the back with the same deltas. */
  KT_EQ_STR(keys(f), "ns/b,ns/a");
  KT_EQ_STR(queued(f, "ns/a"), "Added a@1");
  KT_EQ_STR(pop_all(f), "ns/b:[Added b@1] ns/a:[Added a@1]");
  /* Deltas that arrived during processing win over the requeue. */
  kl_fifo_add(f, a);
  memset(&p, 0, sizeof p);
  p.requeue = true;
  p.f = f;
  p.also = add_during;
  during = a2;
  nready = 0;
  KT_EQ_INT(kl_fifo_pop(f, record, &p), 0);
  KT_EQ_STR(queued(f, "ns/a"), "Updated a@2");
  KT_EQ_INT(nready, 1);
  KT_EQ_STR(pop_all(f), "ns/a:[Updated a@2]");
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_obj_unref(a2);
  kl_fifo_free(f);
  KT_EQ_INT(heap_used(), heap0);
}

static void nested_pop(popper *p, kl_fifo_popped_t *it) {
  (void)it;
  static popper inner;
  memset(&inner, 0, sizeof inner);
  KT_EQ_INT(kl_fifo_pop(p->f, record, &inner), 0);
  KT_EQ_STR(inner.log, "ns/b:[Added b@1]");
}

static void test_reentrant_pop_and_producers(void) {
  size_t heap0 = heap_used();
  kl_fifo_t *f = new_fifo(NULL);
  kl_obj_t *a = P("a", "1"), *b = P("b", "1");
  kl_fifo_add(f, a);
  kl_fifo_add(f, b);
  popper p = {0};
  p.f = f;
  p.also = nested_pop;
  KT_EQ_INT(kl_fifo_pop(f, record, &p), 0);
  KT_EQ_STR(p.log, "ns/a:[Added a@1]");
  KT_EQ_INT(kl_fifo_len(f), 0);
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_fifo_free(f);
  KT_EQ_INT(heap_used(), heap0);
}

/* Many keys through the ring (it grows and shrinks), in order. */
static void test_many_keys_in_order(void) {
  size_t heap0 = heap_used();
  enum { N = 5000 };
  kl_fifo_t *f = new_fifo(NULL);
  kl_obj_t **o = malloc(N * sizeof *o);
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++) {
      char name[16];
      snprintf(name, sizeof name, "k%05d", i);
      o[i] = P(name, "1");
    }
    KT_EQ_INT(kl_fifo_replace(f, o, N), 0);
    for (int i = 0; i < N; i++) {
      char want[64];
      snprintf(want, sizeof want, "ns/k%05d:[Replaced k%05d@1]%s", i, i,
               round == 0 ? "(i)" : "");
      KT_EQ_STR(pop_one(f), want);
      /* Interleave adds to keys already popped: they go to the back. */
      if (i % 1000 == 0) kl_fifo_update(f, o[i]);
    }
    for (int i = 0; i < N; i += 1000) {
      char want[64];
      snprintf(want, sizeof want, "ns/k%05d:[Updated k%05d@1]", i, i);
      KT_EQ_STR(pop_one(f), want);
    }
    KT_EQ_STR(pop_one(f), "EAGAIN");
    for (int i = 0; i < N; i++)
      kl_obj_unref(o[i]);
  }
  free(o);
  kl_fifo_free(f);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_limit_per_key(void) {
  size_t heap0 = heap_used();
  kl_fifo_t *f = new_fifo(NULL);
  kl_obj_t *a = P("a", "1");
  int rc = 0;
  size_t i;
  for (i = 0; i < KL_FIFO_MAX_DELTAS + 1 && rc == 0; i++)
    rc = kl_fifo_update(f, a);
  KT_EQ_INT(rc, KL_ELIMIT);
  KT_EQ_INT(i, KL_FIFO_MAX_DELTAS + 1);
  KT_EQ_INT(kl_fifo_get(f, K("ns/a"), NULL), KL_FIFO_MAX_DELTAS);
  kl_obj_unref(a);
  kl_fifo_free(f);
  KT_EQ_INT(heap_used(), heap0);
}

int main(int argc, char **argv) {
  (void)argc;
  without_tcache(argv);
  warm_up();
  KT_RUN(test_t01_coalesces_per_key_keeps_position);
  KT_RUN(test_t02_consecutive_deletes_dedup_keep_older);
  KT_RUN(test_t03_tombstone_loses_to_real_delete);
  KT_RUN(test_t04_delete_of_unknown_key_ignored);
  KT_RUN(test_t05_replace_emits_replaced_and_tombstones);
  KT_RUN(test_replace_tombstones_from_queue);
  KT_RUN(test_t07_has_synced_after_first_replace);
  KT_RUN(test_t08_empty_first_replace_syncs_at_once);
  KT_RUN(test_t09_resync_skips_pending_keys);
  KT_RUN(test_t10_transformer_rules);
  KT_RUN(test_pop_close_and_errors);
  KT_RUN(test_requeue);
  KT_RUN(test_reentrant_pop_and_producers);
  KT_RUN(test_many_keys_in_order);
  KT_RUN(test_limit_per_key);
  return KT_DONE();
}
