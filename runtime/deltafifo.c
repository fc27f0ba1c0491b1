/* deltafifo.c — client-go's DeltaFIFO, classic profile (see deltafifo.h,
 * CLIENTGO.md 7).
 *
 * `items` is a kl_dict of ff_item: the key bytes inline and the key's
 * deltas, oldest first (a single delta lives inside the item, more in a
 * growable array). `ring` is the queue: item pointers in the order of each
 * key's first enqueue. Invariants, as client-go's: a key is in the ring
 * exactly when it is in `items`, once, and its delta list is never empty;
 * only Pop removes keys. Each delta owns one reference to its object.
 *
 * Dedup (queue_action) looks only at the last two deltas: two Deleted merge
 * into the older, unless the older is a tombstone. Replace marks the items
 * of listed keys with a per-Replace stamp instead of building a key set, so
 * "queued but not listed" is the items without the stamp, and a known key
 * not listed is one with no item at all once the listed keys are queued.
 *
 * HasSynced is populated && initial_count == 0, sticky through `synced`.
 * Callbacks: transform runs inside an enqueue and must not call the FIFO;
 * process may call anything but kl_fifo_free (the popped item is detached
 * from the queue first); on_ready and on_synced run last in an operation. */
#include "deltafifo.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dict.h"
#include "error.h"
#include "mem.h"

#define RING_MIN 16u

typedef struct ff_item {
  kl_delta_t *d; /* &one while cap == 1 */
  uint32_t n, cap;
  uint32_t stamp; /* the Replace that listed this key */
  uint32_t len;
  uint64_t hash;
  kl_delta_t one;
  char key[]; /* len bytes and a NUL */
} ff_item;

struct kl_fifo {
  kl_fifo_opts_t o;
  kl_dict_t *items; /* key -> ff_item */
  ff_item **ring;   /* ring[(head + i) & (rcap - 1)], i < count */
  size_t head, count, rcap;
  uint32_t gen; /* stamp of the current Replace */
  size_t initial_count;
  bool populated, synced, synced_told, closed;
};

const char *kl_delta_type_name(kl_delta_type_t t) {
  switch (t) {
  case KL_DELTA_ADDED: return "Added";
  case KL_DELTA_UPDATED: return "Updated";
  case KL_DELTA_DELETED: return "Deleted";
  case KL_DELTA_REPLACED: return "Replaced";
  case KL_DELTA_SYNC: return "Sync";
  }
  return "";
}

static const char *item_keyof(const void *val, size_t *len) {
  const ff_item *it = val;
  *len = it->len;
  return it->key;
}

/* ---- knownObjects backed by a store ---- */

typedef struct known_ctx {
  kl_fifo_key_fn *fn;
  void *ctx;
} known_ctx;

static int known_visit(void *ud, const char *key, size_t len, kl_obj_t *o) {
  known_ctx *k = ud;
  (void)o;
  return k->fn(k->ctx, key, len);
}

static int known_list_keys(void *ud, kl_fifo_key_fn *fn, void *ctx) {
  known_ctx k = {fn, ctx};
  return kl_store_list(ud, known_visit, &k);
}

static int known_get(void *ud, const char *key, size_t len, kl_obj_t **obj) {
  *obj = kl_store_get(ud, key, len);
  return *obj ? KL_OK : KL_ENOENT;
}

kl_fifo_known_t kl_fifo_known_store(kl_store_t *s) {
  kl_fifo_known_t k = {known_list_keys, known_get, s};
  return k;
}

/* ---- the ring ---- */

static void ring_resize(kl_fifo_t *f, size_t cap) {
  ff_item **r = kl_xmalloc(cap * sizeof *r);
  for (size_t i = 0; i < f->count; i++)
    r[i] = f->ring[(f->head + i) & (f->rcap - 1)];
  free(f->ring);
  f->ring = r;
  f->rcap = cap;
  f->head = 0;
}

static void ring_push(kl_fifo_t *f, ff_item *it) {
  if (f->count == f->rcap) ring_resize(f, f->rcap ? f->rcap * 2 : RING_MIN);
  f->ring[(f->head + f->count) & (f->rcap - 1)] = it;
  f->count++;
}

