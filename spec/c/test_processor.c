/* test_processor.c — processDeltas and the shared processor (CLIENTGO.md
 * 9.2, 10; T-27..T-33): store updates before notifications, add vs update
 * by presence in the store, deletes of uncached keys, tombstones, same-RV
 * syncs, which listeners get them and the resync period rules (warnings
 * included), a changed RV for everyone, late joiners' synthetic adds and
 * their HasSynced, per-listener order and isolation under a fair bounded
 * pump, removal from anywhere (its own handler included), stop, store
 * errors, depth and high-water marks, listeners for some types only. The
 * pipeline is a real store, FIFO and processor wired as an informer does, on
 * the fake clock and a timers heap. Each test ends with a heap leak check (see
 * test_store.c). */
#include <malloc.h>
#include <stdint.h>
#include <unistd.h>

#include "deltafifo.h"
#include "error.h"
#include "json.h"
#include "object.h"
#include "processor.h"
#include "store.h"
#include "test.h"
#include "kt_heap.h"
#include "kt_obj.h"
#include "timer.h"

#define K(s) s, sizeof s - 1

/* ---- a recording handler ----
 * Log entries, space-separated: "+a@1" add, "+a@1(i)" initial add,
 * "~a@1>a@2" update, "=a@1>a@1" sync update, "-a@2" delete,
 * "-TS(ns/b:b@1)" tombstone (key and last known object). */

typedef struct rec {
  char log[65536];
  uint64_t id;
  int freed, calls, in_handler, max_in_handler;
  void (*also)(struct rec *r, kl_proc_t *p, const kl_proc_note_t *n);
  void *arg;
} rec;

static void handler(kl_proc_t *p, uint64_t id, const kl_proc_note_t *n,
                    void *ud) {
  rec *r = ud;
  char a[128], b[128];
  size_t k = strlen(r->log);
  KT_EQ_INT(id, r->id);
  KT_TRUE(n->key[n->len] == '\0');
  /* The key of a note with an object is the object's own, not a copy. */
  if (n->obj) KT_TRUE(n->key == kl_obj_key_span(n->obj).p);
  r->calls++;
  if (++r->in_handler > r->max_in_handler) r->max_in_handler = r->in_handler;
  obj_str(a, sizeof a, n->obj);
  obj_str(b, sizeof b, n->old);
  const char *sep = k ? " " : "";
  switch (n->type) {
  case KL_PROC_ADD:
    snprintf(r->log + k, sizeof r->log - k, "%s+%s%s", sep, a,
             n->initial ? "(i)" : "");
    break;
  case KL_PROC_UPDATE:
    snprintf(r->log + k, sizeof r->log - k, "%s%c%s>%s", sep,
             n->sync ? '=' : '~', b, a);
    break;
  case KL_PROC_DELETE:
    if (n->tombstone)
      snprintf(r->log + k, sizeof r->log - k, "%s-TS(%s:%s)", sep, n->key, a);
    else
      snprintf(r->log + k, sizeof r->log - k, "%s-%s", sep, a);
    break;
  }
  if (r->also) r->also(r, p, n);
  r->in_handler--;
}

static void rec_free(void *ud) { ((rec *)ud)->freed++; }

/* Returns the log and clears it. */
static const char *take(rec *r) {
  static char out[sizeof r->log];
  memcpy(out, r->log, sizeof out);
  r->log[0] = '\0';
  return out;
}

/* ---- an informer: store, FIFO, processor ---- */

typedef struct inf {
  kl_store_t *s;
  kl_fifo_t *f;
  kl_proc_t *p;
  kl_timers_t *ts;
  char warns[2048];
  int ready, resyncs;
} inf;

static void do_resync(kl_proc_t *p, void *ud) {
  inf *x = ud;
  (void)p;
  x->resyncs++;
  KT_EQ_INT(kl_fifo_resync(x->f), 0);
}

static void on_warn(kl_proc_t *p, const char *msg, void *ud) {
  inf *x = ud;
  (void)p;
  size_t k = strlen(x->warns);
  snprintf(x->warns + k, sizeof x->warns - k, "%s%s", k ? "|" : "", msg);
}

static void on_ready(kl_proc_t *p, void *ud) {
  (void)p;
  ((inf *)ud)->ready++;
}

static void fifo_synced(kl_fifo_t *f, void *ud) {
  (void)f;
  kl_proc_upstream_synced(((inf *)ud)->p);
}

static void inf_init(inf *x, double resync) {
  memset(x, 0, sizeof *x);
  kt_now = 1000.0;
  x->ts = kl_timers_new(&kt_clock);
  x->s = kl_store_new();
  kl_fifo_opts_t fo = {
      kl_fifo_known_store(x->s), false, NULL, NULL, fifo_synced, x};
  x->f = kl_fifo_new(&fo);
  kl_proc_opts_t po = {x->s,      x->ts,   NULL,     resync,
                       do_resync, on_warn, on_ready, x};
  x->p = kl_proc_new(&po);
}

