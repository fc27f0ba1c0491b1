/* fuzz_status.c — Status and error bodies, as the apiserver sends them with
 * a non-2xx answer or in a watch ERROR event:
 *   - the client's response_error (lua/kubelua/client.lua) always gives a
 *     well-formed error table (spec/fuzz/fuzz_status.lua);
 *   - the C side reads the Status of an object and of a watch event, and
 *     agrees with the client on code, reason and message where the body
 *     gives them.
 * Byte 0 picks the HTTP status; the rest is the body. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "fuzz_lua.h"
#include "json.h"
#include "object.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int codes[16] = {200, 201, 400, 401, 403, 404, 409, 410,
                              415, 422, 429, 500, 503, 504, 0,   999};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ref;
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  size_t n = size - 1;

  lua_State *L = fuzz_lua("fuzz_status", &ref);
  int top = lua_gettop(L);
  lua_pushinteger(L, codes[data[0] & 15]);
  lua_pushlstring(L, body, n);

  kl_json_value_t v;
  bool have = false;
  if (kl_json_check(body, n, &v, NULL, 0) == KL_OK) {
    kl_obj_t *o;
    kl_obj_status_t st;
    if (kl_obj_parse(&v, NULL, &o, NULL, 0) == KL_OK) {
      kl_obj_status(o, &st);
      if (!st.status || !st.reason || !st.message) abort();
      /* "code": 4e00 is 0 here (as Go refuses it for an int32) but 4 for
       * the client: compare codes only when written as integers. */
      kl_json_span_t c;
      int64_t code;
      if (kl_json_member(v.json, "code", &c) && !kl_json_int64(c, &code))
        lua_pushnil(L);
      else
        lua_pushnumber(L, (lua_Number)st.code);
      lua_pushstring(L, st.reason);
      lua_pushstring(L, st.message);
      have = true;
      kl_obj_status_clear(&st);
      kl_obj_unref(o);
    }
    kl_obj_event_t ev;
    if (kl_obj_event_parse(&v, NULL, &ev, NULL, 0) == KL_OK) {
      if (ev.type == KL_OBJ_ERROR &&
          (!ev.status.status || !ev.status.reason || !ev.status.message))
        abort();
      kl_obj_event_clear(&ev);
    }
  }

  fuzz_lua_call(L, ref, have ? 5 : 2, 0);
  lua_settop(L, top);
  return 0;
}