static ff_item *ring_shift(kl_fifo_t *f) {
  ff_item *it = f->ring[f->head];
  f->head = (f->head + 1) & (f->rcap - 1);
  f->count--;
  /* Give memory back after a large list has drained. */
  if (f->rcap > 4 * RING_MIN && f->count < f->rcap / 8)
    ring_resize(f, f->rcap / 4);
  return it;
}

/* ---- items ---- */

static void item_free(ff_item *it) {
  for (uint32_t i = 0; i < it->n; i++)
    kl_obj_unref(it->d[i].obj);
  if (it->d != &it->one) free(it->d);
  free(it);
}

/* The item of key, created and queued when absent (NULL past the limit). */
static ff_item *item_get(kl_fifo_t *f, const char *key, size_t len,
                         bool create) {
  uint64_t h = kl_hash(key, len);
  ff_item *it = kl_dict_get_hashed(f->items, key, len, h);
  if (it || !create) return it;
  if (kl_dict_size(f->items) >= KL_FIFO_MAX_KEYS) return NULL;
  it = kl_xmalloc(sizeof *it + len + 1);
  it->d = &it->one;
  it->n = 0;
  it->cap = 1;
  it->stamp = 0;
  it->len = (uint32_t)len;
  it->hash = h;
  memcpy(it->key, key, len);
  it->key[len] = '\0';
  kl_dict_set_hashed(f->items, it, h);
  ring_push(f, it);
  return it;
}

/* Appends {type, obj} to the key's deltas, then dedups the last two.
 * Transforms obj first when `transform` (and a transformer is set). obj is
 * borrowed (may be NULL for a tombstone). Returns 0 or an error, nothing
 * queued then. */
static int queue_action(kl_fifo_t *f, const char *key, size_t len,
                        kl_delta_type_t type, kl_obj_t *obj, bool tombstone,
                        bool transform) {
  kl_obj_t *o = NULL;
  if (transform && f->o.transform) {
    int rc = f->o.transform(f->o.ud, obj, &o);
    if (rc != KL_OK) return rc < 0 ? rc : KL_EINVAL;
  } else if (obj) {
    o = kl_obj_ref(obj);
  }
  ff_item *it = item_get(f, key, len, true);
  if (!it || it->n >= KL_FIFO_MAX_DELTAS) {
    kl_obj_unref(o);
    return KL_ELIMIT;
  }
  if (it->n == it->cap) {
    uint32_t cap = it->cap * 2;
    kl_delta_t *d = kl_xmalloc(cap * sizeof *d);
    memcpy(d, it->d, it->n * sizeof *d);
    if (it->d != &it->one) free(it->d);
    it->d = d;
    it->cap = cap;
  }
  kl_delta_t *d = it->d;
  d[it->n].obj = o;
  d[it->n].type = type;
  d[it->n].tombstone = tombstone;
  it->n++;
  if (it->n >= 2 && d[it->n - 1].type == KL_DELTA_DELETED &&
      d[it->n - 2].type == KL_DELTA_DELETED) {
    /* Keep the older, unless it is a tombstone (T-02, T-03). */
    if (d[it->n - 2].tombstone) {
      kl_obj_unref(d[it->n - 2].obj);
      d[it->n - 2] = d[it->n - 1];
    } else {
      kl_obj_unref(d[it->n - 1].obj);
    }
    it->n--;
  }
  return KL_OK;
}

/* ---- state and callbacks ---- */

static void check_synced(kl_fifo_t *f) {
  if (!f->synced && f->populated && f->initial_count == 0) f->synced = true;
}

/* Ends an operation: tells on_ready when the queue became non-empty and
 * on_synced once. Nothing of f is used after the callbacks. */
static void finish(kl_fifo_t *f, bool was_empty) {
  bool ready = was_empty && f->count > 0 && f->o.on_ready;
  bool synced = f->synced && !f->synced_told;
  if (synced) f->synced_told = true;
  if (ready) f->o.on_ready(f, f->o.ud);
  if (synced && f->o.on_synced) f->o.on_synced(f, f->o.ud);
}

