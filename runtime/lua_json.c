/* lua_json.c — the kubelua.json module: exact JSON <-> Lua values.
 *
 *   json.decode(s)    -> value | nil, "json: byte N: reason" (s: a string
 *                        or bytes, as httpd.join makes; so for meta)
 *   json.check(s)     -> true  | nil, "json: byte N: reason" (no building)
 *   json.meta(s)      -> namespace, name, resourceVersion ("" when absent)
 *                        | nil, "json: …" (checks s, builds nothing)
 *   json.omit(s, k…)  -> bytes: the object s without its top-level members
 *                        k…, the rest byte for byte | nil, "json: …"
 *   json.encode(v)    -> compact JSON; raises "json: <reason> at <path>"
 *   json.array([t])   -> t (default {}) marked as an array
 *   json.is_array(v)  -> boolean
 *   json.null         -> the null sentinel (light userdata NULL)
 * C code decodes and encodes with kl_lua_json_decode/_encode (lua_json.h).
 *
 * decode(s) builds the value in one checking pass: the grammar, escapes,
 * UTF-8, numbers and the nesting limit (128) are checked as it goes. A
 * container holds its members on the Lua stack until it closes, and its
 * table is then created at its exact size, so tables never rehash while
 * filling; a later duplicate key wins (see dec_pairs_to_table). Only
 * when the members held by all open containers would pass HOLD_MAX stack
 * slots (LuaJIT allows a C function 8000) does the container being read
 * become a table at once, which then grows as it fills. Strings without
 * escapes are pushed straight from the input. When
 * the input is malformed the builder stops and the stream decoder's scanner
 * (kl_json_validate) words the error, so messages and byte offsets are the
 * same everywhere (a spec checks that both accept exactly the same inputs).
 *
 * encode(v) writes compact JSON into a growable buffer owned by a userdata
 * with __gc (so a Lua error raised half-way leaks nothing): the state's
 * shared one, kept in the registry with up to SHARED_MAX bytes between
 * encodes, unless an encode holds it (a finalizer's encode during another,
 * or after a Lua error raised inside one), then one of its own. Object keys are
 * sorted by bytes, which makes the output deterministic; the order of the
 * JSON that was decoded is not kept (Lua tables have none to keep). Tables
 * are read with raw access: metamethods are neither called nor encoded.
 *
 * Exactness rules (DESIGN.md section 3): arrays carry the "kubelua.array"
 * metatable, also when empty; a plain table is an array when its keys are
 * exactly 1..n (n >= 1), an object when they are all strings, {} when it is
 * empty; JSON null is the light userdata NULL (so it equals cjson.null) and
 * nil encodes as null too; integers are numbers up to 2^53 (larger ones in
 * the input are an error naming them) and are written without exponent or
 * decimal point; other numbers are written with the fewest significant
 * digits (at most 17) that read back to the same double, integral ones
 * beyond 2^53 with an exponent so that they read back as floats. Anything
 * else is an error, never a silent change. Number conversion copes with a
 * decimal comma set by os.setlocale. */
#include <lauxlib.h>
#include <lua.h>
#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"
#include "json_swar.h"
#include "lua_json.h"
#include "lua_kube.h"
#include "mem.h"

#define ARRAY_MT "kubelua.array"
#define NULL_KEY "kubelua.null"
#define BUF_MT "kubelua.json.buffer"
#define SHARED_KEY "kubelua.json.shared" /* the state's shared ebuf */
#define DOC_MT "kubelua.json.doc"        /* a view's document */
#define VIEW_FNS "kubelua.json.view"     /* a view's metamethods, iterators */
#define SHARED_MAX 65536 /* memory the shared ebuf keeps between encodes */
#define MAX_DEPTH 128
/* Stack slots for members held by open containers, and the slots kept
 * free above them: each level that is not holding needs at most a table
 * and a key, and closing a container a few more. */
#define HOLD_MAX 4096
#define HOLD_STEP 64 /* small: a stack grows only about as far as needed */
#define RESERVE (2 * MAX_DEPTH + 16)
#define EXACT 9007199254740992.0 /* 2^53 */

static inline bool is_digit(char c) { return kl_json_is_digit((uint8_t)c); }

static inline bool is_ws(char c) { return kl_json_is_ws((uint8_t)c); }

/* Reads the number token [s, s + n) with strtod; tries the locale's decimal
 * point when it is not '.'. Returns false if the token does not parse or
 * overflows a double (strtod's infinity could not be encoded back). */
static bool parse_double(const char *s, size_t n, double *out) {
  char small[64], *tmp = n < sizeof small ? small : malloc(n + 1);
  char *end;
  bool ok;
  if (!tmp) return false;
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  *out = strtod(tmp, &end);
  ok = end == tmp + n;
  if (!ok) {
    char *dot = strchr(tmp, '.');
    const char *dp = localeconv()->decimal_point;
    if (dot && dp && dp[0] && dp[0] != '.' && !dp[1]) {
      *dot = dp[0];
      *out = strtod(tmp, &end);
      ok = end == tmp + n;
    }
  }
  if (tmp != small) free(tmp);
  return ok && isfinite(*out);
}

/* --- decode ------------------------------------------------------------- */

typedef struct dec {
  lua_State *L;
  const char *p, *start, *end;
  int mt;    /* stack index of the array metatable */
  int room;  /* containers may hold members up to this stack index */
  int limit; /* and grow room up to this one */
  bool esc;  /* the last string read had escapes */
  char *err;
  size_t errlen;
  bool own; /* err holds the builder's own message */
} dec_t;

static int dec_value(dec_t *d, unsigned depth);

static inline void dec_ws(dec_t *d) {
  while (d->p < d->end && is_ws(*d->p))
    d->p++;
}

/* Pushes the string that starts at s (after its opening quote, at d->p),
 * checking it from q on: the bytes before q are plain. */
static int dec_string_rest(dec_t *d, const char *s, const char *q) {
  bool esc = false;
  q = kl_json_str_rest(q, d->end, &esc);
  if (!q) return -1;
  size_t n = (size_t)(q - s);
  d->p = q + 1;
  d->esc = esc;
  if (!esc) {
    lua_pushlstring(d->L, s, n);
    return 0;
  }
  char small[512];
  if (n <= sizeof small) {
    lua_pushlstring(d->L, small, kl_json_unescape(s, n, small));
  } else {
    char *tmp = lua_newuserdata(d->L, n);
    lua_pushlstring(d->L, tmp, kl_json_unescape(s, n, tmp));
    lua_remove(d->L, -2);
  }
  return 0;
}

/* Pushes the string whose opening quote is at d->p, checking it. Inline
 * for the common case: nothing but plain bytes up to the closing quote. */
static inline int dec_string(dec_t *d) {
  const char *s = d->p + 1, *q = kl_scan_special(s, d->end);
  if (q < d->end && *q == '"') {
    d->p = q + 1;
    d->esc = false;
    lua_pushlstring(d->L, s, (size_t)(q - s));
    return 0;
  }
  return dec_string_rest(d, s, q);
}

