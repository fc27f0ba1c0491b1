/* store.c — the keyed store with indices (see store.h, CLIENTGO.md 4).
 *
 * Items: a kl_dict of st_entry, each holding the object (one reference,
 * owned by the store; its key, kl_obj_key_span, is the entry's) and
 * `nmember`, the number of index sets that hold the entry. Indices: per index a
 * kl_dict from value to st_set, a set of entry pointers stored as one inline
 * pointer, a small vector, or (past SET_VEC_MAX) an open-addressed table. Sets
 * never hold an entry twice, and an empty set is deleted at once
 * (ListIndexFuncValues never sees an empty value, T-11).
 *
 * Invariants:
 *   - every entry in a set is in `items`, and e->nmember is the number of
 *     sets holding e. Unindexing recomputes the old object's values; when an
 *     index function is not pure (it fails on, or gives other values for,
 *     an object it indexed before), the count exposes it and `repair` scans
 *     every set for the entry, so no set ever points at a freed entry;
 *   - a mutation computes the new object's values for every index before it
 *     touches anything, so an index function's error leaves the store as it
 *     was; Replace and AddIndexers build aside and swap;
 *   - `busy` counts iterations and index-function calls in progress; a
 *     mutation while it is non-zero fails with KL_EINVAL.
 *
 * The store owns its entries, sets, index names and, once added, each
 * indexer's ud (released with ud_free). Objects are shared and immutable. */
#include "store.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dict.h"
#include "error.h"
#include "mem.h"

#define SET_VEC_MAX 8u   /* sets up to this size are plain vectors */
#define SET_TAB_MIN 16u  /* smallest open-addressed table */
#define DEDUP_LINEAR 16u /* value lists up to this length dedup in O(k^2) */

typedef struct st_entry {
  kl_obj_t *obj;    /* its key (kl_obj_key_span) is the entry's */
  uint32_t nmember; /* sets holding this entry */
} st_entry;

typedef struct st_set {
  union {
    st_entry *one; /* cap == 1 */
    st_entry **m;  /* cap <= SET_VEC_MAX: vector; else table of cap slots */
  } u;
  uint32_t n, cap;
  uint32_t vlen;
  char val[]; /* vlen bytes and a NUL */
} st_set;

typedef struct st_index {
  kl_dict_t *sets; /* value -> st_set */
  kl_store_index_kind_t kind;
  kl_store_index_fn *fn;
  void *ud;
  void (*ud_free)(void *ud);
  char *label;
  size_t label_len;
  char *name;
} st_index;

/* Index values collected for one object: bytes in buf, (off, len) in v. */
typedef struct st_val {
  size_t off, len;
} st_val;

typedef struct st_scratch {
  char *buf;
  size_t len, cap;
  st_val *v;
  size_t n, vcap;
} st_scratch;

struct kl_store {
  kl_dict_t *items; /* key -> st_entry */
  st_index **ix;
  size_t nix;
  unsigned busy;
  size_t repairs;
  st_scratch nv, ov; /* new values (all indices), old values (one index) */
  size_t *range;     /* 2 per index: first value in nv and count */
  size_t rcap;
};

/* ---- keys ---- */

static const char *entry_keyof(const void *val, size_t *len) {
  kl_json_span_t k = kl_obj_key_span(((const st_entry *)val)->obj);
  *len = k.n;
  return k.p;
}

static const char *set_keyof(const void *val, size_t *len) {
  const st_set *t = val;
  *len = t->vlen;
  return t->val;
}

