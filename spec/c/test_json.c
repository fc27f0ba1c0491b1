/* test_json.c — the incremental JSON stream decoder: every real apiserver
 * body and watch stream (spec/fixtures/json/apiserver, copies of
 * shared/fixtures/apiserver) fed whole, cut at every byte (or at many random
 * places for big bodies) and one byte at a time, giving the same values;
 * list mode; the exact message and offset of every malformed case; limits;
 * the readers of validated JSON. Each feed is a fresh heap copy freed once
 * the decoder has used it, so ASan catches any pointer kept across feeds. */
#include <stdarg.h>
#include <stdint.h>

#include "error.h"
#include "json.h"
#include "test.h"
#include "kt_fixture.h"

/* --- helpers ---------------------------------------------------------------
 */

static uint64_t rng = 88172645463325252ull;
static size_t rnd(size_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return n ? (size_t)(rng % n) : 0;
}

typedef struct strbuf {
  char *p;
  size_t len, cap;
} strbuf_t;

static void sb_add(strbuf_t *b, const void *p, size_t n) {
  if (b->len + n + 1 > b->cap) {
    b->cap = (b->len + n + 1) * 2;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_printf(strbuf_t *b, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void sb_printf(strbuf_t *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sb_add(b, tmp, (size_t)n);
}

/* The outcome of decoding a stream: a log of the values (offset, compact
 * flag, bytes), then the list envelope, the final code and message. */
typedef struct run {
  strbuf_t log;
  size_t values;
  int rc;
  char err[256];
} run_t;

static void run_free(run_t *r) { free(r->log.p); }

/* Checks v's container index against one found by brute force: every
 * container that opens at most KL_JSON_INDEX_DEPTH deep in the stream (the
 * value itself at depth, 0 or 2 in a list), the first KL_JSON_INDEX_MAX. */
static void check_index(const kl_json_value_t *v, unsigned depth) {
  const char *p = v->json.p, *end = p + v->json.n;
  size_t n = 0;
  for (const char *q = p; q < end; q++) {
    if (*q == '"') {
      q = kl_json_skip(q, end) - 1;
    } else if (*q == '{' || *q == '[') {
      if (depth++ >= KL_JSON_INDEX_DEPTH || n == KL_JSON_INDEX_MAX) continue;
      if (n >= v->ncontainers) {
        KT_FAIL_("container %zu at %zu is not indexed", n, (size_t)(q - p));
        return;
      }
      const kl_json_container_t *c = &v->containers[n++];
      KT_EQ_INT(c->open, q - p);
      KT_EQ_INT(c->close, kl_json_skip(q, end) - p);
    } else if (*q == '}' || *q == ']') {
      depth--;
    }
  }
  KT_EQ_INT(v->ncontainers, n);
  KT_TRUE((v->containers != NULL) == (n > 0));
}

/* Feeds data[0, n) cut at the sorted positions cuts[0, ncuts). */
static void run_cuts(kl_json_mode_t mode, size_t max_value, const char *data,
                     size_t n, const size_t *cuts, size_t ncuts, run_t *r) {
  kl_json_opts_t opts = {mode, max_value, 0};
  kl_json_stream_t *s = kl_json_stream_new(&opts);
  kl_json_value_t v;
  memset(r, 0, sizeof *r);
  sb_add(&r->log, "", 0);
  size_t from = 0;
  for (size_t i = 0; i <= ncuts && r->rc == 0; i++) {
    size_t to = i < ncuts ? cuts[i] : n;
    char *chunk = malloc(to - from + 1);
    memcpy(chunk, data + from, to - from);
    KT_EQ_INT(kl_json_stream_feed(s, chunk, to - from), KL_OK);
    int rc;
    while ((rc = kl_json_stream_next(s, &v)) == KL_OK) {
      check_index(&v, mode == KL_JSON_LIST ? 2 : 0);
      sb_printf(&r->log, "@%llu %d %zu:", (unsigned long long)v.offset,
                v.compact, v.json.n);
      sb_add(&r->log, v.json.p, v.json.n);
      sb_add(&r->log, "\n", 1);
      r->values++;
    }
    free(chunk);
    if (rc != KL_EAGAIN) r->rc = rc;
    from = to;
  }
  if (r->rc == 0) r->rc = kl_json_stream_end(s);
  const kl_json_list_t *l = kl_json_stream_list(s);
  if (l)
    sb_printf(&r->log,
              "list kind=%s apiVersion=%s rv=%s continue=%s rem=%lld "
              "items=%zu envelope=%.*s",
              l->kind.p, l->api_version.p, l->resource_version.p,
              l->continue_token.p, (long long)l->remaining_item_count, l->items,
              (int)l->envelope.n, l->envelope.p);
  snprintf(r->err, sizeof r->err, "%s", kl_json_stream_error(s));
  kl_json_stream_free(s);
}

static void run_whole(kl_json_mode_t mode, size_t max_value, const char *data,
                      size_t n, run_t *r) {
  run_cuts(mode, max_value, data, n, NULL, 0, r);
}

static void run_bytewise(kl_json_mode_t mode, size_t max_value,
                         const char *data, size_t n, run_t *r) {
  size_t *cuts = malloc((n + 1) * sizeof *cuts);
  for (size_t i = 0; i < n; i++)
    cuts[i] = i + 1;
  run_cuts(mode, max_value, data, n, cuts, n ? n - 1 : 0, r);
  free(cuts);
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

/* Whole vs every single cut (or 300 random ones past 6000 bytes), 50 random
 * multi-cut splits, and byte by byte: all must give the same run. */
static void check_all_cuts(const char *name, kl_json_mode_t mode,
                           size_t max_value, const char *data, size_t n,
                           const run_t *whole) {
  run_t r;
  size_t cuts[16];
  bool every = n <= 6000;
  size_t tries = every ? n + 1 : 300;
  for (size_t t = 0; t < tries; t++) {
    cuts[0] = every ? t : rnd(n + 1);
    run_cuts(mode, max_value, data, n, cuts, 1, &r);
    if (r.rc != whole->rc || strcmp(r.log.p, whole->log.p) != 0 ||
        strcmp(r.err, whole->err) != 0) {
      KT_FAIL_("%s: cut at %zu differs: rc %d vs %d, err \"%s\" vs \"%s\"",
               name, cuts[0], r.rc, whole->rc, r.err, whole->err);
      run_free(&r);
      return;
    }
    run_free(&r);
  }
  for (size_t t = 0; t < 50; t++) {
    size_t k = 1 + rnd(15);
    for (size_t i = 0; i < k; i++)
      cuts[i] = rnd(n + 1);
    qsort(cuts, k, sizeof cuts[0], cmp_size);
    run_cuts(mode, max_value, data, n, cuts, k, &r);
    if (r.rc != whole->rc || strcmp(r.log.p, whole->log.p) != 0 ||
        strcmp(r.err, whole->err) != 0)
      KT_FAIL_("%s: random cuts differ: rc %d vs %d, err \"%s\" vs \"%s\"",
               name, r.rc, whole->rc, r.err, whole->err);
    run_free(&r);
  }
  run_bytewise(mode, max_value, data, n, &r);
  if (r.rc != whole->rc || strcmp(r.log.p, whole->log.p) != 0 ||
      strcmp(r.err, whole->err) != 0)
    KT_FAIL_("%s: byte-by-byte differs: rc %d vs %d, err \"%s\" vs \"%s\"",
             name, r.rc, whole->rc, r.err, whole->err);
  run_free(&r);
}

/* The elements of a validated array. */
static size_t array_elems(kl_json_span_t arr, kl_json_span_t *out, size_t max) {
  const char *p = arr.p + 1, *end = arr.p + arr.n;
  size_t k = 0;
  p = kl_json_ws(p, end);
  if (*p == ']') return 0;
  while (k < max) {
    const char *e = kl_json_skip(p, end);
    out[k].p = p;
    out[k++].n = (size_t)(e - p);
    p = kl_json_ws(e, end);
    if (*p != ',') break;
    p = kl_json_ws(p + 1, end);
  }
  return k;
}

/* The apiserver fixture files, in order. */
static const char *const fixtures[] = {
#define F(x) "apiserver/" x ".json"
    F("01-version"),
    F("02-discovery-api"),
    F("03-discovery-api-v1"),
    F("04-discovery-apis"),
    F("05-discovery-apps-v1"),
    F("06-discovery-coordination-v1"),
    F("07-discovery-events-v1"),
    F("08-discovery-apiextensions-v1"),
    F("09-crd-create"),
    F("10-crd-get-established"),
    F("11-discovery-example-v1"),
    F("12-discovery-example-group"),
    F("13-discovery-apis-after-crd"),
    F("14-namespace-create"),
    F("15-cm-create"),
    F("16-cm-get"),
    F("17-cm-get-non-curl-user-agent"),
    F("18-cm-list"),
    F("19-cm-list-limit2"),
    F("20-cm-list-continue"),
    F("21-cm-list-rv0"),
    F("22-cm-update"),
    F("23-cm-update-stale"),
    F("24-cm-update-no-rv"),
    F("25-cm-update-missing"),
    F("26-cm-create-duplicate"),
    F("27-cm-get-missing"),
    F("28-cm-create-missing-namespace"),
    F("29-cm-create-namespace-mismatch"),
    F("30-cm-delete"),
    F("31-cm-delete-missing"),
    F("32-cm-deletecollection"),
    F("33-cm-create-generatename"),
    F("34-cm-create-dryrun"),
    F("35-cm-create-unknown-field"),
    F("36-cm-create-unknown-field-strict"),
    F("37-cm-list-table"),
    F("38-patch-merge"),
    F("39-patch-json"),
    F("40-patch-json-test-fails"),
    F("41-patch-json-remove-missing-path"),
    F("42-patch-json-malformed"),
    F("43-patch-merge-missing-object"),
    F("44-deployment-create"),
    F("45-patch-strategic-deployment"),
    F("46-patch-merge-deployment-replaces-list"),
    F("47-patch-strategic-delete-directive"),
    F("48-apply-create"),
    F("49-apply-update-same-manager"),
    F("50-apply-conflict"),
    F("51-apply-force"),
    F("52-apply-no-fieldmanager"),
    F("53-apply-json-body"),
    F("54-patch-unsupported-media-type"),
    F("55-invalid-name"),
    F("56-missing-name"),
    F("57-malformed-json"),
    F("58-kind-mismatch"),
    F("59-widget-invalid-type"),
    F("60-unknown-resource"),
    F("61-unknown-group-version"),
    F("62-unknown-group"),
    F("63-finalizer-watch"),
    F("64-finalizer-create"),
    F("65-finalizer-delete"),
    F("66-finalizer-get-terminating"),
    F("67-finalizer-add-while-terminating"),
    F("68-finalizer-remove"),
    F("69-finalizer-get-after"),
    F("70-delete-foreground"),
    F("71-watch-widgets"),
    F("72-widget-create"),
    F("73-widget-put-status"),
    F("74-widget-patch-spec"),
    F("75-widget-patch-status-via-main"),
    F("76-widget-patch-status"),
    F("77-widget-patch-strategic"),
    F("78-widget-delete"),
    F("79-watch-configmaps-bookmarks"),
    F("80-watch-configmaps-labelselector"),
    F("81-watch-configmaps-rv0"),
    F("82-lease-create"),
    F("83-lease-update"),
    F("84-lease-update-stale"),
    F("85-lease-update-bad-microtime"),
    F("86-event-core-create"),
    F("87-event-eventsv1-create"),
    F("88-event-eventsv1-read-as-core"),
    F("89-event-core-read-as-eventsv1"),
    F("90-http2-get"),
    F("91-auth-no-credentials"),
    F("92-auth-wrong-token"),
    F("93-auth-forbidden"),
    F("94-auth-forbidden-get"),
    F("95-watch-too-old-rv"),
    F("96-list-expired-continue"),
    F("97-list-exact-compacted-rv"),
    F("98-list-too-large-rv"),
    F("99-watch-compacted-rv-in-cache"),
#undef F
};
#define NFIXTURES (sizeof fixtures / sizeof fixtures[0])

/* The fixture file parsed: its response member. */
typedef struct fixture {
  char *text;
  size_t n;
  kl_json_span_t response;
} fixture_t;

static void fixture_load(const char *rel, fixture_t *f) {
  kl_json_value_t root;
  char err[256];
  f->text = slurp(rel, &f->n);
  int rc = kl_json_check(f->text, f->n, &root, err, sizeof err);
  if (rc != KL_OK) {
    fprintf(stderr, "%s: %s\n", rel, err);
    exit(2);
  }
  if (!kl_json_member(root.json, "response", &f->response)) exit(2);
}

/* The expected list envelopes: lines "source\tlist\tkind\tapiVersion\trv\t
 * continue\tremaining\tcount" of expected.tsv, as the log line run_cuts
 * writes (without the envelope). */
static bool expected_list(const char *source, char *out, size_t outlen) {
  size_t n;
  char *tsv = slurp("expected.tsv", &n), *save = NULL;
  bool found = false;
  for (char *line = strtok_r(tsv, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    char *col[8];
    int k = 0;
    for (char *p = line; k < 8; k++) {
      col[k] = p;
      p = strchr(p, '\t');
      if (!p) break;
      *p++ = '\0';
    }
    if (k < 7 || strcmp(col[0], source) != 0 || strcmp(col[1], "list") != 0)
      continue;
    snprintf(out, outlen,
             "list kind=%s apiVersion=%s rv=%s continue=%s rem=%s items=%s "
             "envelope=",
             col[2], col[3], col[4], col[5], col[6], col[7]);
    found = true;
  }
  free(tsv);
  return found;
}

/* --- fixture bodies --------------------------------------------------------
 */

static void test_fixture_bodies_whole_and_cut(void) {
  size_t objects = 0, lists = 0;
  for (size_t i = 0; i < NFIXTURES; i++) {
    fixture_t f;
    kl_json_span_t body;
    run_t whole;
    fixture_load(fixtures[i], &f);
    const char *src = strrchr(fixtures[i], '/') + 1;
    if (!kl_json_member(f.response, "body", &body) || body.p[0] != '{') {
      free(f.text);
      continue;
    }
    objects++;
    /* As a watch-style sequence: one value, the body itself. */
    run_whole(KL_JSON_VALUES, 0, body.p, body.n, &whole);
    KT_EQ_INT(whole.rc, KL_OK);
    KT_EQ_INT(whole.values, 1);
    char head[64];
    snprintf(head, sizeof head, "@0 0 %zu:", body.n);
    KT_TRUE(strncmp(whole.log.p, head, strlen(head)) == 0);
    KT_TRUE(memcmp(whole.log.p + strlen(head), body.p, body.n) == 0);
    check_all_cuts(src, KL_JSON_VALUES, 0, body.p, body.n, &whole);
    run_free(&whole);

    /* Compacted, the value is flagged compact. */
    char *c = malloc(body.n);
    size_t cn = compact_ref(body.p, body.n, c);
    run_whole(KL_JSON_VALUES, 0, c, cn, &whole);
    snprintf(head, sizeof head, "@0 1 %zu:", cn);
    KT_TRUE(strncmp(whole.log.p, head, strlen(head)) == 0);
    run_free(&whole);
    free(c);

    /* List bodies: each item, then the envelope. */
    char expect[512];
    if (expected_list(src, expect, sizeof expect)) {
      kl_json_span_t items, elems[16];
      lists++;
      KT_TRUE(kl_json_member(body, "items", &items));
      size_t ne = array_elems(items, elems, 16);
      run_whole(KL_JSON_LIST, 0, body.p, body.n, &whole);
      KT_EQ_INT(whole.rc, KL_OK);
      KT_EQ_INT(whole.values, ne);
      const char *p = whole.log.p;
      for (size_t k = 0; k < ne; k++) {
        snprintf(head, sizeof head,
                 "@%zu 0 %zu:", (size_t)(elems[k].p - body.p), elems[k].n);
        KT_TRUE(strncmp(p, head, strlen(head)) == 0);
        p += strlen(head);
        KT_TRUE(memcmp(p, elems[k].p, elems[k].n) == 0);
        p += elems[k].n + 1;
      }
      if (strncmp(p, expect, strlen(expect)) != 0)
        KT_FAIL_("%s: list line \"%.200s\" != \"%s\"", src, p, expect);
      /* The envelope is the object with "items" emptied. */
      const char *env = p + strlen(expect);
      kl_json_value_t ev;
      KT_EQ_INT(kl_json_check(env, strlen(env), &ev, NULL, 0), KL_OK);
      kl_json_span_t eitems, ekind, bkind;
      KT_TRUE(kl_json_member(ev.json, "items", &eitems));
      KT_EQ_MEM(eitems.p, eitems.n, "[]");
      KT_TRUE(kl_json_member(ev.json, "kind", &ekind));
      KT_TRUE(kl_json_member(body, "kind", &bkind));
      KT_TRUE(ekind.n == bkind.n && memcmp(ekind.p, bkind.p, ekind.n) == 0);
      check_all_cuts(src, KL_JSON_LIST, 0, body.p, body.n, &whole);
      run_free(&whole);
    }
    free(f.text);
  }
  KT_EQ_INT(objects, 90);
  KT_EQ_INT(lists, 5);
}

/* The watch fixtures: body_lines compacted and joined by '\n', as the
 * apiserver sends them. */
static void test_fixture_watch_streams(void) {
  size_t streams = 0;
  for (size_t i = 0; i < NFIXTURES; i++) {
    fixture_t f;
    kl_json_span_t lines, elems[16];
    fixture_load(fixtures[i], &f);
    const char *src = strrchr(fixtures[i], '/') + 1;
    if (!kl_json_member(f.response, "body_lines", &lines)) {
      free(f.text);
      continue;
    }
    streams++;
    size_t ne = array_elems(lines, elems, 16);
    strbuf_t stream = {0}, expect = {0};
    sb_add(&expect, "", 0);
    for (size_t k = 0; k < ne; k++) {
      char *c = malloc(elems[k].n);
      size_t cn = compact_ref(elems[k].p, elems[k].n, c);
      sb_printf(&expect, "@%zu 1 %zu:", stream.len, cn);
      sb_add(&expect, c, cn);
      sb_add(&expect, "\n", 1);
      sb_add(&stream, c, cn);
      sb_add(&stream, "\n", 1);
      free(c);
    }
    run_t whole;
    run_whole(KL_JSON_VALUES, 0, stream.p, stream.len, &whole);
    KT_EQ_INT(whole.rc, KL_OK);
    KT_EQ_INT(whole.values, ne);
    KT_EQ_STR(whole.log.p, expect.p);
    check_all_cuts(src, KL_JSON_VALUES, 0, stream.p, stream.len, &whole);
    run_free(&whole);
    free(stream.p);
    free(expect.p);
    free(f.text);
  }
  KT_EQ_INT(streams, 7);
}

/* raw_sample holds the first 600 bytes of the chunked body as sent: once
 * de-chunked, the complete events come out and the cut one is reported. */
static void test_fixture_watch_raw_sample(void) {
  size_t samples = 0;
  for (size_t i = 0; i < NFIXTURES; i++) {
    fixture_t f;
    kl_json_span_t raw, lines, elems[16];
    fixture_load(fixtures[i], &f);
    if (!kl_json_member(f.response, "raw_sample", &raw) ||
        !kl_json_member(f.response, "body_lines", &lines)) {
      free(f.text);
      continue;
    }
    samples++;
    char *chunked = malloc(raw.n), *body = malloc(raw.n);
    size_t cn = kl_json_unescape(raw.p + 1, raw.n - 2, chunked), bn = 0;
    /* De-chunk: "<hex>\r\n<data>\r\n" …, possibly cut. */
    for (size_t p = 0; p < cn;) {
      size_t size = (size_t)strtoul(chunked + p, NULL, 16);
      const char *crlf = strstr(chunked + p, "\r\n");
      if (!crlf || size == 0) break;
      p = (size_t)(crlf - chunked) + 2;
      size_t take = size < cn - p ? size : cn - p;
      memcpy(body + bn, chunked + p, take);
      bn += take;
      p += take + 2;
    }
    size_t ne = array_elems(lines, elems, 16), full = 0, done = 0;
    for (size_t k = 0; k < ne; k++) {
      char *c = malloc(elems[k].n);
      size_t n = compact_ref(elems[k].p, elems[k].n, c);
      if (full + n + 1 <= bn && memcmp(body + full, c, n) == 0) {
        full += n + 1;
        done++;
      }
      free(c);
    }
    run_t whole;
    run_whole(KL_JSON_VALUES, 0, body, bn, &whole);
    KT_EQ_INT(whole.values, done);
    if (full < bn) {
      char expect[160];
      snprintf(expect, sizeof expect,
               "byte %zu: unexpected end of stream inside the value that "
               "starts at byte %zu",
               bn, full);
      KT_EQ_INT(whole.rc, KL_EPARSE);
      KT_EQ_STR(whole.err, expect);
    } else {
      KT_EQ_INT(whole.rc, KL_OK);
    }
    check_all_cuts("raw_sample", KL_JSON_VALUES, 0, body, bn, &whole);
    run_free(&whole);
    free(chunked);
    free(body);
    free(f.text);
  }
  KT_EQ_INT(samples, 7);
}

/* --- valid values ------------------------------------------------------------
 */

/* Valid texts: each is one object, but for the last (three). */
static const char *const valid_texts[] = {
    "{}",
    "{\"a\":[]}",
    "{\"a\":{},\"b\":[[]],\"c\":[{}]}",
    "{\"e\":\"\\u00e9\",\"pair\":\"\\ud83d\\ude00\",\"s\":\"\\/\\\"\\\\\\b\\f"
    "\\n\\r\\t\",\"nul\":\"\\u0000\"}",
    "{\"raw\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf "
    "\xee\x80\x80 \xf4\x8f\xbf\xbf\"}",
    "{\"big\":123456789012345678901234567890,\"neg\":-9223372036854775809}",
    "{\"f\":[0,-0,0.5,-1.25e-300,1E+300,2e10,1.0e0,-0.0]}",
    "{\"n\":null,\"t\":true,\"f\":false,\"l\":[null,true,false]}",
    " {\"ws\" : [ 1 , 2 ] ,\n\t\"x\" : { } }\r\n",
    "{\"\\u0069tems\":[1],\"k\\u00e9y\":\"v\"}",
    "{\"a\":1}{\"b\":2}\n{\"c\":3}",
};

static void test_valid_values(void) {
  static const size_t counts[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3};
  for (size_t i = 0; i < sizeof valid_texts / sizeof valid_texts[0]; i++) {
    run_t whole;
    run_whole(KL_JSON_VALUES, 0, valid_texts[i], strlen(valid_texts[i]),
              &whole);
    if (whole.rc != KL_OK) KT_FAIL_("case %zu: %s", i, whole.err);
    KT_EQ_INT(whole.values, counts[i]);
    check_all_cuts(valid_texts[i], KL_JSON_VALUES, 0, valid_texts[i],
                   strlen(valid_texts[i]), &whole);
    run_free(&whole);
  }
  /* 128 levels (the default limit) are fine. */
  char deep[300];
  size_t n = 0;
  deep[n++] = '{';
  memcpy(deep + n, "\"a\":", 4);
  n += 4;
  for (int i = 0; i < 127; i++)
    deep[n++] = '[';
  for (int i = 0; i < 127; i++)
    deep[n++] = ']';
  deep[n++] = '}';
  run_t r;
  run_whole(KL_JSON_VALUES, 0, deep, n, &r);
  KT_EQ_INT(r.rc, KL_OK);
  KT_EQ_INT(r.values, 1);
  run_free(&r);
  /* The value and its offset in the log, with whitespace between values. */
  const char *two = "\n {\"a\":1}\n\n{ \"b\" :2}\n";
  run_whole(KL_JSON_VALUES, 0, two, strlen(two), &r);
  KT_EQ_STR(r.log.p, "@2 1 7:{\"a\":1}\n@11 0 9:{ \"b\" :2}\n");
  run_free(&r);
}

/* --- malformed input ---------------------------------------------------------
 */

typedef struct bad_case {
  kl_json_mode_t mode;
  size_t max_value;
  const char *in;
  int code;
  const char *msg;
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {KL_JSON_VALUES, 0, "{\"a\":1", KL_EPARSE,
     "byte 6: unexpected end of stream inside the value that starts at "
     "byte 0"},
    {KL_JSON_VALUES, 0, "{}\n{\"a\":\"x", KL_EPARSE,
     "byte 10: unexpected end of stream inside the value that starts at "
     "byte 3"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\\q\"}", KL_EPARSE,
     "byte 6: invalid escape '\\q'"},
    {KL_JSON_VALUES, 0, "{\"a\":\"x\\u12G4\"}", KL_EPARSE,
     "byte 7: invalid \\u escape"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\\u12\"}", KL_EPARSE,
     "byte 6: invalid \\u escape"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\\ud800\"}", KL_EPARSE,
     "byte 6: unpaired UTF-16 surrogate in \\u escape"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\\ud800\\u0041\"}", KL_EPARSE,
     "byte 6: unpaired UTF-16 surrogate in \\u escape"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\\ud800\\n\"}", KL_EPARSE,
     "byte 6: unpaired UTF-16 surrogate in \\u escape"},
    {KL_JSON_VALUES, 0, "{\"a\":\"ab\\udc00\"}", KL_EPARSE,
     "byte 8: unpaired UTF-16 surrogate in \\u escape"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\xff\"}", KL_EPARSE, "byte 6: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\x80\"}", KL_EPARSE, "byte 6: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"a\":\"x\xc3\"}", KL_EPARSE,
     "byte 7: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\xc0\xaf\"}", KL_EPARSE,
     "byte 6: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\xe0\x80\xaf\"}", KL_EPARSE,
     "byte 6: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\xed\xa0\x80\"}", KL_EPARSE,
     "byte 6: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\xf4\x90\x80\x80\"}", KL_EPARSE,
     "byte 6: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"a\":\"\xf0\x9f\x98\"}", KL_EPARSE,
     "byte 6: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"k\xf5\":1}", KL_EPARSE, "byte 3: invalid UTF-8"},
    {KL_JSON_VALUES, 0, "{\"a\":\"x\ny\"}", KL_EPARSE,
     "byte 7: control character 0x0a in a string"},
    {KL_JSON_VALUES, 0, "[1]", KL_EPARSE,
     "byte 0: top-level value is not an object"},
    {KL_JSON_VALUES, 0, "  \"x\"", KL_EPARSE,
     "byte 2: top-level value is not an object"},
    {KL_JSON_VALUES, 0, "{}x", KL_EPARSE,
     "byte 2: top-level value is not an object"},
    {KL_JSON_VALUES, 0, "{} }", KL_EPARSE,
     "byte 3: top-level value is not an object"},
    {KL_JSON_VALUES, 0, "{\"a\" 1}", KL_EPARSE,
     "byte 5: expected ':', found '1'"},
    {KL_JSON_VALUES, 0, "{\"a\":1 \"b\":2}", KL_EPARSE,
     "byte 7: expected ',' or '}', found '\"'"},
    {KL_JSON_VALUES, 0, "{\"a\":[1 2]}", KL_EPARSE,
     "byte 8: expected ',' or ']', found '2'"},
    {KL_JSON_VALUES, 0, "{\"a\":[1,]}", KL_EPARSE,
     "byte 8: expected a value, found ']'"},
    {KL_JSON_VALUES, 0, "{,}", KL_EPARSE,
     "byte 1: expected a string key or '}', found ','"},
    {KL_JSON_VALUES, 0, "{\"a\":1,}", KL_EPARSE,
     "byte 7: expected a string key, found '}'"},
    {KL_JSON_VALUES, 0, "{\"a\":}", KL_EPARSE,
     "byte 5: expected a value, found '}'"},
    {KL_JSON_VALUES, 0, "{\"a\":\x01}", KL_EPARSE,
     "byte 5: expected a value, found 0x01"},
    {KL_JSON_VALUES, 0, "{\"a\":01}", KL_EPARSE,
     "byte 6: invalid number (leading zero)"},
    {KL_JSON_VALUES, 0, "{\"a\":-01}", KL_EPARSE,
     "byte 7: invalid number (leading zero)"},
    {KL_JSON_VALUES, 0, "{\"a\":1.}", KL_EPARSE, "byte 7: invalid number"},
    {KL_JSON_VALUES, 0, "{\"a\":-}", KL_EPARSE, "byte 6: invalid number"},
    {KL_JSON_VALUES, 0, "{\"a\":1e}", KL_EPARSE, "byte 7: invalid number"},
    {KL_JSON_VALUES, 0, "{\"a\":1e+}", KL_EPARSE, "byte 8: invalid number"},
    {KL_JSON_VALUES, 0, "{\"a\":.5}", KL_EPARSE,
     "byte 5: expected a value, found '.'"},
    {KL_JSON_VALUES, 0, "{\"a\":+1}", KL_EPARSE,
     "byte 5: expected a value, found '+'"},
    {KL_JSON_VALUES, 0, "{\"a\":1.5.2}", KL_EPARSE,
     "byte 8: expected ',' or '}', found '.'"},
    {KL_JSON_VALUES, 0, "{\"a\":tru}", KL_EPARSE,
     "byte 8: invalid literal (expected true)"},
    {KL_JSON_VALUES, 0, "{\"a\":nul", KL_EPARSE,
     "byte 8: unexpected end of stream inside the value that starts at "
     "byte 0"},
    {KL_JSON_VALUES, 0, "{\"a\":True}", KL_EPARSE,
     "byte 5: expected a value, found 'T'"},
    {KL_JSON_VALUES, 0, "{\"a\":nulls}", KL_EPARSE,
     "byte 9: expected ',' or '}', found 's'"},
    {KL_JSON_VALUES, 16, "{\"a\":\"0123456789ab\"}", KL_ELIMIT,
     "byte 16: value starting at byte 0 exceeds the 16-byte limit"},
    {KL_JSON_VALUES, 16, "{\"a\":1}   {\"a\":\"0123456789ab\"}", KL_ELIMIT,
     "byte 26: value starting at byte 10 exceeds the 16-byte limit"},
    {KL_JSON_LIST, 0, "", KL_EPARSE,
     "byte 0: unexpected end of stream: no list object"},
    {KL_JSON_LIST, 0, "{\"items\":[{}", KL_EPARSE,
     "byte 12: unexpected end of stream inside the list object that starts "
     "at byte 0"},
    {KL_JSON_LIST, 0, "{\"items\":[]} x", KL_EPARSE,
     "byte 13: trailing data after the list object"},
    {KL_JSON_LIST, 0, "{\"items\":[]}{}", KL_EPARSE,
     "byte 12: trailing data after the list object"},
    {KL_JSON_LIST, 0, "[]", KL_EPARSE,
     "byte 0: top-level value is not an object"},
    {KL_JSON_LIST, 0, "{\"items\":{}}", KL_EPARSE,
     "byte 9: \"items\" is not an array"},
    {KL_JSON_LIST, 0, "{\"items\":[{},1]}", KL_EPARSE,
     "byte 13: list item is not an object"},
    {KL_JSON_LIST, 0, "{\"metadata\":{\"resourceVersion\":5},\"items\":[]}",
     KL_EPARSE, "byte 0: list metadata.resourceVersion is not a string"},
    {KL_JSON_LIST, 0, "{\"metadata\":{\"remainingItemCount\":1.5}}", KL_EPARSE,
     "byte 0: list metadata.remainingItemCount is not an integer"},
    {KL_JSON_LIST, 24, "{\"kind\":\"PodList\",\"items\":[{\"a\":1}],\"x\":1}",
     KL_ELIMIT,
     "byte 0: list envelope (all but the items) exceeds the 24-byte limit"},
    /* A malformed byte past the cap reports the cap, whatever the cuts
     * (found by spec/fuzz/fuzz_stream); one inside the cap is malformed. */
    {KL_JSON_VALUES, 4, "{\"a\":1,x}", KL_ELIMIT,
     "byte 4: value starting at byte 0 exceeds the 4-byte limit"},
    {KL_JSON_VALUES, 16, "{\"a\":x0123456789abcdef}", KL_EPARSE,
     "byte 5: expected a value, found 'x'"},
    {KL_JSON_LIST, 8, "{\"kind\":{{", KL_ELIMIT,
     "byte 0: list envelope (all but the items) exceeds the 8-byte limit"},
    {KL_JSON_LIST, 1, "{\n{{{}[{{{", KL_ELIMIT,
     "byte 0: list envelope (all but the items) exceeds the 1-byte limit"},
};
static void test_malformed_messages(void) {

  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const bad_case_t *c = &bad_cases[i];
    run_t r;
    run_whole(c->mode, c->max_value, c->in, strlen(c->in), &r);
    if (r.rc != c->code || strcmp(r.err, c->msg) != 0)
      KT_FAIL_("case %zu %s: got %d \"%s\", want %d \"%s\"", i, c->in, r.rc,
               r.err, c->code, c->msg);
    check_all_cuts(c->in, c->mode, c->max_value, c->in, strlen(c->in), &r);
    run_free(&r);
  }
  /* Nesting: 128 levels pass, the 129th is refused where it opens. */
  char deep[300];
  size_t n = 0;
  memcpy(deep, "{\"a\":", 5);
  n = 5;
  for (int i = 0; i < 128; i++)
    deep[n++] = '[';
  run_t r;
  run_whole(KL_JSON_VALUES, 0, deep, n, &r);
  KT_EQ_INT(r.rc, KL_EPARSE);
  KT_EQ_STR(r.err, "byte 132: nesting deeper than 128 levels");
  check_all_cuts("deep", KL_JSON_VALUES, 0, deep, n, &r);
  run_free(&r);
  kl_json_opts_t opts = {KL_JSON_VALUES, 0, 2};
  kl_json_stream_t *s = kl_json_stream_new(&opts);
  kl_json_value_t v;
  kl_json_stream_feed(s, "{\"a\":{\"b\":[]}}", 14);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EPARSE);
  KT_EQ_STR(kl_json_stream_error(s), "byte 10: nesting deeper than 2 levels");
  /* Errors are sticky. */
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EPARSE);
  KT_EQ_INT(kl_json_stream_end(s), KL_EPARSE);
  kl_json_stream_free(s);
  /* A deeper configured limit is honoured. */
  opts.max_depth = 1000;
  s = kl_json_stream_new(&opts);
  char *big = malloc(2100);
  n = 0;
  memcpy(big, "{\"a\":", 5);
  n = 5;
  for (int i = 0; i < 998; i++)
    big[n++] = '[';
  for (int i = 0; i < 998; i++)
    big[n++] = ']';
  big[n++] = '}';
  kl_json_stream_feed(s, big, n);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  kl_json_stream_free(s);
  free(big);
}

/* --- list mode
 * ----------------------------------------------------------------- */

static void test_list_mode(void) {
  run_t r;
  const char *a =
      "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{"
      "\"resourceVersion\":\"12\",\"continue\":\"a\\u003db\","
      "\"remainingItemCount\":7},\"items\":[{\"metadata\":{\"name\":\"x\"},"
      "\"items\":[{}]}, {\"n\":1}\n]}\n";
  run_whole(KL_JSON_LIST, 0, a, strlen(a), &r);
  KT_EQ_INT(r.rc, KL_OK);
  KT_EQ_STR(r.log.p,
            "@126 1 38:{\"metadata\":{\"name\":\"x\"},\"items\":[{}]}\n"
            "@166 1 7:{\"n\":1}\n"
            "list kind=PodList apiVersion=v1 rv=12 continue=a=b rem=7 items=2 "
            "envelope={\"kind\":\"PodList\",\"apiVersion\":\"v1\","
            "\"metadata\":{\"resourceVersion\":\"12\",\"continue\":"
            "\"a\\u003db\",\"remainingItemCount\":7},\"items\":[]}");
  check_all_cuts("list", KL_JSON_LIST, 0, a, strlen(a), &r);
  run_free(&r);

  /* "items" written with an escape, items: null, no items at all. */
  const char *b = "{\"\\u0069tems\":[{}],\"metadata\":{}}";
  run_whole(KL_JSON_LIST, 0, b, strlen(b), &r);
  KT_EQ_INT(r.rc, KL_OK);
  KT_EQ_INT(r.values, 1);
  check_all_cuts("escaped items", KL_JSON_LIST, 0, b, strlen(b), &r);
  run_free(&r);
  const char *c = "{\"items\":null,\"kind\":\"X\"}";
  run_whole(KL_JSON_LIST, 0, c, strlen(c), &r);
  KT_EQ_INT(r.rc, KL_OK);
  KT_EQ_STR(r.log.p, "list kind=X apiVersion= rv= continue= rem=-1 items=0 "
                     "envelope={\"items\":null,\"kind\":\"X\"}");
  run_free(&r);
  const char *d =
      "{\"kind\":\"Status\",\"code\":410,\"itemsx\":[1],\"item\":[2]}";
  run_whole(KL_JSON_LIST, 0, d, strlen(d), &r);
  KT_EQ_INT(r.rc, KL_OK);
  KT_EQ_INT(r.values, 0);
  check_all_cuts("status", KL_JSON_LIST, 0, d, strlen(d), &r);
  run_free(&r);

  /* Only the list object's own "items"; the list accessor waits for its end. */
  kl_json_stream_t *s =
      kl_json_stream_new(&(kl_json_opts_t){KL_JSON_LIST, 0, 0});
  kl_json_value_t v;
  const char *e = "{\"items\":[{\"a\":1}]";
  kl_json_stream_feed(s, e, strlen(e));
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  KT_EQ_MEM(v.json.p, v.json.n, "{\"a\":1}");
  KT_TRUE(v.json.p == e + 10); /* no copy: points into the fed bytes */
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EAGAIN);
  KT_TRUE(kl_json_stream_list(s) == NULL);
  kl_json_stream_feed(s, "}", 1);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EAGAIN);
  KT_TRUE(kl_json_stream_list(s) != NULL);
  KT_EQ_INT(kl_json_stream_list(s)->items, 1);
  KT_EQ_INT(kl_json_stream_end(s), KL_OK);
  kl_json_stream_free(s);
}

