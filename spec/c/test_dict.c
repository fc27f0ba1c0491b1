/* test_dict.c — the intrusive hash map: lookups, replacement, deletion with
 * backward shift, growth and shrinking, binary keys, iteration that survives
 * deleting the current value, and a randomized run against a plain array. */
#include <stdint.h>

#include "dict.h"
#include "mem.h"
#include "test.h"

typedef struct val {
  size_t len;
  int seen;
  int id;
  char key[40];
} val;

static const char *val_key(const void *v, size_t *len) {
  const val *x = v;
  *len = x->len;
  return x->key;
}

static void val_init(val *v, int id, const char *key, size_t len) {
  memset(v, 0, sizeof *v);
  memcpy(v->key, key, len);
  v->len = len;
  v->id = id;
}

static void val_fmt(val *v, int id) {
  char buf[40];
  int n = snprintf(buf, sizeof buf, "ns-%d/pod-%d", id % 97, id);
  val_init(v, id, buf, (size_t)n);
}

/* A small deterministic generator (xorshift64*), so failures reproduce. */
static uint64_t rng_state;
static uint64_t rng(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * UINT64_C(2685821657736338717);
}

static void test_set_get_replace_del(void) {
  kl_dict_t *d = kl_dict_new(val_key);
  val a, b, a2;
  val_init(&a, 1, "alpha", 5);
  val_init(&b, 2, "beta", 4);
  val_init(&a2, 3, "alpha", 5);
  KT_TRUE(kl_dict_get(d, "alpha", 5) == NULL);
  KT_TRUE(kl_dict_del(d, "alpha", 5) == NULL);
  KT_TRUE(kl_dict_set(d, &a) == NULL);
  KT_TRUE(kl_dict_set(d, &b) == NULL);
  KT_EQ_INT(kl_dict_size(d), 2);
  KT_TRUE(kl_dict_get(d, "alpha", 5) == &a);
  KT_TRUE(kl_dict_get(d, "alph", 4) == NULL);
  KT_TRUE(kl_dict_get(d, "alphaa", 6) == NULL);
  KT_TRUE(kl_dict_set(d, &a2) == &a); /* replace returns the old value */
  KT_EQ_INT(kl_dict_size(d), 2);
  KT_TRUE(kl_dict_get(d, "alpha", 5) == &a2);
  KT_TRUE(kl_dict_del(d, "alpha", 5) == &a2);
  KT_TRUE(kl_dict_del(d, "alpha", 5) == NULL);
  KT_EQ_INT(kl_dict_size(d), 1);
  KT_TRUE(kl_dict_get(d, "beta", 4) == &b);
  kl_dict_free(d);
  kl_dict_free(NULL);
}

static void test_binary_and_empty_keys(void) {
  kl_dict_t *d = kl_dict_new(val_key);
  val v[5];
  val_init(&v[0], 0, "", 0);
  val_init(&v[1], 1, "\0", 1);
  val_init(&v[2], 2, "\0\0", 2);
  val_init(&v[3], 3, "a\0b", 3);
  val_init(&v[4], 4, "a\0c", 3);
  for (int i = 0; i < 5; i++)
    KT_TRUE(kl_dict_set(d, &v[i]) == NULL);
  KT_EQ_INT(kl_dict_size(d), 5);
  KT_TRUE(kl_dict_get(d, NULL, 0) == &v[0]);
  KT_TRUE(kl_dict_get(d, "", 0) == &v[0]);
  KT_TRUE(kl_dict_get(d, "\0", 1) == &v[1]);
  KT_TRUE(kl_dict_get(d, "\0\0", 2) == &v[2]);
  KT_TRUE(kl_dict_get(d, "a\0b", 3) == &v[3]);
  KT_TRUE(kl_dict_get(d, "a\0c", 3) == &v[4]);
  KT_TRUE(kl_dict_get(d, "a", 1) == NULL);
  KT_TRUE(kl_dict_del(d, NULL, 0) == &v[0]);
  KT_TRUE(kl_dict_get(d, "", 0) == NULL);
  KT_TRUE(kl_dict_get(d, "\0", 1) == &v[1]);
  kl_dict_free(d);
}

