/* test_workqueue.c — client-go's workqueue on one thread (T-35..T-39):
 * dedup, no double processing, shutdown and drain, delays, rate limiting,
 * metrics, the on_ready/on_drained contract with re-entrant callbacks, many
 * and binary keys, and a randomized run against a model of client-go's sets.
 * Time is the fake clock; delays fire from kl_timers_run. */
#include <math.h>
#include <stdint.h>

#include "error.h"
#include "test.h"
#include "workqueue.h"

#define K(s) s, sizeof s - 1

/* ---- callback recording ---- */

static int nready, ndrained;

static void count_ready(kl_wq_t *q, void *ud) {
  (void)q;
  (void)ud;
  nready++;
}

static void count_drained(kl_wq_t *q, void *ud) {
  (void)q;
  (void)ud;
  ndrained++;
}

static kl_wq_t *new_queue(kl_timers_t *ts, const char *name, kl_rl_t *rl) {
  kl_wq_opts_t o = {name, rl, count_ready, count_drained, NULL};
  nready = ndrained = 0;
  return kl_wq_new(ts, &o);
}

/* Gets a key and checks it is `want` (a C string); returns the rc. */
#define GET_IS(q, want)                                                        \
  do {                                                                         \
    const char *k_ = NULL;                                                     \
    size_t n_ = 0;                                                             \
    KT_EQ_INT(kl_wq_get((q), &k_, &n_), 0);                                    \
    KT_EQ_MEM(k_, n_, want);                                                   \
  } while (0)

#define GET_RC(q, rc)                                                          \
  do {                                                                         \
    const char *k_;                                                            \
    size_t n_;                                                                 \
    KT_EQ_INT(kl_wq_get((q), &k_, &n_), rc);                                   \
  } while (0)

/* ---- T-35 ---- */

static void test_dedup_and_no_concurrent_processing(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  kl_wq_stats_t st;
  KT_EQ_INT(kl_wq_add(q, K("k")), 0);
  KT_EQ_INT(kl_wq_add(q, K("k")), 0); /* deduplicated */
  KT_EQ_INT(kl_wq_len(q), 1);
  KT_EQ_INT(nready, 1);
  GET_IS(q, "k");
  KT_EQ_INT(kl_wq_len(q), 0);
  KT_EQ_INT(kl_wq_processing(q), 1);
  KT_EQ_INT(kl_wq_add(q, K("k")), 0); /* while processing: not queued */
  KT_EQ_INT(kl_wq_len(q), 0);
  KT_EQ_INT(nready, 1);
  GET_RC(q, KL_EAGAIN); /* a second worker finds nothing */
  KT_EQ_INT(kl_wq_done(q, K("k")), 0);
  KT_EQ_INT(nready, 2); /* re-queued by Done */
  KT_EQ_INT(kl_wq_len(q), 1);
  GET_IS(q, "k");
  GET_RC(q, KL_EAGAIN); /* exactly once */
  KT_EQ_INT(kl_wq_done(q, K("k")), 0);
  KT_EQ_INT(kl_wq_done(q, K("k")), KL_ENOENT);
  KT_EQ_INT(kl_wq_len(q) + kl_wq_processing(q), 0);
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.adds_total, 2);
  KT_EQ_INT(st.depth, 0);
  KT_EQ_INT(ndrained, 0);
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_done_of_unknown_or_queued_key(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  KT_EQ_INT(kl_wq_done(q, K("nope")), KL_ENOENT);
  kl_wq_add(q, K("a"));
  KT_EQ_INT(kl_wq_done(q, K("a")), KL_ENOENT); /* queued, not processing */
  KT_EQ_INT(kl_wq_len(q), 1);
  GET_IS(q, "a");
  KT_EQ_INT(kl_wq_done(q, K("a")), 0);
  kl_wq_free(q);
  kl_timers_free(ts);
}

/* ---- T-36 ---- */

