/* lua_informer.c — informers in Lua: handlers, the cache, and feeding.
 *
 * An informer value is a userdata pointing at a C binding that owns the
 * kl_informer_t. Handlers are listeners of its processor: each keeps a
 * registry reference to its Lua function and is called from the loop's
 * deferred work (never from inside a Lua call), with an event table:
 *   ev.type ("add" | "update" | "delete"), ev.key, ev.initial, ev.tombstone,
 *   ev.sync, and ev.object / ev.old decoded on first access.
 * The event table holds a small userdata with references to the objects;
 * the decoded tables are fresh copies, so nothing a handler does to them can
 * change the cache. Reads (get, list, by_index) decode fresh tables too.
 *
 * A handler that raises is logged with its informer, name and key; one
 * that takes 100 ms or more is reported as holding the loop.
 *
 * The cache has client-go's "namespace" index from the start; custom
 * indexers and the transform are Lua functions that C calls while the store
 * changes; their errors are reported, never fatal. While a batch of deltas
 * is processed the informer's userdata is kept on the stack, so a handler
 * that drops the last reference cannot get it freed under the batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "http.h"
#include "informer.h"
#include "log.h"
#include "lua_json.h"
#include "lua_kube.h"
#include "lua_kubeconfig.h"
#include "mem.h"
#include "reflector.h"

#define INFORMER_MT "kubelua.informer"
#define HANDLE_MT "kubelua.informer.handler"
#define OBJREF_MT "kubelua.objref"
#define EVENT_MT_KEY "kubelua.event.mt"
#define KIT_KEY "kubelua.event.kit"      /* what push_event needs, by index */
#define LIVE_KEY "kubelua.informer.live" /* id -> informer, weak values */
#define BUDGET 512
/* A handler call this long (seconds) is reported: it holds the loop, and
 * with it every other handler, watch and worker (client-go traces 100 ms). */
#define SLOW_HANDLER 0.1

typedef struct linf {
  kl_informer_t *inf;
  kl_rt_t *rt;
  lua_State *L;
  kl_defer_t defer;
  int transform_ref;
  int kit_ref; /* the registry's KIT_KEY table: one handler call uses it */
  int id;      /* its slot in the registry's table of live informers */
  bool in_transform; /* the transform runs: feeding is refused */
  /* The thread that calls transform and index functions: the main state
   * when the loop drives the informer, the calling task's thread while a
   * method (feed, add, …) runs. Lua code never runs on a thread other than
   * the one in control: LuaJIT's traces assume it. */
  lua_State *cur;
  kl_reflector_t *refl;     /* list+watch feeding it, or NULL (fed by hand) */
  kl_http_tls_t *tls;       /* the reflector's TLS settings (owned copies) */
  kl_kc_creds_t *creds;     /* its credentials (a reference), or NULL */
  double auth_at;           /* when they were last asked, on their clock */
  struct handler *handlers; /* registered, for retiring by generation */
  char name[64];
  char busy[96]; /* "a handler of informer NAME", for the watchdog */
  /* The error that ended the reflector's last failed round ("" when none
   * has failed): stats().last_error, so a test harness can say why an
   * informer does not sync. */
  char last_error[256];
} linf_t;

/* One handler (listener): which event types it wants, and its function. */
typedef struct handler {
  linf_t *owner;
  uint64_t id;
  int fn_ref;
  unsigned types; /* bit per kl_proc_note_type_t */
  unsigned gen;   /* the script generation that registered it */
  struct handler *prev, *next;
  char name[64];
} handler_t;

typedef struct handle {
  linf_t *owner;
  uint64_t id;
} handle_t;

/* The objects behind an event: released when the event table is collected. */
typedef struct objref {
  kl_obj_t *obj, *old;
} objref_t;

/* Custom indexer: a Lua function obj -> list of strings. */
typedef struct lindex {
  linf_t *owner;
  int fn_ref;
  char name[64];
} lindex_t;

static linf_t *check_informer(lua_State *L, const char *fn) {
  linf_t **box = luaL_testudata(L, 1, INFORMER_MT);
  if (!box || !*box)
    kl_lua_error(L, fn, "expected an informer, got %s", luaL_typename(L, 1));
  return *box;
}

/* Decoding */

/* Pushes the Lua table of an object, or raises. */
static void push_obj(lua_State *L, const kl_obj_t *o) {
  char err[128];
  kl_json_span_t j = kl_obj_json(o);
  if (kl_lua_json_decode(L, j.p, j.n, err, sizeof err) != 0)
    luaL_error(L, "informer: cached object does not decode: %s", err);
}

static int encode_cf(lua_State *L) {
  kl_lua_json_encode(L, 1);
  return 1;
}

/* Pushes the exact JSON of the table at idx and returns 0, or pushes nothing
 * and returns -1 with the encoder's message in err. Never raises. */
static int safe_encode(lua_State *L, int idx, char *err, size_t errlen) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  lua_pushcfunction(L, encode_cf);
  lua_pushvalue(L, idx);
  if (lua_pcall(L, 1, 1, 0) != 0) {
    snprintf(err, errlen, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return -1;
  }
  return 0;
}

/* Builds an object from a Lua value: a table (encoded exactly) or a JSON
 * string. Returns 0 with a new reference, or raises. */
static kl_obj_t *to_obj(lua_State *L, linf_t *li, int idx, const char *fn) {
  char err[256];
  size_t n;
  const char *p;
  kl_obj_t *o;
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  if (lua_type(L, idx) == LUA_TTABLE) {
    kl_lua_json_encode(L, idx);
    p = lua_tolstring(L, -1, &n);
  } else if (lua_type(L, idx) == LUA_TSTRING) {
    lua_pushvalue(L, idx);
    p = lua_tolstring(L, -1, &n);
  } else {
    kl_lua_error(L, fn, "object must be a table or JSON text, got %s",
                 luaL_typename(L, idx));
    return NULL;
  }
  if (kl_informer_parse(li->inf, p, n, &o, err, sizeof err) != 0)
    kl_lua_error(L, fn, "%s", err);
  lua_pop(L, 1);
  return o;
}

/* Events */

static int objref_gc(lua_State *L) {
  objref_t *r = lua_touserdata(L, 1);
  kl_obj_unref(r->obj);
  kl_obj_unref(r->old);
  r->obj = r->old = NULL;
  return 0;
}

/* __index of event tables: decodes "object" and "old" once. */
static int event_index(lua_State *L) {
  const char *k = lua_tostring(L, 2);
  int which = k && strcmp(k, "object") == 0 ? 1
              : k && strcmp(k, "old") == 0  ? 2
                                            : 0;
  if (!which) return 0;
  lua_rawgeti(L, 1, 0); /* the objref, kept at index 0 */
  objref_t *r = lua_touserdata(L, -1);
  const kl_obj_t *o = r ? (which == 1 ? r->obj : r->old) : NULL;
  if (!o) return 0;
  push_obj(L, o);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  return 1;
}

static const char *const note_names[] = {"", "add", "update", "delete"};

/* The kit: an array of the strings and metatables an event is made of,
 * built once per Lua state, so that a handler call finds each by index
 * instead of interning a name (lua_setfield, luaL_getmetatable) or making
 * a closure (lua_pushcfunction) every time. The type names sit at
 * KIT_NAMES + kl_proc_note_type_t. */
enum {
  KIT_TRACEBACK = 1,
  KIT_OBJREF_MT,
  KIT_EVENT_MT,
  KIT_F_TYPE,
  KIT_F_KEY,
  KIT_NAMES /* + 1 .. 3: "add", "update", "delete" */
};

