/* test_objz.c — compressed cached objects: the codec learns from the first
 * objects, then compresses; the JSON comes back byte for byte and every
 * extracted field reads the same as on the plain object. */
#include "objz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"
#include "kt_heap.h"
#include "kt_obj.h"
#include "object.h"
#include "test.h"

#define KT_EQ_SPANS(a, b)                                                      \
  do {                                                                         \
    kl_json_span_t kt_x = (a), kt_y = (b);                                     \
    if (kt_x.n != kt_y.n || memcmp(kt_x.p, kt_y.p, kt_x.n) != 0)               \
      KT_FAIL_("%s == %s: \"%.*s\" != \"%.*s\"", #a, #b, (int)kt_x.n, kt_x.p,  \
               (int)kt_y.n, kt_y.p);                                           \
  } while (0)

static kl_json_span_t cstr(const char *s) {
  kl_json_span_t r = {s, strlen(s)};
  return r;
}

/* Every extracted field of c reads as on p, and the JSON is the same. */
static void same_object(const kl_obj_t *p, const kl_obj_t *c) {
  KT_EQ_SPANS(kl_obj_api_version(c), kl_obj_api_version(p));
  KT_EQ_SPANS(kl_obj_kind(c), kl_obj_kind(p));
  KT_EQ_SPANS(kl_obj_namespace(c), kl_obj_namespace(p));
  KT_EQ_SPANS(kl_obj_name(c), kl_obj_name(p));
  KT_EQ_SPANS(kl_obj_uid(c), kl_obj_uid(p));
  KT_EQ_SPANS(kl_obj_resource_version(c), kl_obj_resource_version(p));
  KT_EQ_INT(kl_obj_generation(c), kl_obj_generation(p));
  kl_json_span_t tp = {"", 0}, tc = {"", 0};
  KT_EQ_INT(kl_obj_deletion_timestamp(c, &tc),
            kl_obj_deletion_timestamp(p, &tp));
  KT_EQ_SPANS(tc, tp);
  char kp[64], kc[64];
  KT_EQ_INT(kl_obj_key(c, kc, sizeof kc), kl_obj_key(p, kp, sizeof kp));
  KT_EQ_STR(kc, kp);
  kl_json_span_t ks = kl_obj_key_span(c);
  KT_EQ_SPANS(ks, cstr(kp));
  KT_EQ_INT(ks.p[ks.n], '\0');
  KT_EQ_INT(kl_obj_label_count(c), kl_obj_label_count(p));
  for (size_t i = 0; i < kl_obj_label_count(p); i++) {
    kl_json_span_t k1, v1, k2, v2;
    kl_obj_label(p, i, &k1, &v1);
    kl_obj_label(c, i, &k2, &v2);
    KT_EQ_SPANS(k2, k1);
    KT_EQ_SPANS(v2, v1);
    KT_TRUE(kl_obj_label_get(c, k1.p, k1.n, &v2));
    KT_EQ_SPANS(v2, v1);
  }
  KT_EQ_INT(kl_obj_owner_count(c), kl_obj_owner_count(p));
  for (size_t i = 0; i < kl_obj_owner_count(p); i++) {
    kl_obj_owner_t a, b;
    kl_obj_owner(p, i, &a);
    kl_obj_owner(c, i, &b);
    KT_EQ_SPANS(b.api_version, a.api_version);
    KT_EQ_SPANS(b.kind, a.kind);
    KT_EQ_SPANS(b.name, a.name);
    KT_EQ_SPANS(b.uid, a.uid);
    KT_EQ_INT(b.controller, a.controller);
    KT_EQ_INT(b.block_owner_deletion, a.block_owner_deletion);
  }
  kl_json_span_t jc = kl_obj_json(c);
  KT_EQ_INT(jc.p[jc.n], '\0');
  KT_EQ_SPANS(jc, kl_obj_json(p));
}

