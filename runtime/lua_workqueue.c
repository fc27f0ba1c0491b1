/* lua_workqueue.c — kube.workqueue: the C rate-limited workqueue in Lua.
 *
 * Queues are C objects owned by the runtime's queue table, found by name:
 * asking twice for "mirror" gives the same queue, and so will a reloaded
 * script. A Lua queue value is a small userdata pointing at the C binding.
 * Workers are tasks: q:get() in a task parks it on the queue's wait list when
 * nothing is queued; each item that becomes ready wakes one parked worker,
 * which takes its key when it resumes (or parks again if another worker was
 * faster). A key handed to a task marks it as holding that key until
 * q:done(key), which is how a graceful stop knows a reconcile is running. */
#include <stdlib.h>
#include <string.h>

#include "dict.h"
#include "error.h"
#include "lua_kube.h"
#include "mem.h"
#include "metrics.h"
#include "ratelimit.h"
#include "workqueue.h"

#define QUEUE_MT "kubelua.workqueue"
#define QUEUES_KEY "kubelua.workqueues"

typedef struct lwq {
  kl_wq_t *q;
  kl_rt_t *rt;
  char *name;
  kl_waitlist_t getters;  /* workers parked in q:get() */
  kl_waitlist_t drainers; /* tasks parked in q:shutdown_drain() */
} lwq_t;

/* The C side of the queue table: a dict name → lwq_t, freed with the
 * runtime's Lua state (the registry holds a userdata whose __gc frees it). */
typedef struct queues {
  kl_dict_t *byname;
  kl_metrics_t *metrics; /* the runtime's: collect_queues copies into it */
} queues_t;

static const char *lwq_key(const void *v, size_t *len) {
  const lwq_t *w = v;
  *len = strlen(w->name);
  return w->name;
}

static void on_ready(kl_wq_t *q, void *ud) {
  lwq_t *w = ud;
  if (kl_wq_shutting_down(q))
    kl_waitlist_wake(&w->getters, w->getters.n);
  else
    kl_waitlist_wake(&w->getters, 1);
}

static void on_drained(kl_wq_t *q, void *ud) {
  lwq_t *w = ud;
  (void)q;
  kl_waitlist_wake(&w->drainers, w->drainers.n);
}

static void stop_all(kl_rt_t *rt, void *ud) {
  queues_t *qs = ud;
  size_t it = 0;
  lwq_t *w;
  (void)rt;
  while ((w = kl_dict_next(qs->byname, &it)))
    kl_wq_shutdown(w->q);
}

/* client-go's workqueue metrics (CLIENTGO.md 11.5), labelled by name. The
 * queue counts them itself (kl_wq_stats); a scrape copies them here, so
 * the hot path (Add, Get, Done) pays nothing for /metrics. */
static const struct {
  kl_metric_type_t type;
  const char *name, *help;
} wq_families[] = {
    {KL_METRIC_GAUGE, "workqueue_depth", "Current depth of workqueue"},
    {KL_METRIC_COUNTER, "workqueue_adds_total",
     "Total number of adds handled by workqueue"},
    {KL_METRIC_HISTOGRAM, "workqueue_queue_duration_seconds",
     "How long in seconds an item stays in workqueue before being requested"},
    {KL_METRIC_HISTOGRAM, "workqueue_work_duration_seconds",
     "How long in seconds processing an item from workqueue takes"},
    {KL_METRIC_GAUGE, "workqueue_unfinished_work_seconds",
     "How many seconds of work has been done that is in progress and hasn't "
     "been observed by work_duration. Large values indicate stuck threads. "
     "One can deduce the number of stuck threads by observing the rate at "
     "which this increases."},
    {KL_METRIC_GAUGE, "workqueue_longest_running_processor_seconds",
     "How many seconds has the longest running processor for workqueue been "
     "running."},
    {KL_METRIC_COUNTER, "workqueue_retries_total",
     "Total number of retries handled by workqueue"},
};
#define WQ_NFAMILIES (sizeof wq_families / sizeof wq_families[0])

