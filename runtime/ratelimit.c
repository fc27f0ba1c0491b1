/* ratelimit.c — client-go's workqueue rate limiters (see ratelimit.h).
 *
 * One struct with a kind tag serves all four limiters. The per-item limiters
 * (exponential, fast-slow) keep a kl_dict from the item's bytes to a small
 * record {count, key bytes inline}; a record exists only between the first
 * When for an item and its Forget, and the dict is shrunk after deletions.
 * Counts saturate at INT_MAX. The bucket follows golang.org/x/time/rate's
 * reserveN exactly: advance the tokens to now (capped at burst; a clock that
 * went backwards adds nothing), take one, and wait for the deficit. A max-of
 * limiter owns its children. Nothing here calls back. */
#include "ratelimit.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dict.h"
#include "mem.h"

enum rl_kind { RL_EXPONENTIAL, RL_BUCKET, RL_FAST_SLOW, RL_MAX_OF };

typedef struct rl_item {
  int count;
  size_t len;
  char key[];
} rl_item;

struct kl_rl {
  enum rl_kind kind;
  union {
    struct { /* exponential and fast-slow */
      kl_dict_t *items;
      double a, b; /* base and max, or fast and slow */
      int max_fast;
    } per_item;
    struct {
      kl_clock_t clock;
      double qps, tokens, last;
      int burst;
    } bucket;
    struct {
      kl_rl_t **subs;
      size_t n;
    } max_of;
  } u;
};

static const char *item_key(const void *v, size_t *len) {
  const rl_item *it = v;
  *len = it->len;
  return it->key;
}

static kl_rl_t *per_item_new(enum rl_kind kind, double a, double b,
                             int max_fast) {
  kl_rl_t *rl = kl_xcalloc(1, sizeof *rl);
  rl->kind = kind;
  rl->u.per_item.items = kl_dict_new(item_key);
  rl->u.per_item.a = a;
  rl->u.per_item.b = b;
  rl->u.per_item.max_fast = max_fast;
  return rl;
}

kl_rl_t *kl_rl_exponential_new(double base, double max) {
  return per_item_new(RL_EXPONENTIAL, base, max, 0);
}

kl_rl_t *kl_rl_fast_slow_new(double fast, double slow, int max_fast) {
  return per_item_new(RL_FAST_SLOW, fast, slow, max_fast);
}

kl_rl_t *kl_rl_bucket_new(const kl_clock_t *clock, double qps, int burst) {
  kl_rl_t *rl = kl_xcalloc(1, sizeof *rl);
  rl->kind = RL_BUCKET;
  rl->u.bucket.clock = *clock;
  rl->u.bucket.qps = qps;
  rl->u.bucket.burst = burst;
  /* Go starts at zero tokens with a zero "last" time, which refills to the
   * full burst on first use; starting full at the current time is the same. */
  rl->u.bucket.tokens = burst;
  rl->u.bucket.last = kl_clock_now(clock);
  return rl;
}

kl_rl_t *kl_rl_max_of_new(kl_rl_t **limiters, size_t n) {
  kl_rl_t *rl = kl_xcalloc(1, sizeof *rl);
  rl->kind = RL_MAX_OF;
  rl->u.max_of.subs = kl_xcalloc(n ? n : 1, sizeof *rl->u.max_of.subs);
  for (size_t i = 0; i < n; i++)
    if (limiters[i]) rl->u.max_of.subs[rl->u.max_of.n++] = limiters[i];
  return rl;
}

kl_rl_t *kl_rl_default_new(const kl_clock_t *clock) {
  kl_rl_t *parts[2];
  parts[0] = kl_rl_exponential_new(0.005, 1000);
  parts[1] = kl_rl_bucket_new(clock, 10, 100);
  return kl_rl_max_of_new(parts, 2);
}

void kl_rl_free(kl_rl_t *rl) {
  if (!rl) return;
  switch (rl->kind) {
  case RL_EXPONENTIAL:
  case RL_FAST_SLOW: {
    size_t it = 0;
    rl_item *item;
    while ((item = kl_dict_next(rl->u.per_item.items, &it)))
      free(item);
    kl_dict_free(rl->u.per_item.items);
    break;
  }
  case RL_BUCKET: break;
  case RL_MAX_OF:
    for (size_t i = 0; i < rl->u.max_of.n; i++)
      kl_rl_free(rl->u.max_of.subs[i]);
    free(rl->u.max_of.subs);
    break;
  }
  free(rl);
}

