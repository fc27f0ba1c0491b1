/* dict.c — an intrusive string-keyed hash map (see dict.h).
 *
 * Open addressing with linear probing over a power-of-two table of slots
 * {hash, val}; an empty slot has val == NULL. A value lives in the first free
 * slot at or after its home (hash & mask), so every slot from the home to the
 * value's slot is occupied: the probe for a key stops at the first empty
 * slot. Deletion keeps that invariant without tombstones by shifting later
 * values of the same run back into the hole (backward-shift deletion). The
 * table grows when an insert would pass 3/4 full and shrinks only on an
 * explicit kl_dict_shrink. The map owns its slot array; values and their keys
 * belong to the caller.
 *
 * Iteration must survive deleting the value just returned. It starts just
 * below a slot that was empty when the iteration began and walks the table
 * downwards, all the way round. A deletion moves values only towards lower
 * positions of that walk (back within their run), and no run crosses the
 * starting empty slot (deletion never fills an empty slot), so a value not
 * yet reached is never moved past the cursor, and the hole left by the
 * current value is filled only from positions already walked. */
#include "dict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

_Static_assert(SIZE_MAX >= UINT64_MAX,
               "kl_dict_next packs two 32-bit positions into a size_t");

#define DICT_MIN_CAP 8
#define DICT_MAX_CAP ((size_t)1 << 31)

typedef struct dict_slot {
  uint64_t hash;
  void *val;
} dict_slot;

struct kl_dict {
  kl_dict_keyof_fn *keyof;
  dict_slot *slots; /* mask + 1 slots, or NULL */
  size_t mask;
  size_t n;
};

/* ---- the hash ----
 * After Wang Yi's wyhash (public domain, "final version 4"): reads of up to
 * 16 bytes at a time, each pair mixed by a 64×64→128-bit multiply whose
 * halves are folded. */

#define WYP0 UINT64_C(0x2d358dccaa6c78a5)
#define WYP1 UINT64_C(0x8bb84b93962eacc9)
#define WYP2 UINT64_C(0x4b33a62ed433d4a3)
#define WYP3 UINT64_C(0x4d5a2da51de1aa47)

static inline void wy_mum(uint64_t *a, uint64_t *b) {
#if defined(__SIZEOF_INT128__)
  __extension__ typedef unsigned __int128 u128;
  u128 r = (u128)*a * *b;
  *a = (uint64_t)r;
  *b = (uint64_t)(r >> 64);
#else
  uint64_t ha = *a >> 32, hb = *b >> 32, la = (uint32_t)*a, lb = (uint32_t)*b;
  uint64_t rh = ha * hb, rm0 = ha * lb, rm1 = hb * la, rl = la * lb;
  uint64_t t = rl + (rm0 << 32), lo, hi;
  uint64_t c = t < rl;
  lo = t + (rm1 << 32);
  c += lo < t;
  hi = rh + (rm0 >> 32) + (rm1 >> 32) + c;
  *a = lo;
  *b = hi;
#endif
}

static inline uint64_t wy_mix(uint64_t a, uint64_t b) {
  wy_mum(&a, &b);
  return a ^ b;
}