static void make_kit(lua_State *L) {
  lua_createtable(L, KIT_NAMES + 3, 0);
  lua_pushcfunction(L, kl_lua_traceback);
  lua_rawseti(L, -2, KIT_TRACEBACK);
  luaL_getmetatable(L, OBJREF_MT);
  lua_rawseti(L, -2, KIT_OBJREF_MT);
  lua_getfield(L, LUA_REGISTRYINDEX, EVENT_MT_KEY);
  lua_rawseti(L, -2, KIT_EVENT_MT);
  lua_pushliteral(L, "type");
  lua_rawseti(L, -2, KIT_F_TYPE);
  lua_pushliteral(L, "key");
  lua_rawseti(L, -2, KIT_F_KEY);
  for (int t = 1; t <= 3; t++) {
    lua_pushstring(L, note_names[t]);
    lua_rawseti(L, -2, KIT_NAMES + t);
  }
  lua_setfield(L, LUA_REGISTRYINDEX, KIT_KEY);
}

/* Pushes the event table of n; kit is the kit's (absolute) stack index.
 * Its hash part is sized for the fields it gets (type, key and the flags
 * that are true), not for "object" and "old", which only a handler that
 * reads them adds: every event's table, its hash nodes most of it, is work
 * for the collector. */
static void push_event(lua_State *L, int kit, const kl_proc_note_t *n) {
  lua_createtable(L, 1, 2 + n->initial + n->tombstone + n->sync);
  lua_rawgeti(L, kit, KIT_F_TYPE);
  lua_rawgeti(L, kit, KIT_NAMES + (int)n->type);
  lua_rawset(L, -3);
  lua_rawgeti(L, kit, KIT_F_KEY);
  lua_pushlstring(L, n->key, n->len);
  lua_rawset(L, -3);
  if (n->initial) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "initial");
  }
  if (n->tombstone) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "tombstone");
  }
  if (n->sync) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "sync");
  }
  objref_t *r = lua_newuserdata(L, sizeof *r);
  r->obj = n->obj ? kl_obj_ref(n->obj) : NULL;
  r->old = n->old ? kl_obj_ref(n->old) : NULL;
  lua_rawgeti(L, kit, KIT_OBJREF_MT);
  lua_setmetatable(L, -2);
  lua_rawseti(L, -2, 0);
  lua_rawgeti(L, kit, KIT_EVENT_MT);
  lua_setmetatable(L, -2);
}

static void call_handler(kl_proc_t *p, uint64_t id, const kl_proc_note_t *n,
                         void *ud) {
  handler_t *h = ud;
  lua_State *L = h->owner->L;
  (void)p;
  (void)id;
  if (!(h->types & (1u << n->type))) return;
  lua_checkstack(L, 10);
  int base = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, h->owner->kit_ref);
  lua_rawgeti(L, base + 1, KIT_TRACEBACK);
  lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn_ref);
  push_event(L, base + 1, n);
  kl_gen_scope_t saved;
  kl_rt_gen_enter(h->owner->rt, h->gen, &saved);
  double t0 = kl_clock_monotonic(NULL);
  int rc = lua_pcall(L, 1, 0, base + 2);
  double took = kl_clock_monotonic(NULL) - t0;
  kl_rt_gen_leave(h->owner->rt, &saved);
  /* The handler may have removed itself: h lives until this returns. */
  if (rc != 0 || took >= SLOW_HANDLER) {
    char fields[256];
    snprintf(fields, sizeof fields, " informer=%s handler=%s key=%.*s",
             h->owner->name, h->name, (int)(n->len < 128 ? n->len : 128),
             n->key);
    if (rc != 0)
      kl_log_fields(KL_LOG_ERROR, fields, "handler failed: %s",
                    lua_tostring(L, -1));
    if (took >= SLOW_HANDLER)
      kl_log_fields(KL_LOG_WARN, fields, "slow handler: %.3fs holding the loop",
                    took);
  }
  lua_settop(L, base);
}

static void handler_free(void *ud) {
  handler_t *h = ud;
  if (h->prev)
    h->prev->next = h->next;
  else if (h->owner->handlers == h)
    h->owner->handlers = h->next;
  if (h->next) h->next->prev = h->prev;
  if (h->owner->L) luaL_unref(h->owner->L, LUA_REGISTRYINDEX, h->fn_ref);
  free(h);
}

/* Scheduling */

/* Runs a batch. The informer's userdata stays on the stack meanwhile: a
 * handler that drops the last reference to it must not get it collected
 * (and freed) in the middle of the batch. A userdata already being
 * collected is gone from the weak table, and its __gc frees everything. */
static void run_deferred(kl_defer_t *d) {
  linf_t *li = (linf_t *)((char *)d - offsetof(linf_t, defer));
  lua_State *L = li->L;
  int base = lua_gettop(L);
  lua_checkstack(L, 4);
  lua_getfield(L, LUA_REGISTRYINDEX, LIVE_KEY);
  lua_rawgeti(L, -1, li->id);
  if (!lua_isnil(L, -1)) {
    kl_rt_busy_enter(li->rt, li->busy);
    bool more = kl_informer_run(li->inf, BUDGET);
    kl_rt_busy_leave(li->rt);
    if (more) kl_loop_defer(kl_rt_loop(li->rt), &li->defer);
  }
  lua_settop(L, base);
}

static void on_work(kl_informer_t *inf, void *ud) {
  linf_t *li = ud;
  (void)inf;
  kl_loop_defer(kl_rt_loop(li->rt), &li->defer);
}

/* Transform: a Lua function obj -> obj, applied before caching. A failure
 * is reported in err: the caller returns it or logs it. */
static int lua_transform(void *ud, kl_obj_t *in, kl_obj_t **out, char *err,
                         size_t errlen) {
  linf_t *li = ud;
  lua_State *L = li->L;
  char why[256];
  int base = lua_gettop(L), rc = KL_EINVAL;
  lua_checkstack(L, 8);
  lua_pushcfunction(L, kl_lua_traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, li->transform_ref);
  kl_json_span_t j = kl_obj_json(in);
  if (kl_lua_json_decode(L, j.p, j.n, why, sizeof why) != 0) {
    snprintf(err, errlen, "transform: %s", why);
    goto done;
  }
  li->in_transform = true;
  int prc = lua_pcall(L, 1, 1, base + 1);
  li->in_transform = false;
  if (prc != 0) {
    snprintf(err, errlen, "transform failed: %s", lua_tostring(L, -1));
    goto done;
  }
  if (lua_type(L, -1) != LUA_TTABLE) {
    snprintf(err, errlen, "transform returned %s, not a table",
             luaL_typename(L, -1));
    goto done;
  }
  {
    size_t n;
    if (safe_encode(L, -1, why, sizeof why) != 0) {
      snprintf(err, errlen, "transform result: %s", why);
      goto done;
    }
    const char *p = lua_tolstring(L, -1, &n);
    if (kl_informer_parse(li->inf, p, n, out, why, sizeof why) != 0) {
      snprintf(err, errlen, "transform result: %s", why);
      goto done;
    }
  }
  rc = 0;
done:
  lua_settop(L, base);
  return rc;
}

/* Indexers */

