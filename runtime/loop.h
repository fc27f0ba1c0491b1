/* loop.h — the one event loop: libev, the deadline heap, deferred work,
 * signals.
 *
 * Everything in a kubelua process runs on this loop's thread. Deferred work
 * (kl_defer_t) runs before the loop next blocks, never inside the callback
 * that queued it: that is how completions resume Lua coroutines (STYLE rule
 * 10). Deadlines live in one kl_timers_t behind one ev_timer. */
#ifndef KL_LOOP_H
#define KL_LOOP_H

#include "clock.h"
#include "timer.h"

struct ev_loop;
typedef struct kl_loop kl_loop_t;
typedef struct kl_defer kl_defer_t;
typedef void kl_defer_fn(kl_defer_t *d);

/* An embedded node of the deferred-work list. */
struct kl_defer {
  kl_defer_t *next, *prev;
  kl_defer_fn *fn;
  int queued;
};

typedef void kl_loop_signal_fn(kl_loop_t *loop, int signum, void *ud);

/* A new loop on its own ev_loop, reading `clock` (NULL: the system clock). */
kl_loop_t *kl_loop_new(const kl_clock_t *clock);
/* Frees the loop. Deferred nodes still queued are forgotten. */
void kl_loop_free(kl_loop_t *loop);

struct ev_loop *kl_loop_ev(kl_loop_t *loop);
kl_timers_t *kl_loop_timers(kl_loop_t *loop);
double kl_loop_now(kl_loop_t *loop);

/* Runs until kl_loop_break. Returns 0, or KL_EINVAL when already running. */
int kl_loop_run(kl_loop_t *loop);
void kl_loop_break(kl_loop_t *loop);
int kl_loop_running(const kl_loop_t *loop);

static inline void kl_defer_init(kl_defer_t *d, kl_defer_fn *fn) {
  d->next = d->prev = NULL;
  d->fn = fn;
  d->queued = 0;
}
/* Queues d to run before the loop next blocks; a no-op if it is queued. */
void kl_loop_defer(kl_loop_t *loop, kl_defer_t *d);
/* Takes d off the list; a no-op if it is not queued. */
void kl_loop_undefer(kl_loop_t *loop, kl_defer_t *d);
/* Runs the deferred nodes queued before this call (nodes they queue wait for
 * the next pass). Returns how many ran. The loop calls it itself. */
size_t kl_loop_run_deferred(kl_loop_t *loop);

/* Calls fn on SIGINT, SIGTERM and SIGHUP (from the loop, not the handler). */
void kl_loop_on_signal(kl_loop_t *loop, kl_loop_signal_fn *fn, void *ud);

#endif