static void test_shutdown_hands_out_queued_then_stops(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  kl_wq_add(q, K("a"));
  kl_wq_add(q, K("b"));
  KT_EQ_INT(kl_wq_shutting_down(q), 0);
  kl_wq_shutdown(q);
  KT_EQ_INT(kl_wq_shutting_down(q), 1);
  KT_EQ_INT(nready, 3); /* two items, then shutdown */
  KT_EQ_INT(kl_wq_add(q, K("c")), KL_ESHUTDOWN);
  KT_EQ_INT(kl_wq_len(q), 2);
  GET_IS(q, "a");
  GET_IS(q, "b");
  GET_RC(q, KL_ESHUTDOWN);
  GET_RC(q, KL_ESHUTDOWN);
  kl_wq_shutdown(q); /* idempotent */
  KT_EQ_INT(nready, 3);
  KT_EQ_INT(kl_wq_done(q, K("a")), 0);
  KT_EQ_INT(kl_wq_done(q, K("b")), 0);
  KT_EQ_INT(ndrained, 0); /* no drain was asked for */
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_shutdown_drain_waits_for_processing(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  kl_wq_add(q, K("a"));
  kl_wq_add(q, K("b"));
  GET_IS(q, "a");
  kl_wq_add(q, K("a")); /* re-added while processing */
  kl_wq_shutdown_drain(q);
  KT_EQ_INT(kl_wq_processing(q), 1); /* the caller waits */
  KT_EQ_INT(ndrained, 0);            /* never from the call itself */
  KT_EQ_INT(nready, 3);
  GET_IS(q, "b"); /* workers keep draining the FIFO */
  KT_EQ_INT(kl_wq_done(q, K("a")), 0);
  KT_EQ_INT(ndrained, 0); /* b still processing */
  KT_EQ_INT(kl_wq_len(q), 1);
  KT_EQ_INT(nready, 4); /* a re-queued even while shutting down */
  KT_EQ_INT(kl_wq_done(q, K("b")), 0);
  KT_EQ_INT(ndrained, 1);
  GET_IS(q, "a");
  KT_EQ_INT(kl_wq_done(q, K("a")), 0);
  KT_EQ_INT(ndrained, 1); /* once */
  GET_RC(q, KL_ESHUTDOWN);
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_shutdown_drain_edge_cases(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  /* Nothing processing: drained already, on_drained never comes. */
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  kl_wq_add(q, K("a"));
  kl_wq_shutdown_drain(q);
  KT_EQ_INT(kl_wq_processing(q), 0);
  GET_IS(q, "a");
  kl_wq_done(q, K("a"));
  KT_EQ_INT(ndrained, 0);
  kl_wq_free(q);
  /* A later shutdown ends the drain without on_drained. */
  q = new_queue(ts, NULL, NULL);
  kl_wq_add(q, K("a"));
  GET_IS(q, "a");
  kl_wq_shutdown_drain(q);
  kl_wq_shutdown(q);
  KT_EQ_INT(nready, 2);
  kl_wq_done(q, K("a"));
  KT_EQ_INT(ndrained, 0);
  kl_wq_free(q);
  /* Drain asked after a plain shutdown still works. */
  q = new_queue(ts, NULL, NULL);
  kl_wq_add(q, K("a"));
  GET_IS(q, "a");
  kl_wq_shutdown(q);
  kl_wq_shutdown_drain(q);
  KT_EQ_INT(nready, 2);
  kl_wq_done(q, K("a"));
  KT_EQ_INT(ndrained, 1);
  kl_wq_free(q);
  kl_timers_free(ts);
}

/* ---- T-37 ---- */

static void test_add_after_earliest_deadline_wins(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  for (int order = 0; order < 2; order++) {
    double first = order == 0 ? 10 : 2, second = order == 0 ? 2 : 10;
    double t0 = kt_now;
    KT_EQ_INT(kl_wq_add_after(q, K("k"), first), 0);
    KT_EQ_INT(kl_wq_add_after(q, K("k"), second), 0);
    KT_EQ_INT(kl_wq_waiting(q), 1);
    KT_EQ_INT(kl_timers_count(ts), 1);
    KT_EQ_INT(kl_wq_len(q), 0);
    kt_now = t0 + 1.999;
    KT_EQ_INT(kl_timers_run(ts), 0);
    GET_RC(q, KL_EAGAIN);
    kt_now = t0 + 2;
    KT_EQ_INT(kl_timers_run(ts), 1);
    KT_EQ_INT(kl_wq_waiting(q), 0);
    KT_EQ_INT(kl_wq_len(q), 1);
    GET_IS(q, "k");
    KT_EQ_INT(kl_wq_done(q, K("k")), 0);
    kt_now = t0 + 20;
    KT_EQ_INT(kl_timers_run(ts), 0); /* handed out once only */
    KT_EQ_INT(kl_wq_len(q), 0);
  }
  KT_EQ_INT(nready, 2);
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_add_after_zero_and_negative(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  kl_wq_stats_t st;
  KT_EQ_INT(kl_wq_add_after(q, K("z"), 0), 0);
  KT_EQ_INT(kl_wq_len(q), 1); /* at once */
  KT_EQ_INT(kl_wq_add_after(q, K("z"), -5), 0);
  KT_EQ_INT(kl_wq_add_after(q, K("n"), NAN), 0);
  KT_EQ_INT(kl_wq_len(q), 2);
  KT_EQ_INT(kl_wq_waiting(q), 0);
  KT_EQ_INT(kl_timers_count(ts), 0);
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.retries_total, 3);
  KT_EQ_INT(st.adds_total, 2);
  /* A zero delay leaves an armed one alone. */
  KT_EQ_INT(kl_wq_add_after(q, K("w"), 1), 0);
  KT_EQ_INT(kl_wq_add_after(q, K("w"), 0), 0);
  KT_EQ_INT(kl_wq_waiting(q), 1);
  KT_EQ_INT(kl_wq_len(q), 3);
  kt_now += 1;
  KT_EQ_INT(kl_timers_run(ts), 1);
  KT_EQ_INT(kl_wq_len(q), 3); /* still queued: deduplicated */
  KT_EQ_INT(nready, 3);
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_delay_runs_out_while_processing(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  kl_wq_add(q, K("k"));
  GET_IS(q, "k");
  kl_wq_add_after(q, K("k"), 1);
  kt_now += 1;
  KT_EQ_INT(kl_timers_run(ts), 1);
  KT_EQ_INT(kl_wq_len(q), 0); /* waits for Done */
  KT_EQ_INT(nready, 1);
  kl_wq_done(q, K("k"));
  KT_EQ_INT(nready, 2);
  GET_IS(q, "k");
  kl_wq_done(q, K("k"));
  /* A delay outliving the processing keeps the entry. */
  kl_wq_add(q, K("j"));
  GET_IS(q, "j");
  kl_wq_add_after(q, K("j"), 5);
  kl_wq_done(q, K("j"));
  KT_EQ_INT(kl_wq_waiting(q), 1);
  kt_now += 5;
  kl_timers_run(ts);
  GET_IS(q, "j");
  kl_wq_done(q, K("j"));
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_shutdown_drops_waiting_and_ignores_add_after(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  kl_wq_stats_t st;
  kl_wq_add_after(q, K("a"), 5);
  kl_wq_add_after(q, K("b"), 7);
  kl_wq_add(q, K("b"));
  kl_wq_add(q, K("c"));
  GET_IS(q, "b");
  kl_wq_add_after(q, K("c"), 3);
  KT_EQ_INT(kl_wq_waiting(q), 3);
  kl_wq_shutdown(q);
  KT_EQ_INT(kl_wq_waiting(q), 0);
  KT_EQ_INT(kl_timers_count(ts), 0);
  KT_EQ_INT(kl_wq_add_after(q, K("d"), 1), KL_ESHUTDOWN);
  KT_EQ_INT(kl_wq_add_after(q, K("d"), 0), KL_ESHUTDOWN);
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.retries_total, 3); /* not counted while shutting down */
  kt_now += 100;
  KT_EQ_INT(kl_timers_run(ts), 0);
  GET_IS(q, "c");
  GET_RC(q, KL_ESHUTDOWN);
  KT_EQ_INT(kl_wq_done(q, K("b")), 0);
  KT_EQ_INT(kl_wq_done(q, K("c")), 0);
  kl_wq_free(q);
  kl_timers_free(ts);
}

/* ---- rate limiting ---- */

static void test_add_rate_limited_uses_the_limiter(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, "rl", NULL); /* the default limiter */
  kl_wq_stats_t st;
  KT_EQ_INT(kl_wq_add_rate_limited(q, K("k")), 0);
  KT_EQ_INT(kl_wq_add_rate_limited(q, K("k")), 0); /* 10 ms: later, kept */
  KT_EQ_INT(kl_wq_num_requeues(q, K("k")), 2);
  KT_EQ_INT(kl_wq_waiting(q), 1);
  kt_now += 0.005;
  KT_EQ_INT(kl_timers_run(ts), 1);
  GET_IS(q, "k");
  kl_wq_forget(q, K("k"));
  KT_EQ_INT(kl_wq_num_requeues(q, K("k")), 0);
  KT_EQ_INT(kl_wq_done(q, K("k")), 0);
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.retries_total, 2);
  KT_EQ_INT(st.adds_total, 1);
  kl_wq_shutdown(q);
  /* The limiter still counts while the queue ignores the add. */
  KT_EQ_INT(kl_wq_add_rate_limited(q, K("k")), KL_ESHUTDOWN);
  KT_EQ_INT(kl_wq_num_requeues(q, K("k")), 1);
  kl_wq_free(q);
  kl_timers_free(ts);
}

/* ---- T-39: metrics ---- */

static void test_stats_after_a_scripted_sequence(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, "foo", kl_rl_exponential_new(1, 100));
  kl_wq_t *unnamed = new_queue(ts, NULL, NULL);
  kl_wq_stats_t st;
  double t0 = kt_now;
  KT_EQ_STR(kl_wq_name(q), "foo");
  KT_EQ_STR(kl_wq_name(unnamed), "");
  kl_wq_free(unnamed);

  kl_wq_add(q, K("k"));
  kl_wq_add(q, K("k"));
  kl_wq_add(q, K("m"));
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.depth, 2);
  KT_EQ_INT(st.adds_total, 2);
  KT_EQ_INT(st.queue_duration.count, 0);

  kt_now = t0 + 0.5;
  GET_IS(q, "k"); /* queued 0.5 s: the le=1 bucket */
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.depth, 1);
  KT_EQ_INT(st.queue_duration.count, 1);
  KT_EQ_DBL(st.queue_duration.sum, 0.5, 1e-9);
  for (int i = 0; i < KL_WQ_BUCKETS; i++)
    KT_EQ_INT(st.queue_duration.buckets[i], i >= 6);
  KT_EQ_DBL(kl_wq_bucket_bound(6), 1, 0);
  KT_EQ_DBL(kl_wq_bucket_bound(0), 1e-6, 0);
  KT_EQ_DBL(kl_wq_bucket_bound(9), 1000, 0);
  KT_TRUE(isinf(kl_wq_bucket_bound(10)));

  kl_wq_add(q, K("k")); /* while processing: counts, its add time is now */
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.depth, 2);
  KT_EQ_INT(st.adds_total, 3);

  kt_now = t0 + 2.5;
  GET_IS(q, "m"); /* queued 2.5 s: le=10 */
  kt_now = t0 + 3;
  kl_wq_stats(q, &st);
  KT_EQ_DBL(st.unfinished_work_seconds, 2.5 + 0.5, 1e-9);
  KT_EQ_DBL(st.longest_running_processor_seconds, 2.5, 1e-9);

  kl_wq_done(q, K("k")); /* worked 2.5 s: le=10; re-queued */
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.work_duration.count, 1);
  KT_EQ_DBL(st.work_duration.sum, 2.5, 1e-9);
  for (int i = 0; i < KL_WQ_BUCKETS; i++)
    KT_EQ_INT(st.work_duration.buckets[i], i >= 7);
  KT_EQ_DBL(st.unfinished_work_seconds, 0.5, 1e-9);
  KT_EQ_DBL(st.longest_running_processor_seconds, 0.5, 1e-9);

  kt_now = t0 + 3.0001;
  GET_IS(q, "k"); /* re-added at 0.5: queued 2.5001 s */
  kt_now = t0 + 3.00015;
  kl_wq_done(q, K("k")); /* 50 us: le=1e-4 */
  kl_wq_done(q, K("m"));
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.depth, 0);
  KT_EQ_INT(st.queue_duration.count, 3);
  KT_EQ_DBL(st.queue_duration.sum, 0.5 + 2.5 + 2.5001, 1e-6);
  KT_EQ_INT(st.queue_duration.buckets[6], 1);
  KT_EQ_INT(st.queue_duration.buckets[7], 3);
  KT_EQ_INT(st.work_duration.count, 3);
  KT_EQ_INT(st.work_duration.buckets[1], 0);
  KT_EQ_INT(st.work_duration.buckets[2], 1);
  KT_EQ_INT(st.work_duration.buckets[7], 3);
  KT_EQ_INT(st.work_duration.buckets[10], 3);
  KT_EQ_DBL(st.unfinished_work_seconds, 0, 0);
  KT_EQ_DBL(st.longest_running_processor_seconds, 0, 0);

  /* Retries: AddAfter and AddRateLimited. Over 1000 s lands in +Inf. */
  KT_EQ_INT(st.retries_total, 0);
  kl_wq_add_after(q, K("x"), 1);
  kl_wq_add_rate_limited(q, K("y"));
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.retries_total, 2);
  KT_EQ_INT(st.adds_total, 3); /* nothing became dirty yet */
  KT_EQ_INT(st.depth, 0);
  kl_wq_add(q, K("z"));
  kt_now += 5000;
  GET_IS(q, "z");
  kl_wq_stats(q, &st);
  KT_EQ_INT(st.queue_duration.buckets[9], 3);
  KT_EQ_INT(st.queue_duration.buckets[10], 4);
  kl_wq_done(q, K("z"));
  kl_wq_free(q);
  kl_timers_free(ts);
}

