/* lua_metrics.c — "kubelua.metrics.core": the runtime's metrics registry
 * (metrics.h) in Lua.
 *
 *   local m = require "kubelua.metrics.core"
 *   local c = m.counter{ name = "x_total", help = "…", labels = {"kind"} }
 *   c:inc({ kind = "a" }, 2)
 *
 * The registry belongs to the runtime (kl_rt_metrics), not to a generation:
 * a reloaded script asking for the same name gets the same family and its
 * values. A family value is a small userdata pointing at the C family,
 * which lives as long as the runtime. Label values are read from a table
 * keyed by label name (strings, numbers or booleans); a missing or unknown
 * label raises, as every misuse does. The Lua heap gauge is a collector
 * registered here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lua_kube.h"
#include "metrics.h"

#define FAMILY_MT "kubelua.metric"
#define SERIES_MT "kubelua.metric.series"

typedef struct lmetric {
  kl_metric_t *f;
} lmetric_t;

static const char *const type_names[] = {"counter", "gauge", "histogram"};

static lmetric_t *check_metric(lua_State *L, const char *fn) {
  lmetric_t *lm = luaL_testudata(L, 1, FAMILY_MT);
  if (!lm)
    kl_lua_error(L, fn, "expected a metric, got %s", luaL_typename(L, 1));
  return lm;
}

/* The series named by the labels table at idx (0: none given). */
static kl_series_t *series_at(lua_State *L, lmetric_t *lm, int idx,
                              const char *fn) {
  kl_metric_t *f = lm->f;
  size_t n = kl_metric_nlabels(f);
  const char *values[KL_METRICS_MAX_LABELS];
  char err[256];
  if (idx == 0 && n > 0)
    kl_lua_error(L, fn, "%s needs labels (a table with %s%s)",
                 kl_metric_name(f), kl_metric_label(f, 0), n > 1 ? ", …" : "");
  if (idx != 0) {
    size_t given = 0;
    lua_checkstack(L, (int)n + 4);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      given++;
      lua_pop(L, 1);
    }
    for (size_t i = 0; i < n; i++) {
      const char *l = kl_metric_label(f, i);
      lua_getfield(L, idx, l);
      int t = lua_type(L, -1);
      if (t == LUA_TBOOLEAN) {
        values[i] = lua_toboolean(L, -1) ? "true" : "false";
      } else if (t == LUA_TSTRING || t == LUA_TNUMBER) {
        values[i] = lua_tostring(L, -1); /* kept alive on the stack */
      } else {
        kl_lua_error(L, fn, "%s: label %s must be a string, got %s",
                     kl_metric_name(f), l, lua_typename(L, t));
      }
    }
    if (given != n)
      kl_lua_error(L, fn, "%s: labels must be exactly {%s%s} (%u given)",
                   kl_metric_name(f), n ? kl_metric_label(f, 0) : "",
                   n > 1 ? ", …" : "", (unsigned)given);
  }
  kl_series_t *s = kl_metric_series(f, values, err, sizeof err);
  if (!s) kl_lua_error(L, fn, "%s", err);
  if (idx != 0) lua_pop(L, (int)n);
  return s;
}

/* Reads (value, labels) or (labels, value) from arguments 2 and 3; the
 * value defaults to dflt (NAN: required). */
static kl_series_t *value_args(lua_State *L, lmetric_t *lm, double dflt,
                               double *v, const char *fn) {
  int labels = 0, num = 0;
  for (int i = 2; i <= 3; i++) {
    int t = lua_type(L, i);
    if (t == LUA_TTABLE && !labels)
      labels = i;
    else if (t == LUA_TNUMBER && !num)
      num = i;
    else if (t != LUA_TNONE && t != LUA_TNIL)
      kl_lua_error(L, fn, "expected a number and a labels table, got %s",
                   lua_typename(L, t));
  }
  if (!num && isnan(dflt)) kl_lua_error(L, fn, "a number is needed");
  *v = num ? lua_tonumber(L, num) : dflt;
  return series_at(L, lm, labels, fn);
}

static void check_type(lua_State *L, lmetric_t *lm, unsigned mask,
                       const char *fn) {
  kl_metric_type_t t = kl_metric_type(lm->f);
  if (!(mask & (1u << t)))
    kl_lua_error(L, fn, "%s is a %s", kl_metric_name(lm->f), type_names[t]);
}

