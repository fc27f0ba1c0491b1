/* json_swar.h — eight-bytes-at-a-time string scanning for the JSON code
 * (json.c, object.c, lua_json.c); private, not part of any module's API.
 * kl_scan_quote_bs and kl_scan_special are the scans they share.
 * Where SSE2 is there (always on x86-64), kl_simd_* test sixteen bytes at
 * once and give an exact bit mask (bit i for byte i); callers keep the
 * eight-byte loop for the rest and for other machines.
 *
 * Each mask has the high bit set in every byte that ends a run: for a byte
 * that truly matches, and possibly for bytes above it (a borrow only moves
 * upward), never below. So "mask == 0" means no byte of the eight matches,
 * and the lowest set bit marks the first one that does. */
#ifndef KL_JSON_SWAR_H
#define KL_JSON_SWAR_H

#include <stdint.h>
#include <string.h>

#define KL_SWAR_ONES 0x0101010101010101ull
#define KL_SWAR_HIGH 0x8080808080808080ull

static inline uint64_t kl_swar_load(const void *p) {
  uint64_t x;
  memcpy(&x, p, 8);
  return x;
}

/* Bytes that are '"' or '\\'. */
static inline uint64_t kl_swar_quote_bs(uint64_t x) {
  uint64_t q = x ^ (KL_SWAR_ONES * '"'), b = x ^ (KL_SWAR_ONES * '\\');
  return (((q - KL_SWAR_ONES) & ~q) | ((b - KL_SWAR_ONES) & ~b)) & KL_SWAR_HIGH;
}

/* Bytes that end a plain run inside a string: '"', '\\', control bytes
 * (< 0x20) and bytes >= 0x80. */
static inline uint64_t kl_swar_special(uint64_t x) {
  uint64_t q = x ^ (KL_SWAR_ONES * '"'), b = x ^ (KL_SWAR_ONES * '\\');
  return (((q - KL_SWAR_ONES) & ~q) | ((b - KL_SWAR_ONES) & ~b) |
          ((x - KL_SWAR_ONES * 0x20) & ~x) | x) &
         KL_SWAR_HIGH;
}

/* How many bytes before the first one flagged in a non-zero mask may be
 * skipped: its index (0..7), or 0 where there is no cheap way to find it
 * (the caller then steps byte by byte, which stays correct). */
static inline unsigned kl_swar_first(uint64_t mask) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) &&                            \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return (unsigned)__builtin_ctzll(mask) >> 3;
#else
  (void)mask;
  return 0;
#endif
}

/* 1 when kl_swar_first() gives the exact index of the first flagged byte,
 * so a caller need not step over the bytes before it again. */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) &&                            \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KL_SWAR_EXACT 1
#else
#define KL_SWAR_EXACT 0
#endif

#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>
#define KL_SIMD 1

/* The bytes of p[0..16) that are '"' or '\\': bit i for byte i. */
static inline unsigned kl_simd_quote_bs(const void *p) {
  __m128i x = _mm_loadu_si128((const __m128i *)p);
  return (unsigned)_mm_movemask_epi8(
      _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                   _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));
}

/* The bytes of p[0..16) that kl_swar_special flags: '"', '\\', control
 * bytes and bytes >= 0x80 (the last two are the signed bytes below 0x20). */
static inline unsigned kl_simd_special(const void *p) {
  __m128i x = _mm_loadu_si128((const __m128i *)p);
  return (unsigned)_mm_movemask_epi8(
      _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                   _mm_cmplt_epi8(x, _mm_set1_epi8(0x20))));
}
#else
#define KL_SIMD 0
#endif

/* The first byte of [p, end) that is '"' or '\\', or end. */
static inline const char *kl_scan_quote_bs(const char *p, const char *end) {
#if KL_SIMD
  for (; end - p >= 16; p += 16) {
    unsigned m = kl_simd_quote_bs(p);
    if (m) return p + __builtin_ctz(m);
  }
#endif
  for (; end - p >= 8; p += 8) {
    uint64_t m = kl_swar_quote_bs(kl_swar_load(p));
    if (m) {
      p += kl_swar_first(m);
      if (KL_SWAR_EXACT) return p;
      break;
    }
  }
  while (p < end && *p != '"' && *p != '\\')
    p++;
  return p;
}

/* The first byte of [p, end) that ends a plain run inside a string ('"',
 * '\\', a control byte or a byte >= 0x80), or end. */
static inline const char *kl_scan_special(const char *p, const char *end) {
#if KL_SIMD
  for (; end - p >= 16; p += 16) {
    unsigned m = kl_simd_special(p);
    if (m) return p + __builtin_ctz(m);
  }
#endif
  for (; end - p >= 8; p += 8) {
    uint64_t m = kl_swar_special(kl_swar_load(p));
    if (m) {
      p += kl_swar_first(m);
      if (KL_SWAR_EXACT) return p;
      break;
    }
  }
  for (; p < end; p++) {
    uint8_t c = (uint8_t)*p;
    if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
  }
  return p;
}

#endif
