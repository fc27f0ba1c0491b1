/* processor.c — the shared processor and processDeltas (see processor.h,
 * CLIENTGO.md 9.2 and 10).
 *
 * Listeners live in an array of pointers in registration order; each has a
 * ring of pr_note (the type, flags and object references of one
 * notification, plus a key copy only for a tombstone without object: the
 * key of any other is its object's). Ring order is delivery order, which is
 * what makes late-join adds come before anything distributed later.
 *
 * Resync bookkeeping follows client-go: each listener keeps the period it
 * asked for (after the 1 s floor and, once started, the raise to the check
 * period), its effective period (determineResyncPeriod) and its next
 * resync time; `syncing` is recomputed only by should_resync and starts
 * true, so until the first check every listener gets same-RV updates.
 *
 * Re-entrancy: a handler may remove listeners, add listeners, or process
 * deltas. Removal marks the listener, drops its buffer at once and frees the
 * struct only when no pump is running (`running`), sweeping the array
 * afterwards; the pump walks the array by index and re-reads its length, so
 * additions during a delivery are safe. `busy` keeps a listener to one
 * delivery at a time even under a nested kl_proc_run.
 *
 * The processor owns its listeners and their notifications (one object
 * reference each); the store, timers heap and clock are borrowed. */
#include "processor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mem.h"

#define RING_MIN 16u
#define RING_KEEP 64u /* a drained ring larger than this is released */

enum { PN_INITIAL = 1, PN_TOMBSTONE = 2, PN_SYNC = 4 };

typedef struct pr_note {
  kl_obj_t *obj, *old;
  char *key; /* only when obj is NULL */
  uint8_t type;
  uint8_t flags;
} pr_note;

typedef struct pr_listener {
  uint64_t id;
  kl_proc_handler_fn *fn;
  void *ud;
  void (*ud_free)(void *ud);
  unsigned types; /* wanted note types (bits), 0: all; see distribute */
  double requested, period, next_resync;
  bool syncing, removed, busy;
  bool retiring; /* takes no new notifications; removed once drained */
  pr_note *ring; /* ring[(head + i) & (cap - 1)], i < count */
  size_t head, count, cap;
  size_t high_water;
  uint64_t delivered;
  size_t pending_initial; /* initial adds queued, not yet delivered */
} pr_listener;

struct kl_proc {
  kl_proc_opts_t o;
  kl_clock_t clock;
  pr_listener **ls;
  size_t nls, lcap;
  size_t rr; /* next listener the pump visits */
  uint64_t next_id;
  double check_period, default_period;
  bool started, stopped, upstream_synced;
  unsigned running; /* pumps in progress */
  bool dirty;       /* removed listeners wait for the sweep */
  size_t pending;   /* notifications buffered, all listeners */
  kl_timer_t timer;
  char err[256];
};

static double now(const kl_proc_t *p) { return kl_clock_now(&p->clock); }

__attribute__((format(printf, 2, 3))) static void warn(kl_proc_t *p,
                                                       const char *fmt, ...) {
  char msg[256];
  va_list ap;
  if (!p->o.warn) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->o.warn(p, msg, p->o.ud);
}

/* ---- notifications ---- */

static void note_release(pr_note *n) {
  kl_obj_unref(n->obj);
  kl_obj_unref(n->old);
  free(n->key);
}

static void ring_resize(pr_listener *l, size_t cap) {
  pr_note *r = cap ? kl_xmalloc(cap * sizeof *r) : NULL;
  for (size_t i = 0; i < l->count; i++)
    r[i] = l->ring[(l->head + i) & (l->cap - 1)];
  free(l->ring);
  l->ring = r;
  l->cap = cap;
  l->head = 0;
}

/* Appends a copy of n (new references) to l's ring. */
static void push(kl_proc_t *p, pr_listener *l, const pr_note *n,
                 const char *key, size_t len) {
  if (l->count == l->cap) ring_resize(l, l->cap ? l->cap * 2 : RING_MIN);
  pr_note *c = &l->ring[(l->head + l->count) & (l->cap - 1)];
  *c = *n;
  if (c->obj) kl_obj_ref(c->obj);
  if (c->old) kl_obj_ref(c->old);
  c->key = c->obj ? NULL : kl_xstrndup(key, len);
  l->count++;
  if (l->count > l->high_water) l->high_water = l->count;
  if (c->type == KL_PROC_ADD && (c->flags & PN_INITIAL)) l->pending_initial++;
  p->pending++;
}

