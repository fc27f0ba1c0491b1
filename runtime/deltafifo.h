/* deltafifo.h — client-go's DeltaFIFO (the classic profile), on one thread.
 *
 * A queue of keys, each with the list of deltas (Added, Updated, Deleted,
 * Replaced, Sync) that arrived for it since it was last popped, oldest
 * first; a key keeps the queue position of its first delta (CLIENTGO.md 7,
 * T-01..T-10). The reflector produces (Add, Update, Delete, Replace,
 * Resync); one consumer pops. Nothing blocks: Pop returns KL_EAGAIN when the
 * queue is empty and the caller pops again when told (on_ready).
 *
 * Deltas hold their own object references. A Deleted delta may carry a
 * tombstone (client-go's DeletedFinalStateUnknown {key, obj}): a deletion
 * inferred by Replace, whose object is the last state known and may be
 * NULL. No Lua or libev here. */
#ifndef KL_DELTAFIFO_H
#define KL_DELTAFIFO_H

#include <stdbool.h>
#include <stddef.h>

#include "object.h"
#include "store.h"

typedef struct kl_fifo kl_fifo_t;

typedef enum kl_delta_type {
  KL_DELTA_ADDED = 1,
  KL_DELTA_UPDATED,
  KL_DELTA_DELETED,
  KL_DELTA_REPLACED,
  KL_DELTA_SYNC,
} kl_delta_type_t;

typedef struct kl_delta {
  kl_obj_t *obj; /* NULL only in a tombstone whose object is unknown */
  kl_delta_type_t type;
  bool tombstone; /* a Deleted delta inferred by Replace */
} kl_delta_t;

/* "Added", "Updated", "Deleted", "Replaced", "Sync" ("" otherwise). */
const char *kl_delta_type_name(kl_delta_type_t t);

/* Limits: keys queued at once and deltas queued for one key. Beyond them
 * the enqueue fails with KL_ELIMIT. */
#define KL_FIFO_MAX_KEYS (1u << 28)
#define KL_FIFO_MAX_DELTAS (1u << 20)

/* client-go's knownObjects (a KeyListerGetter): the keys the consumer has
 * cached. list_keys calls fn(ctx, key, len) for every key and returns 0 (or
 * what fn returned to stop it); get returns 0 with a borrowed object in
 * *obj, KL_ENOENT when the key is unknown, or another error. */
typedef int kl_fifo_key_fn(void *ctx, const char *key, size_t len);
typedef struct kl_fifo_known {
  int (*list_keys)(void *ud, kl_fifo_key_fn *fn, void *ctx);
  int (*get)(void *ud, const char *key, size_t len, kl_obj_t **obj);
  void *ud;
} kl_fifo_known_t;

/* A knownObjects backed by a store (what informers use). */
kl_fifo_known_t kl_fifo_known_store(kl_store_t *s);

typedef struct kl_fifo_opts {
  /* knownObjects; NULL fields (list_keys) mean none. Copied. */
  kl_fifo_known_t known;
  /* Emit Sync instead of Replaced from Replace (client-go's
   * EmitDeltaTypeReplaced=false). Informers leave it false. */
  bool replace_as_sync;
  /* client-go's TransformFunc: called once for each object that Add,
   * Update, Delete and Replace enqueue (not for tombstones, nor for Resync's
   * Sync deltas, T-10), before it is queued. Returns 0 with a new reference
   * in *out (kl_obj_ref(in) to keep it), or an error that aborts that
   * enqueue. The key is the one of the object before the transform. It must
   * not call the FIFO. */
  int (*transform)(void *ud, kl_obj_t *in, kl_obj_t **out);
  /* The queue went from empty to non-empty: pop soon. */
  void (*on_ready)(kl_fifo_t *f, void *ud);
  /* HasSynced just became true (once in the FIFO's life). Called at the end
   * of the operation that made it so. */
  void (*on_synced)(kl_fifo_t *f, void *ud);
  void *ud;
} kl_fifo_opts_t;

