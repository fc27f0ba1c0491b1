/* object.c — immutable, reference-counted Kubernetes objects (see object.h).
 *
 * Building one is two steps over the JSON the stream decoder has validated.
 * First a walk over the compact bytes (the input itself when the stream saw
 * no whitespace in it, else a compacted scratch copy) records, as offsets,
 * where the extracted strings lie, the labels and ownerReferences, the
 * generation, and the byte range of the metadata.managedFields member; it
 * reads the top level and metadata only and skips everything else
 * (spec, status): a container the stream indexed (kl_json_value_t) in one
 * step, anything else by scanning it, strings eight bytes at a time. So
 * the bytes of a Pod are scanned once by the stream and about a quarter of
 * them a second time here. One allocation of
 * the exact size receives the header, the JSON with managedFields cut out
 * (and, for list items, apiVersion/kind put in front), the decoded copies of
 * the rare strings written with escapes, and the label and owner tables.
 *
 * Layout of data[]: json (json_len bytes) '\0' | decoded strings | the key
 * ("namespace/name" or "name") '\0', where the namespace and name spans
 * point | padding to 4 | labels (label_t[nlabels]) | owners
 * (owner_t[nowners]). Every
 * string is a (offset, length) pair into data; an absent one points at the
 * '\0' after the JSON with length 0. The object never changes after it is
 * built; refs counts the holders (single-threaded, plain integer).
 *
 * Parsed with opts.lazy_refs, an object whose labels (or owners) hold no
 * escape has no table of them (flag LAZY_LABELS / LAZY_OWNERS): each read
 * walks its JSON again and hands out spans into it (walk_refs), so the
 * event path, which never reads them without a label or controller index,
 * skips those containers through the stream's index.
 *
 * A compressed object (kl_obj_pack, for objz.c) has the same header, with z
 * set, no labels or owners and data[] = '\0' | the extracted strings but the
 * uid, copied, the namespace, a '/' and the name forming the key and a
 * '\0' after it | the compressed JSON (at labels_off); json_len is the JSON's
 * length once decompressed. Its uid, labels and owners are read from the
 * plain object rebuilt from the JSON (plain()), which its codec keeps for
 * the last object asked: the store's label and controller indices read
 * them once per change of an object, and nothing else in the core does. */
#include "object.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json_swar.h"
#include "mem.h"
#include "objz.h"

#define ESCAPED 0x80000000u /* in a walk: the raw string has escapes */
#define OBJ_MAX 0x7fffffffu /* offsets are 31-bit */

enum { F_API, F_KIND, F_NS, F_NAME, F_UID, F_RV, F_DEL, NF };
enum { OWN_CONTROLLER = 1, OWN_BLOCK = 2 };
enum { O_API, O_KIND, O_NAME, O_UID, NO_STR };

typedef struct sref {
  uint32_t off, len;
} sref_t;

typedef struct label {
  sref_t k, v;
} label_t;

typedef struct owner {
  sref_t s[NO_STR];
  uint32_t flags;
} owner_t;

struct kl_obj {
  uint32_t refs;
  uint32_t json_len;
  uint32_t size; /* bytes in data[] */
  uint16_t nlabels, nowners;
  int64_t generation;
  sref_t f[NF];
  uint32_t labels_off; /* owners follow the labels */
  uint32_t flags;
  kl_objz_t *z; /* the codec of a compressed object, else NULL */
  char data[];
};

/* flags; LAZY_*: the labels or the owners are read from the JSON when
 * asked (kl_obj_opts_t.lazy_refs), the object holds no table of them. */
enum { HAS_DELETION = 1, LAZY_LABELS = 2, LAZY_OWNERS = 4 };

/* --- the walk ------------------------------------------------------------ */

typedef struct walk {
  const char *src, *end; /* the object starts at src */
  bool exact;            /* src is the input as received: offsets in it map
                            to stream offsets (else src is a compacted copy) */
  uint64_t base;         /* stream offset of src[0] (exact) or of the value */
  bool keep_mf;
  const char *ct_base; /* the indexed value (exact only), else NULL */
  const kl_json_container_t *ct;
  size_t nct, ci; /* its containers; ci: the next one to look at */
  sref_t f[NF];
  bool has_api, has_kind, has_del;
  bool lazy_refs; /* leave plain labels and owners in the JSON */
  uint32_t lazy;  /* LAZY_LABELS | LAZY_OWNERS: those left there */
  int64_t generation;
  label_t *labels, lsmall[16];
  size_t nl, lcap;
  owner_t *owners, osmall[4];
  size_t no, ocap;
  size_t cut_start, cut_end; /* managedFields member, [start, end) */
  size_t dec;                /* bytes of escaped strings to decode */
  uint64_t err_off;
  char err[160];
} walk_t;

static void walk_init(walk_t *w, const char *src, const char *end, bool exact,
                      uint64_t base, bool keep_mf) {
  memset(w, 0, offsetof(walk_t, labels));
  w->src = src;
  w->end = end;
  w->exact = exact;
  w->base = base;
  w->keep_mf = keep_mf;
  w->ct_base = NULL;
  w->ct = NULL;
  w->nct = w->ci = 0;
  w->labels = w->lsmall;
  w->lcap = sizeof w->lsmall / sizeof w->lsmall[0];
  w->nl = 0;
  w->owners = w->osmall;
  w->ocap = sizeof w->osmall / sizeof w->osmall[0];
  w->no = 0;
  w->cut_start = w->cut_end = 0;
  w->dec = 0;
  w->err[0] = '\0';
}

static void walk_free(walk_t *w) {
  if (w->labels != w->lsmall) free(w->labels);
  if (w->owners != w->osmall) free(w->owners);
}