static void discard(kl_proc_t *p, pr_listener *l) {
  for (size_t i = 0; i < l->count; i++)
    note_release(&l->ring[(l->head + i) & (l->cap - 1)]);
  p->pending -= l->count;
  l->count = 0;
  l->pending_initial = 0;
  ring_resize(l, 0);
}

/* distribute: to every listener, or for a sync note to the syncing ones;
 * not to a listener whose handler ignores the type, unless it is an initial
 * add (the listener's HasSynced counts those). */
static void distribute(kl_proc_t *p, const pr_note *n, const char *key,
                       size_t len) {
  bool sync = (n->flags & PN_SYNC) != 0;
  unsigned bit = (n->flags & PN_INITIAL) ? 0 : 1u << n->type;
  for (size_t i = 0; i < p->nls; i++) {
    pr_listener *l = p->ls[i];
    if (l->removed || l->retiring || (sync && !l->syncing)) continue;
    if (l->types && bit && !(l->types & bit)) continue;
    push(p, l, n, key, len);
  }
}

static void ready_if(kl_proc_t *p, bool was_idle) {
  if (was_idle && p->pending > 0 && p->o.on_ready) p->o.on_ready(p, p->o.ud);
}

/* ---- listeners ---- */

static pr_listener *find(const kl_proc_t *p, uint64_t id) {
  for (size_t i = 0; i < p->nls; i++)
    if (p->ls[i]->id == id && !p->ls[i]->removed) return p->ls[i];
  return NULL;
}

static void listener_free(pr_listener *l) {
  if (l->ud_free) l->ud_free(l->ud);
  free(l->ring);
  free(l);
}

/* Frees removed listeners and compacts the array; not during a pump. */
static void sweep(kl_proc_t *p) {
  size_t out = 0;
  for (size_t i = 0; i < p->nls; i++) {
    pr_listener *l = p->ls[i];
    if (l->removed) {
      if (i < p->rr && p->rr > 0) p->rr--;
      listener_free(l);
    } else {
      p->ls[out++] = l;
    }
  }
  p->nls = out;
  p->dirty = false;
}

static void mark_removed(kl_proc_t *p, pr_listener *l) {
  l->removed = true;
  discard(p, l);
  p->dirty = true;
}

/* determineResyncPeriod. */
static double effective_period(kl_proc_t *p, double desired, double check) {
  if (desired == 0) return 0;
  if (check == 0) {
    warn(p,
         "The specified resyncPeriod %gs is invalid because this shared "
         "informer doesn't support resyncing",
         desired);
    return 0;
  }
  if (desired < check) {
    warn(p,
         "The specified resyncPeriod %gs is being increased to the minimum "
         "resyncCheckPeriod %gs",
         desired, check);
    return check;
  }
  return desired;
}

typedef struct late_ctx {
  kl_proc_t *p;
  pr_listener *l;
} late_ctx;

static int late_add(void *ud, const char *key, size_t len, kl_obj_t *obj) {
  late_ctx *c = ud;
  pr_note n = {obj, NULL, NULL, KL_PROC_ADD, PN_INITIAL};
  push(c->p, c->l, &n, key, len);
  return 0;
}

uint64_t kl_proc_add_listener(kl_proc_t *p, const kl_proc_listener_opts_t *lo) {
  if (p->stopped || !lo || !lo->fn) return 0;
  double req = lo->resync_period < 0 ? p->default_period : lo->resync_period;
  if (req > 0) {
    if (req < KL_PROC_MIN_RESYNC) {
      warn(p,
           "resyncPeriod %gs is too small. Changing it to the minimum "
           "allowed value of %gs",
           req, KL_PROC_MIN_RESYNC);
      req = KL_PROC_MIN_RESYNC;
    }
    if (req < p->check_period) {
      if (p->started) {
        warn(p,
             "resyncPeriod %gs is smaller than resyncCheckPeriod %gs and the "
             "informer has already started. Changing it to %gs",
             req, p->check_period, p->check_period);
        req = p->check_period;
      } else {
        p->check_period = req;
        for (size_t i = 0; i < p->nls; i++)
          if (!p->ls[i]->removed)
            p->ls[i]->period = effective_period(p, p->ls[i]->requested, req);
      }
    }
  }
  pr_listener *l = kl_xcalloc(1, sizeof *l);
  l->id = ++p->next_id;
  l->fn = lo->fn;
  l->ud = lo->ud;
  l->ud_free = lo->ud_free;
  l->types = lo->types;
  l->requested = req;
  l->period = effective_period(p, req, p->check_period);
  l->next_resync = now(p) + l->period;
  l->syncing = true;
  if (p->nls == p->lcap) {
    p->lcap = p->lcap ? p->lcap * 2 : 4;
    p->ls = kl_xrealloc(p->ls, p->lcap * sizeof *p->ls);
  }
  p->ls[p->nls++] = l;
  if (p->started) {
    bool was_idle = p->pending == 0;
    late_ctx c = {p, l};
    kl_store_list(p->o.store, late_add, &c);
    ready_if(p, was_idle);
  }
  return l->id;
}

