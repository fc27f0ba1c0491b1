/* objz.c — zstd with a learned dictionary for cached objects (see objz.h).
 *
 * The codec starts learning: each plain object of at least min_size bytes
 * appends its JSON to the sample until it holds sample_size bytes, then
 * the next `samples` objects go to the statistics; all are cached as they
 * are. The sample becomes the dictionary's content (zstd matches against
 * it like against earlier input, which is what similar objects need) and
 * ZDICT_finalizeDictionary adds entropy tables learned by compressing the
 * statistics with it (about a millisecond; no training pass holds the
 * loop). The statistics are objects outside the content, as every later
 * object is: objects inside it would match it whole and price literals
 * and offsets for a codec that never sees them (realistic Pods: 382 bytes
 * compressed against 372 at 32 KiB). A larger content finds more of an
 * object's strings: 128 KiB (about 60 Pods) gives 321 bytes for 2.4 KB
 * of JSON and 11% fewer instructions than 32 KiB, as the longer matches
 * leave fewer positions to hash and fewer sequences to code. The
 * tables spare zstd building Huffman and FSE tables for every object, which
 * for a 4 KB object costs more than the matching: with them compression
 * takes about half the instructions and the output is smaller. Should
 * finalizing fail, the sample alone is the dictionary (raw content). It is
 * digested once into a CDict and a DDict that refer to it, and the
 * statistics are freed. From then on every object worth it is
 * compressed: magicless frames without checksum, dictionary id or content
 * size (the object keeps its JSON length), since they never leave the
 * process. An object that does not shrink by a quarter stays plain.
 *
 * The codec owns one compression and one decompression context and the
 * buffers they write to; they are reused for every object, so the hot path
 * allocates only the compressed object. refs counts the informer plus every
 * compressed object. The codec also keeps the plain form of the last
 * compressed object whose uid, labels or owners were read (object.c makes
 * it); it holds no reference on that object, which forgets it when freed. */
#define ZSTD_STATIC_LINKING_ONLY /* magicless frames */
#include "objz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zdict.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "mem.h"

/* Decompressed JSON goes to RING buffers in turn, so a span stays valid
 * while RING - 1 more objects are decompressed: a decode that some Lua
 * finalizer interrupts with a few reads of its own still sees its bytes. */
#define RING 4

typedef struct zbuf {
  char *p;
  size_t cap;
} zbuf_t;

struct kl_objz {
  uint32_t refs;
  kl_objz_opts_t o;
  char *sample; /* the dictionary's content, o.sample_size bytes when full */
  size_t sample_len;
  char *dict; /* the finalized dictionary (content and tables), or NULL */
  size_t dict_len;
  char *stats;         /* the statistics: the JSON of the first objects */
  size_t stats_len;    /* bytes in stats */
  size_t *stats_sizes; /* each object's size; o.samples of them */
  size_t nstats;
  ZSTD_CDict *cdict; /* NULL while learning */
  ZSTD_DDict *ddict;
  ZSTD_CCtx *cctx;
  ZSTD_DCtx *dctx;
  zbuf_t out;               /* compression output */
  zbuf_t json[RING];        /* decompression outputs, used in turn */
  unsigned next;            /* the json buffer to use next */
  const kl_obj_t *plain_of; /* the compressed object `plain` was made from */
  kl_obj_t *plain;          /* its plain form (one reference), or NULL */
  kl_objz_stats_t st;
};

kl_objz_t *kl_objz_new(const kl_objz_opts_t *opts) {
  kl_objz_t *z = kl_xcalloc(1, sizeof *z);
  if (opts) z->o = *opts;
  if (!z->o.min_size) z->o.min_size = 256;
  if (!z->o.sample_size) z->o.sample_size = 128 * 1024;
  if (!z->o.level) z->o.level = 1;
  if (!z->o.samples) z->o.samples = 16;
  z->refs = 1;
  return z;
}

kl_objz_t *kl_objz_ref(kl_objz_t *z) {
  if (z) z->refs++;
  return z;
}

void kl_objz_unref(kl_objz_t *z) {
  if (!z || --z->refs > 0) return;
  kl_obj_unref(z->plain);
  ZSTD_freeCDict(z->cdict);
  ZSTD_freeDDict(z->ddict);
  ZSTD_freeCCtx(z->cctx);
  ZSTD_freeDCtx(z->dctx);
  free(z->sample);
  free(z->dict);
  free(z->stats);
  free(z->stats_sizes);
  free(z->out.p);
  for (int i = 0; i < RING; i++)
    free(z->json[i].p);
  free(z);
}

static void zcheck(size_t rc, const char *what) {
  if (ZSTD_isError(rc)) {
    fprintf(stderr, "kubelua: zstd %s: %s\n", what, ZSTD_getErrorName(rc));
    abort();
  }
}

static void *znew(void *p, const char *what) {
  if (!p) {
    fprintf(stderr, "kubelua: zstd %s: out of memory\n", what);
    abort();
  }
  return p;
}

static char *reserve(zbuf_t *b, size_t n) {
  if (n > b->cap) {
    b->cap = n < 4096 ? 4096 : n + n / 2;
    free(b->p);
    b->p = kl_xmalloc(b->cap);
  }
  return b->p;
}

/* The sample and the statistics are full: the dictionary is the sample
 * with entropy tables from the statistics (or the sample alone if zstd
 * cannot make them), digested into a CDict and a DDict. */
