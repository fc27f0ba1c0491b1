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

#endif