static int lua_index(const kl_obj_t *o, void *ud, kl_store_emit_fn *emit,
                     void *ctx) {
  lindex_t *ix = ud;
  lua_State *L = ix->owner->cur;
  int base = lua_gettop(L), rc = 0;
  lua_checkstack(L, 8);
  char err[160];
  kl_json_span_t j = kl_obj_json(o);
  lua_pushcfunction(L, kl_lua_traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, ix->fn_ref);
  if (kl_lua_json_decode(L, j.p, j.n, err, sizeof err) != 0) {
    kl_store_index_fail(ctx, err);
    rc = KL_EINVAL;
  } else if (lua_pcall(L, 1, 1, base + 1) != 0) {
    kl_store_index_fail(ctx, lua_tostring(L, -1));
    rc = KL_EINVAL;
  } else if (lua_type(L, -1) == LUA_TTABLE) {
    int t = lua_gettop(L);
    size_t n = lua_objlen(L, t);
    for (size_t i = 1; i <= n && rc == 0; i++) {
      lua_rawgeti(L, t, (int)i);
      size_t len;
      /* Check first: lua_tolstring would turn a number into a string. */
      const char *v =
          lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
      if (!v) {
        kl_store_index_fail(ctx, "index function returned a value that is "
                                 "not a string");
        rc = KL_EINVAL;
      } else {
        rc = emit(ctx, v, len);
      }
      lua_pop(L, 1);
    }
  } else if (!lua_isnil(L, -1)) {
    kl_store_index_fail(ctx, "index function must return a list of strings");
    rc = KL_EINVAL;
  }
  lua_settop(L, base);
  return rc;
}

static void lindex_free(void *ud) {
  lindex_t *ix = ud;
  if (ix->owner->L) luaL_unref(ix->owner->L, LUA_REGISTRYINDEX, ix->fn_ref);
  free(ix);
}

/* Reads an indexers table {name = fn | {label = "k"} | "controller"} and adds
 * them to the store. */
static void add_indexers(lua_State *L, linf_t *li, int idx, const char *fn) {
  char err[256];
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  if (lua_type(L, idx) != LUA_TTABLE)
    kl_lua_error(L, fn, "indexers must be a table, got %s",
                 luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      kl_lua_error(L, fn, "indexer names must be strings");
    kl_store_indexer_t ix = {0};
    ix.name = lua_tostring(L, -2);
    if (lua_type(L, -1) == LUA_TFUNCTION) {
      lindex_t *li_ix = kl_xcalloc(1, sizeof *li_ix);
      li_ix->owner = li;
      snprintf(li_ix->name, sizeof li_ix->name, "%s", ix.name);
      lua_pushvalue(L, -1);
      li_ix->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
      ix.kind = KL_STORE_INDEX_CUSTOM;
      ix.fn = lua_index;
      ix.ud = li_ix;
      ix.ud_free = lindex_free;
    } else if (lua_type(L, -1) == LUA_TSTRING &&
               strcmp(lua_tostring(L, -1), "controller") == 0) {
      ix.kind = KL_STORE_INDEX_CONTROLLER;
    } else if (lua_type(L, -1) == LUA_TSTRING &&
               strcmp(lua_tostring(L, -1), "namespace") == 0) {
      ix.kind = KL_STORE_INDEX_NAMESPACE;
    } else if (lua_type(L, -1) == LUA_TTABLE) {
      lua_getfield(L, -1, "label");
      if (lua_type(L, -1) != LUA_TSTRING)
        kl_lua_error(L, fn, "indexer %s: {label = KEY} needs a string key",
                     ix.name);
      ix.kind = KL_STORE_INDEX_LABEL;
      ix.label = lua_tostring(L, -1);
      lua_pop(L, 1);
    } else {
      kl_lua_error(L, fn,
                   "indexer %s must be a function, {label = KEY}, "
                   "\"controller\" or \"namespace\", got %s",
                   ix.name, luaL_typename(L, -1));
    }
    if (ix.kind == KL_STORE_INDEX_LABEL || ix.kind == KL_STORE_INDEX_CONTROLLER)
      kl_informer_keep_refs(li->inf);
    lua_State *saved_cur = li->cur;
    li->cur = L;
    int rc = kl_store_add_indexers(kl_informer_store(li->inf), &ix, 1, err,
                                   sizeof err);
    li->cur = saved_cur;
    if (rc != 0) {
      if (ix.ud_free) ix.ud_free(ix.ud);
      kl_lua_error(L, fn, "%s", err);
    }
    lua_pop(L, 1);
  }
}

/* kube.local_informer(opts) */

static double opt_number(lua_State *L, int idx, const char *k, double dflt) {
  lua_getfield(L, idx, k);
  double v = dflt;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0))
      kl_lua_error(L, "kube.local_informer",
                   "opts.%s must be a number >= 0, got %s", k,
                   luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

static const char *opt_string(lua_State *L, int idx, const char *k, char *buf,
                              size_t cap) {
  lua_getfield(L, idx, k);
  const char *v = NULL;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      kl_lua_error(L, "kube.local_informer", "opts.%s must be a string, got %s",
                   k, luaL_typename(L, -1));
    snprintf(buf, cap, "%s", lua_tostring(L, -1));
    v = buf;
  }
  lua_pop(L, 1);
  return v;
}

static char *dup_field(lua_State *L, int t, const char *k, size_t *len) {
  size_t n = 0;
  lua_getfield(L, t, k);
  const char *v =
      lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
  char *copy = v ? kl_xstrndup(v, n) : NULL;
  lua_pop(L, 1);
  if (len) *len = n;
  return copy;
}

/* Copies a tls = {ca_file, ca, cert_file, cert, key_file, key, insecure,
 * server_name}
 * table into C memory the reflector can borrow for its lifetime. */
static kl_http_tls_t *read_tls(lua_State *L, int t) {
  kl_http_tls_t *tls = kl_xcalloc(1, sizeof *tls);
  tls->ca_file = dup_field(L, t, "ca_file", NULL);
  tls->ca_pem = dup_field(L, t, "ca", &tls->ca_pem_len);
  tls->cert_file = dup_field(L, t, "cert_file", NULL);
  tls->cert_pem = dup_field(L, t, "cert", &tls->cert_pem_len);
  tls->key_file = dup_field(L, t, "key_file", NULL);
  tls->key_pem = dup_field(L, t, "key", &tls->key_pem_len);
  tls->server_name = dup_field(L, t, "server_name", NULL);
  lua_getfield(L, t, "insecure");
  tls->insecure = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return tls;
}

static void free_tls(kl_http_tls_t *tls) {
  if (!tls) return;
  free((char *)tls->ca_file);
  free((char *)tls->ca_pem);
  free((char *)tls->cert_file);
  free((char *)tls->cert_pem);
  free((char *)tls->key_file);
  free((char *)tls->server_name);
  if (tls->key_pem) /* a secret: cleared before it is freed */
    memset((char *)tls->key_pem, 0, tls->key_pem_len);
  free((char *)tls->key_pem);
  free(tls);
}

/* Replaces a PEM copy (a secret: cleared before it is freed). */
static void set_pem(const char **dst, size_t *dlen, const char *p, size_t n) {
  if (*dst && *dlen == n && memcmp(*dst, p, n) == 0) return;
  if (*dst) memset((char *)*dst, 0, *dlen);
  free((char *)*dst);
  *dst = kl_xstrndup(p, n);
  *dlen = n;
}

/* An exec plugin's client certificate goes into the reflector's TLS
 * settings, which every request copies when it starts. */
static void watch_client_cert(linf_t *li) {
  kl_kc_cred_t cred;
  char err[256];
  int rc = kl_kc_creds_get(li->creds, &cred, err, sizeof err);
  if ((rc != 0 && rc != KL_EIO) || !cred.cert || !cred.key) return;
  set_pem(&li->tls->cert_pem, &li->tls->cert_pem_len, cred.cert, cred.cert_len);
  set_pem(&li->tls->key_pem, &li->tls->key_pem_len, cred.key, cred.key_len);
}