static void test_learns_then_compresses(void) {
  size_t h0 = heap_used();
  kl_objz_opts_t zo = {256, 4096, 0, 4};
  kl_objz_t *z = kl_objz_new(&zo);
  kl_objz_stats_t st;
  size_t learned = 0;
  int i = 1;
  /* Plain while learning: the same object comes back. Four 1.2 KB Pods
   * fill the 4 KiB of content; the four after them are the samples of the
   * entropy tables, not those inside the content. */
  for (; i <= 8; i++) {
    kl_obj_t *p = kt_pod(i), *c = kl_objz_compress(z, p);
    KT_TRUE(c == p);
    KT_TRUE(!kl_obj_compressed(c));
    learned += kl_obj_json(p).n;
    if (i == 3) KT_TRUE(learned < 4096);
    if (i == 4) KT_TRUE(learned >= 4096);
    kl_objz_stats(z, &st);
    /* the 4 KiB content and the entropy tables of the four samples */
    if (i < 8)
      KT_EQ_INT(st.dictionary_bytes, 0);
    else
      KT_TRUE(st.dictionary_bytes > 4096 && st.dictionary_bytes < 4096 + 512);
    kl_obj_unref(c);
    kl_obj_unref(p);
  }
  size_t json = 0, packed = 0;
  for (int n = 0; n < 200; n++, i++) {
    kl_obj_t *p = kt_pod(i), *c = kl_objz_compress(z, p);
    KT_TRUE(c != p);
    KT_TRUE(kl_obj_compressed(c));
    same_object(p, c);
    json += kl_obj_json(p).n;
    packed += kl_obj_size(c);
    /* Compressing a compressed object keeps it. */
    kl_obj_t *again = kl_objz_compress(z, c);
    KT_TRUE(again == c);
    kl_obj_unref(again);
    kl_obj_unref(c);
    kl_obj_unref(p);
  }
  kl_objz_stats(z, &st);
  KT_EQ_INT(st.compressed, 200);
  KT_EQ_INT(st.json_bytes, json);
  KT_TRUE(st.compressed_bytes * 8 < json);
  KT_TRUE(packed * 2 < json); /* with the metadata and tables */
  kl_objz_unref(z);
  KT_EQ_INT(heap_used(), h0);
}

/* A codec whose dictionary is the start of kt_pod(1) (1 KiB) and the
 * entropy tables of kt_pod(9). */
static kl_objz_t *learned_codec(void) {
  kl_objz_opts_t zo = {256, 1024, 0, 1};
  kl_objz_t *z = kl_objz_new(&zo);
  for (int i = 1; i <= 9; i += 8) {
    kl_obj_t *p = kt_pod(i), *c = kl_objz_compress(z, p);
    KT_TRUE(c == p);
    kl_obj_unref(c);
    kl_obj_unref(p);
  }
  return z;
}

static void test_small_and_incompressible_stay_plain(void) {
  size_t h0 = heap_used();
  kl_objz_t *z = learned_codec();
  kl_objz_stats_t st;
  kl_objz_stats(z, &st);
  KT_TRUE(st.dictionary_bytes > 1024 && st.dictionary_bytes < 1024 + 512);

  kl_obj_t *p = kt_obj_of("{\"metadata\":{\"name\":\"short\"}}");
  kl_obj_t *c = kl_objz_compress(z, p);
  KT_TRUE(c == p);
  kl_obj_unref(c);
  kl_obj_unref(p);

  /* 2 KB of pseudo-random base64 does not shrink by a quarter. */
  char json[2200];
  uint32_t x = 2463534242u;
  int n = snprintf(json, sizeof json,
                   "{\"metadata\":{\"name\":\"rnd\"},"
                   "\"data\":\"");
  static const char b64[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int k = 0; k < 2048; k++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    json[n++] = b64[x % 64];
  }
  snprintf(json + n, sizeof json - (size_t)n, "\"}");
  p = kt_obj_of(json);
  c = kl_objz_compress(z, p);
  KT_TRUE(c == p);
  KT_TRUE(!kl_obj_compressed(c));
  kl_obj_unref(c);
  kl_obj_unref(p);

  /* The codec still works after a refusal. */
  p = kt_pod(2);
  c = kl_objz_compress(z, p);
  KT_TRUE(kl_obj_compressed(c));
  same_object(p, c);
  kl_obj_unref(c);
  kl_obj_unref(p);
  kl_objz_stats(z, &st);
  KT_EQ_INT(st.compressed, 1);
  kl_objz_unref(z);
  KT_EQ_INT(heap_used(), h0);
}

