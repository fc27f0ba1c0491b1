/* json_swar.h — eight-bytes-at-a-time string scanning for the JSON code
 * (json.c, object.c, lua_json.c); private, not part of any module's API.
 * kl_scan_quote_bs and kl_scan_special are the scans they share; the byte
 * classes and the checks of escapes, UTF-8 and a string's rest at the end
 * serve the readers of whole texts (json.c's kl_json_check_indexed and
 * lua_json.c's decoder).
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

#include <stdbool.h>
#include <stddef.h>
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

/* The last byte of [p, end) that is c, or NULL. */
static inline const char *kl_scan_last(const char *p, const char *end, char c) {
#if KL_SIMD
  __m128i k = _mm_set1_epi8(c);
  for (; end - p >= 16; end -= 16) {
    unsigned m = (unsigned)_mm_movemask_epi8(
        _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(end - 16)), k));
    if (m) return end - 16 + (31 - __builtin_clz(m));
  }
#endif
  while (end > p)
    if (*--end == c) return end;
  return NULL;
}

/* --- Byte classes and the checks of whole-text readers --- */

static const uint8_t kl_json_ws_tab[256] = {
    [' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1};

static inline bool kl_json_is_ws(uint8_t c) { return kl_json_ws_tab[c] != 0; }

static inline bool kl_json_is_digit(uint8_t c) {
  return (uint8_t)(c - '0') < 10;
}

static inline int kl_json_hexval(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  c |= 0x20;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* The length of the valid escape at q (a backslash), 0 if invalid: a \u
 * escape of a UTF-16 surrogate counts with its pair. */
static inline size_t kl_json_escape_len(const char *q, const char *end) {
  if (end - q < 2) return 0;
  switch (q[1]) {
  case '"':
  case '\\':
  case '/':
  case 'b':
  case 'f':
  case 'n':
  case 'r':
  case 't': return 2;
  case 'u': {
    uint32_t cp = 0;
    if (end - q < 6) return 0;
    for (int i = 2; i < 6; i++) {
      int h = kl_json_hexval((uint8_t)q[i]);
      if (h < 0) return 0;
      cp = cp << 4 | (uint32_t)h;
    }
    if (cp >= 0xdc00 && cp <= 0xdfff) return 0;
    if (cp < 0xd800 || cp > 0xdbff) return 6;
    if (end - q < 12 || q[6] != '\\' || q[7] != 'u') return 0;
    cp = 0;
    for (int i = 8; i < 12; i++) {
      int h = kl_json_hexval((uint8_t)q[i]);
      if (h < 0) return 0;
      cp = cp << 4 | (uint32_t)h;
    }
    return cp >= 0xdc00 && cp <= 0xdfff ? 12 : 0;
  }
  default: return 0;
  }
}

/* The length of the valid UTF-8 sequence at s (n bytes left), 0 if
 * invalid. */
static inline size_t kl_utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0], lo = 0x80, hi = 0xbf;
  size_t len;
  if (c < 0xc2) return 0;
  if (c < 0xe0) {
    len = 2;
  } else if (c < 0xf0) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c < 0xf5) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

/* The length of what starts at the special byte c inside a string (other
 * than its closing quote): a valid escape (then *esc becomes true) or
 * UTF-8 sequence; 0 for anything else. */
static inline size_t kl_json_special_len(const char *c, const char *end,
                                         bool *esc) {
  uint8_t ch = (uint8_t)*c;
  if (ch == '\\') {
    *esc = true;
    return kl_json_escape_len(c, end);
  }
  return ch < 0x80 ? 0
                   : kl_utf8_len((const unsigned char *)c, (size_t)(end - c));
}

/* Checks the rest of a string from q (inside it; the bytes before q are
 * plain) and returns its closing quote, or NULL when it is invalid or does
 * not end before end. *esc becomes true when it holds an escape. */
#if defined(__GNUC__)
__attribute__((noinline, unused))
#endif
static const char *
kl_json_str_rest(const char *q, const char *end, bool *esc) {
  for (;;) {
#if KL_SIMD
    /* One test per sixteen bytes: the special bytes of a block are taken
     * from its mask one after the other (a managedFields key such as
     * k:{\"name\":\"x\"} holds four escapes in twenty bytes). */
    while (end - q >= 16) {
      const char *b = q;
      unsigned m = kl_simd_special(b);
      for (;;) {
        if (!m) {
          q = b + 16;
          break;
        }
        const char *c = b + __builtin_ctz(m);
        if (*c == '"') return c;
        size_t len = kl_json_special_len(c, end, esc);
        if (!len) return NULL;
        q = c + len;
        if (q - b >= 16) break;
        m &= ~0u << (q - b); /* the bytes before q are read */
      }
    }
#endif
    q = kl_scan_special(q, end);
    if (q >= end) return NULL;
    if (*q == '"') return q;
    size_t len = kl_json_special_len(q, end, esc);
    if (!len) return NULL;
    q += len;
  }
}

/* The closing quote of the string whose contents start at s, checked, or
 * NULL (kl_json_str_rest); inline for the common string of plain bytes. */
static inline const char *kl_json_str_close(const char *s, const char *end,
                                            bool *esc) {
  const char *q = kl_scan_special(s, end);
  if (q < end && *q == '"') return q;
  return kl_json_str_rest(q, end, esc);
}

#endif