/* The reflector's error handler: the round's error is remembered. */
static void watch_error(kl_reflector_t *r, const char *msg, void *ud) {
  (void)r;
  linf_t *li = ud;
  snprintf(li->last_error, sizeof li->last_error, "%s", msg);
}

/* The reflector's credentials for its next request: the bearer token of
 * li->creds, a token file re-read as it ages or after a 401, an exec
 * plugin run when its credential expired — without blocking the loop: while
 * the plugin runs this says KL_EAGAIN and the reflector asks again. */
static int watch_auth(kl_reflector_t *r, char *line, size_t cap, void *ud) {
  linf_t *li = ud;
  const char *token = NULL;
  char err[256] = "";
  (void)r;
  int rc = kl_kc_token_nowait(li->creds, &token, err, sizeof err);
  li->auth_at = kl_kc_creds_now(li->creds);
  if (!token && rc != 0) {
    snprintf(line, cap, "%s", err);
    return rc;
  }
  if (rc != 0) /* a failed re-read: the last good token holds */
    kl_log(KL_LOG_WARN, "informer %s: %s", li->name, err);
  watch_client_cert(li);
  if (!token) {
    line[0] = '\0';
    return 0;
  }
  if ((size_t)snprintf(line, cap, "Authorization: Bearer %s", token) >= cap) {
    snprintf(line, cap, "the bearer token is too long");
    return KL_ELIMIT;
  }
  return 0;
}

/* A 401: forget the token the refused request carried. */
static void watch_unauthorized(kl_reflector_t *r, void *ud) {
  linf_t *li = ud;
  (void)r;
  kl_kc_invalidate(li->creds, li->auth_at);
}

/* opts.watch = {url =, label_selector =, field_selector =, headers =
 * {name = value}, watch_accept = value, tls = {…}, creds = C, watch_list =
 * bool, backoff_initial = seconds}: a reflector lists and watches url and
 * feeds the cache; watch_accept is the watches' Accept when it differs
 * from the lists' (headers.Accept: a metadata-only informer's); creds
 * (kubelua.kubeconfig's) gives the bearer token of each request, so
 * rotated tokens are picked up; watch_list streams the lists
 * (sendInitialEvents), falling back to list+watch when the server does
 * not (asked once per server and process); backoff_initial is the first
 * backoff wait (0.8 s, client-go's, by default). */
static void start_watch(lua_State *L, linf_t *li, int idx,
                        const kl_informer_opts_t *io) {
  static const char *fn = "kube.informer";
  const char *lines[33];
  size_t nl = 0;
  char err[256];
  if (lua_type(L, idx) != LUA_TTABLE)
    kl_lua_error(L, fn, "opts.watch must be a table, got %s",
                 luaL_typename(L, idx));
  int top = lua_gettop(L);
  kl_reflector_opts_t ro = {0};
  lua_getfield(L, idx, "url");
  ro.url = lua_tostring(L, -1);
  lua_getfield(L, idx, "label_selector");
  ro.label_selector = lua_tostring(L, -1);
  lua_getfield(L, idx, "field_selector");
  ro.field_selector = lua_tostring(L, -1);
  lua_getfield(L, idx, "watch_list");
  ro.watch_list = lua_toboolean(L, -1);
  lua_getfield(L, idx, "backoff_initial");
  if (!lua_isnil(L, -1) &&
      (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0)))
    kl_lua_error(L, fn, "opts.watch.backoff_initial must be a positive number");
  ro.backoff_initial = lua_tonumber(L, -1);
  lua_getfield(L, idx, "watch_accept");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
    kl_lua_error(L, fn, "opts.watch.watch_accept must be a string");
  ro.watch_accept = lua_tostring(L, -1);
  if (!ro.url) kl_lua_error(L, fn, "opts.watch.url is required");
  lua_getfield(L, idx, "headers");
  if (lua_type(L, -1) == LUA_TTABLE) {
    int ht = lua_gettop(L);
    luaL_checkstack(L, 32 + 8, "kube.informer: too many headers");
    lua_pushnil(L);
    while (lua_next(L, ht)) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING ||
          nl == 32)
        kl_lua_error(L, fn, "opts.watch.headers must map names to strings");
      lua_pushfstring(L, "%s: %s", lua_tostring(L, -2), lua_tostring(L, -1));
      lua_insert(L, ht); /* keeps the line alive below the iteration */
      ht++;
      lines[nl++] = lua_tostring(L, ht - 1);
      lua_pop(L, 1);
    }
  }
  lines[nl] = NULL;
  ro.headers = lines;
  lua_getfield(L, idx, "tls");
  if (lua_type(L, -1) == LUA_TTABLE) li->tls = read_tls(L, lua_gettop(L));
  ro.tls = li->tls;
  lua_getfield(L, idx, "creds");
  if (!lua_isnil(L, -1)) {
    kl_kc_creds_t *c = kl_lua_kc_creds(L, -1);
    if (!c)
      kl_lua_error(L, fn, "opts.watch.creds must be kubeconfig credentials");
    li->creds = kl_kc_creds_ref(c);
    if (!li->tls) li->tls = kl_xcalloc(1, sizeof *li->tls);
    ro.tls = li->tls;
    ro.auth = watch_auth;
    ro.on_unauthorized = watch_unauthorized;
    ro.auth_ud = li;
  }
  ro.on_error = watch_error;
  ro.ud = li;
  ro.name = li->name;
  ro.servers = kl_rt_reflector_servers(li->rt);
  ro.api_version = io->api_version;
  ro.kind = io->kind;
  kl_http_t *http = kl_rt_http(li->rt);
  if (!http) kl_lua_error(L, fn, "cannot initialise libcurl");
  li->refl =
      kl_reflector_new(kl_rt_loop(li->rt), http, li->inf, &ro, err, sizeof err);
  if (!li->refl) kl_lua_error(L, fn, "%s", err);
  lua_settop(L, top); /* the reflector copied what it needs */
  kl_reflector_start(li->refl);
}

