/* workqueue.c — client-go's rate-limited workqueue on one thread (see
 * workqueue.h and CLIENTGO.md 11).
 *
 * Every key the queue knows has one entry, found through a kl_dict and
 * holding the key bytes inline, its state bits, its metric timestamps and
 * its delay timer. client-go's sets become bits of the entry:
 *   DIRTY      needs processing (client-go's `dirty` set);
 *   PROCESSING handed out by Get, not yet done (`processing`);
 *   QUEUED     in the FIFO, which holds exactly the DIRTY, non-PROCESSING
 *              entries (the invariant of client-go's `queue`);
 *   waiting    the entry's timer is armed (the delaying queue's heap).
 * Waiting is independent of the other bits, as client-go keeps its waiting
 * heap apart from the dirty set. An entry lives while any of these holds and
 * is freed (and removed from the dict) when none does; a known key therefore
 * costs no allocation. The FIFO is a ring of entry pointers; processing
 * entries also sit in an array (each knows its index) so the unfinished-work
 * gauges cost O(processing). The queue owns its entries, FIFO, array, name
 * and limiter; the timers heap belongs to the caller.
 *
 * Callbacks (on_ready, on_drained) are made last, once the state is
 * consistent, and nothing of the entry is touched after them: a re-entrant
 * Get and Done from on_ready may free it. */
#include "workqueue.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dict.h"
#include "error.h"
#include "mem.h"

enum { WQ_DIRTY = 1, WQ_PROCESSING = 2, WQ_QUEUED = 4 };

#define WQ_RING_MIN 16

typedef struct wq_entry {
  kl_timer_t timer; /* first: the timer callback gets the entry back */
  double added;     /* when it last became dirty (queue_duration) */
  double started;   /* when Get handed it out (work_duration) */
  uint64_t hash;    /* kl_hash of the key, for the dict */
  size_t pidx;      /* its index in q->proc while PROCESSING */
  unsigned flags;
  size_t len;
  char key[]; /* len bytes and a NUL */
} wq_entry;

typedef struct wq_hist {
  uint64_t count;
  double sum;
  uint64_t n[KL_WQ_BUCKETS]; /* per bucket, not cumulative */
} wq_hist;

struct kl_wq {
  kl_timers_t *timers;
  const kl_clock_t *clock;
  kl_rl_t *limiter;
  char *name;
  void (*on_ready)(kl_wq_t *q, void *ud);
  void (*on_drained)(kl_wq_t *q, void *ud);
  void *ud;
  kl_dict_t *entries; /* key -> wq_entry */
  wq_entry **ring;    /* the FIFO: ring[(head + i) & (rcap - 1)] */
  size_t head, count, rcap;
  wq_entry **proc; /* PROCESSING entries, unordered */
  size_t nproc, pcap;
  size_t nwaiting;
  int shutting, drain;
  uint64_t depth, adds, retries;
  wq_hist queue_dur, work_dur;
};

static const double bucket_bounds[KL_WQ_BUCKETS - 1] = {
    1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3};

double kl_wq_bucket_bound(int i) {
  return i >= 0 && i < KL_WQ_BUCKETS - 1 ? bucket_bounds[i] : INFINITY;
}

static void hist_observe(wq_hist *h, double v) {
  int i = 0;
  while (i < KL_WQ_BUCKETS - 1 && !(v <= bucket_bounds[i]))
    i++;
  h->n[i]++;
  h->count++;
  h->sum += v;
}

static const char *entry_key(const void *v, size_t *len) {
  const wq_entry *e = v;
  *len = e->len;
  return e->key;
}

static inline double now(const kl_wq_t *q) { return kl_clock_now(q->clock); }

static inline void notify_ready(kl_wq_t *q) {
  if (q->on_ready) q->on_ready(q, q->ud);
}

/* ---- the FIFO ring ---- */

static void ring_resize(kl_wq_t *q, size_t cap) {
  wq_entry **r = kl_xmalloc(cap * sizeof *r);
  for (size_t i = 0; i < q->count; i++)
    r[i] = q->ring[(q->head + i) & (q->rcap - 1)];
  free(q->ring);
  q->ring = r;
  q->rcap = cap;
  q->head = 0;
}

static void ring_push(kl_wq_t *q, wq_entry *e) {
  if (q->count == q->rcap) ring_resize(q, q->rcap * 2);
  q->ring[(q->head + q->count++) & (q->rcap - 1)] = e;
  e->flags |= WQ_QUEUED;
}

static wq_entry *ring_pop(kl_wq_t *q) {
  wq_entry *e = q->ring[q->head];
  q->head = (q->head + 1) & (q->rcap - 1);
  q->count--;
  e->flags &= ~(unsigned)WQ_QUEUED;
  if (q->rcap > WQ_RING_MIN && q->count < q->rcap / 8)
    ring_resize(q, q->rcap / 2);
  return e;
}

