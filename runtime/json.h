/* json.h — the JSON boundary: an incremental, validating decoder for the byte
 * streams the apiserver sends (watch streams and list bodies), and helpers to
 * read values it has validated.
 *
 * A kl_json_stream_t takes bytes as they arrive, cut anywhere (inside a
 * string, an escape or a UTF-8 sequence), and yields one complete value at a
 * time. It checks the whole grammar (RFC 8259: strings, escapes, UTF-8,
 * numbers, literals, structure), a nesting limit and a size limit, so what it
 * yields is valid JSON that the trusted readers below (and object.h) can walk
 * without checking again. Errors carry the byte offset in the stream:
 * "byte 1234: invalid \u escape". See json.c for the design and the numbers
 * behind it. No Lua or libev here. */
#ifndef KL_JSON_H
#define KL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_JSON_MAX_DEPTH 128u        /* default nesting limit */
#define KL_JSON_MAX_VALUE (64u << 20) /* default cap on one value: 64 MiB */

/* A run of bytes that is not NUL-terminated. */
typedef struct kl_json_span {
  const char *p;
  size_t n;
} kl_json_span_t;

typedef enum kl_json_mode {
  /* A sequence of top-level objects with optional whitespace between them
   * (a watch stream: one event object per line). Each object is one value. */
  KL_JSON_VALUES = 0,
  /* One top-level object, a list body ({"kind":"PodList",…,"items":[…]}).
   * Each element of its top-level "items" array (which must be objects) is
   * one value; the rest of the object (kind, apiVersion, metadata) is the
   * list envelope, read with kl_json_stream_list() once the object ends. */
  KL_JSON_LIST = 1,
} kl_json_mode_t;

typedef struct kl_json_opts {
  kl_json_mode_t mode;
  size_t
      max_value; /* bytes per value (and for the list envelope); 0 = default */
  unsigned max_depth; /* containers open at once; 0 = default (128) */
} kl_json_opts_t;

/* Where a container inside a value lies: json.p[open] is its '{' or '[',
 * json.p[close - 1] its closer. */
typedef struct kl_json_container {
  uint32_t open, close;
} kl_json_container_t;

/* A value the stream yields. json points into the bytes last fed when the
 * value lies entirely inside them (no copy), otherwise into the stream's own
 * buffer that holds the unfinished tail; either way it stays valid until the
 * next call on the stream, as does containers. */
typedef struct kl_json_value {
  kl_json_span_t json; /* the value as received, from '{' to '}' */
  uint64_t offset;     /* stream offset of its first byte */
  bool compact;        /* true when it holds no insignificant whitespace */
  /* The containers the scanner saw close, in the order they open (so by
   * open): those nested at most KL_JSON_INDEX_DEPTH levels deep in the stream,
   * up to the first KL_JSON_INDEX_MAX of them. A reader that skips a
   * container it finds here jumps to its end instead of scanning it; one it
   * does not find it scans. NULL and 0 when there are none (and always from
   * kl_json_check). */
  const kl_json_container_t *containers;
  size_t ncontainers;
} kl_json_value_t;

/* Deep enough for what readers skip (an event's spec and status, its
 * metadata's managedFields; in a list, one level deeper); the containers
 * below them, many and small, cost the scanner stores and readers steps. */
#define KL_JSON_INDEX_DEPTH 5u
#define KL_JSON_INDEX_MAX 4096u

/* The list envelope (KL_JSON_LIST mode). Strings are decoded (escapes
 * resolved) and NUL-terminated, "" when absent; they live in the stream. */
typedef struct kl_json_list {
  kl_json_span_t kind, api_version, resource_version, continue_token;
  int64_t remaining_item_count; /* -1 when absent */
  size_t items;                 /* number of items yielded */
  kl_json_span_t envelope; /* the object with "items" emptied, as received */
} kl_json_list_t;

typedef struct kl_json_stream kl_json_stream_t;

