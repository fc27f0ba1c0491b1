/* informer.c — decoder → DeltaFIFO → store → processor (see informer.h).
 *
 * The informer owns its store, FIFO, processor and watch decoder. Producers
 * (feed, replace, add/update/delete, resync) only queue deltas and call
 * on_work once the FIFO or the processor has something; kl_informer_run then
 * pops and pumps in bounded batches, which is where the store changes and
 * handlers run. Objects are counted references: whatever a producer borrows
 * it does not keep. Once the cache is large enough to repay a codec's
 * state (about 400 KB of zstd contexts and dictionary), every object the
 * FIFO takes in passes through the informer's codec (objz.h) after the
 * transform, so what the FIFO, the store and the listeners hold is the
 * compressed form; after sync (with timers), an object the watch changes
 * is cached plain and queued in `cold` (its key, its address as an
 * identity, never dereferenced, and the time), and a timer compresses it
 * once it has stayed unchanged for KL_INFORMER_COLD_AFTER seconds and is
 * still the one cached (kl_store_swap). */
#include "informer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "error.h"
#include "json.h"
#include "log.h"
#include "mem.h"
#include "objz.h"

/* The longest resourceVersion kept (they are opaque strings; etcd's are
 * decimal revisions). A longer one is refused with a warning, never cut. */
#define RV_MAX 4096
/* Objects compressed per turn of the cold timer at most. */
#define COLD_BUDGET 256
/* The cold queue holds at most as many entries as the store holds keys, or
 * this many: beyond, the oldest is dealt with at once (compressed if it is
 * still the object cached, which it rarely is: dropped), so a stream of
 * changes faster than KL_INFORMER_COLD_AFTER keeps it bounded. */
#define COLD_MIN 64

typedef struct cold {
  char *key;          /* the object's key, owned */
  size_t len;         /* its length */
  const kl_obj_t *at; /* the plain object cached then: compared, never read */
  double since;       /* when it was cached */
} cold_t;

struct kl_informer {
  char *name;
  kl_store_t *store;
  kl_fifo_t *fifo;
  kl_proc_t *proc;
  kl_json_stream_t *watch; /* the current watch stream's decoder */
  kl_obj_opts_t oopts;
  kl_objz_t *z; /* NULL: objects are cached plain */
  size_t z_min; /* compress once the cache holds or queues this many keys */
  bool synced;  /* the first Replace was popped: defer compression */
  kl_timers_t *timers;
  kl_timer_t cold_timer;
  cold_t *cold; /* a ring, oldest first */
  size_t cold_head, cold_n, cold_cap;
  char *api_version, *kind;
  int (*transform)(void *ud, kl_obj_t *in, kl_obj_t **out, char *err,
                   size_t errlen);
  void (*on_work)(kl_informer_t *inf, void *ud);
  void *ud;
  char *rv; /* the last resourceVersion, NUL-terminated */
  size_t rv_cap;
  char err[512];  /* the processor's last error */
  char terr[512]; /* the transform's last error */
};

static void work(kl_informer_t *inf) {
  if (inf->on_work) inf->on_work(inf, inf->ud);
}

static void fifo_ready(kl_fifo_t *f, void *ud) {
  (void)f;
  work(ud);
}

static void fifo_synced(kl_fifo_t *f, void *ud) {
  kl_informer_t *inf = ud;
  (void)f;
  inf->synced = true;
  kl_proc_upstream_synced(inf->proc);
#ifdef __GLIBC__
  /* The initial list passed through here as full objects, each freed once
   * its compressed copy was made; glibc keeps the pages those leave free
   * between the live copies (20,000 Pods: 2.1 KB each over the 0.8 KB the
   * cache holds). Hand them back once, now that the cache is filled. */
  malloc_trim(0);
#endif
}

/* Whether objects go through the codec, with `pending` more keys to come
 * than the store and the FIFO hold. */
static bool compressing(const kl_informer_t *inf, size_t pending) {
  return inf->z &&
         kl_store_len(inf->store) + kl_fifo_len(inf->fifo) + pending >=
             inf->z_min;
}

/* Replaces *o by its compressed form (or keeps it). */
static void compress_item(kl_informer_t *inf, kl_obj_t **o) {
  kl_obj_t *c = kl_objz_compress(inf->z, *o);
  kl_obj_unref(*o);
  *o = c;
}

