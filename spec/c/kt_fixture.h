/* kt_fixture.h — reading spec/fixtures/json files from the C tests and
 * benchmarks: KL_FIXTURES names another directory, else the path is found
 * from this source file's location. */
#ifndef KT_FIXTURE_H
#define KT_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *fixture_path(const char *rel) {
  static char path[1024];
  const char *env = getenv("KL_FIXTURES");
  if (env) {
    snprintf(path, sizeof path, "%s/%s", env, rel);
  } else {
    const char *f = __FILE__, *slash = strrchr(f, '/');
    int dir = slash ? (int)(slash - f) : 1;
    snprintf(path, sizeof path, "%.*s/../fixtures/json/%s", dir,
             slash ? f : ".", rel);
  }
  return path;
}

static char *slurp(const char *rel, size_t *n) {
  FILE *f = fopen(fixture_path(rel), "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", fixture_path(rel));
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)sz + 1);
  *n = fread(b, 1, (size_t)sz, f);
  b[*n] = '\0';
  fclose(f);
  return b;
}

/* Removes insignificant whitespace from JSON text in[0, n) into out (n
 * bytes of room): the reference the decoder's compaction is checked with. */
static size_t compact_ref(const char *in, size_t n, char *out) {
  size_t o = 0;
  int instr = 0, esc = 0;
  for (size_t i = 0; i < n; i++) {
    char c = in[i];
    if (instr) {
      out[o++] = c;
      if (esc)
        esc = 0;
      else if (c == '\\')
        esc = 1;
      else if (c == '"')
        instr = 0;
    } else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
      out[o++] = c;
      if (c == '"') instr = 1;
    }
  }
  return o;
}

#endif