static void test_hash_spreads_and_is_stable(void) {
  enum { N = 1 << 16, B = 1024 };
  static unsigned buckets[B];
  char buf[300];
  unsigned max = 0;
  memset(buckets, 0, sizeof buckets);
  KT_TRUE(kl_hash("", 0) == kl_hash(NULL, 0));
  KT_TRUE(kl_hash("", 0) != kl_hash("\0", 1));
  KT_TRUE(kl_hash("\0", 1) != kl_hash("\0\0", 2));
  KT_TRUE(kl_hash("abc", 3) == kl_hash("abcd", 3));
  /* Every length crosses a different code path (0, 1-3, 4-16, 17-47, 48+);
   * prefixes of one buffer must all hash differently. */
  memset(buf, 'x', sizeof buf);
  for (size_t i = 0; i < sizeof buf; i++)
    for (size_t j = i + 1; j < sizeof buf; j += 37)
      if (kl_hash(buf, i) == kl_hash(buf, j)) KT_EQ_INT(i, j);
  for (int i = 0; i < N; i++) {
    int n = snprintf(buf, sizeof buf, "ns-%d/pod-%d", i % 13, i);
    buckets[kl_hash(buf, (size_t)n) & (B - 1)]++;
  }
  for (int i = 0; i < B; i++)
    if (buckets[i] > max) max = buckets[i];
  KT_TRUE(max < 2 * N / B); /* the mean is 64; a poor hash piles up */
}

static void test_many_keys_grow_and_shrink(void) {
  enum { N = 50000 };
  kl_dict_t *d = kl_dict_new(val_key);
  val *v = kl_xcalloc(N, sizeof *v);
  for (int i = 0; i < N; i++) {
    val_fmt(&v[i], i);
    KT_TRUE(kl_dict_set(d, &v[i]) == NULL);
  }
  KT_EQ_INT(kl_dict_size(d), N);
  for (int i = 0; i < N; i++) {
    val *got = kl_dict_get(d, v[i].key, v[i].len);
    if (got != &v[i]) KT_EQ_INT(got ? got->id : -1, i);
  }
  /* Delete all but every 100th key, shrinking as we go. */
  for (int i = 0; i < N; i++) {
    if (i % 100 == 0) continue;
    KT_TRUE(kl_dict_del(d, v[i].key, v[i].len) == &v[i]);
    kl_dict_shrink(d);
  }
  KT_EQ_INT(kl_dict_size(d), N / 100);
  for (int i = 0; i < N; i++) {
    val *got = kl_dict_get(d, v[i].key, v[i].len);
    KT_TRUE(got == (i % 100 == 0 ? &v[i] : NULL));
  }
  for (int i = 0; i < N; i += 100) {
    KT_TRUE(kl_dict_del(d, v[i].key, v[i].len) == &v[i]);
    kl_dict_shrink(d);
  }
  KT_EQ_INT(kl_dict_size(d), 0);
  /* Usable again after shrinking to nothing. */
  KT_TRUE(kl_dict_set(d, &v[7]) == NULL);
  KT_TRUE(kl_dict_get(d, v[7].key, v[7].len) == &v[7]);
  kl_dict_free(d);
  free(v);
}

static void test_iteration_visits_each_once(void) {
  enum { N = 1000 };
  kl_dict_t *d = kl_dict_new(val_key);
  val *v = kl_xcalloc(N, sizeof *v);
  size_t it = 0, count = 0;
  val *x;
  KT_TRUE(kl_dict_next(d, &it) == NULL); /* empty, no table */
  for (int i = 0; i < N; i++) {
    val_fmt(&v[i], i);
    kl_dict_set(d, &v[i]);
  }
  it = 0;
  while ((x = kl_dict_next(d, &it))) {
    x->seen++;
    count++;
  }
  KT_EQ_INT(count, N);
  for (int i = 0; i < N; i++)
    KT_EQ_INT(v[i].seen, 1);
  KT_TRUE(kl_dict_next(d, &it) == NULL); /* stays finished */
  kl_dict_free(d);
  free(v);
}

/* Fills tables to random loads (runs wrap round the end of the table near
 * 3/4 full) and deletes the current value at random while iterating: every
 * value present throughout must come exactly once. */
