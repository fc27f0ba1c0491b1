/* lua_kube.c — the Lua runtime on the loop: tasks, timers, stop, and the
 * "kubelua.core" module (see lua_kube.h).
 *
 * A task is a coroutine plus a kl_task_t full userdata. While a task lives,
 * two registry references keep its thread and its userdata alive; they are
 * dropped when it ends, and __gc takes it off every list it may still be on.
 * States: READY (on the loop's deferred list), RUNNING (inside lua_resume),
 * WAITING (parked on a wait list or its sleep timer), DEAD. Tasks are only
 * ever resumed from deferred work, never from inside the call that woke them.
 * The thread of a task whose function returned is kept (up to THREAD_POOL,
 * its stack emptied) for the next task: a new task then costs no thread and
 * no stack growth (a webhook's review spawns two, each decoding into its
 * stack). A thread that raised cannot run again and is dropped.
 *
 * kube.after handles embed a kl_timer_t; they are userdata too, kept alive by
 * a registry reference while armed, and disarmed by __gc, so closing the Lua
 * state leaves nothing in the loop's heap. */
#define _DEFAULT_SOURCE /* readlink */
#include "lua_kube.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include <errno.h>
#include <limits.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <unistd.h>

#include <ev.h>

#include "clock.h"
#include "error.h"
#include "http.h"
#include "log.h"
#include "mem.h"
#include "metrics.h"
#include "reflector.h"
#include "watchdog.h"

#define TASK_MT "kubelua.task"
#define AFTER_MT "kubelua.timer"
#define RT_KEY "kubelua.runtime"
#define WATCH_MT "kubelua.filewatch"
#define THREAD_POOL 128 /* idle threads kept for new tasks */
#define THREAD_KEEP 160 /* slots an idle thread keeps in use */

enum { TASK_READY, TASK_RUNNING, TASK_WAITING, TASK_DEAD };
enum { JOIN_PENDING, JOIN_OK, JOIN_FAILED, JOIN_TIMEOUT };

struct kl_task {
  kl_rt_t *rt;
  lua_State *co;
  int thread_ref, self_ref;
  int state;
  int holds;    /* workqueue keys held (a reconcile in progress) */
  unsigned gen; /* the script generation it belongs to (0: the system's) */
  int main;     /* started by kube.spawn from a script's main chunk */
  char name[48];
  /* what it runs, for the watchdog: "task NAME", "reconcile of KEY …" */
  char what[160];
  kl_defer_t defer;    /* run-queue node */
  kl_timer_t timer;    /* kube.sleep */
  kl_waitlist_t *wl;   /* the wait list it is parked on, if any */
  kl_waitlist_t *home; /* the list it was woken from, to park again */
  kl_task_t *wprev, *wnext;
  /* kube.run: a joiner waits for its child; the outcome is kept here */
  kl_task_t *child, *joiner;
  int join_status;     /* JOIN_* */
  int join_ref;        /* results table, or the error message */
  double join_timeout; /* the deadline's length, for its message */
  kl_task_deliver_fn *deliver;
  kl_task_cancel_fn *cancel; /* ends the pending operation if the task dies */
  void *op;
  kl_task_t *prev, *next; /* all live tasks */
};

typedef struct after {
  kl_rt_t *rt;
  kl_timer_t timer;
  int fn_ref, self_ref;
  unsigned gen;
} after_t;

/* core.watch: files whose changes call fn, once they have settled. */
typedef struct fwatch_entry {
  int wd;                  /* the inotify watch of a directory */
  char name[NAME_MAX + 1]; /* an entry in it that matters */
} fwatch_entry_t;

typedef struct fwatch {
  kl_rt_t *rt;
  int fd; /* inotify, or -1 */
  ev_io io;
  kl_timer_t settle, poll;
  double every; /* the poll's period */
  int fn_ref;
  char **paths; /* owned copies, followed again after each change */
  size_t npaths;
  fwatch_entry_t *entries; /* owned; what the paths resolve through */
  size_t nentries, cap;
  int full; /* FWATCH_MAX_ENTRIES reached (said once) */
} fwatch_t;

typedef struct stop_hook {
  kl_rt_stop_hook *fn;
  void *ud;
} stop_hook_t;

struct kl_rt {
  kl_loop_t *loop;
  lua_State *L;
  kl_task_t tasks; /* sentinel of the live-task list */
  size_t ntasks;
  kl_task_t *current;
  int stopping, status, stopped;
  int stop_signal; /* the signal that began the stop, or 0 */
  double shutdown_timeout;
  kl_timer_t stop_timer;
  stop_hook_t *hooks;
  size_t nhooks;
  kl_http_t *http; /* made on first use; outlives the Lua state */
  kl_reflector_servers_t *servers; /* likewise */
  kl_metrics_t *metrics;           /* outlives the Lua state too */
  /* Generations of the scripts (hot reload): the active one, and the one
   * code runs for when C calls Lua on a generation's behalf (a load, a
   * handler, a timer, a server's request) while `scoped`; 0 is the
   * system's (the simulator, the test runner), which never retires. */
  unsigned gen;
  kl_gen_scope_t scope;
  int loading;         /* a generation's main chunk runs (core.load) */
  int main_fatal;      /* a main task that fails stops the runtime, status 1 */
  int hup_ref;         /* SIGHUP's function (a reload), or LUA_NOREF */
  kl_defer_t hup;      /* runs it from the loop */
  int on_stop_ref;     /* core.on_stop functions (a table), or LUA_NOREF */
  int seed_ref;        /* the standard math.randomseed */
  int on_stop_pending; /* they are yet to start */
  kl_defer_t on_stop_run; /* starts them, from the loop */
  /* --hang-timeout's watchdog, or NULL */
  kl_watchdog_t *watchdog;
  /* threads of tasks that returned, each with its registry reference */
  struct {
    lua_State *co;
    int ref;
  } pool[THREAD_POOL];
  int npool;
};

static void task_resume(kl_defer_t *d);
static void check_stopped(kl_rt_t *rt);

/* Errors */

int kl_lua_error(lua_State *L, const char *name, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  luaL_where(L, 1);
  lua_pushfstring(L, "%s: %s", name, msg);
  lua_concat(L, 2);
  lua_error(L);
  abort(); /* lua_error does not return */
}

/* Wait lists */

static void wl_push(kl_waitlist_t *wl, kl_task_t *t) {
  t->wl = wl;
  t->wnext = NULL;
  t->wprev = wl->tail;
  if (wl->tail)
    wl->tail->wnext = t;
  else
    wl->head = t;
  wl->tail = t;
  wl->n++;
}

static void wl_remove(kl_task_t *t) {
  kl_waitlist_t *wl = t->wl;
  if (!wl) return;
  if (t->wprev)
    t->wprev->wnext = t->wnext;
  else
    wl->head = t->wnext;
  if (t->wnext)
    t->wnext->wprev = t->wprev;
  else
    wl->tail = t->wprev;
  wl->n--;
  t->wl = NULL;
  t->wprev = t->wnext = NULL;
}

/* Generations */

unsigned kl_rt_generation(kl_rt_t *rt) {
  if (rt->scope.scoped) return rt->scope.gen;
  return rt->current ? rt->current->gen : rt->gen;
}

int kl_rt_generation_alive(const kl_rt_t *rt, unsigned gen) {
  return gen == 0 || gen == rt->gen ||
         (rt->scope.scoped && gen == rt->scope.gen);
}

void kl_rt_gen_enter(kl_rt_t *rt, unsigned gen, kl_gen_scope_t *saved) {
  *saved = rt->scope;
  rt->scope.scoped = 1;
  rt->scope.gen = gen;
}

void kl_rt_gen_leave(kl_rt_t *rt, const kl_gen_scope_t *saved) {
  rt->scope = *saved;
}

void kl_rt_busy_enter(kl_rt_t *rt, const char *what) {
  if (rt->watchdog) kl_watchdog_enter(rt->watchdog, what);
}

void kl_rt_busy_leave(kl_rt_t *rt) {
  if (rt->watchdog) kl_watchdog_leave(rt->watchdog);
}

/* Tasks */

