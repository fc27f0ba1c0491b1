/* store.h — the informer cache: a keyed store of objects with indices.
 *
 * client-go's ThreadSafeStore / Indexer (CLIENTGO.md 4) on one thread: a map
 * from MetaNamespaceKey ("namespace/name", or "name") to an immutable
 * kl_obj_t, plus named indices, each mapping an indexed value to the set of
 * keys whose object yields that value. The store holds one reference per
 * cached object. Objects it hands out are borrowed: they stay valid until the
 * store is next modified (take a reference to keep one longer).
 *
 * Memory: one entry per object (16 bytes: the object pointer and a count;
 * the key is the object's own, kl_obj_key_span, found through a kl_dict),
 * and per index a map from value to a compact set
 * of entry pointers. No per-entry copy of index values is kept: to unindex an
 * object the store recomputes the values of the old object, which it still
 * holds. A count of memberships per entry detects index functions that are
 * not pure, and a full scan then repairs the indices (so no set can keep a
 * pointer to a freed entry).
 *
 * Iterations call back instead of allocating arrays. A callback may read the
 * store but not modify it: a modification during an iteration (or from an
 * index function) fails with KL_EINVAL. No Lua or libev here. */
#ifndef KL_STORE_H
#define KL_STORE_H

#include <stdbool.h>
#include <stddef.h>

#include "object.h"

typedef struct kl_store kl_store_t;

/* The name of client-go's standard index (MetaNamespaceIndexFunc). */
#define KL_STORE_NAMESPACE "namespace"

/* Limits on what one index function may emit for one object: the number of
 * values and their total bytes. Emitting more fails the operation with
 * KL_ELIMIT. */
#define KL_STORE_MAX_VALUES 4096u
#define KL_STORE_MAX_VALUE_BYTES (1u << 20)

/* Hands one index value (len bytes, any bytes) to the store; the store copies
 * it. Duplicates are allowed and count once. Returns 0, or KL_ELIMIT when the
 * object has emitted too much: the index function should then return that
 * code (the operation fails either way). */
typedef int kl_store_emit_fn(void *ctx, const char *val, size_t len);

/* A custom index function: calls emit(ctx, …) once per value the object is
 * indexed under (none is fine) and returns 0, or a negative KL_E* code to
 * fail the store operation that called it (the store is then left as it was;
 * kl_store_index_fail can add a message). It must be a pure function of the
 * object: the store recomputes the values of the old object to unindex it. It
 * must not modify the store. */
typedef int kl_store_index_fn(const kl_obj_t *o, void *ud,
                              kl_store_emit_fn *emit, void *ctx);

/* From inside an index function: records msg (copied, truncated) as the
 * reason of its failure; the store's caller gets "index NAME: msg". */
void kl_store_index_fail(void *ctx, const char *msg);

typedef enum kl_store_index_kind {
  KL_STORE_INDEX_NAMESPACE = 1, /* [namespace] ("" for cluster scope) */
  KL_STORE_INDEX_LABEL,         /* [value of label `label`], or none */
  KL_STORE_INDEX_CONTROLLER,    /* [uid of the controller owner], or none */
  KL_STORE_INDEX_CUSTOM,        /* fn(o, ud, …) */
} kl_store_index_kind_t;

typedef struct kl_store_indexer {
  const char *name; /* copied */
  kl_store_index_kind_t kind;
  const char *label; /* KL_STORE_INDEX_LABEL: the label key (copied) */
  kl_store_index_fn *fn;
  void *ud;
  /* Called with ud when the store drops the indexer (kl_store_free,
   * kl_store_remove_indexer); may be NULL. Not called when adding fails. */
  void (*ud_free)(void *ud);
} kl_store_indexer_t;

/* Visits one cached object: key (len bytes, NUL-terminated) and object, both
 * borrowed for the call. Return 0 to go on; anything else stops the
 * iteration, which returns that value. */
typedef int kl_store_visit_fn(void *ud, const char *key, size_t len,
                              kl_obj_t *obj);

/* Visits one index value (len bytes, NUL-terminated, borrowed). Return as
 * kl_store_visit_fn. */
typedef int kl_store_value_fn(void *ud, const char *val, size_t len);

/* Returns a new, empty store with no indexers. Never NULL. */
kl_store_t *kl_store_new(void);
/* Releases every object, frees the indices (calling the indexers' ud_free)
 * and the store. NULL is a no-op. Not from a callback of the store. */
void kl_store_free(kl_store_t *s);

/* Add and Update (identical, as in client-go): caches o under its key,
 * taking a reference, and updates every index. When the key was cached, the
 * previous object's reference moves to *old (the caller releases it) if old
 * is not NULL, and is released otherwise; *old is NULL for a new key. Returns
 * 0; KL_EINVAL (object without a name, or the store is being iterated);
 * or the error of an index function (KL_ELIMIT, or what it returned), the
 * store then unchanged. err (errlen bytes, may be 0) gets a message. Calls
 * the index functions. */
