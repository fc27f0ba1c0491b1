/* json_simd.h — the bytes of a 64-byte window that end a plain run inside a
 * JSON string, found at once, for json.c's checker of whole texts;
 * private, not part of any module's API.
 *
 * One function per instruction set: SSE2 (every x86-64) and AVX2, the
 * latter compiled for its target alone and called only where the
 * processor has it (json.c asks at run time). Other machines keep
 * json_swar.h's scans and build nothing here. Each reads exactly the 64
 * bytes at p: the caller makes sure they are there. */
#ifndef KL_JSON_SIMD_H
#define KL_JSON_SIMD_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KL_SIMD_X86 1

/* The bytes of p[0..64) that are '"', '\\', control bytes or bytes from
 * 0x80 (kl_swar_special's), bit i for byte i: sixteen at a time. Not
 * inlined, here and below: inlined, the compiler made the three constants
 * again at every string the checker opened (ten instructions each, a
 * seventh of a Pod's check), where a call is made once a window. */
static __attribute__((noinline, unused)) uint64_t
kl_simd_special64_sse2(const uint8_t *p) {
  uint64_t m = 0;
  for (unsigned i = 0; i < 4; i++)
    m |= (uint64_t)kl_simd_special(p + 16 * i) << (16 * i);
  return m;
}

/* The same, thirty-two at a time. */
static __attribute__((target("avx2"), noinline, unused)) uint64_t
kl_simd_special64_avx2(const uint8_t *p) {
  const __m256i quote = _mm256_set1_epi8('"'), bs = _mm256_set1_epi8('\\');
  const __m256i lower = _mm256_set1_epi8(0x20);
  uint64_t m = 0;
  for (unsigned i = 0; i < 2; i++) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32 * i));
    __m256i sp = _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpeq_epi8(x, quote), _mm256_cmpeq_epi8(x, bs)),
        _mm256_cmpgt_epi8(lower, x)); /* signed: high bytes too */
    m |= (uint64_t)(uint32_t)_mm256_movemask_epi8(sp) << (32 * i);
  }
  return m;
}

#else
#define KL_SIMD_X86 0
#endif

#endif