static int dec_number(dec_t *d) {
  const char *s = d->p, *p = s, *end = d->end, *digits;
  bool neg = false, integer = true;
  if (*p == '-') {
    neg = true;
    p++;
  }
  if (p >= end || !is_digit(*p)) return -1;
  digits = p;
  if (*p == '0') {
    p++;
    if (p < end && is_digit(*p)) return -1;
  } else {
    while (p < end && is_digit(*p))
      p++;
  }
  size_t nd = (size_t)(p - digits);
  if (p < end && *p == '.') {
    integer = false;
    p++;
    if (p >= end || !is_digit(*p)) return -1;
    while (p < end && is_digit(*p))
      p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    integer = false;
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || !is_digit(*p)) return -1;
    while (p < end && is_digit(*p))
      p++;
  }
  if (integer) {
    uint64_t v = 0;
    for (size_t i = 0; i < nd && i < 17; i++)
      v = v * 10 + (uint64_t)(digits[i] - '0');
    if (nd > 16 || v > (1ull << 53)) {
      snprintf(d->err, d->errlen,
               "byte %zu: integer %.*s%s cannot be represented exactly "
               "(beyond 2^53)",
               (size_t)(s - d->start), (int)(p - s > 40 ? 40 : p - s), s,
               p - s > 40 ? "..." : "");
      d->own = true;
      return -1;
    }
    lua_pushnumber(d->L, neg ? -(double)v : (double)v);
  } else {
    double x;
    if (!parse_double(s, (size_t)(p - s), &x)) {
      snprintf(d->err, d->errlen, "byte %zu: cannot convert number %.*s",
               (size_t)(s - d->start), (int)(p - s > 40 ? 40 : p - s), s);
      d->own = true;
      return -1;
    }
    lua_pushnumber(d->L, x);
  }
  d->p = p;
  return 0;
}

/* Grows room so that it reaches want; false when that would pass the
 * limit or the stack cannot grow (the container then becomes a table). */
static bool dec_grow(dec_t *d, int want) {
  int room = d->room + HOLD_STEP;
  if (room < want) room = want;
  if (room > d->limit) room = d->limit;
  if (room < want) return false;
  if (!lua_checkstack(d->L, room + RESERVE - lua_gettop(d->L))) {
    d->limit = d->room; /* do not ask again */
    return false;
  }
  d->room = room;
  return true;
}

/* Whether a container may hold n more slots above top. */
static inline bool dec_hold(dec_t *d, int top, int n) {
  return top + n <= d->room || dec_grow(d, top + n);
}

/* A bit for the key whose raw bytes are [k, k + n), from its length and its
 * first and last bytes (quotes are around it, so n may be 0): keys that are
 * the same bytes get the same bit. */
static inline uint64_t key_bit(const char *k, size_t n) {
  uint32_t h = (uint32_t)(uint8_t)k[0] |
               (uint32_t)(uint8_t)k[(ptrdiff_t)n - 1] << 8 | (uint32_t)n << 16;
  return 1ull << (h * 0x9e3779b1u >> 26);
}

/* Replaces the n key-value pairs from stack index first with a table of
 * them. When no two keys can be equal (!dup) they are set from the last,
 * one lua_rawset each; else in document order, so that a later duplicate
 * key wins. */
static void dec_pairs_to_table(lua_State *L, int first, int n, bool dup) {
  lua_createtable(L, 0, n);
  if (!dup) {
    lua_insert(L, first);
    while (n-- > 0)
      lua_rawset(L, first);
    return;
  }
  for (int i = 0; i < n; i++) {
    lua_pushvalue(L, first + 2 * i);
    lua_pushvalue(L, first + 2 * i + 1);
    lua_rawset(L, -3);
  }
  lua_replace(L, first); /* dup comes from a key read: n > 0 */
  lua_settop(L, first);
}

/* Replaces the n values from stack index first with an array of them. */
static void dec_items_to_table(lua_State *L, int first, int n) {
  lua_createtable(L, n, 0);
  lua_insert(L, first);
  for (int i = n; i > 0; i--)
    lua_rawseti(L, first, i);
}

static int dec_object(dec_t *d, unsigned depth) {
  lua_State *L = d->L;
  int first = lua_gettop(L) + 1, n = 0; /* pairs held from first */
  uint64_t keys = 0;                    /* the key_bit of each key held */
  bool held = true, dup = false;        /* dup: two keys held may be equal */
  d->p++;
  dec_ws(d);
  if (d->p < d->end && *d->p == '}') {
    d->p++;
    lua_createtable(L, 0, 0);
    return 0;
  }
  for (;;) {
    if (held && !dec_hold(d, first + 2 * n - 1, 2)) {
      dec_pairs_to_table(L, first, n, dup);
      held = false;
    }
    if (d->p >= d->end || *d->p != '"') return -1;
    const char *k = d->p + 1;
    if (dec_string(d) != 0) return -1;
    if (held) {
      /* An escape can spell a key differently: it may equal any other. */
      uint64_t bit = key_bit(k, (size_t)(d->p - 1 - k));
      dup |= d->esc || (keys & bit);
      keys |= bit;
    }
    dec_ws(d);
    if (d->p >= d->end || *d->p != ':') return -1;
    d->p++;
    dec_ws(d);
    /* String values, the most common, skip dec_value's dispatch. */
    if (d->p < d->end && *d->p == '"' ? dec_string(d) != 0
                                      : dec_value(d, depth) != 0)
      return -1;
    if (held)
      n++;
    else
      lua_rawset(L, first);
    dec_ws(d);
    if (d->p >= d->end) return -1;
    if (*d->p == '}') {
      d->p++;
      if (held) dec_pairs_to_table(L, first, n, dup);
      return 0;
    }
    if (*d->p != ',') return -1;
    d->p++;
    dec_ws(d);
  }
}

static int dec_array(dec_t *d, unsigned depth) {
  lua_State *L = d->L;
  int first = lua_gettop(L) + 1, n = 0; /* items held from first */
  bool held = true;
  d->p++;
  dec_ws(d);
  if (d->p < d->end && *d->p == ']') {
    d->p++;
    lua_createtable(L, 0, 0);
  } else {
    for (;;) {
      if (held && !dec_hold(d, first + n - 1, 1)) {
        dec_items_to_table(L, first, n);
        held = false;
      }
      if (dec_value(d, depth) != 0) return -1;
      if (held)
        n++;
      else
        lua_rawseti(L, first, ++n);
      dec_ws(d);
      if (d->p >= d->end) return -1;
      if (*d->p == ']') {
        d->p++;
        break;
      }
      if (*d->p != ',') return -1;
      d->p++;
      dec_ws(d);
    }
    if (held) dec_items_to_table(L, first, n);
  }
  lua_pushvalue(L, d->mt);
  lua_setmetatable(L, -2);
  return 0;
}

static int dec_value(dec_t *d, unsigned depth) {
  if (d->p >= d->end) return -1;
  switch (*d->p) {
  case '{': return depth < MAX_DEPTH ? dec_object(d, depth + 1) : -1;
  case '[': return depth < MAX_DEPTH ? dec_array(d, depth + 1) : -1;
  case '"': return dec_string(d);
  case 't':
    if (d->end - d->p < 4 || memcmp(d->p, "true", 4) != 0) return -1;
    lua_pushboolean(d->L, 1);
    d->p += 4;
    return 0;
  case 'f':
    if (d->end - d->p < 5 || memcmp(d->p, "false", 5) != 0) return -1;
    lua_pushboolean(d->L, 0);
    d->p += 5;
    return 0;
  case 'n':
    if (d->end - d->p < 4 || memcmp(d->p, "null", 4) != 0) return -1;
    lua_pushlightuserdata(d->L, NULL);
    d->p += 4;
    return 0;
  default: return dec_number(d);
  }
}

