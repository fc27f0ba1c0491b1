/* test_informer.c — what the informer caches: objects stay plain until the
 * store and the FIFO hold compress_min_objects keys, then go through the
 * codec; plain_objects keeps them all plain. Either way every cached
 * object's JSON is the one received. */
#include "informer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kt_heap.h"
#include "kt_obj.h"
#include "test.h"
#include "timer.h"

/* The object cached under Pod i's key. */
static kl_obj_t *cached(kl_informer_t *inf, int i) {
  char key[64];
  kl_obj_t *p = kt_pod(i);
  size_t klen = kl_obj_key(p, key, sizeof key);
  kl_obj_unref(p);
  return kl_store_get(kl_informer_store(inf), key, klen);
}

/* The number of Pods first..last cached compressed; checks every cached
 * JSON. */
static int compressed_in(kl_informer_t *inf, int first, int last) {
  int n = 0;
  for (int i = first; i <= last; i++) {
    kl_obj_t *c = cached(inf, i), *p = kt_pod(i);
    KT_TRUE(c != NULL);
    if (c) {
      kl_json_span_t a = kl_obj_json(c), b = kl_obj_json(p);
      KT_TRUE(a.n == b.n && memcmp(a.p, b.p, a.n) == 0);
      n += kl_obj_compressed(c);
    }
    kl_obj_unref(p);
  }
  return n;
}

/* Adds Pods 1..n one at a time, draining after each; returns how many of
 * them are cached compressed. */
static int fill(kl_informer_t *inf, int n) {
  char err[256];
  for (int i = 1; i <= n; i++) {
    kl_obj_t *p = kt_pod(i);
    KT_EQ_INT(kl_informer_add(inf, p, err, sizeof err), 0);
    while (kl_informer_run(inf, 64)) {
    }
    kl_obj_unref(p);
  }
  KT_EQ_INT(kl_store_len(kl_informer_store(inf)), n);
  return compressed_in(inf, 1, n);
}

static void test_compresses_once_the_cache_is_large(void) {
  size_t h0 = heap_used();
  kl_informer_opts_t io = {0};
  io.name = "pods";
  io.compress_min_objects = 5;
  kl_informer_t *inf = kl_informer_new(&io);
  /* Pods 1-5 come before the threshold (the key being queued is not yet
   * counted), 6-119 fill the 128 KiB content, 120-135 are the samples of
   * the entropy tables, 136-140 are compressed. */
  KT_EQ_INT(fill(inf, 140), 5);
  kl_informer_free(inf);
  KT_EQ_INT(heap_used(), h0);
}

static void test_small_caches_and_plain_objects_stay_plain(void) {
  size_t h0 = heap_used();
  kl_informer_opts_t io = {0};
  io.name = "pods";
  kl_informer_t *inf = kl_informer_new(&io); /* KL_INFORMER_COMPRESS_MIN */
  KT_EQ_INT(fill(inf, 40), 0);
  kl_informer_free(inf);
  io.plain_objects = true;
  io.compress_min_objects = 1;
  inf = kl_informer_new(&io);
  KT_EQ_INT(fill(inf, 40), 0);
  kl_informer_free(inf);
  KT_EQ_INT(heap_used(), h0);
}

/* Objects leave their labels and owners in their JSON (no index reads
 * them on every change) until kl_informer_keep_refs: then they keep tables
 * of them (one label, 16 bytes, one owner, 36). Both read alike. */
static void test_labels_and_owners_left_in_the_json(void) {
  size_t h0 = heap_used();
  const char *pod =
      "{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\",\"labels\":"
      "{\"app\":\"web\"},\"ownerReferences\":[{\"uid\":\"u\","
      "\"controller\":true}]}}";
  char err[256];
  kl_informer_opts_t io = {0};
  io.name = "pods";
  kl_informer_t *inf = kl_informer_new(&io);
  kl_obj_t *o[2];
  for (int i = 0; i < 2; i++) {
    if (i == 1) kl_informer_keep_refs(inf);
    KT_EQ_INT(kl_informer_parse(inf, pod, strlen(pod), &o[i], err, sizeof err),
              0);
    kl_json_span_t v;
    KT_TRUE(kl_obj_label_get(o[i], "app", 3, &v));
    KT_TRUE(v.n == 3 && memcmp(v.p, "web", 3) == 0);
    kl_obj_owner_t w;
    KT_TRUE(kl_obj_controller(o[i], &w));
    KT_TRUE(w.uid.n == 1 && w.uid.p[0] == 'u');
  }
  KT_EQ_INT(kl_obj_size(o[0]), kl_obj_size(o[1]) - 16 - 36);
  kl_obj_unref(o[0]);
  kl_obj_unref(o[1]);
  kl_informer_free(inf);
  KT_EQ_INT(heap_used(), h0);
}

