/* lua_kube.h — the Lua side of the runtime: one Lua state on the loop, and
 * the tasks (coroutines) that scripts run in.
 *
 * A task owns at most one pending operation (STYLE rule 13): it parks on a
 * wait list or a timer with kl_task_wait(), and is resumed from deferred work
 * on the loop, where a deliver function pushes the operation's results.
 * Bindings in other lua_*.c files use this header; the C core does not. */
#ifndef KL_LUA_KUBE_H
#define KL_LUA_KUBE_H

#include <stddef.h>

#include <lauxlib.h>
#include <lua.h>

#include "loop.h"

/* One module of the Lua library compiled to bytecode (lua_modules.c). */
typedef struct kl_lua_module {
  const char *name;
  const unsigned char *bytecode;
  size_t size;
} kl_lua_module_t;
extern const kl_lua_module_t kl_lua_modules[];

typedef struct kl_rt kl_rt_t;
typedef struct kl_task kl_task_t;

/* Pushes a parked task's results onto co when it is about to resume and
 * returns how many; or returns -1 to park it again on the same wait list. */
typedef int kl_task_deliver_fn(kl_task_t *t, lua_State *co, void *op);

/* Ends a parked task's pending operation when the task dies before it is
 * resumed (a stop, a timeout of kube.run); op is what kl_task_wait got. */
typedef void kl_task_cancel_fn(kl_task_t *t, void *op);

/* Tasks parked on one condition, in arrival order. */
typedef struct kl_waitlist {
  kl_task_t *head, *tail;
  size_t n;
} kl_waitlist_t;

/* Hooks run once when the runtime starts stopping (kube.stop or a signal). */
typedef void kl_rt_stop_hook(kl_rt_t *rt, void *ud);

/* A runtime on `loop` with a fresh Lua state: standard libraries, the
 * embedded library in package.preload, require "kubelua" ready. */
kl_rt_t *kl_rt_new(kl_loop_t *loop);
/* Closes the Lua state (collecting every task and handle), then frees. */
void kl_rt_free(kl_rt_t *rt);
lua_State *kl_rt_lua(kl_rt_t *rt);
/* The runtime's HTTP client, shared by every request and watch; NULL when
 * libcurl cannot start. Freed after the Lua state closes. */
struct kl_http *kl_rt_http(kl_rt_t *rt);
struct kl_reflector_servers;
/* What the process's reflectors learnt about their servers (reflector.h),
 * shared by every informer: made on first use, freed after the Lua state
 * closes. */
struct kl_reflector_servers *kl_rt_reflector_servers(kl_rt_t *rt);
kl_loop_t *kl_rt_loop(kl_rt_t *rt);
struct kl_metrics;
/* The runtime's metrics registry (metrics.h): it outlives the Lua state, so
 * metrics survive hot reloads; freed with the runtime. */
struct kl_metrics *kl_rt_metrics(kl_rt_t *rt);
/* The runtime of a state (or of any of its coroutines). */
kl_rt_t *kl_rt_from(lua_State *L);

/* Runs a controller script as the first generation (lua/kubelua/
 * generation.lua: `args` as the global `arg`, arg[0] the script) and, when
 * watch_poll > 0, reloads it when its files change (inotify, and a look
 * every watch_poll seconds); SIGHUP reloads it too.
 * From then on, a main task (kube.spawn from a generation's main chunk)
 * that raises is logged with its traceback and stops the runtime with
 * status 1 (kl_rt_stop); other tasks' errors are only logged.
 * Returns 0, or 1 with the message (file:line: …) logged. */
int kl_rt_start_script(kl_rt_t *rt, const char *path, int argc, char **argv,
                       double watch_poll);
/* Runs the loop until the runtime has stopped; returns the exit status. */
int kl_rt_loop_until_stopped(kl_rt_t *rt);

/* Begins a graceful stop: queues shut down, idle tasks end, tasks that hold
 * a workqueue key finish their reconcile; then the loop ends with `status`.
 * Later calls only lower a zero status to a failure. */
void kl_rt_stop(kl_rt_t *rt, int status);
int kl_rt_stopping(const kl_rt_t *rt);
/* The signal (SIGINT, SIGTERM) that began the stop, or 0. */
int kl_rt_stop_signal(const kl_rt_t *rt);
void kl_rt_on_stop(kl_rt_t *rt, kl_rt_stop_hook *hook, void *ud);
/* Seconds a graceful stop may take before the process gives up (default 30). */
void kl_rt_set_shutdown_timeout(kl_rt_t *rt, double seconds);
/* Starts a watchdog (watchdog.h) that reports a task which has not yielded
 * for `seconds`, fails /healthz while it hangs and lets a second signal end
 * the process; 0 stops it. Returns 0, or -1 when its thread cannot start. */