static int informer_new(lua_State *L) {
  kl_rt_t *rt = kl_rt_from(L);
  char name[64], apiv[128], kind[128];
  if (lua_isnoneornil(L, 1))
    lua_newtable(L);
  else if (lua_type(L, 1) != LUA_TTABLE)
    return kl_lua_error(L, "kube.local_informer",
                        "opts must be a table, got %s", luaL_typename(L, 1));
  lua_settop(L, 1);
  kl_informer_opts_t o = {0};
  o.name = opt_string(L, 1, "name", name, sizeof name);
  o.api_version = opt_string(L, 1, "api_version", apiv, sizeof apiv);
  o.kind = opt_string(L, 1, "kind", kind, sizeof kind);
  o.resync_period = opt_number(L, 1, "resync", 0);
  lua_getfield(L, 1, "keep_managed_fields");
  o.keep_managed_fields = lua_toboolean(L, -1);
  lua_getfield(L, 1, "plain_objects");
  o.plain_objects = lua_toboolean(L, -1);
  lua_pop(L, 2);
  o.compress_min_objects = (size_t)opt_number(L, 1, "compress_min_objects", 0);
  lua_getfield(L, 1, "transform");
  int has_transform = lua_type(L, -1) == LUA_TFUNCTION;
  if (!has_transform && !lua_isnil(L, -1))
    return kl_lua_error(L, "kube.local_informer",
                        "opts.transform must be a function, got %s",
                        luaL_typename(L, -1));

  linf_t **box = lua_newuserdata(L, sizeof *box);
  *box = NULL;
  luaL_getmetatable(L, INFORMER_MT);
  lua_setmetatable(L, -2);
  linf_t *li = kl_xcalloc(1, sizeof *li);
  li->rt = rt;
  li->L = li->cur = kl_rt_lua(rt);
  li->transform_ref = LUA_NOREF;
  lua_getfield(L, LUA_REGISTRYINDEX, KIT_KEY);
  li->kit_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  snprintf(li->name, sizeof li->name, "%s", o.name ? o.name : "local");
  snprintf(li->busy, sizeof li->busy, "a handler of informer %s", li->name);
  kl_defer_init(&li->defer, run_deferred);
  if (has_transform) {
    lua_pushvalue(L, 2);
    li->transform_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    o.transform = lua_transform;
  }
  o.name = li->name;
  o.timers = kl_loop_timers(kl_rt_loop(rt));
  o.on_work = on_work;
  o.ud = li;
  li->inf = kl_informer_new(&o);
  *box = li;
  /* Ids are never reused: a collected entry vanishes from the weak table
   * before its __gc runs, so a reused slot could be cleared by that __gc. */
  lua_getfield(L, LUA_REGISTRYINDEX, LIVE_KEY);
  lua_getfield(L, -1, "last");
  li->id = (int)lua_tointeger(L, -1) + 1;
  lua_pop(L, 1);
  lua_pushinteger(L, li->id);
  lua_setfield(L, -2, "last");
  lua_pushvalue(L, -2);
  lua_rawseti(L, -2, li->id);
  lua_pop(L, 1);
  /* client-go's standard index, as the informer factories add it. */
  kl_store_indexer_t nsix = {0};
  nsix.name = KL_STORE_NAMESPACE;
  nsix.kind = KL_STORE_INDEX_NAMESPACE;
  kl_store_add_indexers(kl_informer_store(li->inf), &nsix, 1, NULL, 0);

  lua_getfield(L, 1, "indexers");
  if (!lua_isnil(L, -1)) add_indexers(L, li, -1, "kube.local_informer");
  lua_pop(L, 1);

  lua_getfield(L, 1, "watch");
  if (!lua_isnil(L, -1)) start_watch(L, li, lua_gettop(L), &o);
  lua_pop(L, 1);
  return 1;
}

static int informer_gc(lua_State *L) {
  linf_t **box = lua_touserdata(L, 1);
  linf_t *li = *box;
  if (!li) return 0;
  *box = NULL;
  /* Handlers and indexers release their references through li->L: use
   * the thread this finalizer runs on, never another one. */
  li->L = li->cur = L;
  kl_reflector_free(li->refl); /* first: it feeds the informer */
  free_tls(li->tls);
  kl_kc_creds_free(li->creds);
  kl_loop_undefer(kl_rt_loop(li->rt), &li->defer);
  lua_getfield(L, LUA_REGISTRYINDEX, LIVE_KEY);
  lua_pushnil(L);
  lua_rawseti(L, -2, li->id);
  lua_pop(L, 1);
  kl_informer_free(li->inf);
  if (li->transform_ref != LUA_NOREF)
    luaL_unref(L, LUA_REGISTRYINDEX, li->transform_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, li->kit_ref);
  free(li);
  return 0;
}

/* Handlers */

static int add_handler(lua_State *L, linf_t *li, unsigned types, int fn_idx,
                       const char *name, double resync) {
  handler_t *h = kl_xcalloc(1, sizeof *h);
  h->owner = li;
  h->types = types;
  h->gen = kl_rt_generation(li->rt);
  snprintf(h->name, sizeof h->name, "%s", name);
  lua_pushvalue(L, fn_idx);
  h->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  kl_proc_listener_opts_t lo = {call_handler, h, handler_free,
                                resync < 0 ? KL_PROC_DEFAULT_RESYNC : resync,
                                types};
  h->id = kl_proc_add_listener(kl_informer_proc(li->inf), &lo);
  if (h->id == 0) {
    handler_free(h);
    return kl_lua_error(L, "informer:add_handler", "the informer is stopped");
  }
  h->next = li->handlers;
  if (li->handlers) li->handlers->prev = h;
  li->handlers = h;
  handle_t *hd = lua_newuserdata(L, sizeof *hd);
  hd->owner = li;
  hd->id = h->id;
  luaL_getmetatable(L, HANDLE_MT);
  lua_setmetatable(L, -2);
  /* Keep the informer alive as long as the handle is. */
  lua_newtable(L);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, 1);
  lua_setfenv(L, -2);
  return 1;
}

/* inf:on_add(fn [, name]) / on_update / on_delete -> handle */
static int on_type(lua_State *L, unsigned type, const char *fn) {
  linf_t *li = check_informer(L, fn);
  if (lua_type(L, 2) != LUA_TFUNCTION)
    return kl_lua_error(L, fn, "expected a function, got %s",
                        luaL_typename(L, 2));
  if (!lua_isnoneornil(L, 3) && lua_type(L, 3) != LUA_TSTRING)
    return kl_lua_error(L, fn, "name must be a string, got %s",
                        luaL_typename(L, 3));
  const char *name = lua_isnoneornil(L, 3) ? fn + 9 /* "informer:on_add" */
                                           : lua_tostring(L, 3);
  return add_handler(L, li, 1u << type, 2, name, -1);
}

static int inf_on_add(lua_State *L) {
  return on_type(L, KL_PROC_ADD, "informer:on_add");
}
static int inf_on_update(lua_State *L) {
  return on_type(L, KL_PROC_UPDATE, "informer:on_update");
}
static int inf_on_delete(lua_State *L) {
  return on_type(L, KL_PROC_DELETE, "informer:on_delete");
}

/* inf:add_handler{add = fn, update = fn, delete = fn, name = s,
 * resync = seconds, filter = fn} -> handle: one listener for all three.
 * With a filter (obj -> boolean), as client-go's
 * FilteringResourceEventHandler (T-34): adds and deletes pass when their
 * object does (a tombstone's may be nil); an update passes when both old
 * and new do, becomes an add (of the new object, not initial) when only
 * the new one does, a delete (of the old one) when only the old one does,
 * and nothing otherwise. */
