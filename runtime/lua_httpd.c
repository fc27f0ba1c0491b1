/* lua_httpd.c — "kubelua.httpd": the HTTP server of httpd.h in Lua.
 *
 * It exists so that servers written in Lua (the API simulator first, later
 * /metrics and the health endpoints) run on the runtime's loop:
 *
 *   local httpd = require "kubelua.httpd"
 *   local srv = assert(httpd.listen{ host = "127.0.0.1", port = 0,
 *                                    handler = function(req) ... end })
 *
 * Each request runs its handler in a new task, so a handler may yield
 * (kube.sleep, waiting for a stream to drain). A handler that ends without
 * answering gets a 500 sent for it.
 *
 * Ownership. A server value is a userdata boxing a malloc'd lsrv_t; the
 * server stays open (a registry reference keeps it) until srv:close() or the
 * Lua state closes. A request value is a full userdata (lreq_t) that holds
 * the kl_httpd_req_t while the request is alive; a registry reference keeps
 * the userdata alive for as long, so C never points at a collected object.
 * When the request ends (reply, finish, or httpd's on_close), lr->req becomes
 * NULL and the reference is dropped. httpd's on_close and on_drain may come
 * from inside a kl_httpd_* call (srv:close()), so they never call Lua there:
 * they record what happened and queue deferred work, which calls the Lua
 * on_close callback (in a task) and wakes drain waiters from the loop's top
 * level. __gc of a request still alive detaches it (httpd then frees it
 * silently when its connection goes), which only happens as the state
 * closes.
 *
 * Bytes. httpd.join(parts [, i [, j [, sep]]]) concatenates strings and
 * bytes values into a bytes value: an immutable userdata holding the bytes,
 * which req:write sends like a string and tostring() turns into one. It
 * exists for the JSON of stored objects, written to every watcher: made as
 * Lua strings, thousands of live texts of the same length that differ in a
 * few bytes all land in one bucket of LuaJIT's string table (its hash reads
 * only a few positions of a long string), and every new one is compared
 * with all of them. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "httpd.h"
#include "log.h"
#include "lua_kube.h"
#include "mem.h"

#define SERVER_MT "kubelua.httpd.server"
#define REQ_MT "kubelua.httpd.request"
#define RUNNER_KEY "kubelua.httpd.runner"
#define BYTES_MT "kubelua.httpd.bytes"

typedef struct lbytes {
  size_t len;
  char data[];
} lbytes_t;

typedef struct lsrv {
  kl_httpd_t *h;
  kl_rt_t *rt;
  int handler_ref;     /* the Lua handler */
  int self_ref;        /* keeps the server userdata while open */
  unsigned gen;        /* the script generation that started it */
  bool while_stopping; /* serves after the runtime began to stop */
} lsrv_t;

typedef struct lreq {
  kl_httpd_req_t *req; /* NULL once the request ended */
  kl_rt_t *rt;
  int self_ref;     /* held while req is alive or a callback is queued */
  int on_close_ref; /* Lua callback, or LUA_NOREF */
  int started;      /* a streaming response began */
  int answered;     /* reply or stream_begin done (or tried) */
  int close_reason; /* 0, or the KL_E* code httpd gave on_close */
  unsigned gen;     /* its server's generation: its tasks belong to it */
  int closed_pending;
  kl_defer_t defer;       /* runs the Lua side of on_close / on_drain */
  kl_waitlist_t drainers; /* in req:wait_drain */
  kl_waitlist_t sleepers; /* in req:sleep */
  size_t drain_pending;
} lreq_t;

/* Tasks parked on the request (woken when it ends). */
static size_t req_waiters(const lreq_t *lr) {
  return lr->drainers.n + lr->sleepers.n;
}

/* --- requests ------------------------------------------------------------ */

/* The functions of this module and the methods of its values have two
 * upvalues, the bytes metatable and their own value's metatable, so that
 * the type checks of the calls made per watch event (req:write,
 * httpd.join) compare metatables without looking them up by name. */
#define UV_BYTES_MT lua_upvalueindex(1)
#define UV_OWN_MT lua_upvalueindex(2)

/* Whether the value at idx has the metatable at mt. */
static int has_mt(lua_State *L, int idx, int mt) {
  if (!lua_getmetatable(L, idx)) return 0;
  int is = lua_rawequal(L, -1, mt); /* mt: absolute or an upvalue */
  lua_pop(L, 1);
  return is;
}

/* Whether the value at idx is a userdata with the metatable at mt. */
static int is_udata(lua_State *L, int idx, int mt) {
  return lua_type(L, idx) == LUA_TUSERDATA && has_mt(L, idx, mt);
}

static lreq_t *check_req(lua_State *L, const char *fn) {
  lreq_t *lr = is_udata(L, 1, UV_OWN_MT) ? lua_touserdata(L, 1) : NULL;
  if (!lr)
    kl_lua_error(L, fn, "expected a request, got %s", luaL_typename(L, 1));
  return lr;
}

/* Drops the on_close callback, which will not run (any more): the
 * registry reference would keep it, and all it holds, for good. */
static void drop_on_close(lua_State *L, lreq_t *lr) {
  if (lr->on_close_ref == LUA_NOREF) return;
  luaL_unref(L, LUA_REGISTRYINDEX, lr->on_close_ref);
  lr->on_close_ref = LUA_NOREF;
}