/* ---- callbacks ---- */

static void test_on_ready_exactly_when_promised(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  kl_wq_add(q, K("a"));
  KT_EQ_INT(nready, 1); /* new item */
  kl_wq_add(q, K("a"));
  KT_EQ_INT(nready, 1); /* deduplicated */
  GET_IS(q, "a");
  kl_wq_add(q, K("a"));
  KT_EQ_INT(nready, 1); /* processing: waits for Done */
  kl_wq_done(q, K("a"));
  KT_EQ_INT(nready, 2); /* re-queued */
  kl_wq_add_after(q, K("b"), 1);
  kl_wq_add_after(q, K("a"), 1);
  KT_EQ_INT(nready, 2); /* waiting is not ready */
  kt_now += 1;
  kl_timers_run(ts);
  KT_EQ_INT(nready, 3); /* b turned ready; a was queued already */
  GET_IS(q, "a");
  GET_IS(q, "b");
  kl_wq_done(q, K("a"));
  kl_wq_done(q, K("b"));
  KT_EQ_INT(nready, 3); /* Done of a clean item */
  kl_wq_shutdown(q);
  KT_EQ_INT(nready, 4);
  kl_wq_shutdown_drain(q);
  kl_wq_shutdown(q);
  KT_EQ_INT(nready, 4);
  KT_EQ_INT(ndrained, 0);
  kl_wq_free(q);
  kl_timers_free(ts);
}