__attribute__((format(printf, 3, 4))) static void
set_err(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (!errlen) return;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* ---- sets of entries ---- */

static inline size_t ptr_hash(const st_entry *e) {
  uint64_t h = (uint64_t)(uintptr_t)e;
  h ^= h >> 33;
  h *= UINT64_C(0xff51afd7ed558ccd);
  h ^= h >> 33;
  return (size_t)h;
}

/* Inserts e into a table of cap slots known to have room and not hold e. */
static void tab_put(st_entry **m, uint32_t cap, st_entry *e) {
  size_t i = ptr_hash(e) & (cap - 1);
  while (m[i])
    i = (i + 1) & (cap - 1);
  m[i] = e;
}

/* Rebuilds t's members as a table of `cap` slots (cap >= SET_TAB_MIN), a
 * vector (2 <= cap <= SET_VEC_MAX, cap >= t->n) or the inline one (cap 1,
 * t->n <= 1). */
static void set_reshape(st_set *t, uint32_t cap) {
  st_entry *tmp[1], **old, **m;
  uint32_t lim, k = 0;
  if (t->cap == 1) {
    tmp[0] = t->u.one;
    old = tmp;
    lim = 1;
  } else {
    old = t->u.m;
    lim = t->cap <= SET_VEC_MAX ? t->n : t->cap;
  }
  if (cap == 1) {
    st_entry *one = NULL;
    for (uint32_t i = 0; i < lim && !one; i++)
      one = old[i];
    if (old != tmp) free(old);
    t->u.one = one;
    t->cap = 1;
    return;
  }
  m = kl_xcalloc(cap, sizeof *m);
  for (uint32_t i = 0; i < lim; i++) {
    if (!old[i]) continue;
    if (cap <= SET_VEC_MAX)
      m[k++] = old[i];
    else
      tab_put(m, cap, old[i]);
  }
  if (old != tmp) free(old);
  t->u.m = m;
  t->cap = cap;
}

static bool set_has(const st_set *t, const st_entry *e) {
  if (t->cap == 1) return t->u.one == e;
  if (t->cap <= SET_VEC_MAX) {
    for (uint32_t i = 0; i < t->n; i++)
      if (t->u.m[i] == e) return true;
    return false;
  }
  for (size_t i = ptr_hash(e) & (t->cap - 1); t->u.m[i];
       i = (i + 1) & (t->cap - 1))
    if (t->u.m[i] == e) return true;
  return false;
}

/* Adds e (not in t) to t. */
static void set_insert(st_set *t, st_entry *e) {
  if (t->cap <= SET_VEC_MAX && t->n == t->cap)
    set_reshape(t, t->cap < SET_VEC_MAX ? t->cap * 2 : SET_TAB_MIN);
  else if (t->cap > SET_VEC_MAX && (t->n + 1) > t->cap / 4 * 3)
    set_reshape(t, t->cap * 2);
  if (t->cap <= SET_VEC_MAX)
    t->u.m[t->n] = e;
  else
    tab_put(t->u.m, t->cap, e);
  t->n++;
}

/* Removes e from t; false when absent. Shrinks the storage as t empties. */
static bool set_remove(st_set *t, st_entry *e) {
  if (t->cap == 1) {
    if (t->u.one != e) return false;
    t->u.one = NULL;
    t->n = 0;
    return true;
  }
  if (t->cap <= SET_VEC_MAX) {
    uint32_t i;
    for (i = 0; i < t->n && t->u.m[i] != e; i++) {
    }
    if (i == t->n) return false;
    t->u.m[i] = t->u.m[--t->n];
    t->u.m[t->n] = NULL;
    if (t->n == 1)
      set_reshape(t, 1);
    else if (t->cap > 2 && t->n <= t->cap / 4)
      set_reshape(t, t->cap / 2);
    return true;
  }
  size_t mask = t->cap - 1, i = ptr_hash(e) & mask, j;
  while (t->u.m[i] != e) {
    if (!t->u.m[i]) return false;
    i = (i + 1) & mask;
  }
  /* Backward-shift deletion, as in dict.c. */
  j = i;
  for (;;) {
    j = (j + 1) & mask;
    st_entry *x = t->u.m[j];
    if (!x) break;
    size_t home = ptr_hash(x) & mask;
    if (((j - home) & mask) >= ((j - i) & mask)) {
      t->u.m[i] = x;
      i = j;
    }
  }
  t->u.m[i] = NULL;
  t->n--;
  if (t->n <= SET_VEC_MAX / 2)
    set_reshape(t, SET_VEC_MAX);
  else if (t->cap > SET_TAB_MIN && t->n < t->cap / 8)
    set_reshape(t, t->cap / 2);
  return true;
}

static void set_free(st_set *t) {
  if (t->cap > 1) free(t->u.m);
  free(t);
}

/* Calls fn(e, ud) for every member; stops at a non-zero return. */
static int set_each(const st_set *t, int (*fn)(st_entry *e, void *ud),
                    void *ud) {
  int rc;
  if (t->cap == 1) return fn(t->u.one, ud);
  uint32_t lim = t->cap <= SET_VEC_MAX ? t->n : t->cap;
  for (uint32_t i = 0; i < lim; i++)
    if (t->u.m[i] && (rc = fn(t->u.m[i], ud)) != 0) return rc;
  return 0;
}

/* Adds e under value (val, len) of the value map `sets`. */
static void index_add(kl_dict_t *sets, const char *val, size_t len,
                      st_entry *e) {
  uint64_t h = kl_hash(val, len);
  st_set *t = kl_dict_get_hashed(sets, val, len, h);
  if (!t) {
    t = kl_xmalloc(sizeof *t + len + 1);
    memcpy(t->val, val, len);
    t->val[len] = '\0';
    t->vlen = (uint32_t)len;
    t->u.one = e;
    t->n = t->cap = 1;
    kl_dict_set_hashed(sets, t, h);
  } else if (!set_has(t, e)) {
    set_insert(t, e);
  } else {
    return;
  }
  e->nmember++;
}

/* Removes e from value (val, len); false when it was not there. */
static bool index_del(kl_dict_t *sets, const char *val, size_t len,
                      st_entry *e) {
  uint64_t h = kl_hash(val, len);
  st_set *t = kl_dict_get_hashed(sets, val, len, h);
  if (!t || !set_remove(t, e)) return false;
  e->nmember--;
  if (t->n == 0) {
    kl_dict_del_hashed(sets, val, len, h);
    set_free(t);
    kl_dict_shrink(sets);
  }
  return true;
}

/* Frees every set of a value map, decrementing its members' counts when
 * `count` is set (the entries live on). */
static int uncount_member(st_entry *e, void *ud) {
  (void)ud;
  e->nmember--;
  return 0;
}

static void sets_clear(kl_dict_t *sets, bool count) {
  size_t it = 0;
  st_set *t;
  while ((t = kl_dict_next(sets, &it))) {
    if (count) set_each(t, uncount_member, NULL);
    kl_dict_del(sets, t->val, t->vlen);
    set_free(t);
  }
  kl_dict_free(sets);
}

/* Removes e from every set of every index (a full scan). */
static void repair(kl_store_t *s, st_entry *e) {
  s->repairs++;
  for (size_t i = 0; i < s->nix && e->nmember; i++) {
    kl_dict_t *sets = s->ix[i]->sets;
    size_t it = 0;
    st_set *t;
    while ((t = kl_dict_next(sets, &it))) {
      if (!set_remove(t, e)) continue;
      e->nmember--;
      if (t->n == 0) {
        kl_dict_del(sets, t->val, t->vlen);
        set_free(t);
      }
    }
    kl_dict_shrink(sets);
  }
}

/* ---- index values ---- */

typedef struct st_emit {
  st_scratch *sc;
  size_t first, bytes;
  int err;
  char msg[160];
} st_emit;

static int emit_value(void *ctx, const char *val, size_t len) {
  st_emit *x = ctx;
  st_scratch *sc = x->sc;
  if (x->err) return x->err;
  if (sc->n - x->first >= KL_STORE_MAX_VALUES ||
      len > KL_STORE_MAX_VALUE_BYTES - x->bytes) {
    x->err = KL_ELIMIT;
    snprintf(x->msg, sizeof x->msg, "more than %u values or %u bytes",
             KL_STORE_MAX_VALUES, KL_STORE_MAX_VALUE_BYTES);
    return KL_ELIMIT;
  }
  if (sc->len + len > sc->cap) {
    size_t cap = sc->cap ? sc->cap : 256;
    while (cap < sc->len + len)
      cap *= 2;
    sc->buf = kl_xrealloc(sc->buf, cap);
    sc->cap = cap;
  }
  if (sc->n == sc->vcap) {
    sc->vcap = sc->vcap ? sc->vcap * 2 : 16;
    sc->v = kl_xrealloc(sc->v, sc->vcap * sizeof *sc->v);
  }
  if (len) memcpy(sc->buf + sc->len, val, len);
  sc->v[sc->n].off = sc->len;
  sc->v[sc->n].len = len;
  sc->n++;
  sc->len += len;
  x->bytes += len;
  return KL_OK;
}

void kl_store_index_fail(void *ctx, const char *msg) {
  st_emit *x = ctx;
  snprintf(x->msg, sizeof x->msg, "%s", msg ? msg : "");
}

/* The bytes of value i. A scratch that only ever saw empty values has no
 * buffer: "" then, so that no NULL reaches memcpy or memcmp. */
static inline const char *val_p(const st_scratch *sc, size_t i) {
  return sc->buf ? sc->buf + sc->v[i].off : "";
}

static bool val_eq(const st_scratch *a, size_t i, const st_scratch *b,
                   size_t j) {
  return a->v[i].len == b->v[j].len &&
         (a->v[i].len == 0 ||
          memcmp(val_p(a, i), val_p(b, j), a->v[i].len) == 0);
}

typedef struct st_pval {
  const char *p;
  size_t len, off;
} st_pval;

static int pval_cmp(const void *a, const void *b) {
  const st_pval *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n ? memcmp(x->p, y->p, n) : 0;
  if (c) return c;
  return x->len < y->len ? -1 : x->len > y->len;
}

/* Drops repeated values among v[first..n). Small lists keep their order. */
static void dedup(st_scratch *sc, size_t first) {
  size_t k = sc->n - first, out = first;
  if (k < 2) return;
  if (k <= DEDUP_LINEAR) {
    for (size_t i = first; i < sc->n; i++) {
      size_t j;
      for (j = first; j < out && !val_eq(sc, i, sc, j); j++) {
      }
      if (j == out) sc->v[out++] = sc->v[i];
    }
    sc->n = out;
    return;
  }
  st_pval *pv = kl_xmalloc(k * sizeof *pv);
  for (size_t i = 0; i < k; i++) {
    pv[i].p = val_p(sc, first + i);
    pv[i].len = sc->v[first + i].len;
    pv[i].off = sc->v[first + i].off;
  }
  qsort(pv, k, sizeof *pv, pval_cmp);
  for (size_t i = 0; i < k; i++) {
    if (i && pval_cmp(&pv[i], &pv[i - 1]) == 0) continue;
    sc->v[out].off = pv[i].off;
    sc->v[out].len = pv[i].len;
    out++;
  }
  sc->n = out;
  free(pv);
}

/* Appends ix's values for o to sc (deduplicated). On error sc is as it was
 * and err holds "index NAME: reason". Calls the index function. */
static int compute(kl_store_t *s, const st_index *ix, const kl_obj_t *o,
                   st_scratch *sc, char *err, size_t errlen) {
  st_emit x = {sc, sc->n, 0, 0, ""};
  size_t len0 = sc->len;
  kl_json_span_t v;
  kl_obj_owner_t w;
  int rc = KL_OK;
  switch (ix->kind) {
  case KL_STORE_INDEX_NAMESPACE:
    v = kl_obj_namespace(o);
    rc = emit_value(&x, v.p, v.n);
    break;
  case KL_STORE_INDEX_LABEL:
    if (kl_obj_label_get(o, ix->label, ix->label_len, &v))
      rc = emit_value(&x, v.p, v.n);
    break;
  case KL_STORE_INDEX_CONTROLLER:
    if (kl_obj_controller(o, &w) && w.uid.n)
      rc = emit_value(&x, w.uid.p, w.uid.n);
    break;
  case KL_STORE_INDEX_CUSTOM:
    s->busy++;
    rc = ix->fn(o, ix->ud, emit_value, &x);
    s->busy--;
    if (rc > 0) rc = KL_EINVAL;
    if (rc == KL_OK) rc = x.err;
    break;
  }
  if (rc != KL_OK) {
    sc->n = x.first;
    sc->len = len0;
    if (errlen)
      snprintf(err, errlen, "index %s: %s", ix->name,
               x.msg[0] ? x.msg : kl_strerror(rc));
    return rc;
  }
  dedup(sc, x.first);
  return KL_OK;
}

static void scratch_reset(st_scratch *sc) { sc->n = sc->len = 0; }

static void scratch_free(st_scratch *sc) {
  free(sc->buf);
  free(sc->v);
}

/* Computes o's values for every index into s->nv, index i's at
 * range[2i] (first) and range[2i+1] (count). */
static int compute_all(kl_store_t *s, const kl_obj_t *o, char *err,
                       size_t errlen) {
  scratch_reset(&s->nv);
  if (s->rcap < 2 * s->nix) {
    s->rcap = 2 * s->nix;
    s->range = kl_xrealloc(s->range, s->rcap * sizeof *s->range);
  }
  for (size_t i = 0; i < s->nix; i++) {
    s->range[2 * i] = s->nv.n;
    int rc = compute(s, s->ix[i], o, &s->nv, err, errlen);
    if (rc) return rc;
    s->range[2 * i + 1] = s->nv.n - s->range[2 * i];
  }
  return KL_OK;
}

/* Adds e under the values computed in s->nv for index i into `sets`. */
static void add_new_values(kl_store_t *s, size_t i, kl_dict_t *sets,
                           st_entry *e) {
  for (size_t k = 0; k < s->range[2 * i + 1]; k++) {
    size_t j = s->range[2 * i] + k;
    index_add(sets, val_p(&s->nv, j), s->nv.v[j].len, e);
  }
}

/* ---- the store ---- */

kl_store_t *kl_store_new(void) {
  kl_store_t *s = kl_xcalloc(1, sizeof *s);
  s->items = kl_dict_new(entry_keyof);
  return s;
}

static void index_free(st_index *ix, bool count) {
  if (!ix) return;
  if (ix->sets) sets_clear(ix->sets, count);
  if (ix->ud_free) ix->ud_free(ix->ud);
  free(ix->label);
  free(ix->name);
  free(ix);
}

static void items_free(kl_dict_t *items) {
  size_t it = 0;
  st_entry *e;
  while ((e = kl_dict_next(items, &it))) {
    kl_json_span_t k = kl_obj_key_span(e->obj);
    kl_dict_del(items, k.p, k.n);
    kl_obj_unref(e->obj);
    free(e);
  }
  kl_dict_free(items);
}

void kl_store_free(kl_store_t *s) {
  if (!s) return;
  for (size_t i = 0; i < s->nix; i++)
    index_free(s->ix[i], false);
  free(s->ix);
  items_free(s->items);
  scratch_free(&s->nv);
  scratch_free(&s->ov);
  free(s->range);
  free(s);
}

static int check_idle(const kl_store_t *s, char *err, size_t errlen) {
  if (!s->busy) return KL_OK;
  set_err(err, errlen, "%s",
          "store modified during an iteration or an index function");
  return KL_EINVAL;
}

static st_entry *entry_new(kl_obj_t *o) {
  st_entry *e = kl_xmalloc(sizeof *e);
  e->obj = kl_obj_ref(o);
  e->nmember = 0;
  return e;
}

/* Calls fn with e's key and object. */
static int visit(kl_store_visit_fn *fn, void *ud, st_entry *e) {
  kl_json_span_t k = kl_obj_key_span(e->obj);
  return fn(ud, k.p, k.n, e->obj);
}

/* Moves e from the old object's values to those in s->nv. Returns false
 * when the old values did not match the sets (an impure index function). */
static bool reindex(kl_store_t *s, st_entry *e) {
  bool ok = true;
  for (size_t i = 0; i < s->nix; i++) {
    st_index *ix = s->ix[i];
    size_t first = s->range[2 * i], n = s->range[2 * i + 1];
    scratch_reset(&s->ov);
    if (compute(s, ix, e->obj, &s->ov, NULL, 0) != KL_OK) {
      ok = false;
      add_new_values(s, i, ix->sets, e);
      continue;
    }
    /* client-go's fast path, for any number of values: unchanged. */
    if (s->ov.n == n) {
      size_t k;
      for (k = 0; k < n && val_eq(&s->ov, k, &s->nv, first + k); k++) {
      }
      if (k == n) continue;
    }
    for (size_t k = 0; k < s->ov.n; k++)
      if (!index_del(ix->sets, val_p(&s->ov, k), s->ov.v[k].len, e)) ok = false;
    add_new_values(s, i, ix->sets, e);
  }
  return ok;
}

static int put(kl_store_t *s, kl_obj_t *o, kl_obj_t **old, char *err,
               size_t errlen) {
  kl_obj_keybuf_t k;
  st_entry *e;
  int rc;
  if (old) *old = NULL;
  if ((rc = check_idle(s, err, errlen)) != KL_OK) return rc;
  if ((rc = kl_obj_keybuf(o, &k)) != KL_OK) {
    set_err(err, errlen, "%s", "object has no name");
    return rc;
  }
  if ((rc = compute_all(s, o, err, errlen)) != KL_OK) goto out;
  uint64_t h = kl_hash(k.p, k.len);
  e = kl_dict_get_hashed(s->items, k.p, k.len, h);
  if (!e) {
    e = entry_new(o);
    kl_dict_set_hashed(s->items, e, h);
    for (size_t i = 0; i < s->nix; i++)
      add_new_values(s, i, s->ix[i]->sets, e);
    goto out;
  }
  kl_obj_t *prev = e->obj;
  if (!reindex(s, e)) {
    /* Purge and index afresh from the values just computed. */
    repair(s, e);
    for (size_t i = 0; i < s->nix; i++)
      add_new_values(s, i, s->ix[i]->sets, e);
  }
  e->obj = kl_obj_ref(o);
  if (old)
    *old = prev;
  else
    kl_obj_unref(prev);
out:
  kl_obj_keybuf_free(&k);
  return rc;
}

int kl_store_add(kl_store_t *s, kl_obj_t *o, kl_obj_t **old, char *err,
                 size_t errlen) {
  return put(s, o, old, err, errlen);
}

int kl_store_update(kl_store_t *s, kl_obj_t *o, kl_obj_t **old, char *err,
                    size_t errlen) {
  return put(s, o, old, err, errlen);
}

int kl_store_delete(kl_store_t *s, const char *key, size_t len,
                    kl_obj_t **old) {
  if (old) *old = NULL;
  if (s->busy) return KL_EINVAL;
  uint64_t h = kl_hash(key, len);
  st_entry *e = kl_dict_get_hashed(s->items, key, len, h);
  if (!e) return KL_ENOENT;
  for (size_t i = 0; i < s->nix && e->nmember; i++) {
    scratch_reset(&s->ov);
    if (compute(s, s->ix[i], e->obj, &s->ov, NULL, 0) != KL_OK) continue;
    for (size_t k = 0; k < s->ov.n; k++)
      index_del(s->ix[i]->sets, val_p(&s->ov, k), s->ov.v[k].len, e);
  }
  if (e->nmember) repair(s, e);
  kl_dict_del_hashed(s->items, key, len, h);
  kl_dict_shrink(s->items);
  if (old)
    *old = e->obj;
  else
    kl_obj_unref(e->obj);
  free(e);
  return KL_OK;
}

int kl_store_delete_obj(kl_store_t *s, const kl_obj_t *o, kl_obj_t **old) {
  kl_obj_keybuf_t k;
  if (old) *old = NULL;
  if (kl_obj_keybuf(o, &k) != KL_OK) return KL_ENOENT;
  int rc = kl_store_delete(s, k.p, k.len, old);
  kl_obj_keybuf_free(&k);
  return rc;
}

int kl_store_swap(kl_store_t *s, const kl_obj_t *o, kl_obj_t *repl) {
  kl_obj_keybuf_t k;
  if (s->busy) return KL_EINVAL;
  if (kl_obj_keybuf(o, &k) != KL_OK) return KL_ENOENT;
  st_entry *e = kl_dict_get(s->items, k.p, k.len);
  kl_obj_keybuf_free(&k);
  if (!e || e->obj != o) return KL_ENOENT;
  kl_obj_unref(e->obj);
  e->obj = kl_obj_ref(repl);
  return KL_OK;
}

kl_obj_t *kl_store_get(const kl_store_t *s, const char *key, size_t len) {
  st_entry *e = kl_dict_get(s->items, key, len);
  return e ? e->obj : NULL;
}

kl_obj_t *kl_store_get_obj(const kl_store_t *s, const kl_obj_t *o) {
  kl_obj_keybuf_t k;
  if (kl_obj_keybuf(o, &k) != KL_OK) return NULL;
  kl_obj_t *r = kl_store_get(s, k.p, k.len);
  kl_obj_keybuf_free(&k);
  return r;
}

size_t kl_store_len(const kl_store_t *s) { return kl_dict_size(s->items); }

int kl_store_list(kl_store_t *s, kl_store_visit_fn *fn, void *ud) {
  size_t it = 0;
  st_entry *e;
  int rc = 0;
  s->busy++;
  while ((e = kl_dict_next(s->items, &it)))
    if ((rc = visit(fn, ud, e)) != 0) break;
  s->busy--;
  return rc;
}

int kl_store_replace(kl_store_t *s, kl_obj_t *const *objs, size_t n, char *err,
                     size_t errlen) {
  int rc;
  if ((rc = check_idle(s, err, errlen)) != KL_OK) return rc;
  kl_dict_t *items = kl_dict_new(entry_keyof);
  kl_dict_t **sets = kl_xcalloc(s->nix ? s->nix : 1, sizeof *sets);
  for (size_t i = 0; i < s->nix; i++)
    sets[i] = kl_dict_new(set_keyof);
  for (size_t j = 0; j < n; j++) {
    kl_obj_keybuf_t k;
    if ((rc = kl_obj_keybuf(objs[j], &k)) != KL_OK) {
      set_err(err, errlen, "%s", "object has no name");
      goto fail;
    }
    uint64_t h = kl_hash(k.p, k.len);
    st_entry *e = kl_dict_get_hashed(items, k.p, k.len, h);
    if (e) {
      kl_obj_ref(objs[j]);
      kl_obj_unref(e->obj);
      e->obj = objs[j];
    } else {
      kl_dict_set_hashed(items, entry_new(objs[j]), h);
    }
    kl_obj_keybuf_free(&k);
  }
  size_t it = 0;
  st_entry *e;
  while ((e = kl_dict_next(items, &it))) {
    if ((rc = compute_all(s, e->obj, err, errlen)) != KL_OK) goto fail;
    for (size_t i = 0; i < s->nix; i++)
      add_new_values(s, i, sets[i], e);
  }
  /* Swap. */
  items_free(s->items);
  s->items = items;
  for (size_t i = 0; i < s->nix; i++) {
    sets_clear(s->ix[i]->sets, false);
    s->ix[i]->sets = sets[i];
  }
  free(sets);
  return KL_OK;
fail:
  for (size_t i = 0; i < s->nix; i++)
    sets_clear(sets[i], false);
  free(sets);
  items_free(items);
  return rc;
}

void kl_store_resync(kl_store_t *s) { (void)s; }

/* ---- indexers ---- */

static st_index *find_index(const kl_store_t *s, const char *name) {
  for (size_t i = 0; i < s->nix; i++)
    if (strcmp(s->ix[i]->name, name) == 0) return s->ix[i];
  return NULL;
}

bool kl_store_has_index(const kl_store_t *s, const char *name) {
  return find_index(s, name) != NULL;
}

static int check_indexer(const kl_store_t *s, const kl_store_indexer_t *ix,
                         size_t j, char *err, size_t errlen) {
  const kl_store_indexer_t *x = &ix[j];
  if (!x->name || !x->name[0]) {
    set_err(err, errlen, "%s", "indexer without a name");
    return KL_EINVAL;
  }
  bool dup = find_index(s, x->name) != NULL;
  for (size_t i = 0; i < j && !dup; i++)
    dup = strcmp(ix[i].name, x->name) == 0;
  if (dup) {
    set_err(err, errlen, "indexer conflict: %s", x->name);
    return KL_EEXIST;
  }
  switch (x->kind) {
  case KL_STORE_INDEX_NAMESPACE:
  case KL_STORE_INDEX_CONTROLLER: return KL_OK;
  case KL_STORE_INDEX_LABEL:
    if (x->label && x->label[0]) return KL_OK;
    set_err(err, errlen, "indexer %s: no label key", x->name);
    return KL_EINVAL;
  case KL_STORE_INDEX_CUSTOM:
    if (x->fn) return KL_OK;
    set_err(err, errlen, "indexer %s: no index function", x->name);
    return KL_EINVAL;
  }
  set_err(err, errlen, "indexer %s: unknown kind", x->name);
  return KL_EINVAL;
}

int kl_store_add_indexers(kl_store_t *s, const kl_store_indexer_t *ix, size_t n,
                          char *err, size_t errlen) {
  int rc;
  if ((rc = check_idle(s, err, errlen)) != KL_OK) return rc;
  for (size_t j = 0; j < n; j++)
    if ((rc = check_indexer(s, ix, j, err, errlen)) != KL_OK) return rc;
  if (n == 0) return KL_OK;
  st_index **add = kl_xcalloc(n, sizeof *add);
  for (size_t j = 0; j < n; j++) {
    st_index *x = kl_xcalloc(1, sizeof *x);
    x->sets = kl_dict_new(set_keyof);
    x->kind = ix[j].kind;
    x->fn = ix[j].fn;
    x->ud = ix[j].ud;
    x->name = kl_xstrdup(ix[j].name);
    if (x->kind == KL_STORE_INDEX_LABEL) {
      x->label = kl_xstrdup(ix[j].label);
      x->label_len = strlen(x->label);
    }
    add[j] = x;
  }
  size_t it = 0;
  st_entry *e;
  while ((e = kl_dict_next(s->items, &it))) {
    for (size_t j = 0; j < n; j++) {
      scratch_reset(&s->ov);
      if ((rc = compute(s, add[j], e->obj, &s->ov, err, errlen)) != KL_OK)
        goto fail;
      for (size_t k = 0; k < s->ov.n; k++)
        index_add(add[j]->sets, val_p(&s->ov, k), s->ov.v[k].len, e);
    }
  }
  s->ix = kl_xrealloc(s->ix, (s->nix + n) * sizeof *s->ix);
  for (size_t j = 0; j < n; j++) {
    add[j]->ud_free = ix[j].ud_free;
    s->ix[s->nix++] = add[j];
  }
  free(add);
  return KL_OK;
fail:
  for (size_t j = 0; j < n; j++)
    index_free(add[j], true); /* ud_free is not set yet: the caller's */
  free(add);
  return rc;
}

int kl_store_remove_indexer(kl_store_t *s, const char *name) {
  if (s->busy) return KL_EINVAL;
  for (size_t i = 0; i < s->nix; i++) {
    if (strcmp(s->ix[i]->name, name) != 0) continue;
    st_index *x = s->ix[i];
    memmove(&s->ix[i], &s->ix[i + 1], (s->nix - i - 1) * sizeof *s->ix);
    s->nix--;
    index_free(x, true);
    return KL_OK;
  }
  return KL_ENOENT;
}

/* ---- index queries ---- */

typedef struct st_visit {
  kl_store_visit_fn *fn;
  void *ud;
} st_visit;

static int visit_entry(st_entry *e, void *ud) {
  st_visit *v = ud;
  return visit(v->fn, v->ud, e);
}

int kl_store_by_index(kl_store_t *s, const char *name, const char *val,
                      size_t vlen, kl_store_visit_fn *fn, void *ud) {
  st_index *ix = find_index(s, name);
  if (!ix) return KL_ENOENT;
  st_set *t = kl_dict_get(ix->sets, val, vlen);
  if (!t) return 0;
  st_visit v = {fn, ud};
  s->busy++;
  int rc = set_each(t, visit_entry, &v);
  s->busy--;
  return rc;
}

size_t kl_store_index_len(const kl_store_t *s, const char *name,
                          const char *val, size_t vlen) {
  st_index *ix = find_index(s, name);
  st_set *t = ix ? kl_dict_get(ix->sets, val, vlen) : NULL;
  return t ? t->n : 0;
}

typedef struct st_collect {
  st_entry **v;
  size_t n, cap;
} st_collect;

static int collect_entry(st_entry *e, void *ud) {
  st_collect *c = ud;
  if (c->n == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 16;
    c->v = kl_xrealloc(c->v, c->cap * sizeof *c->v);
  }
  c->v[c->n++] = e;
  return 0;
}

static int ptr_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (st_entry *const *)a;
  uintptr_t y = (uintptr_t) * (st_entry *const *)b;
  return x < y ? -1 : x > y;
}

