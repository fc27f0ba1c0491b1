/* lua_kubeconfig.c — where the API server is and how to authenticate, for
 * Lua: require "kubelua.kubeconfig".
 *
 *   load{kubeconfig =, context =, env = {NAME = value}?, sa_dir =?}
 *     -> config, creds | nil, message
 *
 * config is a plain table of what is not secret (server, namespace,
 * origin, TLS files or PEM bytes, insecure) plus the client key and the
 * static token when the kubeconfig holds them; creds is a userdata whose
 * :token() returns the current bearer token — re-reading a token file as it
 * ages and running an exec plugin when needed (a plugin run blocks the loop,
 * bounded by its 30 s timeout; :poll_token() is the same without blocking) —
 * :invalidate(start) drops it after a 401 to a request that started at :now(),
 * and informers take it (opts.watch.creds) to ask it before each list and
 * watch. Nothing here logs a secret; error messages never quote one. env and
 * sa_dir exist for tests: by default the process environment and the
 * service-account directory are read. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kubeconfig.h"
#include "lua_kube.h"
#include "lua_kubeconfig.h"

#define CREDS_MT "kubelua.kubeconfig.creds"

typedef struct creds_box {
  kl_kc_creds_t *c;
} creds_box_t;

/* getenv over a Lua table kept at a registry reference for one call. */
typedef struct env_ctx {
  lua_State *L;
  int idx;
} env_ctx_t;

static const char *table_getenv(void *ud, const char *name) {
  env_ctx_t *e = ud;
  lua_getfield(e->L, e->idx, name);
  const char *v = lua_tostring(e->L, -1); /* stays alive in the table */
  lua_pop(e->L, 1);
  return v;
}

static void set_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static void set_pem(lua_State *L, const char *file_key, const char *pem_key,
                    const kl_kc_pem_t *p) {
  set_str(L, file_key, p->path);
  if (p->data) {
    lua_pushlstring(L, p->data, p->len);
    lua_setfield(L, -2, pem_key);
  }
}

static int creds_gc(lua_State *L) {
  creds_box_t *b = lua_touserdata(L, 1);
  kl_kc_creds_free(b->c);
  b->c = NULL;
  return 0;
}

/* creds:token() -> token | nil (no token auth) | nil, message */
static int creds_token(lua_State *L) {
  creds_box_t *b = luaL_checkudata(L, 1, CREDS_MT);
  const char *token = NULL;
  char err[256];
  int rc = kl_kc_token(b->c, &token, err, sizeof err);
  if (token) { /* KL_EIO with a token: a failed re-read, the old one holds */
    lua_pushstring(L, token);
    return 1;
  }
  lua_pushnil(L);
  if (rc == 0) return 1;
  lua_pushstring(L, err);
  return 2;
}

/* creds:poll_token() -> token | nil (no token auth) | nil, message |
 * nil, message, "pending" while an exec plugin runs (ask again soon): the
 * non-blocking :token(), for tasks, which sleep between asks. */
static int creds_poll_token(lua_State *L) {
  creds_box_t *b = luaL_checkudata(L, 1, CREDS_MT);
  const char *token = NULL;
  char err[256];
  int rc = kl_kc_token_nowait(b->c, &token, err, sizeof err);
  if (token) {
    lua_pushstring(L, token);
    return 1;
  }
  lua_pushnil(L);
  if (rc == 0) return 1;
  lua_pushstring(L, err);
  if (rc != KL_EAGAIN) return 2;
  lua_pushliteral(L, "pending");
  return 3;
}

/* creds:client_cert() -> cert, key (PEM) | nil: the client certificate an
 * exec plugin returned with the current credential (ask after :token() or
 * :poll_token(), which run the plugin). A kubeconfig's own client
 * certificate is in the config instead. */