static inline uint64_t wy_r8(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static inline uint64_t wy_r4(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static inline uint64_t wy_r3(const uint8_t *p, size_t k) {
  return ((uint64_t)p[0] << 16) | ((uint64_t)p[k >> 1] << 8) | p[k - 1];
}

uint64_t kl_hash(const char *key, size_t len) {
  const uint8_t *p = (const uint8_t *)key;
  uint64_t seed = wy_mix(WYP0, WYP1), a, b;
  if (len <= 16) {
    if (len >= 4) {
      size_t off = (len >> 3) << 2;
      a = (wy_r4(p) << 32) | wy_r4(p + off);
      b = (wy_r4(p + len - 4) << 32) | wy_r4(p + len - 4 - off);
    } else if (len > 0) {
      a = wy_r3(p, len);
      b = 0;
    } else {
      a = b = 0;
    }
  } else {
    size_t i = len;
    if (i >= 48) {
      uint64_t s1 = seed, s2 = seed;
      do {
        seed = wy_mix(wy_r8(p) ^ WYP1, wy_r8(p + 8) ^ seed);
        s1 = wy_mix(wy_r8(p + 16) ^ WYP2, wy_r8(p + 24) ^ s1);
        s2 = wy_mix(wy_r8(p + 32) ^ WYP3, wy_r8(p + 40) ^ s2);
        p += 48;
        i -= 48;
      } while (i >= 48);
      seed ^= s1 ^ s2;
    }
    while (i > 16) {
      seed = wy_mix(wy_r8(p) ^ WYP1, wy_r8(p + 8) ^ seed);
      i -= 16;
      p += 16;
    }
    /* The last 16 bytes of the key, overlapping what was mixed already. */
    a = wy_r8(p + i - 16);
    b = wy_r8(p + i - 8);
  }
  a ^= WYP1;
  b ^= seed;
  wy_mum(&a, &b);
  return wy_mix(a ^ WYP0 ^ len, b ^ WYP1);
}

/* ---- the table ---- */

kl_dict_t *kl_dict_new(kl_dict_keyof_fn *keyof) {
  kl_dict_t *d = kl_xcalloc(1, sizeof *d);
  d->keyof = keyof;
  return d;
}

void kl_dict_free(kl_dict_t *d) {
  if (!d) return;
  free(d->slots);
  free(d);
}

size_t kl_dict_size(const kl_dict_t *d) { return d->n; }

static inline int key_is(const kl_dict_t *d, const void *val, const char *key,
                         size_t len) {
  size_t vlen;
  const char *vkey = d->keyof(val, &vlen);
  return vlen == len && (len == 0 || memcmp(vkey, key, len) == 0);
}

/* Probes for key. Returns 1 with *pos at its slot, or 0 with *pos at the
 * empty slot that ends its run (where it would be inserted). The table must
 * exist. */
static int find(const kl_dict_t *d, const char *key, size_t len, uint64_t h,
                size_t *pos) {
  size_t i = (size_t)h & d->mask;
  for (;;) {
    const dict_slot *s = &d->slots[i];
    if (!s->val) break;
    if (s->hash == h && key_is(d, s->val, key, len)) {
      *pos = i;
      return 1;
    }
    i = (i + 1) & d->mask;
  }
  *pos = i;
  return 0;
}

static void resize(kl_dict_t *d, size_t cap) {
  dict_slot *old = d->slots;
  size_t oldcap = old ? d->mask + 1 : 0;
  if (cap > DICT_MAX_CAP) {
    fprintf(stderr, "kubelua: kl_dict: more than %zu slots\n", DICT_MAX_CAP);
    abort();
  }
  d->slots = kl_xcalloc(cap, sizeof *d->slots);
  d->mask = cap - 1;
  for (size_t j = 0; j < oldcap; j++) {
    if (!old[j].val) continue;
    size_t i = (size_t)old[j].hash & d->mask;
    while (d->slots[i].val)
      i = (i + 1) & d->mask;
    d->slots[i] = old[j];
  }
  free(old);
}

void *kl_dict_get_hashed(const kl_dict_t *d, const char *key, size_t len,
                         uint64_t hash) {
  size_t i;
  if (d->n == 0 || !find(d, key, len, hash, &i)) return NULL;
  return d->slots[i].val;
}

void *kl_dict_get(const kl_dict_t *d, const char *key, size_t len) {
  if (d->n == 0) return NULL;
  return kl_dict_get_hashed(d, key, len, kl_hash(key, len));
}

void *kl_dict_set_hashed(kl_dict_t *d, void *val, uint64_t hash) {
  size_t len, i;
  const char *key = d->keyof(val, &len);
  if (d->slots && find(d, key, len, hash, &i)) {
    void *old = d->slots[i].val;
    d->slots[i].val = val;
    return old;
  }
  if (!d->slots || d->n + 1 > (d->mask + 1) / 4 * 3) {
    resize(d, d->slots ? (d->mask + 1) * 2 : DICT_MIN_CAP);
    find(d, key, len, hash, &i);
  }
  d->slots[i].hash = hash;
  d->slots[i].val = val;
  d->n++;
  return NULL;
}

void *kl_dict_set(kl_dict_t *d, void *val) {
  size_t len;
  const char *key = d->keyof(val, &len);
  return kl_dict_set_hashed(d, val, kl_hash(key, len));
}

void *kl_dict_del_hashed(kl_dict_t *d, const char *key, size_t len,
                         uint64_t hash) {
  size_t i, j;
  if (d->n == 0 || !find(d, key, len, hash, &i)) return NULL;
  void *old = d->slots[i].val;
  /* i is the hole. A later value of the run may move into it unless its home
   * lies cyclically in (i, j], where the probe for it would not pass i. */
  j = i;
  for (;;) {
    j = (j + 1) & d->mask;
    dict_slot *s = &d->slots[j];
    if (!s->val) break;
    size_t home = (size_t)s->hash & d->mask;
    if (((j - home) & d->mask) >= ((j - i) & d->mask)) {
      d->slots[i] = *s;
      i = j;
    }
  }
  d->slots[i].val = NULL;
  d->slots[i].hash = 0;
  d->n--;
  return old;
}

void *kl_dict_del(kl_dict_t *d, const char *key, size_t len) {
  if (d->n == 0) return NULL;
  return kl_dict_del_hashed(d, key, len, kl_hash(key, len));
}

void kl_dict_shrink(kl_dict_t *d) {
  size_t cap = d->mask + 1, want = DICT_MIN_CAP;
  if (!d->slots || cap <= DICT_MIN_CAP || d->n >= cap / 8) return;
  if (d->n == 0) {
    free(d->slots);
    d->slots = NULL;
    d->mask = 0;
    return;
  }
  while (want < 2 * d->n)
    want *= 2;
  if (want < cap) resize(d, want);
}

void *kl_dict_next(const kl_dict_t *d, size_t *it) {
  size_t start, left;
  if (*it == 0) {
    if (d->n == 0) return NULL;
    /* An empty slot exists: the table is never more than 3/4 full. */
    for (start = 0; d->slots[start].val; start++) {
    }
    left = d->mask; /* positions start+1 .. start+mask, walked downwards */
  } else {
    start = (*it >> 32) - 1;
    left = *it & 0xffffffffu;
  }
  while (left > 0) {
    left--;
    void *v = d->slots[(start + 1 + left) & d->mask].val;
    if (v) {
      *it = ((start + 1) << 32) | left;
      return v;
    }
  }
  *it = (start + 1) << 32;
  return NULL;
}