/* The container index stops KL_JSON_INDEX_DEPTH deep and after
 * KL_JSON_INDEX_MAX containers (check_index, run by every run, checks the
 * entries); a value yielded later starts its own. */
static void test_container_index(void) {
  run_t r;
  const char *deep =
      "{\"a\":[[[[[[[[[[{}]]]]]]]]]],\"b\":{\"c\":[1]}}{\"d\":[]}";
  run_whole(KL_JSON_VALUES, 0, deep, strlen(deep), &r);
  KT_EQ_INT(r.values, 2);
  check_all_cuts("deep", KL_JSON_VALUES, 0, deep, strlen(deep), &r);
  run_free(&r);
  const char *list =
      "{\"items\":[{\"a\":[[[[[[[1]]]]]]]},{\"b\":{}}],\"x\":[]}";
  run_whole(KL_JSON_LIST, 0, list, strlen(list), &r);
  KT_EQ_INT(r.values, 2);
  check_all_cuts("deep list", KL_JSON_LIST, 0, list, strlen(list), &r);
  run_free(&r);

  size_t n = 2 + 3 * (KL_JSON_INDEX_MAX + 10) + 8;
  char *many = malloc(n), *q = many;
  q += sprintf(q, "{\"a\":[");
  for (size_t i = 0; i < KL_JSON_INDEX_MAX + 10; i++)
    q += sprintf(q, "%s[]", i ? "," : "");
  q += sprintf(q, "]}");
  kl_json_stream_t *s = kl_json_stream_new(NULL);
  kl_json_value_t v;
  kl_json_stream_feed(s, many, (size_t)(q - many));
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  KT_EQ_INT(v.ncontainers, KL_JSON_INDEX_MAX);
  check_index(&v, 0);
  KT_EQ_INT(v.containers[0].close, q - many);
  kl_json_stream_feed(s, "{\"z\":{}}", 8);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  KT_EQ_INT(v.ncontainers, 2);
  check_index(&v, 0);
  kl_json_stream_free(s);
  free(many);
}