static int inf_add_handler(lua_State *L) {
  static const char *const keys[] = {"", "add", "update", "delete"};
  linf_t *li = check_informer(L, "informer:add_handler");
  if (lua_type(L, 2) != LUA_TTABLE)
    return kl_lua_error(L, "informer:add_handler",
                        "expected a table of handlers, got %s",
                        luaL_typename(L, 2));
  /* A dispatcher closure calls the right function for each event type. */
  lua_newtable(L);
  int funcs = lua_gettop(L);
  unsigned types = 0;
  for (int t = 1; t <= 3; t++) {
    lua_getfield(L, 2, keys[t]);
    if (lua_type(L, -1) == LUA_TFUNCTION) {
      types |= 1u << t;
      lua_setfield(L, funcs, keys[t]);
    } else if (!lua_isnil(L, -1)) {
      return kl_lua_error(L, "informer:add_handler",
                          "handlers.%s must be a function, got %s", keys[t],
                          luaL_typename(L, -1));
    } else {
      lua_pop(L, 1);
    }
  }
  if (!types)
    return kl_lua_error(L, "informer:add_handler",
                        "no add, update or delete function given");
  lua_getfield(L, 2, "name");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
    return kl_lua_error(L, "informer:add_handler",
                        "handlers.name must be a string, got %s",
                        luaL_typename(L, -1));
  char name[64];
  snprintf(name, sizeof name, "%s",
           lua_isnil(L, -1) ? "handler" : lua_tostring(L, -1));
  lua_pop(L, 1);
  lua_getfield(L, 2, "resync");
  double resync = -1;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0) ||
        lua_tonumber(L, -1) == HUGE_VAL)
      return kl_lua_error(L, "informer:add_handler",
                          "handlers.resync must be a number >= 0, got %s",
                          lua_type(L, -1) == LUA_TNUMBER
                              ? lua_tostring(L, -1)
                              : luaL_typename(L, -1));
    resync = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "filter");
  int filter = lua_gettop(L);
  if (!lua_isnil(L, filter) && lua_type(L, filter) != LUA_TFUNCTION)
    return kl_lua_error(L, "informer:add_handler",
                        "handlers.filter must be a function, got %s",
                        luaL_typename(L, filter));
  /* A filtered update may turn into an add or a delete. */
  if (!lua_isnil(L, filter))
    types = 1u << KL_PROC_ADD | 1u << KL_PROC_UPDATE | 1u << KL_PROC_DELETE;
  lua_getfield(L, LUA_REGISTRYINDEX, "kubelua.informer.dispatch");
  lua_pushvalue(L, funcs);
  lua_pushvalue(L, filter);
  lua_call(L, 2, 1); /* dispatch(funcs, filter) -> function(ev) */
  return add_handler(L, li, types, lua_gettop(L), name, resync);
}

static handle_t *check_handle(lua_State *L, const char *fn) {
  handle_t *h = luaL_testudata(L, 1, HANDLE_MT);
  if (!h)
    kl_lua_error(L, fn, "expected a handler handle, got %s",
                 luaL_typename(L, 1));
  return h;
}

/* handle:remove() -> true if it was registered (removing twice is fine). */
static int handle_remove(lua_State *L) {
  handle_t *h = check_handle(L, "handle:remove");
  int rc = h->owner && h->id
               ? kl_proc_remove_listener(kl_informer_proc(h->owner->inf), h->id)
               : KL_ENOENT;
  h->id = 0;
  lua_pushboolean(L, rc == 0);
  return 1;
}

/* handle:has_synced() -> true once the initial adds reached the handler. */
static int handle_has_synced(lua_State *L) {
  handle_t *h = check_handle(L, "handle:has_synced");
  lua_pushboolean(L, h->id && kl_proc_listener_synced(
                                  kl_informer_proc(h->owner->inf), h->id));
  return 1;
}

/* Reading the cache */

typedef struct collect {
  lua_State *L;
  int t, n, keys_only;
  const char *ns;
  size_t nslen;
} collect_t;

static int collect_visit(void *ud, const char *key, size_t len, kl_obj_t *o) {
  collect_t *c = ud;
  if (c->ns) {
    kl_json_span_t ns = kl_obj_namespace(o);
    if (ns.n != c->nslen || memcmp(ns.p, c->ns, ns.n) != 0) return 0;
  }
  if (c->keys_only)
    lua_pushlstring(c->L, key, len);
  else
    push_obj(c->L, o);
  lua_rawseti(c->L, c->t, ++c->n);
  return 0;
}

static void new_array(lua_State *L) {
  lua_newtable(L);
  luaL_getmetatable(L, "kubelua.array");
  lua_setmetatable(L, -2);
}

/* inf:get(key) or inf:get(namespace, name) -> object table or nil */
static int inf_get(lua_State *L) {
  linf_t *li = check_informer(L, "informer:get");
  luaL_Buffer b;
  if (lua_type(L, 2) != LUA_TSTRING)
    return kl_lua_error(L, "informer:get", "key must be a string, got %s",
                        luaL_typename(L, 2));
  if (!lua_isnoneornil(L, 3) && lua_type(L, 3) != LUA_TSTRING)
    return kl_lua_error(L, "informer:get", "name must be a string, got %s",
                        luaL_typename(L, 3));
  if (lua_type(L, 3) == LUA_TSTRING) {
    luaL_buffinit(L, &b);
    if (lua_objlen(L, 2) > 0) {
      lua_pushvalue(L, 2);
      luaL_addvalue(&b);
      luaL_addchar(&b, '/');
    }
    lua_pushvalue(L, 3);
    luaL_addvalue(&b);
    luaL_pushresult(&b);
  } else {
    lua_pushvalue(L, 2);
  }
  size_t len;
  const char *key = lua_tolstring(L, -1, &len);
  kl_obj_t *o = kl_store_get(kl_informer_store(li->inf), key, len);
  if (!o) return 0;
  push_obj(L, o);
  return 1;
}

/* inf:list([namespace]) -> array of objects; "" is every namespace, as
 * client-go's NamespaceAll (by_index("namespace", "") gives the objects
 * without a namespace). */
static int inf_list(lua_State *L) {
  linf_t *li = check_informer(L, "informer:list");
  collect_t c = {L, 0, 0, 0, NULL, 0};
  if (!lua_isnoneornil(L, 2)) {
    if (lua_type(L, 2) != LUA_TSTRING)
      return kl_lua_error(L, "informer:list",
                          "namespace must be a string, got %s",
                          luaL_typename(L, 2));
    c.ns = lua_tolstring(L, 2, &c.nslen);
    if (c.nslen == 0) c.ns = NULL;
  }
  new_array(L);
  c.t = lua_gettop(L);
  if (c.ns && kl_store_has_index(kl_informer_store(li->inf), "namespace")) {
    c.ns = NULL; /* the index selects already */
    kl_store_by_index(kl_informer_store(li->inf), "namespace",
                      lua_tostring(L, 2), lua_objlen(L, 2), collect_visit, &c);
  } else {
    kl_store_list(kl_informer_store(li->inf), collect_visit, &c);
  }
  return 1;
}

/* inf:list_keys() -> array of keys */
static int inf_list_keys(lua_State *L) {
  linf_t *li = check_informer(L, "informer:list_keys");
  collect_t c = {L, 0, 0, 1, NULL, 0};
  new_array(L);
  c.t = lua_gettop(L);
  kl_store_list(kl_informer_store(li->inf), collect_visit, &c);
  return 1;
}

static int by_index(lua_State *L, const char *fn, int keys_only) {
  linf_t *li = check_informer(L, fn);
  size_t vlen;
  if (lua_type(L, 2) != LUA_TSTRING)
    return kl_lua_error(L, fn, "index name must be a string, got %s",
                        luaL_typename(L, 2));
  const char *name = lua_tostring(L, 2);
  if (lua_type(L, 3) != LUA_TSTRING)
    return kl_lua_error(L, fn, "value must be a string, got %s",
                        luaL_typename(L, 3));
  const char *val = lua_tolstring(L, 3, &vlen);
  collect_t c = {L, 0, 0, keys_only, NULL, 0};
  new_array(L);
  c.t = lua_gettop(L);
  if (kl_store_by_index(kl_informer_store(li->inf), name, val, vlen,
                        collect_visit, &c) == KL_ENOENT)
    return kl_lua_error(L, fn, "no index named \"%s\"", name);
  return 1;
}

/* inf:by_index(name, value) -> objects; inf:index_keys(name, value) -> keys */
static int inf_by_index(lua_State *L) {
  return by_index(L, "informer:by_index", 0);
}
static int inf_index_keys(lua_State *L) {
  return by_index(L, "informer:index_keys", 1);
}

