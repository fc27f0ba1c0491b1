/* lua_json.h — JSON to and from Lua values, for C code that holds a
 * lua_State (the kubelua.json module, lazy decoding of cached objects).
 *
 * Exact in both directions: arrays (empty ones too) carry the metatable
 * registered as "kubelua.array", JSON null is the light userdata NULL (kept
 * at registry "kubelua.null"; it is also cjson.null), integers up to 2^53
 * are numbers, larger ones are refused, never rounded. */
#ifndef KL_LUA_JSON_H
#define KL_LUA_JSON_H

#include <stddef.h>

#include <lua.h>

/* Pushes the Lua value of the JSON text s[0, n) (one value of any type,
 * whitespace around it allowed, nested at most 128 deep) and returns KL_OK;
 * or pushes nothing, writes "byte N: reason" into err (errlen bytes) and
 * returns KL_EPARSE. May raise only on memory errors. */
int kl_lua_json_decode(lua_State *L, const char *s, size_t n, char *err,
                       size_t errlen);

/* Pushes the compact JSON text of the value at idx. Raises a Lua error
 * "json: <reason> at <path>" for a value that has no exact JSON form
 * (NaN/inf, mixed or non-string keys, sparse arrays, cycles, nesting deeper
 * than 128, invalid UTF-8, functions and other non-data types). Object keys
 * are written in byte order. */
void kl_lua_json_encode(lua_State *L, int idx);

#endif