static void push_array_mt(lua_State *L) {
  luaL_getmetatable(L, ARRAY_MT);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    luaL_newmetatable(L, ARRAY_MT);
  }
}

int kl_lua_json_decode(lua_State *L, const char *s, size_t n, char *err,
                       size_t errlen) {
  /* Room for the deepest value; members held by containers get more. */
  luaL_checkstack(L, RESERVE, "json: stack overflow");
  push_array_mt(L);
  int base = lua_gettop(L), rc;
  dec_t d = {.L = L,
             .p = s,
             .start = s,
             .end = s + n,
             .mt = base,
             .room = base,
             .limit = base + HOLD_MAX,
             .err = err,
             .errlen = errlen};
  dec_ws(&d);
  rc = dec_value(&d, 0);
  if (rc == 0) {
    dec_ws(&d);
    if (d.p != d.end) rc = -1;
  }
  /* Stack: metatable (base), value: keep only the value. */
  if (rc == 0) {
    lua_replace(L, base);
    return KL_OK;
  }
  lua_settop(L, base - 1);
  /* The scanner of the stream decoder words every syntax error. */
  if (!d.own && kl_json_validate(s, n, MAX_DEPTH, err, errlen) == KL_OK)
    snprintf(err, errlen, "byte %zu: invalid JSON", (size_t)(d.p - s));
  return KL_EPARSE;
}

/* --- views -------------------------------------------------------------- */

/* A view is an empty table whose metatable M describes a container of a
 * checked document: M[1] the document (a userdata: the check's container
 * index, freed with it), M[2] the container's offset in the text, M[3] the
 * text (a string, kept alive by every view of it; LuaJIT does not move
 * strings). On the first index, view_index decodes the container's own
 * level into a table T (scalars as decode makes them) and makes T M's
 * __index, so later reads are plain table reads; T's containers become
 * views of their own when they are first read (view_lazy), so a read of
 * one field makes a table for each container on its way, not for every
 * container beside it. Writes raise. */
typedef struct doc {
  kl_json_value_t v;
  kl_json_ctbuf_t ix;
  const char *text; /* the text's first byte: offsets count from it */
} doc_t;

static int doc_gc(lua_State *L) {
  doc_t *d = lua_touserdata(L, 1); /* only ever its own userdata */
  free(d->ix.ct);
  d->ix.ct = NULL;
  return 0;
}

/* When the metatable at mt describes a view: its document and offset. */
static bool view_of(lua_State *L, int mt, doc_t **doc, size_t *off) {
  lua_rawgeti(L, mt, 1);
  *doc = luaL_testudata(L, -1, DOC_MT);
  lua_pop(L, 1);
  if (!*doc) return false;
  lua_rawgeti(L, mt, 2);
  *off = (size_t)lua_tonumber(L, -1);
  lua_pop(L, 1);
  return true;
}

/* The table at registry VIEW_FNS: what views' metatables hold, so that
 * making one neither pushes a C function nor interns a name. */
enum {
  VF_INDEX = 1, /* view_index */
  VF_NEWINDEX,  /* view_newindex */
  VF_NEXT,      /* iter_next */
  VF_INEXT,     /* iter_inext */
  VF_KINDEX,    /* "__index" */
  VF_KNEWINDEX, /* "__newindex" */
  VF_CHILD,     /* view_child */
  VF_N = VF_CHILD
};

/* Replaces the value on top with a new table {the document at di, that
 * value, the text at ti} with room for nrec metamethods. */
static void view_meta(lua_State *L, int di, int ti, int nrec) {
  lua_createtable(L, 3, nrec);
  lua_insert(L, -2);
  lua_rawseti(L, -2, 2);
  lua_pushvalue(L, di);
  lua_rawseti(L, -2, 1);
  lua_pushvalue(L, ti);
  lua_rawseti(L, -2, 3);
}

/* Pushes a view of the container at off of the document at di, whose text
 * is at ti; f is the VIEW_FNS table. */
static void view_push(lua_State *L, int di, int ti, int f, size_t off) {
  lua_createtable(L, 0, 0);
  lua_pushnumber(L, (double)off);
  view_meta(L, di, ti, 2);
  lua_rawgeti(L, f, VF_KINDEX);
  lua_rawgeti(L, f, VF_INDEX);
  lua_rawset(L, -3);
  lua_rawgeti(L, f, VF_KNEWINDEX);
  lua_rawgeti(L, f, VF_NEWINDEX);
  lua_rawset(L, -3);
  lua_setmetatable(L, -2);
}

/* Moves the n pairs (object) or items (array) held from first into a new
 * table T, and the containers among them, held as light userdata at their
 * first byte (nc of them, never NULL, so never JSON null), into O, member
 * -> offset: T's metatable {__index = view_child, doc, O, text} makes a
 * container a view when it is first read. dup: a member name may repeat;
 * the later one then takes the place of the earlier in T or O. */
static void view_lazy(lua_State *L, int first, int n, int nc, bool object,
                      bool dup, int di, int ti, int f, const char *text) {
  int t = lua_gettop(L) + 1, o = t + 1;
  if (object)
    lua_createtable(L, 0, n - nc);
  else
    lua_createtable(L, n, 0);
  lua_createtable(L, 0, nc);
  for (int i = 0; i < n; i++) {
    int k = object ? first + 2 * i : 0, v = object ? k + 1 : first + i;
    const char *c =
        lua_type(L, v) == LUA_TLIGHTUSERDATA ? lua_touserdata(L, v) : NULL;
    if (object)
      lua_pushvalue(L, k);
    else
      lua_pushinteger(L, i + 1);
    if (dup) { /* the earlier one, in the other table, goes */
      lua_pushvalue(L, -1);
      lua_rawget(L, c ? t : o);
      if (!lua_isnil(L, -1)) {
        lua_pushvalue(L, -2);
        lua_pushnil(L);
        lua_rawset(L, c ? t : o);
      }
      lua_pop(L, 1);
    }
    if (c)
      lua_pushnumber(L, (double)(c - text));
    else
      lua_pushvalue(L, v);
    lua_rawset(L, c ? o : t);
  }
  lua_pushvalue(L, o);
  view_meta(L, di, ti, 1);
  lua_rawgeti(L, f, VF_KINDEX);
  lua_rawgeti(L, f, VF_CHILD);
  lua_rawset(L, -3);
  lua_setmetatable(L, t);
  lua_pop(L, 1); /* O */
  lua_replace(L, first);
  lua_settop(L, first);
}

/* Pushes the table of the level of the container at off (a checked
 * document's, so only a number decode refuses can fail: raises then):
 * scalars as decode makes them; containers become views when first read
 * (see view_lazy); a later duplicate member wins, as in decode. */
