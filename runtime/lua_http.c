/* lua_http.c — kube.http.request: HTTP from a task, yielding until the
 * answer arrives.
 *
 * Requests share the runtime's kl_http_t (kl_rt_http), which outlives the
 * Lua state. A request's state lives in a userdata kept on the calling task's
 * stack while it waits: the completion fills it and wakes the task; if the
 * task ends first (a stop), the userdata is collected and its __gc cancels
 * the request, so a late completion finds nothing to resume (STYLE rule 13).
 * The response body is gathered in C up to a cap and handed over as one
 * string. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "http.h"
#include "lua_kube.h"
#include "mem.h"

#define OP_MT "kubelua.http.op"
#define MAX_BODY (256u << 20)
#define MAX_HEADERS 64

typedef struct op {
  kl_http_req_t *req;
  lua_State *L; /* the main state, for the registry */
  int ref;      /* keeps the op alive while the request is in flight */
  kl_waitlist_t wl;
  int done, err;
  int status;
  char msg[256];
  char *body;
  size_t len, cap;
  /* response headers, copied at on_head: "name\0value\0" pairs */
  char *heads;
  size_t hlen;
} op_t;

static int op_gc(lua_State *L) {
  op_t *op = lua_touserdata(L, 1);
  if (op->req && !op->done) kl_http_cancel(op->req);
  op->req = NULL;
  free(op->body);
  free(op->heads);
  op->body = op->heads = NULL;
  return 0;
}

static const char *const kept_headers[] = {
    "content-type", "retry-after", "warning",
    "location",     "audit-id",    "x-kubernetes-pf-flowschema-uid",
    NULL,
};

static int on_head(kl_http_req_t *req, int status, void *ud) {
  op_t *op = ud;
  op->status = status;
  for (const char *const *h = kept_headers; *h; h++) {
    const char *v = kl_http_header(req, *h);
    if (!v) continue;
    size_t nl = strlen(*h), vl = strlen(v);
    op->heads = kl_xrealloc(op->heads, op->hlen + nl + vl + 2);
    memcpy(op->heads + op->hlen, *h, nl + 1);
    memcpy(op->heads + op->hlen + nl + 1, v, vl + 1);
    op->hlen += nl + vl + 2;
  }
  return 0;
}

static int on_data(kl_http_req_t *req, const char *p, size_t n, void *ud) {
  op_t *op = ud;
  (void)req;
  if (op->len + n > MAX_BODY) {
    snprintf(op->msg, sizeof op->msg, "response body larger than %u bytes",
             MAX_BODY);
    return 1;
  }
  if (op->len + n > op->cap) {
    op->cap = (op->len + n) * 2;
    op->body = kl_xrealloc(op->body, op->cap);
  }
  memcpy(op->body + op->len, p, n);
  op->len += n;
  return 0;
}

static void on_done(kl_http_req_t *req, int err, const char *msg, void *ud) {
  op_t *op = ud;
  (void)req;
  op->done = 1;
  op->req = NULL;
  op->err = err;
  if (err && !op->msg[0]) snprintf(op->msg, sizeof op->msg, "%s", msg);
  kl_waitlist_wake(&op->wl, 1);
}

/* Pushes the outcome: a response table, or nil, message, code. */
static int push_result(lua_State *L, op_t *op) {
  if (op->err) {
    lua_pushnil(L);
    lua_pushfstring(L, "http: %s", op->msg);
    lua_pushstring(L, op->err == KL_ETIMEDOUT ? "Timeout" : "Transport");
    return 3;
  }
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, op->status);
  lua_setfield(L, -2, "status");
  lua_pushlstring(L, op->body ? op->body : "", op->len);
  lua_setfield(L, -2, "body");
  lua_newtable(L);
  for (size_t i = 0; i < op->hlen;) {
    const char *n = op->heads + i, *v = n + strlen(n) + 1;
    lua_pushstring(L, v);
    lua_setfield(L, -2, n);
    i = (size_t)(v - op->heads) + strlen(v) + 1;
  }
  lua_setfield(L, -2, "headers");
  return 1;
}

static void release(op_t *op) {
  luaL_unref(op->L, LUA_REGISTRYINDEX, op->ref);
  op->ref = LUA_NOREF;
}

static int deliver(kl_task_t *t, lua_State *co, void *ud) {
  op_t *op = ud;
  (void)t;
  if (!op->done) return -1;
  int n = push_result(co, op);
  free(op->body);
  op->body = NULL;
  release(op);
  return n;
}

/* The waiting task died: nobody wants the answer any more. */
static void cancel(kl_task_t *t, void *ud) {
  op_t *op = ud;
  (void)t;
  if (op->req && !op->done) kl_http_cancel(op->req);
  op->req = NULL;
  op->done = 1;
  release(op);
}

static const char *opt_str(lua_State *L, const char *k, size_t *len) {
  lua_getfield(L, 1, k);
  const char *v = NULL;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      kl_lua_error(L, "kube.http.request", "opts.%s must be a string, got %s",
                   k, luaL_typename(L, -1));
    v = lua_tolstring(L, -1, len);
  }
  lua_pop(L, 1); /* the string stays alive in the opts table */
  return v;
}

