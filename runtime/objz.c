/* objz.c — zstd with a learned dictionary for cached objects (see objz.h).
 *
 * The codec starts learning: each plain object of at least min_size bytes
 * appends its JSON to the sample and is cached as it is. Once the sample
 * holds sample_size bytes it becomes a raw-content dictionary (zstd matches
 * against it like against earlier input, which is what similar objects
 * need; no training pass holds the loop), digested once into a CDict and a
 * DDict that refer to the sample. From then on every object worth it is
 * compressed: magicless frames without checksum, dictionary id or content
 * size (the object keeps its JSON length), since they never leave the
 * process. An object that does not shrink by a quarter stays plain.
 *
 * The codec owns one compression and one decompression context and the
 * buffers they write to; they are reused for every object, so the hot path
 * allocates only the compressed object. refs counts the informer plus every
 * compressed object. */
#define ZSTD_STATIC_LINKING_ONLY /* magicless frames */
#include "objz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  char *sample; /* the dictionary's bytes, o.sample_size of them when full */
  size_t sample_len;
  ZSTD_CDict *cdict; /* NULL while learning */
  ZSTD_DDict *ddict;
  ZSTD_CCtx *cctx;
  ZSTD_DCtx *dctx;
  zbuf_t out;        /* compression output */
  zbuf_t json[RING]; /* decompression outputs, used in turn */
  unsigned next;     /* the json buffer to use next */
  kl_objz_stats_t st;
};

kl_objz_t *kl_objz_new(const kl_objz_opts_t *opts) {
  kl_objz_t *z = kl_xcalloc(1, sizeof *z);
  if (opts) z->o = *opts;
  if (!z->o.min_size) z->o.min_size = 256;
  if (!z->o.sample_size) z->o.sample_size = 16 * 1024;
  if (!z->o.level) z->o.level = 1;
  z->refs = 1;
  return z;
}

kl_objz_t *kl_objz_ref(kl_objz_t *z) {
  if (z) z->refs++;
  return z;
}

void kl_objz_unref(kl_objz_t *z) {
  if (!z || --z->refs > 0) return;
  ZSTD_freeCDict(z->cdict);
  ZSTD_freeDDict(z->ddict);
  ZSTD_freeCCtx(z->cctx);
  ZSTD_freeDCtx(z->dctx);
  free(z->sample);
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

/* The sample is full: digest it into the dictionaries. */
static void learned(kl_objz_t *z) {
  ZSTD_compressionParameters cp =
      ZSTD_getCParams(z->o.level, 4096, z->sample_len);
  z->cdict =
      znew(ZSTD_createCDict_advanced(z->sample, z->sample_len, ZSTD_dlm_byRef,
                                     ZSTD_dct_rawContent, cp, ZSTD_defaultCMem),
           "dictionary");
  z->ddict =
      znew(ZSTD_createDDict_advanced(z->sample, z->sample_len, ZSTD_dlm_byRef,
                                     ZSTD_dct_rawContent, ZSTD_defaultCMem),
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
  z->st.dictionary_bytes = z->sample_len;
}

static void learn(kl_objz_t *z, kl_json_span_t j) {
  if (!z->sample) z->sample = kl_xmalloc(z->o.sample_size);
  size_t n = z->o.sample_size - z->sample_len;
  if (n > j.n) n = j.n;
  memcpy(z->sample + z->sample_len, j.p, n);
  z->sample_len += n;
  if (z->sample_len == z->o.sample_size) learned(z);
}

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

void kl_objz_stats(const kl_objz_t *z, kl_objz_stats_t *st) { *st = z->st; }