static void view_level(lua_State *L, doc_t *doc, int di, int ti, int f,
                       size_t off) {
  char err[256] = "";
  dec_t d = {.L = L,
             .p = doc->text + off + 1,
             .start = doc->text,
             .end = doc->v.json.p + doc->v.json.n,
             .err = err,
             .errlen = sizeof err};
  bool object = doc->text[off] == '{';
  int first = lua_gettop(L) + 1, n = 0, nc = 0;
  bool dup = false;
  uint64_t keys = 0;
  dec_ws(&d);
  while (*d.p != '}' && *d.p != ']') { /* checked: a member, ',' or end */
    luaL_checkstack(L, 4, "json: stack overflow");
    if (object) {
      const char *k = d.p + 1;
      if (dec_string(&d) != 0) goto fail;
      uint64_t bit = key_bit(k, (size_t)(d.p - 1 - k));
      dup |= d.esc || (keys & bit);
      keys |= bit;
      dec_ws(&d);
      d.p++; /* ':' */
      dec_ws(&d);
    }
    if (*d.p == '{' || *d.p == '[') {
      lua_pushlightuserdata(L, (void *)d.p); /* see view_lazy */
      d.p = kl_json_skip_in(&doc->v, d.p, d.end);
      if (!d.p) goto fail;
      nc++;
    } else if (dec_value(&d, 0) != 0) {
      goto fail;
    }
    n++;
    dec_ws(&d);
    if (*d.p == ',') {
      d.p++;
      dec_ws(&d);
    }
  }
  if (nc) {
    view_lazy(L, first, n, nc, object, dup, di, ti, f, doc->text);
    return;
  }
  if (object)
    dec_pairs_to_table(L, first, n, dup);
  else
    dec_items_to_table(L, first, n);
  return;
fail:
  if (!err[0])
    snprintf(err, sizeof err, "byte %zu: invalid JSON",
             (size_t)(d.p - doc->text));
  luaL_error(L, "json: %s", err);
}

/* Makes every container of the level table at t that is not a view yet
 * one (json.pairs, ipairs and len read the table whole). */
static void view_complete(lua_State *L, int t, int f) {
  if (!lua_getmetatable(L, t)) return;
  int tm = lua_gettop(L);
  lua_rawgeti(L, tm, 1);
  lua_rawgeti(L, tm, 3);
  lua_rawgeti(L, tm, 2);
  int o = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, o)) {
    view_push(L, o - 2, o - 1, f, (size_t)lua_tonumber(L, -1));
    lua_replace(L, -2);
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, t);
  }
  lua_pushnil(L);
  lua_setmetatable(L, t);
  lua_settop(L, tm - 1);
}

/* Pushes the level table of the view whose metatable is at mt (made on
 * first use and kept as its __index); f is the VIEW_FNS table. */
static void view_table(lua_State *L, int mt, int f, doc_t *doc, size_t off) {
  luaL_checkstack(L, 8, "json: stack overflow");
  lua_rawgeti(L, f, VF_KINDEX);
  lua_rawget(L, mt);
  if (lua_istable(L, -1)) return;
  lua_pop(L, 1);
  lua_rawgeti(L, mt, 1);
  lua_rawgeti(L, mt, 3);
  int di = lua_gettop(L) - 1;
  view_level(L, doc, di, di + 1, f, off);
  lua_replace(L, di);
  lua_settop(L, di);
  lua_rawgeti(L, f, VF_KINDEX);
  lua_pushvalue(L, -2);
  lua_rawset(L, mt);
}

/* __index of a level table (upvalue: the VIEW_FNS table): the container
 * member k made a view, kept in the table from then on. */
static int view_child(lua_State *L) {
  lua_settop(L, 2);
  lua_getmetatable(L, 1);
  lua_rawgeti(L, 3, 2);
  lua_pushvalue(L, 2);
  lua_rawget(L, 4);
  if (lua_isnil(L, 5)) return 1;
  lua_rawgeti(L, 3, 1);
  lua_rawgeti(L, 3, 3);
  view_push(L, 6, 7, lua_upvalueindex(1), (size_t)lua_tonumber(L, 5));
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  lua_pushvalue(L, 2);
  lua_pushnil(L);
  lua_rawset(L, 4);
  return 1;
}

/* __index of a view not read yet (upvalue: the VIEW_FNS table): its
 * level, then the member. */
static int view_index(lua_State *L) {
  doc_t *doc;
  size_t off;
  lua_settop(L, 2);
  if (!lua_getmetatable(L, 1) || !view_of(L, 3, &doc, &off))
    return luaL_error(L, "json: not a view");
  view_table(L, 3, lua_upvalueindex(1), doc, off);
  lua_pushvalue(L, 2);
  lua_gettable(L, -2); /* a container member through view_child */
  return 1;
}

/* __newindex of a view: "json: cannot set K: a view is read-only" (K a
 * member name, or [i]). */
static int view_newindex(lua_State *L) {
  lua_settop(L, 2);
  if (lua_type(L, 2) == LUA_TNUMBER)
    lua_pushfstring(L, "[%d]", (int)lua_tointeger(L, 2));
  else
    lua_pushstring(L, luaL_typename(L, 2));
  return luaL_error(L, "json: cannot set %s: a view is read-only",
                    lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2)
                                                  : lua_tostring(L, 3));
}

/* Pushes the level table of v at idx when it is a view (true), else
 * nothing (false). */
static bool view_push_table(lua_State *L, int idx) {
  doc_t *doc;
  size_t off;
  if (!lua_getmetatable(L, idx)) return false;
  if (!view_of(L, lua_gettop(L), &doc, &off)) {
    lua_pop(L, 1);
    return false;
  }
  lua_getfield(L, LUA_REGISTRYINDEX, VIEW_FNS);
  int f = lua_gettop(L);
  view_table(L, f - 1, f, doc, off);
  view_complete(L, f + 1, f);
  lua_replace(L, f - 1);
  lua_pop(L, 1);
  return true;
}

/* Pushes the full decode of the view of the container at off, as
 * json.decode makes it; false (nothing pushed, err set) when decode
 * refuses a number in it. */
static bool view_decode(lua_State *L, doc_t *doc, size_t off, char *err,
                        size_t errlen) {
  const char *p = doc->text + off,
             *e = kl_json_skip_in(&doc->v, p, doc->v.json.p + doc->v.json.n);
  char sub[256];
  size_t at;
  int len = 0;
  if (e && kl_lua_json_decode(L, p, (size_t)(e - p), sub, sizeof sub) == KL_OK)
    return true;
  /* Its "byte N" counts from the container: made to count from the text. */
  if (sscanf(sub, "byte %zu: %n", &at, &len) == 1 && len > 0)
    snprintf(err, errlen, "byte %zu: %s", at + off, sub + len);
  else
    snprintf(err, errlen, "%s", e ? sub : "invalid JSON");
  return false;
}

/* --- encode ------------------------------------------------------------- */

typedef struct ekey {
  const char *s;
  size_t n;
  int v; /* the stack index of its value, 0 when it was not kept */
} ekey_t;

