/* watchdog.c — a thread that notices when the loop's thread is stuck (see
 * watchdog.h).
 *
 * Shared state (what runs, since when, the traceback) is guarded by one
 * mutex; the loop's thread holds it only to copy a name or a time, never
 * while it runs code, so the watchdog can always take it. The watchdog's
 * thread wakes every TICK seconds (or when told to quit); it does its slow
 * work (logging, answering probes, taking signals) without the mutex.
 *
 * Time is the process's monotonic clock, not the loop's: the watchdog
 * measures how long the loop's thread has really been away.
 *
 * The probes' listening socket belongs to the loop's HTTP server; while the
 * loop is stuck nothing else accepts on it, and once the loop is back the
 * watchdog leaves it alone again (an accept that finds nothing is EAGAIN to
 * either side). The watchdog accepts only after checking, under the mutex,
 * that the stuck run is still running, and kl_watchdog_leave() waits for an
 * answer in progress: a probe that arrives after the loop is back is the
 * loop's to answer. */
#define _GNU_SOURCE /* accept4 */
#include "watchdog.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "mem.h"

#define TICK 0.25       /* seconds between checks, at most */
#define STUCK 1.0       /* seconds from which signals are taken here */
#define TRACE_WAIT 0.25 /* seconds to wait for the stuck code's traceback */

struct kl_watchdog {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  pthread_cond_t answered; /* signalled when `probing` drops to 0 */
  double hang_timeout;
  kl_watchdog_hang_fn *on_hang;
  void *ud;
  int quit;
  /* Guarded by mu */
  int busy;          /* the loop's thread runs `what` since `since` */
  unsigned long run; /* counts runs: tells one from the next */
  double since;
  char what[160];
  int reported;   /* this run was logged as hung */
  int want_trace; /* the hook may hand in a traceback */
  char *trace;
  int probes_fd;
  int probing; /* the watchdog is answering a probe of the run */
  int stopping;
};

static double mono(void) { return kl_clock_monotonic(NULL); }

static void to_timespec(double t, struct timespec *ts) {
  ts->tv_sec = (time_t)t;
  ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
  if (ts->tv_nsec > 999999999) ts->tv_nsec = 999999999; /* rounding */
}

/* Waits on cond until `until` on CLOCK_MONOTONIC (the cond's clock). */
static void wait_until(kl_watchdog_t *wd, double until) {
  struct timespec ts;
  to_timespec(until, &ts);
  pthread_cond_timedwait(&wd->cond, &wd->mu, &ts);
}

/* Answers one connection on the probes' socket: 500 and why. The request
 * is read (up to its blank line or one second) so that the client sees the
 * answer and not a reset. */
static void answer_probe(int lfd, const char *why) {
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0) return;
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  char req[4096];
  size_t n = 0;
  while (n < sizeof req - 1) {
    ssize_t got = read(fd, req + n, sizeof req - 1 - n);
    if (got <= 0) break;
    n += (size_t)got;
    req[n] = '\0';
    if (strstr(req, "\r\n\r\n")) break;
  }
  char resp[512];
  int len = snprintf(resp, sizeof resp,
                     "HTTP/1.1 500 Internal Server Error\r\n"
                     "Content-Type: text/plain; charset=utf-8\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
                     strlen(why) + 1, why);
  if (len > 0) {
    size_t want = (size_t)len < sizeof resp ? (size_t)len : sizeof resp - 1;
    ssize_t sent = send(fd, resp, want, MSG_NOSIGNAL);
    (void)sent; /* a client that left does not matter */
  }
  close(fd);
}

/* Ends the process at once, on a second signal while the loop is stuck:
 * what print() left in stdout's buffer goes out first, unless the stuck
 * code holds stdout's lock (it is then writing, and the lock may never be
 * let go). */
static void exit_now(int sig, const char *what, double took) {
  kl_log(KL_LOG_WARN,
         "second signal %d: exiting at once (%s has not yielded "
         "for %.1f s)",
         sig, what, took);
  if (ftrylockfile(stdout) == 0) {
    fflush(stdout);
    funlockfile(stdout);
  }
  _exit(1);
}