/* ---- entries ---- */

static void timer_fired(kl_timer_t *t, void *ud);

static wq_entry *entry_get(const kl_wq_t *q, const char *key, size_t len) {
  return kl_dict_get(q->entries, key, len);
}

static wq_entry *entry_make(kl_wq_t *q, const char *key, size_t len) {
  uint64_t h = kl_hash(key, len);
  wq_entry *e = kl_dict_get_hashed(q->entries, key, len, h);
  if (e) return e;
  e = kl_xmalloc(sizeof *e + len + 1);
  kl_timer_init(&e->timer, timer_fired, q);
  e->added = e->started = 0;
  e->hash = h;
  e->pidx = 0;
  e->flags = 0;
  e->len = len;
  if (len) memcpy(e->key, key, len);
  e->key[len] = '\0';
  kl_dict_set_hashed(q->entries, e, h);
  return e;
}

/* Removes and frees an entry in no state. Does not shrink the dict, so it is
 * safe while iterating over it. */
static void entry_drop(kl_wq_t *q, wq_entry *e) {
  kl_dict_del_hashed(q->entries, e->key, e->len, e->hash);
  free(e);
}

static void proc_add(kl_wq_t *q, wq_entry *e) {
  if (q->nproc == q->pcap) {
    q->pcap = q->pcap ? q->pcap * 2 : 16;
    q->proc = kl_xrealloc(q->proc, q->pcap * sizeof *q->proc);
  }
  e->pidx = q->nproc;
  q->proc[q->nproc++] = e;
}

static void proc_remove(kl_wq_t *q, wq_entry *e) {
  wq_entry *last = q->proc[--q->nproc];
  q->proc[e->pidx] = last;
  last->pidx = e->pidx;
}

/* client-go's Add once the entry exists and the queue is not shutting down:
 * the first add of a dirty period counts and records its time; a processing
 * entry waits for its Done; any other goes on the FIFO. */
static void entry_add(kl_wq_t *q, wq_entry *e) {
  if (e->flags & WQ_DIRTY) return;
  e->flags |= WQ_DIRTY;
  e->added = now(q);
  q->adds++;
  q->depth++;
  if (e->flags & WQ_PROCESSING) return;
  ring_push(q, e);
  notify_ready(q);
}

/* A delay ran out (the timer is disarmed already). */
static void timer_fired(kl_timer_t *t, void *ud) {
  kl_wq_t *q = ud;
  wq_entry *e = (wq_entry *)(void *)t;
  q->nwaiting--;
  if (q->shutting) { /* not reached: shutdown disarms every timer */
    if (!e->flags) entry_drop(q, e);
    return;
  }
  entry_add(q, e);
}

/* ---- the queue ---- */

kl_wq_t *kl_wq_new(kl_timers_t *timers, const kl_wq_opts_t *opts) {
  kl_wq_t *q = kl_xcalloc(1, sizeof *q);
  q->timers = timers;
  q->clock = kl_timers_clock(timers);
  if (opts) {
    q->name = opts->name ? kl_xstrdup(opts->name) : NULL;
    q->limiter = opts->limiter;
    q->on_ready = opts->on_ready;
    q->on_drained = opts->on_drained;
    q->ud = opts->ud;
  }
  if (!q->limiter) q->limiter = kl_rl_default_new(q->clock);
  q->entries = kl_dict_new(entry_key);
  q->rcap = WQ_RING_MIN;
  q->ring = kl_xmalloc(q->rcap * sizeof *q->ring);
  return q;
}

void kl_wq_free(kl_wq_t *q) {
  size_t it = 0;
  wq_entry *e;
  if (!q) return;
  while ((e = kl_dict_next(q->entries, &it))) {
    kl_timers_stop(q->timers, &e->timer);
    free(e);
  }
  kl_dict_free(q->entries);
  free(q->ring);
  free(q->proc);
  kl_rl_free(q->limiter);
  free(q->name);
  free(q);
}

const char *kl_wq_name(const kl_wq_t *q) { return q->name ? q->name : ""; }

int kl_wq_add(kl_wq_t *q, const char *key, size_t len) {
  if (q->shutting) return KL_ESHUTDOWN;
  if (!key) key = "";
  entry_add(q, entry_make(q, key, len));
  return KL_OK;
}

