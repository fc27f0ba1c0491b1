/* workqueue.h — client-go's rate-limited workqueue, on one thread.
 *
 * Keys (byte strings) are queued for processing with client-go's guarantees
 * (CLIENTGO.md 11.1-11.5): a key queued twice is processed once; a key is
 * never handed to two workers at once; a key added while it is processed is
 * queued again, once, when it is done; delayed adds wait on timers and then
 * go through Add. Nothing blocks: Get returns KL_EAGAIN when nothing is
 * queued, and the owner parks its workers until on_ready says an item is
 * available. */
#ifndef KL_WORKQUEUE_H
#define KL_WORKQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "ratelimit.h"
#include "timer.h"

typedef struct kl_wq kl_wq_t;

typedef struct kl_wq_opts {
  const char *name; /* copied; NULL for an unnamed queue */
  kl_rl_t *limiter; /* owned by the queue; NULL for kl_rl_default_new */
  /* An item has just been pushed onto the FIFO (by Add, by Done re-queueing
   * it, or by a delay running out): wake one parked worker. Also called once
   * when shutdown starts: wake them all. A worker woken may still find
   * nothing (KL_EAGAIN) if another took the item first. */
  void (*on_ready)(kl_wq_t *q, void *ud);
  /* Shutting down with drain, and the last item being processed was just
   * done. Called at most once per kl_wq_shutdown_drain. */
  void (*on_drained)(kl_wq_t *q, void *ud);
  void *ud;
} kl_wq_opts_t;

/* Histogram buckets: upper bounds 1e-6 * 10^i for i = 0..9, then +Inf. */
#define KL_WQ_BUCKETS 11

typedef struct kl_wq_histogram {
  uint64_t count;
  double sum; /* seconds */
  /* Cumulative, as Prometheus exports them: buckets[i] counts observations
   * <= kl_wq_bucket_bound(i); buckets[KL_WQ_BUCKETS - 1] == count. */
  uint64_t buckets[KL_WQ_BUCKETS];
} kl_wq_histogram_t;

/* client-go's workqueue metrics (CLIENTGO.md 11.5). */
typedef struct kl_wq_stats {
  uint64_t depth;                   /* workqueue_depth: dirty keys */
  uint64_t adds_total;              /* workqueue_adds_total */
  uint64_t retries_total;           /* workqueue_retries_total */
  kl_wq_histogram_t queue_duration; /* workqueue_queue_duration_seconds */
  kl_wq_histogram_t work_duration;  /* workqueue_work_duration_seconds */
  double unfinished_work_seconds;   /* sum of the ages of keys in process */
  double longest_running_processor_seconds;
} kl_wq_stats_t;

/* Returns a new queue. Delayed items are timers in `timers`, which must
 * outlive the queue; all times (delays, metrics) come from
 * kl_timers_clock(timers). opts may be NULL; its callbacks may be NULL. */
kl_wq_t *kl_wq_new(kl_timers_t *timers, const kl_wq_opts_t *opts);
/* Disarms the queue's timers and frees it with its keys and limiter. Calls
 * back nothing. NULL is a no-op. Not from one of the queue's callbacks. */
void kl_wq_free(kl_wq_t *q);
/* The queue's name; "" when unnamed. */
const char *kl_wq_name(const kl_wq_t *q);

/* Every function below that takes a key takes len bytes at key (any bytes;
 * key may be NULL when len is 0). The callbacks are called last, after the
 * queue's state is complete, and may call any kl_wq_* function on the queue
 * except kl_wq_free. */

/* Queues the key unless it is queued already (dedup) or processing (then it
 * is queued again at its Done). Returns 0, or KL_ESHUTDOWN (and ignores the
 * key) when the queue is shutting down. May call on_ready. */
int kl_wq_add(kl_wq_t *q, const char *key, size_t len);
/* Takes the key at the head of the FIFO and marks it processing: returns 0
 * with *key, *len pointing at the queue's copy, valid until kl_wq_done for
 * it. Returns KL_EAGAIN when nothing is queued, KL_ESHUTDOWN when nothing is
 * queued and the queue is shutting down (keys queued before shutdown are
 * still handed out). Never calls back. */
int kl_wq_get(kl_wq_t *q, const char **key, size_t *len);
/* Ends processing of the key; if it was added meanwhile, queues it again
 * (calling on_ready). Calls on_drained when a drain is waiting and nothing is
 * processing any more. Returns 0, or KL_ENOENT when the key was not being
 * processed. */
int kl_wq_done(kl_wq_t *q, const char *key, size_t len);
/* Adds the key after `delay` seconds and counts a retry. A key already
 * waiting keeps the earlier of its two deadlines; delay <= 0 (or NaN) adds it
 * at once (any pending delay stays armed). Returns 0, or KL_ESHUTDOWN (and
 * ignores the key) when shutting down. May call on_ready when delay <= 0;
 * later, the timer's expiry calls it from kl_timers_run. */
int kl_wq_add_after(kl_wq_t *q, const char *key, size_t len, double delay);
/* kl_wq_add_after(q, key, len, kl_rl_when(limiter, key, len)). The limiter
 * counts the call even when the queue is shutting down, as client-go's does. */
int kl_wq_add_rate_limited(kl_wq_t *q, const char *key, size_t len);
/* kl_rl_forget on the queue's limiter: call it after a success. */
void kl_wq_forget(kl_wq_t *q, const char *key, size_t len);
/* kl_rl_num_requeues on the queue's limiter. */
int kl_wq_num_requeues(kl_wq_t *q, const char *key, size_t len);

/* Keys queued in the FIFO (not processing, not waiting for a delay). */
size_t kl_wq_len(const kl_wq_t *q);
/* Keys handed out by Get and not yet done. */
size_t kl_wq_processing(const kl_wq_t *q);
/* Keys waiting for a delay to run out. */
size_t kl_wq_waiting(const kl_wq_t *q);

/* Starts shutting down: later adds are ignored, keys waiting for a delay are
 * dropped, keys already queued are still handed out, then Get returns
 * KL_ESHUTDOWN. The first call of this or kl_wq_shutdown_drain calls
 * on_ready once. Idempotent; after kl_wq_shutdown_drain it ends the drain
 * without calling on_drained. */
void kl_wq_shutdown(kl_wq_t *q);
/* Shuts down as kl_wq_shutdown and, if keys are processing, arms the drain:
 * on_drained is called (once) by the Done that leaves nothing processing.
 * It is not called from this function: if kl_wq_processing() is 0 on return
 * the queue is drained already and on_drained will not come. */
void kl_wq_shutdown_drain(kl_wq_t *q);
int kl_wq_shutting_down(const kl_wq_t *q);
/* Whether a drain is armed: kl_wq_shutdown_drain was called, keys are still
 * processing, and no kl_wq_shutdown has ended the wait. */
int kl_wq_draining(const kl_wq_t *q);

/* The queue's metrics, as of the clock's current time. O(processing). */
void kl_wq_stats(const kl_wq_t *q, kl_wq_stats_t *out);
/* The upper bound of histogram bucket i, in seconds: 1e-6 * 10^i for i < 10,
 * +Inf for i == 10 (and for anything out of range). */
double kl_wq_bucket_bound(int i);

#endif