int kl_store_index(kl_store_t *s, const char *name, const kl_obj_t *o,
                   kl_store_visit_fn *fn, void *ud) {
  st_index *ix = find_index(s, name);
  if (!ix) return KL_ENOENT;
  st_scratch sc = {0};
  st_collect c = {0};
  int rc = compute(s, ix, o, &sc, NULL, 0);
  if (rc != KL_OK) goto out;
  for (size_t k = 0; k < sc.n; k++) {
    st_set *t = kl_dict_get(ix->sets, val_p(&sc, k), sc.v[k].len);
    if (t) set_each(t, collect_entry, &c);
  }
  if (sc.n > 1 && c.n > 1) {
    size_t out = 0;
    qsort(c.v, c.n, sizeof *c.v, ptr_cmp);
    for (size_t k = 0; k < c.n; k++)
      if (k == 0 || c.v[k] != c.v[k - 1]) c.v[out++] = c.v[k];
    c.n = out;
  }
  s->busy++;
  for (size_t k = 0; k < c.n && rc == 0; k++)
    rc = visit(fn, ud, c.v[k]);
  s->busy--;
out:
  scratch_free(&sc);
  free(c.v);
  return rc;
}

int kl_store_index_values(kl_store_t *s, const char *name,
                          kl_store_value_fn *fn, void *ud) {
  st_index *ix = find_index(s, name);
  if (!ix) return KL_ENOENT;
  size_t it = 0;
  st_set *t;
  int rc = 0;
  s->busy++;
  while ((t = kl_dict_next(ix->sets, &it)))
    if ((rc = fn(ud, t->val, t->vlen)) != 0) break;
  s->busy--;
  return rc;
}

size_t kl_store_repairs(const kl_store_t *s) { return s->repairs; }