static void task_schedule(kl_task_t *t) {
  t->state = TASK_READY;
  kl_loop_defer(t->rt->loop, &t->defer);
}

size_t kl_waitlist_wake(kl_waitlist_t *wl, size_t n) {
  size_t woken = 0;
  while (woken < n && wl->head) {
    kl_task_t *t = wl->head;
    wl_remove(t);
    kl_timers_stop(kl_loop_timers(t->rt->loop), &t->timer); /* a deadline */
    t->home = wl;
    task_schedule(t);
    woken++;
  }
  return woken;
}

kl_task_t *kl_task_current(kl_rt_t *rt, lua_State *L) {
  kl_task_t *t = rt->current;
  return t && t->co == L ? t : NULL;
}

void kl_task_set_cancel(kl_task_t *t, kl_task_cancel_fn *cancel) {
  t->cancel = cancel;
}

int kl_task_wait(lua_State *L, kl_waitlist_t *wl, kl_task_deliver_fn *deliver,
                 void *op) {
  kl_task_t *t = kl_rt_from(L)->current;
  t->deliver = deliver;
  t->op = op;
  t->state = TASK_WAITING;
  if (wl) wl_push(wl, t);
  return lua_yield(L, 0);
}

static void task_deadline(kl_timer_t *timer, void *ud) {
  kl_task_t *t = ud;
  (void)timer;
  wl_remove(t);
  task_schedule(t);
}

int kl_task_wait_until(lua_State *L, kl_waitlist_t *wl,
                       kl_task_deliver_fn *deliver, void *op, double at) {
  kl_task_t *t = kl_rt_from(L)->current;
  t->timer.fn = task_deadline;
  kl_timers_start(kl_loop_timers(t->rt->loop), &t->timer, at);
  return kl_task_wait(L, wl, deliver, op);
}

void kl_task_hold(kl_task_t *t, int delta) {
  if (!t) return;
  t->holds += delta;
  if (t->holds == 0) snprintf(t->what, sizeof t->what, "task %s", t->name);
}

void kl_task_set_work(kl_task_t *t, const char *controller, const char *key,
                      size_t len) {
  if (!t) return;
  snprintf(t->what, sizeof t->what, "reconcile of %.*s (controller %s)",
           (int)(len < 100 ? len : 100), key, controller);
  if (t->rt->watchdog && t->state == TASK_RUNNING)
    kl_watchdog_enter(t->rt->watchdog, t->what);
}

/* Takes a task off every list and drops the references that keep it alive.
 * Its userdata stays valid until the collector finds it unreferenced. */
static void task_end(kl_task_t *t) {
  kl_rt_t *rt = t->rt;
  if (t->state == TASK_DEAD) return;
  t->state = TASK_DEAD;
  wl_remove(t);
  t->home = NULL;
  if (t->cancel) {
    kl_task_cancel_fn *cancel = t->cancel;
    t->cancel = NULL;
    cancel(t, t->op);
  }
  if (t->child) { /* a joiner that ends first abandons its child */
    t->child->joiner = NULL;
    t->child = NULL;
  }
  if (t->joiner) t->joiner->child = NULL;
  t->joiner = NULL;
  if (t->join_ref != LUA_NOREF) {
    luaL_unref(rt->L, LUA_REGISTRYINDEX, t->join_ref);
    t->join_ref = LUA_NOREF;
  }
  kl_loop_undefer(rt->loop, &t->defer);
  kl_timers_stop(kl_loop_timers(rt->loop), &t->timer);
  t->prev->next = t->next;
  t->next->prev = t->prev;
  t->prev = t->next = NULL;
  rt->ntasks--;
  luaL_unref(rt->L, LUA_REGISTRYINDEX, t->thread_ref);
  luaL_unref(rt->L, LUA_REGISTRYINDEX, t->self_ref);
  t->thread_ref = t->self_ref = LUA_NOREF;
  t->co = NULL;
}

static int task_gc(lua_State *L) {
  kl_task_t *t = lua_touserdata(L, 1);
  if (t->state != TASK_DEAD) {
    /* Only when the whole state closes: the lists must not keep it. */
    wl_remove(t);
    kl_loop_undefer(t->rt->loop, &t->defer);
    kl_timers_stop(kl_loop_timers(t->rt->loop), &t->timer);
    if (t->prev) {
      t->prev->next = t->next;
      t->next->prev = t->prev;
      t->rt->ntasks--;
    }
    t->state = TASK_DEAD;
  }
  return 0;
}

/* Keeps the thread of a task whose function returned for task_spawn;
 * task_end then leaves the thread's reference alone. LuaJIT's collector
 * halves the stack of a thread that uses less than a quarter of it, so an
 * idle thread holds THREAD_KEEP nils: a stack grown to up to four times
 * that (json.decode's holding room) stays grown. */
static void task_keep_thread(kl_task_t *t) {
  kl_rt_t *rt = t->rt;
  if (rt->npool == THREAD_POOL) return;
  lua_settop(t->co, 0);
  if (lua_checkstack(t->co, THREAD_KEEP)) lua_settop(t->co, THREAD_KEEP);
  rt->pool[rt->npool].co = t->co;
  rt->pool[rt->npool].ref = t->thread_ref;
  rt->npool++;
  t->thread_ref = LUA_NOREF;
}

static void task_sleep_done(kl_timer_t *timer, void *ud) {
  kl_task_t *t = ud;
  (void)timer;
  task_schedule(t);
}

/* Creates a task that will call the function at stack index `fn` with the
 * `nargs` values above it; pops them. The task starts from the run queue. */
static kl_task_t *task_spawn(kl_rt_t *rt, lua_State *L, int nargs,
                             const char *name) {
  lua_State *co;
  int thread_ref;
  if (rt->npool > 0) {
    rt->npool--;
    co = rt->pool[rt->npool].co;
    thread_ref = rt->pool[rt->npool].ref;
    lua_settop(co, 0);
  } else {
    co = lua_newthread(L);
    thread_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_xmove(L, co, nargs + 1);

  kl_task_t *t = lua_newuserdata(L, sizeof *t);
  memset(t, 0, sizeof *t);
  t->rt = rt;
  t->co = co;
  t->thread_ref = thread_ref;
  t->join_ref = LUA_NOREF;
  t->gen = kl_rt_generation(rt);
  t->state = TASK_READY;
  if (!name) name = "task";
  size_t n = strnlen(name, sizeof t->name - 1); /* t is zeroed: ends */
  memcpy(t->name, name, n);
  memcpy(t->what, "task ", 5); /* what has room for "task " and name */
  memcpy(t->what + 5, name, n);
  kl_defer_init(&t->defer, task_resume);
  kl_timer_init(&t->timer, task_sleep_done, t);
  luaL_getmetatable(L, TASK_MT);
  lua_setmetatable(L, -2);
  t->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  t->next = &rt->tasks;
  t->prev = rt->tasks.prev;
  rt->tasks.prev->next = t;
  rt->tasks.prev = t;
  rt->ntasks++;
  /* The first resume receives the arguments already on co's stack. */
  t->deliver = NULL;
  t->op = (void *)(size_t)nargs;
  task_schedule(t);
  return t;
}

/* The first level from `level` up of co's stack that is the user's code:
 * neither a C function nor the embedded library ("@kubelua/…"), so that a
 * traceback starts where the user's code raised the error, not in error()
 * or in a library function that raised it on its behalf. `level` when no
 * frame is the user's. */
static int user_level(lua_State *co, int level) {
  lua_Debug ar;
  for (int l = level; lua_getstack(co, l, &ar); l++) {
    if (!lua_getinfo(co, "S", &ar)) break;
    if (*ar.what != 'C' && strncmp(ar.source, "@kubelua/", 9) != 0) return l;
  }
  return level;
}

/* Pushes onto L the error on top of the failed task co, as text with co's
 * traceback from the user's frame: a string as it is; another value
 * through its __tostring (the client's error tables), called protected;
 * else a note of its type. */
static void push_task_error(lua_State *L, lua_State *co) {
  lua_checkstack(L, LUA_MINSTACK);
  lua_pushvalue(co, -1);
  lua_xmove(co, L, 1);
  if (!lua_isstring(L, -1)) {
    int ok = luaL_getmetafield(L, -1, "__tostring");
    if (ok) {
      lua_pushvalue(L, -2);
      ok = lua_pcall(L, 1, 1, 0) == 0 && lua_isstring(L, -1);
      if (!ok) lua_pop(L, 1);
    }
    if (!ok)
      lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, -1));
    lua_replace(L, -2);
  }
  luaL_traceback(L, co, lua_tostring(L, -1), user_level(co, 0));
  lua_replace(L, -2);
}

