/* timer.h — many deadlines in one binary heap, behind one loop timer.
 *
 * A kl_timer_t is embedded by its owner (a sleeping task, a delayed workqueue
 * item, a kube.after callback) and armed at an absolute time of the heap's
 * clock. The heap knows nothing of libev: the loop asks kl_timers_next() for
 * the earliest deadline before it polls and calls kl_timers_run() when its one
 * ev_timer fires; tests call kl_timers_run() after moving a fake clock. */
#ifndef KL_TIMER_H
#define KL_TIMER_H

#include <stddef.h>
#include <stdint.h>

#include "clock.h"

typedef struct kl_timer kl_timer_t;
typedef struct kl_timers kl_timers_t;
typedef void kl_timer_fn(kl_timer_t *t, void *ud);

struct kl_timer {
  double at;    /* deadline, on the heap's clock */
  size_t idx;   /* 1-based heap position; 0 when not armed */
  uint64_t seq; /* arming order, breaks ties and bounds one run */
  kl_timer_fn *fn;
  void *ud;
};

/* Returns a new, empty heap reading `clock` (copied). */
kl_timers_t *kl_timers_new(const kl_clock_t *clock);
/* Frees the heap. Timers still armed are forgotten, never called. */
void kl_timers_free(kl_timers_t *ts);
const kl_clock_t *kl_timers_clock(const kl_timers_t *ts);

/* Prepares an embedded timer: not armed, calling fn(t, ud) when it fires. */
void kl_timer_init(kl_timer_t *t, kl_timer_fn *fn, void *ud);
static inline int kl_timer_armed(const kl_timer_t *t) { return t->idx != 0; }

/* Arms t at absolute time `at`, moving it if it was armed already. */
void kl_timers_start(kl_timers_t *ts, kl_timer_t *t, double at);
/* Disarms t; a no-op when it is not armed. */
void kl_timers_stop(kl_timers_t *ts, kl_timer_t *t);

/* The earliest deadline, or -1 when no timer is armed. */
double kl_timers_next(const kl_timers_t *ts);
size_t kl_timers_count(const kl_timers_t *ts);

/* Fires, earliest first, every timer due at the clock's current time that was
 * armed before this call began; a timer armed by a callback waits for the next
 * run, so a callback that re-arms itself at "now" cannot spin. Each timer is
 * disarmed before its callback runs; callbacks may start and stop any timer
 * and may free the memory of their own. Returns the number fired. */
size_t kl_timers_run(kl_timers_t *ts);

#endif