/* kube.http.request{method=, url=, headers={name=value…}, body=, timeout=,
 * connect_timeout=, idle_timeout=, tls={ca_file=, ca=, cert_file=, cert=,
 * key_file=, key=, insecure=, server_name=}}
 * -> {status=, headers={lower-case name=value}, body=} | nil, msg, code.
 * Only inside a task; HTTP statuses are results, not errors. */
static int l_request(lua_State *L) {
  kl_rt_t *rt = kl_rt_from(L);
  kl_task_t *t = kl_task_current(rt, L);
  char err[256];
  size_t n;
  if (lua_type(L, 1) != LUA_TTABLE)
    return kl_lua_error(L, "kube.http.request", "opts must be a table, got %s",
                        luaL_typename(L, 1));
  if (!t)
    return kl_lua_error(L, "kube.http.request",
                        "not inside a task (use kube.spawn or a worker)");
  lua_settop(L, 1);
  kl_http_opts_t o = {0};
  kl_http_tls_t tls = {0};
  o.method = opt_str(L, "method", &n);
  o.url = opt_str(L, "url", &n);
  if (!o.url)
    return kl_lua_error(L, "kube.http.request", "opts.url is required");
  o.body = opt_str(L, "body", &o.body_len);
  lua_getfield(L, 1, "timeout");
  o.timeout = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 30;
  lua_getfield(L, 1, "connect_timeout");
  o.connect_timeout = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0;
  lua_getfield(L, 1, "idle_timeout");
  o.idle_timeout = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0;
  lua_pop(L, 3);

  /* Header lines live in Lua strings on the stack until the call returns
   * (kl_http_start copies them). */
  const char *lines[MAX_HEADERS + 1];
  size_t nl = 0;
  lua_getfield(L, 1, "headers");
  if (lua_type(L, -1) == LUA_TTABLE) {
    int ht = lua_gettop(L);
    luaL_checkstack(L, MAX_HEADERS + 8, "kube.http.request: too many headers");
    lua_pushnil(L);
    while (lua_next(L, ht)) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        return kl_lua_error(L, "kube.http.request",
                            "headers must map names to string values");
      if (nl == MAX_HEADERS)
        return kl_lua_error(L, "kube.http.request", "too many headers");
      lua_pushfstring(L, "%s: %s", lua_tostring(L, -2), lua_tostring(L, -1));
      lua_insert(L, ht); /* keep the line below the iteration */
      ht++;
      lines[nl++] = lua_tostring(L, ht - 1);
      lua_pop(L, 1);
    }
  } else if (!lua_isnil(L, -1)) {
    return kl_lua_error(L, "kube.http.request",
                        "opts.headers must be a table, got %s",
                        luaL_typename(L, -1));
  }
  lines[nl] = NULL;
  o.headers = lines;

  lua_getfield(L, 1, "tls");
  if (lua_type(L, -1) == LUA_TTABLE) {
    int tt = lua_gettop(L);
    lua_getfield(L, tt, "ca_file");
    tls.ca_file = lua_tostring(L, -1);
    lua_getfield(L, tt, "ca");
    tls.ca_pem = lua_tolstring(L, -1, &tls.ca_pem_len);
    lua_getfield(L, tt, "cert_file");
    tls.cert_file = lua_tostring(L, -1);
    lua_getfield(L, tt, "cert");
    tls.cert_pem = lua_tolstring(L, -1, &tls.cert_pem_len);
    lua_getfield(L, tt, "key_file");
    tls.key_file = lua_tostring(L, -1);
    lua_getfield(L, tt, "key");
    tls.key_pem = lua_tolstring(L, -1, &tls.key_pem_len);
    lua_getfield(L, tt, "insecure");
    tls.insecure = lua_toboolean(L, -1);
    lua_getfield(L, tt, "server_name");
    tls.server_name = lua_tostring(L, -1);
    o.tls = &tls;
  }

  op_t *op = lua_newuserdata(L, sizeof *op);
  memset(op, 0, sizeof *op);
  luaL_getmetatable(L, OP_MT);
  lua_setmetatable(L, -2);
  op->L = kl_rt_lua(rt);
  op->ref = LUA_NOREF;
  o.on_head = on_head;
  o.on_data = on_data;
  o.on_done = on_done;
  o.ud = op;
  kl_http_t *h = kl_rt_http(rt);
  if (!h)
    return kl_lua_error(L, "kube.http.request", "cannot initialise libcurl");
  op->req = kl_http_start(h, &o, err, sizeof err);
  if (!op->req) {
    lua_pushnil(L);
    lua_pushfstring(L, "http: %s", err);
    lua_pushliteral(L, "Invalid");
    return 3;
  }
  lua_pushvalue(L, -1);
  op->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  kl_task_set_cancel(t, cancel);
  return kl_task_wait(L, &op->wl, deliver, op);
}

int kl_luaopen_http(lua_State *L) {
  if (luaL_newmetatable(L, OP_MT)) {
    lua_pushcfunction(L, op_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushcfunction(L, l_request);
  lua_setfield(L, -2, "request");
  return 1;
}