#define COUNTER (1u << KL_METRIC_COUNTER)
#define GAUGE (1u << KL_METRIC_GAUGE)
#define HISTOGRAM (1u << KL_METRIC_HISTOGRAM)

/* m:inc([labels] [, n]) — counters and gauges; n defaults to 1. */
static int m_inc(lua_State *L) {
  lmetric_t *lm = check_metric(L, "metric:inc");
  check_type(L, lm, COUNTER | GAUGE, "metric:inc");
  double v;
  kl_series_t *s = value_args(L, lm, 1, &v, "metric:inc");
  if (kl_series_add(s, v) != 0)
    kl_lua_error(L, "metric:inc", "%s: a counter only goes up (got %g)",
                 kl_metric_name(lm->f), v);
  return 0;
}

/* g:dec([labels] [, n]) — gauges. */
static int m_dec(lua_State *L) {
  lmetric_t *lm = check_metric(L, "metric:dec");
  check_type(L, lm, GAUGE, "metric:dec");
  double v;
  kl_series_t *s = value_args(L, lm, 1, &v, "metric:dec");
  kl_series_add(s, -v);
  return 0;
}

/* g:set(v [, labels]) — gauges; counters too, for copying a total counted
 * elsewhere (a collector), which must not go down. */
static int m_set(lua_State *L) {
  lmetric_t *lm = check_metric(L, "metric:set");
  check_type(L, lm, COUNTER | GAUGE, "metric:set");
  double v;
  kl_series_t *s = value_args(L, lm, NAN, &v, "metric:set");
  if (kl_metric_type(lm->f) == KL_METRIC_COUNTER && !(v >= kl_series_value(s)))
    kl_lua_error(L, "metric:set", "%s: a counter only goes up (%g to %g)",
                 kl_metric_name(lm->f), kl_series_value(s), v);
  kl_series_set(s, v);
  return 0;
}

/* h:observe(v [, labels]) — histograms. */
static int m_observe(lua_State *L) {
  lmetric_t *lm = check_metric(L, "metric:observe");
  check_type(L, lm, HISTOGRAM, "metric:observe");
  double v;
  kl_series_t *s = value_args(L, lm, NAN, &v, "metric:observe");
  kl_series_observe(s, v);
  return 0;
}

/* m:value([labels]) -> the value; a histogram's count and sum. */
static int m_value(lua_State *L) {
  lmetric_t *lm = check_metric(L, "metric:value");
  kl_series_t *s = series_at(L, lm, lua_istable(L, 2) ? 2 : 0, "metric:value");
  if (kl_metric_type(lm->f) != KL_METRIC_HISTOGRAM) {
    lua_pushnumber(L, kl_series_value(s));
    return 1;
  }
  lua_pushnumber(L, (double)kl_series_count(s));
  lua_pushnumber(L, kl_series_sum(s));
  return 2;
}

static int m_name(lua_State *L) {
  lmetric_t *lm = check_metric(L, "metric:name");
  lua_pushstring(L, kl_metric_name(lm->f));
  return 1;
}

static int m_tostring(lua_State *L) {
  lmetric_t *lm = check_metric(L, "tostring");
  lua_pushfstring(L, "%s(%s)", type_names[kl_metric_type(lm->f)],
                  kl_metric_name(lm->f));
  return 1;
}

static int m_eq(lua_State *L) {
  lmetric_t *a = lua_touserdata(L, 1), *b = lua_touserdata(L, 2);
  lua_pushboolean(L, a && b && a->f == b->f);
  return 1;
}

/* A series bound to its label values (m:with(labels)): the hot path's
 * handle, with no label lookup per call. */
typedef struct lseries {
  kl_series_t *s;
  kl_metric_t *f;
} lseries_t;

static lseries_t *check_series(lua_State *L, const char *fn) {
  lseries_t *ls = luaL_testudata(L, 1, SERIES_MT);
  if (!ls)
    kl_lua_error(L, fn, "expected a metric series, got %s",
                 luaL_typename(L, 1));
  return ls;
}

