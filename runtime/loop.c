/* loop.c — the event loop (see loop.h).
 *
 * Each iteration, the ev_prepare watcher runs the deferred list, then re-arms
 * the one ev_timer to the heap's earliest deadline; an ev_idle watcher is
 * active while deferred work remains, so the loop polls without blocking.
 * The loop owns its ev_loop, its heap and its watchers; deferred nodes and
 * timers belong to whoever embeds them. */
#include "loop.h"

#include <ev.h>
#include <signal.h>
#include <stdlib.h>

#include "error.h"
#include "mem.h"

struct kl_loop {
  struct ev_loop *ev;
  kl_timers_t *timers;
  ev_timer timer;
  ev_prepare prepare;
  ev_idle idle;
  ev_signal sigs[3];
  kl_defer_t head; /* circular list sentinel */
  kl_loop_signal_fn *on_signal;
  void *signal_ud;
  int running;
};

static void on_timer(struct ev_loop *ev, ev_timer *w, int revents) {
  kl_loop_t *loop = w->data;
  (void)ev;
  (void)revents;
  kl_timers_run(loop->timers);
}

static void arm_timer(kl_loop_t *loop) {
  double next = kl_timers_next(loop->timers);
  ev_timer_stop(loop->ev, &loop->timer);
  if (next < 0) return;
  double delay = next - kl_loop_now(loop);
  ev_timer_set(&loop->timer, delay > 0 ? delay : 0, 0.);
  ev_timer_start(loop->ev, &loop->timer);
}

static void on_prepare(struct ev_loop *ev, ev_prepare *w, int revents) {
  kl_loop_t *loop = w->data;
  (void)revents;
  kl_loop_run_deferred(loop);
  /* Deadlines that passed while deferred work ran fire now, not after a
   * poll. */
  double next = kl_timers_next(loop->timers);
  if (next >= 0 && next <= kl_loop_now(loop)) kl_timers_run(loop->timers);
  if (loop->head.next != &loop->head)
    ev_idle_start(ev, &loop->idle);
  else
    ev_idle_stop(ev, &loop->idle);
  arm_timer(loop);
}

static void on_idle(struct ev_loop *ev, ev_idle *w, int revents) {
  (void)ev;
  (void)w;
  (void)revents; /* only keeps the poll from blocking; prepare does the work */
}

static void on_signal(struct ev_loop *ev, ev_signal *w, int revents) {
  kl_loop_t *loop = w->data;
  (void)ev;
  (void)revents;
  if (loop->on_signal) loop->on_signal(loop, w->signum, loop->signal_ud);
}

kl_loop_t *kl_loop_new(const kl_clock_t *clock) {
  kl_loop_t *loop = kl_xcalloc(1, sizeof *loop);
  loop->ev = ev_loop_new(EVFLAG_AUTO | EVFLAG_SIGNALFD);
  if (!loop->ev) {
    free(loop);
    return NULL;
  }
  loop->timers = kl_timers_new(clock ? clock : &kl_clock_system);
  loop->head.next = loop->head.prev = &loop->head;

  ev_init(&loop->timer, on_timer);
  loop->timer.data = loop;
  ev_prepare_init(&loop->prepare, on_prepare);
  loop->prepare.data = loop;
  ev_prepare_start(loop->ev, &loop->prepare);
  ev_unref(loop->ev); /* the prepare watcher alone keeps nothing alive */
  ev_idle_init(&loop->idle, on_idle);
  loop->idle.data = loop;

  static const int signums[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; i++) {
    ev_signal_init(&loop->sigs[i], on_signal, signums[i]);
    loop->sigs[i].data = loop;
  }
  signal(SIGPIPE, SIG_IGN);
  return loop;
}

void kl_loop_free(kl_loop_t *loop) {
  if (!loop) return;
  ev_ref(loop->ev);
  ev_prepare_stop(loop->ev, &loop->prepare);
  ev_idle_stop(loop->ev, &loop->idle);
  ev_timer_stop(loop->ev, &loop->timer);
  for (int i = 0; i < 3; i++)
    ev_signal_stop(loop->ev, &loop->sigs[i]);
  while (loop->head.next != &loop->head)
    kl_loop_undefer(loop, loop->head.next);
  kl_timers_free(loop->timers);
  ev_loop_destroy(loop->ev);
  free(loop);
}

struct ev_loop *kl_loop_ev(kl_loop_t *loop) {
  return loop->ev;
}
kl_timers_t *kl_loop_timers(kl_loop_t *loop) { return loop->timers; }

double kl_loop_now(kl_loop_t *loop) {
  return kl_clock_now(kl_timers_clock(loop->timers));
}

int kl_loop_run(kl_loop_t *loop) {
  if (loop->running) return KL_EINVAL;
  loop->running = 1;
  /* The loop runs until kl_loop_break: a keep-alive reference stands in for
   * the work (watches, sleeps, queues) that has no watcher of its own. */
  ev_ref(loop->ev);
  ev_run(loop->ev, 0);
  ev_unref(loop->ev);
  loop->running = 0;
  return 0;
}

void kl_loop_break(kl_loop_t *loop) { ev_break(loop->ev, EVBREAK_ONE); }
int kl_loop_running(const kl_loop_t *loop) { return loop->running; }

void kl_loop_defer(kl_loop_t *loop, kl_defer_t *d) {
  if (d->queued) return;
  d->queued = 1;
  d->prev = loop->head.prev;
  d->next = &loop->head;
  loop->head.prev->next = d;
  loop->head.prev = d;
}

void kl_loop_undefer(kl_loop_t *loop, kl_defer_t *d) {
  (void)loop;
  if (!d->queued) return;
  d->prev->next = d->next;
  d->next->prev = d->prev;
  d->next = d->prev = NULL;
  d->queued = 0;
}

size_t kl_loop_run_deferred(kl_loop_t *loop) {
  /* Cut the list: what callbacks queue now waits for the next pass. */
  kl_defer_t batch;
  size_t n = 0;
  if (loop->head.next == &loop->head) return 0;
  batch.next = loop->head.next;
  batch.prev = loop->head.prev;
  batch.next->prev = &batch;
  batch.prev->next = &batch;
  loop->head.next = loop->head.prev = &loop->head;
  while (batch.next != &batch) {
    kl_defer_t *d = batch.next;
    d->prev->next = d->next;
    d->next->prev = d->prev;
    d->next = d->prev = NULL;
    d->queued = 0;
    n++;
    d->fn(d);
  }
  return n;
}

void kl_loop_on_signal(kl_loop_t *loop, kl_loop_signal_fn *fn, void *ud) {
  loop->on_signal = fn;
  loop->signal_ud = ud;
  for (int i = 0; i < 3; i++) {
    if (fn) {
      ev_signal_start(loop->ev, &loop->sigs[i]);
      ev_unref(loop->ev);
    } else if (ev_is_active(&loop->sigs[i])) {
      ev_ref(loop->ev);
      ev_signal_stop(loop->ev, &loop->sigs[i]);
    }
  }
}