/* A worker living inside on_ready: it takes the key at once, re-adds it the
 * first time it sees it (a re-add while processing), and finishes it. */
static int seen_a, seen_b, depth, max_depth;

static void eager_worker(kl_wq_t *q, void *ud) {
  const char *key;
  size_t len;
  (void)ud;
  nready++;
  if (++depth > max_depth) max_depth = depth;
  while (kl_wq_get(q, &key, &len) == 0) {
    int *seen = len == 1 && key[0] == 'a' ? &seen_a : &seen_b;
    if ((*seen)++ == 0) {
      KT_EQ_INT(kl_wq_add(q, key, len), 0);
      KT_EQ_INT(kl_wq_len(q), 0);
    }
    /* key points into the entry that Done may free: Done must not care. */
    KT_EQ_INT(kl_wq_done(q, key, len), 0);
  }
  depth--;
}

static void test_reentrant_calls_from_on_ready(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_opts_t o = {"re", NULL, eager_worker, count_drained, NULL};
  kl_wq_t *q = kl_wq_new(ts, &o);
  nready = ndrained = seen_a = seen_b = depth = max_depth = 0;
  kl_wq_add(q, K("a"));
  KT_EQ_INT(seen_a, 2);
  KT_EQ_INT(nready, 2); /* the add, then the re-queue inside Done */
  KT_EQ_INT(max_depth, 2);
  kl_wq_add_after(q, K("b"), 1);
  kt_now += 1;
  kl_timers_run(ts);
  KT_EQ_INT(seen_b, 2);
  KT_EQ_INT(kl_wq_len(q) + kl_wq_processing(q) + kl_wq_waiting(q), 0);
  kl_wq_shutdown(q); /* the worker finds KL_ESHUTDOWN */
  KT_EQ_INT(nready, 5);
  kl_wq_free(q);
  kl_timers_free(ts);
}