static void register_families(kl_metrics_t *m, kl_metric_t **out) {
  static const char *const labels[] = {"name"};
  double bounds[KL_WQ_BUCKETS - 1];
  char err[128];
  for (int i = 0; i < KL_WQ_BUCKETS - 1; i++)
    bounds[i] = kl_wq_bucket_bound(i);
  for (size_t i = 0; i < WQ_NFAMILIES; i++) {
    kl_metric_opts_t o = {wq_families[i].type,
                          wq_families[i].name,
                          wq_families[i].help,
                          labels,
                          1,
                          bounds,
                          KL_WQ_BUCKETS - 1};
    out[i] = kl_metrics_register(m, &o, err, sizeof err);
  }
}

static void set_value(kl_metric_t *f, const char *const *name, double v) {
  kl_series_t *s = f ? kl_metric_series(f, name, NULL, 0) : NULL;
  if (s) kl_series_set(s, v);
}

static void set_hist(kl_metric_t *f, const char *const *name,
                     const kl_wq_histogram_t *h) {
  kl_series_t *s = f ? kl_metric_series(f, name, NULL, 0) : NULL;
  if (s)
    kl_series_set_histogram(s, h->count, h->sum, h->buckets, KL_WQ_BUCKETS);
}

static void collect_queues(kl_metrics_t *m, void *ud) {
  queues_t *qs = ud;
  kl_metric_t *f[WQ_NFAMILIES];
  size_t it = 0;
  lwq_t *w;
  register_families(m, f);
  while ((w = kl_dict_next(qs->byname, &it))) {
    const char *name[] = {w->name};
    kl_wq_stats_t st;
    kl_wq_stats(w->q, &st);
    set_value(f[0], name, (double)st.depth);
    set_value(f[1], name, (double)st.adds_total);
    set_hist(f[2], name, &st.queue_duration);
    set_hist(f[3], name, &st.work_duration);
    set_value(f[4], name, st.unfinished_work_seconds);
    set_value(f[5], name, st.longest_running_processor_seconds);
    set_value(f[6], name, (double)st.retries_total);
  }
}

static int queues_gc(lua_State *L) {
  queues_t *qs = lua_touserdata(L, 1);
  size_t it = 0;
  lwq_t *w;
  kl_metrics_remove_collector(qs->metrics, collect_queues, qs);
  while ((w = kl_dict_next(qs->byname, &it))) {
    kl_wq_free(w->q);
    free(w->name);
    free(w);
  }
  kl_dict_free(qs->byname);
  return 0;
}

static queues_t *get_queues(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, QUEUES_KEY);
  queues_t *qs = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return qs;
}

static lwq_t *check_queue(lua_State *L, const char *fn) {
  lwq_t **box = lua_touserdata(L, 1);
  if (!box || !lua_getmetatable(L, 1))
    kl_lua_error(L, fn, "expected a workqueue, got %s", luaL_typename(L, 1));
  if (!lua_rawequal(L, -1, lua_upvalueindex(1)))
    kl_lua_error(L, fn, "expected a workqueue, got %s", luaL_typename(L, 1));
  lua_pop(L, 1);
  return *box;
}