/* The userdata that owns the encoder's memory. */
typedef struct ebuf {
  char *p;
  size_t len, cap;
  ekey_t *keys;
  size_t nkeys, kcap;
  bool busy; /* an encode writes into it */
} ebuf_t;

typedef struct seg {
  const char *s; /* a key, or NULL for an array index */
  size_t n;
} seg_t;

typedef struct enc {
  lua_State *L;
  ebuf_t *b;
  int mt;
  int room;  /* tables may hold values up to this stack index */
  int limit; /* and grow room up to this one */
  int depth;
  const void *seen[MAX_DEPTH + 1];
  seg_t path[MAX_DEPTH + 1];
} enc_t;

static int ebuf_gc(lua_State *L) {
  ebuf_t *b = lua_touserdata(L, 1); /* only ever its own userdata */
  free(b->p);
  free(b->keys);
  b->p = NULL;
  b->keys = NULL;
  return 0;
}

static void reserve(enc_t *e, size_t n) {
  ebuf_t *b = e->b;
  if (b->len + n <= b->cap) return;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap < b->len + n)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->busy = false;
    luaL_error(e->L, "json: out of memory");
  }
  b->p = p;
  b->cap = cap;
}

static inline void put(enc_t *e, const char *s, size_t n) {
  reserve(e, n);
  memcpy(e->b->p + e->b->len, s, n);
  e->b->len += n;
}

/* Raises "json: <what> at <path>". */
static void enc_fail(enc_t *e, const char *what) {
  char path[1024];
  size_t k = 0;
  path[0] = '\0';
  for (int i = 0; i < e->depth && k < sizeof path - 1; i++) {
    const seg_t *s = &e->path[i];
    if (s->s)
      k += (size_t)snprintf(path + k, sizeof path - k, "%s%.*s", k ? "." : "",
                            (int)(s->n > 64 ? 64 : s->n), s->s);
    else
      k += (size_t)snprintf(path + k, sizeof path - k, "[%zu]", s->n);
    if (k >= sizeof path) k = sizeof path - 1; /* truncated */
  }
  e->b->busy = false;
  luaL_error(e->L, "json: %s at %s", what, k ? path : "(root)");
}

/* "1.000000000000000e+21" -> "1e+21": drops trailing zeros (and the dot)
 * of a %e mantissa. */
static size_t trim_mantissa(char *s, size_t n) {
  char *e = memchr(s, 'e', n), *m = e;
  if (!e || !memchr(s, '.', (size_t)(e - s))) return n;
  while (m[-1] == '0')
    m--;
  if (m[-1] == '.') m--;
  memmove(m, e, (size_t)(s + n - e));
  return n - (size_t)(e - m);
}

/* Writes x with prec significant digits (%e for integral values, so they
 * keep an exponent); returns whether that reads back as x. */
static bool number_text(double x, int prec, bool integral, char *tmp,
                        size_t cap, int *n) {
  double back;
  *n = integral ? snprintf(tmp, cap, "%.*e", prec - 1, x)
                : snprintf(tmp, cap, "%.*g", prec, x);
  for (int i = 0; i < *n; i++)
    if (tmp[i] == ',') tmp[i] = '.'; /* a locale's decimal point */
  return parse_double(tmp, (size_t)*n, &back) && back == x;
}

static void enc_number(enc_t *e, double x) {
  char tmp[40];
  int n;
  if (!isfinite(x)) {
    snprintf(tmp, sizeof tmp, "cannot encode %s",
             isnan(x) ? "NaN"
             : x > 0  ? "inf"
                      : "-inf");
    enc_fail(e, tmp);
  }
  if (x == floor(x) && fabs(x) <= EXACT) {
    if (x == 0) {
      put(e, signbit(x) ? "-0" : "0", signbit(x) ? 2 : 1);
      return;
    }
    uint64_t v = (uint64_t)fabs(x);
    char *p = tmp + sizeof tmp;
    do {
      *--p = (char)('0' + v % 10);
      v /= 10;
    } while (v);
    if (x < 0) *--p = '-';
    put(e, p, (size_t)(tmp + sizeof tmp - p));
    return;
  } else {
    /* The fewest digits that read back; an integral value beyond 2^53
     * gets an exponent, so that it reads back as a float, not as an
     * integer that decode would refuse. */
    bool integral = x == floor(x);
    int lo = 1, hi = 17; /* 17 digits always read back */
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (number_text(x, mid, integral, tmp, sizeof tmp, &n))
        hi = mid;
      else
        lo = mid + 1;
    }
    number_text(x, lo, integral, tmp, sizeof tmp, &n);
    if (integral) n = (int)trim_mantissa(tmp, (size_t)n);
  }
  put(e, tmp, (size_t)n);
}

static void enc_string(enc_t *e, const char *str, size_t n, bool key) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *s = (const unsigned char *)str, *end = s + n;
  reserve(e, n + 2);
  e->b->p[e->b->len++] = '"';
  while (s < end) {
    const unsigned char *run = s;
    s = (const unsigned char *)kl_scan_special((const char *)s,
                                               (const char *)end);
    put(e, (const char *)run, (size_t)(s - run));
    if (s == end) break;
    unsigned char c = *s;
    if (c >= 0x80) {
      size_t len = kl_utf8_len(s, (size_t)(end - s));
      if (!len)
        enc_fail(e,
                 key ? "invalid UTF-8 in a key" : "invalid UTF-8 in a string");
      put(e, (const char *)s, len);
      s += len;
      continue;
    }
    char esc[6] = {'\\', 0, 0, 0, 0, 0};
    size_t k = 2;
    switch (c) {
    case '"': esc[1] = '"'; break;
    case '\\': esc[1] = '\\'; break;
    case '\b': esc[1] = 'b'; break;
    case '\f': esc[1] = 'f'; break;
    case '\n': esc[1] = 'n'; break;
    case '\r': esc[1] = 'r'; break;
    case '\t': esc[1] = 't'; break;
    default:
      memcpy(esc + 1, "u00", 3);
      esc[4] = hex[c >> 4];
      esc[5] = hex[c & 15];
      k = 6;
    }
    put(e, esc, k);
    s++;
  }
  put(e, "\"", 1);
}