/* The body of a list of Pods first..last; adds their plain sizes to *plain. */
static char *list_body(int first, int last, size_t *n, size_t *plain) {
  size_t cap = 1 << 19;
  char *body = malloc(cap);
  *n = (size_t)snprintf(
      body, cap,
      "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":"
      "{\"resourceVersion\":\"9\"},\"items\":[");
  for (int i = first; i <= last; i++) {
    kl_obj_t *p = kt_pod(i);
    kl_json_span_t j = kl_obj_json(p);
    *plain += kl_obj_size(p);
    *n += (size_t)snprintf(body + *n, cap - *n, "%s%.*s", i > first ? "," : "",
                           (int)j.n, j.p);
    kl_obj_unref(p);
  }
  *n += (size_t)snprintf(body + *n, cap - *n, "]}");
  return body;
}

/* Collects the list of Pods first..last and replaces the content with it;
 * returns the heap the collected items took before the Replace. */
static size_t relist(kl_informer_t *inf, int first, int last, size_t *plain) {
  char err[256];
  size_t n;
  char *body = list_body(first, last, &n, plain);
  kl_informer_list_t *l = kl_informer_list_begin(inf);
  size_t before = heap_used();
  KT_EQ_INT(kl_informer_list_feed(l, body, n, err, sizeof err), 0);
  const kl_json_list_t *env;
  KT_EQ_INT(kl_informer_list_page_end(l, &env, err, sizeof err), 0);
  size_t held = heap_used() - before;
  KT_EQ_INT(kl_informer_list_count(l), last - first + 1);
  KT_EQ_INT(kl_informer_list_commit(l, "9", err, sizeof err), 0);
  kl_informer_list_free(l);
  while (kl_informer_run(inf, 64)) {
  }
  free(body);
  return held;
}

/* Once the codec applies, a list's items are kept compressed as they
 * arrive, not plain until the Replace: a relist of 40 Pods takes less than
 * half the heap of their plain copies. */
static void test_list_items_compressed_as_they_arrive(void) {
  size_t h0 = heap_used();
  kl_informer_opts_t io = {0};
  io.name = "pods";
  io.compress_min_objects = 5;
  kl_informer_t *inf = kl_informer_new(&io);
  size_t plain = 0;
  relist(inf, 1, 140, &plain); /* the codec learns */
  plain = 0;
  size_t held = relist(inf, 141, 180, &plain);
  KT_TRUE(held * 2 < plain);
  KT_EQ_INT(kl_store_len(kl_informer_store(inf)), 40);
  kl_informer_free(inf);
  KT_EQ_INT(heap_used(), h0);
}

/* A list's items that came before the cache was large enough for the codec,
 * and those it learned from, are compressed too once it compresses, not
 * kept plain: with compression from 100 keys, a first list of 400 Pods
 * (130 to learn from) leaves none plain, and before the Replace its items
 * and the codec's state (about 400 KB) take less heap than the plain
 * copies alone. */
static void test_list_items_before_the_codec_compressed(void) {
  size_t h0 = heap_used();
  kl_informer_opts_t io = {0};
  io.name = "pods";
  io.compress_min_objects = 100;
  kl_informer_t *inf = kl_informer_new(&io);
  size_t plain = 0;
  size_t held = relist(inf, 1, 400, &plain);
  KT_EQ_INT(kl_store_len(kl_informer_store(inf)), 400);
  KT_EQ_INT(compressed_in(inf, 1, 400), 400);
  KT_TRUE(held < plain); /* plain items held too: 739 KB against 566 */
  kl_informer_free(inf);
  KT_EQ_INT(heap_used(), h0);
}