static const char *check_key(lua_State *L, int idx, const char *fn,
                             size_t *len) {
  if (lua_type(L, idx) != LUA_TSTRING)
    kl_lua_error(L, fn, "key must be a string, got %s", luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

static double check_delay(lua_State *L, int idx, const char *fn) {
  if (lua_type(L, idx) != LUA_TNUMBER)
    kl_lua_error(L, fn, "seconds must be a number, got %s",
                 luaL_typename(L, idx));
  double d = lua_tonumber(L, idx);
  if (d != d || d > 1e15 || d < -1e15)
    kl_lua_error(L, fn, "seconds must be finite, got %f", d);
  return d;
}

static int q_add(lua_State *L) {
  lwq_t *w = check_queue(L, "q:add");
  size_t len;
  const char *key = check_key(L, 2, "q:add", &len);
  kl_wq_add(w->q, key, len);
  return 0;
}

static int q_add_after(lua_State *L) {
  lwq_t *w = check_queue(L, "q:add_after");
  size_t len;
  const char *key = check_key(L, 2, "q:add_after", &len);
  double d = check_delay(L, 3, "q:add_after");
  kl_wq_add_after(w->q, key, len, d);
  return 0;
}

static int q_add_rate_limited(lua_State *L) {
  lwq_t *w = check_queue(L, "q:add_rate_limited");
  size_t len;
  const char *key = check_key(L, 2, "q:add_rate_limited", &len);
  kl_wq_add_rate_limited(w->q, key, len);
  return 0;
}

static int q_forget(lua_State *L) {
  lwq_t *w = check_queue(L, "q:forget");
  size_t len;
  const char *key = check_key(L, 2, "q:forget", &len);
  kl_wq_forget(w->q, key, len);
  return 0;
}

static int q_num_requeues(lua_State *L) {
  lwq_t *w = check_queue(L, "q:num_requeues");
  size_t len;
  const char *key = check_key(L, 2, "q:num_requeues", &len);
  lua_pushinteger(L, kl_wq_num_requeues(w->q, key, len));
  return 1;
}

static int q_len(lua_State *L) {
  lwq_t *w = check_queue(L, "q:len");
  lua_pushinteger(L, (lua_Integer)kl_wq_len(w->q));
  return 1;
}

static int q_name(lua_State *L) {
  lwq_t *w = check_queue(L, "q:name");
  lua_pushstring(L, w->name);
  return 1;
}

/* Pushes the result of one Get attempt: the key (held by t), or nil and
 * "shutdown"; returns the count, or -1 when nothing is queued. */
static int take(lwq_t *w, kl_task_t *t, lua_State *L) {
  const char *key;
  size_t len;
  int rc = kl_rt_stopping(w->rt) ? KL_ESHUTDOWN : kl_wq_get(w->q, &key, &len);
  if (rc == KL_EAGAIN) return -1;
  if (rc == KL_ESHUTDOWN) {
    lua_pushnil(L);
    lua_pushliteral(L, "shutdown");
    return 2;
  }
  lua_pushlstring(L, key, len);
  kl_task_hold(t, 1);
  kl_task_set_work(t, w->name, key, len);
  return 1;
}

static int deliver_get(kl_task_t *t, lua_State *co, void *op) {
  return take(op, t, co);
}

/* q:get() -> key | nil, "shutdown". In a task, waits for a key; elsewhere
 * returns nil, "empty" at once when nothing is queued. */
static int q_get(lua_State *L) {
  lwq_t *w = check_queue(L, "q:get");
  kl_task_t *t = kl_task_current(w->rt, L);
  int n = take(w, t, L);
  if (n >= 0) return n;
  if (!t) {
    lua_pushnil(L);
    lua_pushliteral(L, "empty");
    return 2;
  }
  return kl_task_wait(L, &w->getters, deliver_get, w);
}

/* q:try_get() -> key | nil, "empty" | nil, "shutdown", never waiting. */
static int q_try_get(lua_State *L) {
  lwq_t *w = check_queue(L, "q:try_get");
  int n = take(w, kl_task_current(w->rt, L), L);
  if (n >= 0) return n;
  lua_pushnil(L);
  lua_pushliteral(L, "empty");
  return 2;
}

static int q_done(lua_State *L) {
  lwq_t *w = check_queue(L, "q:done");
  size_t len;
  const char *key = check_key(L, 2, "q:done", &len);
  if (kl_wq_done(w->q, key, len) != 0)
    return kl_lua_error(L, "q:done", "key \"%s\" is not being processed", key);
  kl_task_hold(kl_task_current(w->rt, L), -1);
  return 0;
}

static int q_shutdown(lua_State *L) {
  lwq_t *w = check_queue(L, "q:shutdown");
  kl_wq_shutdown(w->q);
  /* As client-go's ShutDown ends a ShutDownWithDrain wait. */
  kl_waitlist_wake(&w->drainers, w->drainers.n);
  return 0;
}

/* Resumes a drainer with true once nothing is processed, or with false when
 * a plain shutdown ended the drain first. */
static int deliver_drained(kl_task_t *t, lua_State *co, void *op) {
  lwq_t *w = op;
  (void)t;
  int drained = kl_wq_processing(w->q) == 0;
  if (!drained && kl_wq_draining(w->q)) return -1;
  lua_pushboolean(co, drained);
  return 1;
}

/* q:shutdown_drain() -> true once no key is being processed. In a task it
 * waits for that; elsewhere it returns whether it is so already. */
static int q_shutdown_drain(lua_State *L) {
  lwq_t *w = check_queue(L, "q:shutdown_drain");
  kl_task_t *t = kl_task_current(w->rt, L);
  kl_wq_shutdown_drain(w->q);
  if (kl_wq_processing(w->q) == 0 || !t) {
    lua_pushboolean(L, kl_wq_processing(w->q) == 0);
    return 1;
  }
  return kl_task_wait(L, &w->drainers, deliver_drained, w);
}

static int q_shutting_down(lua_State *L) {
  lwq_t *w = check_queue(L, "q:shutting_down");
  lua_pushboolean(L, kl_wq_shutting_down(w->q));
  return 1;
}

static void set_number(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

static void push_histogram(lua_State *L, const kl_wq_histogram_t *h) {
  lua_createtable(L, 0, 3);
  set_number(L, "count", (double)h->count);
  set_number(L, "sum", h->sum);
  lua_createtable(L, KL_WQ_BUCKETS, 0);
  for (int i = 0; i < KL_WQ_BUCKETS; i++) {
    lua_createtable(L, 2, 0);
    lua_pushnumber(L, kl_wq_bucket_bound(i));
    lua_rawseti(L, -2, 1);
    lua_pushnumber(L, (double)h->buckets[i]);
    lua_rawseti(L, -2, 2);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "buckets");
}

/* q:stats() -> client-go's workqueue metrics for this queue. */
static int q_stats(lua_State *L) {
  lwq_t *w = check_queue(L, "q:stats");
  kl_wq_stats_t st;
  kl_wq_stats(w->q, &st);
  lua_createtable(L, 0, 10);
  lua_pushstring(L, w->name);
  lua_setfield(L, -2, "name");
  set_number(L, "depth", (double)st.depth);
  set_number(L, "adds_total", (double)st.adds_total);
  set_number(L, "retries_total", (double)st.retries_total);
  set_number(L, "unfinished_work_seconds", st.unfinished_work_seconds);
  set_number(L, "longest_running_processor_seconds",
             st.longest_running_processor_seconds);
  push_histogram(L, &st.queue_duration);
  lua_setfield(L, -2, "queue_duration_seconds");
  push_histogram(L, &st.work_duration);
  lua_setfield(L, -2, "work_duration_seconds");
  set_number(L, "processing", (double)kl_wq_processing(w->q));
  set_number(L, "waiting", (double)kl_wq_waiting(w->q));
  return 1;
}

static int q_tostring(lua_State *L) {
  lwq_t *w = check_queue(L, "tostring");
  lua_pushfstring(L, "workqueue(%s)", w->name);
  return 1;
}

static const luaL_Reg queue_methods[] = {
    {"add", q_add},
    {"add_after", q_add_after},
    {"add_rate_limited", q_add_rate_limited},
    {"forget", q_forget},
    {"num_requeues", q_num_requeues},
    {"len", q_len},
    {"name", q_name},
    {"get", q_get},
    {"try_get", q_try_get},
    {"done", q_done},
    {"shutdown", q_shutdown},
    {"shutdown_drain", q_shutdown_drain},
    {"shutting_down", q_shutting_down},
    {"stats", q_stats},
    {NULL, NULL},
};

/* Reads a rate-limiter spec table at idx (see lua/kubelua/init.lua for the
 * documented forms). Raises on anything unknown. */
static kl_rl_t *read_limiter(lua_State *L, int idx, const kl_clock_t *clock,
                             int depth);

static double opt_field(lua_State *L, int idx, const char *k, double dflt,
                        double min) {
  lua_getfield(L, idx, k);
  double v = dflt;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      kl_lua_error(L, "kube.workqueue",
                   "rate_limiter.%s must be a number, got %s", k,
                   luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
    if (!(v >= min) || v > 1e15)
      kl_lua_error(L, "kube.workqueue", "rate_limiter.%s must be >= %g, got %g",
                   k, min, v);
  }
  lua_pop(L, 1);
  return v;
}

static kl_rl_t *read_limiter(lua_State *L, int idx, const kl_clock_t *clock,
                             int depth) {
  if (depth > 8)
    kl_lua_error(L, "kube.workqueue", "rate_limiter nests too deeply");
  if (lua_type(L, idx) != LUA_TTABLE)
    kl_lua_error(L, "kube.workqueue", "rate_limiter must be a table, got %s",
                 luaL_typename(L, idx));
  lua_getfield(L, idx, "type");
  const char *type = lua_isnil(L, -1) ? "default" : lua_tostring(L, -1);
  if (!type)
    kl_lua_error(L, "kube.workqueue", "rate_limiter.type must be a string");
  char t[32];
  snprintf(t, sizeof t, "%s", type);
  lua_pop(L, 1);

  if (strcmp(t, "default") == 0) {
    kl_rl_t *parts[2];
    parts[0] = kl_rl_exponential_new(opt_field(L, idx, "base", 0.005, 0),
                                     opt_field(L, idx, "max", 1000, 0));
    parts[1] = kl_rl_bucket_new(clock, opt_field(L, idx, "qps", 10, 1e-9),
                                (int)opt_field(L, idx, "burst", 100, 1));
    return kl_rl_max_of_new(parts, 2);
  }
  if (strcmp(t, "exponential") == 0)
    return kl_rl_exponential_new(opt_field(L, idx, "base", 0.005, 0),
                                 opt_field(L, idx, "max", 1000, 0));
  if (strcmp(t, "bucket") == 0)
    return kl_rl_bucket_new(clock, opt_field(L, idx, "qps", 10, 1e-9),
                            (int)opt_field(L, idx, "burst", 100, 1));
  if (strcmp(t, "fast_slow") == 0)
    return kl_rl_fast_slow_new(opt_field(L, idx, "fast", 0.005, 0),
                               opt_field(L, idx, "slow", 10, 0),
                               (int)opt_field(L, idx, "max_fast", 5, 0));
  if (strcmp(t, "max_of") == 0) {
    lua_getfield(L, idx, "limiters");
    int lim = lua_gettop(L);
    if (lua_type(L, lim) != LUA_TTABLE || lua_objlen(L, lim) == 0)
      kl_lua_error(L, "kube.workqueue",
                   "rate_limiter.limiters must be a non-empty list");
    size_t n = lua_objlen(L, lim);
    if (n > 16) kl_lua_error(L, "kube.workqueue", "too many rate limiters");
    kl_rl_t *parts[16];
    for (size_t i = 0; i < n; i++) {
      lua_rawgeti(L, lim, (int)i + 1);
      /* A raise here would leak the parts read so far; read all first. */
      parts[i] = read_limiter(L, lua_gettop(L), clock, depth + 1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return kl_rl_max_of_new(parts, n);
  }
  return (kl_rl_t *)(size_t)kl_lua_error(
      L, "kube.workqueue",
      "unknown rate_limiter.type \"%s\" (default, exponential, bucket, "
      "fast_slow or max_of)",
      t);
}

/* core.workqueue(name [, opts]) -> the queue of that name, created on first
 * use with opts.rate_limiter. */
static int wq_open(lua_State *L) {
  kl_rt_t *rt = kl_rt_from(L);
  queues_t *qs = get_queues(L);
  if (lua_type(L, 1) != LUA_TSTRING || lua_objlen(L, 1) == 0)
    return kl_lua_error(L, "kube.workqueue",
                        "name must be a non-empty string, got %s",
                        luaL_typename(L, 1));
  size_t len;
  const char *name = lua_tolstring(L, 1, &len);
  if (strlen(name) != len)
    return kl_lua_error(L, "kube.workqueue", "name must not contain NUL bytes");
  if (!lua_isnoneornil(L, 2) && lua_type(L, 2) != LUA_TTABLE)
    return kl_lua_error(L, "kube.workqueue", "opts must be a table, got %s",
                        luaL_typename(L, 2));

  lwq_t *w = kl_dict_get(qs->byname, name, len);
  if (!w) {
    kl_rl_t *rl = NULL;
    if (lua_type(L, 2) == LUA_TTABLE) {
      lua_getfield(L, 2, "rate_limiter");
      if (!lua_isnil(L, -1))
        rl = read_limiter(L, lua_gettop(L),
                          kl_timers_clock(kl_loop_timers(kl_rt_loop(rt))), 0);
      lua_pop(L, 1);
    }
    w = kl_xcalloc(1, sizeof *w);
    w->rt = rt;
    w->name = kl_xstrndup(name, len);
    kl_wq_opts_t o = {w->name, rl, on_ready, on_drained, w};
    w->q = kl_wq_new(kl_loop_timers(kl_rt_loop(rt)), &o);
    kl_dict_set(qs->byname, w);
    if (kl_rt_stopping(rt)) kl_wq_shutdown(w->q);
  }
  lwq_t **box = lua_newuserdata(L, sizeof *box);
  *box = w;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, -2);
  return 1;
}

/* Two values of one queue (asked for twice, or by two generations of a
 * script) are equal. */
static int q_eq(lua_State *L) {
  lwq_t **a = lua_touserdata(L, 1), **b = lua_touserdata(L, 2);
  lua_pushboolean(L, a && b && *a == *b);
  return 1;
}

int kl_luaopen_workqueue(lua_State *L) {
  kl_rt_t *rt = kl_rt_from(L);
  lua_getfield(L, LUA_REGISTRYINDEX, QUEUES_KEY);
  if (lua_isnil(L, -1)) {
    queues_t *qs = lua_newuserdata(L, sizeof *qs);
    qs->byname = kl_dict_new(lwq_key);
    qs->metrics = kl_rt_metrics(rt);
    kl_metric_t *f[WQ_NFAMILIES];
    register_families(qs->metrics, f);
    kl_metrics_add_collector(qs->metrics, collect_queues, qs);
    lua_newtable(L);
    lua_pushcfunction(L, queues_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, QUEUES_KEY);
    kl_rt_on_stop(rt, stop_all, qs);
  }
  lua_pop(L, 1);

  luaL_newmetatable(L, QUEUE_MT);
  int mt = lua_gettop(L);
  lua_newtable(L);
  lua_pushvalue(L, mt);
  luaL_setfuncs(L, queue_methods, 1);
  lua_setfield(L, mt, "__index");
  lua_pushvalue(L, mt);
  lua_pushcclosure(L, q_tostring, 1);
  lua_setfield(L, mt, "__tostring");
  lua_pushcfunction(L, q_eq);
  lua_setfield(L, mt, "__eq");
  lua_pushliteral(L, "workqueue");
  lua_setfield(L, mt, "__metatable");
  lua_pushcclosure(L, wq_open, 1);
  return 1;
}