int kl_proc_remove_listener(kl_proc_t *p, uint64_t id) {
  pr_listener *l = find(p, id);
  if (!l) return KL_ENOENT;
  mark_removed(p, l);
  if (!p->running) sweep(p);
  return KL_OK;
}

int kl_proc_retire_listener(kl_proc_t *p, uint64_t id) {
  pr_listener *l = find(p, id);
  if (!l) return KL_ENOENT;
  if (l->count > 0 || l->busy) {
    l->retiring = true;
    return KL_OK;
  }
  return kl_proc_remove_listener(p, id);
}

bool kl_proc_listener_synced(const kl_proc_t *p, uint64_t id) {
  const pr_listener *l = find(p, id);
  return l && p->upstream_synced && l->pending_initial == 0;
}

int kl_proc_listener_info(const kl_proc_t *p, uint64_t id,
                          kl_proc_listener_info_t *info) {
  const pr_listener *l = find(p, id);
  if (!l) return KL_ENOENT;
  info->depth = l->count;
  info->high_water = l->high_water;
  info->delivered = l->delivered;
  info->requested = l->requested;
  info->resync_period = l->period;
  info->next_resync = l->next_resync;
  info->syncing = l->syncing;
  info->synced = p->upstream_synced && l->pending_initial == 0;
  return KL_OK;
}

size_t kl_proc_listeners(const kl_proc_t *p) {
  size_t n = 0;
  for (size_t i = 0; i < p->nls; i++)
    n += !p->ls[i]->removed;
  return n;
}

/* ---- the processor ---- */

static void on_timer(kl_timer_t *t, void *ud) {
  kl_proc_t *p = ud;
  (void)t;
  if (!p->started || p->stopped || p->check_period <= 0) return;
  kl_timers_start(p->o.timers, &p->timer, now(p) + p->check_period);
  if (kl_proc_should_resync(p)) p->o.resync(p, p->o.ud);
}

kl_proc_t *kl_proc_new(const kl_proc_opts_t *opts) {
  if (!opts || !opts->store) return NULL;
  kl_proc_t *p = kl_xcalloc(1, sizeof *p);
  p->o = *opts;
  if (opts->clock)
    p->clock = *opts->clock;
  else if (opts->timers)
    p->clock = *kl_timers_clock(opts->timers);
  else
    p->clock = kl_clock_system;
  p->check_period = p->default_period =
      opts->resync_period > 0 ? opts->resync_period : 0;
  kl_timer_init(&p->timer, on_timer, p);
  return p;
}

void kl_proc_free(kl_proc_t *p) {
  if (!p) return;
  if (p->o.timers) kl_timers_stop(p->o.timers, &p->timer);
  for (size_t i = 0; i < p->nls; i++) {
    discard(p, p->ls[i]);
    listener_free(p->ls[i]);
  }
  free(p->ls);
  free(p);
}

int kl_proc_start(kl_proc_t *p) {
  if (p->stopped) return KL_EINVAL;
  if (p->started) return KL_OK;
  p->started = true;
  if (p->check_period > 0 && p->o.timers && p->o.resync)
    kl_timers_start(p->o.timers, &p->timer, now(p) + p->check_period);
  return KL_OK;
}

void kl_proc_stop(kl_proc_t *p) {
  if (p->stopped) return;
  p->stopped = true;
  if (p->o.timers) kl_timers_stop(p->o.timers, &p->timer);
  for (size_t i = 0; i < p->nls; i++)
    if (!p->ls[i]->removed) mark_removed(p, p->ls[i]);
  if (!p->running) sweep(p);
}

void kl_proc_upstream_synced(kl_proc_t *p) { p->upstream_synced = true; }

bool kl_proc_has_upstream_synced(const kl_proc_t *p) {
  return p->upstream_synced;
}

double kl_proc_resync_check_period(const kl_proc_t *p) {
  return p->check_period;
}

bool kl_proc_should_resync(kl_proc_t *p) {
  double t = now(p);
  bool any = false;
  for (size_t i = 0; i < p->nls; i++) {
    pr_listener *l = p->ls[i];
    if (l->removed) continue;
    l->syncing = l->period != 0 && t >= l->next_resync;
    if (l->syncing) {
      any = true;
      l->next_resync = t + l->period;
    }
  }
  return any;
}

