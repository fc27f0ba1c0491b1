/* fuzz_json.c — the JSON boundary. For any input:
 *   - kubelua.json decodes exactly what the C validator accepts, except
 *     numbers it refuses to round (integers beyond 2^53, overflowing
 *     floats);
 *   - a decoded value encodes, decodes and encodes again to the same text,
 *     and equals what lua-cjson decodes (arrays stay arrays, strings are
 *     byte-exact, numbers equal) — spec/fuzz/fuzz_json.lua;
 *   - kl_json_check_whole accepts exactly the texts that are one object to
 *     the stream, and gives the same value and container index;
 *     kl_json_check_meta gives the same answer and finds metadata's
 *     namespace, name and resourceVersion where kl_json_members_in does;
 *     each instruction set the processor has gives both the same answers
 *     as the portable checker;
 *   - an object the stream would yield parses as a kl_obj_t whose compact
 *     JSON decodes to the same value, whose fields read without fault and
 *     equal what Lua sees (name, namespace, uid, resourceVersion, kind,
 *     apiVersion, generation, labels).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fuzz_lua.h"
#include "json.h"
#include "lua_json.h"
#include "object.h"

static void set_span(lua_State *L, const char *name, kl_json_span_t v) {
  lua_pushlstring(L, v.p, v.n);
  lua_setfield(L, -2, name);
}

/* Pushes what C extracted from o: {name=, namespace=, uid=,
 * resource_version=, kind=, api_version=, generation=, labels={…}}. */
