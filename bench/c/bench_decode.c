/* bench_decode.c — the C side of the JSON boundary, against yajl and jsmn.
 *
 * Input: N watch events {"type":"MODIFIED","object":<Pod>}\n built from
 * spec/fixtures/json/pod-2.4k.json (compact, 2371 bytes with managedFields)
 * with distinct names web-I, namespaces ns-(I mod 50), uids,
 * resourceVersions and status.hostIP, fed in 16 KiB pieces as libcurl
 * delivers them. Best of R runs for each figure:
 *   scan   kl_json_stream + kl_obj_event_parse (validation, framing, metadata,
 *          compaction without managedFields into a kl_obj_t) + unref
 *   frame  kl_json_stream alone (full validation and framing)
 *   yajl   yajl_parse with empty callbacks (parse only), same pieces
 *   jsmn   jsmn_parse per event, tokens only (given the line boundaries,
 *          which jsmn cannot find by itself)
 *   zstd   scan, then each object compressed as an informer caches it
 *          (objz.h, a fresh codec per run), on these events and on
 *          "varied" ones that also differ, like the Pods of one Deployment
 *          do, in nodeName, podIP, startTime, containerID and startedAt
 *          (random values); both report the cached bytes per object
 * Prints one JSON line. yajl is loaded with dlopen (libyajl.so.2) and jsmn
 * included if <jsmn.h> exists (Debian libyajl2, libjsmn-dev), so the build
 * does not depend on them; a missing one is reported as null.
 * Usage: bench_decode [pod.json] [events] [runs] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "json.h"
#include "object.h"
#include "objz.h"

#if defined(__has_include)
#if __has_include(<yajl/yajl_parse.h>)
#include <yajl/yajl_parse.h>
#define HAVE_YAJL 1
#endif
#if __has_include(<jsmn.h>)
#define JSMN_STATIC
#include <jsmn.h>
#define HAVE_JSMN 1
#endif
#endif

#define CHUNK 16384

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)sz + 1);
  *n = fread(b, 1, (size_t)sz, f);
  b[*n] = '\0';
  fclose(f);
  return b;
}

/* Drops whitespace outside strings. */
static size_t compact(const char *in, size_t n, char *out) {
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
  out[o] = '\0';
  return o;
}

/* Replaces the first needle in s (with room) by rep. */
static void replace1(char *s, const char *needle, const char *rep) {
  char *p = strstr(s, needle);
  if (!p) {
    fprintf(stderr, "bench_decode: pod has no %s\n", needle);
    exit(1);
  }
  size_t nl = strlen(needle), rl = strlen(rep);
  memmove(p + rl, p + nl, strlen(p + nl) + 1);
  memcpy(p, rep, rl);
}