/* Updates Pod i (a new object, the same JSON) and drains. */
static void update(kl_informer_t *inf, int i) {
  char err[256];
  kl_obj_t *p = kt_pod(i);
  KT_EQ_INT(kl_informer_update(inf, p, err, sizeof err), 0);
  while (kl_informer_run(inf, 64)) {
  }
  kl_obj_unref(p);
}

/* An informer on timers ts that compresses from 5 keys, synced with Pods
 * 1-140 (the codec learned from them). */
static kl_informer_t *synced(kl_timers_t *ts) {
  kl_informer_opts_t io = {0};
  io.name = "pods";
  io.timers = ts;
  io.compress_min_objects = 5;
  kl_informer_t *inf = kl_informer_new(&io);
  size_t plain = 0;
  relist(inf, 1, 140, &plain);
  return inf;
}

/* After sync, a changed object is cached plain and compressed once it has
 * stayed unchanged for KL_INFORMER_COLD_AFTER seconds; a version replaced
 * before is never compressed. */
static void test_changed_objects_compressed_when_cold(void) {
  size_t h0 = heap_used();
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_informer_t *inf = synced(ts);
  KT_TRUE(kl_obj_compressed(cached(inf, 30)));
  KT_EQ_INT(kl_timers_count(ts), 0);

  update(inf, 30);
  kl_obj_t *first = cached(inf, 30);
  KT_TRUE(!kl_obj_compressed(first));
  KT_EQ_INT(kl_timers_count(ts), 1);
  kt_now += KL_INFORMER_COLD_AFTER / 2;
  kl_timers_run(ts);
  KT_TRUE(cached(inf, 30) == first); /* still recent */
  update(inf, 30);                   /* replaced while recent */
  kl_obj_t *second = cached(inf, 30);
  KT_TRUE(second != first && !kl_obj_compressed(second));
  /* the first version's time: it is gone, nothing to do */
  kt_now += KL_INFORMER_COLD_AFTER * 0.6;
  kl_timers_run(ts);
  KT_TRUE(cached(inf, 30) == second);
  KT_EQ_INT(kl_timers_count(ts), 1);
  kt_now += KL_INFORMER_COLD_AFTER / 2; /* the second's */
  kl_timers_run(ts);
  kl_obj_t *c = cached(inf, 30), *p = kt_pod(30);
  KT_TRUE(kl_obj_compressed(c));
  kl_json_span_t a = kl_obj_json(c), b = kl_obj_json(p);
  KT_TRUE(a.n == b.n && memcmp(a.p, b.p, a.n) == 0);
  kl_obj_unref(p);
  KT_EQ_INT(kl_timers_count(ts), 0);

  kl_informer_free(inf);
  kl_timers_free(ts);
  KT_EQ_INT(heap_used(), h0);
}

/* Changes faster than KL_INFORMER_COLD_AFTER keep the cold queue within
 * as many entries as the store holds keys (140): the heap stays level (64
 * more entries would hold 64 more keys, over 2 KB). */
static void test_cold_queue_bounded(void) {
  size_t h0 = heap_used();
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_informer_t *inf = synced(ts);
  for (int k = 0; k < 140; k++)
    update(inf, 30);
  size_t h1 = heap_used();
  for (int k = 0; k < 64; k++)
    update(inf, 30);
  KT_TRUE(heap_used() < h1 + 512);
  kt_now += KL_INFORMER_COLD_AFTER;
  kl_timers_run(ts);
  KT_TRUE(kl_obj_compressed(cached(inf, 30)));
  kl_informer_free(inf);
  kl_timers_free(ts);
  KT_EQ_INT(heap_used(), h0);
}

int main(int argc, char **argv) {
  (void)argc;
  without_tcache(argv);
  warm_up();
  KT_RUN(test_compresses_once_the_cache_is_large);
  KT_RUN(test_small_caches_and_plain_objects_stay_plain);
  KT_RUN(test_labels_and_owners_left_in_the_json);
  KT_RUN(test_list_items_compressed_as_they_arrive);
  KT_RUN(test_list_items_before_the_codec_compressed);
  KT_RUN(test_changed_objects_compressed_when_cold);
  KT_RUN(test_cold_queue_bounded);
  return KT_DONE();
}