#ifdef __GNUC__
__attribute__((format(printf, 3, 4)))
#endif
static const char *
werr(walk_t *w, const char *at, const char *fmt, ...) {
  va_list ap;
  if (w->err[0]) return NULL;
  /* Exact offsets when src is the input itself, else the value's start. */
  w->err_off = w->exact ? w->base + (uint64_t)(at - w->src) : w->base;
  va_start(ap, fmt);
  vsnprintf(w->err, sizeof w->err, fmt, ap);
  va_end(ap);
  return NULL;
}

static const char *bad(walk_t *w, const char *at) {
  return werr(w, at, "malformed JSON");
}

/* str_end's rest for a string with a backslash at q (or unterminated). */
static const char *str_end_escaped(walk_t *w, const char *p, const char *q,
                                   bool *esc) {
  const char *end = w->end;
  for (;;) {
    if (q >= end) return bad(w, p);
    if (*q == '"') return q;
    *esc = true;
    q = kl_scan_quote_bs(q + 2, end);
  }
}

/* p at the opening quote: returns the closing quote; *esc tells whether the
 * contents hold a backslash. Inline: the walk reads about forty strings an
 * object, nearly all short and plain, and a call each cost as much as the
 * scan. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline const char *
str_end(walk_t *w, const char *p, bool *esc) {
  const char *q = kl_scan_quote_bs(p + 1, w->end);
  *esc = false;
  if (q < w->end && *q == '"') return q;
  return str_end_escaped(w, p, q, esc);
}

/* The end of the container at p from the stream's index, or NULL when it
 * is not there. The walk skips containers in the order they open, so the
 * cursor only moves forward. */
static const char *indexed_end(walk_t *w, const char *p) {
  size_t off = (size_t)(p - w->ct_base);
  while (w->ci < w->nct && w->ct[w->ci].open < off)
    w->ci++;
  if (w->ci == w->nct || w->ct[w->ci].open != off) return NULL;
  const char *e = w->ct_base + w->ct[w->ci].close;
  return e > p && e <= w->end ? e : NULL;
}

static const char *skip(walk_t *w, const char *p) {
  if (w->ct && p < w->end && (*p == '{' || *p == '[')) {
    const char *e = indexed_end(w, p);
    if (e) return e;
  }
  const char *e = kl_json_skip(p, w->end);
  return e ? e : bad(w, p);
}

/* Lets the walk use the stream's index of v when it walks v's own bytes. */
static void walk_index(walk_t *w, const kl_json_value_t *v) {
  if (!v->compact || !v->ncontainers) return;
  w->ct_base = v->json.p;
  w->ct = v->containers;
  w->nct = v->ncontainers;
}

static bool is_null(const walk_t *w, const char *p) {
  return w->end - p >= 4 && memcmp(p, "null", 4) == 0;
}

/* Compares a raw key (escapes possible) with the names; returns the index
 * or -1. */
typedef struct name {
  const char *s;
  size_t n;
} name_t;
#define NAME(s)                                                                \
  { s, sizeof s - 1 }

/* A key longer than this (as written) matches no name. */
#define KEY_MAX 128

/* Points *k, *n at the key's bytes: its escapes resolved into tmp (KEY_MAX
 * bytes) when esc; false when it is too long to be a name. */
static bool key_bytes(const char **k, size_t *n, bool esc, char *tmp) {
  if (!esc) return true;
  if (*n > KEY_MAX) return false;
  *n = kl_json_unescape(*k, *n, tmp);
  *k = tmp;
  return true;
}

static int key_id(const char *k, size_t n, bool esc, const name_t *names,
                  int count) {
  char tmp[KEY_MAX];
  if (!key_bytes(&k, &n, esc, tmp)) return -1;
  for (int i = 0; i < count; i++)
    if (names[i].n == n && memcmp(names[i].s, k, n) == 0) return i;
  return -1;
}

/* key_id for the keys of every object's metadata and owner references,
 * where a loop over the names cost more than the rest of the key's walk:
 * the key's length picks the one name it can be (two for fifteen bytes),
 * one comparison of a known length confirms it. Same indices as key_id. */
#define IS(k, n, s) ((n) == sizeof s - 1 && memcmp(k, s, sizeof s - 1) == 0)

static int meta_key_id(const char *k, size_t n, bool esc) {
  char tmp[KEY_MAX];
  if (!key_bytes(&k, &n, esc, tmp)) return -1;
  switch (n) {
  case 3: return IS(k, n, "uid") ? 2 : -1;
  case 4: return IS(k, n, "name") ? 1 : -1;
  case 6: return IS(k, n, "labels") ? 5 : -1;
  case 9: return IS(k, n, "namespace") ? 0 : -1;
  case 10: return IS(k, n, "generation") ? 4 : -1;
  case 13: return IS(k, n, "managedFields") ? 8 : -1;
  case 15:
    return IS(k, n, "resourceVersion")   ? 3
           : IS(k, n, "ownerReferences") ? 6
                                         : -1;
  case 17: return IS(k, n, "deletionTimestamp") ? 7 : -1;
  default: return -1;
  }
}

static int owner_key_id(const char *k, size_t n, bool esc) {
  char tmp[KEY_MAX];
  if (!key_bytes(&k, &n, esc, tmp)) return -1;
  switch (n) {
  case 3: return IS(k, n, "uid") ? 3 : -1;
  case 4: return IS(k, n, "kind") ? 1 : IS(k, n, "name") ? 2 : -1;
  case 10: return IS(k, n, "apiVersion") ? 0 : IS(k, n, "controller") ? 4 : -1;
  case 18: return IS(k, n, "blockOwnerDeletion") ? 5 : -1;
  default: return -1;
  }
}
#undef IS

