/* test_ratelimit.c — client-go's rate limiters with their numbers (T-38):
 * exponential backoff and its clamp, the token bucket's reservations with a
 * frozen and a moving clock, fast-slow, and max-of forwarding. */
#include <math.h>

#include "ratelimit.h"
#include "test.h"

#define K(s) s, sizeof s - 1

static void test_default_limiter_numbers(void) {
  kl_rl_t *rl = kl_rl_default_new(&kt_clock);
  double want = 0.005;
  /* T-38: 5 ms, 10 ms, ..., 655.36 s (18 calls), then 1000 s, 1000 s. */
  for (int i = 0; i < 18; i++, want *= 2)
    KT_EQ_DBL(kl_rl_when(rl, K("k")), want, 1e-9);
  KT_EQ_DBL(want / 2, 655.36, 1e-9);
  KT_EQ_DBL(kl_rl_when(rl, K("k")), 1000, 0);
  KT_EQ_DBL(kl_rl_when(rl, K("k")), 1000, 0);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("k")), 20);
  kl_rl_forget(rl, K("k"));
  KT_EQ_INT(kl_rl_num_requeues(rl, K("k")), 0);
  KT_EQ_DBL(kl_rl_when(rl, K("k")), 0.005, 1e-12);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("k")), 1);
  /* 21 tokens are gone; fresh items use up the other 79 at 5 ms each... */
  for (int i = 0; i < 79; i++) {
    char key[16];
    int n = snprintf(key, sizeof key, "fresh-%d", i);
    KT_EQ_DBL(kl_rl_when(rl, key, (size_t)n), 0.005, 1e-12);
  }
  /* ...then the bucket spaces calls 100 ms apart. */
  KT_EQ_DBL(kl_rl_when(rl, K("x1")), 0.1, 1e-9);
  KT_EQ_DBL(kl_rl_when(rl, K("x2")), 0.2, 1e-9);
  KT_EQ_DBL(kl_rl_when(rl, K("x3")), 0.3, 1e-9);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("x3")), 1);
  kl_rl_free(rl);
}

static void test_bucket_frozen_then_refilled(void) {
  kl_rl_t *rl = kl_rl_bucket_new(&kt_clock, 10, 100);
  for (int i = 0; i < 100; i++)
    KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0, 0);
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0.1, 1e-9);
  KT_EQ_DBL(kl_rl_when(rl, K("any key")), 0.2, 1e-9);
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0.3, 1e-9); /* tokens now -3 */
  KT_EQ_INT(kl_rl_num_requeues(rl, NULL, 0), 0);
  kl_rl_forget(rl, NULL, 0);                     /* a no-op */
  kt_now += 0.5;                                 /* +5 tokens: 2 */
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0, 0);      /* 1 */
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0, 0);      /* 0 */
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0.1, 1e-9); /* -1 */
  kt_now += 1000; /* refills to the burst, no further */
  for (int i = 0; i < 100; i++)
    KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0, 0);
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0.1, 1e-9);
  kt_now -= 10; /* a clock going back adds nothing */
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0.2, 1e-9);
  kt_now += 0.05; /* half a token: -2 + 0.5 - 1 */
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0.25, 1e-9);
  kl_rl_free(rl);
}

static void test_bucket_edge_rates(void) {
  kl_rl_t *inf = kl_rl_bucket_new(&kt_clock, INFINITY, 1);
  kl_rl_t *zero = kl_rl_bucket_new(&kt_clock, 0, 2);
  kl_rl_t *none = kl_rl_bucket_new(&kt_clock, 10, 0);
  for (int i = 0; i < 1000; i++)
    KT_EQ_DBL(kl_rl_when(inf, NULL, 0), 0, 0);
  /* qps 0: the burst is all there is, ever. */
  KT_EQ_DBL(kl_rl_when(zero, NULL, 0), 0, 0);
  KT_EQ_DBL(kl_rl_when(zero, NULL, 0), 0, 0);
  kt_now += 1e6;
  KT_EQ_DBL(kl_rl_when(zero, NULL, 0), KL_RL_NEVER, 0);
  /* burst 0: no reservation can be granted. */
  KT_EQ_DBL(kl_rl_when(none, NULL, 0), KL_RL_NEVER, 0);
  kl_rl_free(inf);
  kl_rl_free(zero);
  kl_rl_free(none);
}