static void push_fields(lua_State *L, const kl_obj_t *o) {
  lua_newtable(L);
  set_span(L, "name", kl_obj_name(o));
  set_span(L, "namespace", kl_obj_namespace(o));
  set_span(L, "uid", kl_obj_uid(o));
  set_span(L, "resource_version", kl_obj_resource_version(o));
  set_span(L, "kind", kl_obj_kind(o));
  set_span(L, "api_version", kl_obj_api_version(o));
  lua_pushnumber(L, (lua_Number)kl_obj_generation(o));
  lua_setfield(L, -2, "generation");
  lua_newtable(L);
  for (size_t i = 0; i < kl_obj_label_count(o); i++) {
    kl_json_span_t k, v;
    kl_obj_label(o, i, &k, &v);
    lua_pushlstring(L, k.p, k.n);
    lua_pushlstring(L, v.p, v.n);
    lua_rawset(L, -3);
  }
  lua_setfield(L, -2, "labels");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The number of c ('[': arrays, ':': members) outside strings in valid
 * JSON text. */
static size_t count_outside(const char *p, size_t n, char c) {
  size_t k = 0;
  bool in_str = false;
  for (size_t i = 0; i < n; i++) {
    if (in_str) {
      if (p[i] == '\\')
        i++;
      else if (p[i] == '"')
        in_str = false;
    } else if (p[i] == '"') {
      in_str = true;
    } else if (p[i] == c) {
      k++;
    }
  }
  return k;
}

/* Reads every field of o, as the cache and the bindings do. */
static void touch(const kl_obj_t *o) {
  char key[64];
  kl_json_span_t k, v;
  kl_obj_owner_t own;
  kl_obj_status_t st;
  kl_obj_key(o, key, sizeof key);
  (void)kl_obj_generation(o);
  (void)kl_obj_deletion_timestamp(o, &v);
  for (size_t i = 0; i < kl_obj_label_count(o); i++) {
    kl_obj_label(o, i, &k, &v);
    if (!kl_obj_label_get(o, k.p, k.n, &v)) abort();
  }
  for (size_t i = 0; i < kl_obj_owner_count(o); i++)
    kl_obj_owner(o, i, &own);
  (void)kl_obj_controller(o, &own);
  kl_obj_status(o, &st);
  kl_obj_status_clear(&st);
}

/* kl_json_check_meta against kl_json_check_whole's answer (whole) and the
 * two lookups of kl_json_members_in it stands in for. */
static void check_meta_matches_members(const char *s, size_t size, bool whole) {
  static const char *const top[] = {"metadata"};
  static const char *const keys[] = {"namespace", "name", "resourceVersion"};
  kl_json_value_t v;
  kl_json_meta_t m;
  kl_json_span_t md, vals[3] = {{NULL, 0}, {NULL, 0}, {NULL, 0}};
  if (kl_json_check_meta(s, size, &v, &m) != whole) {
    fprintf(stderr, "fuzz_json: kl_json_check_meta and _whole differ\n");
    abort();
  }
  if (!whole || m.unsure) return;
  if (kl_json_members_in(&v, v.json, top, 1, &md) && md.p)
    kl_json_members_in(&v, md, keys, 3, vals);
  if (vals[0].p != m.ns || vals[1].p != m.name || vals[2].p != m.rv) {
    fprintf(stderr, "fuzz_json: kl_json_check_meta finds other members\n");
    abort();
  }
}

/* The checker with isa against the portable one: the same answer, value,
 * index and metadata members. */
static void check_isa_matches_portable(kl_json_isa_t isa, const char *s,
                                       size_t size) {
  kl_json_ctbuf_t ia = {NULL, 0}, ib = {NULL, 0};
  kl_json_value_t a, b;
  kl_json_meta_t ma, mb;
  bool ok =
      kl_json_check_whole_isa(KL_JSON_ISA_PORTABLE, s, size, &a, &ia, NULL);
  if (ok != kl_json_check_whole_isa(isa, s, size, &b, &ib, NULL) ||
      (ok &&
       (a.json.p != b.json.p || a.json.n != b.json.n ||
        a.compact != b.compact || a.ncontainers != b.ncontainers ||
        (a.ncontainers && memcmp(a.containers, b.containers,
                                 a.ncontainers * sizeof *a.containers))))) {
    fprintf(stderr, "fuzz_json: instruction set %d checks otherwise\n",
            (int)isa);
    abort();
  }
  ok = kl_json_check_whole_isa(KL_JSON_ISA_PORTABLE, s, size, &a, NULL, &ma);
  if (ok != kl_json_check_whole_isa(isa, s, size, &b, NULL, &mb) ||
      (ok && (ma.unsure != mb.unsure || ma.ns != mb.ns || ma.name != mb.name ||
              ma.rv != mb.rv))) {
    fprintf(stderr, "fuzz_json: instruction set %d finds other members\n",
            (int)isa);
    abort();
  }
  free(ia.ct);
  free(ib.ct);
}

/* kl_json_check_whole against the stream it stands in for. The stream
 * takes the text in two feeds cut after the object's first byte, so that
 * its state machine reads the object (the whole check is its fast path for
 * an object that lies whole in one feed). */
static void check_whole_matches_stream(const char *s, size_t size) {
  kl_json_ctbuf_t ix = {NULL, 0};
  kl_json_value_t a, b;
  bool whole = kl_json_check_whole(s, size, &a, &ix);
  kl_json_stream_t *st = kl_json_stream_new(NULL);
  size_t cut = (size_t)(kl_json_ws(s, s + size) - s);
  int rc = KL_EAGAIN;
  if (cut < size) cut++;
  kl_json_stream_feed(st, s, cut);
  if (kl_json_stream_next(st, &b) == KL_EAGAIN) {
    kl_json_stream_feed(st, s + cut, size - cut);
    rc = kl_json_stream_next(st, &b);
  }
  bool stream =
      rc == KL_OK && kl_json_ws(s + b.offset + b.json.n, s + size) == s + size;
  if (whole != stream) {
    fprintf(stderr, "fuzz_json: kl_json_check_whole says %s, the stream %s\n",
            whole ? "yes" : "no", stream ? "yes" : "no");
    abort();
  }
  if (whole &&
      (a.json.n != b.json.n || a.offset != b.offset ||
       memcmp(a.json.p, b.json.p, a.json.n) != 0 || a.compact != b.compact ||
       a.ncontainers != b.ncontainers ||
       (a.ncontainers && memcmp(a.containers, b.containers,
                                a.ncontainers * sizeof *a.containers)))) {
    fprintf(stderr,
            "fuzz_json: kl_json_check_whole's value or index differs\n");
    abort();
  }
  kl_json_stream_free(st);
  check_meta_matches_members(s, size, whole);
  free(ix.ct);
  for (kl_json_isa_t isa = KL_JSON_ISA_SSE2; isa <= KL_JSON_ISA_AVX2; isa++)
    if (kl_json_isa_has(isa)) check_isa_matches_portable(isa, s, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ref;
  lua_State *L = fuzz_lua("fuzz_json", &ref);
  const char *s = (const char *)data;
  char verr[256], lerr[256];
  int top = lua_gettop(L);

  check_whole_matches_stream(s, size);
  int vrc = kl_json_validate(s, size, 0, verr, sizeof verr);
  int lrc = kl_lua_json_decode(L, s, size, lerr, sizeof lerr);
  if (lrc == KL_OK && vrc != KL_OK) {
    fprintf(stderr, "fuzz_json: decode accepts what validate refuses: %s\n",
            verr);
    abort();
  }
  if (lrc != KL_OK && vrc == KL_OK &&
      !strstr(lerr, "cannot be represented exactly") &&
      !strstr(lerr, "cannot convert number")) {
    fprintf(stderr, "fuzz_json: decode refuses valid JSON: %s\n", lerr);
    abort();
  }

  kl_json_value_t jv;
  kl_obj_t *o = NULL, *lean = NULL;
  if (kl_json_check(s, size, &jv, NULL, 0) == KL_OK) {
    kl_obj_opts_t keep = {.keep_managed_fields = true};
    kl_obj_opts_t typed = {.api_version = "v1", .kind = "ConfigMap"};
    if (kl_obj_parse(&jv, &keep, &o, NULL, 0) != KL_OK) o = NULL;
    if (kl_obj_parse(&jv, &typed, &lean, NULL, 0) == KL_OK) {
      touch(lean);
      kl_json_span_t j = kl_obj_json(lean);
      if (kl_json_validate(j.p, j.n, 0, verr, sizeof verr) != KL_OK) {
        fprintf(stderr, "fuzz_json: object JSON is invalid: %s\n", verr);
        abort();
      }
      kl_obj_unref(lean);
    }
  }

  if (lrc == KL_OK) {
    lua_pushlstring(L, s, size);
    if (o) {
      kl_json_span_t j = kl_obj_json(o);
      lua_pushlstring(L, j.p, j.n);
      push_fields(L, o);
    } else {
      lua_pushnil(L);
      lua_pushnil(L);
    }
    lua_pushnumber(L, (lua_Number)count_outside(s, size, ':'));
    fuzz_lua_call(L, ref, 5, 2);
    size_t n;
    const char *e = lua_tolstring(L, -2, &n);
    /* Unless duplicate keys dropped members, arrays (empty ones too) stay
     * arrays and objects stay objects. */
    bool dups = (size_t)lua_tonumber(L, -1) != count_outside(s, size, ':');
    if (!e ||
        (!dups && count_outside(e, n, '[') != count_outside(s, size, '['))) {
      fprintf(stderr, "fuzz_json: arrays lost or made: %s\n", e);
      abort();
    }
  }
  kl_obj_unref(o);
  lua_settop(L, top);
  return 0;
}