/* str_field's value that is not a string: null, or an error. */
static const char *not_str_field(walk_t *w, const char *p, const char *prefix,
                                 const char *name) {
  if (is_null(w, p)) return p + 4;
  return werr(w, p, "%s%s is not a string", prefix, name);
}

/* A string value at p into *r (null: absent). Returns the end or NULL;
 * path (prefix + name) names the field in the error. Inline, as str_end:
 * about twenty values an object. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline const char *
str_field(walk_t *w, const char *p, sref_t *r, const char *prefix,
          const char *name) {
  bool esc;
  if (p >= w->end || *p != '"') return not_str_field(w, p, prefix, name);
  const char *e = str_end(w, p, &esc);
  if (!e) return NULL;
  r->off = (uint32_t)(p + 1 - w->src);
  r->len = (uint32_t)(e - p - 1) | (esc ? ESCAPED : 0);
  if (esc) w->dec += (size_t)(e - p - 1);
  return e + 1;
}

/* Iterates over the members of the object at p, calling fn for each with
 * the raw key; fn returns the end of the value or NULL. */
typedef const char *(*member_fn)(walk_t *w, const char *ks, size_t kn,
                                 bool kesc, const char *v, void *ud);

/* Inline: each caller passes its own fn, which the compiler then calls
 * directly (or inlines) instead of through the pointer once a key. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline const char *
members(walk_t *w, const char *p, member_fn fn, void *ud) {
  const char *end = w->end;
  if (p >= end || *p != '{') return bad(w, p);
  p++;
  if (p < end && *p == '}') return p + 1;
  for (;;) {
    bool kesc;
    if (p >= end || *p != '"') return bad(w, p);
    const char *ke = str_end(w, p, &kesc);
    if (!ke || ke + 1 >= end || ke[1] != ':') return bad(w, p);
    p = fn(w, p + 1, (size_t)(ke - p - 1), kesc, ke + 2, ud);
    if (!p) return NULL;
    if (p >= end) return bad(w, p);
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p == '}') return p + 1;
    return bad(w, p);
  }
}

static const char *label_member(walk_t *w, const char *ks, size_t kn, bool kesc,
                                const char *v, void *ud) {
  (void)ud;
  label_t l;
  if (w->nl == w->lcap) {
    label_t *n = kl_xmalloc(2 * w->lcap * sizeof *n);
    memcpy(n, w->labels, w->nl * sizeof *n);
    if (w->labels != w->lsmall) free(w->labels);
    w->labels = n;
    w->lcap *= 2;
  }
  l.k.off = (uint32_t)(ks - w->src);
  l.k.len = (uint32_t)kn | (kesc ? ESCAPED : 0);
  if (kesc) w->dec += kn;
  if (v >= w->end || *v != '"')
    return werr(w, v, "metadata.labels.%.*s is not a string",
                (int)(kn > 64 ? 64 : kn), ks);
  const char *e = str_field(w, v, &l.v, "", "");
  if (!e) return NULL;
  w->labels[w->nl++] = l;
  return e;
}

typedef struct owner_ctx {
  owner_t *o;
  size_t index;
} owner_ctx_t;

static const char *bool_field(walk_t *w, const char *p, uint32_t *flags,
                              uint32_t bit, const char *path, size_t index) {
  if (w->end - p >= 4 && memcmp(p, "true", 4) == 0) {
    *flags |= bit;
    return p + 4;
  }
  if (w->end - p >= 5 && memcmp(p, "false", 5) == 0) return p + 5;
  if (is_null(w, p)) return p + 4;
  return werr(w, p, "metadata.ownerReferences[%zu].%s is not a boolean", index,
              path);
}

static const char *owner_member(walk_t *w, const char *ks, size_t kn, bool kesc,
                                const char *v, void *ud) {
  static const name_t names[] = {
      NAME("apiVersion"), NAME("kind"),       NAME("name"),
      NAME("uid"),        NAME("controller"), NAME("blockOwnerDeletion")};
  owner_ctx_t *c = ud;
  int id = owner_key_id(ks, kn, kesc);
  if (id < 0) return skip(w, v);
  if (id >= NO_STR)
    return bool_field(w, v, &c->o->flags, id == 4 ? OWN_CONTROLLER : OWN_BLOCK,
                      names[id].s, c->index);
  if (v < w->end && *v != '"' && !is_null(w, v))
    return werr(w, v, "metadata.ownerReferences[%zu].%s is not a string",
                c->index, names[id].s);
  return str_field(w, v, &c->o->s[id], "", "");
}

static const char *walk_owners(walk_t *w, const char *p) {
  const char *end = w->end;
  if (is_null(w, p)) return p + 4;
  if (p >= end || *p != '[')
    return werr(w, p, "metadata.ownerReferences is not an array");
  p++;
  if (p < end && *p == ']') return p + 1;
  for (size_t i = 0;; i++) {
    if (w->no == w->ocap) {
      owner_t *n = kl_xmalloc(2 * w->ocap * sizeof *n);
      memcpy(n, w->owners, w->no * sizeof *n);
      if (w->owners != w->osmall) free(w->owners);
      w->owners = n;
      w->ocap *= 2;
    }
    owner_t *o = &w->owners[w->no];
    memset(o, 0, sizeof *o);
    if (p >= end || *p != '{')
      return werr(w, p, "metadata.ownerReferences[%zu] is not an object", i);
    owner_ctx_t ctx = {o, i};
    p = members(w, p, owner_member, &ctx);
    if (!p) return NULL;
    w->no++;
    if (p < end && *p == ',') {
      p++;
      continue;
    }
    if (p < end && *p == ']') return p + 1;
    return bad(w, p);
  }
}

/* The end of the labels or owners (bit) container at v when it is left in
 * the JSON (opts.lazy_refs): when it holds no escape, so that a later walk
 * of the JSON can hand out its strings as they lie there; marks it so.
 * NULL when it is not (the caller walks it). */