static void inf_free(inf *x) {
  kl_proc_free(x->p);
  kl_fifo_free(x->f);
  kl_store_free(x->s);
  kl_timers_free(x->ts);
}

static uint64_t listen_types(inf *x, rec *r, double period, unsigned types) {
  kl_proc_listener_opts_t lo = {handler, r, rec_free, period, types};
  r->id = kl_proc_add_listener(x->p, &lo);
  return r->id;
}

static uint64_t listen(inf *x, rec *r, double period) {
  return listen_types(x, r, period, 0);
}

/* Pops everything through processDeltas. */
static void pop_all(inf *x) {
  int rc;
  while ((rc = kl_fifo_pop(x->f, kl_proc_handle_deltas, x->p)) == 0) {
  }
  KT_EQ_INT(rc, KL_EAGAIN);
}

/* Pops everything, then delivers everything. */
static void pump(inf *x) {
  pop_all(x);
  KT_TRUE(!kl_proc_run(x->p, SIZE_MAX));
}

/* Moves the fake clock and fires due timers. */
static void advance(inf *x, double s) {
  kt_now += s;
  kl_timers_run(x->ts);
}

static void replace(inf *x, kl_obj_t **list, size_t n) {
  KT_EQ_INT(kl_fifo_replace(x->f, list, n), 0);
}

static const char *store_str(kl_store_t *s) {
  static char out[1024];
  const char *keys[] = {"ns/a", "ns/b", "ns/c", "ns/x"};
  size_t k = 0;
  out[0] = '\0';
  for (int i = 0; i < 4; i++) {
    kl_obj_t *o = kl_store_get(s, keys[i], strlen(keys[i]));
    if (!o) continue;
    k += (size_t)snprintf(out + k, sizeof out - k, "%s", k ? " " : "");
    k += (size_t)obj_str(out + k, sizeof out - k, o);
  }
  return out;
}

/* ---- processDeltas ---- */

static void check_key(rec *r, kl_proc_t *p, const kl_proc_note_t *n) {
  (void)p;
  KT_EQ_INT(n->len, strlen(r->arg));
  KT_EQ_STR(n->key, r->arg);
}

static void test_process_deltas(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h = {0};
  inf_init(&x, 0);
  listen(&x, &h, 0);
  KT_EQ_INT(kl_proc_start(x.p), 0);
  kl_obj_t *a1 = P("a", "1"), *a2 = P("a", "2"), *b1 = P("b", "1");
  /* Presence in the store decides add vs update, not the delta type. */
  kl_delta_t d[3] = {{a1, KL_DELTA_UPDATED, false},
                     {a2, KL_DELTA_ADDED, false},
                     {a2, KL_DELTA_DELETED, false}};
  KT_EQ_INT(kl_proc_process_deltas(x.p, K("ns/a"), d, 3, false, NULL, 0), 0);
  KT_EQ_INT(x.ready, 1);
  KT_EQ_INT(kl_proc_pending(x.p), 3);
  /* The store is written before anything is delivered. */
  KT_EQ_STR(store_str(x.s), "");
  KT_EQ_INT(h.calls, 0);
  kl_proc_run(x.p, SIZE_MAX);
  KT_EQ_STR(take(&h), "+a@1 ~a@1>a@2 -a@2");
  /* OnDelete even when the key was not cached; tombstones flagged, with
   * their key even without object. */
  kl_delta_t del[2] = {{b1, KL_DELTA_DELETED, true},
                       {NULL, KL_DELTA_DELETED, true}};
  KT_EQ_INT(kl_proc_process_deltas(x.p, K("ns/b"), del, 2, false, NULL, 0), 0);
  kl_proc_run(x.p, SIZE_MAX);
  KT_EQ_STR(take(&h), "-TS(ns/b:b@1) -TS(ns/b:-)");
  /* Sync and Replaced of an unchanged object are same-RV updates; an
   * initial pop's adds are flagged. */
  kl_delta_t s[3] = {{b1, KL_DELTA_REPLACED, false},
                     {b1, KL_DELTA_SYNC, false},
                     {b1, KL_DELTA_REPLACED, false}};
  KT_EQ_INT(kl_proc_process_deltas(x.p, K("ns/b"), s, 3, true, NULL, 0), 0);
  kl_proc_run(x.p, SIZE_MAX);
  KT_EQ_STR(take(&h), "+b@1(i) =b@1>b@1 =b@1>b@1");
  KT_EQ_STR(store_str(x.s), "b@1");
  /* A key longer than the stack buffer the delivery builds it in. */
  char name[301], want[320];
  memset(name, 'n', 300);
  name[300] = '\0';
  kl_obj_t *big = P(name, "1");
  snprintf(want, sizeof want, "ns/%s", name);
  kl_delta_t bd = {big, KL_DELTA_ADDED, false};
  h.also = check_key;
  h.arg = want;
  KT_EQ_INT(
      kl_proc_process_deltas(x.p, want, strlen(want), &bd, 1, false, NULL, 0),
      0);
  kl_proc_run(x.p, SIZE_MAX);
  KT_EQ_INT(h.calls, 9);
  h.also = NULL;
  take(&h);
  kl_obj_unref(big);
  kl_obj_unref(a1);
  kl_obj_unref(a2);
  kl_obj_unref(b1);
  inf_free(&x);
  KT_EQ_INT(h.freed, 1);
  KT_EQ_INT(heap_used(), heap0);
}

