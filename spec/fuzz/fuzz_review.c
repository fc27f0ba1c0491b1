/* fuzz_review.c — the webhooks' review bodies (lua/kubelua/webhook.lua):
 * an AdmissionReview or ConversionReview as the API server POSTs it,
 * decoded into the request table the handler gets, run through a
 * validate, mutate or convert handler, and the response review encoded
 * as the server sends it. The checks are in spec/fuzz/fuzz_review.lua.
 * Byte 0 picks the webhook's kind (bits 0-1) and what the mutating handler
 * changes (bits 2-7); the rest is the body. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_lua.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ref;
  if (size < 1) return 0;
  lua_State *L = fuzz_lua("fuzz_review", &ref);
  int top = lua_gettop(L);
  lua_pushinteger(L, data[0]);
  lua_pushlstring(L, (const char *)data + 1, size - 1);
  fuzz_lua_call(L, ref, 2, 0);
  lua_settop(L, top);
  return 0;
}