/* Logs a task's error with its traceback: "<what>: <error>". */
static void log_task_error(kl_task_t *t, lua_State *co, const char *what) {
  kl_rt_t *rt = t->rt;
  push_task_error(rt->L, co);
  char fields[64];
  snprintf(fields, sizeof fields, " task=%s", t->name);
  kl_log_fields(KL_LOG_ERROR, fields, "%s: %s", what, lua_tostring(rt->L, -1));
  lua_pop(rt->L, 1);
}

/* Hands a finished child's outcome to the task waiting in kube.run: its
 * results in a table (n = count), or its error with a traceback. */
static void finish_join(kl_task_t *child, int ok) {
  kl_task_t *joiner = child->joiner;
  lua_State *L = child->rt->L, *co = child->co;
  lua_checkstack(L, LUA_MINSTACK);
  if (ok) {
    int n = lua_gettop(co);
    lua_checkstack(L, n + 2);
    lua_createtable(L, n, 1);
    for (int i = 1; i <= n; i++) {
      lua_pushvalue(co, i);
      lua_xmove(co, L, 1);
      lua_rawseti(L, -2, i);
    }
    lua_pushinteger(L, n);
    lua_setfield(L, -2, "n");
  } else {
    push_task_error(L, co);
  }
  joiner->join_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  joiner->join_status = ok ? JOIN_OK : JOIN_FAILED;
  joiner->child = NULL;
  child->joiner = NULL;
  kl_timers_stop(kl_loop_timers(child->rt->loop), &joiner->timer);
  task_schedule(joiner);
}

static void task_resume(kl_defer_t *d) {
  kl_task_t *t = (kl_task_t *)((char *)d - offsetof(kl_task_t, defer));
  kl_rt_t *rt = t->rt;
  lua_State *co = t->co;
  int nargs;

  if (t->deliver) {
    kl_waitlist_t *home = t->home;
    t->home = NULL;
    lua_checkstack(co, LUA_MINSTACK);
    nargs = t->deliver(t, co, t->op);
    if (nargs < 0) { /* not ready after all: park again */
      t->state = TASK_WAITING;
      if (home) wl_push(home, t);
      return;
    }
  } else {
    nargs = (int)(size_t)t->op; /* first start, or a plain yield */
  }
  t->deliver = NULL;
  t->cancel = NULL;
  t->op = NULL;

  t->state = TASK_RUNNING;
  rt->current = t;
  if (rt->watchdog) kl_watchdog_enter(rt->watchdog, t->what);
  int rc = lua_resume(co, nargs);
  if (rt->watchdog) kl_watchdog_leave(rt->watchdog);
  rt->current = NULL;

  if (rc == LUA_YIELD) {
    if (t->state == TASK_RUNNING) {
      /* A bare coroutine.yield(): give the loop a turn, then go on. */
      lua_settop(co, 0);
      task_schedule(t);
    }
    if (rt->stopping && !t->holds) task_end(t);
  } else {
    /* A script's main task that fails ends the process (kubelua run), as
     * controller-runtime's manager stops when a runnable fails: nothing
     * would ever start what it was to start. */
    int ok = rc == 0, fatal = !ok && t->main && rt->main_fatal;
    if (t->joiner)
      finish_join(t, ok);
    else if (fatal)
      log_task_error(t, co, "main task failed; stopping with exit status 1");
    else if (!ok)
      log_task_error(t, co, "task failed");
    if (ok) task_keep_thread(t);
    task_end(t);
    if (fatal) kl_rt_stop(rt, 1);
  }
  if (rt->stopping) check_stopped(rt);
}

/* Stop */

/* Starts the core.on_stop functions, each in a task that a stop waits for
 * as for a reconcile in progress (a Lease release, a last status write). */
static void on_stop_start(kl_defer_t *d) {
  kl_rt_t *rt = (kl_rt_t *)((char *)d - offsetof(kl_rt_t, on_stop_run));
  lua_State *L = rt->L;
  rt->on_stop_pending = 0;
  lua_checkstack(L, LUA_MINSTACK);
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->on_stop_ref);
  int fns = lua_gettop(L);
  for (int i = 1, n = (int)lua_objlen(L, fns); i <= n; i++) {
    lua_rawgeti(L, fns, i);
    task_spawn(rt, L, 0, "on-stop")->holds = 1;
  }
  lua_pop(L, 1);
  check_stopped(rt);
}

static void stop_timeout(kl_timer_t *timer, void *ud) {
  kl_rt_t *rt = ud;
  (void)timer;
  size_t busy = 0;
  for (kl_task_t *t = rt->tasks.next; t != &rt->tasks; t = t->next)
    busy += t->holds > 0;
  kl_log(KL_LOG_ERROR,
         "shutdown timed out after %gs with %zu reconciles still running",
         rt->shutdown_timeout, busy);
  rt->status = 1;
  rt->stopped = 1;
  kl_loop_break(rt->loop);
}

static void check_stopped(kl_rt_t *rt) {
  if (rt->stopped || rt->ntasks > 0 || rt->on_stop_pending) return;
  rt->stopped = 1;
  kl_timers_stop(kl_loop_timers(rt->loop), &rt->stop_timer);
  kl_loop_break(rt->loop);
}

void kl_rt_stop(kl_rt_t *rt, int status) {
  if (status && !rt->status) rt->status = status;
  if (rt->stopping) return;
  rt->stopping = 1;
  if (rt->watchdog) kl_watchdog_stopping(rt->watchdog);
  for (size_t i = 0; i < rt->nhooks; i++)
    rt->hooks[i].fn(rt, rt->hooks[i].ud);
  /* Tasks parked without a key, or not yet started, end now; the running
   * task (the one that called kube.stop) ends at its next yield. */
  kl_task_t *t = rt->tasks.next;
  size_t busy = 0;
  while (t != &rt->tasks) {
    kl_task_t *next = t->next;
    if (t->holds)
      busy++;
    else if (t->state != TASK_RUNNING)
      task_end(t);
    t = next;
  }
  if (rt->on_stop_ref != LUA_NOREF) {
    rt->on_stop_pending = 1;
    kl_loop_defer(rt->loop, &rt->on_stop_run);
  }
  kl_log(KL_LOG_INFO, "stopping: waiting for %zu running reconciles", busy);
  kl_timers_start(kl_loop_timers(rt->loop), &rt->stop_timer,
                  kl_loop_now(rt->loop) + rt->shutdown_timeout);
  check_stopped(rt);
}

int kl_rt_stopping(const kl_rt_t *rt) { return rt->stopping; }

int kl_rt_stop_signal(const kl_rt_t *rt) { return rt->stop_signal; }

void kl_rt_on_stop(kl_rt_t *rt, kl_rt_stop_hook *hook, void *ud) {
  rt->hooks = kl_xrealloc(rt->hooks, (rt->nhooks + 1) * sizeof *rt->hooks);
  rt->hooks[rt->nhooks].fn = hook;
  rt->hooks[rt->nhooks].ud = ud;
  rt->nhooks++;
}

void kl_rt_set_shutdown_timeout(kl_rt_t *rt, double seconds) {
  rt->shutdown_timeout = seconds;
}

/* Runs on the stuck task's thread, at its next interpreted instruction (a
 * count hook never fires inside JIT-compiled code): hands the watchdog the
 * task's traceback, once. */
static void hang_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  kl_rt_t *rt = kl_rt_from(L);
  if (!rt->watchdog || !kl_watchdog_wants_trace(rt->watchdog)) return;
  luaL_traceback(L, L, NULL, 0);
  kl_watchdog_set_trace(rt->watchdog, lua_tostring(L, -1));
  lua_pop(L, 1);
}