kl_fifo_t *kl_fifo_new(const kl_fifo_opts_t *opts) {
  kl_fifo_t *f = kl_xcalloc(1, sizeof *f);
  if (opts) f->o = *opts;
  if (!f->o.known.list_keys || !f->o.known.get)
    memset(&f->o.known, 0, sizeof f->o.known);
  f->items = kl_dict_new(item_keyof);
  return f;
}

void kl_fifo_free(kl_fifo_t *f) {
  if (!f) return;
  for (size_t i = 0; i < f->count; i++)
    item_free(f->ring[(f->head + i) & (f->rcap - 1)]);
  kl_dict_free(f->items);
  free(f->ring);
  free(f);
}

static int enqueue_obj(kl_fifo_t *f, kl_delta_type_t type, kl_obj_t *o) {
  kl_obj_keybuf_t k;
  bool was_empty = f->count == 0;
  if (kl_obj_keybuf(o, &k) != KL_OK) return KL_EINVAL;
  f->populated = true;
  check_synced(f);
  int rc = queue_action(f, k.p, k.len, type, o, false, true);
  kl_obj_keybuf_free(&k);
  finish(f, was_empty);
  return rc;
}

int kl_fifo_add(kl_fifo_t *f, kl_obj_t *o) {
  return enqueue_obj(f, KL_DELTA_ADDED, o);
}

int kl_fifo_update(kl_fifo_t *f, kl_obj_t *o) {
  return enqueue_obj(f, KL_DELTA_UPDATED, o);
}

int kl_fifo_delete(kl_fifo_t *f, kl_obj_t *o) {
  kl_obj_keybuf_t k;
  int rc = KL_OK;
  bool was_empty = f->count == 0;
  if (kl_obj_keybuf(o, &k) != KL_OK) return KL_EINVAL;
  f->populated = true;
  check_synced(f);
  if (!item_get(f, k.p, k.len, false)) {
    bool ignore = true;
    if (f->o.known.get) {
      kl_obj_t *known;
      ignore = f->o.known.get(f->o.known.ud, k.p, k.len, &known) == KL_ENOENT;
    }
    if (ignore) goto out; /* T-04: deleted already, maybe by a relist */
  }
  rc = queue_action(f, k.p, k.len, KL_DELTA_DELETED, o, false, true);
out:
  kl_obj_keybuf_free(&k);
  finish(f, was_empty);
  return rc;
}

typedef struct replace_ctx {
  kl_fifo_t *f;
  size_t deletions;
  int rc;
} replace_ctx;

/* Replace step 3: a known key that is neither listed nor queued. */
static int replace_known(void *ctx, const char *key, size_t len) {
  replace_ctx *r = ctx;
  kl_fifo_t *f = r->f;
  if (item_get(f, key, len, false)) return 0;
  kl_obj_t *obj = NULL;
  if (f->o.known.get(f->o.known.ud, key, len, &obj) != KL_OK) obj = NULL;
  r->deletions++;
  r->rc = queue_action(f, key, len, KL_DELTA_DELETED, obj, true, false);
  return r->rc;
}