static int key_cmp(const void *a, const void *b) {
  const ekey_t *x = a, *y = b;
  int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
  return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* Sorts keys by bytes: by insertion when they are few, as most objects'. */
static void sort_keys(ekey_t *k, size_t n) {
  if (n > 16) {
    qsort(k, n, sizeof *k, key_cmp);
    return;
  }
  for (size_t i = 1; i < n; i++) {
    ekey_t x = k[i];
    size_t j = i;
    for (; j > 0 && key_cmp(&k[j - 1], &x) > 0; j--)
      k[j] = k[j - 1];
    k[j] = x;
  }
}

static void enc_value(enc_t *e, int idx);

/* Whether a table may keep values on the stack up to index want. room
 * grows by HOLD_STEP, with one lua_checkstack for the step; limit keeps
 * RESERVE slots of the C function's LUAI_MAXCSTACK for the deepest
 * nesting (each level checks its own few slots on entry). */
static inline bool enc_hold(enc_t *e, int want) {
  if (want <= e->room) return true;
  int room = e->room + HOLD_STEP;
  if (room < want) room = want;
  if (room > e->limit) room = e->limit;
  if (room < want) return false;
  if (!lua_checkstack(e->L, room - lua_gettop(e->L))) {
    e->limit = e->room; /* do not ask again */
    return false;
  }
  e->room = room;
  return true;
}

static void enc_table(enc_t *e, int idx) {
  lua_State *L = e->L;
  const void *self = lua_topointer(L, idx);
  bool array = false;
  size_t nint = 0, max = 0, nstr = 0, first = e->b->nkeys;
  char what[96];

  if (e->depth >= MAX_DEPTH) enc_fail(e, "nesting deeper than 128 levels");
  for (int i = 0; i < e->depth; i++)
    if (e->seen[i] == self) enc_fail(e, "cannot encode a reference cycle");
  luaL_checkstack(L, 6, "json: stack overflow");
  if (lua_getmetatable(L, idx)) {
    doc_t *doc;
    size_t off;
    array = lua_rawequal(L, -1, e->mt);
    if (!array && view_of(L, lua_gettop(L), &doc, &off)) {
      char err[256]; /* a view is written as its full decode */
      if (!view_decode(L, doc, off, err, sizeof err)) enc_fail(e, err);
      enc_value(e, lua_gettop(L));
      lua_pop(L, 2);
      return;
    }
    lua_pop(L, 1);
  }
  /* Classify the keys; keep the string ones for sorting, and their values
   * on the stack while it has room (else they are looked up again). */
  int top = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int t = lua_type(L, -2);
    if (t == LUA_TSTRING) {
      ebuf_t *b = e->b;
      if (b->nkeys == b->kcap) {
        size_t cap = b->kcap ? 2 * b->kcap : 64;
        ekey_t *k = realloc(b->keys, cap * sizeof *k);
        if (!k) {
          b->busy = false;
          luaL_error(L, "json: out of memory");
        }
        b->keys = k;
        b->kcap = cap;
      }
      b->keys[b->nkeys].s = lua_tolstring(L, -2, &b->keys[b->nkeys].n);
      b->keys[b->nkeys].v = 0;
      if (enc_hold(e, lua_gettop(L) + 1)) {
        lua_insert(L, -2); /* the value stays below the key */
        b->keys[b->nkeys].v = lua_gettop(L) - 1;
        lua_pushnil(L); /* popped below */
      }
      b->nkeys++;
      nstr++;
    } else if (t == LUA_TNUMBER) {
      double k = lua_tonumber(L, -2);
      if (k < 1 || k != floor(k) || k > EXACT) {
        snprintf(what, sizeof what, "cannot encode key %.17g", k);
        enc_fail(e, what);
      }
      nint++;
      if ((size_t)k > max) max = (size_t)k;
    } else {
      snprintf(what, sizeof what, "cannot encode key of type %s",
               lua_typename(L, t));
      enc_fail(e, what);
    }
    lua_pop(L, 1);
  }
  if (nstr && (nint || array))
    enc_fail(e, array ? "cannot encode an array with string keys"
                      : "cannot encode a table with mixed keys");
  if (nint != max) enc_fail(e, "cannot encode a sparse array");

  e->seen[e->depth] = self;
  if (array || nint) {
    put(e, "[", 1);
    for (size_t i = 1; i <= max; i++) {
      if (i > 1) put(e, ",", 1);
      e->path[e->depth].s = NULL;
      e->path[e->depth].n = i;
      e->depth++;
      lua_rawgeti(L, idx, (int)i);
      enc_value(e, lua_gettop(L));
      lua_pop(L, 1);
      e->depth--;
    }
    put(e, "]", 1);
    return;
  }
  sort_keys(e->b->keys + first, nstr);
  put(e, "{", 1);
  for (size_t i = 0; i < nstr; i++) {
    ekey_t k = e->b->keys[first + i];
    if (i) put(e, ",", 1);
    e->path[e->depth].s = k.s;
    e->path[e->depth].n = k.n;
    e->depth++;
    enc_string(e, k.s, k.n, true);
    put(e, ":", 1);
    if (k.v) {
      enc_value(e, k.v);
    } else {
      lua_pushlstring(L, k.s, k.n);
      lua_rawget(L, idx);
      enc_value(e, lua_gettop(L));
      lua_pop(L, 1);
    }
    e->depth--;
  }
  lua_settop(L, top);
  put(e, "}", 1);
  e->b->nkeys = first;
}

static void enc_value(enc_t *e, int idx) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
  case LUA_TNIL: put(e, "null", 4); return;
  case LUA_TBOOLEAN:
    if (lua_toboolean(L, idx))
      put(e, "true", 4);
    else
      put(e, "false", 5);
    return;
  case LUA_TNUMBER: enc_number(e, lua_tonumber(L, idx)); return;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    enc_string(e, s, n, false);
    return;
  }
  case LUA_TTABLE: enc_table(e, idx); return;
  case LUA_TLIGHTUSERDATA:
    if (lua_touserdata(L, idx) == NULL) {
      put(e, "null", 4);
      return;
    }
    break;
  default: break;
  }
  char what[64];
  snprintf(what, sizeof what, "cannot encode a value of type %s",
           luaL_typename(L, idx));
  enc_fail(e, what);
}

/* Pushes the userdata of the buffer an encode writes into, empty and busy:
 * the shared one (made on first use) when it is free, else a new one. */
static ebuf_t *ebuf_push(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, SHARED_KEY);
  ebuf_t *b = lua_touserdata(L, -1);
  bool shared = b == NULL;
  if (b && !b->busy) goto out;
  lua_pop(L, 1);
  b = lua_newuserdata(L, sizeof *b);
  memset(b, 0, sizeof *b);
  if (luaL_newmetatable(L, BUF_MT)) {
    lua_pushcfunction(L, ebuf_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  if (shared) {
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, SHARED_KEY);
  }
out:
  b->len = b->nkeys = 0;
  b->busy = true;
  return b;
}