/* The bytes of c beside its compressed JSON and the strings it keeps. */
static size_t overhead(kl_objz_t *z, kl_obj_t *p) {
  kl_objz_stats_t a, b;
  kl_objz_stats(z, &a);
  kl_obj_t *c = kl_objz_compress(z, p);
  KT_TRUE(kl_obj_compressed(c));
  kl_objz_stats(z, &b);
  kl_json_span_t ts;
  kl_obj_deletion_timestamp(c, &ts);
  size_t kept = kl_obj_api_version(c).n + kl_obj_kind(c).n +
                kl_obj_namespace(c).n + kl_obj_name(c).n +
                kl_obj_resource_version(c).n + ts.n;
  size_t n = kl_obj_size(c) - (b.compressed_bytes - a.compressed_bytes) - kept;
  same_object(p, c);
  kl_obj_unref(c);
  return n;
}

/* A compressed object keeps its uid, labels and owners only in its JSON:
 * one with three labels, two owners and a uid takes as many bytes beside
 * its JSON as one with none of them. */
static void test_compressed_keeps_no_labels_or_owners(void) {
  size_t h0 = heap_used();
  kl_objz_t *z = learned_codec();
  kl_obj_t *full = kt_pod(2);
  char json[2048];
  int n = snprintf(json, sizeof json,
                   "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{"
                   "\"name\":\"web-2\",\"namespace\":\"ns-2\","
                   "\"resourceVersion\":\"1002\"},\"spec\":{\"containers\":[");
  for (int k = 0; k < 8; k++)
    n += snprintf(json + n, sizeof json - (size_t)n,
                  "%s{\"name\":\"web-%d\",\"image\":\"nginx:1.25\"}",
                  k ? "," : "", k);
  snprintf(json + n, sizeof json - (size_t)n, "]}}");
  kl_obj_t *bare = kt_obj_of(json);
  KT_EQ_INT(kl_obj_label_count(full), 3);
  KT_EQ_INT(kl_obj_owner_count(full), 2);
  KT_EQ_INT(overhead(z, full), overhead(z, bare));
  kl_obj_unref(full);
  kl_obj_unref(bare);
  kl_objz_unref(z);
  KT_EQ_INT(heap_used(), h0);
}

/* Reading the labels of one compressed object, then another's, then the
 * first's again gives each its own (the codec keeps one plain form). */
static void test_labels_of_several_compressed_objects(void) {
  size_t h0 = heap_used();
  kl_objz_t *z = learned_codec();
  kl_obj_t *p2 = kt_pod(2), *p3 = kt_pod(3);
  kl_obj_t *c2 = kl_objz_compress(z, p2), *c3 = kl_objz_compress(z, p3);
  kl_json_span_t v;
  KT_TRUE(kl_obj_label_get(c2, "caf\xc3\xa9", 5, &v));
  KT_EQ_SPANS(v, cstr("cr\xc3\xa8me-2"));
  KT_TRUE(kl_obj_label_get(c3, "caf\xc3\xa9", 5, &v));
  KT_EQ_SPANS(v, cstr("cr\xc3\xa8me-3"));
  kl_obj_owner_t w;
  KT_TRUE(kl_obj_controller(c2, &w));
  KT_EQ_SPANS(w.uid, cstr("rs-2"));
  KT_EQ_SPANS(kl_obj_uid(c3), cstr("00000003-1234-5678-9abc-def012345678"));
  KT_TRUE(!kl_obj_label_get(c2, "none", 4, &v));
  kl_obj_unref(c2); /* the plain form kept for c2 goes with it */
  kl_obj_unref(p2);
  KT_TRUE(kl_obj_controller(c3, &w));
  KT_EQ_SPANS(w.uid, cstr("rs-3"));
  kl_objz_unref(z);
  kl_obj_unref(c3);
  kl_obj_unref(p3);
  KT_EQ_INT(heap_used(), h0);
}