void kl_informer_cache_forms(kl_informer_t *inf, kl_obj_t **objs, size_t n,
                             size_t *cached) {
  if (!compressing(inf, n)) return;
  for (size_t i = *cached; i < n; i++) {
    bool learning = kl_objz_learning(inf->z);
    compress_item(inf, &objs[i]);
    if (learning && !kl_objz_learning(inf->z))
      for (size_t k = 0; k <= i; k++)
        compress_item(inf, &objs[k]);
  }
  *cached = n;
}

/* Whether objects changed now are cached plain and compressed when cold. */
static bool deferring(const kl_informer_t *inf) {
  return inf->synced && inf->timers && compressing(inf, 0);
}

/* Takes the oldest entry off the cold queue and compresses its object if
 * it is still the one cached, plain; returns whether it compressed. */
static bool cold_pop(kl_informer_t *inf) {
  cold_t *c = &inf->cold[inf->cold_head];
  kl_obj_t *o = kl_store_get(inf->store, c->key, c->len);
  bool done = false;
  if (o && o == c->at && !kl_obj_compressed(o)) {
    kl_obj_t *z = kl_objz_compress(inf->z, o);
    if (z != o) kl_store_swap(inf->store, o, z);
    kl_obj_unref(z);
    done = true;
  }
  free(c->key);
  inf->cold_head = (inf->cold_head + 1) % inf->cold_cap;
  inf->cold_n--;
  return done;
}

/* Compresses the cold objects still cached plain, oldest first, up to
 * COLD_BUDGET; re-arms for the next one. */
static void on_cold(kl_timer_t *t, void *ud) {
  kl_informer_t *inf = ud;
  double now = kl_clock_now(kl_timers_clock(inf->timers));
  size_t done = 0;
  (void)t;
  while (inf->cold_n > 0) {
    double due = inf->cold[inf->cold_head].since + KL_INFORMER_COLD_AFTER;
    if (due > now || done == COLD_BUDGET) {
      kl_timers_start(inf->timers, &inf->cold_timer, due > now ? due : now);
      return;
    }
    done += cold_pop(inf);
  }
}

/* Queues the plain object now cached under key for compression when cold. */
static void cold_push(kl_informer_t *inf, const char *key, size_t len,
                      const kl_obj_t *o) {
  size_t max = kl_store_len(inf->store);
  while (inf->cold_n >= (max > COLD_MIN ? max : COLD_MIN))
    cold_pop(inf);
  if (inf->cold_n == inf->cold_cap) {
    size_t cap = inf->cold_cap ? inf->cold_cap * 2 : 256;
    cold_t *r = kl_xmalloc(cap * sizeof *r);
    for (size_t i = 0; i < inf->cold_n; i++)
      r[i] = inf->cold[(inf->cold_head + i) % inf->cold_cap];
    free(inf->cold);
    inf->cold = r;
    inf->cold_cap = cap;
    inf->cold_head = 0;
  }
  cold_t *c = &inf->cold[(inf->cold_head + inf->cold_n) % inf->cold_cap];
  c->key = kl_xstrndup(key, len);
  c->len = len;
  c->at = o;
  c->since = kl_clock_now(kl_timers_clock(inf->timers));
  inf->cold_n++;
  if (!kl_timer_armed(&inf->cold_timer))
    kl_timers_start(inf->timers, &inf->cold_timer,
                    c->since + KL_INFORMER_COLD_AFTER);
}

/* The user's transform, if any, then the codec. */
static int fifo_transform(void *ud, kl_obj_t *in, kl_obj_t **out) {
  kl_informer_t *inf = ud;
  kl_obj_t *t = kl_obj_ref(in);
  inf->terr[0] = '\0';
  if (inf->transform) {
    kl_obj_unref(t);
    int rc = inf->transform(inf->ud, in, &t, inf->terr, sizeof inf->terr);
    if (rc != 0) {
      if (!inf->terr[0])
        snprintf(inf->terr, sizeof inf->terr, "transform: %s", kl_strerror(rc));
      return rc;
    }
  }
  if (compressing(inf, 0) && !deferring(inf)) {
    *out = kl_objz_compress(inf->z, t);
    kl_obj_unref(t);
  } else {
    *out = t;
  }
  return 0;
}

static void proc_ready(kl_proc_t *p, void *ud) {
  (void)p;
  work(ud);
}

static void proc_resync(kl_proc_t *p, void *ud) {
  kl_informer_t *inf = ud;
  (void)p;
  kl_fifo_resync(inf->fifo);
}

