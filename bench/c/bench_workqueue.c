/* bench_workqueue.c — throughput of the C workqueue's hot path.
 *
 * One op is Add, Get and Done of a fresh key ("ns-%d/pod-%d", formatted
 * before timing), so every op creates and frees a key entry, reads the clock
 * three times and records both duration histograms. The queue runs on the
 * system monotonic clock with the default rate limiter and no callbacks.
 * Prints one JSON line: {"bench":"workqueue_c","ops":N,"c_ops_per_s":X}. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mem.h"
#include "timer.h"
#include "workqueue.h"

enum { N = 2000000 };

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void) {
  char *buf = kl_xmalloc((size_t)N * 24);
  size_t *off = kl_xmalloc(((size_t)N + 1) * sizeof *off);
  size_t pos = 0;
  for (int i = 0; i < N; i++) {
    off[i] = pos;
    pos += (size_t)snprintf(buf + pos, 24, "ns-%d/pod-%d", i % 100, i);
  }
  off[N] = pos;

  kl_timers_t *ts = kl_timers_new(&kl_clock_system);
  kl_wq_opts_t opts = {"bench", NULL, NULL, NULL, NULL};
  kl_wq_t *q = kl_wq_new(ts, &opts);
  const char *key;
  size_t len;
  int bad = 0;

  double t0 = wall();
  for (int i = 0; i < N; i++) {
    bad |= kl_wq_add(q, buf + off[i], off[i + 1] - off[i]);
    bad |= kl_wq_get(q, &key, &len);
    bad |= kl_wq_done(q, key, len);
  }
  double t1 = wall();

  if (bad || kl_wq_len(q) || kl_wq_processing(q)) {
    fprintf(stderr, "bench_workqueue: the queue misbehaved\n");
    return 1;
  }
  printf("{\"bench\":\"workqueue_c\",\"ops\":%d,\"c_ops_per_s\":%.0f}\n", N,
         N / (t1 - t0));
  kl_wq_free(q);
  kl_timers_free(ts);
  free(off);
  free(buf);
  return 0;
}