static const char *lazy_ref(walk_t *w, const char *v, uint32_t bit) {
  if (!w->lazy_refs) return NULL;
  const char *e = skip(w, v);
  if (!e || memchr(v, '\\', (size_t)(e - v))) return NULL;
  w->lazy |= bit;
  return e;
}

static const char *meta_member(walk_t *w, const char *ks, size_t kn, bool kesc,
                               const char *v, void *ud) {
  static const name_t names[] = {NAME("namespace"),
                                 NAME("name"),
                                 NAME("uid"),
                                 NAME("resourceVersion"),
                                 NAME("generation"),
                                 NAME("labels"),
                                 NAME("ownerReferences"),
                                 NAME("deletionTimestamp"),
                                 NAME("managedFields")};
  static const int fields[] = {F_NS, F_NAME, F_UID, F_RV};
  const char *lz; /* the end of labels or owners left in the JSON */
  (void)ud;
  int id = meta_key_id(ks, kn, kesc);
  switch (id) {
  case 0:
  case 1:
  case 2:
  case 3: return str_field(w, v, &w->f[fields[id]], "metadata.", names[id].s);
  case 4: {
    if (is_null(w, v)) return v + 4;
    const char *e = skip(w, v);
    if (!e) return NULL;
    kl_json_span_t num = {v, (size_t)(e - v)};
    if (!kl_json_int64(num, &w->generation))
      return werr(w, v, "metadata.generation is not an int64 integer");
    return e;
  }
  case 5:
    if (is_null(w, v)) return v + 4;
    if (v >= w->end || *v != '{')
      return werr(w, v, "metadata.labels is not an object");
    if ((lz = lazy_ref(w, v, LAZY_LABELS))) return lz;
    return members(w, v, label_member, NULL);
  case 6:
    if (v < w->end && *v == '[' && (lz = lazy_ref(w, v, LAZY_OWNERS)))
      return lz;
    return walk_owners(w, v);
  case 7: {
    const char *e =
        str_field(w, v, &w->f[F_DEL], "metadata.", "deletionTimestamp");
    if (e && !is_null(w, v)) w->has_del = true;
    return e;
  }
  case 8: {
    const char *e = skip(w, v);
    if (!e || w->keep_mf || w->cut_end) return e;
    size_t ms = (size_t)(ks - 1 - w->src), ve = (size_t)(e - w->src);
    if (w->src[ms - 1] == ',') {
      w->cut_start = ms - 1;
      w->cut_end = ve;
    } else {
      w->cut_start = ms;
      w->cut_end = e < w->end && *e == ',' ? ve + 1 : ve;
    }
    return e;
  }
  default: return skip(w, v);
  }
}

static const char *top_member(walk_t *w, const char *ks, size_t kn, bool kesc,
                              const char *v, void *ud) {
  static const name_t names[] = {NAME("apiVersion"), NAME("kind"),
                                 NAME("metadata")};
  (void)ud;
  switch (key_id(ks, kn, kesc, names, 3)) {
  case 0:
    w->has_api = true;
    return str_field(w, v, &w->f[F_API], "", "apiVersion");
  case 1: w->has_kind = true; return str_field(w, v, &w->f[F_KIND], "", "kind");
  case 2:
    if (is_null(w, v)) return v + 4;
    if (v >= w->end || *v != '{')
      return werr(w, v, "metadata is not an object");
    return members(w, v, meta_member, NULL);
  default: return skip(w, v);
  }
}

/* --- building ------------------------------------------------------------ */

static bool plain_option(const char *s) {
  for (; *s; s++)
    if ((uint8_t)*s < 0x20 || *s == '"' || *s == '\\') return false;
  return true;
}

/* Writes the key at d + at from the namespace and name in d, and points
 * them at its copy (so the key is one span, kl_obj_key_span); returns the
 * offset after its NUL. */
static uint32_t put_key(char *d, uint32_t at, sref_t *ns, sref_t *name) {
  if (ns->len) {
    memmove(d + at, d + ns->off, ns->len);
    ns->off = at;
    at += ns->len;
    d[at++] = '/';
  }
  memmove(d + at, d + name->off, name->len);
  name->off = at;
  at += name->len;
  d[at++] = '\0';
  return at;
}