int kl_store_add(kl_store_t *s, kl_obj_t *o, kl_obj_t **old, char *err,
                 size_t errlen);
int kl_store_update(kl_store_t *s, kl_obj_t *o, kl_obj_t **old, char *err,
                    size_t errlen);

/* Removes the key (len bytes) and unindexes its object, whose reference
 * moves to *old (or is released when old is NULL). Returns 0, KL_ENOENT when
 * the key is not cached (a silent no-op in client-go: callers may ignore
 * it), or KL_EINVAL while the store is being iterated. Never fails because
 * of an index function: a failing or inconsistent one is detected and the
 * entry purged from every index (counted by kl_store_repairs). */
int kl_store_delete(kl_store_t *s, const char *key, size_t len, kl_obj_t **old);
/* Delete(obj): kl_store_delete under o's key. */
int kl_store_delete_obj(kl_store_t *s, const kl_obj_t *o, kl_obj_t **old);

/* Puts repl, another form of o (the same key, metadata and JSON: objz's
 * compressed copy), in o's place if o is still the object cached under its
 * key; indices are untouched, no index function runs. Takes a reference on
 * repl and drops the store's on o. Returns 0, KL_ENOENT (o is not the
 * cached object) or KL_EINVAL (an iteration is in progress). */
int kl_store_swap(kl_store_t *s, const kl_obj_t *o, kl_obj_t *repl);

/* GetByKey: the cached object (borrowed), or NULL. Never calls back. */
kl_obj_t *kl_store_get(const kl_store_t *s, const char *key, size_t len);
/* Get(obj): the cached object under o's key (borrowed), or NULL. */
kl_obj_t *kl_store_get_obj(const kl_store_t *s, const kl_obj_t *o);
/* The number of cached objects. */
size_t kl_store_len(const kl_store_t *s);

/* List / ListKeys: calls fn for every cached object, in no particular
 * order. Returns 0 or the value that stopped the iteration. */
int kl_store_list(kl_store_t *s, kl_store_visit_fn *fn, void *ud);

/* Replace(list): makes the n objects the whole content (a key listed twice
 * keeps the last), rebuilds every index and emits nothing. Builds the new
 * content aside and swaps it in, so on failure (KL_EINVAL for an object
 * without a name or during an iteration, or an index function's error) the
 * store is unchanged. The store takes its own references. Calls the index
 * functions. */
int kl_store_replace(kl_store_t *s, kl_obj_t *const *objs, size_t n, char *err,
                     size_t errlen);

/* Resync: does nothing (client-go's store has nothing to resync). */
void kl_store_resync(kl_store_t *s);

/* AddIndexers: adds the n indexers and indexes every cached object with
 * them, all or nothing. Returns 0; KL_EEXIST with "indexer conflict: NAME"
 * when a name exists already or comes twice; KL_EINVAL for a missing name,
 * an unknown kind, a label kind without label, a custom kind without fn, or
 * during an iteration; or an index function's error. On failure nothing is
 * added and the caller keeps every ud. Calls the index functions. */
int kl_store_add_indexers(kl_store_t *s, const kl_store_indexer_t *ix, size_t n,
                          char *err, size_t errlen);
/* Removes the index called name (an extension: client-go cannot, but a
 * reloaded script must be able to register its indexers again). Returns 0
 * or KL_ENOENT; KL_EINVAL during an iteration. Calls ud_free. */
int kl_store_remove_indexer(kl_store_t *s, const char *name);
/* Whether an index called name exists. */
bool kl_store_has_index(const kl_store_t *s, const char *name);

/* The index queries return KL_ENOENT for an unknown index (client-go:
 * "Index with name %s does not exist"), else 0 or the value that stopped the
 * iteration. */

/* ByIndex / IndexKeys: calls fn for every object indexed under the value
 * (vlen bytes) in index `name`, in no particular order. */
int kl_store_by_index(kl_store_t *s, const char *name, const char *val,
                      size_t vlen, kl_store_visit_fn *fn, void *ud);
/* The number of objects indexed under the value (0 for an unknown index or
 * value). */
size_t kl_store_index_len(const kl_store_t *s, const char *name,
                          const char *val, size_t vlen);
/* Index(name, obj): calls fn once for every cached object sharing at least
 * one value of index `name` with o (whose values the index function
 * computes; its error is returned). Calls the index function. */
int kl_store_index(kl_store_t *s, const char *name, const kl_obj_t *o,
                   kl_store_visit_fn *fn, void *ud);
/* ListIndexFuncValues: calls fn for every value of the index that has at
 * least one object (empty sets are pruned). */
int kl_store_index_values(kl_store_t *s, const char *name,
                          kl_store_value_fn *fn, void *ud);

/* How many times an index function was found inconsistent (it failed, or
 * gave other values for an unchanged object) and the store repaired its
 * indices by a full scan. 0 for pure index functions. */
size_t kl_store_repairs(const kl_store_t *s);

#endif