/* The request ended on the C side: nothing may touch lr->req any more.
 * Tasks waiting on it hear so (from the loop, as for a client that went):
 * the owner's end may come from another task than the one waiting. */
static void req_detach(lreq_t *lr) {
  lua_State *L = kl_rt_lua(lr->rt);
  lr->req = NULL;
  if (req_waiters(lr)) kl_loop_defer(kl_rt_loop(lr->rt), &lr->defer);
  if (!lr->closed_pending) drop_on_close(L, lr); /* its owner ended it */
  if (!lr->closed_pending && !req_waiters(lr) && lr->self_ref != LUA_NOREF) {
    luaL_unref(L, LUA_REGISTRYINDEX, lr->self_ref);
    lr->self_ref = LUA_NOREF;
  }
}

static const char *reason_name(int reason) {
  switch (reason) {
  case KL_EIO: return "closed";
  case KL_ELIMIT: return "limit";
  case KL_ESHUTDOWN: return "shutdown";
  default: return "closed";
  }
}

static void req_deferred(kl_defer_t *d) {
  lreq_t *lr = (lreq_t *)((char *)d - offsetof(lreq_t, defer));
  lua_State *L = kl_rt_lua(lr->rt);
  if (lr->drainers.n) kl_waitlist_wake(&lr->drainers, lr->drainers.n);
  if (!lr->req && lr->sleepers.n)
    kl_waitlist_wake(&lr->sleepers, lr->sleepers.n);
  if (lr->closed_pending) {
    lr->closed_pending = 0;
    if (lr->on_close_ref != LUA_NOREF && !kl_rt_stopping(lr->rt)) {
      lua_checkstack(L, LUA_MINSTACK);
      lua_getfield(L, LUA_REGISTRYINDEX, RUNNER_KEY);
      lua_getfield(L, -1, "spawn");
      lua_rawgeti(L, LUA_REGISTRYINDEX, lr->on_close_ref);
      lua_rawgeti(L, LUA_REGISTRYINDEX, lr->self_ref);
      lua_pushstring(L, reason_name(lr->close_reason));
      kl_gen_scope_t saved;
      kl_rt_gen_enter(lr->rt, lr->gen, &saved);
      int rc = lua_pcall(L, 3, 0, 0);
      kl_rt_gen_leave(lr->rt, &saved);
      if (rc != 0) {
        kl_log(KL_LOG_ERROR, "httpd: on_close: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
    }
    drop_on_close(L, lr); /* spawned, or not to run */
  }
  if (!lr->req && !req_waiters(lr) && lr->self_ref != LUA_NOREF) {
    luaL_unref(L, LUA_REGISTRYINDEX, lr->self_ref);
    lr->self_ref = LUA_NOREF;
  }
}

static void on_req_close(kl_httpd_req_t *req, int reason, void *ud) {
  lreq_t *lr = ud;
  (void)req;
  lr->close_reason = reason;
  lr->closed_pending = 1;
  lr->req = NULL;
  kl_loop_defer(kl_rt_loop(lr->rt), &lr->defer);
}

static void on_req_drain(kl_httpd_req_t *req, void *ud) {
  lreq_t *lr = ud;
  (void)req;
  if (lr->drainers.n) kl_loop_defer(kl_rt_loop(lr->rt), &lr->defer);
}

static int req_gc(lua_State *L) {
  lreq_t *lr = lua_touserdata(L, 1);
  if (lr->req) {
    kl_httpd_req_set_callbacks(lr->req, NULL, NULL, NULL);
    lr->req = NULL;
  }
  kl_loop_undefer(kl_rt_loop(lr->rt), &lr->defer);
  return 0;
}

static int req_method(lua_State *L) {
  lreq_t *lr = check_req(L, "req:method");
  if (!lr->req) return 0;
  lua_pushstring(L, kl_httpd_req_method(lr->req));
  return 1;
}

static int req_path(lua_State *L) {
  lreq_t *lr = check_req(L, "req:path");
  size_t n;
  if (!lr->req) return 0;
  const char *p = kl_httpd_req_path(lr->req, &n);
  lua_pushlstring(L, p, n);
  return 1;
}

static int req_query(lua_State *L) {
  lreq_t *lr = check_req(L, "req:query");
  size_t n;
  if (!lr->req) return 0;
  const char *q = kl_httpd_req_query(lr->req, &n);
  lua_pushlstring(L, q, n);
  return 1;
}

/* req:param(key [, nth]) -> the nth (1-based) decoded value, or nil. */
static int req_param(lua_State *L) {
  lreq_t *lr = check_req(L, "req:param");
  const char *key = luaL_checkstring(L, 2);
  lua_Integer nth = luaL_optinteger(L, 3, 1);
  size_t n;
  if (!lr->req || nth < 1) return 0;
  const char *v = kl_httpd_req_param(lr->req, key, (size_t)nth - 1, &n);
  if (!v) return 0;
  lua_pushlstring(L, v, n);
  return 1;
}

/* req:params() -> { key = first value, ... } */
static int req_params(lua_State *L) {
  lreq_t *lr = check_req(L, "req:params");
  if (!lr->req) return 0;
  size_t n = kl_httpd_req_nparams(lr->req);
  lua_createtable(L, 0, (int)n);
  for (size_t i = 0; i < n; i++) {
    const char *k, *v;
    if (kl_httpd_req_param_at(lr->req, i, &k, &v) != 0) break;
    lua_getfield(L, -1, k);
    int seen = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (seen) continue;
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
  }
  return 1;
}

static int req_header(lua_State *L) {
  lreq_t *lr = check_req(L, "req:header");
  const char *name = luaL_checkstring(L, 2);
  if (!lr->req) return 0;
  const char *v = kl_httpd_req_header(lr->req, name);
  if (!v) return 0;
  lua_pushstring(L, v);
  return 1;
}

/* req:headers() -> { {name, value}, ... } in the order sent. */
static int req_headers(lua_State *L) {
  lreq_t *lr = check_req(L, "req:headers");
  if (!lr->req) return 0;
  size_t n = kl_httpd_req_nheaders(lr->req);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    const char *k, *v;
    if (kl_httpd_req_header_at(lr->req, i, &k, &v) != 0) break;
    lua_createtable(L, 2, 0);
    lua_pushstring(L, k);
    lua_rawseti(L, -2, 1);
    lua_pushstring(L, v);
    lua_rawseti(L, -2, 2);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static int req_body(lua_State *L) {
  lreq_t *lr = check_req(L, "req:body");
  size_t n;
  if (!lr->req) return 0;
  const char *b = kl_httpd_req_body(lr->req, &n);
  lua_pushlstring(L, b, n);
  return 1;
}

static int req_remote(lua_State *L) {
  lreq_t *lr = check_req(L, "req:remote");
  if (!lr->req) return 0;
  lua_pushstring(L, kl_httpd_req_remote(lr->req));
  return 1;
}

static int req_is_tls(lua_State *L) {
  lreq_t *lr = check_req(L, "req:is_tls");
  lua_pushboolean(L, lr->req && kl_httpd_req_is_tls(lr->req));
  return 1;
}

/* Whether the request is still alive, and whether it was answered. */
static int req_alive(lua_State *L) {
  lreq_t *lr = check_req(L, "req:alive");
  lua_pushboolean(L, lr->req != NULL);
  return 1;
}

static int req_answered(lua_State *L) {
  lreq_t *lr = check_req(L, "req:answered");
  lua_pushboolean(L, lr->answered);
  return 1;
}

static int push_failure(lua_State *L, int rc) {
  lua_pushnil(L);
  lua_pushstring(L, rc == KL_ELIMIT ? "limit" : "closed");
  return 2;
}

/* Sets the headers of table idx ({name = value} or {{name, value}, ...}).
 * Returns 0 or the first failing KL_E* code; raises on a bad value. */
static int set_headers(lua_State *L, lreq_t *lr, int idx, const char *fn) {
  if (lua_isnoneornil(L, idx)) return 0;
  if (lua_type(L, idx) != LUA_TTABLE)
    kl_lua_error(L, fn, "headers must be a table, got %s",
                 luaL_typename(L, idx));
  int rc = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *name, *value;
    if (lua_type(L, -2) == LUA_TNUMBER && lua_type(L, -1) == LUA_TTABLE) {
      lua_rawgeti(L, -1, 1);
      lua_rawgeti(L, -2, 2);
      name = lua_tostring(L, -2);
      value = lua_tostring(L, -1);
      lua_pop(L, 2); /* strings stay alive in the pair table */
    } else {
      name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
      value = lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER
                  ? lua_tostring(L, -1)
                  : NULL;
    }
    if (!name || !value)
      kl_lua_error(L, fn, "header names and values must be strings");
    if (rc == 0) {
      rc = kl_httpd_set_header(lr->req, name, value);
      if (rc == KL_EINVAL) kl_lua_error(L, fn, "invalid header \"%s\"", name);
    }
    lua_pop(L, 1);
  }
  return rc;
}

static int check_status(lua_State *L, int idx, const char *fn) {
  lua_Integer st = luaL_checkinteger(L, idx);
  if (st < 200 || st > 999)
    kl_lua_error(L, fn, "status must be 200-999, got %d", (int)st);
  return (int)st;
}

/* req:reply(status [, headers [, body]]) -> true | nil, "closed" */
static int req_reply(lua_State *L) {
  lreq_t *lr = check_req(L, "req:reply");
  int status = check_status(L, 2, "req:reply");
  size_t n = 0;
  const char *body = lua_isnoneornil(L, 4) ? "" : luaL_checklstring(L, 4, &n);
  if (lr->started)
    return kl_lua_error(L, "req:reply", "a streaming response has begun");
  if (!lr->req) return push_failure(L, KL_ESHUTDOWN);
  lr->answered = 1;
  int rc = set_headers(L, lr, 3, "req:reply");
  if (rc == KL_ESHUTDOWN) return push_failure(L, rc);
  rc = kl_httpd_reply(lr->req, status, body, n);
  if (rc == KL_EINVAL) return kl_lua_error(L, "req:reply", "invalid reply");
  req_detach(lr);
  if (rc != 0) return push_failure(L, rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* req:stream_begin(status [, headers]) -> true | nil, "closed" */
static int req_stream_begin(lua_State *L) {
  lreq_t *lr = check_req(L, "req:stream_begin");
  int status = check_status(L, 2, "req:stream_begin");
  if (lr->started)
    return kl_lua_error(L, "req:stream_begin", "the stream has begun already");
  if (!lr->req) return push_failure(L, KL_ESHUTDOWN);
  lr->answered = 1;
  int rc = set_headers(L, lr, 3, "req:stream_begin");
  if (rc == 0) rc = kl_httpd_stream_begin(lr->req, status);
  if (rc == KL_EINVAL)
    return kl_lua_error(L, "req:stream_begin", "invalid status %d", status);
  if (rc != 0) return push_failure(L, rc);
  lr->started = 1;
  lua_pushboolean(L, 1);
  return 1;
}

/* --- bytes --------------------------------------------------------------- */

static int bytes_len(lua_State *L) {
  lbytes_t *b = luaL_checkudata(L, 1, BYTES_MT);
  lua_pushinteger(L, (lua_Integer)b->len);
  return 1;
}

static int bytes_tostring(lua_State *L) {
  lbytes_t *b = luaL_checkudata(L, 1, BYTES_MT);
  lua_pushlstring(L, b->data, b->len);
  return 1;
}

static const luaL_Reg bytes_meta[] = {
    {"__len", bytes_len},
    {"__tostring", bytes_tostring},
    {NULL, NULL},
};

/* Pushes the bytes metatable, made on first use (kubelua.json makes bytes
 * too, maybe before kubelua.httpd is loaded). */
void kl_lua_push_bytes_mt(lua_State *L) {
  if (luaL_newmetatable(L, BYTES_MT)) {
    luaL_setfuncs(L, bytes_meta, 0);
    lua_pushstring(L, BYTES_MT);
    lua_setfield(L, -2, "__metatable");
  }
}

/* to_bytes for a value whose type (lua_type) the caller has asked. */
static const char *typed_bytes(lua_State *L, int idx, int type, int mt,
                               size_t *len) {
  if (type == LUA_TSTRING) return lua_tolstring(L, idx, len);
  if (type != LUA_TUSERDATA || !has_mt(L, idx, mt)) return NULL;
  lbytes_t *b = lua_touserdata(L, idx);
  *len = b->len;
  return b->data;
}

/* The bytes of a string or bytes value at idx, or NULL; mt: the stack
 * index of the bytes metatable. */
static const char *to_bytes(lua_State *L, int idx, int mt, size_t *len) {
  return typed_bytes(L, idx, lua_type(L, idx), mt, len);
}

const char *kl_lua_bytes(lua_State *L, int idx, int mt, size_t *len) {
  if (mt || lua_type(L, idx) == LUA_TSTRING) return to_bytes(L, idx, mt, len);
  idx = idx < 0 && idx > LUA_REGISTRYINDEX ? lua_gettop(L) + idx + 1 : idx;
  kl_lua_push_bytes_mt(L);
  const char *d = to_bytes(L, idx, lua_gettop(L), len);
  lua_pop(L, 1);
  return d;
}

/* The pieces httpd.join copies, gathered in one walk of its parts: the
 * strings stay where Lua keeps them (the parts table anchors them for the
 * call), so each is read from the table once; a number is written into
 * its span (p NULL), as no Lua string of it is made. */
typedef struct spans {
  struct span {
    const char *p;
    size_t n;
    char num[24];
  } * v, fixed[64];
  size_t n, cap, total;
} spans_t;

static struct span *spans_next(spans_t *s) {
  if (s->n == s->cap) {
    size_t cap = s->cap * 2;
    struct span *v = kl_xmalloc(cap * sizeof *v);
    memcpy(v, s->v, s->n * sizeof *v);
    if (s->v != s->fixed) free(s->v);
    s->v = v;
    s->cap = cap;
  }
  return &s->v[s->n++];
}

static void spans_add(spans_t *s, const char *p, size_t n) {
  struct span *sp = spans_next(s);
  sp->p = p;
  sp->n = n;
  s->total += n;
}

/* A number as tostring writes it ("%.14g"; integers as their digits). */
static void spans_add_number(spans_t *s, lua_Number x) {
  struct span *sp = spans_next(s);
  char *out = sp->num;
  size_t n = 0;
  if (x == x && fabs(x) < 1e14 && x == (lua_Number)(int64_t)x &&
      !(x == 0 && signbit(x))) {
    int64_t i = (int64_t)x;
    uint64_t u = i < 0 ? 0 - (uint64_t)i : (uint64_t)i;
    char tmp[20];
    size_t k = 0;
    do
      tmp[k++] = (char)('0' + u % 10);
    while ((u /= 10));
    if (i < 0) out[n++] = '-';
    while (k)
      out[n++] = tmp[--k];
  } else if (x != x) {
    n = 3;
    memcpy(out, "nan", n);
  } else {
    n = (size_t)snprintf(out, sizeof sp->num, "%.14g", x);
  }
  sp->p = NULL;
  sp->n = n;
  s->total += n;
}

/* Gathers parts[i..j] of the table at t (nested tables whole) with sep
 * between them; raises on a part of another type. */
static void join_gather(lua_State *L, int t, lua_Integer i, lua_Integer j,
                        const char *sep, size_t seplen, int depth, spans_t *s) {
  size_t len;
  /* One slot per level (depth < 8) and to_bytes's two: within the
   * LUA_MINSTACK slots a C function has. */
  for (lua_Integer k = i; k <= j; k++) {
    if (k > i && seplen) spans_add(s, sep, seplen);
    lua_rawgeti(L, t, (int)k);
    const char *d;
    int type = lua_type(L, -1); /* asked once: each API call costs */
    if ((d = typed_bytes(L, -1, type, UV_BYTES_MT, &len))) {
      if (len) spans_add(s, d, len);
    } else if (type == LUA_TNUMBER) {
      spans_add_number(s, lua_tonumber(L, -1));
    } else if (type == LUA_TTABLE && depth < 8) {
      join_gather(L, lua_gettop(L), 1, (lua_Integer)lua_objlen(L, -1), NULL, 0,
                  depth + 1, s);
    } else {
      if (s->v != s->fixed) free(s->v);
      s->v = s->fixed;
      kl_lua_error(L, "httpd.join",
                   "part %d: expected a string, a number, bytes or "
                   "a table of them, got %s",
                   (int)k, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  }
}

/* httpd.join(parts [, i [, j [, sep]]]) -> bytes: parts[i..j] (strings,
 * numbers as tostring writes them, bytes, or tables of parts joined whole;
 * default 1..#parts) joined with sep (default "") between the top-level
 * parts. */
static int l_join(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer i = luaL_optinteger(L, 2, 1);
  lua_Integer j = lua_isnoneornil(L, 3) ? (lua_Integer)lua_objlen(L, 1)
                                        : luaL_checkinteger(L, 3);
  size_t seplen = 0;
  const char *sep = luaL_optlstring(L, 4, "", &seplen);
  spans_t s;
  s.v = s.fixed;
  s.n = s.total = 0;
  s.cap = sizeof s.fixed / sizeof s.fixed[0];
  join_gather(L, 1, i, j, sep, seplen, 0, &s);
  lbytes_t *b = lua_newuserdata(L, sizeof *b + s.total);
  b->len = s.total;
  char *p = b->data;
  for (size_t k = 0; k < s.n; k++) {
    const struct span *sp = &s.v[k];
    memcpy(p, sp->p ? sp->p : sp->num, sp->n);
    p += sp->n;
  }
  if (s.v != s.fixed) free(s.v);
  lua_pushvalue(L, UV_BYTES_MT);
  lua_setmetatable(L, -2);
  return 1;
}

/* req:write(s, ...) -> true | nil, "closed" | nil, "limit": the strings
 * (or bytes) are sent as one chunk. */
static int req_write(lua_State *L) {
  lreq_t *lr = check_req(L, "req:write");
  int n = lua_gettop(L) - 1;
  struct iovec iov[16];
  if (n > 16) return kl_lua_error(L, "req:write", "at most 16 pieces");
  for (int i = 0; i < n; i++) {
    const char *d = to_bytes(L, i + 2, UV_BYTES_MT, &iov[i].iov_len);
    if (!d)
      return kl_lua_error(L, "req:write", "expected strings, got %s",
                          luaL_typename(L, i + 2));
    iov[i].iov_base = (void *)(uintptr_t)d;
  }
  if (!lr->started)
    return kl_lua_error(L, "req:write", "no streaming response has begun");
  if (!lr->req) return push_failure(L, KL_ESHUTDOWN);
  int rc = n == 1
               ? kl_httpd_stream_write(lr->req, iov[0].iov_base, iov[0].iov_len)
               : kl_httpd_stream_writev(lr->req, iov, n);
  if (rc != 0) return push_failure(L, rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* req:finish() -> true | nil, "closed": the terminating chunk. */
static int req_finish(lua_State *L) {
  lreq_t *lr = check_req(L, "req:finish");
  if (!lr->started)
    return kl_lua_error(L, "req:finish", "no streaming response has begun");
  if (!lr->req) return push_failure(L, KL_ESHUTDOWN);
  int rc = kl_httpd_stream_end(lr->req);
  req_detach(lr);
  if (rc != 0) return push_failure(L, rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* req:abort([n]) -> true | nil, "closed": closes the connection after n more
 * payload bytes (default 0), or on HTTP/2 resets the request's stream
 * (INTERNAL_ERROR) and leaves the connection's other streams alone;
 * on_close("shutdown") follows. */
static int req_abort(lua_State *L) {
  lreq_t *lr = check_req(L, "req:abort");
  lua_Integer n = luaL_optinteger(L, 2, 0);
  if (n < 0) return kl_lua_error(L, "req:abort", "n must be >= 0");
  if (!lr->req) return push_failure(L, KL_ESHUTDOWN);
  if (!lr->started && n > 0)
    return kl_lua_error(L, "req:abort", "n > 0 needs a streaming response");
  lr->answered = 1;
  int rc = kl_httpd_stream_abort(lr->req, (size_t)n);
  if (rc != 0) return push_failure(L, rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int req_buffered(lua_State *L) {
  lreq_t *lr = check_req(L, "req:buffered");
  lua_pushinteger(L, lr->req ? (lua_Integer)kl_httpd_buffered(lr->req) : 0);
  return 1;
}

/* What a waiter on the request gets: whether it is still on. */
static int deliver_alive(kl_task_t *t, lua_State *co, void *op) {
  lreq_t *lr = op;
  (void)t;
  lua_pushboolean(co, lr->req != NULL);
  return 1;
}

/* req:wait_drain() -> true once the stream's buffered output fell to the
 * low-water mark, false if the request ended; in a task only. */
static int req_wait_drain(lua_State *L) {
  lreq_t *lr = check_req(L, "req:wait_drain");
  kl_task_t *t = kl_task_current(lr->rt, L);
  if (!t) return kl_lua_error(L, "req:wait_drain", "not inside a task");
  if (!lr->req) {
    lua_pushboolean(L, 0);
    return 1;
  }
  return kl_task_wait(L, &lr->drainers, deliver_alive, lr);
}

/* req:sleep(seconds) -> alive: waits the seconds, or less when the
 * request ends first (its client went, or it was ended, by another task
 * too): whether it is still on. In a task only. */
static int req_sleep(lua_State *L) {
  lreq_t *lr = check_req(L, "req:sleep");
  double s = kl_lua_check_seconds(L, 2, "req:sleep");
  if (!kl_task_current(lr->rt, L))
    return kl_lua_error(L, "req:sleep", "not inside a task");
  if (!lr->req) {
    lua_pushboolean(L, 0);
    return 1;
  }
  kl_loop_t *loop = kl_rt_loop(lr->rt);
  return kl_task_wait_until(L, &lr->sleepers, deliver_alive, lr,
                            kl_loop_now(loop) + (s > 0 ? s : 0));
}

/* req:on_close(fn): fn(req, reason) runs in a task when the request ends
 * before its owner ended it (reason "closed", "limit" or "shutdown"). */
static int req_on_close(lua_State *L) {
  lreq_t *lr = check_req(L, "req:on_close");
  if (!lua_isnil(L, 2) && lua_type(L, 2) != LUA_TFUNCTION)
    return kl_lua_error(L, "req:on_close", "expected a function, got %s",
                        luaL_typename(L, 2));
  drop_on_close(L, lr);
  /* a request already over, and not about to report it, never calls it */
  if (!lua_isnil(L, 2) && (lr->req || lr->closed_pending)) {
    lua_pushvalue(L, 2);
    lr->on_close_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  return 0;
}

/* clang-format off */
static const luaL_Reg req_methods[] = {
    {"method", req_method},
    {"path", req_path},
    {"query", req_query},
    {"param", req_param},
    {"params", req_params},
    {"header", req_header},
    {"headers", req_headers},
    {"body", req_body},
    {"remote", req_remote},
    {"is_tls", req_is_tls},
    {"alive", req_alive},
    {"answered", req_answered},
    {"reply", req_reply},
    {"stream_begin", req_stream_begin},
    {"write", req_write},
    {"finish", req_finish},
    {"abort", req_abort},
    {"buffered", req_buffered},
    {"wait_drain", req_wait_drain},
    {"sleep", req_sleep},
    {"on_close", req_on_close},
    {NULL, NULL},
};
/* clang-format on */

/* --- servers ------------------------------------------------------------- */

static lsrv_t *check_srv(lua_State *L, const char *fn) {
  lsrv_t **box = luaL_testudata(L, 1, SERVER_MT);
  if (!box)
    kl_lua_error(L, fn, "expected a server, got %s", luaL_typename(L, 1));
  return *box;
}

static void on_request(kl_httpd_req_t *req, void *ud) {
  lsrv_t *s = ud;
  lua_State *L = kl_rt_lua(s->rt);
  if (kl_rt_stopping(s->rt) && !s->while_stopping) {
    kl_httpd_set_header(req, "Connection", "close");
    kl_httpd_reply(req, 503, "stopping\n", 9);
    return;
  }
  lua_checkstack(L, LUA_MINSTACK);
  lua_getfield(L, LUA_REGISTRYINDEX, RUNNER_KEY);
  lua_getfield(L, -1, "spawn");
  lua_getfield(L, -2, "run");
  lua_rawgeti(L, LUA_REGISTRYINDEX, s->handler_ref);
  lreq_t *lr = lua_newuserdata(L, sizeof *lr);
  memset(lr, 0, sizeof *lr);
  lr->rt = s->rt;
  lr->gen = s->gen;
  lr->self_ref = lr->on_close_ref = LUA_NOREF;
  kl_defer_init(&lr->defer, req_deferred);
  luaL_getmetatable(L, REQ_MT);
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lr->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lr->req = req;
  kl_httpd_req_set_callbacks(req, on_req_close, on_req_drain, lr);
  /* spawn(run, handler, req) */
  kl_gen_scope_t saved;
  kl_rt_gen_enter(s->rt, s->gen, &saved);
  int rc = lua_pcall(L, 3, 0, 0);
  kl_rt_gen_leave(s->rt, &saved);
  if (rc != 0) {
    kl_log(KL_LOG_ERROR, "httpd: cannot start a handler: %s",
           lua_tostring(L, -1));
    lua_pop(L, 1);
    if (lr->req) {
      kl_httpd_reply(lr->req, 500, "", 0);
      req_detach(lr);
    }
  }
  lua_pop(L, 1);
}

static void srv_close(lua_State *L, lsrv_t *s) {
  if (!s->h) return;
  kl_httpd_t *h = s->h;
  s->h = NULL;
  kl_httpd_free(h);
  luaL_unref(L, LUA_REGISTRYINDEX, s->handler_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->self_ref);
  s->handler_ref = s->self_ref = LUA_NOREF;
}

static int srv_gc(lua_State *L) {
  lsrv_t **box = lua_touserdata(L, 1);
  if (*box) {
    srv_close(L, *box);
    free(*box);
    *box = NULL;
  }
  return 0;
}

static int srv_port(lua_State *L) {
  lsrv_t *s = check_srv(L, "srv:port");
  if (!s->h) return 0;
  lua_pushinteger(L, kl_httpd_port(s->h));
  return 1;
}

/* srv:fd() -> the listening socket's descriptor (for the watchdog). */
static int srv_fd(lua_State *L) {
  lsrv_t *s = check_srv(L, "srv:fd");
  if (!s->h) return 0;
  lua_pushinteger(L, kl_httpd_listen_fd(s->h));
  return 1;
}

static int srv_close_l(lua_State *L) {
  lsrv_t *s = check_srv(L, "srv:close");
  srv_close(L, s);
  return 0;
}

/* srv:close_streams([mode]) -> n: mode "end" (default) or "drop". */
static int srv_close_streams(lua_State *L) {
  static const char *const modes[] = {"end", "drop", NULL};
  lsrv_t *s = check_srv(L, "srv:close_streams");
  int mode = luaL_checkoption(L, 2, "end", modes);
  size_t n =
      s->h ? kl_httpd_close_streams(s->h, mode ? KL_HTTPD_DROP : KL_HTTPD_END)
           : 0;
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int srv_stats(lua_State *L) {
  lsrv_t *s = check_srv(L, "srv:stats");
  kl_httpd_stats_t st = {0};
  if (s->h) kl_httpd_get_stats(s->h, &st);
  lua_createtable(L, 0, 6);
  lua_pushnumber(L, (double)st.connections);
  lua_setfield(L, -2, "connections");
  lua_pushnumber(L, (double)st.requests);
  lua_setfield(L, -2, "requests");
  lua_pushnumber(L, (double)st.streams);
  lua_setfield(L, -2, "streams");
  lua_pushnumber(L, (double)st.accepted);
  lua_setfield(L, -2, "accepted");
  lua_pushnumber(L, (double)st.responses);
  lua_setfield(L, -2, "responses");
  lua_pushnumber(L, (double)st.thread_sent);
  lua_setfield(L, -2, "thread_sent");
  return 1;
}

/* srv:set_tls(cert_file, key_file) -> true | nil, message: the files the
 * next connections use; open ones keep theirs. */
static int srv_set_tls(lua_State *L) {
  lsrv_t *s = check_srv(L, "srv:set_tls");
  const char *cert = luaL_checkstring(L, 2), *key = luaL_checkstring(L, 3);
  char err[256] = "closed";
  if (s->h && kl_httpd_set_tls(s->h, cert, key, err, sizeof err) == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  lua_pushstring(L, err);
  return 2;
}

static const luaL_Reg srv_methods[] = {
    {"port", srv_port},
    {"fd", srv_fd},
    {"close", srv_close_l},
    {"stats", srv_stats},
    {"close_streams", srv_close_streams},
    {"set_tls", srv_set_tls},
    {NULL, NULL},
};

static const char *opt_string(lua_State *L, int idx, const char *k) {
  lua_getfield(L, idx, k);
  const char *v = NULL;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      kl_lua_error(L, "httpd.listen", "%s must be a string, got %s", k,
                   luaL_typename(L, -1));
    v = lua_tostring(L, -1);
  }
  lua_pop(L, 1); /* the string stays in the opts table */
  return v;
}

static double opt_number(lua_State *L, int idx, const char *k) {
  lua_getfield(L, idx, k);
  double v = 0;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0))
      kl_lua_error(L, "httpd.listen", "%s must be a number >= 0", k);
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

/* httpd.listen{host, port, handler, tls_cert, tls_key, limits...,
 *   send_date, send_thread, tls_keep_buffers, error_pages,
 *   serve_while_stopping} -> server | nil, message (send_thread,
 * tls_keep_buffers: see kl_httpd_opts_t). A server answers 503
 * once the runtime is stopping, unless serve_while_stopping: the
 * in-process simulator serves the reconciles a graceful stop waits for. */
static int l_listen(lua_State *L) {
  kl_rt_t *rt = kl_rt_from(L);
  if (lua_type(L, 1) != LUA_TTABLE)
    return kl_lua_error(L, "httpd.listen", "expected an options table, got %s",
                        luaL_typename(L, 1));
  kl_httpd_opts_t o;
  memset(&o, 0, sizeof o);
  o.host = opt_string(L, 1, "host");
  o.port = (int)opt_number(L, 1, "port");
  if (o.port > 65535) return kl_lua_error(L, "httpd.listen", "port > 65535");
  o.tls_cert_file = opt_string(L, 1, "tls_cert");
  o.tls_key_file = opt_string(L, 1, "tls_key");
  if (!o.tls_cert_file != !o.tls_key_file)
    return kl_lua_error(L, "httpd.listen", "tls_cert and tls_key go together");
  o.max_body_bytes = (size_t)opt_number(L, 1, "max_body_bytes");
  o.max_stream_buffer = (size_t)opt_number(L, 1, "max_stream_buffer");
  o.max_header_bytes = (size_t)opt_number(L, 1, "max_header_bytes");
  o.read_timeout = opt_number(L, 1, "read_timeout");
  o.idle_timeout = opt_number(L, 1, "idle_timeout");
  o.write_timeout = opt_number(L, 1, "write_timeout");
  lua_getfield(L, 1, "send_date");
  o.send_date = lua_toboolean(L, -1);
  lua_getfield(L, 1, "send_thread");
  o.send_thread = lua_toboolean(L, -1);
  lua_getfield(L, 1, "serve_while_stopping");
  bool while_stopping = lua_toboolean(L, -1);
  lua_getfield(L, 1, "tls_keep_buffers");
  o.tls_keep_buffers = lua_toboolean(L, -1);
  lua_pop(L, 4);
  /* error_pages = { [status] = { content_type, body } } */
  kl_httpd_error_page_t pages[16];
  lua_getfield(L, 1, "error_pages");
  if (lua_type(L, -1) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      if (o.nerror_pages == 16 || lua_type(L, -2) != LUA_TNUMBER ||
          lua_type(L, -1) != LUA_TTABLE)
        return kl_lua_error(L, "httpd.listen",
                            "error_pages: at most 16 status = {content_type, "
                            "body} pairs");
      kl_httpd_error_page_t *p = &pages[o.nerror_pages++];
      p->status = (int)lua_tointeger(L, -2);
      lua_rawgeti(L, -1, 1);
      lua_rawgeti(L, -2, 2);
      p->content_type = lua_tostring(L, -2);
      p->body = lua_tostring(L, -1);
      if (!p->content_type || !p->body)
        return kl_lua_error(L, "httpd.listen",
                            "error_pages: {content_type, body} strings");
      lua_pop(L, 3); /* the strings stay alive in the options table */
    }
    o.error_pages = pages;
  }
  lua_pop(L, 1);
  lua_getfield(L, 1, "handler");
  if (lua_type(L, -1) != LUA_TFUNCTION)
    return kl_lua_error(L, "httpd.listen", "handler must be a function");
  int hidx = lua_gettop(L);

  lsrv_t **box = lua_newuserdata(L, sizeof *box);
  *box = NULL;
  luaL_getmetatable(L, SERVER_MT);
  lua_setmetatable(L, -2);
  lsrv_t *s = kl_xcalloc(1, sizeof *s);
  s->rt = rt;
  s->gen = kl_rt_generation(rt);
  s->while_stopping = while_stopping;
  s->handler_ref = s->self_ref = LUA_NOREF;
  *box = s;
  o.handler = on_request;
  o.ud = s;
  char err[256] = "";
  s->h = kl_httpd_new(kl_rt_loop(rt), &o, err, sizeof err);
  if (!s->h) {
    lua_pushnil(L);
    lua_pushfstring(L, "httpd.listen: %s", err);
    return 2;
  }
  lua_pushvalue(L, hidx);
  s->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, -1);
  s->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

/* Runs a handler in its task; answers 500 for one that did not answer. */
static const char runner_src[] =
    "local core = require 'kubelua.core'\n"
    "local xpcall, traceback, tostring = xpcall, debug.traceback, tostring\n"
    "return function(handler, req)\n"
    "  local ok, err = xpcall(handler, traceback, req)\n"
    "  if not ok then core.log('error', 'httpd handler failed: ' .. "
    "tostring(err)) end\n"
    "  if not req:answered() and req:alive() then\n"
    "    req:reply(500, {['Content-Type'] = 'text/plain; charset=utf-8'},\n"
    "      ok and 'handler did not answer\\n' or 'internal error\\n')\n"
    "  end\n"
    "end\n";

char *kl_lua_newbytes(lua_State *L, size_t len) {
  lbytes_t *b = lua_newuserdata(L, sizeof *b + len);
  b->len = len;
  kl_lua_push_bytes_mt(L);
  lua_setmetatable(L, -2);
  return b->data;
}

static const luaL_Reg httpd_funcs[] = {
    {"listen", l_listen},
    {"join", l_join},
    {NULL, NULL},
};

static void new_methods_mt(lua_State *L, const char *name,
                           const luaL_Reg *methods, lua_CFunction gc) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  kl_lua_push_bytes_mt(L);
  lua_pushvalue(L, -3);
  luaL_setfuncs(L, methods, 2); /* UV_BYTES_MT, UV_OWN_MT */
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
}

int kl_luaopen_httpd(lua_State *L) {
  new_methods_mt(L, SERVER_MT, srv_methods, srv_gc);
  new_methods_mt(L, REQ_MT, req_methods, req_gc);
  lua_getfield(L, LUA_REGISTRYINDEX, RUNNER_KEY);
  int have = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (!have) {
    lua_newtable(L);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "kubelua.core");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "spawn");
    lua_setfield(L, -3, "spawn");
    lua_pop(L, 1);
    if (luaL_loadbuffer(L, runner_src, sizeof runner_src - 1,
                        "=kubelua.httpd") != 0)
      return lua_error(L);
    lua_call(L, 0, 1);
    lua_setfield(L, -2, "run");
    lua_setfield(L, LUA_REGISTRYINDEX, RUNNER_KEY);
  }
  lua_newtable(L);
  kl_lua_push_bytes_mt(L);
  luaL_setfuncs(L, httpd_funcs, 1); /* UV_BYTES_MT */
  return 1;
}