/* --- feeding, limits, the tail -----------------------------------------------
 */

static void test_feed_contract_and_tail(void) {
  kl_json_stream_t *s = kl_json_stream_new(NULL);
  kl_json_value_t v;
  /* An empty watch stream is fine. */
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EAGAIN);
  KT_EQ_INT(kl_json_stream_end(s), KL_OK);
  kl_json_stream_free(s);

  s = kl_json_stream_new(NULL);
  const char *two = "{\"a\":1}{\"b\":2}";
  KT_EQ_INT(kl_json_stream_feed(s, two, strlen(two)), KL_OK);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  /* Bytes not yet used: feeding more or ending is refused. */
  KT_EQ_INT(kl_json_stream_feed(s, "{}", 2), KL_EINVAL);
  KT_EQ_INT(kl_json_stream_end(s), KL_EINVAL);
  KT_EQ_INT(kl_json_stream_offset(s), 7);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  KT_EQ_MEM(v.json.p, v.json.n, "{\"b\":2}");
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EAGAIN);

  /* A value cut by feeds comes from the tail; only it is kept. */
  char part1[] = "{\"c\":\"abc", part2[] = "def\"} {\"d\"", part3[] = ":4}";
  kl_json_stream_feed(s, part1, strlen(part1));
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EAGAIN);
  memset(part1, 'X', strlen(part1)); /* the caller may reuse its buffer */
  kl_json_stream_feed(s, part2, strlen(part2));
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  KT_EQ_MEM(v.json.p, v.json.n, "{\"c\":\"abcdef\"}");
  KT_EQ_INT(v.offset, 14);
  KT_TRUE(v.json.p < part2 || v.json.p >= part2 + sizeof part2);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EAGAIN);
  memset(part2, 'X', strlen(part2));
  kl_json_stream_feed(s, part3, strlen(part3));
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  KT_EQ_MEM(v.json.p, v.json.n, "{\"d\":4}");
  KT_EQ_INT(v.offset, 29);
  KT_EQ_INT(kl_json_stream_end(s), KL_OK);
  kl_json_stream_free(s);

  /* The size cap: a value of exactly max_value bytes passes, one more fails,
   * whether fed whole or cut. */
  const char *exact = "{\"a\":\"0123456789\"}"; /* 18 bytes */
  run_t r;
  run_whole(KL_JSON_VALUES, 18, exact, strlen(exact), &r);
  KT_EQ_INT(r.rc, KL_OK);
  check_all_cuts("exact", KL_JSON_VALUES, 18, exact, strlen(exact), &r);
  run_free(&r);
  run_whole(KL_JSON_VALUES, 17, exact, strlen(exact), &r);
  KT_EQ_INT(r.rc, KL_ELIMIT);
  KT_EQ_STR(r.err,
            "byte 17: value starting at byte 0 exceeds the 17-byte limit");
  check_all_cuts("over", KL_JSON_VALUES, 17, exact, strlen(exact), &r);
  run_free(&r);

  /* A large value cut in many pieces (the tail grows, then resets). */
  size_t n = 3 << 20;
  char *big = malloc(n + 16);
  memcpy(big, "{\"a\":\"", 6);
  memset(big + 6, 'x', n - 8);
  memcpy(big + n - 2, "\"}", 2);
  s = kl_json_stream_new(NULL);
  int rc = KL_EAGAIN;
  for (size_t off = 0; off < n; off += 16384) {
    size_t k = n - off < 16384 ? n - off : 16384;
    kl_json_stream_feed(s, big + off, k);
    rc = kl_json_stream_next(s, &v);
    if (rc == KL_OK) KT_EQ_INT(v.json.n, n);
  }
  KT_EQ_INT(rc, KL_OK);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_EAGAIN);
  kl_json_stream_feed(s, "{}", 2);
  KT_EQ_INT(kl_json_stream_next(s, &v), KL_OK);
  KT_EQ_MEM(v.json.p, v.json.n, "{}");
  kl_json_stream_free(s);
  free(big);
}