static void test_exponential_clamps_without_overflow(void) {
  kl_rl_t *rl = kl_rl_exponential_new(0.001, 1000);
  for (int i = 0; i < 5000; i++) {
    double d = kl_rl_when(rl, K("\0bin\0"));
    if (!(d >= 0.001 && d <= 1000)) KT_EQ_DBL(d, 1000, 0); /* no inf/NaN */
  }
  KT_EQ_DBL(kl_rl_when(rl, K("\0bin\0")), 1000, 0);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("\0bin\0")), 5001);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("\0bin")), 0); /* a different key */
  KT_EQ_DBL(kl_rl_when(rl, NULL, 0), 0.001, 1e-15); /* the empty key */
  KT_EQ_DBL(kl_rl_when(rl, K("")), 0.002, 1e-15);
  kl_rl_forget(rl, K("\0bin\0"));
  KT_EQ_DBL(kl_rl_when(rl, K("\0bin\0")), 0.001, 1e-15);
  kl_rl_forget(rl, K("never seen")); /* fine */
  kl_rl_free(rl);
  kl_rl_free(NULL);
}

static void test_many_items_are_independent(void) {
  kl_rl_t *rl = kl_rl_exponential_new(1, 1e9);
  char key[32];
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < 5000; i++) {
      int n = snprintf(key, sizeof key, "ns/obj-%d", i);
      double d = kl_rl_when(rl, key, (size_t)n);
      if (d != (double)(1 << round)) KT_EQ_DBL(d, 1 << round, 0);
    }
  for (int i = 0; i < 5000; i++) {
    int n = snprintf(key, sizeof key, "ns/obj-%d", i);
    KT_EQ_INT(kl_rl_num_requeues(rl, key, (size_t)n), 3);
    kl_rl_forget(rl, key, (size_t)n);
    KT_EQ_INT(kl_rl_num_requeues(rl, key, (size_t)n), 0);
  }
  kl_rl_free(rl);
}

static void test_fast_slow(void) {
  kl_rl_t *rl = kl_rl_fast_slow_new(0.5, 7, 3);
  KT_EQ_DBL(kl_rl_when(rl, K("a")), 0.5, 0);
  KT_EQ_DBL(kl_rl_when(rl, K("a")), 0.5, 0);
  KT_EQ_DBL(kl_rl_when(rl, K("a")), 0.5, 0);
  KT_EQ_DBL(kl_rl_when(rl, K("a")), 7, 0);
  KT_EQ_DBL(kl_rl_when(rl, K("a")), 7, 0);
  KT_EQ_DBL(kl_rl_when(rl, K("b")), 0.5, 0);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("a")), 5);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("b")), 1);
  kl_rl_forget(rl, K("a"));
  KT_EQ_INT(kl_rl_num_requeues(rl, K("a")), 0);
  KT_EQ_DBL(kl_rl_when(rl, K("a")), 0.5, 0);
  kl_rl_free(rl);
}

static void test_max_of_forwards(void) {
  kl_rl_t *parts[3];
  parts[0] = kl_rl_fast_slow_new(0.5, 7, 1);
  parts[1] = kl_rl_exponential_new(0.1, 100);
  parts[2] = NULL; /* skipped */
  kl_rl_t *rl = kl_rl_max_of_new(parts, 3);
  /* fast-slow: 0.5, 7, 7, 7; exponential: 0.1, 0.2, 0.4, 0.8. */
  KT_EQ_DBL(kl_rl_when(rl, K("k")), 0.5, 1e-12);
  KT_EQ_DBL(kl_rl_when(rl, K("k")), 7, 1e-12);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("k")), 2);
  kl_rl_forget(parts[0], K("k"));               /* only one child forgets */
  KT_EQ_INT(kl_rl_num_requeues(rl, K("k")), 2); /* the max of 0 and 2 */
  KT_EQ_DBL(kl_rl_when(rl, K("k")), 0.5, 1e-12);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("k")), 3);
  kl_rl_forget(rl, K("k")); /* goes to both */
  KT_EQ_INT(kl_rl_num_requeues(rl, K("k")), 0);
  KT_EQ_DBL(kl_rl_when(rl, K("k")), 0.5, 1e-12);
  KT_EQ_INT(kl_rl_num_requeues(parts[1], K("k")), 1);
  kl_rl_free(rl); /* frees the children */

  rl = kl_rl_max_of_new(NULL, 0);
  KT_EQ_DBL(kl_rl_when(rl, K("k")), 0, 0);
  KT_EQ_INT(kl_rl_num_requeues(rl, K("k")), 0);
  kl_rl_free(rl);
}

int main(void) {
  KT_RUN(test_default_limiter_numbers);
  KT_RUN(test_bucket_frozen_then_refilled);
  KT_RUN(test_bucket_edge_rates);
  KT_RUN(test_exponential_clamps_without_overflow);
  KT_RUN(test_many_items_are_independent);
  KT_RUN(test_fast_slow);
  KT_RUN(test_max_of_forwards);
  return KT_DONE();
}