/* The watchdog's on_hang, on its own thread: lua_sethook is the one call
 * of the Lua API that may come from another thread (or a signal handler). */
static void hang_arm(void *ud, int arm) {
  kl_rt_t *rt = ud;
  if (arm)
    lua_sethook(rt->L, hang_hook, LUA_MASKCOUNT, 1);
  else
    lua_sethook(rt->L, NULL, 0, 0);
}

int kl_rt_set_hang_timeout(kl_rt_t *rt, double seconds) {
  kl_watchdog_free(rt->watchdog);
  rt->watchdog = NULL;
  if (seconds <= 0) return 0;
  rt->watchdog = kl_watchdog_new(seconds, hang_arm, rt);
  return rt->watchdog ? 0 : -1;
}

/* Randomness */

/* Fills buf with n (at most 256) bytes from the kernel's random source,
 * getrandom(2). Returns 0, or KL_EIO with errno set. */
static int os_random(void *buf, size_t n) {
  ssize_t got;
  do
    got = getrandom(buf, n, 0);
  while (got < 0 && errno == EINTR);
  if (got < 0) return KL_EIO;
  if ((size_t)got < n) { /* not for n <= 256, by the manual */
    errno = EIO;
    return KL_EIO;
  }
  return 0;
}

/* Seeds math.random from the kernel, so that no two processes, and no two
 * generations of one, draw the same numbers (a leader's identity, a
 * jitter). Without a random source, from the clocks and the pid, said.
 * L is the running thread. */
static void seed_random(lua_State *L, kl_rt_t *rt) {
  uint64_t x;
  if (os_random(&x, sizeof x) != 0) {
    kl_log(KL_LOG_WARN, "math.random: getrandom: %s; seeded from the clock",
           strerror(errno));
    x = (uint64_t)(kl_clock_wall() * 1e6) ^ ((uint64_t)getpid() << 32);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->seed_ref);
  lua_pushnumber(L, (double)(x >> 11)); /* 53 bits: exact in a double */
  lua_call(L, 1, 0);
}

/* kubelua.core functions */

static kl_rt_t *up_rt(lua_State *L) {
  return *(kl_rt_t **)lua_touserdata(L, lua_upvalueindex(1));
}

double kl_lua_check_seconds(lua_State *L, int idx, const char *name) {
  if (lua_type(L, idx) != LUA_TNUMBER)
    kl_lua_error(L, name, "seconds must be a number, got %s",
                 luaL_typename(L, idx));
  double s = lua_tonumber(L, idx);
  if (isnan(s) || isinf(s))
    kl_lua_error(L, name, "seconds must be finite, got %f", s);
  return s;
}

static void check_function(lua_State *L, int idx, const char *name) {
  if (lua_type(L, idx) != LUA_TFUNCTION)
    kl_lua_error(L, name, "expected a function, got %s", luaL_typename(L, idx));
}

/* core.random_bytes(n) -> n (1 to 256) bytes from the kernel's random
 * source, as a string. */
static int core_random_bytes(lua_State *L) {
  unsigned char buf[256];
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 1 || n > (lua_Integer)sizeof buf)
    return kl_lua_error(L, "core.random_bytes", "n must be 1 to 256, got %d",
                        (int)n);
  if (os_random(buf, (size_t)n) != 0)
    return kl_lua_error(L, "core.random_bytes", "getrandom: %s",
                        strerror(errno));
  lua_pushlstring(L, (const char *)buf, (size_t)n);
  return 1;
}

/* kube.now() -> seconds since the Unix epoch (wall clock, sub-second). */
static int core_now(lua_State *L) {
  lua_pushnumber(L, kl_clock_wall());
  return 1;
}

/* kube.monotonic() -> seconds on the loop's monotonic clock. */
static int core_monotonic(lua_State *L) {
  lua_pushnumber(L, kl_loop_now(up_rt(L)->loop));
  return 1;
}

/* kube.spawn(fn, ...) -> starts fn(...) in a new task on the next turn.
 * Called from a script's main chunk (or a module it requires), it starts a
 * main task, named "main". */
static int core_spawn(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  check_function(L, 1, "kube.spawn");
  int main = rt->loading > 0;
  task_spawn(rt, L, lua_gettop(L) - 1, main ? "main" : "task")->main = main;
  return 0;
}

/* core.spawn_named(name, fn, ...) -> as spawn, with a name for logs. */
static int core_spawn_named(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  const char *name = luaL_checkstring(L, 1);
  char copy[48];
  snprintf(copy, sizeof copy, "%s", name);
  check_function(L, 2, "kube.spawn");
  lua_remove(L, 1);
  task_spawn(rt, L, lua_gettop(L) - 1, copy);
  return 0;
}

/* core.spawn_system(name, fn, ...) -> as spawn_named, but the task belongs
 * to no script generation: a reload does not end it (the runtime's own
 * tasks: leader election, posting Events). */
static int core_spawn_system(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  kl_gen_scope_t saved;
  kl_rt_gen_enter(rt, 0, &saved);
  int n = core_spawn_named(L);
  kl_rt_gen_leave(rt, &saved);
  return n;
}

/* core.system(fn, ...) -> fn's results: calls fn at once with the system's
 * generation (0) as the one code runs for, so that what it makes (a
 * server, a timer, a task) belongs to no script generation and survives a
 * reload, as what the runtime starts before the script does. An error in
 * fn is raised again, the caller's generation restored. */
static int core_system(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  check_function(L, 1, "core.system");
  kl_gen_scope_t saved;
  kl_rt_gen_enter(rt, 0, &saved);
  int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  kl_rt_gen_leave(rt, &saved);
  if (rc != 0) return lua_error(L);
  return lua_gettop(L);
}

static int deliver_nothing(kl_task_t *t, lua_State *co, void *op) {
  (void)t;
  (void)co;
  (void)op;
  return 0;
}

/* kube.sleep(seconds): parks the calling task; outside one, an error. */
static int core_sleep(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  double s = kl_lua_check_seconds(L, 1, "kube.sleep");
  kl_task_t *t = kl_task_current(rt, L);
  if (!t)
    return kl_lua_error(L, "kube.sleep",
                        "not inside a task (use kube.spawn, kube.after or a "
                        "worker to run code that sleeps)");
  t->timer.fn = task_sleep_done;
  kl_timers_start(kl_loop_timers(rt->loop), &t->timer,
                  kl_loop_now(rt->loop) + (s > 0 ? s : 0));
  return kl_task_wait(L, NULL, deliver_nothing, NULL);
}

static void after_fire(kl_timer_t *timer, void *ud) {
  after_t *a = ud;
  kl_rt_t *rt = a->rt;
  lua_State *L = rt->L;
  (void)timer;
  lua_checkstack(L, LUA_MINSTACK);
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->fn_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, a->fn_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, a->self_ref);
  a->fn_ref = a->self_ref = LUA_NOREF;
  if (!rt->stopping && kl_rt_generation_alive(rt, a->gen)) {
    kl_gen_scope_t saved; /* the task belongs to the timer's generation */
    kl_rt_gen_enter(rt, a->gen, &saved);
    task_spawn(rt, L, 0, "after");
    kl_rt_gen_leave(rt, &saved);
  } else {
    lua_pop(L, 1);
  }
}

/* kube.after(seconds, fn) -> handle: runs fn in a new task once the time has
 * passed; handle:cancel() prevents it (returns true if it was pending). */
static int core_after(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  double s = kl_lua_check_seconds(L, 1, "kube.after");
  check_function(L, 2, "kube.after");
  after_t *a = lua_newuserdata(L, sizeof *a);
  a->rt = rt;
  a->fn_ref = a->self_ref = LUA_NOREF;
  a->gen = kl_rt_generation(rt);
  kl_timer_init(&a->timer, after_fire, a);
  luaL_getmetatable(L, AFTER_MT);
  lua_setmetatable(L, -2);
  lua_pushvalue(L, 2);
  a->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, -1);
  a->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  kl_timers_start(kl_loop_timers(rt->loop), &a->timer,
                  kl_loop_now(rt->loop) + (s > 0 ? s : 0));
  return 1;
}

