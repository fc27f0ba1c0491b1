/* object.h — Kubernetes objects as the cache keeps them, and watch events.
 *
 * A kl_obj_t is immutable and reference-counted: the object's compact JSON
 * (insignificant whitespace removed; metadata.managedFields removed unless
 * asked to keep them) plus the fields the core needs, extracted in C. It is
 * one allocation: strings are spans into the JSON bytes (or, for the rare
 * string written with escapes, into a decoded copy in the same block).
 * Spans returned here are not NUL-terminated and stay valid while the caller
 * holds a reference; an absent string is the empty span (p is never NULL).
 * Except on a compressed object (kl_obj_compressed), which keeps only the
 * strings the core reads on every access: its uid, labels and owners are
 * read from a plain form its codec rebuilds and keeps for one object at a
 * time, so those spans stay valid until the uid, labels or owners of
 * another compressed object of the codec are read: consume them at once. */
#ifndef KL_OBJECT_H
#define KL_OBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json.h"

typedef struct kl_obj kl_obj_t;

typedef struct kl_obj_opts {
  /* Keep metadata.managedFields (dropped by default, as client-go users do
   * with a transform). */
  bool keep_managed_fields;
  /* When the object has no "apiVersion" / "kind" member (list items carry
   * none), insert this one at the front of its JSON; NULL inserts nothing.
   * Must not need JSON escaping (else KL_EINVAL). */
  const char *api_version, *kind;
  /* Leave metadata.labels and metadata.ownerReferences in the JSON instead
   * of extracting tables of them (unless they hold escapes): the object is
   * smaller and quicker to build, and kl_obj_label…/kl_obj_owner… walk its
   * JSON on each call; a malformed label or owner, which is refused
   * otherwise, then reads as none. For a cache that reads them rarely
   * (no label or controller index). */
  bool lazy_refs;
} kl_obj_opts_t;

typedef struct kl_obj_owner {
  kl_json_span_t api_version, kind, name, uid;
  bool controller, block_owner_deletion;
} kl_obj_owner_t;

/* A Status (kind "Status", an API error or the object of an ERROR watch
 * event). The strings are owned, NUL-terminated and "" when absent; a NUL
 * in one (\u0000 in the JSON) reads as the six characters \u0000. */
typedef struct kl_obj_status {
  int64_t code; /* 0 when absent */
  char *status, *reason, *message;
} kl_obj_status_t;

typedef enum kl_obj_event_type {
  KL_OBJ_ADDED = 1,
  KL_OBJ_MODIFIED,
  KL_OBJ_DELETED,
  KL_OBJ_BOOKMARK,
  KL_OBJ_ERROR,
} kl_obj_event_type_t;

/* A watch event: {"type": …, "object": {…}}. */
typedef struct kl_obj_event {
  kl_obj_event_type_t type;
  kl_obj_t *obj;          /* one reference, owned by the event */
  kl_obj_status_t status; /* filled for KL_OBJ_ERROR, zero otherwise */
} kl_obj_event_t;

/* Builds an object from a JSON object value that kl_json_stream (or
 * kl_json_check) has validated; opts may be NULL. On success stores a new
 * object with one reference in *out and returns KL_OK. Returns KL_EPARSE
 * when a field the core reads has the wrong type (e.g. a label value that is
 * not a string, a generation that is not an int64; null counts as absent) or
 * the input is not a valid object, KL_EINVAL for bad opts; err then holds
 * "byte N: reason" with N a stream offset (errlen may be 0). Input that was
 * not validated gives an error or an unspecified object, never a crash. */
int kl_obj_parse(const kl_json_value_t *v, const kl_obj_opts_t *opts,
                 kl_obj_t **out, char *err, size_t errlen);

/* Adds a reference; returns o. */
kl_obj_t *kl_obj_ref(kl_obj_t *o);

/* Drops a reference; the last one frees the object. NULL is a no-op. */
void kl_obj_unref(kl_obj_t *o);

/* The object's compact JSON, NUL-terminated. For a compressed object
 * (kl_obj_compressed) it is decompressed into one of its codec's buffers,
 * used in turn: the span stays valid while three more objects of that codec
 * are read this way (so a Lua finalizer that reads a few objects in the
 * middle of a decode does no harm), not longer: consume it (decode, copy)
 * at once. */
kl_json_span_t kl_obj_json(const kl_obj_t *o);