static int creds_client_cert(lua_State *L) {
  creds_box_t *b = luaL_checkudata(L, 1, CREDS_MT);
  kl_kc_cred_t cred;
  char err[256];
  int rc = kl_kc_creds_get(b->c, &cred, err, sizeof err);
  if ((rc != 0 && rc != KL_EIO) || !cred.cert || !cred.key) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushlstring(L, cred.cert, cred.cert_len);
  lua_pushlstring(L, cred.key, cred.key_len);
  return 2;
}

/* creds:invalidate([request_start]) after a 401; request_start is a
 * creds:now() reading taken when the refused request started. */
static int creds_invalidate(lua_State *L) {
  creds_box_t *b = luaL_checkudata(L, 1, CREDS_MT);
  kl_kc_invalidate(b->c, luaL_optnumber(L, 2, kl_kc_creds_now(b->c)));
  return 0;
}

/* creds:now() -> the credentials' clock (monotonic seconds). */
static int creds_now(lua_State *L) {
  creds_box_t *b = luaL_checkudata(L, 1, CREDS_MT);
  lua_pushnumber(L, kl_kc_creds_now(b->c));
  return 1;
}

kl_kc_creds_t *kl_lua_kc_creds(lua_State *L, int idx) {
  creds_box_t *b = luaL_testudata(L, idx, CREDS_MT);
  return b ? b->c : NULL;
}

static int l_load(lua_State *L) {
  kl_kc_opts_t o = {0};
  env_ctx_t env = {L, 0};
  char err[512];
  if (!lua_isnoneornil(L, 1) && lua_type(L, 1) != LUA_TTABLE)
    return kl_lua_error(L, "kubeconfig.load", "opts must be a table, got %s",
                        luaL_typename(L, 1));
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_getfield(L, 1, "kubeconfig");
    o.kubeconfig = lua_tostring(L, -1);
    lua_getfield(L, 1, "context");
    o.context = lua_tostring(L, -1);
    lua_getfield(L, 1, "sa_dir");
    o.sa_dir = lua_tostring(L, -1);
    lua_getfield(L, 1, "env");
    if (lua_type(L, -1) == LUA_TTABLE) {
      env.idx = lua_gettop(L);
      o.getenv = table_getenv;
      o.getenv_ud = &env;
    }
  }
  kl_kc_config_t *cfg = NULL;
  int rc = kl_kc_load(&o, &cfg, err, sizeof err);
  if (rc != 0) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  lua_createtable(L, 0, 12);
  set_str(L, "server", cfg->server);
  set_str(L, "namespace", cfg->namespace);
  set_str(L, "origin", cfg->origin);
  set_str(L, "context", cfg->context);
  set_str(L, "tls_server_name", cfg->tls_server_name);
  lua_pushboolean(L, cfg->insecure);
  lua_setfield(L, -2, "insecure");
  set_pem(L, "ca_file", "ca", &cfg->ca);
  set_pem(L, "cert_file", "cert", &cfg->client_cert);
  set_pem(L, "key_file", "key", &cfg->client_key);

  creds_box_t *b = lua_newuserdata(L, sizeof *b);
  b->c = NULL;
  luaL_getmetatable(L, CREDS_MT);
  lua_setmetatable(L, -2);
  b->c = kl_kc_creds_new(cfg, NULL);
  kl_kc_config_free(cfg);
  return 2;
}

int kl_luaopen_kubeconfig(lua_State *L) {
  if (luaL_newmetatable(L, CREDS_MT)) {
    lua_pushcfunction(L, creds_gc);
    lua_setfield(L, -2, "__gc");
    lua_newtable(L);
    lua_pushcfunction(L, creds_token);
    lua_setfield(L, -2, "token");
    lua_pushcfunction(L, creds_invalidate);
    lua_setfield(L, -2, "invalidate");
    lua_pushcfunction(L, creds_now);
    lua_setfield(L, -2, "now");
    lua_pushcfunction(L, creds_poll_token);
    lua_setfield(L, -2, "poll_token");
    lua_pushcfunction(L, creds_client_cert);
    lua_setfield(L, -2, "client_cert");
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "kubeconfig credentials");
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushcfunction(L, l_load);
  lua_setfield(L, -2, "load");
  return 1;
}