static void test_check(void) {
  kl_json_value_t v;
  char err[128];
  KT_EQ_INT(kl_json_check(" {\"a\":[1]} \n", 12, &v, err, sizeof err), KL_OK);
  KT_EQ_MEM(v.json.p, v.json.n, "{\"a\":[1]}");
  KT_EQ_INT(v.offset, 1);
  KT_TRUE(v.compact);
  KT_TRUE(v.containers == NULL); /* the index would outlive its stream */
  KT_EQ_INT(v.ncontainers, 0);
  KT_EQ_INT(kl_json_check("{} {}", 5, &v, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 3: trailing data after the top-level object");
  KT_EQ_INT(kl_json_check("{} x", 4, &v, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 3: trailing data after the top-level object");
  KT_EQ_INT(kl_json_check("  ", 2, &v, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 2: unexpected end of stream: no object");
  KT_EQ_INT(kl_json_check("{\"a\":", 5, &v, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 5: unexpected end of stream inside the value that "
                 "starts at byte 0");
  KT_EQ_INT(kl_json_check("404 page not found\n", 19, &v, err, sizeof err),
            KL_EPARSE);
  KT_EQ_STR(err, "byte 0: top-level value is not an object");
  KT_EQ_INT(kl_json_check("[]", 2, &v, NULL, 0), KL_EPARSE);
}

/* kl_json_check_whole (kl_json_check's fast path) takes exactly the
 * single objects the stream takes, with the same value and index, and
 * refuses every malformed case, the nesting limit and trailing data. */
static void test_check_whole(void) {
  kl_json_ctbuf_t ix = {NULL, 0};
  kl_json_value_t a, b;
  for (size_t i = 0; i + 1 < sizeof valid_texts / sizeof valid_texts[0]; i++) {
    size_t n = strlen(valid_texts[i]);
    if (!kl_json_check_whole(valid_texts[i], n, &a, &ix))
      KT_FAIL_("case %zu refused", i);
    /* The stream's state machine, not its fast path (this check), reads
     * an object the first feed cuts. */
    kl_json_stream_t *s = kl_json_stream_new(NULL);
    size_t cut = (size_t)(kl_json_ws(valid_texts[i], valid_texts[i] + n) -
                          valid_texts[i]) +
                 1;
    kl_json_stream_feed(s, valid_texts[i], cut);
    KT_EQ_INT(kl_json_stream_next(s, &b), KL_EAGAIN);
    kl_json_stream_feed(s, valid_texts[i] + cut, n - cut);
    KT_EQ_INT(kl_json_stream_next(s, &b), KL_OK);
    KT_TRUE(b.json.n == a.json.n && !memcmp(a.json.p, b.json.p, a.json.n));
    KT_EQ_INT(a.offset, b.offset);
    KT_EQ_INT(a.compact, b.compact);
    KT_EQ_INT(a.ncontainers, b.ncontainers);
    KT_TRUE(memcmp(a.containers, b.containers,
                   a.ncontainers * sizeof *a.containers) == 0);
    kl_json_stream_free(s);
  }
  const char *three =
      valid_texts[sizeof valid_texts / sizeof valid_texts[0] - 1];
  KT_TRUE(!kl_json_check_whole(three, strlen(three), &a, &ix));
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    if (bad_cases[i].mode != KL_JSON_VALUES || bad_cases[i].max_value) continue;
    if (kl_json_check_whole(bad_cases[i].in, strlen(bad_cases[i].in), &a, &ix))
      KT_FAIL_("malformed case %zu taken: %s", i, bad_cases[i].in);
  }
  /* 128 open containers are the limit, as for the stream. */
  char deep[300];
  size_t n = 0;
  memcpy(deep, "{\"a\":", 5);
  n = 5;
  for (int i = 0; i < 127; i++)
    deep[n++] = '[';
  for (int i = 0; i < 127; i++)
    deep[n++] = ']';
  deep[n++] = '}';
  KT_TRUE(kl_json_check_whole(deep, n, &a, &ix));
  KT_EQ_INT(a.ncontainers, KL_JSON_INDEX_DEPTH);
  memmove(deep + 6, deep + 5, n - 5);
  deep[5] = '[';
  memmove(deep + n + 1, deep + n, 1);
  deep[n] = ']';
  KT_TRUE(!kl_json_check_whole(deep, n + 2, &a, &ix));
  char err[128];
  KT_EQ_INT(kl_json_check(deep, n + 2, &a, err, sizeof err), KL_EPARSE);
  KT_EQ_STR(err, "byte 132: nesting deeper than 128 levels");
  /* An empty object after a name, deep and unindexed (as the leaves of
   * managedFields' fieldsV1), counts against the limit as well. */
  char objs[1100];
  for (int levels = 128; levels <= 129; levels++) {
    n = 0;
    for (int i = 0; i < levels - 1; i++) {
      memcpy(objs + n, "{\"f:a\":", 7);
      n += 7;
    }
    memcpy(objs + n, "{}", 2);
    n += 2;
    for (int i = 0; i < levels - 1; i++)
      objs[n++] = '}';
    KT_EQ_INT(kl_json_check_whole(objs, n, &a, &ix), levels == 128);
    KT_EQ_INT(kl_json_check(objs, n, &a, err, sizeof err),
              levels == 128 ? KL_OK : KL_EPARSE);
  }
  KT_EQ_STR(err, "byte 896: nesting deeper than 128 levels");
  free(ix.ct);
}

/* kl_json_check_indexed leaves the index in the caller's buffer, reused
 * from check to check; the indexed readers give what the scanning ones
 * give, for every container and every member. */
static void test_check_indexed(void) {
  kl_json_ctbuf_t ix = {NULL, 0};
  kl_json_value_t v;
  char err[128];
  const char *doc =
      " {\"metadata\":{\"managedFields\":[{\"f\":{\"a\":[1,{}]}}],"
      "\"name\":\"n\",\"name\":\"last\"},\"spec\":[[\"]\"],{}],"
      "\"status\":{}} ";
  size_t len = strlen(doc);
  KT_EQ_INT(kl_json_check_indexed(doc, len, &v, &ix, err, sizeof err), KL_OK);
  KT_EQ_INT(v.offset, 1);
  KT_EQ_INT(v.ncontainers, 9); /* [1,{}] and its {} lie past the index */
  KT_TRUE(v.containers == ix.ct);
  check_index(&v, 0);
  const char *end = v.json.p + v.json.n;
  for (size_t i = 0; i < v.ncontainers; i++) {
    const char *p = v.json.p + v.containers[i].open;
    KT_TRUE(kl_json_skip_in(&v, p, end) == kl_json_skip(p, end));
    KT_TRUE(kl_json_skip_in(&v, p, end) == v.json.p + v.containers[i].close);
  }
  const char *str = strstr(v.json.p, "\"]\"");
  KT_TRUE(kl_json_skip_in(&v, str, end) == str + 3); /* not a container */
  KT_TRUE(kl_json_skip_in(NULL, v.json.p, end) == end);

  static const char *const top[] = {"metadata", "spec", "status", "none"};
  static const char *const md_keys[] = {"name", "managedFields"};
  kl_json_span_t a[4], b[4], md;
  KT_TRUE(kl_json_members_in(&v, v.json, top, 4, a));
  KT_TRUE(kl_json_members(v.json, top, 4, b));
  for (int i = 0; i < 4; i++)
    KT_TRUE(a[i].p == b[i].p && a[i].n == b[i].n);
  KT_EQ_MEM(a[2].p, a[2].n, "{}");
  KT_TRUE(a[3].p == NULL);
  md = a[0];
  KT_TRUE(kl_json_members_in(&v, md, md_keys, 2, a));
  KT_EQ_MEM(a[0].p, a[0].n, "\"last\"");
  KT_EQ_MEM(a[1].p, a[1].n, "[{\"f\":{\"a\":[1,{}]}}]");

  /* The buffer serves the next check; a failed one reports as before. */
  KT_EQ_INT(kl_json_check_indexed("{\"x\":[[]]}", 10, &v, &ix, err, sizeof err),
            KL_OK);
  KT_EQ_INT(v.ncontainers, 3);
  check_index(&v, 0);
  KT_EQ_INT(kl_json_check_indexed("{\"x\":[}", 7, &v, &ix, err, sizeof err),
            KL_EPARSE);
  KT_EQ_STR(err, "byte 6: expected a value, found '}'");
  free(ix.ct);
}

/* What kl_json_check_meta finds at start (NULL: absent), as text up to
 * the value's end, or "-". */
static const char *meta_text(const kl_json_value_t *v, const char *start,
                             char *out, size_t n) {
  if (!start) return "-";
  const char *e = kl_json_skip_in(v, start, v->json.p + v->json.n);
  snprintf(out, n, "%.*s", (int)(e - start), start);
  return out;
}

/* kl_json_check_meta answers as kl_json_check_whole does, indexes nothing,
 * and finds metadata's namespace, name and resourceVersion where the two
 * lookups of kl_json_members_in find them: the last of repeated names, only in
 * the top level's last "metadata" when that is an object, never in other
 * objects; a member name with an escape at the top level or in metadata
 * leaves it unsure (not one in another object). */
static void test_check_meta(void) {
  static const struct {
    const char *in, *ns, *name, *rv;
    bool unsure;
  } cases[] = {
      /* clang-format off */
      {"{\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\",\"namespace\":\"ns\",\"labels\":{\"name\":\"y\"},\"resourceVersion\":\"12\",\"name\":\"a\"},\"spec\":{\"name\":\"z\"}}", "\"ns\"", "\"a\"", "\"12\"", false},
      {" { \"metadata\" : { \"name\" : \"a\" ,\n\t\"namespace\" :\"b\" } } ", "\"b\"", "\"a\"", "-", false},
      {"{\"metadata\":{\"name\":\"a\"},\"metadata\":{\"namespace\":\"n\"}}", "\"n\"", "-", "-", false},
      {"{\"metadata\":{\"name\":\"a\"},\"metadata\":1}", "-", "-", "-", false},
      {"{\"metadata\":[{\"name\":\"a\"}],\"spec\":{\"name\":\"b\"}}", "-", "-", "-", false},
      {"{\"spec\":{\"name\":\"x\",\"metadata\":{\"name\":\"y\"}},\"metadata\":{}}", "-", "-", "-", false},
      {"{\"name\":\"x\",\"metadata\":{\"name\":{\"a\":[1]},\"resourceVersion\":12,\"namespace\":null}}", "null", "{\"a\":[1]}", "12", false},
      {"{\"metadata\":{\"name\":\"a\\\"b\",\"labels\":{\"\\u0061\":\"b\"}}}", "-", "\"a\\\"b\"", "-", false},
      {"{\"metad\\u0061ta\":{\"name\":\"a\"}}", NULL, NULL, NULL, true},
      {"{\"metadata\":{\"n\\u0061me\":\"a\"}}", NULL, NULL, NULL, true},
      {"{\"a\\n\":1,\"metadata\":{\"name\":\"a\"}}", NULL, NULL, NULL, true},
      {"{\"spec\":{\"\\u0061\":1},\"metadata\":{\"labels\":{\"\\u0062\":\"\"},\"name\":\"a\"}}", "-", "\"a\"", "-", false},
      /* clang-format on */
  };
  static const char *const top[] = {"metadata"};
  static const char *const keys[] = {"namespace", "name", "resourceVersion"};
  kl_json_ctbuf_t ix = {NULL, 0};
  kl_json_value_t v, w;
  kl_json_meta_t m;
  char buf[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *in = cases[i].in;
    KT_TRUE(kl_json_check_meta(in, strlen(in), &v, &m));
    KT_TRUE(v.containers == NULL && v.ncontainers == 0); /* no index */
    KT_EQ_INT(m.unsure, cases[i].unsure);
    if (m.unsure) continue;
    KT_EQ_STR(meta_text(&v, m.ns, buf, sizeof buf), cases[i].ns);
    KT_EQ_STR(meta_text(&v, m.name, buf, sizeof buf), cases[i].name);
    KT_EQ_STR(meta_text(&v, m.rv, buf, sizeof buf), cases[i].rv);
    kl_json_span_t md, vals[3];
    KT_TRUE(kl_json_members_in(&v, v.json, top, 1, &md));
    if (!md.p || !kl_json_members_in(&v, md, keys, 3, vals))
      memset(vals, 0, sizeof vals);
    KT_TRUE(vals[0].p == m.ns && vals[1].p == m.name && vals[2].p == m.rv);
  }
  /* The same answer as kl_json_check_whole, for every text. */
  for (size_t i = 0; i < sizeof valid_texts / sizeof valid_texts[0]; i++) {
    size_t n = strlen(valid_texts[i]);
    KT_EQ_INT(kl_json_check_meta(valid_texts[i], n, &v, &m),
              kl_json_check_whole(valid_texts[i], n, &w, &ix));
  }
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    if (bad_cases[i].mode != KL_JSON_VALUES || bad_cases[i].max_value) continue;
    if (kl_json_check_meta(bad_cases[i].in, strlen(bad_cases[i].in), &v, &m))
      KT_FAIL_("malformed case %zu taken: %s", i, bad_cases[i].in);
  }
  free(ix.ct);
}

/* --- the checker's instruction sets ----------------------------------------
 */

/* What one check of text says: the answer, the value, the index or the
 * members metadata's walk found. */
typedef struct isa_out {
  bool ok, meta_ok;
  kl_json_value_t v, mv;
  kl_json_meta_t m;
} isa_out_t;

static void isa_check(kl_json_isa_t isa, const char *text, size_t n,
                      kl_json_ctbuf_t *ix, isa_out_t *o) {
  memset(o, 0, sizeof *o);
  o->ok = kl_json_check_whole_isa(isa, text, n, &o->v, ix, NULL);
  o->meta_ok = kl_json_check_whole_isa(isa, text, n, &o->mv, NULL, &o->m);
}

/* Whether isa gives the portable checker's answers for the n bytes at
 * text (a heap copy of exactly n bytes: ASan sees a read past them); why
 * not in *why. ix: room for the two indexes. */
static bool isa_agrees(kl_json_isa_t isa, const char *text, size_t n,
                       kl_json_ctbuf_t ix[2], const char **why) {
  isa_out_t a, b;
  char *c = malloc(n ? n : 1);
  memcpy(c, text, n);
  isa_check(KL_JSON_ISA_PORTABLE, c, n, &ix[0], &a);
  isa_check(isa, c, n, &ix[1], &b);
  *why = NULL;
  if (a.ok != b.ok)
    *why = "answer";
  else if (a.meta_ok != b.meta_ok)
    *why = "metadata walk's answer";
  else if (a.ok && (a.v.json.p != b.v.json.p || a.v.json.n != b.v.json.n ||
                    a.v.offset != b.v.offset || a.v.compact != b.v.compact))
    *why = "value";
  else if (a.ok && (a.v.ncontainers != b.v.ncontainers ||
                    memcmp(a.v.containers, b.v.containers,
                           a.v.ncontainers * sizeof *a.v.containers)))
    *why = "container index";
  else if (a.meta_ok &&
           (a.m.unsure != b.m.unsure ||
            (!a.m.unsure &&
             (a.m.ns != b.m.ns || a.m.name != b.m.name || a.m.rv != b.m.rv))))
    *why = "metadata's members";
  free(c);
  return *why == NULL;
}

/* Every instruction set the processor has gives the portable checker's
 * answers: on the texts above and every fixture, each shifted across a
 * 64-byte block, and on the fixtures with bytes that matter to the block
 * checker (quotes, backslashes, brackets, control and UTF-8 bytes) put in
 * at many places, which makes most of them invalid in ways that a block's
 * masks see and the grammar does not, or the other way round. */
static void test_check_isas(void) {
  static const char put[] = "\"\\{}[],: \n\x01\x7f\x80\xc3\xe2\xed\xf4"
                            "0-.eEtfnu";
  static const kl_json_isa_t isas[] = {KL_JSON_ISA_SSE2, KL_JSON_ISA_AVX2,
                                       KL_JSON_ISA_BEST};
  const char *why;
  kl_json_ctbuf_t ix[2] = {{NULL, 0}, {NULL, 0}};
  size_t texts = 0, mutants = 0, tried = 0;
  strbuf_t t = {0};
  for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
    if (!kl_json_isa_has(isas[k])) continue;
    tried++;
    for (size_t i = 0;
         i < NFIXTURES + sizeof valid_texts / sizeof valid_texts[0] +
                 sizeof bad_cases / sizeof bad_cases[0];
         i++) {
      fixture_t f = {NULL, 0, {NULL, 0}};
      const char *text;
      size_t n;
      if (i < NFIXTURES) {
        fixture_load(fixtures[i], &f);
        text = f.text;
        n = f.n;
      } else if (i < NFIXTURES + sizeof valid_texts / sizeof valid_texts[0]) {
        text = valid_texts[i - NFIXTURES];
        n = strlen(text);
      } else {
        text = bad_cases[i - NFIXTURES -
                         sizeof valid_texts / sizeof valid_texts[0]]
                   .in;
        n = strlen(text);
      }
      for (size_t sh = 0; sh < 64; sh++) { /* sh spaces first */
        t.len = 0;
        for (size_t j = 0; j < sh; j++)
          sb_add(&t, " ", 1);
        sb_add(&t, text, n);
        texts++;
        if (!isa_agrees(isas[k], t.p, t.len, ix, &why))
          KT_FAIL_("isa %d, text %zu shifted by %zu: the %s differs",
                   (int)isas[k], i, sh, why);
      }
      for (size_t j = 0; f.text && j < 600; j++) {
        size_t at = rnd(n);
        t.len = 0;
        sb_add(&t, text, n);
        t.p[at] = put[rnd(sizeof put - 1)];
        if (rnd(4) == 0) t.p[rnd(n)] = put[rnd(sizeof put - 1)];
        mutants++;
        if (!isa_agrees(isas[k], t.p, rnd(8) ? t.len : rnd(t.len + 1), ix,
                        &why))
          KT_FAIL_("isa %d, fixture %zu with byte %zu changed: the %s differs",
                   (int)isas[k], i, at, why);
      }
      free(f.text);
    }
  }
  free(ix[0].ct);
  free(ix[1].ct);
  free(t.p);
  KT_TRUE(tried >= 1);
  KT_TRUE(texts >= 64 * NFIXTURES);
  KT_TRUE(mutants >= 600 * NFIXTURES);
}

static void test_validate_any_value(void) {
  static const char *const ok[] = {"0",     "-1.5e3",     " 12 ",    "\"x\"",
                                   "true",  "null",       "[1,[2]]", "{}",
                                   " [ ] ", "\"\\u00e9\""};
  char err[128];
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int rc = kl_json_validate(ok[i], strlen(ok[i]), 0, err, sizeof err);
    if (rc != KL_OK) KT_FAIL_("%s: %s", ok[i], err);
  }
  static const char *const bad[][2] = {
      {"", "byte 0: unexpected end of stream: no value"},
      {"  ", "byte 2: unexpected end of stream: no value"},
      {"1 2", "byte 2: trailing data after the top-level value"},
      {"[1] x", "byte 4: trailing data after the top-level value"},
      {"-", "byte 1: unexpected end of stream inside the value that starts "
            "at byte 0"},
      {"1.", "byte 2: unexpected end of stream inside the value that starts "
             "at byte 0"},
      {"\"ab", "byte 3: unexpected end of stream inside the value that starts "
               "at byte 0"},
      {"tru", "byte 3: unexpected end of stream inside the value that starts "
              "at byte 0"},
      {"[1,]", "byte 3: expected a value, found ']'"},
      {"01", "byte 1: invalid number (leading zero)"},
      {"[[[", "byte 2: nesting deeper than 2 levels"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = kl_json_validate(bad[i][0], strlen(bad[i][0]), i == 10 ? 2 : 0,
                              err, sizeof err);
    KT_EQ_INT(rc, KL_EPARSE);
    KT_EQ_STR(err, bad[i][1]);
  }
}

/* --- readers of validated JSON ----------------------------------------------
 */

static void test_readers(void) {
  char out[64];
  const char *e = "a\\u00e9\\/\\ud83d\\ude00\\n\\\"z";
  size_t n = kl_json_unescape(e, strlen(e), out);
  KT_EQ_MEM(out, n, "a\xc3\xa9/\xf0\x9f\x98\x80\n\"z");
  e = "\\u0000\\u20ac\\b\\f\\r\\t\\\\";
  n = kl_json_unescape(e, strlen(e), out);
  KT_EQ_INT(n, 9);
  KT_TRUE(memcmp(out, "\0\xe2\x82\xac\b\f\r\t\\", 9) == 0);

  const char *obj = "{ \"a\" : [1, {\"x\":\"}\"}] , \"k\\u00e9y\":\"v\", "
                    "\"n\":-12 , \"s\":\"q\\\"\"}";
  kl_json_span_t o = {obj, strlen(obj)}, v;
  KT_TRUE(kl_json_member(o, "a", &v));
  KT_EQ_MEM(v.p, v.n, "[1, {\"x\":\"}\"}]");
  KT_TRUE(kl_json_member(o, "k\xc3\xa9y", &v));
  KT_EQ_MEM(v.p, v.n, "\"v\"");
  KT_TRUE(kl_json_member(o, "s", &v));
  KT_EQ_MEM(v.p, v.n, "\"q\\\"\"");
  KT_TRUE(!kl_json_member(o, "x", &v));
  KT_TRUE(kl_json_member(o, "n", &v));
  int64_t i;
  KT_TRUE(kl_json_int64(v, &i));
  KT_EQ_INT(i, -12);
  kl_json_span_t arr = {"[1]", 3};
  KT_TRUE(!kl_json_member(arr, "a", &v));
  /* A repeated key gives its last value, as kl_obj_parse and kubelua.json
   * read it (found by spec/fuzz/fuzz_status: a Status whose reason the C
   * side and the client read differently). */
  const char *dup = "{\"reason\":\"A\",\"code\":1,\"reason\":\"B\"}";
  kl_json_span_t d = {dup, strlen(dup)};
  KT_TRUE(kl_json_member(d, "reason", &v));
  KT_EQ_MEM(v.p, v.n, "\"B\"");
  KT_TRUE(kl_json_member(d, "code", &v));
  KT_EQ_MEM(v.p, v.n, "1");
  kl_json_span_t empty = {"{}", 2};
  KT_TRUE(!kl_json_member(empty, "a", &v));

  /* Several keys in one walk: each gets its last value; absent ones NULL. */
  static const char *const keys[] = {"code", "reason", "x", "k\xc3\xa9y"};
  kl_json_span_t vals[4];
  KT_TRUE(kl_json_members(d, keys, 4, vals));
  KT_EQ_MEM(vals[0].p, vals[0].n, "1");
  KT_EQ_MEM(vals[1].p, vals[1].n, "\"B\"");
  KT_TRUE(vals[2].p == NULL && vals[2].n == 0);
  KT_TRUE(vals[3].p == NULL);
  KT_TRUE(kl_json_members(o, keys, 4, vals));
  KT_EQ_MEM(vals[3].p, vals[3].n, "\"v\"");
  KT_TRUE(kl_json_members(empty, keys, 4, vals));
  KT_TRUE(vals[0].p == NULL && vals[1].p == NULL);
  KT_TRUE(!kl_json_members(arr, keys, 4, vals));
  KT_TRUE(vals[0].p == NULL);

  static const struct {
    const char *in;
    bool ok;
    int64_t val;
  } ints[] = {{"0", true, 0},
              {"-0", true, 0},
              {"9223372036854775807", true, INT64_MAX},
              {"-9223372036854775808", true, INT64_MIN},
              {"9223372036854775808", false, 0},
              {"-9223372036854775809", false, 0},
              {"1.0", false, 0},
              {"1e3", false, 0},
              {"-", false, 0},
              {"\"1\"", false, 0}};
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
    kl_json_span_t s = {ints[k].in, strlen(ints[k].in)};
    int64_t got = 0;
    KT_EQ_INT(kl_json_int64(s, &got), ints[k].ok);
    if (ints[k].ok) KT_EQ_INT(got, ints[k].val);
  }

  const char *val = "{\"a\":\"x\\\\\",\"b\":[\"]\"]}tail";
  KT_TRUE(kl_json_skip(val, val + strlen(val)) == val + 21);
  KT_TRUE(kl_json_skip(val, val + 10) == NULL);
  const char *num = "-1.5e3,";
  KT_TRUE(kl_json_skip(num, num + 7) == num + 6);

  n = kl_json_quote("a\"b\\c\n\x01/", 8, out);
  KT_EQ_MEM(out, n, "\"a\\\"b\\\\c\\n\\u0001/\"");
}

int main(void) {
  KT_RUN(test_fixture_bodies_whole_and_cut);
  KT_RUN(test_fixture_watch_streams);
  KT_RUN(test_fixture_watch_raw_sample);
  KT_RUN(test_valid_values);
  KT_RUN(test_malformed_messages);
  KT_RUN(test_list_mode);
  KT_RUN(test_container_index);
  KT_RUN(test_feed_contract_and_tail);
  KT_RUN(test_check);
  KT_RUN(test_check_indexed);
  KT_RUN(test_check_whole);
  KT_RUN(test_check_meta);
  KT_RUN(test_check_isas);
  KT_RUN(test_validate_any_value);
  KT_RUN(test_readers);
  return KT_DONE();
}