/* Builds the object from a finished walk over src[0, n). */
static int build(walk_t *w, size_t n, const kl_obj_opts_t *opts,
                 kl_obj_t **out) {
  const char *av = opts ? opts->api_version : NULL;
  const char *kd = opts ? opts->kind : NULL;
  char inj[600];
  size_t ni = 0;
  sref_t inj_api = {0, 0}, inj_kind = {0, 0};
  bool put_api = av && !w->has_api, put_kind = kd && !w->has_kind;

  if ((av && (strlen(av) > 250 || !plain_option(av))) ||
      (kd && (strlen(kd) > 250 || !plain_option(kd)))) {
    snprintf(w->err, sizeof w->err, "apiVersion or kind option is not plain");
    return KL_EINVAL;
  }
  if (put_api) {
    ni += (size_t)sprintf(inj + ni, "\"apiVersion\":\"");
    inj_api.off = (uint32_t)(1 + ni);
    inj_api.len = (uint32_t)strlen(av);
    ni += (size_t)sprintf(inj + ni, "%s\"", av);
  }
  if (put_kind) {
    if (ni) inj[ni++] = ',';
    ni += (size_t)sprintf(inj + ni, "\"kind\":\"");
    inj_kind.off = (uint32_t)(1 + ni);
    inj_kind.len = (uint32_t)strlen(kd);
    ni += (size_t)sprintf(inj + ni, "%s\"", kd);
  }
  if (ni && n > 2) inj[ni++] = ',';

  size_t cut = w->cut_end - w->cut_start;
  size_t json_len = n - cut + ni;
  /* The key ("namespace/name" or "name", NUL-terminated) after the decoded
   * strings; decoding never lengthens a string. */
  size_t key_max =
      (w->f[F_NS].len & ~ESCAPED) + 1 + (w->f[F_NAME].len & ~ESCAPED) + 1;
  size_t tables = (json_len + 1 + w->dec + key_max + 3) & ~(size_t)3;
  size_t size = tables + w->nl * sizeof(label_t) + w->no * sizeof(owner_t);
  if (size > OBJ_MAX || w->nl > UINT16_MAX || w->no > UINT16_MAX) {
    snprintf(w->err, sizeof w->err, "object too large");
    return KL_ELIMIT;
  }
  kl_obj_t *o = kl_xmalloc(sizeof *o + size);
  char *d = o->data;
  o->refs = 1;
  o->json_len = (uint32_t)json_len;
  o->size = (uint32_t)size;
  o->nlabels = (uint16_t)w->nl;
  o->nowners = (uint16_t)w->no;
  o->generation = w->generation;
  o->labels_off = (uint32_t)tables;
  o->flags = (w->has_del ? HAS_DELETION : 0) | w->lazy;
  o->z = NULL;

  /* The JSON: '{', injected members, the rest minus managedFields. */
  const char *src = w->src;
  size_t cs = cut ? w->cut_start : n, ce = cut ? w->cut_end : n;
  d[0] = src[0];
  memcpy(d + 1, inj, ni);
  memcpy(d + 1 + ni, src + 1, cs - 1);
  memcpy(d + ni + cs, src + ce, n - ce);
  d[json_len] = '\0';

  /* Strings: map raw offsets, decode the escaped ones after the JSON. */
  uint32_t dec = (uint32_t)json_len + 1;
#define MAP(r)                                                                 \
  do {                                                                         \
    sref_t *r_ = &(r);                                                         \
    if (r_->len == 0) {                                                        \
      r_->off = (uint32_t)json_len;                                            \
    } else if (r_->len & ESCAPED) {                                            \
      uint32_t raw = r_->len & ~ESCAPED;                                       \
      r_->len = (uint32_t)kl_json_unescape(src + r_->off, raw, d + dec);       \
      r_->off = dec;                                                           \
      dec += r_->len;                                                          \
    } else {                                                                   \
      r_->off = r_->off < cs ? r_->off + (uint32_t)ni                          \
                             : r_->off - (uint32_t)cut + (uint32_t)ni;         \
    }                                                                          \
  } while (0)
  for (int i = 0; i < NF; i++)
    MAP(w->f[i]);
  if (put_api) w->f[F_API] = inj_api;
  if (put_kind) w->f[F_KIND] = inj_kind;
  dec = put_key(d, dec, &w->f[F_NS], &w->f[F_NAME]);
  memcpy(o->f, w->f, sizeof o->f);
  label_t *ls = (label_t *)(void *)(d + tables);
  for (size_t i = 0; i < w->nl; i++) {
    MAP(w->labels[i].k);
    MAP(w->labels[i].v);
    ls[i] = w->labels[i];
  }
  owner_t *os = (owner_t *)(void *)(ls + w->nl);
  for (size_t i = 0; i < w->no; i++) {
    for (int j = 0; j < NO_STR; j++)
      MAP(w->owners[i].s[j]);
    os[i] = w->owners[i];
  }
#undef MAP
  memset(d + dec, 0, tables - dec);
  *out = o;
  return KL_OK;
}

/* Copies the JSON [p, p+n) into out without insignificant whitespace;
 * returns the new length. */
static size_t compact(const char *p, size_t n, char *out) {
  const char *end = p + n;
  char *o = out;
  while (p < end) {
    char c = *p;
    if (c == '"') {
      const char *q = p + 1;
      while (q < end && *q != '"')
        q += *q == '\\' ? 2 : 1;
      if (q < end) q++;
      if (q > end) q = end;
      memcpy(o, p, (size_t)(q - p));
      o += q - p;
      p = q;
    } else {
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') *o++ = c;
      p++;
    }
  }
  return (size_t)(o - out);
}

/* The value's bytes, compacted into *scratch when needed. */
static kl_json_span_t compact_src(const kl_json_value_t *v, char **scratch) {
  kl_json_span_t s = v->json;
  *scratch = NULL;
  if (!v->compact) {
    *scratch = kl_xmalloc(s.n + 1);
    s.n = compact(s.p, s.n, *scratch);
    s.p = *scratch;
  }
  return s;
}

static int report(walk_t *w, int rc, char *err, size_t errlen) {
  if (errlen)
    snprintf(err, errlen, "byte %llu: %s", (unsigned long long)w->err_off,
             w->err);
  return rc;
}

/* Walks the object at src (in [src, end)) and builds it; *next gets the
 * byte after it. */
static int parse_at(walk_t *w, const kl_obj_opts_t *opts, kl_obj_t **out,
                    const char **next) {
  const char *src = w->src;
  w->lazy_refs = opts && opts->lazy_refs;
  if (src >= w->end || *src != '{') {
    werr(w, src, "not a JSON object");
    return KL_EPARSE;
  }
  const char *e = members(w, src, top_member, NULL);
  if (!e) return KL_EPARSE;
  if (e - src > OBJ_MAX) {
    werr(w, src, "object too large");
    return KL_ELIMIT;
  }
  *next = e;
  int rc = build(w, (size_t)(e - src), opts, out);
  if (rc != KL_OK) w->err_off = w->base;
  return rc;
}