/* What Pop hands to the process function: every delta of one key. */
typedef struct kl_fifo_popped {
  const char *key; /* NUL-terminated */
  size_t len;
  const kl_delta_t *deltas; /* oldest first, n >= 1 */
  size_t n;
  bool initial; /* isInInitialList: popped before the FIFO had synced */
  /* Set by the process function to queue these deltas again (client-go's
   * ErrRequeue): they go to the back of the queue unless new deltas arrived
   * for the key during processing, which then win. */
  bool requeue;
} kl_fifo_popped_t;

/* Processes one popped key; returns 0 or an error that Pop returns. The
 * deltas and their objects are borrowed for the call (take references to
 * keep objects). It may call any function of the FIFO except kl_fifo_free. */
typedef int kl_fifo_process_fn(void *ud, kl_fifo_popped_t *it);

/* Returns a new FIFO; opts may be NULL. Never NULL. */
kl_fifo_t *kl_fifo_new(const kl_fifo_opts_t *opts);
/* Releases every queued delta and frees the FIFO. NULL is a no-op. Not
 * from one of its callbacks. */
void kl_fifo_free(kl_fifo_t *f);

/* The producers. Each may call transform, and on_ready / on_synced last.
 * They return 0, KL_EINVAL for an object without a name, KL_ELIMIT past a
 * limit, or the transform's error (nothing queued then). The FIFO takes its
 * own references; the caller keeps its own. */

/* Add / Update: queue an Added / Updated delta for o. */
int kl_fifo_add(kl_fifo_t *f, kl_obj_t *o);
int kl_fifo_update(kl_fifo_t *f, kl_obj_t *o);
/* Delete: queue a Deleted delta for o, unless its key has no queued deltas
 * and knownObjects (when set) says it is unknown: then it is ignored (0,
 * T-04). Two Deleted deltas in a row collapse into the older one, unless
 * that is a tombstone (T-02, T-03). */
int kl_fifo_delete(kl_fifo_t *f, kl_obj_t *o);
/* Replace(list): queue a Replaced (or Sync) delta for each of the n objects,
 * then a Deleted tombstone for every queued key not listed (with its newest
 * object) and for every known key not listed and not queued (with the known
 * object), T-05. The first Replace (with no Add/Update/Delete before it)
 * sets the number of pops after which the FIFO has synced (T-07; an empty
 * one syncs at once, T-08). On an error, deltas queued before it stay. */
int kl_fifo_replace(kl_fifo_t *f, kl_obj_t *const *objs, size_t n);
/* Resync: a Sync delta with the known object for every known key that has
 * no queued delta (T-09); never transformed. Without knownObjects, nothing.
 * Returns 0 or KL_ELIMIT. */
int kl_fifo_resync(kl_fifo_t *f);

/* Pop: takes the key at the head of the queue and calls process(ud, it)
 * with its deltas; returns what process returned. Returns KL_EAGAIN when the
 * queue is empty, KL_ESHUTDOWN when it is empty and closed (keys queued
 * before Close are still popped). An initial-list pop counts towards
 * HasSynced before process is called (as client-go). May call on_synced
 * after process. */
int kl_fifo_pop(kl_fifo_t *f, kl_fifo_process_fn *process, void *ud);

/* Close: Pop returns KL_ESHUTDOWN once the queue is empty. Producers still
 * work (as in client-go). */
void kl_fifo_close(kl_fifo_t *f);
bool kl_fifo_closed(const kl_fifo_t *f);

/* HasSynced: the first Replace's items have all been popped, or an
 * Add/Update/Delete came first. Never reverts. */
bool kl_fifo_has_synced(const kl_fifo_t *f);

/* The number of queued keys. */
size_t kl_fifo_len(const kl_fifo_t *f);
/* GetByKey: the queued deltas of a key (borrowed, valid until the FIFO
 * changes) in *deltas and their number, or 0 when the key is not queued. */
size_t kl_fifo_get(const kl_fifo_t *f, const char *key, size_t len,
                   const kl_delta_t **deltas);
/* ListKeys: calls fn(ctx, key, len) for every queued key in queue order;
 * returns 0 or what fn returned to stop. fn must not change the FIFO. */
int kl_fifo_list_keys(const kl_fifo_t *f, kl_fifo_key_fn *fn, void *ctx);

#endif