/* m:with(labels) -> a series handle with inc/dec/set/observe/value. */
static int m_with(lua_State *L) {
  lmetric_t *lm = check_metric(L, "metric:with");
  if (!lua_istable(L, 2))
    return kl_lua_error(L, "metric:with", "labels must be a table, got %s",
                        luaL_typename(L, 2));
  kl_series_t *s = series_at(L, lm, 2, "metric:with");
  lseries_t *ls = lua_newuserdata(L, sizeof *ls);
  ls->s = s;
  ls->f = lm->f;
  luaL_getmetatable(L, SERIES_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static double opt_value(lua_State *L, double dflt, const char *fn) {
  if (lua_isnoneornil(L, 2)) {
    if (isnan(dflt)) kl_lua_error(L, fn, "a number is needed");
    return dflt;
  }
  if (lua_type(L, 2) != LUA_TNUMBER)
    kl_lua_error(L, fn, "expected a number, got %s", luaL_typename(L, 2));
  return lua_tonumber(L, 2);
}

static void check_series_type(lua_State *L, lseries_t *ls, unsigned mask,
                              const char *fn) {
  kl_metric_type_t t = kl_metric_type(ls->f);
  if (!(mask & (1u << t)))
    kl_lua_error(L, fn, "%s is a %s", kl_metric_name(ls->f), type_names[t]);
}

static int s_inc(lua_State *L) {
  lseries_t *ls = check_series(L, "series:inc");
  check_series_type(L, ls, (1u << KL_METRIC_COUNTER) | (1u << KL_METRIC_GAUGE),
                    "series:inc");
  double v = opt_value(L, 1, "series:inc");
  if (kl_series_add(ls->s, v) != 0)
    kl_lua_error(L, "series:inc", "%s: a counter only goes up (got %g)",
                 kl_metric_name(ls->f), v);
  return 0;
}

static int s_dec(lua_State *L) {
  lseries_t *ls = check_series(L, "series:dec");
  check_series_type(L, ls, 1u << KL_METRIC_GAUGE, "series:dec");
  kl_series_add(ls->s, -opt_value(L, 1, "series:dec"));
  return 0;
}

static int s_set(lua_State *L) {
  lseries_t *ls = check_series(L, "series:set");
  check_series_type(L, ls, 1u << KL_METRIC_GAUGE, "series:set");
  kl_series_set(ls->s, opt_value(L, NAN, "series:set"));
  return 0;
}

static int s_observe(lua_State *L) {
  lseries_t *ls = check_series(L, "series:observe");
  check_series_type(L, ls, 1u << KL_METRIC_HISTOGRAM, "series:observe");
  kl_series_observe(ls->s, opt_value(L, NAN, "series:observe"));
  return 0;
}

static int s_value(lua_State *L) {
  lseries_t *ls = check_series(L, "series:value");
  if (kl_metric_type(ls->f) != KL_METRIC_HISTOGRAM) {
    lua_pushnumber(L, kl_series_value(ls->s));
    return 1;
  }
  lua_pushnumber(L, (double)kl_series_count(ls->s));
  lua_pushnumber(L, kl_series_sum(ls->s));
  return 2;
}

static const luaL_Reg series_methods[] = {
    {"inc", s_inc},         {"dec", s_dec},     {"set", s_set},
    {"observe", s_observe}, {"value", s_value}, {NULL, NULL},
};

static const luaL_Reg metric_methods[] = {
    {"with", m_with}, {"inc", m_inc},         {"dec", m_dec},
    {"set", m_set},   {"observe", m_observe}, {"value", m_value},
    {"name", m_name}, {NULL, NULL},
};

/* Registers the family described by the spec table at 1. */
static int open_family(lua_State *L, kl_metric_type_t type, const char *fn) {
  const char *labels[KL_METRICS_MAX_LABELS];
  double buckets[KL_METRICS_MAX_BUCKETS + 1];
  size_t nlabels = 0, nbuckets = 0;
  char err[256];
  if (lua_type(L, 1) != LUA_TTABLE)
    return kl_lua_error(L, fn, "expected a table {name = …}, got %s",
                        luaL_typename(L, 1));
  lua_getfield(L, 1, "name");
  const char *name = lua_tostring(L, -1);
  if (lua_type(L, -1) != LUA_TSTRING)
    return kl_lua_error(L, fn, "name must be a string");
  lua_getfield(L, 1, "help");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
    return kl_lua_error(L, fn, "help must be a string");
  const char *help = lua_tostring(L, -1);
  lua_getfield(L, 1, "labels");
  int li = lua_gettop(L);
  if (!lua_isnil(L, li)) {
    if (lua_type(L, li) != LUA_TTABLE)
      return kl_lua_error(L, fn, "labels must be a list of names");
    nlabels = lua_objlen(L, li);
    if (nlabels > KL_METRICS_MAX_LABELS)
      return kl_lua_error(L, fn, "%s: more than %d labels", name,
                          KL_METRICS_MAX_LABELS);
    for (size_t i = 0; i < nlabels; i++) {
      lua_rawgeti(L, li, (int)i + 1);
      if (lua_type(L, -1) != LUA_TSTRING)
        return kl_lua_error(L, fn, "labels must be a list of names");
      labels[i] = lua_tostring(L, -1); /* stays on the stack */
    }
  }
  lua_getfield(L, 1, "buckets");
  int bi = lua_gettop(L);
  if (!lua_isnil(L, bi)) {
    if (type != KL_METRIC_HISTOGRAM)
      return kl_lua_error(L, fn, "buckets are for histograms");
    if (lua_type(L, bi) != LUA_TTABLE)
      return kl_lua_error(L, fn, "buckets must be a list of numbers");
    nbuckets = lua_objlen(L, bi);
    if (nbuckets == 0 || nbuckets > KL_METRICS_MAX_BUCKETS + 1)
      return kl_lua_error(L, fn, "%s: a histogram needs 1 to %d buckets", name,
                          KL_METRICS_MAX_BUCKETS);
    for (size_t i = 0; i < nbuckets; i++) {
      lua_rawgeti(L, bi, (int)i + 1);
      if (lua_type(L, -1) != LUA_TNUMBER)
        return kl_lua_error(L, fn, "buckets must be a list of numbers");
      buckets[i] = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
  }
  kl_metric_opts_t o = {
      type, name, help, labels, nlabels, nbuckets ? buckets : NULL, nbuckets};
  kl_metric_t *f =
      kl_metrics_register(kl_rt_metrics(kl_rt_from(L)), &o, err, sizeof err);
  if (!f) return kl_lua_error(L, fn, "%s", err);
  lmetric_t *lm = lua_newuserdata(L, sizeof *lm);
  lm->f = f;
  luaL_getmetatable(L, FAMILY_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static int l_counter(lua_State *L) {
  return open_family(L, KL_METRIC_COUNTER, "metrics.counter");
}
static int l_gauge(lua_State *L) {
  return open_family(L, KL_METRIC_GAUGE, "metrics.gauge");
}
static int l_histogram(lua_State *L) {
  return open_family(L, KL_METRIC_HISTOGRAM, "metrics.histogram");
}

/* render() -> the exposition text, after running the C collectors. */
static int l_render(lua_State *L) {
  size_t len;
  char *text = kl_metrics_render(kl_rt_metrics(kl_rt_from(L)), &len);
  lua_pushlstring(L, text, len);
  free(text);
  return 1;
}

static void collect_heap(kl_metrics_t *m, void *ud) {
  lua_State *L = kl_rt_lua(ud);
  kl_metric_opts_t o = {
      KL_METRIC_GAUGE, "kubelua_lua_heap_bytes", NULL, NULL, 0, NULL, 0};
  char err[128];
  kl_metric_t *f = kl_metrics_register(m, &o, err, sizeof err);
  kl_series_t *s = f ? kl_metric_series(f, NULL, err, sizeof err) : NULL;
  if (s)
    kl_series_set(s, (double)lua_gc(L, LUA_GCCOUNT, 0) * 1024 +
                         lua_gc(L, LUA_GCCOUNTB, 0));
}

static const luaL_Reg funcs[] = {
    {"counter", l_counter}, {"gauge", l_gauge}, {"histogram", l_histogram},
    {"render", l_render},   {NULL, NULL},
};

int kl_luaopen_metrics(lua_State *L) {
  kl_rt_t *rt = kl_rt_from(L);
  kl_metrics_t *m = kl_rt_metrics(rt);
  if (luaL_newmetatable(L, FAMILY_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, metric_methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, m_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, m_eq);
    lua_setfield(L, -2, "__eq");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, SERIES_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, series_methods, 0);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  kl_metric_opts_t o = {KL_METRIC_GAUGE,
                        "kubelua_lua_heap_bytes",
                        "Bytes in use by the Lua heap.",
                        NULL,
                        0,
                        NULL,
                        0};
  char err[128];
  kl_metrics_register(m, &o, err, sizeof err);
  kl_metrics_add_collector(m, collect_heap, rt);
  lua_newtable(L);
  luaL_setfuncs(L, funcs, 0);
  return 1;
}