static int after_cancel(lua_State *L) {
  after_t *a = luaL_checkudata(L, 1, AFTER_MT);
  int pending = kl_timer_armed(&a->timer);
  kl_timers_stop(kl_loop_timers(a->rt->loop), &a->timer);
  if (pending) {
    luaL_unref(L, LUA_REGISTRYINDEX, a->fn_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, a->self_ref);
    a->fn_ref = a->self_ref = LUA_NOREF;
  }
  lua_pushboolean(L, pending);
  return 1;
}

static int after_gc(lua_State *L) {
  after_t *a = lua_touserdata(L, 1);
  kl_timers_stop(kl_loop_timers(a->rt->loop), &a->timer);
  return 0;
}

/* kube.stop([status]): graceful stop; the process exits with status. */
static int core_stop(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  int status = (int)luaL_optinteger(L, 1, 0);
  kl_rt_stop(rt, status);
  return 0;
}

static int core_stopping(lua_State *L) {
  lua_pushboolean(L, up_rt(L)->stopping);
  return 1;
}

static int deliver_join(kl_task_t *t, lua_State *co, void *op) {
  (void)op;
  if (t->join_status == JOIN_PENDING) { /* the deadline came first */
    char msg[64];
    if (t->child) task_end(t->child);
    snprintf(msg, sizeof msg, "timed out after %gs", t->join_timeout);
    lua_pushboolean(co, 0);
    lua_pushstring(co, msg);
    lua_pushboolean(co, 1); /* the caller's error: give it a position */
    return 3;
  }
  int ok = t->join_status == JOIN_OK;
  lua_pushboolean(co, ok);
  lua_rawgeti(co, LUA_REGISTRYINDEX, t->join_ref);
  luaL_unref(co, LUA_REGISTRYINDEX, t->join_ref);
  t->join_ref = LUA_NOREF;
  t->join_status = JOIN_PENDING;
  return 2;
}

static void join_deadline(kl_timer_t *timer, void *ud) {
  kl_task_t *t = ud;
  (void)timer;
  task_schedule(t);
}

/* core.run(fn, timeout) -> true, results | false, message [, positioned]:
 * runs fn in a new task and waits for it; only inside a task. The Lua side
 * (kube.run) unpacks the results or raises. */
static int core_run(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  check_function(L, 1, "kube.run");
  double timeout =
      lua_isnoneornil(L, 2) ? 60 : kl_lua_check_seconds(L, 2, "kube.run");
  kl_task_t *t = kl_task_current(rt, L);
  if (!t) { /* raised by kube.run, at its caller's position */
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "not inside a task (kubelua test runs specs in one; a "
                       "script's main chunk uses kube.spawn)");
    lua_pushboolean(L, 1);
    return 3;
  }
  lua_settop(L, 1);
  kl_task_t *child = task_spawn(rt, L, 0, "run");
  child->joiner = t;
  t->child = child;
  t->join_status = JOIN_PENDING;
  /* The deadline reuses the sleep timer: a joiner does not sleep. */
  t->join_timeout = timeout;
  t->timer.fn = join_deadline;
  kl_timers_start(kl_loop_timers(rt->loop), &t->timer,
                  kl_loop_now(rt->loop) + timeout);
  return kl_task_wait(L, NULL, deliver_join, NULL);
}

/* core.log(level, message [, fields]) — fields already formatted. */
static int core_log(lua_State *L) {
  static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
  int level = luaL_checkoption(L, 1, NULL, levels);
  const char *msg = luaL_checkstring(L, 2);
  const char *fields = luaL_optstring(L, 3, NULL);
  kl_log_fields((kl_log_level_t)level, fields, "%s", msg);
  return 0;
}

/* core.traceback(msg [, level]) -> debug.traceback(msg, level) (level 1
 * by default), but from the first frame at or above level that is the
 * user's code (see user_level); a msg that is neither a string nor nil is
 * returned as it is, as debug.traceback does. */
static int core_traceback(lua_State *L) {
  if (!lua_isnoneornil(L, 1) && !lua_isstring(L, 1)) {
    lua_settop(L, 1);
    return 1;
  }
  int level = (int)luaL_optinteger(L, 2, 1); /* 0 is this function */
  luaL_traceback(L, L, lua_tostring(L, 1), user_level(L, level));
  return 1;
}

/* core.in_task() -> whether the caller runs in a task, where a call may
 * wait (a script's main chunk does not, even when a spec loads it from
 * its own task). */
static int core_in_task(lua_State *L) {
  lua_pushboolean(L, kl_task_current(up_rt(L), L) != NULL);
  return 1;
}

/* core.log_level() -> "debug", "info", "warn" or "error". */
static int core_log_level(lua_State *L) {
  lua_pushstring(L, kl_log_level_name(kl_log_get_level()));
  return 1;
}

static int core_tasks(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)up_rt(L)->ntasks);
  return 1;
}

/* Generations (hot reload; lua/kubelua/generation.lua drives them) */

/* core.generation() -> the generation of the code running now. */
static int core_generation(lua_State *L) {
  lua_pushinteger(L, kl_rt_generation(up_rt(L)));
  return 1;
}

/* Ends gen's tasks that wait without holding a key; those in a reconcile
 * finish it (their workers then see the generation retired and return).
 * The running task, if it is one of them, ends when it next yields. */
static void end_generation(kl_rt_t *rt, unsigned gen) {
  kl_task_t *t = rt->tasks.next;
  while (t != &rt->tasks) {
    kl_task_t *next = t->next;
    if (t->gen == gen && !t->holds && t->state != TASK_RUNNING) task_end(t);
    t = next;
  }
}

/* core.load(gen, fn, ...) -> true | false, message with traceback: runs a
 * generation's main chunk. Tasks, timers and handlers it makes belong to
 * gen (the tasks it starts with kube.spawn are main tasks, see
 * kl_rt_start_script); when it returns, gen becomes the active generation, and
 * when it raises, what it started ends. math.random is seeded afresh from the
 * kernel for it. The chunk runs as a script's top level
 * does, outside any task (even when a spec calls this from one): it cannot
 * yield, and API calls there say so. */
static int core_load(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  lua_Integer gen = luaL_checkinteger(L, 1);
  check_function(L, 2, "core.load");
  if (gen <= 0 || (unsigned)gen <= rt->gen)
    return luaL_error(L, "generation %d is not newer than %d", (int)gen,
                      (int)rt->gen);
  int nargs = lua_gettop(L) - 2;
  seed_random(L, rt);
  lua_pushcfunction(L, kl_lua_traceback);
  lua_replace(L, 1);
  kl_task_t *current = rt->current;
  kl_gen_scope_t saved;
  rt->current = NULL;
  kl_rt_gen_enter(rt, (unsigned)gen, &saved);
  rt->loading++;
  int ok = lua_pcall(L, nargs, 0, 1) == 0;
  rt->loading--;
  kl_rt_gen_leave(rt, &saved);
  rt->current = current;
  if (ok)
    rt->gen = (unsigned)gen;
  else
    end_generation(rt, (unsigned)gen);
  lua_pushboolean(L, ok);
  if (ok) return 1;
  lua_insert(L, -2);
  return 2;
}

/* core.generation_busy(gen) -> how many of gen's tasks hold a key (a
 * reconcile in progress). */
static int core_generation_busy(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  unsigned gen = (unsigned)luaL_checkinteger(L, 1);
  lua_Integer n = 0;
  for (kl_task_t *t = rt->tasks.next; t != &rt->tasks; t = t->next)
    n += t->gen == gen && t->holds > 0;
  lua_pushinteger(L, n);
  return 1;
}

/* core.retire(gen): gen stops being the active generation (when it was);
 * its idle tasks end and its timers will not fire. */
static int core_retire(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  unsigned gen = (unsigned)luaL_checkinteger(L, 1);
  if (gen == 0) return luaL_error(L, "generation 0 never retires");
  if (rt->gen == gen) rt->gen = 0;
  end_generation(rt, gen);
  return 0;
}