static int push_value(void *ud, const char *val, size_t len) {
  collect_t *c = ud;
  lua_pushlstring(c->L, val, len);
  lua_rawseti(c->L, c->t, ++c->n);
  return 0;
}

/* inf:index_values(name) -> array of the index's values */
static int inf_index_values(lua_State *L) {
  linf_t *li = check_informer(L, "informer:index_values");
  if (lua_type(L, 2) != LUA_TSTRING)
    return kl_lua_error(L, "informer:index_values",
                        "index name must be a string, got %s",
                        luaL_typename(L, 2));
  const char *name = lua_tostring(L, 2);
  collect_t c = {L, 0, 0, 1, NULL, 0};
  new_array(L);
  c.t = lua_gettop(L);
  if (kl_store_index_values(kl_informer_store(li->inf), name, push_value, &c) ==
      KL_ENOENT)
    return kl_lua_error(L, "informer:index_values", "no index named \"%s\"",
                        name);
  return 1;
}

/* inf:add_indexers{…} */
static int inf_add_indexers(lua_State *L) {
  linf_t *li = check_informer(L, "informer:add_indexers");
  add_indexers(L, li, 2, "informer:add_indexers");
  return 0;
}

static int inf_has_synced(lua_State *L) {
  linf_t *li = check_informer(L, "informer:has_synced");
  lua_pushboolean(L, kl_informer_has_synced(li->inf));
  return 1;
}

static int inf_last_rv(lua_State *L) {
  linf_t *li = check_informer(L, "informer:last_sync_resource_version");
  lua_pushstring(L, kl_informer_last_rv(li->inf));
  return 1;
}

static int inf_len(lua_State *L) {
  linf_t *li = check_informer(L, "informer:len");
  lua_pushinteger(L, (lua_Integer)kl_store_len(kl_informer_store(li->inf)));
  return 1;
}

static int add_bytes(void *ud, const char *key, size_t len, kl_obj_t *obj) {
  (void)key;
  (void)len;
  *(double *)ud += (double)kl_obj_json_len(obj);
  return 0;
}

/* inf:stats() -> {objects, bytes (of cached JSON), and the reflector's
 * counters: lists, relists, watches, watch_restarts, events, errors} for
 * /metrics, and last_error: the message of the last failed list-and-watch
 * round (absent when none failed). O(objects), without decompressing any
 * (a scrape of a large cache would stall the loop): a scrape's cost, not
 * the hot path's. */
static int inf_stats(lua_State *L) {
  linf_t *li = check_informer(L, "informer:stats");
  kl_store_t *st = kl_informer_store(li->inf);
  double bytes = 0;
  kl_store_list(st, add_bytes, &bytes);
  kl_reflector_stats_t rs = {0};
  if (li->refl) kl_reflector_get_stats(li->refl, &rs);
  lua_createtable(L, 0, 8);
  const struct {
    const char *k;
    double v;
  } f[] = {{"objects", (double)kl_store_len(st)},
           {"bytes", bytes},
           {"lists", (double)rs.lists},
           {"relists", (double)rs.relists},
           {"watches", (double)rs.watches},
           {"watch_restarts", (double)rs.watch_restarts},
           {"events", (double)rs.events},
           {"errors", (double)rs.errors}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    lua_pushnumber(L, f[i].v);
    lua_setfield(L, -2, f[i].k);
  }
  if (li->last_error[0]) {
    lua_pushstring(L, li->last_error);
    lua_setfield(L, -2, "last_error");
  }
  return 1;
}

/* inf:pending() -> deltas queued + notifications not yet delivered */
static int inf_pending(lua_State *L) {
  linf_t *li = check_informer(L, "informer:pending");
  lua_pushinteger(L, (lua_Integer)(kl_fifo_len(kl_informer_fifo(li->inf)) +
                                   kl_proc_pending(kl_informer_proc(li->inf))));
  return 1;
}

/* Feeding (what a reflector does; tests and tools call these directly) */

/* The producers below run the transform, which must not feed the informer
 * again (a Replace inside a Replace would mix up which keys were listed). */
static linf_t *check_feeder(lua_State *L, const char *fn) {
  linf_t *li = check_informer(L, fn);
  if (li->in_transform)
    kl_lua_error(L, fn, "the informer cannot be fed from its transform");
  return li;
}

static int fail(lua_State *L, const char *fn, const char *err) {
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", fn, err);
  return 2;
}

/* The stable name of an HTTP status code, as Lua failures carry it. */
static const char *code_name(int code) {
  switch (code) {
  case 400: return "BadRequest";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "NotFound";
  case 405: return "MethodNotAllowed";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 422: return "Invalid";
  case 429: return "TooManyRequests";
  case 500: return "InternalError";
  case 503: return "ServiceUnavailable";
  case 504: return "Timeout";
  default: return "Unknown";
  }
}

/* inf:feed(bytes) -> true | nil, err [, code_name, http_code]: watch-stream
 * bytes, cut anywhere. A malformed stream fails with "byte N: reason" (the
 * offset counts from the start of the stream); an ERROR event fails with
 * the Status message, its code's name ("Gone" for 410) and the code. Either
 * way the next call starts a new stream. */