static void proc_warn(kl_proc_t *p, const char *msg, void *ud) {
  kl_informer_t *inf = ud;
  (void)p;
  kl_log(KL_LOG_WARN, "informer %s: %s", inf->name, msg);
}

kl_informer_t *kl_informer_new(const kl_informer_opts_t *o) {
  kl_informer_t *inf = kl_xcalloc(1, sizeof *inf);
  inf->name = kl_xstrdup(o->name ? o->name : "informer");
  inf->on_work = o->on_work;
  inf->ud = o->ud;
  inf->transform = o->transform;
  inf->oopts.keep_managed_fields = o->keep_managed_fields;
  inf->oopts.lazy_refs = true;
  if (!o->plain_objects) inf->z = kl_objz_new(NULL);
  inf->z_min = o->compress_min_objects ? o->compress_min_objects
                                       : KL_INFORMER_COMPRESS_MIN;
  inf->timers = o->timers;
  kl_timer_init(&inf->cold_timer, on_cold, inf);
  if (o->api_version) inf->api_version = kl_xstrdup(o->api_version);
  if (o->kind) inf->kind = kl_xstrdup(o->kind);
  inf->store = kl_store_new();

  kl_fifo_opts_t fo = {0};
  fo.known = kl_fifo_known_store(inf->store);
  fo.transform = o->transform || inf->z ? fifo_transform : NULL;
  fo.on_ready = fifo_ready;
  fo.on_synced = fifo_synced;
  fo.ud = inf;
  inf->fifo = kl_fifo_new(&fo);

  kl_proc_opts_t po = {0};
  po.store = inf->store;
  po.timers = o->timers;
  po.clock = o->timers ? kl_timers_clock(o->timers) : NULL;
  po.resync_period = o->resync_period;
  po.resync = proc_resync;
  po.warn = proc_warn;
  po.on_ready = proc_ready;
  po.ud = inf;
  inf->proc = kl_proc_new(&po);
  kl_proc_start(inf->proc);
  inf->watch = kl_json_stream_new(NULL);
  inf->rv_cap = 32;
  inf->rv = kl_xcalloc(1, inf->rv_cap);
  return inf;
}

void kl_informer_free(kl_informer_t *inf) {
  if (!inf) return;
  if (inf->timers) kl_timers_stop(inf->timers, &inf->cold_timer);
  for (size_t i = 0; i < inf->cold_n; i++)
    free(inf->cold[(inf->cold_head + i) % inf->cold_cap].key);
  free(inf->cold);
  kl_proc_stop(inf->proc);
  kl_proc_free(inf->proc);
  kl_fifo_free(inf->fifo);
  kl_store_free(inf->store);
  kl_json_stream_free(inf->watch);
  kl_objz_unref(inf->z);
  free(inf->api_version);
  free(inf->kind);
  free(inf->rv);
  free(inf->name);
  free(inf);
}

const char *kl_informer_name(const kl_informer_t *inf) { return inf->name; }
kl_store_t *kl_informer_store(kl_informer_t *inf) { return inf->store; }
kl_fifo_t *kl_informer_fifo(kl_informer_t *inf) { return inf->fifo; }
kl_proc_t *kl_informer_proc(kl_informer_t *inf) { return inf->proc; }
const char *kl_informer_last_rv(const kl_informer_t *inf) { return inf->rv; }
void kl_informer_keep_refs(kl_informer_t *inf) { inf->oopts.lazy_refs = false; }

bool kl_informer_has_synced(const kl_informer_t *inf) {
  return kl_fifo_has_synced(inf->fifo);
}

static void set_rv(kl_informer_t *inf, kl_json_span_t rv) {
  if (rv.n == 0) return;
  if (rv.n > RV_MAX) {
    kl_log(KL_LOG_WARN,
           "informer %s: resourceVersion of %zu bytes ignored (limit %d)",
           inf->name, rv.n, RV_MAX);
    return;
  }
  if (rv.n + 1 > inf->rv_cap) {
    inf->rv_cap = rv.n + 1;
    inf->rv = kl_xrealloc(inf->rv, inf->rv_cap);
  }
  memcpy(inf->rv, rv.p, rv.n);
  inf->rv[rv.n] = '\0';
}

/* The reason an enqueue failed: the transform's message when it failed. */
static const char *queue_error(kl_informer_t *inf, int rc) {
  if (inf->terr[0]) return inf->terr;
  switch (rc) {
  case KL_EINVAL: return "object has no name";
  case KL_ELIMIT: return "too many queued deltas";
  default: return kl_strerror(rc);
  }
}

