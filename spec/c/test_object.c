/* test_object.c — kl_obj_t and watch events: metadata extracted exactly from
 * every object of the real apiserver fixtures (expected.tsv, written by
 * spec/fixtures/json/gen_expected.py from the same files), managedFields
 * removed with the rest byte-identical to a compact reference, escapes,
 * apiVersion/kind for list items, type errors with their offsets, Status of
 * ERROR events, reference counting. */
#include <stdint.h>

#include "error.h"
#include "json.h"
#include "object.h"
#include "test.h"
#include "kt_fixture.h"

/* --- helpers ---------------------------------------------------------------
 */

static kl_json_span_t nth_elem(kl_json_span_t arr, size_t n) {
  const char *p = arr.p + 1, *end = arr.p + arr.n;
  kl_json_span_t s = {"", 0};
  for (size_t k = 0;; k++) {
    p = kl_json_ws(p, end);
    const char *e = kl_json_skip(p, end);
    if (k == n) {
      s.p = p;
      s.n = (size_t)(e - p);
      return s;
    }
    p = kl_json_ws(e, end);
    if (*p != ',') return s;
    p++;
  }
}

static bool span_eq(kl_json_span_t s, const char *c) {
  return s.n == strlen(c) && memcmp(s.p, c, s.n) == 0;
}

#define KT_EQ_SPAN(s, c)                                                       \
  do {                                                                         \
    kl_json_span_t kt_s = (s);                                                 \
    const char *kt_c = (c);                                                    \
    if (!span_eq(kt_s, kt_c))                                                  \
      KT_FAIL_("%s == \"%.80s\": \"%.*s\"", #s, kt_c, (int)kt_s.n, kt_s.p);    \
  } while (0)

static kl_json_value_t value(const char *s, bool compact) {
  kl_json_value_t v = {{s, strlen(s)}, 0, compact, NULL, 0};
  return v;
}

/* s as the watch decoder yields it, with its container index (s must be
 * one valid JSON object); the value lives until *st is freed. */
static kl_json_value_t streamed(const char *s, kl_json_stream_t **st) {
  kl_json_value_t v = value(s, true);
  *st = kl_json_stream_new(NULL);
  kl_json_stream_feed(*st, s, strlen(s));
  if (kl_json_stream_next(*st, &v) != KL_OK)
    KT_FAIL_("stream %.80s: %s", s, kl_json_stream_error(*st));
  return v;
}

/* The value of pass 0 (indented, as in the file), 1 (compact) or 2
 * (compact, from the stream with its index). */
static kl_json_value_t pass_value(int pass, kl_json_span_t target,
                                  const char *compact, kl_json_stream_t **st) {
  *st = NULL;
  if (pass == 2) return streamed(compact, st);
  if (pass == 1) return value(compact, true);
  return (kl_json_value_t){target, 0, false, NULL, 0};
}

/* Parses a literal object (compact as written) and checks success. */
static kl_obj_t *parse_ok(const char *s, const kl_obj_opts_t *opts) {
  kl_json_value_t v;
  kl_obj_t *o = NULL;
  char err[256];
  if (kl_json_check(s, strlen(s), &v, err, sizeof err) != KL_OK) {
    KT_FAIL_("check %s: %s", s, err);
    return NULL;
  }
  if (kl_obj_parse(&v, opts, &o, err, sizeof err) != KL_OK)
    KT_FAIL_("parse %s: %s", s, err);
  return o;
}

/* --- every fixture object ----------------------------------------------------
 */

enum {
  C_SRC,
  C_WHERE,
  C_TYPE,
  C_API,
  C_KIND,
  C_NS,
  C_NAME,
  C_UID,
  C_RV,
  C_GEN,
  C_DEL,
  C_LABELS,
  C_OWNERS,
  C_NOMF,
  C_FULL,
  NCOL
};

static void check_obj(const kl_obj_t *o, char **col, const char *what) {
  char buf[512];
  size_t k;
  KT_EQ_SPAN(kl_obj_api_version(o), col[C_API]);
  KT_EQ_SPAN(kl_obj_kind(o), col[C_KIND]);
  KT_EQ_SPAN(kl_obj_namespace(o), col[C_NS]);
  KT_EQ_SPAN(kl_obj_name(o), col[C_NAME]);
  KT_EQ_SPAN(kl_obj_uid(o), col[C_UID]);
  KT_EQ_SPAN(kl_obj_resource_version(o), col[C_RV]);
  KT_EQ_INT(kl_obj_generation(o), strtoll(col[C_GEN], NULL, 10));
  kl_json_span_t ts;
  bool del = kl_obj_deletion_timestamp(o, &ts);
  KT_EQ_INT(del, strcmp(col[C_DEL], "-") != 0);
  if (del) KT_EQ_SPAN(ts, col[C_DEL]);
  /* labels as "k=v;k=v" */
  buf[0] = '\0';
  k = 0;
  for (size_t i = 0; i < kl_obj_label_count(o); i++) {
    kl_json_span_t lk, lv;
    kl_obj_label(o, i, &lk, &lv);
    k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%.*s=%.*s", i ? ";" : "",
                          (int)lk.n, lk.p, (int)lv.n, lv.p);
    kl_json_span_t got;
    KT_TRUE(kl_obj_label_get(o, lk.p, lk.n, &got) && got.p == lv.p);
  }
  KT_EQ_STR(buf, col[C_LABELS]);
  buf[0] = '\0';
  k = 0;
  for (size_t i = 0; i < kl_obj_owner_count(o); i++) {
    kl_obj_owner_t w;
    kl_obj_owner(o, i, &w);
    k += (size_t)snprintf(buf + k, sizeof buf - k,
                          "%s%.*s|%.*s|%.*s|%.*s|%d|%d", i ? ";" : "",
                          (int)w.api_version.n, w.api_version.p, (int)w.kind.n,
                          w.kind.p, (int)w.name.n, w.name.p, (int)w.uid.n,
                          w.uid.p, w.controller, w.block_owner_deletion);
  }
  KT_EQ_STR(buf, col[C_OWNERS]);
  kl_json_span_t json = kl_obj_json(o);
  if (!span_eq(json, col[C_NOMF]))
    KT_FAIL_("%s: json differs:\n got  %.*s\n want %s", what, (int)json.n,
             json.p, col[C_NOMF]);
  KT_TRUE(json.p[json.n] == '\0');
  KT_TRUE(kl_obj_size(o) <
          200 + json.n + 64 * (kl_obj_label_count(o) + kl_obj_owner_count(o)));
}