int kl_rt_set_hang_timeout(kl_rt_t *rt, double seconds);

/* Generations of the scripts (hot reload). Tasks, kube.after timers and
 * informer handlers belong to the generation whose code made them; 0 is the
 * system's (the simulator, the test runner) and never retires. */

/* The generation of the code running now: the scoped one, else the
 * running task's, else the active one. */
unsigned kl_rt_generation(kl_rt_t *rt);
/* False once gen was retired or failed to load. */
int kl_rt_generation_alive(const kl_rt_t *rt, unsigned gen);

/* C that calls Lua on behalf of a generation (a handler it registered, a
 * server it started) scopes the call, so that tasks the call spawns belong
 * to that generation and not to whichever is active. */
typedef struct kl_gen_scope {
  int scoped;
  unsigned gen;
} kl_gen_scope_t;
void kl_rt_gen_enter(kl_rt_t *rt, unsigned gen, kl_gen_scope_t *saved);
void kl_rt_gen_leave(kl_rt_t *rt, const kl_gen_scope_t *saved);

/* C that runs Lua outside a task (an informer's handlers) tells
 * --hang-timeout's watchdog what it runs ("a handler of informer NAME"),
 * and when it is back. No-ops without a watchdog. */
void kl_rt_busy_enter(kl_rt_t *rt, const char *what);
void kl_rt_busy_leave(kl_rt_t *rt);

/* A message handler for lua_pcall: the message (or a description of a
 * non-string error) with a traceback from the user's frame. */
int kl_lua_traceback(lua_State *L);

/* Tasks */

/* The task running on L, or NULL when L is not a kubelua task. */
kl_task_t *kl_task_current(kl_rt_t *rt, lua_State *L);
/* Parks the current task on wl and yields; when woken, deliver(t, co, op)
 * produces the results. Call as `return kl_task_wait(...)` from a C function;
 * L must be the current task's state. */
int kl_task_wait(lua_State *L, kl_waitlist_t *wl, kl_task_deliver_fn *deliver,
                 void *op);
/* kl_task_wait with a deadline: the task also resumes at loop time `at`
 * (taken off wl then); deliver produces the results either way. */
int kl_task_wait_until(lua_State *L, kl_waitlist_t *wl,
                       kl_task_deliver_fn *deliver, void *op, double at);
/* Sets the cancel hook of the wait the current task is about to begin
 * (call right before kl_task_wait); cleared when the task resumes. */
void kl_task_set_cancel(kl_task_t *t, kl_task_cancel_fn *cancel);
/* Moves up to n parked tasks from wl to the run queue; returns how many. */
size_t kl_waitlist_wake(kl_waitlist_t *wl, size_t n);
/* Marks that t holds (+1) or released (-1) a workqueue key: a task holding a
 * key is in the middle of a reconcile, which a graceful stop lets finish. */
void kl_task_hold(kl_task_t *t, int delta);
/* Names what t works on now, for the watchdog's reports: the key it took
 * from the queue of `controller`. */
void kl_task_set_work(kl_task_t *t, const char *controller, const char *key,
                      size_t len);

/* The number of seconds at idx, finite; raises "NAME: seconds must be ..."
 * otherwise. */
double kl_lua_check_seconds(lua_State *L, int idx, const char *name);

/* Raises "where: NAME: MSG" as a Lua error, where is the position of the
 * Lua code that called the C function, as error(msg, 2) does in Lua. */
int kl_lua_error(lua_State *L, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* The bytes of a string or of a bytes value (httpd.join's immutable
 * userdata, kept out of LuaJIT's string table) at idx; NULL for any other
 * value. mt: the stack index (an upvalue's, say) of the bytes metatable
 * that kl_lua_push_bytes_mt pushes, or 0 to look it up. */
const char *kl_lua_bytes(lua_State *L, int idx, int mt, size_t *len);
/* Pushes the metatable of bytes values (made on first use). */
void kl_lua_push_bytes_mt(lua_State *L);
/* Pushes a new bytes value of len bytes; returns its buffer to fill. */
char *kl_lua_newbytes(lua_State *L, size_t len);

/* Bindings, each opening one module table on the stack. */
int kl_luaopen_workqueue(lua_State *L);
int kl_luaopen_json(lua_State *L);
int kl_luaopen_httpd(lua_State *L);
int kl_luaopen_informer(lua_State *L);
int kl_luaopen_http(lua_State *L);
int kl_luaopen_kubeconfig(lua_State *L);
int kl_luaopen_metrics(lua_State *L);
int kl_luaopen_process(lua_State *L);

#endif