static int queue(kl_informer_t *inf, kl_obj_event_type_t type, kl_obj_t *o,
                 char *err, size_t errlen) {
  int rc;
  inf->terr[0] = '\0';
  switch (type) {
  case KL_OBJ_ADDED: rc = kl_fifo_add(inf->fifo, o); break;
  case KL_OBJ_MODIFIED: rc = kl_fifo_update(inf->fifo, o); break;
  case KL_OBJ_DELETED: rc = kl_fifo_delete(inf->fifo, o); break;
  default: return 0;
  }
  if (rc != 0) {
    char key[256];
    if (kl_obj_name(o).n == 0)
      snprintf(err, errlen, "%s: %s", kl_obj_event_type_name(type),
               queue_error(inf, rc));
    else if (kl_obj_key(o, key, sizeof key) < sizeof key)
      snprintf(err, errlen, "%s %s: %s", kl_obj_event_type_name(type), key,
               queue_error(inf, rc));
    else
      snprintf(err, errlen, "%s %.200s...: %s", kl_obj_event_type_name(type),
               key, queue_error(inf, rc));
  }
  return rc;
}

int kl_informer_feed(kl_informer_t *inf, const char *p, size_t n, int *code,
                     char *err, size_t errlen) {
  kl_json_value_t v;
  int rc = kl_json_stream_feed(inf->watch, p, n);
  if (rc != 0) {
    snprintf(err, errlen, "%s", kl_strerror(rc));
    return rc;
  }
  while ((rc = kl_json_stream_next(inf->watch, &v)) == KL_OK) {
    kl_obj_event_t ev;
    rc = kl_obj_event_parse(&v, &inf->oopts, &ev, err, errlen);
    if (rc != 0) return rc;
    if (ev.type == KL_OBJ_ERROR) {
      if (code) *code = (int)ev.status.code;
      snprintf(err, errlen, "%s", ev.status.message);
      kl_obj_event_clear(&ev);
      return KL_EIO;
    }
    set_rv(inf, kl_obj_resource_version(ev.obj));
    if (queue(inf, ev.type, ev.obj, err, errlen) != 0) {
      /* client-go's watchHandler logs a store error and goes on. */
      kl_log(KL_LOG_ERROR, "informer %s: watch event dropped: %s", inf->name,
             err);
      err[0] = '\0';
    }
    kl_obj_event_clear(&ev);
  }
  if (rc == KL_EAGAIN) return 0;
  snprintf(err, errlen, "%s", kl_json_stream_error(inf->watch));
  return rc;
}

int kl_informer_watch_reset(kl_informer_t *inf) {
  int rc = kl_json_stream_end(inf->watch);
  kl_json_stream_free(inf->watch);
  inf->watch = kl_json_stream_new(NULL);
  return rc == KL_OK ? 0 : KL_EPARSE;
}

int kl_informer_parse(kl_informer_t *inf, const char *p, size_t n,
                      kl_obj_t **out, char *err, size_t errlen) {
  kl_json_value_t v;
  int rc = kl_json_check(p, n, &v, err, errlen);
  if (rc != 0) return rc;
  return kl_obj_parse(&v, &inf->oopts, out, err, errlen);
}

static void unref_all(kl_obj_t **objs, size_t n) {
  for (size_t i = 0; i < n; i++)
    kl_obj_unref(objs[i]);
  free(objs);
}

int kl_informer_replace_list(kl_informer_t *inf, const char *p, size_t n,
                             char *err, size_t errlen) {
  kl_json_opts_t jo = {KL_JSON_LIST, 0, 0};
  kl_json_stream_t *s = kl_json_stream_new(&jo);
  kl_obj_opts_t oo = inf->oopts;
  kl_obj_t **objs = NULL;
  size_t count = 0, cap = 0;
  kl_json_value_t v;
  int rc = kl_json_stream_feed(s, p, n);
  oo.api_version = inf->api_version;
  oo.kind = inf->kind;
  while (rc == 0 && (rc = kl_json_stream_next(s, &v)) == KL_OK) {
    if (count == cap) {
      cap = cap ? cap * 2 : 64;
      objs = kl_xrealloc(objs, cap * sizeof *objs);
    }
    rc = kl_obj_parse(&v, &oo, &objs[count], err, errlen);
    if (rc == 0) count++;
  }
  if (rc == KL_EAGAIN) rc = kl_json_stream_end(s);
  if (rc != 0 && rc != KL_EPARSE && rc != KL_ELIMIT) rc = KL_EPARSE;
  if (rc != 0 && !err[0]) snprintf(err, errlen, "%s", kl_json_stream_error(s));
  if (rc == 0) {
    const kl_json_list_t *l = kl_json_stream_list(s);
    char *rv = l->resource_version.n
                   ? kl_xstrndup(l->resource_version.p, l->resource_version.n)
                   : NULL;
    rc = kl_informer_replace(inf, objs, count, rv, err, errlen);
    free(rv);
  }
  unref_all(objs, count);
  kl_json_stream_free(s);
  return rc;
}