int kl_wq_get(kl_wq_t *q, const char **key, size_t *len) {
  wq_entry *e;
  double t;
  if (q->count == 0) return q->shutting ? KL_ESHUTDOWN : KL_EAGAIN;
  e = ring_pop(q);
  t = now(q);
  e->flags = (e->flags & ~(unsigned)WQ_DIRTY) | WQ_PROCESSING;
  q->depth--;
  hist_observe(&q->queue_dur, t - e->added);
  e->started = t;
  proc_add(q, e);
  *key = e->key;
  *len = e->len;
  return KL_OK;
}

int kl_wq_done(kl_wq_t *q, const char *key, size_t len) {
  wq_entry *e = entry_get(q, key ? key : "", len);
  if (!e || !(e->flags & WQ_PROCESSING)) return KL_ENOENT;
  hist_observe(&q->work_dur, now(q) - e->started);
  e->flags &= ~(unsigned)WQ_PROCESSING;
  proc_remove(q, e);
  /* key may point into e: e is not used after it is freed or handed on. */
  if (e->flags & WQ_DIRTY) {
    ring_push(q, e);
    notify_ready(q);
  } else if (!kl_timer_armed(&e->timer)) {
    entry_drop(q, e);
    kl_dict_shrink(q->entries);
  }
  /* Checked after on_ready, which may have handed out another key. */
  if (q->drain && q->nproc == 0) {
    q->drain = 0;
    if (q->on_drained) q->on_drained(q, q->ud);
  }
  return KL_OK;
}

int kl_wq_add_after(kl_wq_t *q, const char *key, size_t len, double delay) {
  wq_entry *e;
  double at;
  if (q->shutting) return KL_ESHUTDOWN;
  q->retries++;
  if (!(delay > 0)) return kl_wq_add(q, key, len);
  e = entry_make(q, key ? key : "", len);
  at = now(q) + delay;
  if (!kl_timer_armed(&e->timer)) {
    q->nwaiting++;
    kl_timers_start(q->timers, &e->timer, at);
  } else if (at < e->timer.at) {
    kl_timers_start(q->timers, &e->timer, at);
  }
  return KL_OK;
}

int kl_wq_add_rate_limited(kl_wq_t *q, const char *key, size_t len) {
  return kl_wq_add_after(q, key, len, kl_rl_when(q->limiter, key, len));
}

void kl_wq_forget(kl_wq_t *q, const char *key, size_t len) {
  kl_rl_forget(q->limiter, key, len);
}

int kl_wq_num_requeues(kl_wq_t *q, const char *key, size_t len) {
  return kl_rl_num_requeues(q->limiter, key, len);
}

size_t kl_wq_len(const kl_wq_t *q) { return q->count; }
size_t kl_wq_processing(const kl_wq_t *q) { return q->nproc; }
size_t kl_wq_waiting(const kl_wq_t *q) { return q->nwaiting; }
int kl_wq_shutting_down(const kl_wq_t *q) { return q->shutting; }

/* Sets the flag and drops the keys waiting for a delay. */
static void begin_shutdown(kl_wq_t *q) {
  q->shutting = 1;
  if (q->nwaiting) {
    size_t it = 0;
    wq_entry *e;
    while ((e = kl_dict_next(q->entries, &it))) {
      if (!kl_timer_armed(&e->timer)) continue;
      kl_timers_stop(q->timers, &e->timer);
      q->nwaiting--;
      if (!e->flags) entry_drop(q, e); /* deleting the current value is safe */
    }
    kl_dict_shrink(q->entries);
  }
}

void kl_wq_shutdown(kl_wq_t *q) {
  q->drain = 0;
  if (q->shutting) return;
  begin_shutdown(q);
  notify_ready(q);
}

int kl_wq_draining(const kl_wq_t *q) { return q->drain; }

void kl_wq_shutdown_drain(kl_wq_t *q) {
  q->drain = q->nproc > 0;
  if (q->shutting) return;
  begin_shutdown(q);
  notify_ready(q);
}

static void hist_export(const wq_hist *h, kl_wq_histogram_t *out) {
  uint64_t sum = 0;
  out->count = h->count;
  out->sum = h->sum;
  for (int i = 0; i < KL_WQ_BUCKETS; i++)
    out->buckets[i] = sum += h->n[i];
}

void kl_wq_stats(const kl_wq_t *q, kl_wq_stats_t *out) {
  double t = now(q), total = 0, oldest = 0;
  memset(out, 0, sizeof *out);
  out->depth = q->depth;
  out->adds_total = q->adds;
  out->retries_total = q->retries;
  hist_export(&q->queue_dur, &out->queue_duration);
  hist_export(&q->work_dur, &out->work_duration);
  for (size_t i = 0; i < q->nproc; i++) {
    double age = t - q->proc[i]->started;
    total += age;
    if (age > oldest) oldest = age;
  }
  out->unfinished_work_seconds = total;
  out->longest_running_processor_seconds = oldest;
}