/* A small deterministic generator (xorshift64). */
static uint64_t rnd(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* The event stream (varied: see the top); *pod_len gets the compact Pod's
 * size. */
static char *make_stream(const char *path, int n, int varied, size_t *len,
                         size_t *pod_len) {
  size_t fl;
  char *raw = slurp(path, &fl);
  if (!raw) {
    fprintf(stderr, "bench_decode: cannot read %s\n", path);
    exit(1);
  }
  char *pod = malloc(fl + 1);
  *pod_len = compact(raw, fl, pod);
  if (strchr(pod, '%')) {
    fprintf(stderr, "bench_decode: '%%' in the pod\n");
    exit(1);
  }
  char *fmt = malloc(*pod_len + 256);
  snprintf(fmt, *pod_len + 256, "{\"type\":\"MODIFIED\",\"object\":%s}\n", pod);
  replace1(fmt, "\"name\":\"web-7\"", "\"name\":\"web-%d\"");
  replace1(fmt, "\"namespace\":\"ns-7\"", "\"namespace\":\"ns-%d\"");
  replace1(fmt, "\"uid\":\"00000007-", "\"uid\":\"%08d-");
  replace1(fmt, "\"resourceVersion\":\"1234\"", "\"resourceVersion\":\"%d\"");
  replace1(fmt, "\"hostIP\":\"10.0.0.7\"", "\"hostIP\":\"10.0.%d.%d\"");
  if (varied) {
    replace1(fmt, "\"nodeName\":\"node-7\"", "\"nodeName\":\"node-%d\"");
    replace1(fmt, "\"podIP\":\"10.244.7.7\"", "\"podIP\":\"10.244.%d.%d\"");
    replace1(fmt, "\"startTime\":\"2026-11-29T10:00:00Z\"",
             "\"startTime\":\"2026-11-29T%02d:%02d:00Z\"");
    replace1(fmt, "containerd://0123456789abcdef",
             "containerd://%016llx%016llx");
    replace1(fmt, "\"startedAt\":\"2026-11-29T10:00:03Z\"",
             "\"startedAt\":\"2026-11-29T%02d:%02d:%02dZ\"");
  }
  uint64_t x = 88172645463325252ull;
  size_t cap = (size_t)n * (*pod_len + 160), o = 0;
  char *out = malloc(cap);
  /* fmt is the Pod with the five conversions put in above. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  for (int i = 0; i < n; i++) {
    if (!varied) {
      o += (size_t)snprintf(out + o, cap - o, fmt, i, i % 50, i, 1000 + i,
                            (i / 250) % 250, i % 250);
      continue;
    }
    int node = (int)(rnd(&x) % 500), h = (int)(rnd(&x) % 24),
        m = (int)(rnd(&x) % 60);
    unsigned long long c1 = rnd(&x), c2 = rnd(&x);
    o += (size_t)snprintf(out + o, cap - o, fmt, i, i % 50, i, 1000 + i, node,
                          (i / 250) % 250, i % 250, (int)(rnd(&x) % 256),
                          (int)(rnd(&x) % 256), h, m, c1, c2, h, m,
                          (int)(rnd(&x) % 60));
  }
#pragma GCC diagnostic pop
  free(raw);
  free(pod);
  free(fmt);
  *len = o;
  return out;
}

static volatile size_t sink;

/* full: 0 frames only, 1 builds objects, 2 also compresses them. */
static double run_scan(const char *buf, size_t len, int full, size_t *events,
                       size_t *obj_bytes) {
  double t0 = now();
  kl_json_stream_t *s = kl_json_stream_new(NULL);
  kl_objz_t *z = full == 2 ? kl_objz_new(NULL) : NULL;
  kl_json_value_t v;
  char err[256];
  size_t n = 0, bytes = 0;
  for (size_t off = 0; off < len; off += CHUNK) {
    size_t k = len - off < CHUNK ? len - off : CHUNK;
    int rc;
    kl_json_stream_feed(s, buf + off, k);
    while ((rc = kl_json_stream_next(s, &v)) == KL_OK) {
      n++;
      if (!full) {
        bytes += v.json.n;
        continue;
      }
      kl_obj_event_t ev;
      if (kl_obj_event_parse(&v, NULL, &ev, err, sizeof err) != KL_OK) {
        fprintf(stderr, "bench_decode: %s\n", err);
        exit(1);
      }
      if (z) {
        kl_obj_t *c = kl_objz_compress(z, ev.obj);
        bytes += kl_obj_size(c);
        kl_obj_unref(c);
      } else {
        bytes += kl_obj_size(ev.obj);
      }
      kl_obj_event_clear(&ev);
    }
    if (rc != KL_EAGAIN) {
      fprintf(stderr, "bench_decode: %s\n", kl_json_stream_error(s));
      exit(1);
    }
  }
  if (kl_json_stream_end(s) != KL_OK) exit(1);
  kl_json_stream_free(s);
  kl_objz_unref(z);
  double t = now() - t0;
  *events = n;
  *obj_bytes = bytes;
  sink += bytes;
  return t;
}

#ifdef HAVE_YAJL
typedef yajl_handle (*yajl_alloc_fn)(const yajl_callbacks *, yajl_alloc_funcs *,
                                     void *);
typedef int (*yajl_config_fn)(yajl_handle, yajl_option, ...);
typedef yajl_status (*yajl_parse_fn)(yajl_handle, const unsigned char *,
                                     size_t);
typedef yajl_status (*yajl_complete_fn)(yajl_handle);
typedef void (*yajl_free_fn)(yajl_handle);

static int y_null(void *c) { return c == NULL; }
static int y_bool(void *c, int b) { return c == NULL && b >= 0; }
static int y_num(void *c, const char *s, size_t l) { return s && l + 1 && !c; }
static int y_str(void *c, const unsigned char *s, size_t l) {
  return s && l + 1 && !c;
}
static int y_start(void *c) { return c == NULL; }
static const yajl_callbacks ycb = {y_null,  y_bool,  NULL,    NULL,
                                   y_num,   y_str,   y_start, y_str,
                                   y_start, y_start, y_start};

static double run_yajl(void *lib, const char *buf, size_t len) {
  yajl_alloc_fn alloc;
  yajl_config_fn config;
  yajl_parse_fn parse;
  yajl_complete_fn complete;
  yajl_free_fn yfree;
  *(void **)&alloc = dlsym(lib, "yajl_alloc");
  *(void **)&config = dlsym(lib, "yajl_config");
  *(void **)&parse = dlsym(lib, "yajl_parse");
  *(void **)&complete = dlsym(lib, "yajl_complete_parse");
  *(void **)&yfree = dlsym(lib, "yajl_free");
  if (!alloc || !config || !parse || !complete || !yfree) return -1;
  double t0 = now();
  yajl_handle h = alloc(&ycb, NULL, NULL);
  config(h, yajl_allow_multiple_values, 1);
  for (size_t off = 0; off < len; off += CHUNK) {
    size_t k = len - off < CHUNK ? len - off : CHUNK;
    if (parse(h, (const unsigned char *)buf + off, k) != yajl_status_ok)
      return -1;
  }
  if (complete(h) != yajl_status_ok) return -1;
  yfree(h);
  return now() - t0;
}
#endif

#ifdef HAVE_JSMN
static double run_jsmn(const char *buf, size_t len) {
  static jsmntok_t toks[2048];
  double t0 = now();
  const char *p = buf, *end = buf + len;
  size_t ntok = 0;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    jsmn_parser jp;
    jsmn_init(&jp);
    int r = jsmn_parse(&jp, p, (size_t)(nl - p), toks, 2048);
    if (r < 0) return -1;
    ntok += (size_t)r;
    p = nl + 1;
  }
  sink += ntok;
  return now() - t0;
}
#endif

static void print_rate(const char *name, double best, size_t len) {
  if (best <= 0)
    printf(",\"%s\":null", name);
  else
    printf(",\"%s\":%.0f", name, (double)len / best / 1e6);
}

int main(int argc, char **argv) {
  char def[1024];
  const char *f = __FILE__, *slash = strrchr(f, '/');
  snprintf(def, sizeof def, "%.*s/../../spec/fixtures/json/pod-2.4k.json",
           slash ? (int)(slash - f) : 1, slash ? f : ".");
  const char *path = argc > 1 ? argv[1] : def;
  int n = argc > 2 ? atoi(argv[2]) : 20000;
  int runs = argc > 3 ? atoi(argv[3]) : 5;
  size_t len, pod_len, events = 0, obj_bytes = 0, frame_bytes = 0;
  size_t vlen, vpod_len, z_bytes = 0, vz_bytes = 0;
  char *buf = make_stream(path, n, 0, &len, &pod_len);
  char *vbuf = make_stream(path, n, 1, &vlen, &vpod_len);
  double scan = 1e9, frame = 1e9, yajl = -1, jsmn = -1, zscan = 1e9,
         vzscan = 1e9;
  void *lib = dlopen("libyajl.so.2", RTLD_NOW);
  for (int r = 0; r < runs; r++) {
    double t = run_scan(buf, len, 1, &events, &obj_bytes);
    if (t < scan) scan = t;
    t = run_scan(buf, len, 0, &events, &frame_bytes);
    if (t < frame) frame = t;
    t = run_scan(buf, len, 2, &events, &z_bytes);
    if (t < zscan) zscan = t;
    t = run_scan(vbuf, vlen, 2, &events, &vz_bytes);
    if (t < vzscan) vzscan = t;
#ifdef HAVE_YAJL
    if (lib) {
      t = run_yajl(lib, buf, len);
      if (t > 0 && (yajl < 0 || t < yajl)) yajl = t;
    }
#endif
#ifdef HAVE_JSMN
    t = run_jsmn(buf, len);
    if (t > 0 && (jsmn < 0 || t < jsmn)) jsmn = t;
#endif
  }
  if (lib) dlclose(lib);
  printf("{\"bench\":\"decode_c\"");
  print_rate("scan_mb_per_s", scan, len);
  print_rate("frame_mb_per_s", frame, len);
  print_rate("yajl_mb_per_s", yajl, len);
  print_rate("jsmn_mb_per_s", jsmn, len);
  print_rate("scan_zstd_mb_per_s", zscan, len);
  print_rate("scan_zstd_varied_mb_per_s", vzscan, vlen);
  printf(",\"scan_events_per_s\":%.0f,\"events\":%zu,\"stream_bytes\":%zu,"
         "\"json_bytes_per_object\":%zu,\"obj_bytes_per_object\":%zu,"
         "\"zstd_obj_bytes_per_object\":%zu,"
         "\"zstd_varied_obj_bytes_per_object\":%zu,\"chunk\":%d,\"runs\":%d}\n",
         (double)events / scan, events, len, pod_len,
         events ? obj_bytes / events : 0, events ? z_bytes / events : 0,
         events ? vz_bytes / events : 0, CHUNK, runs);
  free(buf);
  free(vbuf);
  return 0;
}