int kl_informer_replace(kl_informer_t *inf, kl_obj_t *const *objs, size_t n,
                        const char *rv, char *err, size_t errlen) {
  /* A nameless item would stop the FIFO's Replace half-way: refuse first. */
  for (size_t i = 0; i < n; i++) {
    if (kl_obj_name(objs[i]).n == 0) {
      snprintf(err, errlen, "item %zu has no name", i + 1);
      return KL_EINVAL;
    }
  }
  inf->terr[0] = '\0';
  int rc = kl_fifo_replace(inf->fifo, objs, n);
  if (rc != 0) {
    snprintf(err, errlen, "%s", queue_error(inf, rc));
    return rc;
  }
  if (rv) set_rv(inf, (kl_json_span_t){rv, strlen(rv)});
  return 0;
}

int kl_informer_add(kl_informer_t *inf, kl_obj_t *o, char *err, size_t errlen) {
  return queue(inf, KL_OBJ_ADDED, o, err, errlen);
}

int kl_informer_update(kl_informer_t *inf, kl_obj_t *o, char *err,
                       size_t errlen) {
  return queue(inf, KL_OBJ_MODIFIED, o, err, errlen);
}

int kl_informer_delete(kl_informer_t *inf, kl_obj_t *o, char *err,
                       size_t errlen) {
  return queue(inf, KL_OBJ_DELETED, o, err, errlen);
}

int kl_informer_resync(kl_informer_t *inf) { return kl_fifo_resync(inf->fifo); }

/* handleDeltas: processDeltas, and a store error logged with the key. The
 * key's deltas are then dropped (client-go re-queues nothing either); the
 * store keeps its last good state. */
static int process(void *ud, kl_fifo_popped_t *it) {
  kl_informer_t *inf = ud;
  int rc =
      kl_proc_process_deltas(inf->proc, it->key, it->len, it->deltas, it->n,
                             it->initial, inf->err, sizeof inf->err);
  if (rc != 0)
    kl_log(KL_LOG_ERROR, "informer %s: %.*s: %s", inf->name,
           (int)(it->len < 200 ? it->len : 200), it->key,
           inf->err[0] ? inf->err : kl_strerror(rc));
  if (deferring(inf)) {
    const kl_obj_t *o = kl_store_get(inf->store, it->key, it->len);
    if (o && !kl_obj_compressed(o)) cold_push(inf, it->key, it->len, o);
  }
  return rc;
}

size_t kl_informer_backlog(const kl_informer_t *inf) {
  return kl_fifo_len(inf->fifo) + kl_proc_pending(inf->proc);
}

bool kl_informer_run(kl_informer_t *inf, size_t budget) {
  for (size_t i = 0; i < budget; i++) {
    int rc = kl_fifo_pop(inf->fifo, process, inf);
    if (rc == KL_EAGAIN || rc == KL_ESHUTDOWN) break;
  }
  bool more = kl_proc_run(inf->proc, budget);
  return more || kl_fifo_len(inf->fifo) > 0;
}

/* --- For the reflector: events seen by the caller first, paged lists --- */

int kl_informer_feed_events(kl_informer_t *inf, const char *p, size_t n,
                            kl_informer_event_fn *fn, void *ud, char *err,
                            size_t errlen) {
  kl_json_value_t v;
  int rc = kl_json_stream_feed(inf->watch, p, n);
  if (rc != 0) {
    snprintf(err, errlen, "%s", kl_strerror(rc));
    return rc;
  }
  while ((rc = kl_json_stream_next(inf->watch, &v)) == KL_OK) {
    kl_obj_event_t ev;
    rc = kl_obj_event_parse(&v, &inf->oopts, &ev, err, errlen);
    if (rc != 0) return rc;
    int verdict = fn ? fn(ud, &ev, err, errlen) : 0;
    if (verdict < 0 || ev.type == KL_OBJ_ERROR) {
      if (verdict >= 0) snprintf(err, errlen, "%s", ev.status.message);
      kl_obj_event_clear(&ev);
      return verdict < 0 ? verdict : KL_EIO;
    }
    if (verdict == 0 && queue(inf, ev.type, ev.obj, err, errlen) != 0) {
      kl_log(KL_LOG_ERROR, "informer %s: watch event dropped: %s", inf->name,
             err);
      err[0] = '\0';
    }
    kl_obj_event_clear(&ev);
  }
  if (rc == KL_EAGAIN) return 0;
  snprintf(err, errlen, "%s", kl_json_stream_error(inf->watch));
  return rc;
}