/* File watching: inotify on the directories that hold the files, and a
 * slow poll as a safety net for filesystems inotify does not cover. A
 * directory reports changes to the entries in it by name, so an editor's
 * rename over the file and a ConfigMap volume's `..data` symlink swap are
 * seen too; only the entries a file's path resolves through count (the
 * file's own name, and every symbolic link on the way with what it names),
 * so a log written next to the script keeps nothing waiting. fn compares
 * contents itself; a settle delay turns an editor's write-rename-chmod into
 * one call, after which the paths are followed again (a swapped symlink
 * leads elsewhere). */

#define SETTLE 0.2 /* seconds without a change before fn is called */
#define POLL 5.0   /* fn runs this often regardless, by default */
#define WATCH_MASK                                                             \
  (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO |      \
   IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)
#define FOLLOW_MAX 40           /* symbolic links on one path (the kernel's) */
#define FWATCH_MAX_ENTRIES 1024 /* directory entries one watch looks at */

static void fwatch_arm(fwatch_t *fw) {
  kl_timers_t *ts = kl_loop_timers(fw->rt->loop);
  kl_timers_stop(ts, &fw->settle);
  kl_timers_start(ts, &fw->settle, kl_loop_now(fw->rt->loop) + SETTLE);
}

/* Watches dir and notes that its entry name (len bytes) matters. */
static void fwatch_note(fwatch_t *fw, const char *dir, const char *name,
                        size_t len) {
  if (len == 0 || len > NAME_MAX || (len == 1 && name[0] == '.')) return;
  int wd = inotify_add_watch(fw->fd, dir, WATCH_MASK);
  if (wd < 0) return;
  for (size_t i = 0; i < fw->nentries; i++)
    if (fw->entries[i].wd == wd &&
        strncmp(fw->entries[i].name, name, len) == 0 &&
        fw->entries[i].name[len] == '\0')
      return;
  if (fw->nentries == FWATCH_MAX_ENTRIES) {
    if (!fw->full)
      kl_log(KL_LOG_WARN,
             "file watch: more than %d directory entries; the others are "
             "polled every %gs",
             FWATCH_MAX_ENTRIES, fw->every);
    fw->full = 1;
    return;
  }
  if (fw->nentries == fw->cap) {
    fw->cap = fw->cap ? 2 * fw->cap : 8;
    fw->entries = kl_xrealloc(fw->entries, fw->cap * sizeof *fw->entries);
  }
  fwatch_entry_t *e = &fw->entries[fw->nentries++];
  e->wd = wd;
  memcpy(e->name, name, len);
  e->name[len] = '\0';
}

/* Splits path into its directory ("." when it names none) and last name. */
static void split_path(const char *path, char dir[PATH_MAX],
                       char base[PATH_MAX]) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, PATH_MAX, ".");
  else if (slash == path)
    snprintf(dir, PATH_MAX, "/");
  else
    snprintf(dir, PATH_MAX, "%.*s", (int)(slash - path), path);
  snprintf(base, PATH_MAX, "%s", slash ? slash + 1 : path);
}

/* Notes every directory entry that resolving path goes through: its name in
 * its directory and, for each symbolic link on the way, the entries its
 * target names (a relative target from the link's directory, an absolute
 * one from the target's own directory). */
static void fwatch_follow(fwatch_t *fw, const char *path) {
  char dir[PATH_MAX], rest[PATH_MAX], entry[PATH_MAX], target[PATH_MAX];
  char base[PATH_MAX], next[PATH_MAX];
  int links = 0;
  split_path(path, dir, rest);
  while (rest[0]) {
    size_t len = strcspn(rest, "/");
    const char *after = rest + len + strspn(rest + len, "/");
    fwatch_note(fw, dir, rest, len);
    int n = snprintf(entry, sizeof entry, "%s/%.*s", dir, (int)len, rest);
    if (n < 0 || (size_t)n >= sizeof entry) return;
    ssize_t tn = readlink(entry, target, sizeof target - 1);
    if (tn <= 0) { /* a directory or the file (or nothing yet) */
      memcpy(dir, entry, (size_t)n + 1);
      memmove(rest, after, strlen(after) + 1);
      continue;
    }
    if (++links > FOLLOW_MAX) return;
    target[tn] = '\0';
    if (target[0] == '/') {
      split_path(target, dir, base);
      n = snprintf(next, sizeof next, "%s/%s", base, after);
    } else {
      n = snprintf(next, sizeof next, "%s/%s", target, after);
    }
    if (n < 0 || (size_t)n >= sizeof next) return;
    memcpy(rest, next, (size_t)n + 1);
  }
}

static void fwatch_follow_all(fwatch_t *fw) {
  for (size_t i = 0; fw->fd >= 0 && i < fw->npaths; i++)
    fwatch_follow(fw, fw->paths[i]);
}

/* Whether an event is about an entry that matters; an event that ends a
 * watch forgets its entries. */
static int fwatch_matters(fwatch_t *fw, const struct inotify_event *ev) {
  int matters = 0;
  if (ev->mask & IN_Q_OVERFLOW) return 1; /* events were lost */
  for (size_t i = 0; i < fw->nentries;) {
    fwatch_entry_t *e = &fw->entries[i];
    if (e->wd != ev->wd) {
      i++;
      continue;
    }
    if (ev->len ? strcmp(ev->name, e->name) == 0
                : (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) != 0)
      matters = 1;
    if (ev->mask & IN_IGNORED)
      *e = fw->entries[--fw->nentries];
    else
      i++;
  }
  return matters;
}

static void fwatch_readable(struct ev_loop *ev, ev_io *w, int revents) {
  fwatch_t *fw = w->data;
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  int matters = 0;
  ssize_t n;
  (void)ev;
  (void)revents;
  while ((n = read(fw->fd, buf, sizeof buf)) > 0) {
    for (const char *p = buf; p < buf + n;) {
      const struct inotify_event *e = (const struct inotify_event *)p;
      matters |= fwatch_matters(fw, e);
      p += sizeof *e + e->len;
    }
  }
  if (matters) fwatch_arm(fw);
}

/* Calls the function a registry reference holds, from the loop's top
 * level; an error is logged with its traceback, prefixed with `what`. */
static void call_ref(kl_rt_t *rt, int ref, const char *what) {
  lua_State *L = rt->L;
  if (rt->stopping || ref == LUA_NOREF) return;
  lua_checkstack(L, LUA_MINSTACK);
  int base = lua_gettop(L);
  lua_pushcfunction(L, kl_lua_traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  if (lua_pcall(L, 0, 0, base + 1) != 0)
    kl_log(KL_LOG_ERROR, "%s: %s", what, lua_tostring(L, -1));
  lua_settop(L, base);
}

static void fwatch_settled(kl_timer_t *timer, void *ud) {
  fwatch_t *fw = ud;
  kl_rt_t *rt = fw->rt;
  if (timer == &fw->poll)
    kl_timers_start(kl_loop_timers(rt->loop), &fw->poll,
                    kl_loop_now(rt->loop) + fw->every);
  fwatch_follow_all(fw);
  call_ref(rt, fw->fn_ref, "file watch");
}

static void fwatch_close(fwatch_t *fw) {
  if (fw->fd >= 0) {
    ev_io_stop(kl_loop_ev(fw->rt->loop), &fw->io);
    close(fw->fd);
    fw->fd = -1;
  }
  kl_timers_stop(kl_loop_timers(fw->rt->loop), &fw->settle);
  kl_timers_stop(kl_loop_timers(fw->rt->loop), &fw->poll);
  if (fw->fn_ref != LUA_NOREF)
    luaL_unref(fw->rt->L, LUA_REGISTRYINDEX, fw->fn_ref);
  fw->fn_ref = LUA_NOREF;
  for (size_t i = 0; i < fw->npaths; i++)
    free(fw->paths[i]);
  free(fw->paths);
  free(fw->entries);
  fw->paths = NULL;
  fw->entries = NULL;
  fw->npaths = fw->nentries = fw->cap = 0;
}

/* core.watch(paths, fn [, poll]) -> handle: calls fn (from the loop, not in
 * a task) after any of the paths changed, and every `poll` seconds (default
 * POLL); handle:close() stops watching. */
static int core_watch(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  check_function(L, 2, "core.watch");
  double every = POLL;
  if (!lua_isnoneornil(L, 3)) {
    every = kl_lua_check_seconds(L, 3, "core.watch");
    if (every <= 0)
      return kl_lua_error(L, "core.watch", "poll must be positive, got %g",
                          every);
  }
  size_t n = lua_objlen(L, 1);
  fwatch_t *fw = lua_newuserdata(L, sizeof *fw);
  memset(fw, 0, sizeof *fw);
  fw->rt = rt;
  fw->fn_ref = LUA_NOREF;
  fw->fd = -1;
  fw->every = every;
  kl_timer_init(&fw->settle, fwatch_settled, fw);
  kl_timer_init(&fw->poll, fwatch_settled, fw);
  luaL_getmetatable(L, WATCH_MT);
  lua_setmetatable(L, -2);
  fw->paths = kl_xcalloc(n ? n : 1, sizeof *fw->paths);
  for (size_t i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, (int)i);
    const char *path = lua_tostring(L, -1);
    if (!path) return luaL_error(L, "core.watch: paths must be strings");
    fw->paths[fw->npaths++] = kl_xstrdup(path);
    lua_pop(L, 1);
  }
  fw->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fw->fd < 0)
    kl_log(KL_LOG_WARN, "file watch: inotify: %s; polling every %gs",
           strerror(errno), every);
  fwatch_follow_all(fw);
  if (fw->fd >= 0) {
    ev_io_init(&fw->io, fwatch_readable, fw->fd, EV_READ);
    fw->io.data = fw;
    ev_io_start(kl_loop_ev(rt->loop), &fw->io);
  }
  kl_timers_start(kl_loop_timers(rt->loop), &fw->poll,
                  kl_loop_now(rt->loop) + every);
  lua_pushvalue(L, 2);
  fw->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