static void *watch(void *arg) {
  kl_watchdog_t *wd = arg;
  unsigned long run = 0;
  int held_sig = 0; /* a first signal taken while the loop was stuck */
  char what[sizeof wd->what];
  pthread_mutex_lock(&wd->mu);
  while (!wd->quit) {
    double tick = wd->hang_timeout / 4;
    wait_until(wd, mono() + (tick < TICK ? tick : TICK));
    if (wd->quit) break;
    double now = mono();
    double took = wd->busy ? now - wd->since : 0;
    if (held_sig && (!wd->busy || wd->run != run)) {
      /* The loop is free again: it stops gracefully, as it would have. */
      kill(getpid(), held_sig);
      held_sig = 0;
    }
    if (!wd->busy) continue;
    run = wd->run;
    memcpy(what, wd->what, sizeof what);
    int stuck = took >= STUCK || took >= wd->hang_timeout;
    int stopping = wd->stopping;

    if (took >= wd->hang_timeout && !wd->reported) {
      wd->reported = 1;
      free(wd->trace);
      wd->trace = NULL;
      wd->want_trace = 1;
      pthread_mutex_unlock(&wd->mu);
      if (wd->on_hang) wd->on_hang(wd->ud, 1);
      pthread_mutex_lock(&wd->mu);
      double until = mono() + TRACE_WAIT;
      while (!wd->trace && !wd->quit && wd->run == run && mono() < until)
        wait_until(wd, until);
      wd->want_trace = 0;
      char *trace = wd->trace;
      int probes = wd->probes_fd >= 0;
      wd->trace = NULL;
      pthread_mutex_unlock(&wd->mu);
      if (wd->on_hang) wd->on_hang(wd->ud, 0);
      kl_log(KL_LOG_ERROR, "%s has not yielded for %.1f s%s%s%s", what, took,
             probes ? "; /healthz fails until it does" : "", trace ? "\n" : "",
             trace ? trace : "");
      free(trace);
      pthread_mutex_lock(&wd->mu);
      continue;
    }
    if (!stuck) continue;
    int probes = wd->reported ? wd->probes_fd : -1;
    pthread_mutex_unlock(&wd->mu);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    struct timespec zero = {0, 0};
    int sig = sigtimedwait(&sigs, NULL, &zero);
    if (sig > 0) {
      if (held_sig || stopping) exit_now(sig, what, took);
      held_sig = sig;
      kl_log(KL_LOG_WARN,
             "signal %d: stopping once %s yields (it has run for %.1f s); a "
             "second signal exits at once",
             sig, what, took);
    }
    if (probes >= 0) {
      char why[sizeof what + 64];
      snprintf(why, sizeof why, "%s has not yielded for %.1f s", what, took);
      struct pollfd pfd = {probes, POLLIN, 0};
      while (poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN)) {
        pthread_mutex_lock(&wd->mu);
        int still = wd->busy && wd->run == run && !wd->quit;
        wd->probing = still;
        pthread_mutex_unlock(&wd->mu);
        if (!still) break;
        answer_probe(probes, why);
        pthread_mutex_lock(&wd->mu);
        wd->probing = 0;
        pthread_cond_broadcast(&wd->answered);
        pthread_mutex_unlock(&wd->mu);
      }
    }
    pthread_mutex_lock(&wd->mu);
  }
  pthread_mutex_unlock(&wd->mu);
  return NULL;
}

kl_watchdog_t *kl_watchdog_new(double hang_timeout, kl_watchdog_hang_fn *fn,
                               void *ud) {
  kl_watchdog_t *wd = kl_xcalloc(1, sizeof *wd);
  wd->hang_timeout = hang_timeout;
  wd->on_hang = fn;
  wd->ud = ud;
  wd->probes_fd = -1;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&wd->cond, &ca);
  pthread_cond_init(&wd->answered, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&wd->mu, NULL);
  /* The thread starts with every signal blocked, so that none is delivered
   * to it by accident; it takes SIGINT and SIGTERM with sigtimedwait. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = pthread_create(&wd->thread, NULL, watch, wd);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&wd->answered);
    pthread_cond_destroy(&wd->cond);
    pthread_mutex_destroy(&wd->mu);
    free(wd);
    return NULL;
  }
  return wd;
}

void kl_watchdog_free(kl_watchdog_t *wd) {
  if (!wd) return;
  pthread_mutex_lock(&wd->mu);
  wd->quit = 1;
  pthread_cond_signal(&wd->cond);
  pthread_mutex_unlock(&wd->mu);
  pthread_join(wd->thread, NULL);
  pthread_cond_destroy(&wd->answered);
  pthread_cond_destroy(&wd->cond);
  pthread_mutex_destroy(&wd->mu);
  free(wd->trace);
  free(wd);
}

void kl_watchdog_enter(kl_watchdog_t *wd, const char *what) {
  pthread_mutex_lock(&wd->mu);
  if (!wd->busy) {
    wd->busy = 1;
    wd->run++;
    wd->since = mono();
    wd->reported = 0;
  }
  size_t n = strlen(what); /* not snprintf: this runs on every resume */
  if (n >= sizeof wd->what) n = sizeof wd->what - 1;
  memcpy(wd->what, what, n);
  wd->what[n] = '\0';
  pthread_mutex_unlock(&wd->mu);
}

void kl_watchdog_leave(kl_watchdog_t *wd) {
  pthread_mutex_lock(&wd->mu);
  int reported = wd->reported, probes = wd->probes_fd >= 0;
  double took = mono() - wd->since;
  char what[sizeof wd->what];
  memcpy(what, wd->what, sizeof what);
  wd->busy = 0;
  wd->reported = 0;
  while (wd->probing) /* only after a reported hang: at most a second */
    pthread_cond_wait(&wd->answered, &wd->mu);
  pthread_mutex_unlock(&wd->mu);
  if (reported)
    kl_log(KL_LOG_INFO, "%s yielded after %.1f s%s", what, took,
           probes ? "; /healthz is ok again" : "");
}

int kl_watchdog_wants_trace(kl_watchdog_t *wd) {
  pthread_mutex_lock(&wd->mu);
  int want = wd->want_trace && !wd->trace;
  pthread_mutex_unlock(&wd->mu);
  return want;
}

void kl_watchdog_set_trace(kl_watchdog_t *wd, const char *trace) {
  pthread_mutex_lock(&wd->mu);
  if (wd->want_trace && !wd->trace) {
    wd->trace = kl_xstrdup(trace);
    pthread_cond_signal(&wd->cond);
  }
  pthread_mutex_unlock(&wd->mu);
}

void kl_watchdog_set_probes(kl_watchdog_t *wd, int fd) {
  pthread_mutex_lock(&wd->mu);
  wd->probes_fd = fd;
  pthread_mutex_unlock(&wd->mu);
}

void kl_watchdog_stopping(kl_watchdog_t *wd) {
  pthread_mutex_lock(&wd->mu);
  wd->stopping = 1;
  pthread_mutex_unlock(&wd->mu);
}