/* on_drained and on_ready re-entering from a drain-completing Done. */
static kl_wq_t *drain_q;
static void drained_then_shutdown(kl_wq_t *q, void *ud) {
  (void)ud;
  ndrained++;
  KT_EQ_INT(kl_wq_processing(q), 0);
  kl_wq_shutdown(q); /* allowed from the callback; no second on_drained */
}

static void ready_takes_one(kl_wq_t *q, void *ud) {
  const char *key;
  size_t len;
  (void)ud;
  nready++;
  if (kl_wq_shutting_down(q) && kl_wq_get(q, &key, &len) == 0)
    kl_wq_done(q, key, len);
}

static void test_drain_callbacks_reentrant(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_opts_t o = {NULL, NULL, ready_takes_one, drained_then_shutdown, NULL};
  drain_q = kl_wq_new(ts, &o);
  nready = ndrained = 0;
  kl_wq_add(drain_q, K("a"));
  GET_IS(drain_q, "a");
  kl_wq_add(drain_q, K("a"));
  kl_wq_shutdown_drain(drain_q); /* on_ready: nothing queued to take */
  KT_EQ_INT(nready, 2);
  /* Done re-queues a; on_ready takes and finishes it re-entrantly, which
   * empties processing and fires on_drained once, from the inner Done. */
  KT_EQ_INT(kl_wq_done(drain_q, K("a")), 0);
  KT_EQ_INT(nready, 3);
  KT_EQ_INT(ndrained, 1);
  KT_EQ_INT(kl_wq_processing(drain_q) + kl_wq_len(drain_q), 0);
  kl_wq_free(drain_q);
  kl_timers_free(ts);
}

