/* fuzz_stream.c — the incremental watch/list decoder (json.h) must not care
 * where the bytes are cut: the input decoded in one feed and cut into
 * pieces must give the same values (bytes, offsets, compact flags), the same
 * list envelope and the same final code and message.
 *
 * Input layout: byte 0 picks the mode (bit 0: list) and a small value cap
 * (bits 1-3, 0 = the default), byte 1 the number of cuts (0-15), then two
 * bytes per cut (a position, taken modulo the payload's length); the rest is
 * the payload. Each piece is fed from its own heap copy, freed once the
 * decoder has used it, so ASan catches a pointer kept across feeds. Each
 * value is also built as the reflector builds it (kl_obj_event_parse, or
 * kl_obj_parse for list items), from wherever the decoder left its bytes,
 * and built again without the decoder's container index: both builds must
 * give the same outcome. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"
#include "object.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct log {
  char *p;
  size_t len, cap;
} log_t;

static void log_add(log_t *b, const void *p, size_t n) {
  if (b->len + n + 1 > b->cap) {
    b->cap = (b->len + n + 1) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void log_printf(log_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_printf(log_t *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) abort();
  log_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void log_span(log_t *b, const char *name, kl_json_span_t s) {
  log_printf(b, "%s %zu:", name, s.n);
  log_add(b, s.p, s.n);
  log_add(b, "\n", 1);
}

/* Builds what the reflector builds from a value (a watch event, or a list
 * item as an object) and logs its key and resourceVersion, or the error. */
static void build_one(kl_json_mode_t mode, const kl_json_value_t *v,
                      log_t *out) {
  static const kl_obj_opts_t item = {.api_version = "v1", .kind = "Pod"};
  char err[256], key[320];
  kl_obj_event_t ev = {0};
  kl_obj_t *o = NULL;
  int rc = mode == KL_JSON_LIST
               ? kl_obj_parse(v, &item, &o, err, sizeof err)
               : kl_obj_event_parse(v, NULL, &ev, err, sizeof err);
  if (rc != KL_OK) {
    log_printf(out, "build %d: %s\n", rc, err);
    return;
  }
  if (!o) o = ev.obj;
  kl_obj_key(o, key, sizeof key);
  log_printf(out, "built %s %s ", kl_obj_event_type_name(ev.type), key);
  log_span(out, "rv", kl_obj_resource_version(o));
  if (mode == KL_JSON_LIST)
    kl_obj_unref(o);
  else
    kl_obj_event_clear(&ev);
}

/* build_one with the container index, and without: the index may only make
 * skipping faster. */
static void build(kl_json_mode_t mode, const kl_json_value_t *v, log_t *out) {
  log_t with = {0}, without = {0};
  kl_json_value_t plain = *v;
  plain.containers = NULL;
  plain.ncontainers = 0;
  build_one(mode, v, &with);
  build_one(mode, &plain, &without);
  if (strcmp(with.p, without.p) != 0) abort();
  log_add(out, with.p, with.len);
  free(with.p);
  free(without.p);
}

/* Decodes payload[0, n) cut at the sorted positions cuts[0, ncuts) and logs
 * everything the decoder says. */
static void run(const kl_json_opts_t *opts, const uint8_t *payload, size_t n,
                const size_t *cuts, size_t ncuts, log_t *out) {
  kl_json_stream_t *s = kl_json_stream_new(opts);
  kl_json_value_t v;
  int rc = KL_OK;
  size_t from = 0;
  for (size_t i = 0; i <= ncuts && rc == KL_OK; i++) {
    size_t to = i < ncuts ? cuts[i] : n;
    char *chunk = malloc(to - from + 1);
    if (!chunk) abort();
    memcpy(chunk, payload + from, to - from);
    if (kl_json_stream_feed(s, chunk, to - from) != KL_OK) abort();
    while ((rc = kl_json_stream_next(s, &v)) == KL_OK) {
      log_printf(out, "value @%llu compact=%d ", (unsigned long long)v.offset,
                 (int)v.compact);
      log_span(out, "json", v.json);
      build(opts->mode, &v, out);
    }
    free(chunk);
    if (rc == KL_EAGAIN) rc = KL_OK;
    from = to;
  }
  if (rc == KL_OK) rc = kl_json_stream_end(s);
  /* After a limit error the offset is where the decoder stopped looking,
   * which depends on the cuts; only the message is part of the contract. */
  log_printf(out, "end %d offset %llu: %s\n", rc,
             rc == KL_OK ? (unsigned long long)kl_json_stream_offset(s) : 0,
             kl_json_stream_error(s));
  const kl_json_list_t *l = kl_json_stream_list(s);
  if (l) {
    log_span(out, "kind", l->kind);
    log_span(out, "apiVersion", l->api_version);
    log_span(out, "resourceVersion", l->resource_version);
    log_span(out, "continue", l->continue_token);
    log_span(out, "envelope", l->envelope);
    log_printf(out, "remaining %lld items %zu\n",
               (long long)l->remaining_item_count, l->items);
  }
  kl_json_stream_free(s);
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const size_t caps[8] = {0, 1, 16, 64, 256, 1024, 4096, 65536};
  kl_json_opts_t opts = {(data[0] & 1) ? KL_JSON_LIST : KL_JSON_VALUES,
                         caps[(data[0] >> 1) & 7], (data[0] >> 4) & 7};
  size_t ncuts = data[1] & 15, head = 2 + 2 * ncuts;
  if (size < head) return 0;
  const uint8_t *payload = data + head;
  size_t n = size - head;
  size_t cuts[16];
  for (size_t i = 0; i < ncuts; i++) {
    size_t pos = (size_t)data[2 + 2 * i] | (size_t)data[3 + 2 * i] << 8;
    cuts[i] = n ? pos % (n + 1) : 0;
  }
  qsort(cuts, ncuts, sizeof cuts[0], cmp_size);

  log_t whole = {0}, cut = {0};
  run(&opts, payload, n, NULL, 0, &whole);
  run(&opts, payload, n, cuts, ncuts, &cut);
  if (whole.len != cut.len || memcmp(whole.p, cut.p, whole.len) != 0) {
    fprintf(stderr,
            "fuzz_stream: cut input decodes differently\n"
            "--- whole:\n%s\n--- cut:\n%s\n",
            whole.p, cut.p);
    abort();
  }
  free(whole.p);
  free(cut.p);
  return 0;
}