int kl_fifo_replace(kl_fifo_t *f, kl_obj_t *const *objs, size_t n) {
  kl_delta_type_t action =
      f->o.replace_as_sync ? KL_DELTA_SYNC : KL_DELTA_REPLACED;
  replace_ctx r = {f, 0, KL_OK};
  size_t listed = 0;
  bool was_empty = f->count == 0;
  if (++f->gen == 0) f->gen = 1;
  /* 1. The listed objects (transformed: the internal action is Replaced). */
  for (size_t j = 0; j < n; j++) {
    kl_obj_keybuf_t k;
    if ((r.rc = kl_obj_keybuf(objs[j], &k)) != KL_OK) goto out;
    r.rc = queue_action(f, k.p, k.len, action, objs[j], false, true);
    if (r.rc == KL_OK) {
      ff_item *it = item_get(f, k.p, k.len, false);
      if (it->stamp != f->gen) {
        it->stamp = f->gen;
        listed++;
      }
    }
    kl_obj_keybuf_free(&k);
    if (r.rc != KL_OK) goto out;
  }
  /* 2. Queued keys not listed: a tombstone with the newest object. Only
   * existing items change, so the iteration stays valid. */
  size_t iter = 0;
  ff_item *it;
  while ((it = kl_dict_next(f->items, &iter))) {
    if (it->stamp == f->gen) continue;
    r.deletions++;
    r.rc = queue_action(f, it->key, it->len, KL_DELTA_DELETED,
                        it->d[it->n - 1].obj, true, false);
    if (r.rc != KL_OK) goto out;
  }
  /* 3. Known keys neither listed nor queued. */
  if (f->o.known.list_keys) {
    f->o.known.list_keys(f->o.known.ud, replace_known, &r);
    if (r.rc != KL_OK) goto out;
  }
  /* 4. The first Replace decides when the FIFO has synced. */
  if (!f->populated) {
    f->populated = true;
    f->initial_count = listed + r.deletions;
    check_synced(f);
  }
out:
  finish(f, was_empty);
  return r.rc;
}

typedef struct resync_ctx {
  kl_fifo_t *f;
  int rc;
} resync_ctx;

static int resync_key(void *ctx, const char *key, size_t len) {
  resync_ctx *r = ctx;
  kl_fifo_t *f = r->f;
  kl_obj_t *obj;
  if (item_get(f, key, len, false)) return 0; /* a pending change wins */
  if (f->o.known.get(f->o.known.ud, key, len, &obj) != KL_OK || !obj) return 0;
  r->rc = queue_action(f, key, len, KL_DELTA_SYNC, obj, false, false);
  return r->rc;
}

int kl_fifo_resync(kl_fifo_t *f) {
  resync_ctx r = {f, KL_OK};
  bool was_empty = f->count == 0;
  if (f->o.known.list_keys) f->o.known.list_keys(f->o.known.ud, resync_key, &r);
  finish(f, was_empty);
  return r.rc;
}

int kl_fifo_pop(kl_fifo_t *f, kl_fifo_process_fn *process, void *ud) {
  if (f->count == 0) return f->closed ? KL_ESHUTDOWN : KL_EAGAIN;
  bool initial = !f->synced;
  ff_item *it = ring_shift(f);
  if (f->initial_count > 0) {
    f->initial_count--;
    check_synced(f);
  }
  kl_dict_del_hashed(f->items, it->key, it->len, it->hash);
  kl_dict_shrink(f->items);
  kl_fifo_popped_t p = {it->key, it->len, it->d, it->n, initial, false};
  int rc = process(ud, &p);
  bool was_empty = f->count == 0;
  if (p.requeue && !item_get(f, it->key, it->len, false) &&
      kl_dict_size(f->items) < KL_FIFO_MAX_KEYS) {
    it->stamp = 0;
    kl_dict_set_hashed(f->items, it, it->hash);
    ring_push(f, it);
  } else {
    item_free(it);
  }
  finish(f, was_empty);
  return rc;
}

void kl_fifo_close(kl_fifo_t *f) { f->closed = true; }

bool kl_fifo_closed(const kl_fifo_t *f) { return f->closed; }

bool kl_fifo_has_synced(const kl_fifo_t *f) { return f->synced; }

size_t kl_fifo_len(const kl_fifo_t *f) { return f->count; }

size_t kl_fifo_get(const kl_fifo_t *f, const char *key, size_t len,
                   const kl_delta_t **deltas) {
  ff_item *it = kl_dict_get(f->items, key, len);
  if (!it) return 0;
  if (deltas) *deltas = it->d;
  return it->n;
}

int kl_fifo_list_keys(const kl_fifo_t *f, kl_fifo_key_fn *fn, void *ctx) {
  for (size_t i = 0; i < f->count; i++) {
    const ff_item *it = f->ring[(f->head + i) & (f->rcap - 1)];
    int rc = fn(ctx, it->key, it->len);
    if (rc) return rc;
  }
  return 0;
}