static bool same_rv(const kl_obj_t *a, const kl_obj_t *b) {
  kl_json_span_t x = kl_obj_resource_version(a), y = kl_obj_resource_version(b);
  return x.n == y.n && (x.n == 0 || memcmp(x.p, y.p, x.n) == 0);
}

int kl_proc_process_deltas(kl_proc_t *p, const char *key, size_t len,
                           const kl_delta_t *deltas, size_t n, bool initial,
                           char *err, size_t errlen) {
  bool was_idle = p->pending == 0;
  int rc = KL_OK;
  if (errlen) err[0] = '\0';
  for (size_t i = 0; i < n && rc == KL_OK; i++) {
    const kl_delta_t *d = &deltas[i];
    pr_note note = {d->obj, NULL, NULL, 0, 0};
    if (d->type == KL_DELTA_DELETED) {
      rc = kl_store_delete(p->o.store, key, len, NULL);
      if (rc == KL_ENOENT) rc = KL_OK; /* OnDelete all the same */
      if (rc != KL_OK) {
        if (errlen) snprintf(err, errlen, "store delete: %s", kl_strerror(rc));
        break;
      }
      note.type = KL_PROC_DELETE;
      if (d->tombstone) note.flags = PN_TOMBSTONE;
      distribute(p, &note, key, len);
      continue;
    }
    if (!d->obj) continue; /* only tombstones lack objects */
    kl_obj_t *old = NULL;
    rc = kl_store_update(p->o.store, d->obj, &old, err, errlen);
    if (rc != KL_OK) break;
    if (old) {
      note.type = KL_PROC_UPDATE;
      note.old = old;
      if (same_rv(old, d->obj)) note.flags = PN_SYNC;
    } else {
      note.type = KL_PROC_ADD;
      if (initial) note.flags = PN_INITIAL;
    }
    distribute(p, &note, key, len);
    kl_obj_unref(old);
  }
  ready_if(p, was_idle);
  return rc;
}

int kl_proc_handle_deltas(void *ud, kl_fifo_popped_t *it) {
  kl_proc_t *p = ud;
  return kl_proc_process_deltas(p, it->key, it->len, it->deltas, it->n,
                                it->initial, p->err, sizeof p->err);
}

const char *kl_proc_error(const kl_proc_t *p) { return p->err; }

/* ---- delivery ---- */

static void deliver_one(kl_proc_t *p, pr_listener *l) {
  pr_note n = l->ring[l->head];
  l->head = (l->head + 1) & (l->cap - 1);
  l->count--;
  p->pending--;
  const char *kp;
  size_t klen;
  if (n.key) {
    kp = n.key;
    klen = strlen(n.key);
  } else {
    kl_json_span_t k = kl_obj_key_span(n.obj);
    kp = k.p;
    klen = k.n;
  }
  kl_proc_note_t pub = {(kl_proc_note_type_t)n.type,
                        kp,
                        klen,
                        n.obj,
                        n.old,
                        (n.flags & PN_INITIAL) != 0,
                        (n.flags & PN_TOMBSTONE) != 0,
                        (n.flags & PN_SYNC) != 0};
  l->busy = true;
  l->fn(p, l->id, &pub, l->ud);
  l->busy = false;
  l->delivered++;
  /* A handler that failed still counts as done: errors are the handler
   * wrapper's to log, and the registration must be able to sync. */
  if (pub.type == KL_PROC_ADD && pub.initial && l->pending_initial > 0)
    l->pending_initial--;
  note_release(&n);
  if (l->retiring && l->count == 0 && !l->removed) {
    mark_removed(p, l);
    return;
  }
  if (l->count == 0 && l->cap > RING_KEEP)
    ring_resize(l, 0);
  else if (l->cap > RING_KEEP && l->count < l->cap / 8)
    ring_resize(l, l->cap / 2);
}

bool kl_proc_run(kl_proc_t *p, size_t budget) {
  size_t idle = 0;
  p->running++;
  while (budget > 0 && p->nls > 0 && idle < p->nls) {
    if (p->rr >= p->nls) p->rr = 0;
    pr_listener *l = p->ls[p->rr++];
    if (l->removed || l->busy || l->count == 0) {
      idle++;
      continue;
    }
    idle = 0;
    deliver_one(p, l);
    budget--;
  }
  p->running--;
  if (!p->running && p->dirty) sweep(p);
  return p->pending > 0;
}

size_t kl_proc_pending(const kl_proc_t *p) { return p->pending; }
