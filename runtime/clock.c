/* clock.c — the system clocks behind kl_clock_t (see clock.h). */
#include "clock.h"

#include <time.h>

double kl_clock_monotonic(void *ud) {
  struct timespec ts;
  (void)ud;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double kl_clock_wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const kl_clock_t kl_clock_system = {kl_clock_monotonic, NULL};
