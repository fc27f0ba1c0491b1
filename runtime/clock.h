/* clock.h — the runtime's notion of time.
 *
 * Every module that needs time takes a kl_clock_t instead of calling
 * clock_gettime itself, so tests can drive time by hand (STYLE rule 6).
 * Times are seconds as doubles on a monotonic scale with an arbitrary origin.
 */
#ifndef KL_CLOCK_H
#define KL_CLOCK_H

typedef struct kl_clock {
  double (*now)(void *ud);
  void *ud;
} kl_clock_t;

/* The process's monotonic clock (CLOCK_MONOTONIC), in seconds. */
double kl_clock_monotonic(void *ud);

/* Wall-clock time (CLOCK_REALTIME) in seconds since the Unix epoch, for logs
 * and timestamps that leave the process. */
double kl_clock_wall(void);

/* A clock reading kl_clock_monotonic. */
extern const kl_clock_t kl_clock_system;

static inline double kl_clock_now(const kl_clock_t *c) { return c->now(c->ud); }

#endif