static void test_objects_outlive_the_owner(void) {
  size_t h0 = heap_used();
  kl_objz_t *z = learned_codec();
  kl_obj_t *p2 = kt_pod(2), *p3 = kt_pod(3);
  kl_obj_t *c2 = kl_objz_compress(z, p2), *c3 = kl_objz_compress(z, p3);
  kl_objz_unref(z); /* the informer goes; its objects stay readable */
  same_object(p2, c2);
  same_object(p3, c3);
  same_object(p2, c2);
  kl_obj_unref(c2);
  kl_obj_unref(p2);
  same_object(p3, c3);
  kl_obj_unref(p3);
  kl_obj_unref(c3); /* the last holder frees the codec */
  KT_EQ_INT(heap_used(), h0);
}

/* A span stays valid while three more objects are read, no longer. */
static void test_spans_rotate_over_four_buffers(void) {
  size_t h0 = heap_used();
  kl_objz_t *z = learned_codec();
  kl_obj_t *p[5], *c[5];
  kl_json_span_t j[5];
  for (int i = 0; i < 5; i++) {
    p[i] = kt_pod(10 + i);
    c[i] = kl_objz_compress(z, p[i]);
    KT_TRUE(kl_obj_compressed(c[i]));
  }
  for (int i = 0; i < 4; i++)
    j[i] = kl_obj_json(c[i]);
  for (int i = 0; i < 4; i++)
    KT_EQ_SPANS(j[i], kl_obj_json(p[i]));
  j[4] = kl_obj_json(c[4]);
  KT_TRUE(j[4].p == j[0].p); /* the fifth read reuses the first buffer */
  KT_EQ_SPANS(j[4], kl_obj_json(p[4]));
  for (int i = 0; i < 5; i++) {
    kl_obj_unref(c[i]);
    kl_obj_unref(p[i]);
  }
  kl_objz_unref(z);
  KT_EQ_INT(heap_used(), h0);
}

/* A compressed object's JSON length is read without decompressing it (what
 * inf:stats() sums on each scrape); its JSON is decompressed each time. */
static void test_json_len_without_decompressing(void) {
  size_t h0 = heap_used();
  kl_objz_t *z = learned_codec();
  kl_obj_t *p = kt_pod(2), *c = kl_objz_compress(z, p);
  KT_TRUE(kl_obj_compressed(c));
  kl_objz_stats_t a, b;
  kl_objz_stats(z, &a);
  KT_EQ_INT(kl_obj_json_len(c), kl_obj_json(p).n);
  KT_EQ_INT(kl_obj_json_len(p), kl_obj_json(p).n);
  kl_objz_stats(z, &b);
  KT_EQ_INT(b.decompressed, a.decompressed);
  KT_EQ_INT(kl_obj_json(c).n, kl_obj_json(p).n);
  kl_objz_stats(z, &b);
  KT_EQ_INT(b.decompressed, a.decompressed + 1);
  kl_obj_unref(c);
  kl_obj_unref(p);
  kl_objz_unref(z);
  KT_EQ_INT(heap_used(), h0);
}

int main(int argc, char **argv) {
  (void)argc;
  without_tcache(argv);
  warm_up();
  KT_RUN(test_learns_then_compresses);
  KT_RUN(test_small_and_incompressible_stay_plain);
  KT_RUN(test_compressed_keeps_no_labels_or_owners);
  KT_RUN(test_labels_of_several_compressed_objects);
  KT_RUN(test_objects_outlive_the_owner);
  KT_RUN(test_spans_rotate_over_four_buffers);
  KT_RUN(test_json_len_without_decompressing);
  return KT_DONE();
}