void kl_lua_json_encode(lua_State *L, int idx) {
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  luaL_checkstack(L, 8, "json: stack overflow");
  ebuf_t *b = ebuf_push(L);
  int box = lua_gettop(L);
  push_array_mt(L);
  enc_t e;
  e.L = L;
  e.b = b;
  e.mt = box + 1;
  e.room = e.mt;
  e.limit = LUAI_MAXCSTACK - RESERVE;
  if (e.limit > e.room + HOLD_MAX) e.limit = e.room + HOLD_MAX;
  e.depth = 0;
  enc_value(&e, idx);
  lua_pushlstring(L, b->p ? b->p : "", b->len);
  lua_replace(L, box);
  lua_settop(L, box);
  b->busy = false;
  if (b->cap > SHARED_MAX) { /* a big one's memory is not kept */
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
  if (b->kcap * sizeof *b->keys > SHARED_MAX) {
    free(b->keys);
    b->keys = NULL;
    b->kcap = 0;
  }
  /* A buffer that is not shared goes with its userdata's collection. */
}

/* --- the module ----------------------------------------------------------- */

/* The text argument at idx: a string or a bytes value (httpd.join). */
static const char *check_text(lua_State *L, int idx, const char *fn,
                              size_t *n) {
  const char *s = kl_lua_bytes(L, idx, lua_upvalueindex(1), n);
  if (!s)
    kl_lua_error(L, fn, "expected a string or bytes, got %s",
                 luaL_typename(L, idx));
  return s;
}

/* json.decode(s) -> value | nil, "json: byte N: reason" */
static int l_decode(lua_State *L) {
  size_t n;
  char err[256];
  const char *s = check_text(L, 1, "json.decode", &n);
  if (kl_lua_json_decode(L, s, n, err, sizeof err) == KL_OK) return 1;
  lua_pushnil(L);
  lua_pushfstring(L, "json: %s", err);
  return 2;
}

/* json.check(s) -> true | nil, "json: byte N: reason": checks s as decode
 * does, without building anything. */
static int l_check(lua_State *L) {
  size_t n;
  char err[256];
  luaL_checktype(L, 1, LUA_TSTRING);
  const char *s = lua_tolstring(L, 1, &n);
  if (kl_json_validate(s, n, MAX_DEPTH, err, sizeof err) == KL_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  lua_pushfstring(L, "json: %s", err);
  return 2;
}

/* One container index for every check here (the runtime is one thread):
 * readers after a check jump over what it indexed. */
static kl_json_ctbuf_t check_ix;

/* Checks that [s, s+n) is one JSON object and fills *v; otherwise pushes
 * nil and "json: byte N: reason" and returns false. */
static bool check_object(lua_State *L, const char *s, size_t n,
                         kl_json_value_t *v) {
  char err[256];
  if (kl_json_check_indexed(s, n, v, &check_ix, err, sizeof err) == KL_OK)
    return true;
  lua_pushnil(L);
  lua_pushfstring(L, "json: %s", err);
  return false;
}

/* Pushes the string value v ("" when absent or null); returns false when v
 * is some other type. known: a stack slot holding a string, pushed instead
 * when v's text is that string (0: none). */
static bool push_meta_string(lua_State *L, kl_json_span_t v, int known) {
  if (!v.p || (v.n == 4 && !memcmp(v.p, "null", 4))) {
    lua_pushliteral(L, "");
    return true;
  }
  if (v.n < 2 || v.p[0] != '"') return false;
  const char *p = v.p + 1;
  size_t n = v.n - 2;
  if (!memchr(p, '\\', n)) {
    size_t kn;
    const char *k = known ? lua_tolstring(L, known, &kn) : NULL;
    if (k && kn == n && !memcmp(k, p, n))
      lua_pushvalue(L, known);
    else
      lua_pushlstring(L, p, n);
    return true;
  }
  char *out = lua_newuserdata(L, n); /* unescaping never grows it */
  lua_pushlstring(L, out, kl_json_unescape(p, n, out));
  lua_remove(L, -2);
  return true;
}

/* The checked value v's member values that start at each of starts[0..n)
 * (NULL: absent), as spans. */
static void spans_at(const kl_json_value_t *v, const char *const *starts,
                     kl_json_span_t *vals, int n) {
  const char *end = v->json.p + v->json.n;
  for (int i = 0; i < n; i++) {
    const char *p = starts[i], *e = p ? kl_json_skip_in(v, p, end) : NULL;
    vals[i] =
        e ? (kl_json_span_t){p, (size_t)(e - p)} : (kl_json_span_t){NULL, 0};
  }
}

/* json.meta(s [, ns, name]) -> namespace, name, resourceVersion: what a
 * store needs to file an object it is given as JSON, without building it.
 * s must be one JSON object (checked whole, as json.check does). ns and
 * name, strings a caller expects (a previous version's), are returned
 * themselves when the object's are the same, which makes no new string. */
static int l_meta(lua_State *L) {
  static const char *const keys[] = {"namespace", "name", "resourceVersion"};
  size_t n;
  const char *s = check_text(L, 1, "json.meta", &n);
  int known[3] = {lua_type(L, 2) == LUA_TSTRING ? 2 : 0,
                  lua_type(L, 3) == LUA_TSTRING ? 3 : 0, 0};
  kl_json_value_t v;
  kl_json_meta_t m;
  kl_json_span_t vals[3];
  if (kl_json_check_meta(s, n, &v, &m) && !m.unsure) {
    const char *starts[3] = {m.ns, m.name, m.rv};
    spans_at(&v, starts, vals, 3);
  } else { /* an error to tell, or member names with escapes */
    if (!check_object(L, s, n, &v)) return 2;
    kl_json_span_t md;
    static const char *const top[] = {"metadata"};
    kl_json_members_in(&v, v.json, top, 1, &md);
    if (!md.p) md = (kl_json_span_t){"{}", 2};
    kl_json_members_in(&v, md, keys, 3, vals);
  }
  for (int i = 0; i < 3; i++) {
    if (!push_meta_string(L, vals[i], known[i])) {
      lua_pushnil(L);
      lua_pushfstring(L, "json: metadata.%s is not a string", keys[i]);
      return 2;
    }
  }
  return 3;
}

/* Whether the member name [p, p+n) (raw, between its quotes) is one of
 * the strings at stack slots first..last. */
static bool key_in(const char *p, size_t n, lua_State *L, int first, int last) {
  char tmp[256], *heap = NULL;
  if (memchr(p, '\\', n)) { /* compared decoded, as decode reads it */
    char *d = n <= sizeof tmp ? tmp : (heap = kl_xmalloc(n));
    n = kl_json_unescape(p, n, d);
    p = d;
  }
  bool found = false;
  for (int i = first; i <= last && !found; i++) {
    size_t kn;
    const char *k = lua_tolstring(L, i, &kn);
    found = kn == n && !memcmp(k, p, n);
  }
  free(heap);
  return found;
}

/* Walks the members of the checked object [p, end) and keeps those whose
 * names are not among the strings at stack slots first..last: records the
 * first cap of them in spans, adds their bytes and the commas between them
 * to *len, and returns how many there are. */
static size_t kept_members(const kl_json_value_t *v, const char *p,
                           const char *end, lua_State *L, int first, int last,
                           kl_json_span_t *spans, size_t cap, size_t *len) {
  size_t kept = 0;
  p = kl_json_ws(p + 1, end);
  while (*p == '"') { /* checked: a member, then ',' or '}' */
    const char *ks = p, *ke = kl_json_skip(p, end);
    const char *val = kl_json_ws(kl_json_ws(ke, end) + 1, end);
    const char *ve = kl_json_skip_in(v, val, end);
    if (!key_in(ks + 1, (size_t)(ke - 1 - (ks + 1)), L, first, last)) {
      if (kept < cap) spans[kept] = (kl_json_span_t){ks, (size_t)(ve - ks)};
      *len += (size_t)(ve - ks) + (kept > 0);
      kept++;
    }
    p = kl_json_ws(ve, end);
    if (*p == ',') p = kl_json_ws(p + 1, end);
  }
  return kept;
}

/* Top-level members recorded in one walk; an object with more kept ones
 * (rare: Kubernetes objects have a handful) is walked again. */
#define OMIT_SPANS 32

/* json.omit(s, key...) -> bytes: object s without its top-level members
 * named key (every one, when a name repeats), the others as they were:
 * a stored object's text as a list item, which carries no kind or
 * apiVersion, without decoding it. s is checked whole first. */
static int l_omit(lua_State *L) {
  size_t n;
  const char *s = check_text(L, 1, "json.omit", &n);
  int last = lua_gettop(L);
  for (int i = 2; i <= last; i++)
    if (lua_type(L, i) != LUA_TSTRING)
      kl_lua_error(L, "json.omit", "expected member names, got %s",
                   luaL_typename(L, i));
  kl_json_value_t v;
  if (!check_object(L, s, n, &v)) return 2;
  const char *p = v.json.p, *end = v.json.p + v.json.n;
  kl_json_span_t few[OMIT_SPANS], *spans = few;
  size_t len = 2; /* the braces */
  size_t kept = kept_members(&v, p, end, L, 2, last, few, OMIT_SPANS, &len);
  char *o = kl_lua_newbytes(L, len);
  if (kept > OMIT_SPANS) { /* without the index: the allocation may have
                              run code that checked other JSON */
    size_t again = 0;
    spans = kl_xmalloc(kept * sizeof *spans);
    kept_members(NULL, p, end, L, 2, last, spans, kept, &again);
  }
  *o++ = '{';
  for (size_t i = 0; i < kept; i++) {
    if (i) *o++ = ',';
    memcpy(o, spans[i].p, spans[i].n);
    o += spans[i].n;
  }
  *o = '}';
  if (spans != few) free(spans);
  return 1;
}

/* json.encode(v) -> string; raises on values without an exact JSON form. */
static int l_encode(lua_State *L) {
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  kl_lua_json_encode(L, 1);
  return 1;
}

/* json.array([t]) -> t marked as an array (a new empty one by default). */
static int l_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  } else {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
  }
  push_array_mt(L);
  lua_setmetatable(L, 1);
  return 1;
}

