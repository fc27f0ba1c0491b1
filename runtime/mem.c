/* mem.c — allocation wrappers that abort on exhaustion (see mem.h). */
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n) {
  fprintf(stderr, "kubelua: out of memory allocating %zu bytes\n", n);
  abort();
}

void *kl_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) oom(n);
  return p;
}

void *kl_xcalloc(size_t count, size_t n) {
  void *p = calloc(count ? count : 1, n ? n : 1);
  if (!p) oom(count * n);
  return p;
}

void *kl_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) oom(n);
  return q;
}

char *kl_xstrndup(const char *s, size_t n) {
  char *d = kl_xmalloc(n + 1);
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

char *kl_xstrdup(const char *s) { return kl_xstrndup(s, strlen(s)); }