int kl_obj_parse(const kl_json_value_t *v, const kl_obj_opts_t *opts,
                 kl_obj_t **out, char *err, size_t errlen) {
  char *scratch;
  kl_json_span_t s = compact_src(v, &scratch);
  walk_t w;
  const char *next = NULL;
  walk_init(&w, s.p, s.p + s.n, v->compact, v->offset,
            opts && opts->keep_managed_fields);
  walk_index(&w, v);
  int rc = parse_at(&w, opts, out, &next);
  if (rc == KL_OK && next != s.p + s.n) {
    kl_obj_unref(*out);
    *out = NULL;
    werr(&w, next, "trailing data after the object");
    rc = KL_EPARSE;
  }
  if (rc != KL_OK) report(&w, rc, err, errlen);
  walk_free(&w);
  free(scratch);
  return rc;
}

kl_obj_t *kl_obj_ref(kl_obj_t *o) {
  o->refs++;
  return o;
}

void kl_obj_unref(kl_obj_t *o) {
  if (o && --o->refs == 0) {
    if (o->z) kl_objz_forget(o->z, o);
    kl_objz_unref(o->z);
    free(o);
  }
}

kl_obj_t *kl_obj_pack(const kl_obj_t *o, const char *z, size_t n,
                      kl_objz_t *codec) {
  size_t strs = 2; /* the '\0' at 0 and the key's */
  for (int i = 0; i < NF; i++)
    strs += i == F_UID ? 0 : o->f[i].len;
  strs += o->f[F_NS].len ? 1 : 0; /* the key's '/' */
  size_t size = strs + n;
  kl_obj_t *p = kl_xmalloc(sizeof *p + size);
  memcpy(p, o, sizeof *p);
  p->refs = 1;
  p->size = (uint32_t)size;
  p->nlabels = p->nowners = 0;
  p->labels_off = (uint32_t)strs;
  p->z = kl_objz_ref(codec);
  char *d = p->data;
  uint32_t at = 1;
  d[0] = '\0';
  for (int i = 0; i < NF; i++) {
    uint32_t len = i == F_UID ? 0 : o->f[i].len;
    p->f[i].len = len;
    p->f[i].off = len ? at : 0;
    memcpy(d + at, o->data + o->f[i].off, len);
    at += len;
    if (i == F_NS && len) d[at++] = '/';
    if (i == F_NAME) {
      p->f[i].off = at - len;
      d[at++] = '\0';
    }
  }
  memcpy(d + strs, z, n);
  return p;
}

/* The plain form of o, for what a compressed object does not keep (uid,
 * labels, owners): o itself, or the object rebuilt from its JSON, which
 * the codec keeps until another object's is asked for. The JSON is what
 * build() made, so walking it again cannot fail short of a bug. */
static const kl_obj_t *plain(const kl_obj_t *o) {
  if (!o->z) return o;
  kl_obj_t *p = kl_objz_plain(o->z, o);
  if (p) return p;
  kl_json_span_t j = kl_obj_json(o);
  walk_t w;
  const char *next = NULL;
  walk_init(&w, j.p, j.p + j.n, true, 0, true);
  if (parse_at(&w, NULL, &p, &next) != KL_OK) {
    fprintf(stderr, "kubelua: compressed object: %s\n", w.err);
    abort();
  }
  walk_free(&w);
  kl_objz_keep_plain(o->z, o, p);
  return p;
}

bool kl_obj_compressed(const kl_obj_t *o) { return o->z != NULL; }

static kl_json_span_t span(const kl_obj_t *o, sref_t r) {
  kl_json_span_t s = {o->data + r.off, r.len};
  return s;
}

kl_json_span_t kl_obj_json(const kl_obj_t *o) {
  if (o->z) {
    size_t at = o->labels_off;
    return kl_objz_decompress(o->z, o->data + at, o->size - at, o->json_len);
  }
  kl_json_span_t s = {o->data, o->json_len};
  return s;
}

size_t kl_obj_json_len(const kl_obj_t *o) { return o->json_len; }

size_t kl_obj_size(const kl_obj_t *o) { return sizeof *o + o->size; }

kl_json_span_t kl_obj_api_version(const kl_obj_t *o) {
  return span(o, o->f[F_API]);
}
kl_json_span_t kl_obj_kind(const kl_obj_t *o) { return span(o, o->f[F_KIND]); }
kl_json_span_t kl_obj_namespace(const kl_obj_t *o) {
  return span(o, o->f[F_NS]);
}
kl_json_span_t kl_obj_name(const kl_obj_t *o) { return span(o, o->f[F_NAME]); }
kl_json_span_t kl_obj_uid(const kl_obj_t *o) {
  o = plain(o);
  return span(o, o->f[F_UID]);
}
kl_json_span_t kl_obj_resource_version(const kl_obj_t *o) {
  return span(o, o->f[F_RV]);
}
int64_t kl_obj_generation(const kl_obj_t *o) { return o->generation; }

bool kl_obj_deletion_timestamp(const kl_obj_t *o, kl_json_span_t *ts) {
  if (ts) *ts = span(o, o->f[F_DEL]);
  return (o->flags & HAS_DELETION) != 0;
}

kl_json_span_t kl_obj_key_span(const kl_obj_t *o) {
  sref_t ns = o->f[F_NS], name = o->f[F_NAME];
  kl_json_span_t s = {o->data + (ns.len ? ns.off : name.off),
                      ns.len ? ns.len + 1 + name.len : name.len};
  return s;
}

