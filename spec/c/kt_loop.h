/* kt_loop.h — driving one event loop from the C tests that talk HTTP.
 *
 * A test owns EV (the ev_loop of its kl_loop_t) and starts `guard`, a 10 ms
 * repeating timer that only bounds how long one iteration may block; UNTIL
 * runs the loop until a condition holds, within an iteration bound and a
 * wall-clock bound, and WITHIN asks that it hold "promptly". */
#ifndef KT_LOOP_H
#define KT_LOOP_H

#include <ev.h>
#include <time.h>

#include "test.h"

static struct ev_loop *EV;
static ev_timer guard;

static void guard_cb(struct ev_loop *l, ev_timer *w, int revents) {
  (void)l;
  (void)w;
  (void)revents; /* only bounds how long one iteration may block */
}

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void run_once(void) { ev_run(EV, EVRUN_ONCE); }

/* Runs the loop until cond holds: at most 50000 iterations or 10 s. */
#define UNTIL(cond)                                                            \
  do {                                                                         \
    double kt_t0 = wall();                                                     \
    for (int kt_k = 0; kt_k < 50000 && !(cond) && wall() - kt_t0 < 10; kt_k++) \
      run_once();                                                              \
    if (!(cond)) KT_FAIL_("gave up waiting for %s", #cond);                    \
  } while (0)

/* cond must hold within n loop iterations: "promptly". */
#define WITHIN(n, cond)                                                        \
  do {                                                                         \
    int kt_k = 0;                                                              \
    for (; kt_k < (n) && !(cond); kt_k++)                                      \
      run_once();                                                              \
    if (!(cond)) KT_FAIL_("%s not within %d iterations", #cond, (n));          \
  } while (0)

/* Runs n iterations that do not block. */
static inline void spin(int n) {
  for (int i = 0; i < n; i++)
    ev_run(EV, EVRUN_NOWAIT);
}

#endif
