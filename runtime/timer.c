/* timer.c — a binary min-heap of embedded timers (see timer.h).
 *
 * Invariants: heap[1..n] holds every armed timer, ordered by (at, seq);
 * heap[i]->idx == i; a disarmed timer has idx 0. The heap array is owned here,
 * the timers by their embedders. */
#include "timer.h"

#include <stdlib.h>

#include "mem.h"

struct kl_timers {
  kl_clock_t clock;
  kl_timer_t **heap; /* 1-based */
  size_t n, cap;
  uint64_t seq;
};

kl_timers_t *kl_timers_new(const kl_clock_t *clock) {
  kl_timers_t *ts = kl_xcalloc(1, sizeof *ts);
  ts->clock = *clock;
  return ts;
}

void kl_timers_free(kl_timers_t *ts) {
  if (!ts) return;
  for (size_t i = 1; i <= ts->n; i++)
    ts->heap[i]->idx = 0;
  free(ts->heap);
  free(ts);
}

const kl_clock_t *kl_timers_clock(const kl_timers_t *ts) { return &ts->clock; }

void kl_timer_init(kl_timer_t *t, kl_timer_fn *fn, void *ud) {
  t->at = 0;
  t->idx = 0;
  t->seq = 0;
  t->fn = fn;
  t->ud = ud;
}

static int before(const kl_timer_t *a, const kl_timer_t *b) {
  return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void place(kl_timers_t *ts, size_t i, kl_timer_t *t) {
  ts->heap[i] = t;
  t->idx = i;
}

static void sift_up(kl_timers_t *ts, size_t i) {
  kl_timer_t *t = ts->heap[i];
  while (i > 1 && before(t, ts->heap[i / 2])) {
    place(ts, i, ts->heap[i / 2]);
    i /= 2;
  }
  place(ts, i, t);
}

static void sift_down(kl_timers_t *ts, size_t i) {
  kl_timer_t *t = ts->heap[i];
  for (;;) {
    size_t c = 2 * i;
    if (c > ts->n) break;
    if (c + 1 <= ts->n && before(ts->heap[c + 1], ts->heap[c])) c++;
    if (!before(ts->heap[c], t)) break;
    place(ts, i, ts->heap[c]);
    i = c;
  }
  place(ts, i, t);
}

void kl_timers_stop(kl_timers_t *ts, kl_timer_t *t) {
  size_t i = t->idx;
  if (i == 0) return;
  kl_timer_t *last = ts->heap[ts->n--];
  t->idx = 0;
  if (last == t) return;
  place(ts, i, last);
  if (i > 1 && before(last, ts->heap[i / 2]))
    sift_up(ts, i);
  else
    sift_down(ts, i);
}

void kl_timers_start(kl_timers_t *ts, kl_timer_t *t, double at) {
  kl_timers_stop(ts, t);
  if (ts->n + 1 >= ts->cap) {
    ts->cap = ts->cap ? ts->cap * 2 : 64;
    ts->heap = kl_xrealloc(ts->heap, ts->cap * sizeof *ts->heap);
  }
  t->at = at;
  t->seq = ++ts->seq;
  ts->heap[++ts->n] = t;
  t->idx = ts->n;
  sift_up(ts, ts->n);
}

double kl_timers_next(const kl_timers_t *ts) {
  return ts->n ? ts->heap[1]->at : -1;
}

size_t kl_timers_count(const kl_timers_t *ts) { return ts->n; }

size_t kl_timers_run(kl_timers_t *ts) {
  double now = kl_clock_now(&ts->clock);
  uint64_t last = ts->seq;
  size_t fired = 0;
  while (ts->n && ts->heap[1]->at <= now && ts->heap[1]->seq <= last) {
    kl_timer_t *t = ts->heap[1];
    kl_timers_stop(ts, t);
    fired++;
    t->fn(t, t->ud);
  }
  return fired;
}