static void learned(kl_objz_t *z) {
  size_t cap = z->sample_len + 4096; /* the tables take a few hundred */
  char *d = kl_xmalloc(cap);
  ZDICT_params_t zp;
  memset(&zp, 0, sizeof zp);
  zp.compressionLevel = z->o.level;
  size_t n =
      ZDICT_finalizeDictionary(d, cap, z->sample, z->sample_len, z->stats,
                               z->stats_sizes, (unsigned)z->nstats, zp);
  const char *dict = z->sample;
  size_t len = z->sample_len;
  ZSTD_dictContentType_e type = ZSTD_dct_rawContent;
  if (ZDICT_isError(n)) {
    free(d);
  } else {
    z->dict = kl_xrealloc(d, n);
    z->dict_len = n;
    free(z->sample); /* the dictionary holds its own copy */
    z->sample = NULL;
    dict = z->dict;
    len = n;
    type = ZSTD_dct_fullDict;
  }
  free(z->stats);
  free(z->stats_sizes);
  z->stats = NULL;
  z->stats_sizes = NULL;
  ZSTD_compressionParameters cp = ZSTD_getCParams(z->o.level, 4096, len);
  z->cdict = znew(ZSTD_createCDict_advanced(dict, len, ZSTD_dlm_byRef, type, cp,
                                            ZSTD_defaultCMem),
                  "dictionary");
  z->ddict = znew(ZSTD_createDDict_advanced(dict, len, ZSTD_dlm_byRef, type,
                                            ZSTD_defaultCMem),
                  "dictionary");
  z->cctx = znew(ZSTD_createCCtx(), "context");
  z->dctx = znew(ZSTD_createDCtx(), "context");
  zcheck(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_format, ZSTD_f_zstd1_magicless),
         "format");
  zcheck(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_contentSizeFlag, 0), "flag");
  zcheck(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_checksumFlag, 0), "flag");
  zcheck(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_dictIDFlag, 0), "flag");
  zcheck(ZSTD_CCtx_refCDict(z->cctx, z->cdict), "dictionary");
  zcheck(ZSTD_DCtx_setParameter(z->dctx, ZSTD_d_format, ZSTD_f_zstd1_magicless),
         "format");
  zcheck(ZSTD_DCtx_refDDict(z->dctx, z->ddict), "dictionary");
  z->st.dictionary_bytes = len;
}

static void learn(kl_objz_t *z, kl_json_span_t j) {
  if (!z->sample) {
    z->sample = kl_xmalloc(z->o.sample_size);
    z->stats_sizes = kl_xmalloc(z->o.samples * sizeof *z->stats_sizes);
  }
  if (z->sample_len < z->o.sample_size) {
    size_t n = z->o.sample_size - z->sample_len;
    if (n > j.n) n = j.n;
    memcpy(z->sample + z->sample_len, j.p, n);
    z->sample_len += n;
    return;
  }
  z->stats = kl_xrealloc(z->stats, z->stats_len + j.n);
  memcpy(z->stats + z->stats_len, j.p, j.n);
  z->stats_len += j.n;
  z->stats_sizes[z->nstats++] = j.n;
  if (z->nstats == z->o.samples) learned(z);
}

bool kl_objz_learning(const kl_objz_t *z) { return !z->cdict; }

kl_obj_t *kl_objz_compress(kl_objz_t *z, kl_obj_t *o) {
  if (kl_obj_compressed(o)) return kl_obj_ref(o);
  kl_json_span_t j = kl_obj_json(o);
  if (j.n < z->o.min_size) return kl_obj_ref(o);
  if (!z->cdict) {
    learn(z, j);
    return kl_obj_ref(o);
  }
  /* Worth it only when it saves a quarter; a larger output is cut off. */
  size_t cap = j.n - j.n / 4;
  char *out = reserve(&z->out, cap);
  size_t n = ZSTD_compress2(z->cctx, out, cap, j.p, j.n);
  if (ZSTD_isError(n)) {
    if (ZSTD_getErrorCode(n) != ZSTD_error_dstSize_tooSmall)
      zcheck(n, "compress");
    ZSTD_CCtx_reset(z->cctx, ZSTD_reset_session_only);
    return kl_obj_ref(o);
  }
  z->st.compressed++;
  z->st.json_bytes += j.n;
  z->st.compressed_bytes += n;
  return kl_obj_pack(o, out, n, z);
}

kl_json_span_t kl_objz_decompress(kl_objz_t *z, const char *src, size_t n,
                                  size_t len) {
  char *out = reserve(&z->json[z->next], len + 1);
  z->next = (z->next + 1) % RING;
  z->st.decompressed++;
  size_t got = ZSTD_decompressDCtx(z->dctx, out, len, src, n);
  zcheck(got, "decompress");
  if (got != len) {
    fprintf(stderr, "kubelua: zstd decompress: %zu bytes, expected %zu\n", got,
            len);
    abort();
  }
  out[len] = '\0';
  kl_json_span_t s = {out, len};
  return s;
}

kl_obj_t *kl_objz_plain(const kl_objz_t *z, const kl_obj_t *o) {
  return z->plain_of == o ? z->plain : NULL;
}

void kl_objz_keep_plain(kl_objz_t *z, const kl_obj_t *o, kl_obj_t *plain) {
  kl_obj_unref(z->plain);
  z->plain_of = o;
  z->plain = plain;
}

void kl_objz_forget(kl_objz_t *z, const kl_obj_t *o) {
  if (z->plain_of == o) kl_objz_keep_plain(z, NULL, NULL);
}

void kl_objz_stats(const kl_objz_t *z, kl_objz_stats_t *st) { *st = z->st; }