void kl_informer_set_rv(kl_informer_t *inf, const char *rv) {
  if (rv) set_rv(inf, (kl_json_span_t){rv, strlen(rv)});
}

/* Items beyond this many in one list are refused (KL_ELIMIT). */
#define LIST_MAX_ITEMS ((size_t)16 << 20)

struct kl_informer_list {
  kl_informer_t *inf;
  kl_json_stream_t *page; /* the page being received; NULL between pages */
  kl_json_stream_t *last; /* the page that ended last, for its envelope */
  kl_obj_t **objs;
  size_t count, cap;
  size_t cached; /* objs[0..cached) are in their cache form */
};

kl_informer_list_t *kl_informer_list_begin(kl_informer_t *inf) {
  kl_informer_list_t *l = kl_xcalloc(1, sizeof *l);
  l->inf = inf;
  return l;
}

static void list_new_page(kl_informer_list_t *l) {
  kl_json_opts_t jo = {KL_JSON_LIST, 0, 0};
  kl_json_stream_free(l->last);
  l->last = NULL;
  l->page = kl_json_stream_new(&jo);
}

int kl_informer_list_feed(kl_informer_list_t *l, const char *p, size_t n,
                          char *err, size_t errlen) {
  kl_obj_opts_t oo = l->inf->oopts;
  kl_json_value_t v;
  int rc;
  if (!l->page) list_new_page(l);
  oo.api_version = l->inf->api_version;
  oo.kind = l->inf->kind;
  if ((rc = kl_json_stream_feed(l->page, p, n)) != 0) {
    /* A stream with an error keeps it: report that, not the refusal. */
    const char *m = kl_json_stream_error(l->page);
    snprintf(err, errlen, "%s", m[0] ? m : kl_strerror(rc));
    return m[0] ? KL_EPARSE : rc;
  }
  while ((rc = kl_json_stream_next(l->page, &v)) == KL_OK) {
    if (l->count == LIST_MAX_ITEMS) {
      snprintf(err, errlen, "more than %zu items in a list", LIST_MAX_ITEMS);
      return KL_ELIMIT;
    }
    if (l->count == l->cap) {
      l->cap = l->cap ? l->cap * 2 : 64;
      l->objs = kl_xrealloc(l->objs, l->cap * sizeof *l->objs);
    }
    if ((rc = kl_obj_parse(&v, &oo, &l->objs[l->count], err, errlen)) != 0)
      return rc;
    l->count++;
    kl_informer_cache_forms(l->inf, l->objs, l->count, &l->cached);
  }
  if (rc == KL_EAGAIN) return 0;
  snprintf(err, errlen, "%s", kl_json_stream_error(l->page));
  return rc;
}

int kl_informer_list_page_end(kl_informer_list_t *l, const kl_json_list_t **env,
                              char *err, size_t errlen) {
  if (!l->page) list_new_page(l);
  int rc = kl_json_stream_end(l->page);
  if (rc != 0) {
    const char *m = kl_json_stream_error(l->page);
    snprintf(err, errlen, "%s", m[0] ? m : "truncated list");
    kl_json_stream_free(l->page);
    l->page = NULL;
    return rc == KL_ELIMIT ? KL_ELIMIT : KL_EPARSE;
  }
  l->last = l->page;
  l->page = NULL;
  *env = kl_json_stream_list(l->last);
  return 0;
}

size_t kl_informer_list_count(const kl_informer_list_t *l) { return l->count; }

int kl_informer_list_commit(kl_informer_list_t *l, const char *rv, char *err,
                            size_t errlen) {
  return kl_informer_replace(l->inf, l->objs, l->count, rv, err, errlen);
}

void kl_informer_list_free(kl_informer_list_t *l) {
  if (!l) return;
  unref_all(l->objs, l->count);
  kl_json_stream_free(l->page);
  kl_json_stream_free(l->last);
  free(l);
}