static void test_fixture_objects_match_expected(void) {
  size_t n, checked = 0, events = 0;
  char *tsv = slurp("expected.tsv", &n), *save = NULL;
  for (char *line = strtok_r(tsv, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    char *col[NCOL];
    int k = 0;
    for (char *p = line; k < NCOL; k++) {
      col[k] = p;
      p = strchr(p, '\t');
      if (!p) break;
      *p++ = '\0';
    }
    if (k < NCOL - 1) continue; /* a list line */
    char rel[256], what[300];
    snprintf(rel, sizeof rel, "apiserver/%s", col[C_SRC]);
    snprintf(what, sizeof what, "%s %s", col[C_SRC], col[C_WHERE]);
    size_t fn;
    char *text = slurp(rel, &fn);
    kl_json_value_t root;
    kl_json_span_t resp, body, target;
    KT_EQ_INT(kl_json_check(text, fn, &root, NULL, 0), KL_OK);
    KT_TRUE(kl_json_member(root.json, "response", &resp));
    size_t idx = 0;
    bool is_event = strncmp(col[C_WHERE], "event ", 6) == 0;
    if (is_event) {
      KT_TRUE(kl_json_member(resp, "body_lines", &body));
      idx = (size_t)atoi(col[C_WHERE] + 6);
      target = nth_elem(body, idx);
    } else {
      KT_TRUE(kl_json_member(resp, "body", &body));
      target = body;
      if (strncmp(col[C_WHERE], "item ", 5) == 0) {
        kl_json_span_t items;
        KT_TRUE(kl_json_member(body, "items", &items));
        target = nth_elem(items, (size_t)atoi(col[C_WHERE] + 5));
      }
    }
    char *compact = malloc(target.n + 1);
    size_t cn = compact_ref(target.p, target.n, compact);
    compact[cn] = '\0';
    char err[256];
    kl_obj_opts_t keep = {true, NULL, NULL, false};
    if (is_event) {
      /* As indented in the file, and as the apiserver sends it (compact),
       * also through the stream with its container index. */
      for (int pass = 0; pass < 3; pass++) {
        kl_obj_event_t ev;
        kl_json_stream_t *st;
        kl_json_value_t v = pass_value(pass, target, compact, &st);
        int rc = kl_obj_event_parse(&v, NULL, &ev, err, sizeof err);
        if (rc != KL_OK) {
          KT_FAIL_("%s: %s", what, err);
          kl_json_stream_free(st);
          continue;
        }
        KT_EQ_STR(kl_obj_event_type_name(ev.type), col[C_TYPE]);
        check_obj(ev.obj, col, what);
        kl_obj_event_clear(&ev);
        KT_EQ_INT(kl_obj_event_parse(&v, &keep, &ev, err, sizeof err), KL_OK);
        KT_TRUE(span_eq(kl_obj_json(ev.obj), col[C_FULL]));
        kl_obj_event_clear(&ev);
        kl_json_stream_free(st);
      }
      events++;
    } else {
      for (int pass = 0; pass < 3; pass++) {
        kl_json_stream_t *st;
        kl_json_value_t v = pass_value(pass, target, compact, &st);
        kl_obj_t *o = NULL;
        if (kl_obj_parse(&v, NULL, &o, err, sizeof err) != KL_OK) {
          KT_FAIL_("%s: %s", what, err);
          kl_json_stream_free(st);
          continue;
        }
        check_obj(o, col, what);
        kl_obj_unref(o);
        KT_EQ_INT(kl_obj_parse(&v, &keep, &o, err, sizeof err), KL_OK);
        if (!span_eq(kl_obj_json(o), col[C_FULL]))
          KT_FAIL_("%s: kept managedFields differ", what);
        kl_obj_unref(o);
        kl_json_stream_free(st);
      }
    }
    checked++;
    free(compact);
    free(text);
  }
  free(tsv);
  KT_EQ_INT(checked, 134);
  KT_EQ_INT(events, 29);
}

/* List items carry no apiVersion/kind; the decoder puts the list's in. */
static void test_list_items_get_api_version_and_kind(void) {
  size_t n;
  char *text = slurp("apiserver/18-cm-list.json", &n);
  kl_json_value_t root, v;
  kl_json_span_t resp, body;
  KT_EQ_INT(kl_json_check(text, n, &root, NULL, 0), KL_OK);
  KT_TRUE(kl_json_member(root.json, "response", &resp));
  KT_TRUE(kl_json_member(resp, "body", &body));
  kl_json_opts_t jo = {KL_JSON_LIST, 0, 0};
  kl_json_stream_t *s = kl_json_stream_new(&jo);
  kl_json_stream_feed(s, body.p, body.n);
  kl_obj_opts_t oo = {false, "v1", "ConfigMap", false};
  const char *names[] = {"cm1", "cm2", "cm3", "cm4"};
  size_t i = 0;
  char err[256];
  while (kl_json_stream_next(s, &v) == KL_OK) {
    kl_obj_t *o = NULL;
    KT_EQ_INT(kl_obj_parse(&v, &oo, &o, err, sizeof err), KL_OK);
    KT_EQ_SPAN(kl_obj_api_version(o), "v1");
    KT_EQ_SPAN(kl_obj_kind(o), "ConfigMap");
    KT_EQ_SPAN(kl_obj_name(o), names[i]);
    kl_json_span_t j = kl_obj_json(o);
    KT_TRUE(j.n > 40 && memcmp(j.p,
                               "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
                               "\"metadata\":{\"name\":",
                               54) == 0);
    char key[64];
    KT_EQ_INT(kl_obj_key(o, key, sizeof key), 8);
    KT_EQ_STR(key, i == 0   ? "demo/cm1"
                   : i == 1 ? "demo/cm2"
                   : i == 2 ? "demo/cm3"
                            : "demo/cm4");
    kl_obj_unref(o);
    i++;
  }
  KT_EQ_INT(i, 4);
  KT_EQ_INT(kl_json_stream_end(s), KL_OK);
  KT_EQ_SPAN(kl_json_stream_list(s)->resource_version, "209");
  kl_json_stream_free(s);
  free(text);

  /* Present members are left alone; only the missing one is added. */
  kl_obj_t *o = parse_ok("{\"kind\":\"Pod\",\"x\":1}", &oo);
  KT_EQ_SPAN(kl_obj_json(o),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"x\":1}");
  KT_EQ_SPAN(kl_obj_kind(o), "Pod");
  KT_EQ_SPAN(kl_obj_api_version(o), "v1");
  kl_obj_unref(o);
  o = parse_ok("{}", &oo);
  KT_EQ_SPAN(kl_obj_json(o), "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\"}");
  kl_obj_unref(o);
  o = parse_ok("{\"apiVersion\":null}", &oo);
  KT_EQ_SPAN(kl_obj_json(o), "{\"kind\":\"ConfigMap\",\"apiVersion\":null}");
  KT_EQ_SPAN(kl_obj_api_version(o), "");
  kl_obj_unref(o);
  kl_obj_opts_t bad = {false, "v\"1", NULL, false};
  kl_json_value_t bv = value("{}", true);
  KT_EQ_INT(kl_obj_parse(&bv, &bad, &o, err, sizeof err), KL_EINVAL);
  KT_EQ_STR(err, "byte 0: apiVersion or kind option is not plain");
}

/* The benchmark Pod's labels and controller. */
static void check_pod_refs(const kl_obj_t *o) {
  kl_json_span_t val;
  KT_TRUE(kl_obj_label_get(o, "tier", 4, &val));
  KT_EQ_SPAN(val, "frontend");
  KT_TRUE(!kl_obj_label_get(o, "tie", 3, &val));
  KT_EQ_INT(kl_obj_label_count(o), 3);
  kl_obj_owner_t w;
  KT_TRUE(kl_obj_controller(o, &w));
  KT_EQ_SPAN(w.kind, "ReplicaSet");
  KT_EQ_SPAN(w.name, "web-7d9f8c6b5");
  KT_EQ_SPAN(w.uid, "aaaa-bbbb");
  KT_EQ_SPAN(w.api_version, "apps/v1");
  KT_TRUE(w.block_owner_deletion);
}

/* The benchmark Pod: every extracted field, and the memory it takes. */
static void test_pod(void) {
  size_t n;
  char *text = slurp("pod-2.4k.json", &n);
  kl_json_value_t v;
  kl_obj_t *o = NULL;
  char err[256];
  KT_EQ_INT(kl_json_check(text, n, &v, err, sizeof err), KL_OK);
  KT_EQ_INT(kl_obj_parse(&v, NULL, &o, err, sizeof err), KL_OK);
  KT_EQ_SPAN(kl_obj_api_version(o), "v1");
  KT_EQ_SPAN(kl_obj_kind(o), "Pod");
  KT_EQ_SPAN(kl_obj_namespace(o), "ns-7");
  KT_EQ_SPAN(kl_obj_name(o), "web-7");
  KT_EQ_SPAN(kl_obj_uid(o), "00000007-1234-5678-9abc-def012345678");
  KT_EQ_SPAN(kl_obj_resource_version(o), "1234");
  KT_EQ_INT(kl_obj_generation(o), 1);
  KT_TRUE(!kl_obj_deletion_timestamp(o, NULL));
  check_pod_refs(o);
  char key[8];
  KT_EQ_INT(kl_obj_key(o, key, sizeof key), 10); /* "ns-7/web-7", truncated */
  KT_EQ_STR(key, "ns-7/we");
  KT_EQ_INT(kl_obj_key(o, NULL, 0), 10);
  /* 2371 bytes as compact JSON with managedFields; the object is smaller. */
  char *c = malloc(n);
  size_t cn = compact_ref(text, n, c);
  KT_EQ_INT(cn, 2371);
  KT_EQ_INT(kl_obj_json(o).n, 2042);
  /* header 96 + JSON 2042 + NUL + the key "ns-7/web-7" and its NUL 11 +
   * padding 2 + 3 labels 48 + 1 owner 36 */
  KT_EQ_INT(kl_obj_size(o), 2236);
  kl_json_span_t ks = kl_obj_key_span(o);
  KT_EQ_SPAN(ks, "ns-7/web-7");
  KT_EQ_INT(ks.p[ks.n], '\0');
  KT_TRUE(kl_obj_namespace(o).p == ks.p);
  KT_TRUE(kl_obj_name(o).p == ks.p + 5);
  /* kl_obj_keybuf hands out that key, not a copy. */
  kl_obj_keybuf_t kb;
  KT_EQ_INT(kl_obj_keybuf(o, &kb), KL_OK);
  KT_TRUE(kb.p == ks.p);
  KT_EQ_INT(kb.len, ks.n);
  kl_obj_keybuf_free(&kb);
  KT_TRUE(strstr(kl_obj_json(o).p, "managedFields") == NULL);
  /* Reference counting. */
  KT_TRUE(kl_obj_ref(o) == o);
  kl_obj_unref(o);
  KT_EQ_SPAN(kl_obj_name(o), "web-7");
  kl_obj_unref(o);
  kl_obj_unref(NULL);
  free(c);
  free(text);
}

/* The same Pod parsed with lazy_refs: no tables of labels and owners (48 +
 * 36 bytes fewer), read from the JSON as the eager object reads them. */
static void test_lazy_refs(void) {
  size_t n;
  char *text = slurp("pod-2.4k.json", &n);
  kl_json_value_t v;
  kl_obj_t *e = NULL, *l = NULL;
  kl_obj_opts_t lazy = {false, NULL, NULL, true};
  char err[256];
  KT_EQ_INT(kl_json_check(text, n, &v, err, sizeof err), KL_OK);
  KT_EQ_INT(kl_obj_parse(&v, NULL, &e, err, sizeof err), KL_OK);
  KT_EQ_INT(kl_obj_parse(&v, &lazy, &l, err, sizeof err), KL_OK);
  KT_EQ_INT(kl_obj_size(l), kl_obj_size(e) - 48 - 36);
  KT_EQ_SPAN(kl_obj_json(l), kl_obj_json(e).p);
  check_pod_refs(l);
  for (size_t i = 0; i < 3; i++) {
    kl_json_span_t k1, v1, k2, v2;
    kl_obj_label(e, i, &k1, &v1);
    kl_obj_label(l, i, &k2, &v2);
    KT_EQ_INT(k2.n, k1.n);
    KT_TRUE(memcmp(k2.p, k1.p, k1.n) == 0);
    KT_EQ_INT(v2.n, v1.n);
    KT_TRUE(memcmp(v2.p, v1.p, v1.n) == 0);
    /* In the object's own JSON, valid while it is. */
    KT_TRUE(k2.p > kl_obj_json(l).p && v2.p < kl_obj_json(l).p + n);
  }
  kl_json_span_t val;
  kl_obj_owner_t w;
  KT_EQ_INT(kl_obj_owner_count(l), 1);
  kl_obj_owner(l, 0, &w);
  KT_EQ_SPAN(w.uid, "aaaa-bbbb");
  kl_obj_unref(e);
  kl_obj_unref(l);
  free(text);
  /* Escapes: those tables are made all the same (the other one's is not). */
  kl_obj_t *o = parse_ok("{\"metadata\":{\"name\":\"a\",\"labels\":{\"k\\/x\":"
                         "\"v\"},\"ownerReferences\":[{\"uid\":\"u\","
                         "\"controller\":true}]}}",
                         &lazy);
  kl_obj_t *o2 = parse_ok("{\"metadata\":{\"name\":\"a\",\"labels\":{\"k\\/x\":"
                          "\"v\"},\"ownerReferences\":[{\"uid\":\"u\","
                          "\"controller\":true}]}}",
                          NULL);
  if (o && o2) {
    KT_EQ_INT(kl_obj_size(o), kl_obj_size(o2) - 36);
    KT_TRUE(kl_obj_label_get(o, "k/x", 3, &val));
    KT_EQ_SPAN(val, "v");
    KT_TRUE(kl_obj_controller(o, &w));
    KT_EQ_SPAN(w.uid, "u");
  }
  kl_obj_unref(o);
  kl_obj_unref(o2);
  /* A malformed label, refused by the eager walk, reads as none. */
  o = parse_ok("{\"metadata\":{\"name\":\"a\",\"labels\":{\"k\":1},"
               "\"ownerReferences\":[{\"uid\":2}]}}",
               &lazy);
  if (o) {
    KT_EQ_INT(kl_obj_label_count(o), 0);
    KT_TRUE(!kl_obj_label_get(o, "k", 1, &val));
    KT_EQ_INT(kl_obj_owner_count(o), 0);
    KT_TRUE(!kl_obj_controller(o, &w));
  }
  kl_obj_unref(o);
}

/* --- edge cases --------------------------------------------------------------
 */

static void test_escaped_strings_are_decoded(void) {
  const char *s =
      "{\"apiVersion\":\"v\\u0031\",\"k\\u0069nd\":\"Caf\\u00e9\","
      "\"metadata\":{\"name\":\"a\\/b\",\"namespace\":\"n\\ud83d\\ude00\","
      "\"labels\":{\"k\\/x\":\"v\\\"q\",\"plain\":\"p\"},"
      "\"ownerReferences\":[{\"uid\":\"u\\u0031\",\"controller\":true}],"
      "\"deletionTimestamp\":\"2026\\u002d01\"}}";
  kl_obj_t *o = parse_ok(s, NULL);
  if (!o) return;
  KT_EQ_SPAN(kl_obj_api_version(o), "v1");
  KT_EQ_SPAN(kl_obj_kind(o), "Caf\xc3\xa9");
  KT_EQ_SPAN(kl_obj_name(o), "a/b");
  KT_EQ_SPAN(kl_obj_namespace(o), "n\xf0\x9f\x98\x80");
  kl_json_span_t k, v, ts;
  kl_obj_label(o, 0, &k, &v);
  KT_EQ_SPAN(k, "k/x");
  KT_EQ_SPAN(v, "v\"q");
  kl_obj_label(o, 1, &k, &v);
  KT_EQ_SPAN(k, "plain");
  KT_TRUE(kl_obj_label_get(o, "k/x", 3, &v));
  kl_obj_owner_t w;
  KT_TRUE(kl_obj_controller(o, &w));
  KT_EQ_SPAN(w.uid, "u1");
  KT_EQ_SPAN(w.name, "");
  KT_TRUE(!w.block_owner_deletion);
  KT_TRUE(kl_obj_deletion_timestamp(o, &ts));
  KT_EQ_SPAN(ts, "2026-01");
  char key[32];
  kl_obj_key(o, key, sizeof key);
  KT_EQ_STR(key, "n\xf0\x9f\x98\x80/a/b");
  kl_json_span_t ks = kl_obj_key_span(o);
  KT_EQ_SPAN(ks, "n\xf0\x9f\x98\x80/a/b");
  KT_EQ_INT(ks.p[ks.n], '\0');
  /* The JSON keeps the escapes as they were written. */
  KT_EQ_SPAN(kl_obj_json(o), s);
  kl_obj_unref(o);
}

/* Metadata and owner keys are told apart by length, then compared: keys
 * written with escapes, and keys of a known length that are not the name,
 * read as the JSON means them. */
static void test_metadata_keys_escaped_or_near(void) {
  kl_obj_t *o = parse_ok(
      "{\"metadata\":{\"nbme\":\"x\",\"n\\u0061me\":\"a\","
      "\"namespacf\":\"y\",\"namespac\\u0065\":\"ns\","
      "\"resourceVersioo\":\"9\",\"resourceVersi\\u006fn\":\"7\","
      "\"ownerReferencez\":[1],\"\\u006fwnerReferences\":[{\"kinc\":\"Q\","
      "\"kin\\u0064\":\"RS\",\"controllex\":true,\"uie\":\"z\","
      "\"\\u0075id\":\"u1\",\"blockOwnerDeletiom\":true}],"
      "\"deletionTimestamq\":\"t\"}}",
      NULL);
  if (!o) return;
  KT_EQ_SPAN(kl_obj_name(o), "a");
  KT_EQ_SPAN(kl_obj_namespace(o), "ns");
  KT_EQ_SPAN(kl_obj_resource_version(o), "7");
  KT_TRUE(!kl_obj_deletion_timestamp(o, NULL));
  KT_EQ_INT(kl_obj_owner_count(o), 1);
  kl_obj_owner_t w;
  kl_obj_owner(o, 0, &w);
  KT_EQ_SPAN(w.kind, "RS");
  KT_EQ_SPAN(w.uid, "u1");
  KT_TRUE(!w.controller);
  KT_TRUE(!w.block_owner_deletion);
  kl_obj_unref(o);
}

static void test_managed_fields_anywhere(void) {
  static const char *const cases[][2] = {
      {"{\"metadata\":{\"managedFields\":[{\"a\":\"]\"}]}}",
       "{\"metadata\":{}}"},
      {"{\"metadata\":{\"managedFields\":[],\"name\":\"x\"}}",
       "{\"metadata\":{\"name\":\"x\"}}"},
      {"{\"metadata\":{\"name\":\"x\",\"managedFields\":[{}],\"uid\":\"u\"},"
       "\"z\":1}",
       "{\"metadata\":{\"name\":\"x\",\"uid\":\"u\"},\"z\":1}"},
      {"{\"metadata\":{\"name\":\"x\",\"managedFields\":null}}",
       "{\"metadata\":{\"name\":\"x\"}}"},
      /* Only metadata's own managedFields. */
      {"{\"spec\":{\"managedFields\":1},\"metadata\":{}}",
       "{\"spec\":{\"managedFields\":1},\"metadata\":{}}"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_obj_t *o = parse_ok(cases[i][0], NULL);
    if (!o) continue;
    KT_EQ_SPAN(kl_obj_json(o), cases[i][1]);
    if (i == 2) KT_EQ_SPAN(kl_obj_uid(o), "u");
    kl_obj_unref(o);
  }
  /* Whitespace goes too; strings keep theirs. */
  const char *pretty = "{ \"metadata\" : {\n  \"name\" : \"a b\",\n"
                       "  \"managedFields\" : [ { } ]\n },\n \"d\" : [ 1 , "
                       "\" x \" ] }";
  kl_json_value_t v = value(pretty, false);
  kl_obj_t *o = NULL;
  KT_EQ_INT(kl_obj_parse(&v, NULL, &o, NULL, 0), KL_OK);
  KT_EQ_SPAN(kl_obj_json(o),
             "{\"metadata\":{\"name\":\"a b\"},\"d\":[1,\" x \"]}");
  KT_EQ_SPAN(kl_obj_name(o), "a b");
  kl_obj_unref(o);
}

static void test_type_errors(void) {
  static const struct {
    const char *in;
    const char *msg;
  } cases[] = {
      {"{\"kind\":1}", "byte 8: kind is not a string"},
      {"{\"metadata\":[]}", "byte 12: metadata is not an object"},
      {"{\"metadata\":{\"name\":{}}}",
       "byte 20: metadata.name is not a string"},
      {"{\"metadata\":{\"namespace\":true}}",
       "byte 25: metadata.namespace is not a string"},
      {"{\"metadata\":{\"generation\":1.5}}",
       "byte 26: metadata.generation is not an int64 integer"},
      {"{\"metadata\":{\"generation\":9223372036854775808}}",
       "byte 26: metadata.generation is not an int64 integer"},
      {"{\"metadata\":{\"generation\":\"1\"}}",
       "byte 26: metadata.generation is not an int64 integer"},
      {"{\"metadata\":{\"labels\":[]}}",
       "byte 22: metadata.labels is not an object"},
      {"{\"metadata\":{\"labels\":{\"a\":\"b\",\"app\":1}}}",
       "byte 37: metadata.labels.app is not a string"},
      {"{\"metadata\":{\"labels\":{\"n\":null}}}",
       "byte 27: metadata.labels.n is not a string"},
      {"{\"metadata\":{\"ownerReferences\":{}}}",
       "byte 31: metadata.ownerReferences is not an array"},
      {"{\"metadata\":{\"ownerReferences\":[{},1]}}",
       "byte 35: metadata.ownerReferences[1] is not an object"},
      {"{\"metadata\":{\"ownerReferences\":[{\"uid\":2}]}}",
       "byte 39: metadata.ownerReferences[0].uid is not a string"},
      {"{\"metadata\":{\"ownerReferences\":[{\"controller\":\"yes\"}]}}",
       "byte 46: metadata.ownerReferences[0].controller is not a boolean"},
      {"{\"metadata\":{\"deletionTimestamp\":0}}",
       "byte 33: metadata.deletionTimestamp is not a string"},
  };
  /* The same errors at the same offsets when the walk skips containers by
   * the stream's index. */
  for (size_t i = 0; i < 2 * (sizeof cases / sizeof cases[0]); i++) {
    const char *in = cases[i / 2].in;
    kl_json_stream_t *st = NULL;
    kl_json_value_t v = i % 2 ? streamed(in, &st) : value(in, true);
    kl_obj_t *o = (kl_obj_t *)1;
    char err[256];
    int rc = kl_obj_parse(&v, NULL, &o, err, sizeof err);
    KT_EQ_INT(rc, KL_EPARSE);
    if (rc == KL_EPARSE) KT_EQ_STR(err, cases[i / 2].msg);
    kl_json_stream_free(st);
  }
  /* Offsets are stream offsets: the value's own plus the position in it;
   * for indented input (compacted first) the value's start. */
  kl_json_value_t v = value("{\"metadata\":{\"name\":5}}", true);
  v.offset = 1000;
  char err[256];
  kl_obj_t *o;
  KT_EQ_INT(kl_obj_parse(&v, NULL, &o, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 1020: metadata.name is not a string");
  v = value("{ \"metadata\": { \"name\": 5 } }", false);
  v.offset = 1000;
  KT_EQ_INT(kl_obj_parse(&v, NULL, &o, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 1000: metadata.name is not a string");
  /* null is absent, unknown fields are ignored, non-objects refused. */
  o = parse_ok("{\"metadata\":{\"name\":null,\"generation\":null,\"labels\":"
               "null,\"ownerReferences\":null,\"deletionTimestamp\":null,"
               "\"x\":[1]},\"kind\":null}",
               NULL);
  KT_EQ_SPAN(kl_obj_name(o), "");
  KT_EQ_INT(kl_obj_label_count(o), 0);
  KT_TRUE(!kl_obj_deletion_timestamp(o, NULL));
  kl_obj_unref(o);
  v = value("[1]", true);
  KT_EQ_INT(kl_obj_parse(&v, NULL, &o, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 0: not a JSON object");
  v = value("{\"a\":1} x", true);
  KT_EQ_INT(kl_obj_parse(&v, NULL, &o, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 7: trailing data after the object");
  /* Unvalidated garbage: an error, never a crash. */
  static const char *const junk[] = {"{",
                                     "{\"a\"",
                                     "{\"a\":",
                                     "{\"a\":\"x",
                                     "{\"metadata\":{\"labels\":{\"a\":\"b",
                                     "{\"metadata\":{\"ownerReferences\":[{",
                                     "{\"a\":[1,2"};
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
    v = value(junk[i], true);
    KT_EQ_INT(kl_obj_parse(&v, NULL, &o, err, sizeof err), KL_EPARSE);
  }
}

/* Many labels and owners grow their tables past the inline ones. */
static void test_many_labels_and_owners(void) {
  char *s = malloc(20000);
  size_t n = (size_t)sprintf(s, "{\"metadata\":{\"labels\":{");
  for (int i = 0; i < 100; i++)
    n += (size_t)sprintf(s + n, "%s\"l%d\":\"v%d\"", i ? "," : "", i, i);
  n += (size_t)sprintf(s + n, "},\"ownerReferences\":[");
  for (int i = 0; i < 20; i++)
    n += (size_t)sprintf(s + n, "%s{\"uid\":\"u%d\",\"controller\":%s}",
                         i ? "," : "", i, i == 13 ? "true" : "false");
  sprintf(s + n, "]}}");
  kl_obj_t *o = parse_ok(s, NULL);
  KT_EQ_INT(kl_obj_label_count(o), 100);
  KT_EQ_INT(kl_obj_owner_count(o), 20);
  kl_json_span_t v;
  KT_TRUE(kl_obj_label_get(o, "l99", 3, &v));
  KT_EQ_SPAN(v, "v99");
  kl_obj_owner_t w;
  KT_TRUE(kl_obj_controller(o, &w));
  KT_EQ_SPAN(w.uid, "u13");
  kl_obj_owner(o, 19, &w);
  KT_EQ_SPAN(w.uid, "u19");
  kl_obj_unref(o);
  free(s);
}

/* --- watch events ------------------------------------------------------------
 */

static void test_events(void) {
  char err[256];
  kl_obj_event_t ev;
  /* The 410 of a watch from a compacted resourceVersion. */
  const char *e410 =
      "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":"
      "\"v1\","
      "\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource "
      "version: 1 (277)\",\"reason\":\"Expired\",\"code\":410}}";
  kl_json_value_t v = value(e410, true);
  KT_EQ_INT(kl_obj_event_parse(&v, NULL, &ev, err, sizeof err), KL_OK);
  KT_EQ_INT(ev.type, KL_OBJ_ERROR);
  KT_EQ_INT(ev.status.code, 410);
  KT_EQ_STR(ev.status.reason, "Expired");
  KT_EQ_STR(ev.status.status, "Failure");
  KT_EQ_STR(ev.status.message, "too old resource version: 1 (277)");
  KT_EQ_SPAN(kl_obj_kind(ev.obj), "Status");
  kl_obj_event_clear(&ev);
  KT_TRUE(ev.obj == NULL);

  /* A Status message with escapes is decoded. */
  v = value("{\"object\":{\"message\":\"configmaps \\\"cm1\\\" already "
            "exists\",\"code\":409},\"type\":\"ERROR\"}",
            true);
  KT_EQ_INT(kl_obj_event_parse(&v, NULL, &ev, err, sizeof err), KL_OK);
  KT_EQ_STR(ev.status.message, "configmaps \"cm1\" already exists");
  KT_EQ_STR(ev.status.reason, "");
  KT_EQ_INT(ev.status.code, 409);
  kl_obj_event_clear(&ev);

  /* A NUL in a Status string is kept as \u0000, not the end of it. */
  v = value("{\"type\":\"ERROR\",\"object\":{\"message\":\"a\\u0000b\\u0000\","
            "\"reason\":\"\\u0000X\",\"status\":\"\\u0000\"}}",
            true);
  KT_EQ_INT(kl_obj_event_parse(&v, NULL, &ev, err, sizeof err), KL_OK);
  KT_EQ_STR(ev.status.message, "a\\u0000b\\u0000");
  KT_EQ_STR(ev.status.reason, "\\u0000X");
  KT_EQ_STR(ev.status.status, "\\u0000");
  kl_obj_event_clear(&ev);

  /* Bookmarks: only a resourceVersion. */
  v = value("{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\","
            "\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"260\","
            "\"creationTimestamp\":null}}}",
            true);
  KT_EQ_INT(kl_obj_event_parse(&v, NULL, &ev, err, sizeof err), KL_OK);
  KT_EQ_INT(ev.type, KL_OBJ_BOOKMARK);
  KT_EQ_SPAN(kl_obj_resource_version(ev.obj), "260");
  KT_EQ_SPAN(kl_obj_name(ev.obj), "");
  kl_obj_event_clear(&ev);

  /* Extra members are ignored; the object keeps its own bytes only. */
  v = value("{\"type\":\"DELETED\",\"object\":{\"a\":[1]},\"extra\":{}}", true);
  KT_EQ_INT(kl_obj_event_parse(&v, NULL, &ev, err, sizeof err), KL_OK);
  KT_EQ_INT(ev.type, KL_OBJ_DELETED);
  KT_EQ_SPAN(kl_obj_json(ev.obj), "{\"a\":[1]}");
  kl_obj_event_clear(&ev);

  static const struct {
    const char *in;
    const char *msg;
  } bad[] = {
      {"{\"type\":\"CHANGED\",\"object\":{}}",
       "byte 8: unknown watch event type \"CHANGED\""},
      {"{\"type\":1,\"object\":{}}",
       "byte 8: watch event type is not a string"},
      {"{\"object\":{}}", "byte 0: watch event has no type"},
      {"{\"type\":\"ADDED\"}", "byte 0: watch event has no object"},
      {"{\"type\":\"ADDED\",\"object\":[]}",
       "byte 25: watch event object is not an object"},
      {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"uid\":7}}}",
       "byte 44: metadata.uid is not a string"},
      {"{\"type\":\"ADDED\",\"object\":{},\"object\":{}}",
       "byte 37: watch event has two objects"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = value(bad[i].in, true);
    v.offset = 0;
    int rc = kl_obj_event_parse(&v, NULL, &ev, err, sizeof err);
    KT_EQ_INT(rc, KL_EPARSE);
    if (rc == KL_EPARSE) KT_EQ_STR(err, bad[i].msg);
    KT_TRUE(ev.obj == NULL);
  }
  KT_EQ_STR(kl_obj_event_type_name(KL_OBJ_MODIFIED), "MODIFIED");
  KT_EQ_STR(kl_obj_event_type_name((kl_obj_event_type_t)0), "");
}

/* Input the stream did not validate: an error or an object, never a read
 * outside the bytes (ASan watches this test in the sanitizer build). */
static void test_unvalidated_input_is_safe(void) {
  size_t n;
  char *text = slurp("pod-2.4k.json", &n);
  char *pod = malloc(n), *ev = malloc(n + 64);
  size_t pn = compact_ref(text, n, pod);
  int en = snprintf(ev, n + 64, "{\"type\":\"ADDED\",\"object\":%.*s}", (int)pn,
                    pod);
  static const char bytes[] = "\"\\{}[],:0-1.eEtfnu \x01\x80\xff";
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  /* Half the time with the container index of the intact event, which no
   * longer matches the bytes: it may mislead the walk, never crash it. */
  kl_json_stream_t *st;
  kl_json_value_t intact = streamed(ev, &st);
  KT_TRUE(intact.ncontainers > 20);
  size_t ok = 0, failed = 0;
  for (int i = 0; i < 4000; i++) {
    char *m = malloc((size_t)en);
    memcpy(m, ev, (size_t)en);
    size_t mn = (size_t)en;
    for (int k = 0; k < 1 + i % 3; k++) {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      size_t at = (size_t)(rng % mn);
      if (rng & 0x100000) {
        m[at] = bytes[(rng >> 24) % (sizeof bytes - 1)];
      } else {
        mn = at + 1; /* truncated */
      }
    }
    /* Exactly the bytes: a heap copy of mn bytes. */
    char *exact = malloc(mn);
    memcpy(exact, m, mn);
    kl_json_value_t v = {{exact, mn}, 0, i % 2 == 0, NULL, 0};
    if (i % 4 < 2) {
      v.containers = intact.containers;
      v.ncontainers = intact.ncontainers;
    }
    kl_obj_event_t e;
    char err[256];
    if (kl_obj_event_parse(&v, NULL, &e, err, sizeof err) == KL_OK) {
      ok++;
      kl_obj_event_clear(&e);
    } else {
      failed++;
    }
    kl_json_value_t ov = {{exact + 28, mn > 29 ? mn - 29 : 0},
                          0,
                          i % 2 == 1,
                          v.containers,
                          v.ncontainers};
    kl_obj_t *o = NULL;
    if (kl_obj_parse(&ov, NULL, &o, err, sizeof err) == KL_OK) kl_obj_unref(o);
    free(exact);
    free(m);
  }
  KT_EQ_INT(ok + failed, 4000);
  KT_TRUE(failed > 0);
  kl_json_stream_free(st);
  free(text);
  free(pod);
  free(ev);
}

int main(void) {
  KT_RUN(test_fixture_objects_match_expected);
  KT_RUN(test_list_items_get_api_version_and_kind);
  KT_RUN(test_pod);
  KT_RUN(test_lazy_refs);
  KT_RUN(test_escaped_strings_are_decoded);
  KT_RUN(test_metadata_keys_escaped_or_near);
  KT_RUN(test_managed_fields_anywhere);
  KT_RUN(test_type_errors);
  KT_RUN(test_many_labels_and_owners);
  KT_RUN(test_events);
  KT_RUN(test_unvalidated_input_is_safe);
  return KT_DONE();
}
