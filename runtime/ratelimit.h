/* ratelimit.h — client-go's workqueue rate limiters (CLIENTGO.md 11.4).
 *
 * A limiter answers "how long should this item wait before it is retried?"
 * (When), counts the retries of an item (NumRequeues) and forgets an item
 * after success (Forget). Delays are seconds. Per-item limiters key their
 * state by the item's bytes; the bucket ignores keys, so it also serves as a
 * plain QPS limiter with key NULL. */
#ifndef KL_RATELIMIT_H
#define KL_RATELIMIT_H

#include <stddef.h>

#include "clock.h"

typedef struct kl_rl kl_rl_t;

/* The delay of a reservation that can never be granted (a bucket with burst
 * 0): Go's rate.InfDuration, (2^63 - 1) ns, in seconds. */
#define KL_RL_NEVER 9223372036.854775807

/* ItemExponentialFailureRateLimiter: When returns min(base * 2^n, max), n
 * being the item's failures before the call, then counts one more failure.
 * Large n clamps to max (never inf or NaN). */
kl_rl_t *kl_rl_exponential_new(double base, double max);
/* BucketRateLimiter over golang.org/x/time/rate: a bucket of `burst` tokens,
 * full at first, refilled at qps tokens per second as read from clock
 * (copied). Every When takes one token, even when that leaves the bucket
 * negative, and returns the time until the deficit is refilled (deficit/qps).
 * qps 0 grants only the first `burst` calls (and KL_RL_NEVER after); qps of
 * DBL_MAX or more (Go's rate.Inf) always returns 0. NumRequeues is 0 and
 * Forget does nothing. */
kl_rl_t *kl_rl_bucket_new(const kl_clock_t *clock, double qps, int burst);
/* ItemFastSlowRateLimiter: counts the item's attempts, then returns `fast`
 * while the count is at most max_fast, else `slow`. */
kl_rl_t *kl_rl_fast_slow_new(double fast, double slow, int max_fast);
/* MaxOfRateLimiter: When asks every limiter (each one counts the call) and
 * returns the largest delay; NumRequeues is the largest count; Forget goes to
 * all. Takes ownership of the n limiters (NULL entries are skipped); the
 * array itself is copied. With no limiters, When returns 0. */
kl_rl_t *kl_rl_max_of_new(kl_rl_t **limiters, size_t n);
/* DefaultControllerRateLimiter: MaxOf(Exponential(0.005, 1000),
 * Bucket(clock, 10, 100)). */
kl_rl_t *kl_rl_default_new(const kl_clock_t *clock);

/* The delay in seconds before the item may be retried; counts the call. key
 * may be NULL when len is 0 (the empty key; the bucket's keyless use). */
double kl_rl_when(kl_rl_t *rl, const char *key, size_t len);
/* Forgets the item's failures, so its next delay starts over. */
void kl_rl_forget(kl_rl_t *rl, const char *key, size_t len);
/* How many times When was called for the item since it was last forgotten. */
int kl_rl_num_requeues(kl_rl_t *rl, const char *key, size_t len);
/* Frees the limiter and, for max-of, the limiters it owns. NULL is a no-op. */
void kl_rl_free(kl_rl_t *rl);

#endif
