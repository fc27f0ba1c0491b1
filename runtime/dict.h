/* dict.h — an intrusive hash map from byte-string keys to values.
 *
 * The values own their keys: the map stores only a pointer to each value and
 * asks a keyof function for the key bytes, so an entry costs one 16-byte slot
 * (a cached hash and the pointer) and the map never copies or frees keys or
 * values. Keys are (pointer, length) pairs and may contain any bytes,
 * including NUL. Values must not be NULL. */
#ifndef KL_DICT_H
#define KL_DICT_H

#include <stddef.h>
#include <stdint.h>

typedef struct kl_dict kl_dict_t;

/* Returns the key of val (owned by val) and its length in *len. The key must
 * not change while val is in a map. */
typedef const char *kl_dict_keyof_fn(const void *val, size_t *len);

/* Returns a new, empty map; it allocates no table until the first insert. */
kl_dict_t *kl_dict_new(kl_dict_keyof_fn *keyof);
/* Frees the map, not the values (iterate first to free them). NULL is a
 * no-op. */
void kl_dict_free(kl_dict_t *d);

/* The value whose key is the len bytes at key, or NULL. key may be NULL when
 * len is 0. */
void *kl_dict_get(const kl_dict_t *d, const char *key, size_t len);
/* Inserts val under keyof(val), replacing the value with an equal key.
 * Returns the replaced value, or NULL when the key is new. val must not be
 * NULL. May grow the table. */
void *kl_dict_set(kl_dict_t *d, void *val);
/* Removes the value with that key and returns it, or NULL when absent. Never
 * resizes the table, so it is safe during an iteration (see kl_dict_next). */
void *kl_dict_del(kl_dict_t *d, const char *key, size_t len);
/* The same three with the key's kl_hash supplied, for callers that keep it
 * and look one key up, insert and delete it repeatedly. hash must equal
 * kl_hash(key, len) (for set, of keyof(val)); a wrong hash loses values. */
void *kl_dict_get_hashed(const kl_dict_t *d, const char *key, size_t len,
                         uint64_t hash);
void *kl_dict_set_hashed(kl_dict_t *d, void *val, uint64_t hash);
void *kl_dict_del_hashed(kl_dict_t *d, const char *key, size_t len,
                         uint64_t hash);
/* Gives memory back after deletions: when a table of more than 8 slots has
 * fewer than 1/8 of them in use, rehashes into one at most half full (or
 * frees the table of an empty map). O(1) when there is nothing to do, so
 * callers may call it after every deletion; not during an iteration. */
void kl_dict_shrink(kl_dict_t *d);
size_t kl_dict_size(const kl_dict_t *d);

/* Iteration:
 *
 *   size_t it = 0;
 *   void *v;
 *   while ((v = kl_dict_next(d, &it))) ...
 *
 * returns every value once, in no particular order, then NULL (and NULL
 * again on further calls). Between two calls the caller may:
 *   - delete the value just returned, or any value returned before: every
 *     value present for the whole iteration is still returned exactly once;
 *   - replace a value with kl_dict_set of a key already present;
 *   - delete a value not yet returned: it is not returned, no other value is
 *     skipped, but a value already returned may come a second time.
 * Inserting a new key or calling kl_dict_shrink ends the iteration's
 * guarantees (the table may be rebuilt); start a new one. The iterator holds
 * two slot positions, which limits a map to 2^31 slots. */
void *kl_dict_next(const kl_dict_t *d, size_t *it);

/* A fast 64-bit hash of len bytes (wyhash-style multiply-mix); public so
 * other modules hash keys the same way. key may be NULL when len is 0. Not
 * seeded: equal bytes give equal hashes in every process. */
uint64_t kl_hash(const char *key, size_t len);

#endif