/* A store error stops the deltas; what was distributed stays. */
static int fail_on_b(const kl_obj_t *o, void *ud, kl_store_emit_fn *emit,
                     void *ctx) {
  (void)ud;
  kl_json_span_t n = kl_obj_name(o), rv = kl_obj_resource_version(o);
  if (rv.n == 1 && rv.p[0] == '9') {
    kl_store_index_fail(ctx, "rv 9 is not allowed");
    return KL_EINVAL;
  }
  return emit(ctx, n.p, n.n);
}

static void test_store_error_stops_deltas(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h = {0};
  inf_init(&x, 0);
  kl_store_indexer_t ix = {"f", KL_STORE_INDEX_CUSTOM, NULL, fail_on_b, NULL,
                           NULL};
  KT_EQ_INT(kl_store_add_indexers(x.s, &ix, 1, NULL, 0), 0);
  listen(&x, &h, 0);
  kl_proc_start(x.p);
  kl_obj_t *a1 = P("a", "1"), *a9 = P("a", "9"), *a3 = P("a", "3");
  kl_fifo_add(x.f, a1);
  kl_fifo_update(x.f, a9);
  kl_fifo_update(x.f, a3);
  KT_EQ_INT(kl_fifo_pop(x.f, kl_proc_handle_deltas, x.p), KL_EINVAL);
  KT_EQ_STR(kl_proc_error(x.p), "index f: rv 9 is not allowed");
  kl_proc_run(x.p, SIZE_MAX);
  KT_EQ_STR(take(&h), "+a@1");
  KT_EQ_STR(store_str(x.s), "a@1");
  kl_obj_unref(a1);
  kl_obj_unref(a9);
  kl_obj_unref(a3);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-27 ---- */

static void test_t27_which_listeners_get_resyncs(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h1 = {0}, h2 = {0};
  kl_proc_listener_info_t i1, i2;
  inf_init(&x, 60);
  listen(&x, &h1, 0);
  listen(&x, &h2, 30);
  KT_EQ_DBL(kl_proc_resync_check_period(x.p), 30, 0);
  KT_EQ_INT(kl_proc_listener_info(x.p, h1.id, &i1), 0);
  KT_EQ_INT(kl_proc_listener_info(x.p, h2.id, &i2), 0);
  KT_EQ_DBL(i1.resync_period, 0, 0);
  KT_EQ_DBL(i2.resync_period, 30, 0);
  KT_TRUE(i1.syncing && i2.syncing); /* until the first check */
  KT_EQ_STR(x.warns, "");
  KT_EQ_INT(kl_proc_start(x.p), 0);
  kl_obj_t *x1 = P("x", "1");
  replace(&x, &x1, 1);
  pump(&x);
  KT_TRUE(kl_fifo_has_synced(x.f));
  KT_EQ_STR(take(&h1), "+x@1(i)");
  KT_EQ_STR(take(&h2), "+x@1(i)");
  /* 30 s later the check finds H2 due: a resync, to H2 only. */
  advance(&x, 29);
  KT_EQ_INT(x.resyncs, 0);
  advance(&x, 1);
  KT_EQ_INT(x.resyncs, 1);
  pump(&x);
  KT_EQ_STR(take(&h1), "");
  KT_EQ_STR(take(&h2), "=x@1>x@1");
  /* A relist with the unchanged object before the next check: only H2,
   * marked syncing at the last check. */
  replace(&x, &x1, 1);
  pump(&x);
  KT_EQ_STR(take(&h1), "");
  KT_EQ_STR(take(&h2), "=x@1>x@1");
  kl_proc_listener_info(x.p, h1.id, &i1);
  kl_proc_listener_info(x.p, h2.id, &i2);
  KT_TRUE(!i1.syncing && i2.syncing);
  KT_EQ_DBL(i2.next_resync, 1060, 1e-9);
  /* The check timer keeps its period. */
  advance(&x, 30);
  KT_EQ_INT(x.resyncs, 2);
  pump(&x);
  KT_EQ_STR(take(&h2), "=x@1>x@1");
  KT_EQ_STR(take(&h1), "");
  kl_obj_unref(x1);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_t27_period_rules_and_warnings(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h[5];
  kl_proc_listener_info_t in;
  memset(h, 0, sizeof h);
  /* Construction period 0: a handler's request is ignored with a warning,
   * and with no resync anywhere the flags stay true: both get relist
   * no-op updates. */
  inf_init(&x, 0);
  listen(&x, &h[0], 0);
  listen(&x, &h[1], 30);
  KT_EQ_STR(x.warns, "The specified resyncPeriod 30s is invalid because this "
                     "shared informer doesn't support resyncing");
  kl_proc_listener_info(x.p, h[1].id, &in);
  KT_EQ_DBL(in.resync_period, 0, 0);
  KT_EQ_DBL(kl_proc_resync_check_period(x.p), 0, 0);
  kl_proc_start(x.p);
  KT_EQ_INT(kl_timers_count(x.ts), 0);
  kl_obj_t *x1 = P("x", "1");
  replace(&x, &x1, 1);
  pump(&x);
  replace(&x, &x1, 1);
  pump(&x);
  KT_EQ_STR(take(&h[0]), "+x@1(i) =x@1>x@1");
  KT_EQ_STR(take(&h[1]), "+x@1(i) =x@1>x@1");
  KT_TRUE(!kl_proc_should_resync(x.p));
  inf_free(&x);

  /* Floors and adjustments: 0.5 s is raised to 1 s; before start a smaller
   * period lowers the check period and re-derives the others; after start
   * it is raised to the check period; the default is the informer's. */
  inf_init(&x, 60);
  listen(&x, &h[2], KL_PROC_DEFAULT_RESYNC);
  listen(&x, &h[3], 0.5);
  KT_EQ_STR(x.warns, "resyncPeriod 0.5s is too small. Changing it to the "
                     "minimum allowed value of 1s");
  KT_EQ_DBL(kl_proc_resync_check_period(x.p), 1, 0);
  kl_proc_listener_info(x.p, h[2].id, &in);
  KT_EQ_DBL(in.resync_period, 60, 0);
  KT_EQ_DBL(in.requested, 60, 0);
  x.warns[0] = '\0';
  kl_proc_start(x.p);
  listen(&x, &h[4], 0.5);
  KT_EQ_STR(x.warns,
            "resyncPeriod 0.5s is too small. Changing it to the minimum "
            "allowed value of 1s");
  kl_proc_listener_info(x.p, h[4].id, &in);
  KT_EQ_DBL(in.resync_period, 1, 0);
  inf_free(&x);

  /* After start, a request below the check period is raised to it. */
  inf_init(&x, 60);
  memset(h, 0, sizeof h);
  kl_proc_start(x.p);
  listen(&x, &h[0], 10);
  KT_EQ_STR(x.warns, "resyncPeriod 10s is smaller than resyncCheckPeriod 60s "
                     "and the informer has already started. Changing it to "
                     "60s");
  kl_proc_listener_info(x.p, h[0].id, &in);
  KT_EQ_DBL(in.resync_period, 60, 0);
  KT_EQ_DBL(kl_proc_resync_check_period(x.p), 60, 0);
  /* should_resync by hand: due exactly at next_resync. */
  kt_now += 59;
  KT_TRUE(!kl_proc_should_resync(x.p));
  kt_now += 1;
  KT_TRUE(kl_proc_should_resync(x.p));
  KT_TRUE(!kl_proc_should_resync(x.p)); /* the next one is 60 s on */
  kl_obj_unref(x1);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-28 ---- */

static void test_t28_changed_rv_goes_to_everyone(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h1 = {0}, h2 = {0};
  inf_init(&x, 30);
  listen(&x, &h1, 0);
  listen(&x, &h2, 30);
  kl_proc_start(x.p);
  kl_obj_t *a1 = P("a", "1"), *a2 = P("a", "2");
  replace(&x, &a1, 1);
  pump(&x);
  advance(&x, 30); /* H1 not syncing from now on */
  pump(&x);
  KT_EQ_STR(take(&h1), "+a@1(i)");
  KT_EQ_STR(take(&h2), "+a@1(i) =a@1>a@1");
  kl_fifo_update(x.f, a2);
  pump(&x);
  KT_EQ_STR(take(&h1), "~a@1>a@2");
  KT_EQ_STR(take(&h2), "~a@1>a@2");
  kl_obj_unref(a1);
  kl_obj_unref(a2);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-29, T-30 ---- */

static void test_t29_late_joining_handler(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h1 = {0}, h3 = {0};
  inf_init(&x, 0);
  listen(&x, &h1, 0);
  kl_proc_start(x.p);
  kl_obj_t *l[2] = {P("a", "1"), P("b", "1")}, *c1 = P("c", "1");
  replace(&x, l, 2);
  pump(&x);
  KT_EQ_STR(take(&h1), "+a@1(i) +b@1(i)");
  KT_TRUE(kl_proc_listener_synced(x.p, h1.id));
  int ready0 = x.ready;
  listen(&x, &h3, 0);
  KT_EQ_INT(x.ready, ready0 + 1);
  KT_TRUE(!kl_proc_listener_synced(x.p, h3.id));
  KT_EQ_INT(kl_proc_pending(x.p), 2);
  /* A live event right after: it comes after the synthetic adds. */
  kl_fifo_add(x.f, c1);
  pump(&x);
  const char *got = take(&h3);
  KT_TRUE(strcmp(got, "+a@1(i) +b@1(i) +c@1") == 0 ||
          strcmp(got, "+b@1(i) +a@1(i) +c@1") == 0);
  KT_TRUE(kl_proc_listener_synced(x.p, h3.id));
  KT_EQ_STR(take(&h1), "+c@1"); /* nothing extra for the others */
  kl_obj_unref(l[0]);
  kl_obj_unref(l[1]);
  kl_obj_unref(c1);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_t30_registration_synced_waits_for_handler(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h = {0};
  inf_init(&x, 0);
  listen(&x, &h, 0);
  kl_proc_start(x.p);
  kl_obj_t *l[3] = {P("a", "1"), P("b", "1"), P("c", "1")};
  replace(&x, l, 3);
  KT_TRUE(!kl_proc_listener_synced(x.p, h.id));
  pop_all(&x);
  KT_TRUE(kl_fifo_has_synced(x.f));
  KT_TRUE(kl_proc_has_upstream_synced(x.p));
  for (int i = 0; i < 3; i++) {
    KT_TRUE(!kl_proc_listener_synced(x.p, h.id));
    KT_EQ_INT(kl_proc_run(x.p, 1), i < 2);
  }
  KT_TRUE(kl_proc_listener_synced(x.p, h.id));
  KT_EQ_STR(take(&h), "+a@1(i) +b@1(i) +c@1(i)");
  KT_TRUE(!kl_proc_listener_synced(x.p, 999)); /* unknown id */
  for (int i = 0; i < 3; i++)
    kl_obj_unref(l[i]);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

/* A listener for some types is not queued the others, but still gets the
 * initial adds its HasSynced waits for (late ones included). */
static void test_listener_types(void) {
  size_t heap0 = heap_used();
  inf x;
  rec all = {0}, upd = {0}, late = {0};
  inf_init(&x, 0);
  listen(&x, &all, 0);
  listen_types(&x, &upd, 0, 1u << KL_PROC_UPDATE);
  kl_proc_start(x.p);
  kl_obj_t *l[2] = {P("a", "1"), P("b", "1")};
  kl_obj_t *a2 = P("a", "2"), *c1 = P("c", "1");
  replace(&x, l, 2);
  pop_all(&x);
  KT_EQ_INT(kl_proc_pending(x.p), 4);
  KT_TRUE(!kl_proc_listener_synced(x.p, upd.id));
  KT_TRUE(!kl_proc_run(x.p, SIZE_MAX));
  KT_TRUE(kl_proc_listener_synced(x.p, upd.id));
  KT_EQ_STR(take(&upd), "+a@1(i) +b@1(i)");
  KT_EQ_STR(take(&all), "+a@1(i) +b@1(i)");
  kl_fifo_update(x.f, a2);
  kl_fifo_add(x.f, c1);
  kl_fifo_delete(x.f, l[1]);
  pop_all(&x);
  KT_EQ_INT(kl_proc_pending(x.p), 4); /* three for all, one for upd */
  KT_TRUE(!kl_proc_run(x.p, SIZE_MAX));
  KT_EQ_STR(take(&upd), "~a@1>a@2");
  KT_EQ_STR(take(&all), "~a@1>a@2 +c@1 -b@1");
  listen_types(&x, &late, 0, 1u << KL_PROC_DELETE);
  KT_TRUE(!kl_proc_listener_synced(x.p, late.id));
  KT_EQ_INT(kl_proc_pending(x.p), 2);
  KT_TRUE(!kl_proc_run(x.p, SIZE_MAX));
  KT_TRUE(kl_proc_listener_synced(x.p, late.id));
  const char *got = take(&late);
  KT_TRUE(strcmp(got, "+a@2(i) +c@1(i)") == 0 ||
          strcmp(got, "+c@1(i) +a@2(i)") == 0);
  kl_obj_unref(l[0]);
  kl_obj_unref(l[1]);
  kl_obj_unref(a2);
  kl_obj_unref(c1);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-31 ---- */

/* H-slow's handler runs the loop while it "blocks": everything else is
 * delivered meanwhile, and nothing more to H-slow itself. */
static void slow_runs_loop(rec *r, kl_proc_t *p, const kl_proc_note_t *n) {
  (void)n;
  if (r->calls == 1) {
    rec *fast = r->arg;
    KT_TRUE(kl_proc_run(p, SIZE_MAX)); /* H-slow's 99 remain */
    KT_EQ_INT(fast->calls, 100);
    KT_EQ_INT(r->calls, 1);
  }
}

static void test_t31_order_and_isolation(void) {
  size_t heap0 = heap_used();
  inf x;
  rec slow = {0}, fast = {0};
  inf_init(&x, 0);
  listen(&x, &slow, 0);
  listen(&x, &fast, 0);
  kl_proc_start(x.p);
  kl_obj_t *o[101];
  char want[4096] = "";
  for (int i = 0; i <= 100; i++) {
    char rv[16];
    snprintf(rv, sizeof rv, "%d", i + 1);
    o[i] = P("k", rv);
    if (i == 0) {
      kl_fifo_add(x.f, o[0]);
      pop_all(&x); /* cached first, so the 100 events are updates */
      kl_proc_run(x.p, SIZE_MAX);
      slow.log[0] = fast.log[0] = '\0';
      slow.calls = fast.calls = 0;
      continue;
    }
    kl_fifo_update(x.f, o[i]);
    size_t k = strlen(want);
    snprintf(want + k, sizeof want - k, "%s~k@%d>k@%d", i > 1 ? " " : "", i,
             i + 1);
  }
  pop_all(&x);
  slow.also = slow_runs_loop;
  slow.arg = &fast;
  kl_proc_listener_info_t in;
  kl_proc_listener_info(x.p, slow.id, &in);
  KT_EQ_INT(in.depth, 100);
  KT_EQ_INT(in.high_water, 100);
  /* A fair pump: 10 notifications, the first to H-slow, whose handler runs
   * the loop; the rest alternate. */
  KT_TRUE(kl_proc_run(x.p, 10));
  KT_EQ_INT(fast.calls, 100);
  KT_EQ_INT(slow.calls, 10);
  KT_TRUE(!kl_proc_run(x.p, SIZE_MAX));
  KT_EQ_STR(take(&fast), want);
  KT_EQ_STR(take(&slow), want);
  KT_EQ_INT(slow.max_in_handler, 1); /* never two callbacks at once */
  KT_EQ_INT(fast.max_in_handler, 1);
  kl_proc_listener_info(x.p, slow.id, &in);
  KT_EQ_INT(in.depth, 0);
  KT_EQ_INT(in.high_water, 100);
  KT_EQ_INT(in.delivered, 101);
  for (int i = 0; i <= 100; i++)
    kl_obj_unref(o[i]);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_pump_is_fair_and_bounded(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h[3];
  memset(h, 0, sizeof h);
  inf_init(&x, 0);
  for (int i = 0; i < 3; i++)
    listen(&x, &h[i], 0);
  kl_proc_start(x.p);
  kl_obj_t *o[4] = {P("a", "1"), P("b", "1"), P("c", "1"), P("x", "1")};
  for (int i = 0; i < 4; i++)
    kl_fifo_add(x.f, o[i]);
  pop_all(&x);
  KT_EQ_INT(kl_proc_pending(x.p), 12);
  /* Budget 4 over three listeners: 2, 1, 1; the next call resumes with
   * the second listener. */
  KT_TRUE(kl_proc_run(x.p, 4));
  KT_EQ_INT(h[0].calls, 2);
  KT_EQ_INT(h[1].calls, 1);
  KT_EQ_INT(h[2].calls, 1);
  KT_TRUE(kl_proc_run(x.p, 2));
  KT_EQ_INT(h[0].calls, 2);
  KT_EQ_INT(h[1].calls, 2);
  KT_EQ_INT(h[2].calls, 2);
  KT_TRUE(kl_proc_run(x.p, 0));
  KT_TRUE(!kl_proc_run(x.p, 100));
  for (int i = 0; i < 3; i++)
    KT_EQ_STR(take(&h[i]), "+a@1 +b@1 +c@1 +x@1");
  for (int i = 0; i < 4; i++)
    kl_obj_unref(o[i]);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-32 ---- */

static void remove_self_at_3(rec *r, kl_proc_t *p, const kl_proc_note_t *n) {
  (void)n;
  if (r->calls == 3) {
    KT_EQ_INT(kl_proc_remove_listener(p, r->id), 0);
    KT_EQ_INT(kl_proc_remove_listener(p, r->id), KL_ENOENT);
    KT_EQ_INT(r->freed, 0); /* freed after this delivery */
  }
}

static void remove_other_at_1(rec *r, kl_proc_t *p, const kl_proc_note_t *n) {
  (void)n;
  rec *other = r->arg;
  if (r->calls == 1) KT_EQ_INT(kl_proc_remove_listener(p, other->id), 0);
}

static void test_t32_remove_event_handler(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h = {0}, keep = {0};
  inf_init(&x, 0);
  listen(&x, &h, 0);
  listen(&x, &keep, 0);
  kl_proc_start(x.p);
  kl_obj_t *o[10];
  for (int i = 0; i < 10; i++) {
    char name[16];
    snprintf(name, sizeof name, "o%d", i);
    o[i] = P(name, "1");
    kl_fifo_add(x.f, o[i]);
  }
  pop_all(&x);
  kl_proc_listener_info_t in;
  kl_proc_listener_info(x.p, h.id, &in);
  KT_EQ_INT(in.depth, 10);
  KT_EQ_INT(kl_proc_pending(x.p), 20);
  /* Removed with 10 pending: discarded at once, no error, twice. */
  KT_EQ_INT(kl_proc_remove_listener(x.p, h.id), 0);
  KT_EQ_INT(h.freed, 1);
  KT_EQ_INT(kl_proc_remove_listener(x.p, h.id), KL_ENOENT);
  KT_EQ_INT(kl_proc_listener_info(x.p, h.id, &in), KL_ENOENT);
  KT_EQ_INT(kl_proc_pending(x.p), 10);
  KT_EQ_INT(kl_proc_listeners(x.p), 1);
  /* No later notification reaches it. */
  kl_fifo_update(x.f, o[0]);
  pump(&x);
  KT_EQ_INT(h.calls, 0);
  KT_EQ_INT(keep.calls, 11);
  take(&keep);

  /* Removal from inside its own handler: the rest is discarded. */
  rec self = {0};
  listen(&x, &self, 0);
  take(&self);
  self.calls = 0;
  self.also = remove_self_at_3;
  for (int i = 0; i < 10; i++)
    kl_fifo_update(x.f, o[i]);
  pop_all(&x);
  KT_TRUE(!kl_proc_run(x.p, SIZE_MAX));
  KT_EQ_INT(self.calls, 3);
  KT_EQ_INT(self.freed, 1);
  KT_EQ_INT(keep.calls, 21);

  /* Removal of another listener from a handler. */
  rec a = {0}, b = {0};
  listen(&x, &a, 0);
  listen(&x, &b, 0);
  a.calls = b.calls = 0;
  a.log[0] = b.log[0] = '\0';
  a.also = remove_other_at_1;
  a.arg = &b;
  for (int i = 0; i < 3; i++)
    kl_fifo_update(x.f, o[i]);
  pop_all(&x);
  KT_TRUE(!kl_proc_run(x.p, SIZE_MAX));
  KT_EQ_INT(a.calls, 13); /* 10 synthetic adds, 3 updates */
  KT_TRUE(b.calls <= 1);
  KT_EQ_INT(b.freed, 1);
  for (int i = 0; i < 10; i++)
    kl_obj_unref(o[i]);
  inf_free(&x);
  KT_EQ_INT(keep.freed, 1);
  KT_EQ_INT(a.freed, 1);
  KT_EQ_INT(heap_used(), heap0);
}

/* A hot reload retires the old generation's listeners: what was queued to
 * them before is still delivered, nothing later is, and they go away once
 * drained; a new listener joins late and sees the whole cache. */
static void retire_self_at_1(rec *r, kl_proc_t *p, const kl_proc_note_t *n) {
  (void)n;
  if (r->calls == 1) {
    KT_EQ_INT(kl_proc_retire_listener(p, r->id), 0);
    KT_EQ_INT(r->freed, 0); /* the other initial add is still buffered */
  }
}

static void test_retire_drains_then_removes(void) {
  size_t heap0 = heap_used();
  inf x;
  rec old = {0}, idle = {0}, fresh = {0};
  inf_init(&x, 0);
  listen(&x, &old, 0);
  listen(&x, &idle, 0);
  kl_proc_start(x.p);
  kl_obj_t *a = P("a", "1"), *b = P("b", "1"), *a2 = P("a", "2");
  kl_fifo_add(x.f, a);
  pump(&x);
  KT_EQ_STR(take(&old), "+a@1");
  KT_EQ_STR(take(&idle), "+a@1");
  /* An empty listener goes at once; one with two buffered keeps them. */
  KT_EQ_INT(kl_proc_retire_listener(x.p, idle.id), 0);
  KT_EQ_INT(idle.freed, 1);
  KT_EQ_INT(kl_proc_retire_listener(x.p, idle.id), KL_ENOENT);
  kl_fifo_add(x.f, b);
  kl_fifo_delete(x.f, a);
  pop_all(&x);
  KT_EQ_INT(kl_proc_retire_listener(x.p, old.id), 0);
  KT_EQ_INT(old.freed, 0);
  KT_EQ_INT(kl_proc_listeners(x.p), 1);
  listen(&x, &fresh, 0);
  kl_fifo_add(x.f, a2); /* after the swap: only the new listener */
  pump(&x);
  KT_EQ_STR(take(&old), "+b@1 -a@1");
  KT_EQ_INT(old.freed, 1);
  kl_proc_listener_info_t in;
  KT_EQ_INT(kl_proc_listener_info(x.p, old.id, &in), KL_ENOENT);
  KT_EQ_STR(take(&fresh), "+b@1(i) +a@2");
  KT_EQ_INT(kl_proc_listeners(x.p), 1);

  /* Retiring itself from inside its handler: the rest still comes. */
  rec self = {0};
  self.also = retire_self_at_1;
  listen(&x, &self, 0);
  pump(&x);
  KT_EQ_STR(take(&self), "+b@1(i) +a@2(i)");
  KT_EQ_INT(self.freed, 1);
  kl_fifo_update(x.f, a2);
  pump(&x);
  KT_EQ_INT(self.calls, 2);
  kl_obj_unref(a);
  kl_obj_unref(b);
  kl_obj_unref(a2);
  inf_free(&x);
  KT_EQ_INT(fresh.freed, 1);
  KT_EQ_INT(heap_used(), heap0);
}

static void test_stop(void) {
  size_t heap0 = heap_used();
  inf x;
  rec h = {0}, late = {0};
  inf_init(&x, 30);
  listen(&x, &h, 30);
  kl_proc_start(x.p);
  KT_EQ_INT(kl_timers_count(x.ts), 1);
  kl_obj_t *a = P("a", "1");
  kl_fifo_add(x.f, a);
  pop_all(&x);
  kl_proc_stop(x.p);
  KT_EQ_INT(kl_timers_count(x.ts), 0);
  KT_EQ_INT(h.freed, 1);
  KT_EQ_INT(kl_proc_pending(x.p), 0);
  KT_TRUE(!kl_proc_run(x.p, SIZE_MAX));
  KT_EQ_INT(h.calls, 0);
  KT_EQ_INT(listen(&x, &late, 0), 0);
  KT_EQ_INT(kl_proc_start(x.p), KL_EINVAL);
  kl_obj_unref(a);
  inf_free(&x);
  kl_proc_free(NULL);
  KT_EQ_INT(heap_used(), heap0);
}

/* ---- T-33 ---- */

static void test_t33_relist_deletes_vanished(void) {
  size_t heap0 = heap_used();
  inf x;
  rec syncing = {0}, plain = {0};
  inf_init(&x, 30);
  listen(&x, &syncing, 30);
  listen(&x, &plain, 0);
  kl_proc_start(x.p);
  kl_obj_t *l[2] = {P("a", "1"), P("b", "1")};
  replace(&x, l, 2);
  pump(&x);
  advance(&x, 30); /* a resync check: plain stops syncing */
  pump(&x);
  take(&syncing);
  take(&plain);
  /* After a 410, the relist returns only a. */
  replace(&x, l, 1);
  KT_EQ_INT(kl_fifo_len(x.f), 2);
  pump(&x);
  KT_EQ_STR(take(&syncing), "=a@1>a@1 -TS(ns/b:b@1)");
  KT_EQ_STR(take(&plain), "-TS(ns/b:b@1)");
  KT_EQ_STR(store_str(x.s), "a@1");
  kl_obj_unref(l[0]);
  kl_obj_unref(l[1]);
  inf_free(&x);
  KT_EQ_INT(heap_used(), heap0);
}

/* Rings grow, drain in order and give memory back. */
static void test_large_backlog(void) {
  size_t heap0 = heap_used();
  enum { N = 5000 };
  inf x;
  rec *h = calloc(1, sizeof *h);
  inf_init(&x, 0);
  listen(&x, h, 0);
  kl_proc_start(x.p);
  kl_obj_t **o = malloc(N * sizeof *o);
  for (int i = 0; i < N; i++) {
    char name[16];
    snprintf(name, sizeof name, "k%05d", i);
    o[i] = P(name, "1");
    kl_fifo_add(x.f, o[i]);
  }
  pop_all(&x);
  kl_proc_listener_info_t in;
  kl_proc_listener_info(x.p, h->id, &in);
  KT_EQ_INT(in.depth, N);
  KT_EQ_INT(in.high_water, N);
  int i = 0;
  while (kl_proc_run(x.p, 7)) {
    if (strlen(h->log) > 60000) h->log[0] = '\0';
    i++;
  }
  KT_EQ_INT(i, N / 7);
  KT_EQ_INT(h->calls, N);
  for (i = 0; i < N; i++)
    kl_obj_unref(o[i]);
  free(o);
  inf_free(&x);
  free(h);
  KT_EQ_INT(heap_used(), heap0);
}

int main(int argc, char **argv) {
  (void)argc;
  without_tcache(argv);
  warm_up();
  KT_RUN(test_process_deltas);
  KT_RUN(test_store_error_stops_deltas);
  KT_RUN(test_t27_which_listeners_get_resyncs);
  KT_RUN(test_t27_period_rules_and_warnings);
  KT_RUN(test_t28_changed_rv_goes_to_everyone);
  KT_RUN(test_t29_late_joining_handler);
  KT_RUN(test_t30_registration_synced_waits_for_handler);
  KT_RUN(test_listener_types);
  KT_RUN(test_t31_order_and_isolation);
  KT_RUN(test_pump_is_fair_and_bounded);
  KT_RUN(test_retire_drains_then_removes);
  KT_RUN(test_t32_remove_event_handler);
  KT_RUN(test_stop);
  KT_RUN(test_t33_relist_deletes_vanished);
  KT_RUN(test_large_backlog);
  return KT_DONE();
}