static int watch_close(lua_State *L) {
  fwatch_close(luaL_checkudata(L, 1, WATCH_MT));
  return 0;
}

/* handle:poke(): as if a file changed (fn runs once things settle). */
static int watch_poke(lua_State *L) {
  fwatch_t *fw = luaL_checkudata(L, 1, WATCH_MT);
  if (fw->fn_ref != LUA_NOREF) fwatch_arm(fw);
  return 0;
}

static void hup_run(kl_defer_t *d) {
  kl_rt_t *rt = (kl_rt_t *)((char *)d - offsetof(kl_rt_t, hup));
  call_ref(rt, rt->hup_ref, "SIGHUP");
}

/* core.on_stop(fn): when a graceful stop begins, fn runs in a task of its
 * own, and the stop waits for it (up to the shutdown timeout). */
static int core_on_stop(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  check_function(L, 1, "core.on_stop");
  if (rt->on_stop_ref == LUA_NOREF) {
    lua_newtable(L);
    rt->on_stop_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->on_stop_ref);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
  return 0;
}

/* core.hang_probes(fd): the listening socket of /healthz, which the
 * watchdog answers with 500 while a task hangs (kubelua run
 * --hang-timeout). A no-op without a watchdog. */
static int core_hang_probes(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  int fd = (int)luaL_checkinteger(L, 1);
  if (rt->watchdog) kl_watchdog_set_probes(rt->watchdog, fd);
  return 0;
}

/* core.on_hup(fn): fn runs from the loop on each SIGHUP (nil: none). */
static int core_on_hup(lua_State *L) {
  kl_rt_t *rt = up_rt(L);
  if (!lua_isnil(L, 1)) check_function(L, 1, "core.on_hup");
  if (rt->hup_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, rt->hup_ref);
  rt->hup_ref = LUA_NOREF;
  if (!lua_isnil(L, 1)) {
    lua_pushvalue(L, 1);
    rt->hup_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  return 0;
}

static const luaL_Reg core_funcs[] = {
    {"now", core_now},
    {"monotonic", core_monotonic},
    {"random_bytes", core_random_bytes},
    {"spawn", core_spawn},
    {"spawn_named", core_spawn_named},
    {"sleep", core_sleep},
    {"after", core_after},
    {"stop", core_stop},
    {"stopping", core_stopping},
    {"run", core_run},
    {"log", core_log},
    {"tasks", core_tasks},
    {"generation", core_generation},
    {"load", core_load},
    {"retire", core_retire},
    {"generation_busy", core_generation_busy},
    {"watch", core_watch},
    {"on_hup", core_on_hup},
    {"hang_probes", core_hang_probes},
    {"traceback", core_traceback},
    {"on_stop", core_on_stop},
    {"spawn_system", core_spawn_system},
    {"system", core_system},
    {"in_task", core_in_task},
    {"log_level", core_log_level},
    {NULL, NULL},
};

static int open_core(lua_State *L) {
  lua_newtable(L);
  lua_getfield(L, LUA_REGISTRYINDEX, RT_KEY);
  luaL_setfuncs(L, core_funcs, 1);
  kl_luaopen_workqueue(L);
  lua_setfield(L, -2, "workqueue");
  lua_pushstring(L, KL_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}

/* Runtime */

kl_rt_t *kl_rt_from(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, RT_KEY);
  kl_rt_t *rt = *(kl_rt_t **)lua_touserdata(L, -1);
  lua_pop(L, 1);
  return rt;
}

static int load_embedded(lua_State *L) {
  const kl_lua_module_t *m = lua_touserdata(L, lua_upvalueindex(1));
  if (luaL_loadbuffer(L, (const char *)m->bytecode, m->size, m->name) != 0)
    return lua_error(L);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

/* LuaJIT workaround: table traversal is never compiled.
 *
 * LuaJIT 2.1 snapshots from the commit that made next() and pairs()
 * compilable (2021) to the fix of LuaJIT issue #829 (2022-04-05), Debian
 * 12's 2.1.0~beta3+git20220320 among them, compile a traversal on x64 to a
 * call of lj_vm_next, which returns a pointer in rax and an index in rdx.
 * When the register allocator wants them the other way round, ra_destpair
 * swaps them with `xchg eax, edx`, without REX.W: the pointer loses its
 * high half and the trace reads the low 32 bits of a hash node's address,
 * or of the C stack (sp+8) for the array part, and dies with SIGSEGV.
 * Whether a loop gets swapped registers depends on where objects lie
 * relative to the dispatch table, so it came about once in 30 runs of
 * spec/informer_spec.lua (in luassert's deepcompare, at `for k1, v1 in
 * next, t1`) and now and then in whole-suite runs.
 *
 * The recorder compiles only the builtin next (ITERN after ISNEXT, and
 * next() calls); a C function aborts the trace. So where LuaJIT is
 * affected, next, pairs and table.foreach (which LuaJIT writes in Lua with
 * the builtin next) are replaced by equivalents over a C next: traversal
 * loops run interpreted, everything else is still compiled. Affected means
 * x64 and the version string "LuaJIT 2.1.0-beta3", which fixed snapshots
 * until 2023 share (they lose compiled traversal, as older releases never
 * had it); releases since call themselves 2.1.<timestamp>.
 * spec/jit_spec.lua checks that no trace calls lj_vm_next. */
static int jitfix_next(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  if (lua_next(L, 1)) return 2;
  lua_pushnil(L);
  return 1;
}

/* A cdata (LuaJIT's type after LUA_TTHREAD) goes to the builtin pairs for
 * its __pairs; anything else but a table raises as the builtin does. */
static int jitfix_pairs(lua_State *L) {
  if (lua_type(L, 1) > LUA_TTHREAD) {
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(2));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
  }
  luaL_checkany(L, 1);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* table.foreach, which LuaJIT writes in Lua with the builtin next. */
static const char jitfix_foreach[] =
    "local next, type, error = ...\n"
    "return function(t, f)\n"
    "  if type(t) ~= 'table' then error(\"bad argument #1 to 'foreach' \"\n"
    "    .. '(table expected, got ' .. type(t) .. ')', 2) end\n"
    "  if type(f) ~= 'function' then error(\"bad argument #2 to 'foreach' \"\n"
    "    .. '(function expected, got ' .. type(f) .. ')', 2) end\n"
    "  for k, v in next, t do\n"
    "    local r = f(k, v)\n"
    "    if r ~= nil then return r end\n"
    "  end\n"
    "end\n";

static void jitfix_traversal(lua_State *L) {
  lua_getglobal(L, "jit");
  lua_getfield(L, -1, "version");
  lua_getfield(L, -2, "arch");
  const char *version = lua_tostring(L, -2), *arch = lua_tostring(L, -1);
  int affected = version && arch &&
                 strcmp(version, "LuaJIT 2.1.0-beta3") == 0 &&
                 strcmp(arch, "x64") == 0;
  lua_pop(L, 3);
  if (!affected) return;
  lua_pushcfunction(L, jitfix_next);
  lua_pushvalue(L, -1);
  lua_setglobal(L, "next");
  lua_getglobal(L, "pairs");
  lua_pushcclosure(L, jitfix_pairs, 2);
  lua_setglobal(L, "pairs");
  lua_getglobal(L, "table");
  if (luaL_loadbuffer(L, jitfix_foreach, sizeof jitfix_foreach - 1,
                      "=table.foreach") != 0)
    abort(); /* the chunk above does not compile: a bug here */
  lua_getglobal(L, "next");
  lua_getglobal(L, "type");
  lua_getglobal(L, "error");
  lua_call(L, 3, 1);
  lua_setfield(L, -2, "foreach");
  lua_pop(L, 1);
}

kl_rt_t *kl_rt_new(kl_loop_t *loop) {
  kl_rt_t *rt = kl_xcalloc(1, sizeof *rt);
  rt->loop = loop;
  rt->tasks.next = rt->tasks.prev = &rt->tasks;
  rt->shutdown_timeout = 30;
  rt->hup_ref = rt->on_stop_ref = LUA_NOREF;
  kl_defer_init(&rt->hup, hup_run);
  kl_defer_init(&rt->on_stop_run, on_stop_start);
  kl_timer_init(&rt->stop_timer, stop_timeout, rt);

  lua_State *L = rt->L = luaL_newstate();
  if (!L) {
    free(rt);
    return NULL;
  }
  rt->metrics = kl_metrics_new();
  kl_metrics_add_process(rt->metrics);
  luaL_openlibs(L);
  jitfix_traversal(L);
  lua_getglobal(L, "math");
  lua_getfield(L, -1, "randomseed");
  rt->seed_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 1);
  seed_random(L, rt);
  kl_rt_t **box = lua_newuserdata(L, sizeof *box);
  *box = rt;
  lua_setfield(L, LUA_REGISTRYINDEX, RT_KEY);

  luaL_newmetatable(L, TASK_MT);
  lua_pushcfunction(L, task_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newmetatable(L, WATCH_MT);
  lua_pushcfunction(L, watch_close);
  lua_setfield(L, -2, "__gc");
  lua_newtable(L);
  lua_pushcfunction(L, watch_close);
  lua_setfield(L, -2, "close");
  lua_pushcfunction(L, watch_poke);
  lua_setfield(L, -2, "poke");
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_newmetatable(L, AFTER_MT);
  lua_pushcfunction(L, after_gc);
  lua_setfield(L, -2, "__gc");
  lua_newtable(L);
  lua_pushcfunction(L, after_cancel);
  lua_setfield(L, -2, "cancel");
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);

  /* package.preload: the C module and the embedded Lua library. */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, open_core);
  lua_setfield(L, -2, "kubelua.core");
  lua_pushcfunction(L, kl_luaopen_json);
  lua_setfield(L, -2, "kubelua.json");
  lua_pushcfunction(L, kl_luaopen_httpd);
  lua_setfield(L, -2, "kubelua.httpd");
  lua_pushcfunction(L, kl_luaopen_informer);
  lua_setfield(L, -2, "kubelua.informer");
  lua_pushcfunction(L, kl_luaopen_http);
  lua_setfield(L, -2, "kubelua.http");
  lua_pushcfunction(L, kl_luaopen_kubeconfig);
  lua_setfield(L, -2, "kubelua.kubeconfig");
  lua_pushcfunction(L, kl_luaopen_metrics);
  lua_setfield(L, -2, "kubelua.metrics.core");
  lua_pushcfunction(L, kl_luaopen_process);
  lua_setfield(L, -2, "kubelua.process");
  for (const kl_lua_module_t *m = kl_lua_modules; m->name; m++) {
    lua_pushlightuserdata(L, (void *)m); /* static data, not heap */
    lua_pushcclosure(L, load_embedded, 1);
    lua_setfield(L, -2, m->name);
  }
  lua_pop(L, 2);
  return rt;
}