/* The length of the object's JSON, compressed or not, read without
 * decompressing it. */
size_t kl_obj_json_len(const kl_obj_t *o);

/* True when the JSON is kept compressed (objz.h). */
bool kl_obj_compressed(const kl_obj_t *o);

/* Bytes the object occupies on the heap (its single allocation). */
size_t kl_obj_size(const kl_obj_t *o);

/* For objz.c: a copy of the plain object o whose JSON is the n bytes at z,
 * compressed by codec (the copy takes a reference on it); the extracted
 * strings but the uid are copied, labels and owners are not. One
 * reference. */
struct kl_objz;
kl_obj_t *kl_obj_pack(const kl_obj_t *o, const char *z, size_t n,
                      struct kl_objz *codec);

kl_json_span_t kl_obj_api_version(const kl_obj_t *o);
kl_json_span_t kl_obj_kind(const kl_obj_t *o);
kl_json_span_t kl_obj_namespace(const kl_obj_t *o);
kl_json_span_t kl_obj_name(const kl_obj_t *o);
kl_json_span_t kl_obj_uid(const kl_obj_t *o);
kl_json_span_t kl_obj_resource_version(const kl_obj_t *o);

/* metadata.generation, 0 when absent. */
int64_t kl_obj_generation(const kl_obj_t *o);

/* True when metadata.deletionTimestamp is set; *ts (may be NULL) gets it. */
bool kl_obj_deletion_timestamp(const kl_obj_t *o, kl_json_span_t *ts);

/* Writes client-go's MetaNamespaceKey ("namespace/name", or "name" when the
 * namespace is empty) into buf (cap bytes, NUL-terminated when cap > 0).
 * Returns the key's length; when that is >= cap the key was truncated. */
size_t kl_obj_key(const kl_obj_t *o, char *buf, size_t cap);

/* The same key as a span into the object, NUL-terminated: every object
 * holds its key in one piece (its namespace and name spans point into it). */
kl_json_span_t kl_obj_key_span(const kl_obj_t *o);

/* An object's MetaNamespaceKey: p points at it (NUL-terminated), len is its
 * length. */
typedef struct kl_obj_keybuf {
  const char *p;
  size_t len;
} kl_obj_keybuf_t;

/* Fills k with o's key; KL_EINVAL (k untouched) when o has no name. The key
 * is o's own (kl_obj_key_span), not a copy: valid while o is. Release with
 * kl_obj_keybuf_free. */
int kl_obj_keybuf(const kl_obj_t *o, kl_obj_keybuf_t *k);
void kl_obj_keybuf_free(kl_obj_keybuf_t *k);

/* metadata.labels, in the order of the JSON. */
size_t kl_obj_label_count(const kl_obj_t *o);
void kl_obj_label(const kl_obj_t *o, size_t i, kl_json_span_t *key,
                  kl_json_span_t *val);
/* Looks a label up by key (klen bytes); returns false when absent. */
bool kl_obj_label_get(const kl_obj_t *o, const char *key, size_t klen,
                      kl_json_span_t *val);

/* metadata.ownerReferences, in the order of the JSON. */
size_t kl_obj_owner_count(const kl_obj_t *o);
void kl_obj_owner(const kl_obj_t *o, size_t i, kl_obj_owner_t *out);
/* The owner with controller: true, if any. */
bool kl_obj_controller(const kl_obj_t *o, kl_obj_owner_t *out);

/* Reads code, status, reason and message from a Status object into *st
 * (owned copies; release with kl_obj_status_clear). Always succeeds; absent
 * fields are 0 / "". */
void kl_obj_status(const kl_obj_t *o, kl_obj_status_t *st);
void kl_obj_status_clear(kl_obj_status_t *st);

/* Parses a watch event value (as yielded by a KL_JSON_VALUES stream): its
 * type and object, built as kl_obj_parse does, and for ERROR events the
 * Status. Returns KL_OK, or KL_EPARSE with "byte N: reason" in err for an
 * unknown type, a missing or non-object "object", or what kl_obj_parse
 * rejects. On success release with kl_obj_event_clear. */
int kl_obj_event_parse(const kl_json_value_t *v, const kl_obj_opts_t *opts,
                       kl_obj_event_t *ev, char *err, size_t errlen);
void kl_obj_event_clear(kl_obj_event_t *ev);

/* "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR" ("" otherwise). */
const char *kl_obj_event_type_name(kl_obj_event_type_t t);

#endif
