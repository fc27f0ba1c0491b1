/* fuzz_lua.h — a kubelua Lua state for the fuzz targets that check Lua code
 * (the JSON boundary, Status parsing, selectors): one runtime per process,
 * made on first use, with the same preloaded library as the kubelua binary.
 * A target's checks live in spec/fuzz/<name>.lua, a chunk that returns one
 * function; fuzz_lua_call() runs it protected and aborts, with the message
 * and traceback, when it raises: a Lua error is this harness's crash. */
#ifndef KL_FUZZ_LUA_H
#define KL_FUZZ_LUA_H

#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>

#include "loop.h"
#include "lua_kube.h"

/* The state, and the check function of spec/fuzz/<name>.lua at registry
 * reference *ref (loaded on the first call). */
static lua_State *fuzz_lua(const char *name, int *ref) {
  static kl_rt_t *rt;
  if (!rt) {
    kl_loop_t *loop = kl_loop_new(NULL);
    if (!loop) abort();
    rt = kl_rt_new(loop); /* lives as long as the process */
  }
  lua_State *L = kl_rt_lua(rt);
  if (*ref == LUA_NOREF || *ref == 0) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.lua", KL_FUZZ_DIR, name);
    if (luaL_loadfile(L, path) != 0 || lua_pcall(L, 0, 1, 0) != 0 ||
        !lua_isfunction(L, -1)) {
      fprintf(stderr, "fuzz: %s: %s\n", path, lua_tostring(L, -1));
      abort();
    }
    *ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  return L;
}

/* Calls the check function (ref) with the nargs values on top of the stack
 * and leaves nres results; aborts if it raises. */
static void fuzz_lua_call(lua_State *L, int ref, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, kl_lua_traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  lua_insert(L, base + 1);
  lua_insert(L, base + 1);
  if (lua_pcall(L, nargs, nres, base + 1) != 0) {
    fprintf(stderr, "fuzz: check failed: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_remove(L, base + 1);
}

#endif
