/* objz.h — cached objects kept compressed, with a dictionary learned from
 * the objects themselves.
 *
 * The objects of one informer look alike (same kind, same schema, mostly the
 * same keys and often the same values), so zstd with a dictionary made of
 * the first objects the informer caches shrinks the rest several times over.
 * A codec is per informer: it keeps the first objects plain while it learns
 * (their JSON, up to sample_size bytes, becomes the dictionary's content,
 * and the `samples` objects after those give it entropy tables), then
 * returns compressed copies of every object worth compressing.
 * Compressed objects keep plain only what the store and the FIFO read on
 * every access (namespace, name, resourceVersion, apiVersion, kind,
 * generation, deletionTimestamp) and hold a reference on the codec, which
 * decompresses kl_obj_json on demand into its own buffers; uid, labels and
 * owners are read from a plain form the codec rebuilds from the JSON and
 * keeps for the last object asked (an index update reads one object's
 * several times in a row).
 *
 * Single-threaded, like everything on the loop. */
#ifndef KL_OBJZ_H
#define KL_OBJZ_H

#include <stdbool.h>
#include <stddef.h>

#include "object.h"

typedef struct kl_objz kl_objz_t;

typedef struct kl_objz_opts {
  size_t min_size;    /* JSON shorter than this stays plain; 0: 256 */
  size_t sample_size; /* JSON bytes of the dictionary's content; 0: 128 KiB */
  int level;          /* zstd level; 0: 1 */
  size_t samples;     /* objects after the content the entropy tables are
                       * learned from; 0: 16 */
} kl_objz_opts_t;

typedef struct kl_objz_stats {
  size_t compressed;       /* objects compressed */
  size_t json_bytes;       /* their JSON bytes */
  size_t compressed_bytes; /* their compressed bytes */
  size_t dictionary_bytes; /* 0 while learning */
  size_t decompressed;     /* kl_objz_decompress calls */
} kl_objz_stats_t;

/* A codec with one reference, held by the caller; opts may be NULL. */
kl_objz_t *kl_objz_new(const kl_objz_opts_t *opts);
kl_objz_t *kl_objz_ref(kl_objz_t *z);
/* Drops a reference; compressed objects hold one each, so the codec lives
 * as long as they do. NULL is a no-op. */
void kl_objz_unref(kl_objz_t *z);

/* The form of o to cache: a new reference to a compressed copy, or to o
 * itself (while learning, when o is short, already compressed, or does not
 * shrink). Never fails. */
kl_obj_t *kl_objz_compress(kl_objz_t *z, kl_obj_t *o);

/* Whether the codec is still learning: it keeps the objects it is given
 * plain, and compresses from the next one after the last it learns from. */
bool kl_objz_learning(const kl_objz_t *z);

/* Decompresses src (n bytes, made by this codec from len bytes of JSON)
 * into one of the codec's buffers, NUL-terminated. The span stays valid
 * until the fourth next call on this codec. Corrupt input is a bug: it
 * aborts. */
kl_json_span_t kl_objz_decompress(kl_objz_t *z, const char *src, size_t n,
                                  size_t len);

/* For object.c: the plain form of the compressed object o (made from its
 * JSON to read what o does not keep: uid, labels, owners) when it is the
 * one the codec keeps, else NULL. Borrowed. */
kl_obj_t *kl_objz_plain(const kl_objz_t *z, const kl_obj_t *o);
/* Keeps plain (taking its reference) as o's plain form, releasing the one
 * kept before: one at a time. */
void kl_objz_keep_plain(kl_objz_t *z, const kl_obj_t *o, kl_obj_t *plain);
/* o is being freed: releases its plain form if the codec keeps it. */
void kl_objz_forget(kl_objz_t *z, const kl_obj_t *o);

void kl_objz_stats(const kl_objz_t *z, kl_objz_stats_t *st);

#endif
