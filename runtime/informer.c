/* informer.c — decoder → DeltaFIFO → store → processor (see informer.h).
 *
 * The informer owns its store, FIFO, processor and watch decoder. Producers
 * (feed, replace, add/update/delete, resync) only queue deltas and call
 * on_work once the FIFO or the processor has something; kl_informer_run then
 * pops and pumps in bounded batches, which is where the store changes and
 * handlers run. Objects are counted references: whatever a producer borrows
 * it does not keep. */
#include "informer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"
#include "log.h"
#include "mem.h"

#define RV_MAX 64

struct kl_informer {
  char *name;
  kl_store_t *store;
  kl_fifo_t *fifo;
  kl_proc_t *proc;
  kl_json_stream_t *watch; /* the current watch stream's decoder */
  kl_obj_opts_t oopts;
  char *api_version, *kind;
  int (*transform)(void *ud, kl_obj_t *in, kl_obj_t **out);
  void (*on_work)(kl_informer_t *inf, void *ud);
  void *ud;
  char rv[RV_MAX];
  char err[256]; /* the processor's last error */
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
  kl_proc_upstream_synced(inf->proc);
}

static int fifo_transform(void *ud, kl_obj_t *in, kl_obj_t **out) {
  kl_informer_t *inf = ud;
  return inf->transform(inf->ud, in, out);
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
  if (o->api_version) inf->api_version = kl_xstrdup(o->api_version);
  if (o->kind) inf->kind = kl_xstrdup(o->kind);
  inf->store = kl_store_new();

  kl_fifo_opts_t fo = {0};
  fo.known = kl_fifo_known_store(inf->store);
  fo.transform = o->transform ? fifo_transform : NULL;
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
  return inf;
}

void kl_informer_free(kl_informer_t *inf) {
  if (!inf) return;
  kl_proc_stop(inf->proc);
  kl_proc_free(inf->proc);
  kl_fifo_free(inf->fifo);
  kl_store_free(inf->store);
  kl_json_stream_free(inf->watch);
  free(inf->api_version);
  free(inf->kind);
  free(inf->name);
  free(inf);
}

const char *kl_informer_name(const kl_informer_t *inf) { return inf->name; }
kl_store_t *kl_informer_store(kl_informer_t *inf) { return inf->store; }
kl_fifo_t *kl_informer_fifo(kl_informer_t *inf) { return inf->fifo; }
kl_proc_t *kl_informer_proc(kl_informer_t *inf) { return inf->proc; }
const char *kl_informer_last_rv(const kl_informer_t *inf) { return inf->rv; }

bool kl_informer_has_synced(const kl_informer_t *inf) {
  return kl_fifo_has_synced(inf->fifo);
}

static void set_rv(kl_informer_t *inf, kl_json_span_t rv) {
  if (rv.n == 0) return;
  size_t n = rv.n < RV_MAX - 1 ? rv.n : RV_MAX - 1;
  memcpy(inf->rv, rv.p, n);
  inf->rv[n] = '\0';
}

static const char *queue_error(int rc) {
  switch (rc) {
  case KL_EINVAL: return "object has no name";
  case KL_ELIMIT: return "too many queued deltas";
  default: return kl_strerror(rc);
  }
}

static int queue(kl_informer_t *inf, kl_obj_event_type_t type, kl_obj_t *o,
                 char *err, size_t errlen) {
  int rc;
  switch (type) {
  case KL_OBJ_ADDED: rc = kl_fifo_add(inf->fifo, o); break;
  case KL_OBJ_MODIFIED: rc = kl_fifo_update(inf->fifo, o); break;
  case KL_OBJ_DELETED: rc = kl_fifo_delete(inf->fifo, o); break;
  default: return 0;
  }
  if (rc != 0) {
    char key[256];
    kl_obj_key(o, key, sizeof key);
    snprintf(err, errlen, "%s %.200s: %s", kl_obj_event_type_name(type), key,
             queue_error(rc));
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
    rc = queue(inf, ev.type, ev.obj, err, errlen);
    kl_obj_event_clear(&ev);
    if (rc != 0) return rc;
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
    char rv[RV_MAX];
    size_t rn =
        l->resource_version.n < RV_MAX - 1 ? l->resource_version.n : RV_MAX - 1;
    memcpy(rv, l->resource_version.p, rn);
    rv[rn] = '\0';
    rc = kl_informer_replace(inf, objs, count, rv, err, errlen);
  }
  unref_all(objs, count);
  kl_json_stream_free(s);
  return rc;
}

int kl_informer_replace(kl_informer_t *inf, kl_obj_t *const *objs, size_t n,
                        const char *rv, char *err, size_t errlen) {
  int rc = kl_fifo_replace(inf->fifo, objs, n);
  if (rc != 0) {
    snprintf(err, errlen, "replace: %s", queue_error(rc));
    return rc;
  }
  if (rv) set_rv(inf, (kl_json_span_t){rv, strlen(rv)});
  return 0;
}

int kl_informer_add(kl_informer_t *inf, kl_obj_t *o) {
  char err[256];
  return queue(inf, KL_OBJ_ADDED, o, err, sizeof err);
}

int kl_informer_update(kl_informer_t *inf, kl_obj_t *o) {
  char err[256];
  return queue(inf, KL_OBJ_MODIFIED, o, err, sizeof err);
}

int kl_informer_delete(kl_informer_t *inf, kl_obj_t *o) {
  char err[256];
  return queue(inf, KL_OBJ_DELETED, o, err, sizeof err);
}

int kl_informer_resync(kl_informer_t *inf) { return kl_fifo_resync(inf->fifo); }

bool kl_informer_run(kl_informer_t *inf, size_t budget) {
  for (size_t i = 0; i < budget; i++) {
    int rc = kl_fifo_pop(inf->fifo, kl_proc_handle_deltas, inf->proc);
    if (rc == KL_EAGAIN || rc == KL_ESHUTDOWN) break;
    if (rc != 0) {
      /* The store refused a delta (an index function failed): the key's
       * deltas are dropped, the store keeps its last good state. */
      snprintf(inf->err, sizeof inf->err, "%s", kl_proc_error(inf->proc));
      kl_log(KL_LOG_ERROR, "informer %s: %s", inf->name, inf->err);
    }
  }
  bool more = kl_proc_run(inf->proc, budget);
  return more || kl_fifo_len(inf->fifo) > 0;
}