static void test_delete_current_during_iteration(void) {
  enum { N = 700 };
  val *v = kl_xcalloc(N, sizeof *v);
  rng_state = 42;
  for (int round = 0; round < 300; round++) {
    kl_dict_t *d = kl_dict_new(val_key);
    int n = 1 + (int)(rng() % N), deleted = 0;
    size_t it = 0;
    val *x;
    for (int i = 0; i < n; i++) {
      val_fmt(&v[i], round * N + i);
      kl_dict_set(d, &v[i]);
    }
    while ((x = kl_dict_next(d, &it))) {
      x->seen++;
      if (rng() % 3 == 0) {
        KT_TRUE(kl_dict_del(d, x->key, x->len) == x);
        deleted++;
      }
    }
    for (int i = 0; i < n; i++)
      if (v[i].seen != 1) KT_EQ_INT(v[i].seen, 1);
    KT_EQ_INT(kl_dict_size(d), n - deleted);
    /* Deleting every value as it comes empties the map. */
    it = 0;
    while ((x = kl_dict_next(d, &it)))
      kl_dict_del(d, x->key, x->len);
    KT_EQ_INT(kl_dict_size(d), 0);
    kl_dict_free(d);
  }
  free(v);
}

/* Deleting values not yet returned: they do not come, and no value present
 * throughout is skipped (one already returned may come again). */
static void test_delete_ahead_during_iteration(void) {
  enum { N = 600 };
  val *v = kl_xcalloc(N, sizeof *v);
  rng_state = 7;
  for (int round = 0; round < 200; round++) {
    kl_dict_t *d = kl_dict_new(val_key);
    int n = 2 + (int)(rng() % (N - 2));
    size_t it = 0;
    val *x;
    for (int i = 0; i < n; i++) {
      val_fmt(&v[i], round * N + i);
      v[i].id = 0; /* 1 once deleted */
      kl_dict_set(d, &v[i]);
    }
    while ((x = kl_dict_next(d, &it))) {
      KT_TRUE(x->id == 0); /* never a deleted value */
      x->seen++;
      int k = (int)(rng() % (uint64_t)n);
      if (v[k].id == 0 && v[k].seen == 0 && rng() % 4 == 0) {
        KT_TRUE(kl_dict_del(d, v[k].key, v[k].len) == &v[k]);
        v[k].id = 1;
      }
    }
    for (int i = 0; i < n; i++)
      if (v[i].id == 0 && v[i].seen < 1) KT_EQ_INT(v[i].seen, 1);
    kl_dict_free(d);
  }
  free(v);
}

/* Random set/del/get/replace against an array that says which keys are in. */
static void test_random_against_model(void) {
  enum { K = 3000, OPS = 400000 };
  kl_dict_t *d = kl_dict_new(val_key);
  val *v = kl_xcalloc(2 * K, sizeof *v); /* two values per key */
  static int in[K];                      /* 0, or 1 + which value */
  size_t size = 0;
  memset(in, 0, sizeof in);
  rng_state = 99;
  for (int i = 0; i < K; i++) {
    char buf[40];
    size_t n = (size_t)snprintf(buf, sizeof buf, "k%d", i);
    if (i % 5 == 0) buf[0] = '\0'; /* some keys with a NUL inside */
    val_init(&v[2 * i], i, buf, n);
    val_init(&v[2 * i + 1], i, buf, n);
  }
  for (int op = 0; op < OPS; op++) {
    int k = (int)(rng() % K), r = (int)(rng() % 10);
    val *cur = in[k] ? &v[2 * k + in[k] - 1] : NULL;
    if (r < 4) {
      int w = (int)(rng() % 2);
      void *old = kl_dict_set(d, &v[2 * k + w]);
      KT_TRUE(old == cur);
      if (!cur) size++;
      in[k] = 1 + w;
    } else if (r < 7) {
      KT_TRUE(kl_dict_del(d, v[2 * k].key, v[2 * k].len) == cur);
      if (cur) size--;
      in[k] = 0;
      if (rng() % 8 == 0) kl_dict_shrink(d);
    } else {
      KT_TRUE(kl_dict_get(d, v[2 * k].key, v[2 * k].len) == cur);
    }
    if (kt_current_failed) break;
  }
  KT_EQ_INT(kl_dict_size(d), size);
  for (int k = 0; k < K; k++) {
    val *cur = in[k] ? &v[2 * k + in[k] - 1] : NULL;
    KT_TRUE(kl_dict_get(d, v[2 * k].key, v[2 * k].len) == cur);
  }
  kl_dict_free(d);
  free(v);
}

int main(void) {
  KT_RUN(test_set_get_replace_del);
  KT_RUN(test_binary_and_empty_keys);
  KT_RUN(test_hash_spreads_and_is_stable);
  KT_RUN(test_many_keys_grow_and_shrink);
  KT_RUN(test_iteration_visits_each_once);
  KT_RUN(test_delete_current_during_iteration);
  KT_RUN(test_delete_ahead_during_iteration);
  KT_RUN(test_random_against_model);
  return KT_DONE();
}