/* Creates a stream decoder; opts may be NULL (KL_JSON_VALUES, defaults).
 * Never returns NULL (allocation failure aborts). */
kl_json_stream_t *kl_json_stream_new(const kl_json_opts_t *opts);

/* Frees the stream and everything it holds; NULL is a no-op. */
void kl_json_stream_free(kl_json_stream_t *s);

/* Hands the next len bytes of the stream to the decoder, without copying
 * them: buf must stay valid until kl_json_stream_next() has returned
 * KL_EAGAIN (or an error). Call it only when the previous bytes are used up;
 * otherwise returns KL_EINVAL and takes nothing. Returns KL_OK. */
int kl_json_stream_feed(kl_json_stream_t *s, const void *buf, size_t len);

/* Decodes up to the end of the next complete value and describes it in *v.
 * Returns KL_OK (a value), KL_EAGAIN (every byte fed so far is used; feed
 * more), KL_EPARSE (malformed input) or KL_ELIMIT (a value, or the list
 * envelope, exceeds max_value bytes; nesting deeper than max_depth is
 * KL_EPARSE). Errors are sticky; kl_json_stream_error() has the message. */
int kl_json_stream_next(kl_json_stream_t *s, kl_json_value_t *v);

/* Declares the end of the stream. Returns KL_OK when it ended between values
 * (KL_JSON_VALUES; no value at all is fine) or after the list object
 * (KL_JSON_LIST), KL_EPARSE when it is truncated, the sticky error if there
 * was one, KL_EINVAL if fed bytes were not all consumed by _next. */
int kl_json_stream_end(kl_json_stream_t *s);

/* The message of the last error, "byte N: reason" (N: 0-based offset in the
 * stream), or "" when there was none. Owned by the stream. */
const char *kl_json_stream_error(const kl_json_stream_t *s);

/* Stream bytes consumed so far (the offset of the next byte to decode). */
uint64_t kl_json_stream_offset(const kl_json_stream_t *s);

/* The list envelope once the list object is complete (KL_JSON_LIST mode);
 * NULL before that or in KL_JSON_VALUES mode. Owned by the stream. */
const kl_json_list_t *kl_json_stream_list(const kl_json_stream_t *s);

/* Checks that buf holds exactly one JSON object (whitespace around it is
 * allowed) and fills *v as the stream would. On failure returns KL_EPARSE or
 * KL_ELIMIT and writes "byte N: reason" into err (errlen bytes, may be 0). */
int kl_json_check(const void *buf, size_t len, kl_json_value_t *v, char *err,
                  size_t errlen);

/* Room for a container index, reused from one kl_json_check_indexed to
 * the next: {NULL, 0} before the first, free(ct) after the last. */
typedef struct kl_json_ctbuf {
  kl_json_container_t *ct;
  size_t cap;
} kl_json_ctbuf_t;

/* kl_json_check that also indexes the object's containers as the stream
 * does (v->containers), in ix: valid until ix is used again. */
int kl_json_check_indexed(const void *buf, size_t len, kl_json_value_t *v,
                          kl_json_ctbuf_t *ix, char *err, size_t errlen);

/* The first try of kl_json_check_indexed: the same checks and index for a
 * text held whole, faster, answering only whether it passes (the stream
 * then finds the error). Exposed so that the fuzz target can hold the two
 * to the same answers. */
bool kl_json_check_whole(const void *buf, size_t len, kl_json_value_t *v,
                         kl_json_ctbuf_t *ix);

/* Where the members a store files an object by start in a checked object:
 * the values of metadata.namespace, .name and .resourceVersion (NULL when
 * absent; values of any type, as they stand in the text). unsure: a member
 * name at the top level or in metadata holds an escape, which the check
 * does not decode: read them with kl_json_members_in instead. */
typedef struct kl_json_meta {
  const char *ns, *name, *rv;
  bool unsure;
} kl_json_meta_t;

/* kl_json_check_whole that, instead of indexing the containers
 * (v->containers is NULL), finds on its way where metadata's members start
 * (in *m, when it returns true): one walk of the text where a check and a
 * lookup would make two. */