/* ---- many keys, binary keys, free ---- */

static void test_many_keys_fifo_order(void) {
  enum { N = 100000 };
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  char buf[32];
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++) {
      int n = snprintf(buf, sizeof buf, "ns-%d/pod-%d", i % 10, i);
      kl_wq_add(q, buf, (size_t)n);
    }
    KT_EQ_INT(kl_wq_len(q), N);
    for (int i = 0; i < N; i++) {
      const char *k;
      size_t len;
      int n = snprintf(buf, sizeof buf, "ns-%d/pod-%d", i % 10, i);
      if (kl_wq_get(q, &k, &len) != 0 || len != (size_t)n ||
          memcmp(k, buf, len) != 0) {
        KT_EQ_INT(i, -1);
        break;
      }
      if (i % 2) kl_wq_done(q, k, len);
    }
    KT_EQ_INT(kl_wq_processing(q), N / 2);
    for (int i = 0; i < N; i += 2) {
      int n = snprintf(buf, sizeof buf, "ns-%d/pod-%d", i % 10, i);
      KT_EQ_INT(kl_wq_done(q, buf, (size_t)n), 0);
    }
    KT_EQ_INT(kl_wq_len(q) + kl_wq_processing(q), 0);
  }
  /* Many delays fire in deadline order. */
  for (int i = 0; i < 1000; i++) {
    int n = snprintf(buf, sizeof buf, "d%d", i);
    kl_wq_add_after(q, buf, (size_t)n, 1 + (999 - i) * 0.001);
  }
  kt_now += 2;
  KT_EQ_INT(kl_timers_run(ts), 1000);
  for (int i = 999; i >= 0; i--) {
    const char *k;
    size_t len;
    snprintf(buf, sizeof buf, "d%d", i);
    KT_EQ_INT(kl_wq_get(q, &k, &len), 0);
    KT_EQ_MEM(k, len, buf);
  }
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_binary_keys(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, NULL, NULL);
  const char *k;
  size_t len;
  kl_wq_add(q, K("a\0b"));
  kl_wq_add(q, K("a\0c"));
  kl_wq_add(q, K("a"));
  kl_wq_add(q, NULL, 0);
  kl_wq_add(q, K("")); /* the same empty key */
  kl_wq_add(q, K("a\0b"));
  KT_EQ_INT(kl_wq_len(q), 4);
  KT_EQ_INT(kl_wq_get(q, &k, &len), 0);
  KT_TRUE(len == 3 && memcmp(k, "a\0b", 3) == 0 && k[3] == '\0');
  KT_EQ_INT(kl_wq_get(q, &k, &len), 0);
  KT_TRUE(len == 3 && memcmp(k, "a\0c", 3) == 0);
  GET_IS(q, "a");
  GET_IS(q, "");
  KT_EQ_INT(kl_wq_done(q, K("a\0")), KL_ENOENT);
  KT_EQ_INT(kl_wq_done(q, K("a\0c")), 0);
  KT_EQ_INT(kl_wq_done(q, NULL, 0), 0);
  KT_EQ_INT(kl_wq_processing(q), 2);
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_free_in_every_state(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, "busy", kl_rl_fast_slow_new(1, 2, 1));
  kl_wq_add(q, K("queued"));
  kl_wq_add(q, K("processing"));
  kl_wq_add(q, K("both"));
  GET_IS(q, "queued");
  GET_IS(q, "processing");
  GET_IS(q, "both");
  kl_wq_add(q, K("queued"));
  kl_wq_add_after(q, K("both"), 3);
  kl_wq_add_rate_limited(q, K("waiting"));
  KT_EQ_INT(kl_timers_count(ts), 2);
  kl_wq_free(q); /* ASan checks that nothing leaks */
  KT_EQ_INT(kl_timers_count(ts), 0);
  kl_wq_free(NULL);
  kl_timers_free(ts);
}

/* ---- a randomized run against a model of client-go's sets ---- */

enum { MK = 24 };

static struct mkey {
  char key[8];
  size_t len;
  int dirty, processing, waiting, fails;
  double at;
  uint64_t seq;
  long last_add, last_get;
} mk[MK];
static int mfifo[MK];
static size_t mhead, mcount;
static uint64_t madds, mretries, mpushes, mseq;
static int mshut;
static uint64_t rng_state;

