/* fuzz_selector.c — label and field selectors. The runtime passes selectors
 * to the apiserver without parsing them, so the parsers to fuzz are the
 * simulator's (kubelua.sim.util, in Lua): spec/fuzz/fuzz_selector.lua runs
 * them on the input as a selector string. */
#include <stdint.h>

#include "fuzz_lua.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ref;
  lua_State *L = fuzz_lua("fuzz_selector", &ref);
  int top = lua_gettop(L);
  lua_pushlstring(L, (const char *)data, size);
  fuzz_lua_call(L, ref, 1, 0);
  lua_settop(L, top);
  return 0;
}