bool kl_json_check_meta(const void *buf, size_t len, kl_json_value_t *v,
                        kl_json_meta_t *m);

/* The instruction sets kl_json_check_whole can check a text with: the
 * byte-by-byte checker every machine has, and on x86-64 the 64-byte block
 * checker with SSE2 or AVX2 (with PCLMULQDQ). It takes the best one the
 * processor has; tests and fuzz targets hold the others to its answers. */
typedef enum kl_json_isa {
  KL_JSON_ISA_BEST = 0,
  KL_JSON_ISA_PORTABLE,
  KL_JSON_ISA_SSE2,
  KL_JSON_ISA_AVX2,
} kl_json_isa_t;

/* Whether this build and processor can check with isa (BEST: always). */
bool kl_json_isa_has(kl_json_isa_t isa);

/* kl_json_check_whole (m NULL) or kl_json_check_meta (ix NULL, m set)
 * checked with isa, which kl_json_isa_has must allow (otherwise false). */
bool kl_json_check_whole_isa(kl_json_isa_t isa, const void *buf, size_t len,
                             kl_json_value_t *v, kl_json_ctbuf_t *ix,
                             kl_json_meta_t *m);

/* Checks that buf holds exactly one JSON value of any type (whitespace
 * around it allowed), nested at most max_depth deep (0: the default).
 * Returns KL_OK or KL_EPARSE with "byte N: reason" in err. */
int kl_json_validate(const void *buf, size_t len, unsigned max_depth, char *err,
                     size_t errlen);

/* --- Reading validated JSON -------------------------------------------
 * These read values the stream (or kl_json_check) has validated. They never
 * read outside [p, end) and return NULL/false on anything unexpected, but
 * they do not check the grammar again. */

/* Skips whitespace; returns the first other byte (or end). */
const char *kl_json_ws(const char *p, const char *end);

/* Returns the end of the value that starts at p (no leading whitespace),
 * or NULL if it is malformed. */
const char *kl_json_skip(const char *p, const char *end);

/* kl_json_skip inside the value v (validated, v->json holds p), jumping
 * over a container v's index holds instead of scanning it. */
const char *kl_json_skip_in(const kl_json_value_t *v, const char *p,
                            const char *end);

/* Decodes the contents of a string (the bytes between its quotes, escapes
 * included) into out, which has room for n bytes (decoding never grows a
 * string). Returns the decoded length. Does not NUL-terminate. */
size_t kl_json_unescape(const char *p, size_t n, char *out);

/* Looks up key (compared after decoding the member names) in the object
 * obj; sets *val to the member's value (no surrounding whitespace), the last
 * one when the key repeats (as kl_obj_parse and kubelua.json read it).
 * Returns false when obj is not an object or has no such member. */
bool kl_json_member(kl_json_span_t obj, const char *key, kl_json_span_t *val);

/* kl_json_member for n keys in one walk of obj: vals[i] gets the value of
 * keys[i] ({NULL, 0} when absent). Returns false when obj is not an
 * object. */
bool kl_json_members(kl_json_span_t obj, const char *const *keys, size_t n,
                     kl_json_span_t *vals);

/* kl_json_members for obj inside the validated value v (NULL: none),
 * skipping the containers v's index holds. */
bool kl_json_members_in(const kl_json_value_t *v, kl_json_span_t obj,
                        const char *const *keys, size_t n,
                        kl_json_span_t *vals);

/* Parses an integer value (no fraction or exponent) in the int64 range.
 * Returns false otherwise. */
bool kl_json_int64(kl_json_span_t v, int64_t *out);

/* Appends s (n bytes, any content) to out as a JSON string literal with its
 * quotes, escaping '"', '\\' and control characters; out has room for
 * 6 * n + 2 bytes. Returns the number of bytes written. Does not check
 * UTF-8. */
size_t kl_json_quote(const char *s, size_t n, char *out);

#endif