static int inf_feed(lua_State *L) {
  linf_t *li = check_feeder(L, "informer:feed");
  char err[512] = "";
  size_t n;
  if (lua_type(L, 2) != LUA_TSTRING)
    return kl_lua_error(L, "informer:feed", "bytes must be a string, got %s",
                        luaL_typename(L, 2));
  const char *p = lua_tolstring(L, 2, &n);
  int code = 0;
  lua_State *saved_cur = li->cur;
  li->cur = L;
  int rc = kl_informer_feed(li->inf, p, n, &code, err, sizeof err);
  li->cur = saved_cur;
  if (rc != 0) {
    kl_informer_watch_reset(li->inf);
    fail(L, "informer:feed", err);
    if (rc != KL_EIO) return 2;
    lua_pushstring(L, code_name(code));
    lua_pushinteger(L, code);
    return 4;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* inf:replace(list_json) or inf:replace(objects, resource_version) */
static int inf_replace(lua_State *L) {
  linf_t *li = check_feeder(L, "informer:replace");
  char err[512] = "";
  if (lua_type(L, 2) == LUA_TSTRING) {
    size_t n;
    const char *p = lua_tolstring(L, 2, &n);
    lua_State *saved_cur = li->cur;
    li->cur = L;
    int rc = kl_informer_replace_list(li->inf, p, n, err, sizeof err);
    li->cur = saved_cur;
    if (rc != 0) return fail(L, "informer:replace", err);
    lua_pushboolean(L, 1);
    return 1;
  }
  if (lua_type(L, 2) != LUA_TTABLE)
    return kl_lua_error(L, "informer:replace",
                        "expected a list body or a table of objects, got %s",
                        luaL_typename(L, 2));
  if (!lua_isnoneornil(L, 3) && lua_type(L, 3) != LUA_TSTRING)
    return kl_lua_error(L, "informer:replace",
                        "resource_version must be a string, got %s",
                        luaL_typename(L, 3));
  const char *rv = lua_isnoneornil(L, 3) ? "" : lua_tostring(L, 3);
  size_t n = lua_objlen(L, 2);
  kl_obj_t **objs = kl_xcalloc(n ? n : 1, sizeof *objs);
  /* Nothing below raises, so the references taken are always released. */
  size_t i = 0;
  for (; i < n; i++) {
    lua_rawgeti(L, 2, (int)i + 1);
    int t = lua_type(L, -1);
    if (t != LUA_TTABLE && t != LUA_TSTRING) break;
    size_t len;
    const char *p;
    if (t == LUA_TTABLE) {
      if (safe_encode(L, -1, err, sizeof err) != 0) {
        lua_pop(L, 1);
        break;
      }
      p = lua_tolstring(L, -1, &len);
    } else {
      p = lua_tolstring(L, -1, &len);
      lua_pushvalue(L, -1);
    }
    int rc = kl_informer_parse(li->inf, p, len, &objs[i], err, sizeof err);
    lua_pop(L, 2);
    if (rc != 0) break;
  }
  lua_State *saved_cur = li->cur;
  li->cur = L;
  int ok =
      i == n && kl_informer_replace(li->inf, objs, n, rv, err, sizeof err) == 0;
  li->cur = saved_cur;
  for (size_t j = 0; j < i; j++)
    kl_obj_unref(objs[j]);
  free(objs);
  if (!ok) {
    if (!err[0]) snprintf(err, sizeof err, "item %zu is not an object", i + 1);
    return fail(L, "informer:replace", err);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int queue_one(lua_State *L, const char *fn,
                     int (*op)(kl_informer_t *, kl_obj_t *, char *, size_t)) {
  char err[512] = "";
  linf_t *li = check_feeder(L, fn);
  kl_obj_t *o = to_obj(L, li, 2, fn);
  lua_State *saved_cur = li->cur;
  li->cur = L;
  int rc = op(li->inf, o, err, sizeof err);
  li->cur = saved_cur;
  kl_obj_unref(o);
  if (rc != 0) return fail(L, fn, err[0] ? err : kl_strerror(rc));
  lua_pushboolean(L, 1);
  return 1;
}

static int inf_add(lua_State *L) {
  return queue_one(L, "informer:add", kl_informer_add);
}
static int inf_update(lua_State *L) {
  return queue_one(L, "informer:update", kl_informer_update);
}
static int inf_delete(lua_State *L) {
  return queue_one(L, "informer:delete", kl_informer_delete);
}

static int inf_resync(lua_State *L) {
  linf_t *li = check_feeder(L, "informer:resync");
  lua_State *saved_cur = li->cur;
  li->cur = L;
  kl_informer_resync(li->inf);
  li->cur = saved_cur;
  return 0;
}

/* inf:stop(): the watch ends for good (a hot reload stops informers that
 * no generation uses any more); the cache and handlers stay readable. */
static int inf_stop(lua_State *L) {
  linf_t *li = check_informer(L, "informer:stop");
  if (li->refl) kl_reflector_stop(li->refl);
  return 0;
}

/* informer.retire(gen, drain): every handler generation gen registered
 * goes: with drain, after what was already queued to it (a reload that
 * succeeded: those notifications still reach code that can queue their
 * keys); without, at once (a load that failed: nothing reached them yet). */
static int informer_retire(lua_State *L) {
  unsigned gen = (unsigned)luaL_checkinteger(L, 1);
  int drain = lua_toboolean(L, 2);
  lua_getfield(L, LUA_REGISTRYINDEX, LIVE_KEY);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    linf_t **box = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TNUMBER || !box || !*box) continue;
    linf_t *li = *box;
    kl_proc_t *p = kl_informer_proc(li->inf);
    handler_t *h = li->handlers, *next;
    for (; h; h = next) {
      next = h->next;
      if (h->gen != gen) continue;
      if (drain)
        kl_proc_retire_listener(p, h->id);
      else
        kl_proc_remove_listener(p, h->id);
    }
  }
  lua_pop(L, 1);
  return 0;
}

static int inf_name(lua_State *L) {
  linf_t *li = check_informer(L, "informer:name");
  lua_pushstring(L, li->name);
  return 1;
}

static const luaL_Reg informer_methods[] = {
    {"on_add", inf_on_add},
    {"on_update", inf_on_update},
    {"on_delete", inf_on_delete},
    {"add_handler", inf_add_handler},
    {"get", inf_get},
    {"list", inf_list},
    {"list_keys", inf_list_keys},
    {"by_index", inf_by_index},
    {"index_keys", inf_index_keys},
    {"index_values", inf_index_values},
    {"add_indexers", inf_add_indexers},
    {"has_synced", inf_has_synced},
    {"last_sync_resource_version", inf_last_rv},
    {"len", inf_len},
    {"stats", inf_stats},
    {"pending", inf_pending},
    {"feed", inf_feed},
    {"replace", inf_replace},
    {"add", inf_add},
    {"update", inf_update},
    {"delete", inf_delete},
    {"resync", inf_resync},
    {"name", inf_name},
    {"stop", inf_stop},
    {NULL, NULL},
};

static const char dispatch_src[] =
    "return function(funcs, filter)\n"
    "  if not filter then\n"
    "    return function(ev) return funcs[ev.type](ev) end\n"
    "  end\n"
    "  local add, update, delete = funcs.add, funcs.update, funcs.delete\n"
    "  return function(ev)\n"
    "    local t = ev.type\n"
    "    if t == 'update' then\n"
    "      local new_ok, old_ok = filter(ev.object), filter(ev.old)\n"
    "      if new_ok and old_ok then\n"
    "        if update then return update(ev) end\n"
    "      elseif new_ok then\n"
    "        if add then\n"
    "          return add({ type = 'add', key = ev.key, object = ev.object })\n"
    "        end\n"
    "      elseif old_ok then\n"
    "        if delete then\n"
    "          return delete({ type = 'delete', key = ev.key, object = ev.old "
    "})\n"
    "        end\n"
    "      end\n"
    "    elseif filter(ev.object) then\n"
    "      local f = funcs[t]\n"
    "      if f then return f(ev) end\n"
    "    end\n"
    "  end\n"
    "end\n";

/* A graceful stop ends every watch first: no new deltas come in while the
 * workers finish. */
static void stop_watches(kl_rt_t *rt, void *ud) {
  lua_State *L = kl_rt_lua(rt);
  (void)ud;
  lua_checkstack(L, 4);
  lua_getfield(L, LUA_REGISTRYINDEX, LIVE_KEY);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    linf_t **box = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TNUMBER && box && *box && (*box)->refl)
      kl_reflector_stop((*box)->refl);
  }
  lua_pop(L, 1);
}

int kl_luaopen_informer(lua_State *L) {
  if (luaL_newmetatable(L, INFORMER_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, informer_methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, informer_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, HANDLE_MT)) {
    lua_newtable(L);
    lua_pushcfunction(L, handle_remove);
    lua_setfield(L, -2, "remove");
    lua_pushcfunction(L, handle_has_synced);
    lua_setfield(L, -2, "has_synced");
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, OBJREF_MT)) {
    lua_pushcfunction(L, objref_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_newtable(L); /* the event metatable */
  lua_pushcfunction(L, event_index);
  lua_setfield(L, -2, "__index");
  lua_setfield(L, LUA_REGISTRYINDEX, EVENT_MT_KEY);
  make_kit(L);
  lua_newtable(L); /* live informers, by id; weak, so it keeps none alive */
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, LIVE_KEY);
  kl_rt_on_stop(kl_rt_from(L), stop_watches, NULL);
  /* dispatch(funcs, filter) builds add_handler's one function. */
  luaL_loadbuffer(L, dispatch_src, sizeof dispatch_src - 1, "=dispatch");
  lua_call(L, 0, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, "kubelua.informer.dispatch");

  lua_newtable(L);
  lua_pushcfunction(L, informer_new);
  lua_setfield(L, -2, "new");
  lua_pushcfunction(L, informer_retire);
  lua_setfield(L, -2, "retire");
  return 1;
}
