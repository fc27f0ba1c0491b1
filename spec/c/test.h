/* test.h — the C unit tests' assertions and runner.
 *
 * Each spec/c/test_<module>.c defines static test functions and a main() that
 * runs them with KT_RUN; every assertion prints both sides when it fails, and
 * the run ends with the line "N passed, N failed" and exit status 0 or 1.
 * A fake clock (kt_clock) lets tests drive time instead of sleeping. */
#ifndef KL_TEST_H
#define KL_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

static int kt_passed, kt_failed, kt_current_failed;
static const char *kt_current;

#define KT_FAIL_(fmt, ...)                                                     \
  do {                                                                         \
    fprintf(stderr, "  FAIL %s (%s:%d): " fmt "\n", kt_current, __FILE__,      \
            __LINE__, __VA_ARGS__);                                            \
    kt_current_failed = 1;                                                     \
  } while (0)

#define KT_EQ_INT(a, b)                                                        \
  do {                                                                         \
    long long kt_a = (long long)(a), kt_b = (long long)(b);                    \
    if (kt_a != kt_b) KT_FAIL_("%s == %s: %lld != %lld", #a, #b, kt_a, kt_b);  \
  } while (0)

#define KT_EQ_DBL(a, b, eps)                                                   \
  do {                                                                         \
    double kt_a = (a), kt_b = (b);                                             \
    if (!(kt_a - kt_b <= (eps) && kt_b - kt_a <= (eps)))                       \
      KT_FAIL_("%s == %s: %.9g != %.9g", #a, #b, kt_a, kt_b);                  \
  } while (0)

#define KT_EQ_STR(a, b)                                                        \
  do {                                                                         \
    const char *kt_a = (a), *kt_b = (b);                                       \
    if (!kt_a || !kt_b || strcmp(kt_a, kt_b) != 0)                             \
      KT_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, kt_a ? kt_a : "(null)",   \
               kt_b ? kt_b : "(null)");                                        \
  } while (0)

/* Compares n bytes at a with the C string b (lengths must match too). */
#define KT_EQ_MEM(a, n, b)                                                     \
  do {                                                                         \
    const char *kt_a = (const char *)(a), *kt_b = (b);                         \
    size_t kt_n = (size_t)(n);                                                 \
    if (!kt_a || kt_n != strlen(kt_b) || memcmp(kt_a, kt_b, kt_n) != 0)        \
      KT_FAIL_("%s == %s: \"%.*s\" != \"%s\"", #a, #b, (int)kt_n,              \
               kt_a ? kt_a : "", kt_b);                                        \
  } while (0)

#define KT_TRUE(c)                                                             \
  do {                                                                         \
    if (!(c)) KT_FAIL_("%s", #c);                                              \
  } while (0)

#define KT_RUN(fn)                                                             \
  do {                                                                         \
    kt_current = #fn;                                                          \
    kt_current_failed = 0;                                                     \
    fn();                                                                      \
    if (kt_current_failed) {                                                   \
      kt_failed++;                                                             \
      fprintf(stderr, "not ok %s\n", #fn);                                     \
    } else {                                                                   \
      kt_passed++;                                                             \
      printf("ok %s\n", #fn);                                                  \
    }                                                                          \
  } while (0)

#define KT_DONE()                                                              \
  (printf("%d passed, %d failed\n", kt_passed, kt_failed), kt_failed ? 1 : 0)

/* A clock the test moves by hand: kt_clock.ud points at kt_now. */
static double kt_now = 1000.0;
static double kt_clock_read(void *ud) { return *(double *)ud; }
static const kl_clock_t kt_clock = {kt_clock_read, &kt_now};

#endif