size_t kl_obj_key(const kl_obj_t *o, char *buf, size_t cap) {
  kl_json_span_t ns = kl_obj_namespace(o), name = kl_obj_name(o);
  size_t n = ns.n ? ns.n + 1 + name.n : name.n, k = 0;
  if (cap == 0) return n;
#define PUT(p_, n_)                                                            \
  do {                                                                         \
    size_t m_ = (n_) < cap - 1 - k ? (n_) : cap - 1 - k;                       \
    memcpy(buf + k, (p_), m_);                                                 \
    k += m_;                                                                   \
  } while (0)
  if (ns.n) {
    PUT(ns.p, ns.n);
    PUT("/", 1);
  }
  PUT(name.p, name.n);
#undef PUT
  buf[k] = '\0';
  return n;
}

int kl_obj_keybuf(const kl_obj_t *o, kl_obj_keybuf_t *k) {
  if (o->f[F_NAME].len == 0) return KL_EINVAL;
  kl_json_span_t s = kl_obj_key_span(o);
  k->p = s.p;
  k->len = s.n;
  return KL_OK;
}

void kl_obj_keybuf_free(kl_obj_keybuf_t *k) { (void)k; }

static const label_t *labels(const kl_obj_t *o) {
  return (const label_t *)(const void *)(o->data + o->labels_off);
}

/* The labels and owners of o as a table-less object holds them: in its
 * JSON, which a walk reads into w (offsets into o->data; none is escaped,
 * lazy_ref saw to it). Malformed ones (a value that is not a string, which
 * the eager walk refuses) read as none. Release w with walk_free. */
static void walk_refs(const kl_obj_t *o, walk_t *w) {
  walk_init(w, o->data, o->data + o->json_len, true, 0, true);
  if (!members(w, o->data, top_member, NULL)) w->nl = w->no = 0;
}

/* Label i of o, which holds its own (pl), or of the walk w (lazy). */
static void label_at(const kl_obj_t *o, const walk_t *w, size_t i,
                     kl_json_span_t *key, kl_json_span_t *val) {
  const label_t *l = w ? &w->labels[i] : &labels(o)[i];
  key->p = o->data + l->k.off;
  key->n = l->k.len & ~ESCAPED;
  val->p = l->v.len ? o->data + l->v.off : o->data + o->json_len;
  val->n = l->v.len & ~ESCAPED;
}

static void owner_at(const kl_obj_t *o, const walk_t *w, size_t i,
                     kl_obj_owner_t *out) {
  const owner_t *ow =
      w ? &w->owners[i]
        : &((const owner_t *)(const void *)(labels(o) + o->nlabels))[i];
  kl_json_span_t *s[NO_STR] = {&out->api_version, &out->kind, &out->name,
                               &out->uid};
  for (int j = 0; j < NO_STR; j++) {
    sref_t r = ow->s[j];
    s[j]->p = r.len ? o->data + r.off : o->data + o->json_len;
    s[j]->n = r.len & ~ESCAPED;
  }
  out->controller = (ow->flags & OWN_CONTROLLER) != 0;
  out->block_owner_deletion = (ow->flags & OWN_BLOCK) != 0;
}

/* The labels (bit LAZY_LABELS) or owners (LAZY_OWNERS) of o, a plain
 * object: returns their count; when o left them in its JSON (*lazy), *w
 * holds them. Release with refs_end. */
static size_t refs_begin(const kl_obj_t *o, uint32_t bit, walk_t *w,
                         bool *lazy) {
  *lazy = (o->flags & bit) != 0;
  if (!*lazy) return bit == LAZY_LABELS ? o->nlabels : o->nowners;
  walk_refs(o, w);
  return bit == LAZY_LABELS ? w->nl : w->no;
}

static void refs_end(walk_t *w, bool lazy) {
  if (lazy) walk_free(w);
}

size_t kl_obj_label_count(const kl_obj_t *o) {
  walk_t w;
  bool lazy;
  size_t n = refs_begin(plain(o), LAZY_LABELS, &w, &lazy);
  refs_end(&w, lazy);
  return n;
}

void kl_obj_label(const kl_obj_t *o, size_t i, kl_json_span_t *key,
                  kl_json_span_t *val) {
  walk_t w;
  bool lazy;
  o = plain(o);
  if (i < refs_begin(o, LAZY_LABELS, &w, &lazy))
    label_at(o, lazy ? &w : NULL, i, key, val);
  refs_end(&w, lazy);
}

bool kl_obj_label_get(const kl_obj_t *o, const char *key, size_t klen,
                      kl_json_span_t *val) {
  walk_t w;
  bool lazy, found = false;
  o = plain(o);
  size_t n = refs_begin(o, LAZY_LABELS, &w, &lazy);
  for (size_t i = 0; i < n && !found; i++) {
    kl_json_span_t k;
    label_at(o, lazy ? &w : NULL, i, &k, val);
    found = k.n == klen && memcmp(k.p, key, klen) == 0;
  }
  refs_end(&w, lazy);
  return found;
}

size_t kl_obj_owner_count(const kl_obj_t *o) {
  walk_t w;
  bool lazy;
  size_t n = refs_begin(plain(o), LAZY_OWNERS, &w, &lazy);
  refs_end(&w, lazy);
  return n;
}

void kl_obj_owner(const kl_obj_t *o, size_t i, kl_obj_owner_t *out) {
  walk_t w;
  bool lazy;
  o = plain(o);
  if (i < refs_begin(o, LAZY_OWNERS, &w, &lazy))
    owner_at(o, lazy ? &w : NULL, i, out);
  refs_end(&w, lazy);
}

bool kl_obj_controller(const kl_obj_t *o, kl_obj_owner_t *out) {
  walk_t w;
  bool lazy, found = false;
  o = plain(o);
  size_t n = refs_begin(o, LAZY_OWNERS, &w, &lazy);
  for (size_t i = 0; i < n && !found; i++) {
    owner_at(o, lazy ? &w : NULL, i, out);
    found = out->controller;
  }
  refs_end(&w, lazy);
  return found;
}