static uint64_t rng(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * UINT64_C(2685821657736338717);
}

static int mpending(void) {
  for (int k = 0; k < MK; k++)
    if (mk[k].processing || mk[k].dirty || mk[k].waiting) return 1;
  return 0;
}

static void m_add(int k, long op) {
  if (mshut) return;
  mk[k].last_add = op;
  if (mk[k].dirty) return;
  mk[k].dirty = 1;
  madds++;
  if (mk[k].processing) return;
  mfifo[(mhead + mcount++) % MK] = k;
  mpushes++;
}

static void m_add_after(int k, double d, long op) {
  if (mshut) return;
  mretries++;
  if (!(d > 0)) {
    m_add(k, op);
    return;
  }
  mk[k].last_add = op;
  double at = kt_now + d;
  if (!mk[k].waiting || at < mk[k].at) {
    mk[k].waiting = 1;
    mk[k].at = at;
    mk[k].seq = ++mseq;
  }
}

/* The timers due now, in (deadline, arming order), go through Add. */
static void m_fire(long op) {
  for (;;) {
    int best = -1;
    for (int k = 0; k < MK; k++)
      if (mk[k].waiting && mk[k].at <= kt_now &&
          (best < 0 || mk[k].at < mk[best].at ||
           (mk[k].at == mk[best].at && mk[k].seq < mk[best].seq)))
        best = k;
    if (best < 0) return;
    mk[best].waiting = 0;
    long last = mk[best].last_add;
    m_add(best, op);
    mk[best].last_add = last; /* the add that matters was the AddAfter */
  }
}

static void check_against_model(kl_wq_t *q, long op) {
  kl_wq_stats_t st;
  size_t proc = 0, waiting = 0, dirty = 0;
  for (int k = 0; k < MK; k++) {
    proc += (size_t)mk[k].processing;
    waiting += (size_t)mk[k].waiting;
    dirty += (size_t)mk[k].dirty;
  }
  kl_wq_stats(q, &st);
  if (kl_wq_len(q) != mcount || kl_wq_processing(q) != proc ||
      kl_wq_waiting(q) != waiting || st.depth != dirty ||
      st.adds_total != madds || st.retries_total != mretries ||
      (uint64_t)nready != mpushes + (uint64_t)mshut) {
    fprintf(stderr, "  at op %ld:\n", op);
    KT_EQ_INT(kl_wq_len(q), mcount);
    KT_EQ_INT(kl_wq_processing(q), proc);
    KT_EQ_INT(kl_wq_waiting(q), waiting);
    KT_EQ_INT(st.depth, dirty);
    KT_EQ_INT(st.adds_total, madds);
    KT_EQ_INT(st.retries_total, mretries);
    KT_EQ_INT(nready, mpushes + (uint64_t)mshut);
  }
}

/* Which model key has these bytes (keys may hold NULs), or -1. */
static int model_index(const char *key, size_t len) {
  for (int k = 0; k < MK; k++)
    if (mk[k].len == len && memcmp(mk[k].key, key, len) == 0) return k;
  return -1;
}

static void m_get(kl_wq_t *q, long op) {
  const char *key;
  size_t len;
  int rc = kl_wq_get(q, &key, &len);
  if (mcount == 0) {
    KT_EQ_INT(rc, mshut ? KL_ESHUTDOWN : KL_EAGAIN);
    return;
  }
  int k = mfifo[mhead];
  mhead = (mhead + 1) % MK;
  mcount--;
  KT_EQ_INT(rc, 0);
  if (rc != 0) return;
  KT_EQ_INT(model_index(key, len), k);
  KT_TRUE(!mk[k].processing); /* never two workers on one key */
  KT_TRUE(mk[k].dirty);
  mk[k].dirty = 0;
  mk[k].processing = 1;
  mk[k].last_get = op;
}

static void m_done(kl_wq_t *q, int k) {
  int rc = kl_wq_done(q, mk[k].key, mk[k].len);
  KT_EQ_INT(rc, mk[k].processing ? 0 : KL_ENOENT);
  if (!mk[k].processing) return;
  mk[k].processing = 0;
  if (mk[k].dirty) {
    mfifo[(mhead + mcount++) % MK] = k;
    mpushes++;
  }
}

