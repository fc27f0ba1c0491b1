/* test_timer.c — the deadline heap: order, re-arming, stopping, bounded runs.
 */
#include "test.h"
#include "timer.h"

static char fired[64];
static size_t nfired;

static void record(kl_timer_t *t, void *ud) {
  (void)t;
  fired[nfired++] = *(const char *)ud;
  fired[nfired] = '\0';
}

static void reset(void) {
  nfired = 0;
  fired[0] = '\0';
}

static void test_fires_in_deadline_order(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_timer_t t[5];
  const char *names = "abcde";
  double at[5] = {5, 1, 3, 2, 4};
  reset();
  for (int i = 0; i < 5; i++) {
    kl_timer_init(&t[i], record, (void *)(names + i));
    kl_timers_start(ts, &t[i], kt_now + at[i]);
  }
  KT_EQ_DBL(kl_timers_next(ts), kt_now + 1, 0);
  kt_now += 3;
  KT_EQ_INT(kl_timers_run(ts), 3);
  KT_EQ_STR(fired, "bdc");
  KT_EQ_INT(kl_timers_count(ts), 2);
  kt_now += 10;
  KT_EQ_INT(kl_timers_run(ts), 2);
  KT_EQ_STR(fired, "bdcea");
  KT_EQ_DBL(kl_timers_next(ts), -1, 0);
  kl_timers_free(ts);
}

static void test_restart_moves_and_stop_disarms(void) {
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  kl_timer_t a, b;
  reset();
  kl_timer_init(&a, record, "a");
  kl_timer_init(&b, record, "b");
  kl_timers_start(ts, &a, kt_now + 1);
  kl_timers_start(ts, &b, kt_now + 2);
  kl_timers_start(ts, &a, kt_now + 3); /* moved later */
  KT_EQ_INT(kl_timers_count(ts), 2);
  kl_timers_stop(ts, &b);
  kl_timers_stop(ts, &b); /* twice is fine */
  KT_TRUE(!kl_timer_armed(&b));
  kt_now += 2.5;
  KT_EQ_INT(kl_timers_run(ts), 0);
  kt_now += 1;
  KT_EQ_INT(kl_timers_run(ts), 1);
  KT_EQ_STR(fired, "a");
  kl_timers_free(ts);
}

static kl_timers_t *spin_ts;
static void rearm_now(kl_timer_t *t, void *ud) {
  record(t, ud);
  kl_timers_start(spin_ts, t, kt_now);
}

static void test_rearm_in_callback_waits_for_next_run(void) {
  kl_timers_t *ts = spin_ts = kl_timers_new(&kt_clock);
  kl_timer_t a;
  reset();
  kl_timer_init(&a, rearm_now, "a");
  kl_timers_start(ts, &a, kt_now);
  KT_EQ_INT(kl_timers_run(ts), 1);
  KT_EQ_INT(kl_timers_run(ts), 1);
  KT_EQ_STR(fired, "aa");
  kl_timers_stop(ts, &a);
  kl_timers_free(ts);
}

static void test_many_random_timers_fire_sorted(void) {
  enum { N = 2000 };
  kl_timers_t *ts = kl_timers_new(&kt_clock);
  static kl_timer_t t[N];
  static double seen[N];
  size_t k = 0;
  srand(7);
  for (int i = 0; i < N; i++) {
    kl_timer_init(&t[i], NULL, NULL);
    kl_timers_start(ts, &t[i], kt_now + (rand() % 1000) / 10.0);
  }
  for (int i = 0; i < N; i += 3)
    kl_timers_stop(ts, &t[i]);
  while (kl_timers_count(ts)) {
    double next = kl_timers_next(ts);
    kl_timer_t *root = NULL;
    for (int i = 0; i < N; i++)
      if (kl_timer_armed(&t[i]) && t[i].idx == 1) root = &t[i];
    KT_TRUE(root && root->at == next);
    kl_timers_stop(ts, root);
    seen[k++] = next;
  }
  KT_EQ_INT(k, N - (N + 2) / 3);
  for (size_t i = 1; i < k; i++)
    KT_TRUE(seen[i - 1] <= seen[i]);
  kl_timers_free(ts);
}

int main(void) {
  KT_RUN(test_fires_in_deadline_order);
  KT_RUN(test_restart_moves_and_stop_disarms);
  KT_RUN(test_rearm_in_callback_waits_for_next_run);
  KT_RUN(test_many_random_timers_fire_sorted);
  return KT_DONE();
}