/* --- Status and watch events -------------------------------------------- */

/* The decoded string member key of obj, "" when absent or not a string. A
 * NUL (\u0000 in the JSON) is kept as those six characters: these strings
 * end up in C strings and log lines, where a NUL would cut off the rest. */
static char *member_string(kl_json_span_t obj, const char *key) {
  kl_json_span_t v;
  if (!kl_json_member(obj, key, &v) || v.n < 2 || v.p[0] != '"')
    return kl_xstrdup("");
  char *s = kl_xmalloc(v.n);
  size_t n = kl_json_unescape(v.p + 1, v.n - 2, s), nul = 0;
  for (size_t i = 0; i < n; i++)
    nul += s[i] == '\0';
  if (nul == 0) {
    s[n] = '\0';
    return s;
  }
  char *t = kl_xmalloc(n + 5 * nul + 1), *q = t;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '\0') {
      *q++ = s[i];
      continue;
    }
    memcpy(q, "\\u0000", 6);
    q += 6;
  }
  *q = '\0';
  free(s);
  return t;
}

void kl_obj_status(const kl_obj_t *o, kl_obj_status_t *st) {
  kl_json_span_t json = kl_obj_json(o), v;
  st->code = 0;
  if (kl_json_member(json, "code", &v) && !kl_json_int64(v, &st->code))
    st->code = 0;
  st->status = member_string(json, "status");
  st->reason = member_string(json, "reason");
  st->message = member_string(json, "message");
}

void kl_obj_status_clear(kl_obj_status_t *st) {
  free(st->status);
  free(st->reason);
  free(st->message);
  memset(st, 0, sizeof *st);
}

static const name_t event_types[] = {NAME(""),         NAME("ADDED"),
                                     NAME("MODIFIED"), NAME("DELETED"),
                                     NAME("BOOKMARK"), NAME("ERROR")};

const char *kl_obj_event_type_name(kl_obj_event_type_t t) {
  return t >= KL_OBJ_ADDED && t <= KL_OBJ_ERROR ? event_types[t].s : "";
}

typedef struct event_ctx {
  const kl_obj_opts_t *opts;
  kl_obj_event_t *ev;
  int rc;
  bool has_type;
} event_ctx_t;

static const char *event_member(walk_t *w, const char *ks, size_t kn, bool kesc,
                                const char *v, void *ud) {
  static const name_t names[] = {NAME("type"), NAME("object")};
  event_ctx_t *c = ud;
  switch (key_id(ks, kn, kesc, names, 2)) {
  case 0: {
    bool esc;
    if (v >= w->end || *v != '"')
      return werr(w, v, "watch event type is not a string");
    const char *e = str_end(w, v, &esc);
    if (!e) return NULL;
    int t = key_id(v + 1, (size_t)(e - v - 1), esc, event_types + 1, 5);
    if (t < 0)
      return werr(w, v, "unknown watch event type %.*s",
                  (int)(e - v + 1 > 40 ? 40 : e - v + 1), v);
    c->ev->type = (kl_obj_event_type_t)(t + 1);
    c->has_type = true;
    return e + 1;
  }
  case 1: {
    if (c->ev->obj) return werr(w, v, "watch event has two objects");
    if (v >= w->end || *v != '{')
      return werr(w, v, "watch event object is not an object");
    walk_t ow;
    const char *next = NULL;
    walk_init(&ow, v, w->end, w->exact,
              w->exact ? w->base + (uint64_t)(v - w->src) : w->base,
              c->opts && c->opts->keep_managed_fields);
    ow.ct_base = w->ct_base;
    ow.ct = w->ct;
    ow.nct = w->nct;
    ow.ci = w->ci;
    c->rc = parse_at(&ow, c->opts, &c->ev->obj, &next);
    w->ci = ow.ci;
    if (c->rc != KL_OK) {
      w->err_off = ow.err_off;
      snprintf(w->err, sizeof w->err, "%s", ow.err);
      next = NULL;
    }
    walk_free(&ow);
    return next;
  }
  default: return skip(w, v);
  }
}

int kl_obj_event_parse(const kl_json_value_t *v, const kl_obj_opts_t *opts,
                       kl_obj_event_t *ev, char *err, size_t errlen) {
  char *scratch;
  kl_json_span_t s = compact_src(v, &scratch);
  walk_t w;
  event_ctx_t ctx = {opts, ev, KL_OK, false};
  memset(ev, 0, sizeof *ev);
  walk_init(&w, s.p, s.p + s.n, v->compact, v->offset, false);
  walk_index(&w, v);
  const char *e = members(&w, s.p, event_member, &ctx);
  int rc = ctx.rc != KL_OK ? ctx.rc : KL_EPARSE;
  if (e) {
    if (e != s.p + s.n)
      werr(&w, e, "trailing data after the watch event");
    else if (!ctx.has_type)
      werr(&w, s.p, "watch event has no type");
    else if (!ev->obj)
      werr(&w, s.p, "watch event has no object");
    else
      rc = KL_OK;
  }
  if (rc == KL_OK && ev->type == KL_OBJ_ERROR)
    kl_obj_status(ev->obj, &ev->status);
  if (rc != KL_OK) {
    report(&w, rc, err, errlen);
    kl_obj_unref(ev->obj);
    memset(ev, 0, sizeof *ev);
  }
  walk_free(&w);
  free(scratch);
  return rc;
}

void kl_obj_event_clear(kl_obj_event_t *ev) {
  kl_obj_unref(ev->obj);
  if (ev->type == KL_OBJ_ERROR) kl_obj_status_clear(&ev->status);
  memset(ev, 0, sizeof *ev);
}
