/* watchdog.h — a thread that notices when the loop's thread is stuck.
 *
 * The one thread runs the loop and Lua, so code that never yields (a
 * reconcile in `while true do end`) blocks everything: signals, /healthz,
 * the Lease. The loop's thread says what it runs (kl_watchdog_enter) and
 * when it is back (kl_watchdog_leave); the watchdog's own thread checks,
 * and when one run has lasted longer than the hang timeout it:
 *   - logs "WHAT has not yielded for N s" once, with a traceback when the
 *     on_hang callback can get one (a Lua hook: see lua_kube.c);
 *   - answers every request on the probes' listening socket with 500, so
 *     that the kubelet restarts the pod;
 * and from a second of being stuck on, it takes SIGINT and SIGTERM itself:
 * a first one is handed back to the loop when it is free again, a second
 * one (or a first during a graceful stop) flushes stdout and ends the
 * process at once. */
#ifndef KL_WATCHDOG_H
#define KL_WATCHDOG_H

typedef struct kl_watchdog kl_watchdog_t;

/* Called on the watchdog's thread: arm (1) once a hang is found, to ask the
 * stuck code for a traceback (kl_watchdog_set_trace), and arm (0) when the
 * watchdog stops waiting for it. It must be safe to call from another
 * thread (lua_sethook is). */
typedef void kl_watchdog_hang_fn(void *ud, int arm);

/* Starts the watchdog's thread (every signal blocked in it). hang_timeout
 * is in seconds, > 0. NULL when the thread cannot start. */
kl_watchdog_t *kl_watchdog_new(double hang_timeout, kl_watchdog_hang_fn *fn,
                               void *ud);
/* Stops and joins the thread, then frees. NULL is a no-op. */
void kl_watchdog_free(kl_watchdog_t *wd);

/* The loop's thread begins to run `what` ("reconcile of KEY (controller
 * C)", copied), or, while it runs, names it anew. */
void kl_watchdog_enter(kl_watchdog_t *wd, const char *what);
/* The loop's thread is back in the loop; logs the recovery of a run that
 * was reported as hung. */
void kl_watchdog_leave(kl_watchdog_t *wd);
/* Whether a traceback is wanted now (asked from the stuck code's hook). */
int kl_watchdog_wants_trace(kl_watchdog_t *wd);
/* The traceback of the stuck code ("stack traceback:\n\t…", copied). */
void kl_watchdog_set_trace(kl_watchdog_t *wd, const char *trace);
/* The listening socket of /healthz, answered by the watchdog while the
 * loop hangs (-1: none). The socket must outlive the watchdog. */
void kl_watchdog_set_probes(kl_watchdog_t *wd, int fd);
/* A graceful stop has begun: the next signal is the second. */
void kl_watchdog_stopping(kl_watchdog_t *wd);

#endif
