/* lua_kubeconfig.h — the credentials of require "kubelua.kubeconfig", for C
 * code that holds a lua_State (an informer's reflector asks them before
 * each request). */
#ifndef KL_LUA_KUBECONFIG_H
#define KL_LUA_KUBECONFIG_H

#include <lua.h>

#include "kubeconfig.h"

/* The C credentials behind the creds userdata at idx (as returned by
 * kubeconfig.load), or NULL when the value is something else. Borrowed:
 * take a reference (kl_kc_creds_ref) to keep them past the userdata. */
kl_kc_creds_t *kl_lua_kc_creds(lua_State *L, int idx);

#endif