/* Counts one more call for the item; returns the count before it. */
static int item_bump(kl_rl_t *rl, const char *key, size_t len) {
  rl_item *item = kl_dict_get(rl->u.per_item.items, key, len);
  int n;
  if (!item) {
    item = kl_xmalloc(sizeof *item + len);
    item->count = 0;
    item->len = len;
    if (len) memcpy(item->key, key, len);
    kl_dict_set(rl->u.per_item.items, item);
  }
  n = item->count;
  if (item->count < INT_MAX) item->count++;
  return n;
}

/* rate.Limiter.reserveN(now, 1, InfDuration) followed by Delay(). */
static double bucket_reserve(kl_rl_t *rl) {
  double now = kl_clock_now(&rl->u.bucket.clock), last, tokens, wait;
  double qps = rl->u.bucket.qps;
  if (qps >= DBL_MAX) return 0;
  if (qps == 0) {
    if (rl->u.bucket.burst < 1) return KL_RL_NEVER;
    rl->u.bucket.burst--;
    return 0;
  }
  if (rl->u.bucket.burst < 1) return KL_RL_NEVER;
  last = rl->u.bucket.last < now ? rl->u.bucket.last : now;
  tokens = rl->u.bucket.tokens + (now - last) * qps;
  if (tokens > rl->u.bucket.burst) tokens = rl->u.bucket.burst;
  tokens -= 1;
  rl->u.bucket.last = now;
  rl->u.bucket.tokens = tokens;
  wait = tokens < 0 ? -tokens / qps : 0;
  return wait > 0 ? wait : 0; /* Reservation.Delay never goes negative */
}

double kl_rl_when(kl_rl_t *rl, const char *key, size_t len) {
  if (!key) key = "";
  switch (rl->kind) {
  case RL_EXPONENTIAL: {
    int n = item_bump(rl, key, len);
    /* ldexp overflows to inf for large n, which the comparison clamps. */
    double d = ldexp(rl->u.per_item.a, n);
    return d > rl->u.per_item.b ? rl->u.per_item.b : d;
  }
  case RL_FAST_SLOW: {
    int n = item_bump(rl, key, len) + 1;
    return n <= rl->u.per_item.max_fast ? rl->u.per_item.a : rl->u.per_item.b;
  }
  case RL_BUCKET: return bucket_reserve(rl);
  case RL_MAX_OF: {
    double max = 0;
    for (size_t i = 0; i < rl->u.max_of.n; i++) {
      double d = kl_rl_when(rl->u.max_of.subs[i], key, len);
      if (d > max) max = d;
    }
    return max;
  }
  }
  return 0;
}

void kl_rl_forget(kl_rl_t *rl, const char *key, size_t len) {
  if (!key) key = "";
  switch (rl->kind) {
  case RL_EXPONENTIAL:
  case RL_FAST_SLOW:
    free(kl_dict_del(rl->u.per_item.items, key, len));
    kl_dict_shrink(rl->u.per_item.items);
    break;
  case RL_BUCKET: break;
  case RL_MAX_OF:
    for (size_t i = 0; i < rl->u.max_of.n; i++)
      kl_rl_forget(rl->u.max_of.subs[i], key, len);
    break;
  }
}

int kl_rl_num_requeues(kl_rl_t *rl, const char *key, size_t len) {
  if (!key) key = "";
  switch (rl->kind) {
  case RL_EXPONENTIAL:
  case RL_FAST_SLOW: {
    const rl_item *item = kl_dict_get(rl->u.per_item.items, key, len);
    return item ? item->count : 0;
  }
  case RL_BUCKET: return 0;
  case RL_MAX_OF: {
    int max = 0;
    for (size_t i = 0; i < rl->u.max_of.n; i++) {
      int n = kl_rl_num_requeues(rl->u.max_of.subs[i], key, len);
      if (n > max) max = n;
    }
    return max;
  }
  }
  return 0;
}