kl_http_t *kl_rt_http(kl_rt_t *rt) {
  if (!rt->http) rt->http = kl_http_new(rt->loop, "kubelua/" KL_VERSION);
  return rt->http;
}

void kl_rt_free(kl_rt_t *rt) {
  if (!rt) return;
  kl_timers_stop(kl_loop_timers(rt->loop), &rt->stop_timer);
  kl_loop_undefer(rt->loop, &rt->hup);
  kl_loop_undefer(rt->loop, &rt->on_stop_run);
  kl_watchdog_free(rt->watchdog); /* before the probes' socket closes */
  lua_close(rt->L); /* requests and reflectors end here, http is still up */
  kl_http_free(rt->http);
  kl_reflector_servers_free(rt->servers);
  kl_metrics_free(rt->metrics);
  free(rt->hooks);
  free(rt);
}

kl_reflector_servers_t *kl_rt_reflector_servers(kl_rt_t *rt) {
  if (!rt->servers) rt->servers = kl_reflector_servers_new();
  return rt->servers;
}

lua_State *kl_rt_lua(kl_rt_t *rt) { return rt->L; }
kl_metrics_t *kl_rt_metrics(kl_rt_t *rt) { return rt->metrics; }
kl_loop_t *kl_rt_loop(kl_rt_t *rt) { return rt->loop; }

int kl_lua_traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return 1;
    msg =
        lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, user_level(L, 1));
  return 1;
}

int kl_rt_start_script(kl_rt_t *rt, const char *path, int argc, char **argv,
                       double watch_poll) {
  lua_State *L = rt->L;
  int base = lua_gettop(L);
  rt->main_fatal = 1;
  lua_pushcfunction(L, kl_lua_traceback);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "kubelua.generation");
  if (lua_pcall(L, 1, 1, base + 1) != 0) {
    kl_log(KL_LOG_ERROR, "%s", lua_tostring(L, -1));
    lua_settop(L, base);
    return 1;
  }
  lua_getfield(L, -1, "start");
  lua_pushstring(L, path);
  lua_createtable(L, argc, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, watch_poll > 0);
  lua_setfield(L, -2, "watch");
  if (watch_poll > 0) {
    lua_pushnumber(L, watch_poll);
    lua_setfield(L, -2, "poll");
  }
  int rc = lua_pcall(L, 3, 2, base + 1);
  if (rc != 0 || !lua_toboolean(L, -2)) {
    kl_log(KL_LOG_ERROR, "%s", lua_tostring(L, -1));
    lua_settop(L, base);
    return 1;
  }
  lua_settop(L, base);
  return 0;
}

static void on_signal(kl_loop_t *loop, int signum, void *ud) {
  kl_rt_t *rt = ud;
  (void)loop;
  if (signum == SIGHUP) {
    if (rt->hup_ref == LUA_NOREF)
      kl_log(KL_LOG_INFO, "SIGHUP: no scripts to reload; ignored");
    else
      kl_loop_defer(rt->loop, &rt->hup);
    return;
  }
  if (rt->stopping) {
    kl_log(KL_LOG_WARN, "second signal %d: exiting at once", signum);
    rt->status = 1;
    rt->stopped = 1;
    kl_loop_break(rt->loop);
    return;
  }
  kl_log(KL_LOG_INFO, "signal %d: stopping gracefully", signum);
  rt->stop_signal = signum;
  kl_rt_stop(rt, 0);
}

int kl_rt_loop_until_stopped(kl_rt_t *rt) {
  kl_loop_on_signal(rt->loop, on_signal, rt);
  while (!rt->stopped)
    kl_loop_run(rt->loop);
  kl_loop_on_signal(rt->loop, NULL, NULL);
  return rt->status;
}