static void random_run(uint64_t seed, int with_shutdown) {
  enum { OPS = 60000 };
  static const double delays[] = {-1, 0, 0.25, 0.5, 1, 1, 2.5, 5};
  static const double steps[] = {0, 0.1, 0.25, 0.5, 1, 3};
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_wq_t *q = new_queue(ts, "model", kl_rl_fast_slow_new(0.5, 2, 2));
  long op;
  memset(mk, 0, sizeof mk);
  mhead = mcount = 0;
  madds = mretries = mpushes = mseq = 0;
  mshut = 0;
  rng_state = seed;
  for (int k = 0; k < MK; k++) {
    mk[k].len = (size_t)snprintf(mk[k].key, sizeof mk[k].key, "k%d", k);
    if (k % 6 == 0) mk[k].key[0] = '\0'; /* binary keys */
    mk[k].last_add = mk[k].last_get = -1;
  }
  for (op = 0; op < OPS && !kt_current_failed; op++) {
    int k = (int)(rng() % MK), r = (int)(rng() % 100);
    if (with_shutdown && op == OPS / 2) {
      kl_wq_shutdown(q);
      mshut = 1;
      for (int j = 0; j < MK; j++)
        mk[j].waiting = 0;
    } else if (r < 25) {
      KT_EQ_INT(kl_wq_add(q, mk[k].key, mk[k].len), mshut ? KL_ESHUTDOWN : 0);
      m_add(k, op);
    } else if (r < 45) {
      m_get(q, op);
    } else if (r < 65) {
      /* Mostly keys being processed, sometimes any key. */
      if (rng() % 4)
        for (int j = 0; j < MK; j++)
          if (mk[(k + j) % MK].processing) {
            k = (k + j) % MK;
            break;
          }
      m_done(q, k);
    } else if (r < 77) {
      double d = delays[rng() % (sizeof delays / sizeof *delays)];
      kl_wq_add_after(q, mk[k].key, mk[k].len, d);
      m_add_after(k, d, op);
    } else if (r < 85) {
      int n = ++mk[k].fails;
      kl_wq_add_rate_limited(q, mk[k].key, mk[k].len);
      m_add_after(k, n <= 2 ? 0.5 : 2, op);
    } else if (r < 88) {
      kl_wq_forget(q, mk[k].key, mk[k].len);
      mk[k].fails = 0;
    } else {
      kt_now += steps[rng() % (sizeof steps / sizeof *steps)];
      kl_timers_run(ts);
      m_fire(op);
    }
    KT_EQ_INT(kl_wq_num_requeues(q, mk[k].key, mk[k].len), mk[k].fails);
    check_against_model(q, op);
  }
  /* Finish: let every delay run out, then work until nothing is left. */
  while (!kt_current_failed && mpending()) {
    kt_now += 10;
    kl_timers_run(ts);
    m_fire(op);
    for (int k = 0; k < MK; k++)
      if (mk[k].processing) m_done(q, k);
    while (mcount && !kt_current_failed) {
      m_get(q, op);
      op++;
    }
    check_against_model(q, op);
  }
  KT_EQ_INT(kl_wq_len(q) + kl_wq_processing(q) + kl_wq_waiting(q), 0);
  if (!with_shutdown)
    for (int k = 0; k < MK; k++)
      if (mk[k].last_add >= 0 && mk[k].last_get <= mk[k].last_add)
        KT_EQ_INT(mk[k].last_get, mk[k].last_add + 1); /* processed after */
  kl_wq_free(q);
  kl_timers_free(ts);
}

static void test_random_against_model(void) {
  for (uint64_t seed = 1; seed <= 12 && !kt_current_failed; seed++)
    random_run(seed * 0x9e3779b97f4a7c15u, seed % 3 == 0);
}

int main(void) {
  KT_RUN(test_dedup_and_no_concurrent_processing);
  KT_RUN(test_done_of_unknown_or_queued_key);
  KT_RUN(test_shutdown_hands_out_queued_then_stops);
  KT_RUN(test_shutdown_drain_waits_for_processing);
  KT_RUN(test_shutdown_drain_edge_cases);
  KT_RUN(test_add_after_earliest_deadline_wins);
  KT_RUN(test_add_after_zero_and_negative);
  KT_RUN(test_delay_runs_out_while_processing);
  KT_RUN(test_shutdown_drops_waiting_and_ignores_add_after);
  KT_RUN(test_add_rate_limited_uses_the_limiter);
  KT_RUN(test_stats_after_a_scripted_sequence);
  KT_RUN(test_on_ready_exactly_when_promised);
  KT_RUN(test_reentrant_calls_from_on_ready);
  KT_RUN(test_drain_callbacks_reentrant);
  KT_RUN(test_many_keys_fifo_order);
  KT_RUN(test_binary_keys);
  KT_RUN(test_free_in_every_state);
  KT_RUN(test_random_against_model);
  return KT_DONE();
}
