/* kt_heap.h — heap leak checks for the C unit tests that count bytes.
 *
 * A test compares heap_used() before and after its work. glibc keeps freed
 * blocks in its per-thread cache and counts them as in use, so a test binary
 * re-executes itself once with that cache off (without_tcache); if it cannot,
 * the checks switch off and the tests still run. Under ASan, LeakSanitizer
 * checks instead. */
#ifndef KT_HEAP_H
#define KT_HEAP_H

#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static bool heap_exact; /* running with the cache off */

static size_t heap_used(void) {
  struct mallinfo2 m = mallinfo2();
  if (!heap_exact) return 0;
  return m.uordblks + m.hblkhd; /* arena chunks in use + mmapped blocks */
}

static void without_tcache(char **argv) {
  if (getenv("KT_TCACHE_OFF")) {
    heap_exact = true;
    return;
  }
  setenv("KT_TCACHE_OFF", "1", 1);
  setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
  execv("/proc/self/exe", argv); /* on failure: run without leak checks */
}

/* Allocations libc makes once, on first use (stdio, the arena). */
static void warm_up(void) {
  char b[64];
  free(malloc(1));
  snprintf(b, sizeof b, "%d %s %.1f", 1, "x", 1.5);
  printf("# heap leak checks %s\n", heap_exact ? "on" : "off");
}

#endif