/* json.is_array(v) -> whether v carries the array metatable or is a view
 * of an array. */
static int l_is_array(lua_State *L) {
  bool yes = false;
  if (lua_getmetatable(L, 1)) {
    doc_t *doc;
    size_t off;
    push_array_mt(L);
    yes = lua_rawequal(L, -1, -2) ||
          (view_of(L, 2, &doc, &off) && doc->text[off] == '[');
  }
  lua_pushboolean(L, yes);
  return 1;
}

/* json.view(s) -> view | nil, "json: byte N: reason": a read-only view of
 * the JSON object s, checked whole as json.check does. Each container is
 * decoded on the first read of one of its members, one level at a time;
 * reads give exactly what json.decode(s) would hold there (containers are
 * views in turn). LuaJIT calls no __pairs or __len, so pairs, ipairs and #
 * see an empty table: json.pairs, json.ipairs and json.len iterate and
 * count a view; json.encode and json.is_array know views; a write raises
 * "json: cannot set K: a view is read-only". A number json.decode refuses
 * (an integer beyond 2^53) raises its error when its level is read. */
static int l_view(lua_State *L) {
  size_t n;
  char err[256];
  luaL_checktype(L, 1, LUA_TSTRING); /* the views keep it */
  const char *s = lua_tolstring(L, 1, &n);
  lua_settop(L, 1);
  doc_t *doc = lua_newuserdata(L, sizeof *doc);
  memset(doc, 0, sizeof *doc);
  luaL_getmetatable(L, DOC_MT);
  lua_setmetatable(L, 2);
  if (kl_json_check_indexed(s, n, &doc->v, &doc->ix, err, sizeof err) !=
      KL_OK) {
    lua_pushnil(L);
    lua_pushfstring(L, "json: %s", err);
    return 2;
  }
  doc->text = s;
  lua_getfield(L, LUA_REGISTRYINDEX, VIEW_FNS);
  view_push(L, 2, 1, 3, (size_t)(doc->v.json.p - s));
  return 1;
}

/* The table json.pairs, ipairs and len read: a view's level, or v. */
static void iter_table(lua_State *L, const char *fn) {
  if (!lua_istable(L, 1))
    kl_lua_error(L, fn, "expected a table or a view, got %s",
                 luaL_typename(L, 1));
  lua_settop(L, 1);
  if (view_push_table(L, 1)) lua_replace(L, 1);
}

static int iter_next(lua_State *L) {
  lua_settop(L, 2);
  if (lua_next(L, 1)) return 2;
  lua_pushnil(L);
  return 1;
}

static int iter_inext(lua_State *L) {
  lua_Number i = luaL_checknumber(L, 2) + 1;
  lua_pushnumber(L, i);
  lua_rawgeti(L, 1, (int)i);
  return lua_isnil(L, -1) ? 1 : 2;
}

/* json.pairs(v) -> next, t, nil: the members of a view or a table. */
static int l_pairs(lua_State *L) {
  iter_table(L, "json.pairs");
  lua_getfield(L, LUA_REGISTRYINDEX, VIEW_FNS);
  lua_rawgeti(L, 2, VF_NEXT);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* json.ipairs(v) -> inext, t, 0: the items of a view or a table. */
static int l_ipairs(lua_State *L) {
  iter_table(L, "json.ipairs");
  lua_getfield(L, LUA_REGISTRYINDEX, VIEW_FNS);
  lua_rawgeti(L, 2, VF_INEXT);
  lua_pushvalue(L, 1);
  lua_pushinteger(L, 0);
  return 3;
}

/* json.len(v) -> #v, of a view's items too. */
static int l_len(lua_State *L) {
  iter_table(L, "json.len");
  lua_pushinteger(L, (lua_Integer)lua_objlen(L, 1));
  return 1;
}

static const luaL_Reg json_funcs[] = {
    {"decode", l_decode},     {"check", l_check},   {"meta", l_meta},
    {"omit", l_omit},         {"encode", l_encode}, {"array", l_array},
    {"is_array", l_is_array}, {"view", l_view},     {"pairs", l_pairs},
    {"ipairs", l_ipairs},     {"len", l_len},       {NULL, NULL},
};

int kl_luaopen_json(lua_State *L) {
  luaL_newmetatable(L, ARRAY_MT);
  lua_pushliteral(L, "kubelua.array");
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
  if (luaL_newmetatable(L, BUF_MT)) {
    lua_pushcfunction(L, ebuf_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, DOC_MT)) {
    lua_pushcfunction(L, doc_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  static const lua_CFunction view_fns[] = {view_index, view_newindex, iter_next,
                                           iter_inext};
  lua_createtable(L, VF_N, 0);
  for (int i = 0; i < 4; i++) {
    lua_pushvalue(L, -1); /* view_index's upvalue; harmless for others */
    lua_pushcclosure(L, view_fns[i], 1);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushliteral(L, "__index");
  lua_rawseti(L, -2, VF_KINDEX);
  lua_pushliteral(L, "__newindex");
  lua_rawseti(L, -2, VF_KNEWINDEX);
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, view_child, 1);
  lua_rawseti(L, -2, VF_CHILD);
  lua_setfield(L, LUA_REGISTRYINDEX, VIEW_FNS);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, LUA_REGISTRYINDEX, NULL_KEY);
  lua_newtable(L);
  kl_lua_push_bytes_mt(L);
  luaL_setfuncs(L, json_funcs, 1); /* the bytes metatable, for check_text */
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  return 1;
}
