/* test_cache_model.c — the store, DeltaFIFO and shared processor together,
 * against a simple model, over long random runs (fixed seeds).
 *
 * A run drives the pipeline as an informer does (the FIFO's knownObjects is
 * the store; pops go through processDeltas; resyncs come from the check
 * timer on the fake clock, or directly) with random adds, updates, deletes,
 * relists (unchanged objects, new versions, vanished keys, duplicates),
 * resyncs, clock moves, pops, bounded and full deliveries, listeners added
 * (before and after start, with every kind of resync period) and removed
 * (also from inside handlers). The model is written plainly from
 * CLIENTGO.md 7, 9.2 and 10: arrays indexed by key, linear scans. After
 * every step it checks the store (every key's object) and every index
 * (every value's members, and the value list), the FIFO (queue order and
 * every key's deltas, HasSynced), and every listener (its buffer depth,
 * HasSynced, and every notification received so far, in order: late-join
 * adds as a set, then the exact sequence, same-RV syncs and tombstones
 * included). Where client-go's order is unspecified (map order: tombstones
 * for known keys, Resync's Sync deltas, late-join adds), the model checks
 * the set and adopts the order it sees. */
#include <malloc.h>
#include <stdint.h>
#include <unistd.h>

#include "deltafifo.h"
#include "error.h"
#include "json.h"
#include "mem.h"
#include "object.h"
#include "processor.h"
#include "store.h"
#include "test.h"
#include "kt_heap.h"
#include "timer.h"

/* ---- heap leak checks (as in test_store.c) ---- */

/* ---- randomness ---- */

static uint64_t rng;
static uint32_t rnd(uint32_t n) {
  rng = rng * 6364136223846793005u + 1442695040888963407u;
  return (uint32_t)((rng >> 33) % n);
}

/* ---- the universe: 12 keys, a few label and owner values ---- */

#define NK 12
#define MAXL 64 /* listeners ever created per run */

static const char *key_str(int k) {
  static char keys[NK][8];
  if (!keys[k][0])
    snprintf(keys[k], sizeof keys[k], "%c/k%d", k < 6 ? 'a' : 'b', k % 6);
  return keys[k];
}

static int key_id(const char *key, size_t len) {
  for (int k = 0; k < NK; k++)
    if (strlen(key_str(k)) == len && memcmp(key_str(k), key, len) == 0)
      return k;
  return -1;
}

static kl_obj_t **pool; /* every object made in a run */
static size_t npool, cpool;
static unsigned rvc;

/* A new version of key k: a fresh resourceVersion, random labels (app in
 * x/y/z, tier in p/q, each maybe absent) and controller (u1/u2/none). */
static kl_obj_t *version(int k) {
  static const char *apps[] = {"x", "y", "z"}, *tiers[] = {"p", "q"};
  char json[512], labels[128] = "", owner[256] = "", err[256];
  int a = (int)rnd(4), t = (int)rnd(3), u = (int)rnd(3);
  if (a < 3 || t < 2)
    snprintf(labels, sizeof labels, ",\"labels\":{%s%s%s%s%s%s%s}",
             a < 3 ? "\"app\":\"" : "", a < 3 ? apps[a] : "", a < 3 ? "\"" : "",
             a < 3 && t < 2 ? "," : "", t < 2 ? "\"tier\":\"" : "",
             t < 2 ? tiers[t] : "", t < 2 ? "\"" : "");
  if (u < 2)
    snprintf(owner, sizeof owner,
             ",\"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":"
             "\"ReplicaSet\",\"name\":\"rs\",\"uid\":\"u%d\",\"controller\":"
             "true}]",
             u + 1);
  snprintf(json, sizeof json,
           "{\"metadata\":{\"namespace\":\"%c\",\"name\":\"k%d\","
           "\"resourceVersion\":\"%u\"%s%s}}",
           k < 6 ? 'a' : 'b', k % 6, ++rvc, labels, owner);
  kl_json_value_t v;
  kl_obj_t *o = NULL;
  if (kl_json_check(json, strlen(json), &v, err, sizeof err) != KL_OK ||
      kl_obj_parse(&v, NULL, &o, err, sizeof err) != KL_OK) {
    fprintf(stderr, "version %s: %s\n", json, err);
    abort();
  }
  if (npool == cpool) {
    cpool = cpool ? cpool * 2 : 256;
    pool = kl_xrealloc(pool, cpool * sizeof *pool);
  }
  return pool[npool++] = o;
}

static int key_of_obj(const kl_obj_t *o) {
  char b[64];
  size_t n = kl_obj_key(o, b, sizeof b);
  return key_id(b, n);
}

/* "a/k0@17", or "-" */
static void vstr(char *b, size_t cap, const kl_obj_t *o) {
  if (!o) {
    snprintf(b, cap, "-");
    return;
  }
  char key[64];
  kl_json_span_t rv = kl_obj_resource_version(o);
  kl_obj_key(o, key, sizeof key);
  if (snprintf(b, cap, "%s@%.*s", key, (int)rv.n, rv.p) >= (int)cap) abort();
}

static bool same_rv(const kl_obj_t *a, const kl_obj_t *b) {
  kl_json_span_t x = kl_obj_resource_version(a), y = kl_obj_resource_version(b);
  return x.n == y.n && memcmp(x.p, y.p, x.n) == 0;
}

/* ---- string lists ---- */

typedef struct slist {
  char **v;
  size_t n, cap;
} slist;

static void sl_push(slist *l, const char *s) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 64;
    l->v = kl_xrealloc(l->v, l->cap * sizeof *l->v);
  }
  l->v[l->n++] = kl_xstrdup(s);
}

static void sl_free(slist *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* ---- the model ---- */

typedef struct mdelta {
  kl_delta_type_t type;
  kl_obj_t *obj;
  bool ts;
} mdelta;

typedef struct ml {
  uint64_t id;
  bool active;
  double requested, period, next;
  bool syncing;
  slist join;            /* late-join adds, delivered first, in any order */
  bool *joined;          /* which of them have been received */
  slist exp;             /* then exactly these */
  slist got;             /* received */
  size_t checked;        /* got[0..checked) verified */
  size_t initial_queued; /* initial adds queued to it */
  size_t frozen;         /* got.n at removal */
  int freed;
} ml;

static struct model {
  /* store */
  kl_obj_t *st[NK];
  /* FIFO */
  int q[NK];
  size_t qn;
  mdelta *d[NK];
  size_t dn[NK], dcap[NK];
  bool populated, synced;
  size_t initial_count;
  size_t transforms;
  /* processor */
  bool started;
  double check, dflt, next_check;
  ml ls[MAXL];
  size_t nls;
} M;

/* The system under test. */
static struct sut {
  kl_store_t *s;
  kl_fifo_t *f;
  kl_proc_t *p;
  kl_timers_t *ts;
  size_t transforms;
} S;

static bool queued(int k) { return M.dn[k] > 0; }

static void m_queue_action(int k, kl_delta_type_t type, kl_obj_t *o, bool ts) {
  if (!queued(k)) M.q[M.qn++] = k;
  if (M.dn[k] == M.dcap[k]) {
    M.dcap[k] = M.dcap[k] ? M.dcap[k] * 2 : 8;
    M.d[k] = kl_xrealloc(M.d[k], M.dcap[k] * sizeof *M.d[k]);
  }
  M.d[k][M.dn[k]++] = (mdelta){type, o, ts};
  size_t n = M.dn[k];
  if (n >= 2 && M.d[k][n - 1].type == KL_DELTA_DELETED &&
      M.d[k][n - 2].type == KL_DELTA_DELETED) {
    if (M.d[k][n - 2].ts) M.d[k][n - 2] = M.d[k][n - 1];
    M.dn[k]--;
  }
}

static void m_check_synced(void) {
  if (M.populated && M.initial_count == 0) M.synced = true;
}

static void m_distribute(const char *note, bool sync, bool initial_add) {
  for (size_t i = 0; i < M.nls; i++) {
    ml *l = &M.ls[i];
    if (!l->active || (sync && !l->syncing)) continue;
    sl_push(&l->exp, note);
    if (initial_add) l->initial_queued++;
  }
}

/* processDeltas on the model. */
static void m_process(int k, const mdelta *d, size_t n, bool initial) {
  for (size_t i = 0; i < n; i++) {
    char note[256], a[64], b[64];
    vstr(a, sizeof a, d[i].obj);
    if (d[i].type == KL_DELTA_DELETED) {
      M.st[k] = NULL;
      if (d[i].ts)
        snprintf(note, sizeof note, "-TS(%s:%s)", key_str(k), a);
      else
        snprintf(note, sizeof note, "-%s", a);
      m_distribute(note, false, false);
      continue;
    }
    kl_obj_t *old = M.st[k];
    M.st[k] = d[i].obj;
    if (old) {
      bool sync = same_rv(old, d[i].obj);
      vstr(b, sizeof b, old);
      snprintf(note, sizeof note, "%c%s>%s", sync ? '=' : '~', b, a);
      m_distribute(note, sync, false);
    } else {
      snprintf(note, sizeof note, "+%s%s", a, initial ? "(i)" : "");
      m_distribute(note, false, initial);
    }
  }
}

static void m_pop(void) {
  int k = M.q[0];
  memmove(M.q, M.q + 1, --M.qn * sizeof *M.q);
  bool initial = !M.synced;
  if (M.initial_count > 0) {
    M.initial_count--;
    m_check_synced();
  }
  size_t n = M.dn[k];
  M.dn[k] = 0;
  m_process(k, M.d[k], n, initial);
}

/* Replace; returns the queue length after the listed keys (what follows
 * is in store order, unspecified). */
static size_t m_replace(kl_obj_t **list, size_t n) {
  bool listed[NK] = {0};
  size_t distinct = 0, deletions = 0;
  for (size_t i = 0; i < n; i++) {
    int k = key_of_obj(list[i]);
    M.transforms++;
    m_queue_action(k, KL_DELTA_REPLACED, list[i], false);
    if (!listed[k]) distinct++;
    listed[k] = true;
  }
  size_t boundary = M.qn;
  for (int k = 0; k < NK; k++) {
    if (listed[k] || !queued(k)) continue;
    m_queue_action(k, KL_DELTA_DELETED, M.d[k][M.dn[k] - 1].obj, true);
    deletions++;
  }
  for (int k = 0; k < NK; k++) {
    if (listed[k] || queued(k) || !M.st[k]) continue;
    m_queue_action(k, KL_DELTA_DELETED, M.st[k], true);
    deletions++;
  }
  if (!M.populated) {
    M.populated = true;
    M.initial_count = distinct + deletions;
    m_check_synced();
  }
  return boundary;
}

static void m_resync(void) {
  for (int k = 0; k < NK; k++)
    if (M.st[k] && !queued(k)) m_queue_action(k, KL_DELTA_SYNC, M.st[k], false);
}

static double m_eff(double d, double c) {
  if (d == 0 || c == 0) return 0;
  return d < c ? c : d;
}

static bool m_should_resync(void) {
  bool any = false;
  for (size_t i = 0; i < M.nls; i++) {
    ml *l = &M.ls[i];
    if (!l->active) continue;
    l->syncing = l->period != 0 && kt_now >= l->next;
    if (l->syncing) {
      any = true;
      l->next = kt_now + l->period;
    }
  }
  return any;
}

/* ---- the system under test's hooks ---- */

static int transform(void *ud, kl_obj_t *in, kl_obj_t **out) {
  (void)ud;
  S.transforms++;
  *out = kl_obj_ref(in);
  return 0;
}

static void do_resync(kl_proc_t *p, void *ud) {
  (void)p;
  (void)ud;
  KT_EQ_INT(kl_fifo_resync(S.f), 0);
}

static void fifo_synced(kl_fifo_t *f, void *ud) {
  (void)f;
  (void)ud;
  kl_proc_upstream_synced(S.p);
}

static size_t handler_removals;

static void ml_free(void *ud) { ((ml *)ud)->freed++; }

static void remove_model_listener(ml *l) {
  l->active = false;
  l->frozen = l->got.n;
}

static void handler(kl_proc_t *p, uint64_t id, const kl_proc_note_t *n,
                    void *ud) {
  ml *l = ud;
  char note[256], a[64], b[64];
  KT_EQ_INT(id, l->id);
  KT_TRUE(l->active);
  KT_EQ_INT(key_id(n->key, n->len) >= 0, 1);
  vstr(a, sizeof a, n->obj);
  vstr(b, sizeof b, n->old);
  switch (n->type) {
  case KL_PROC_ADD:
    snprintf(note, sizeof note, "+%s%s", a, n->initial ? "(i)" : "");
    break;
  case KL_PROC_UPDATE:
    snprintf(note, sizeof note, "%c%s>%s", n->sync ? '=' : '~', b, a);
    break;
  default:
    if (n->tombstone)
      snprintf(note, sizeof note, "-TS(%s:%s)", n->key, a);
    else
      snprintf(note, sizeof note, "-%s", a);
  }
  sl_push(&l->got, note);
  /* Now and then a handler removes a listener, maybe itself. */
  if (rnd(400) == 0) {
    ml *victim = &M.ls[rnd((uint32_t)M.nls)];
    if (victim->active) {
      KT_EQ_INT(kl_proc_remove_listener(p, victim->id), 0);
      remove_model_listener(victim);
      handler_removals++;
    }
  }
}

/* ---- checks ---- */

static const char *ix_names[] = {"namespace", "app", "owner", "labels"};
static const char *ix_vals[][5] = {
    {"a", "b"}, {"x", "y", "z"}, {"u1", "u2"}, {"x", "y", "z", "p", "q"}};
static const int ix_nvals[] = {2, 3, 2, 5};

/* Every label value, twice (duplicates must count once). */
static int labels_fn(const kl_obj_t *o, void *ud, kl_store_emit_fn *emit,
                     void *ctx) {
  (void)ud;
  for (size_t i = 0; i < kl_obj_label_count(o); i++) {
    kl_json_span_t k, v;
    kl_obj_label(o, i, &k, &v);
    emit(ctx, v.p, v.n);
    emit(ctx, v.p, v.n);
  }
  return 0;
}

/* Does the model's object o have value v in index ix? Written from the
 * accessors, independently of the store's index code. */
static bool m_indexed(int ix, const kl_obj_t *o, const char *v) {
  kl_json_span_t s;
  kl_obj_owner_t w;
  size_t n = strlen(v);
  switch (ix) {
  case 0: s = kl_obj_namespace(o); break;
  case 1:
    if (!kl_obj_label_get(o, "app", 3, &s)) return false;
    break;
  case 2:
    if (!kl_obj_controller(o, &w)) return false;
    s = w.uid;
    break;
  default:
    if (kl_obj_label_get(o, "app", 3, &s) && s.n == n && memcmp(s.p, v, n) == 0)
      return true;
    if (!kl_obj_label_get(o, "tier", 4, &s)) return false;
  }
  return s.n == n && memcmp(s.p, v, n) == 0;
}

static int mask_key(void *ud, const char *key, size_t len, kl_obj_t *o) {
  uint32_t *m = ud;
  int k = key_id(key, len);
  KT_TRUE(k >= 0 && M.st[k] == o);
  if (k >= 0) *m |= 1u << k;
  return 0;
}

static int count_val(void *ud, const char *val, size_t len) {
  (void)val;
  (void)len;
  ++*(int *)ud;
  return 0;
}

static void check_store(int step) {
  size_t n = 0;
  for (int k = 0; k < NK; k++) {
    n += M.st[k] != NULL;
    if (kl_store_get(S.s, key_str(k), strlen(key_str(k))) != M.st[k])
      KT_FAIL_("step %d: store %s differs", step, key_str(k));
  }
  KT_EQ_INT(kl_store_len(S.s), n);
  for (int ix = 0; ix < 4; ix++) {
    int nonempty = 0, listed = 0;
    for (int j = 0; j < ix_nvals[ix]; j++) {
      const char *v = ix_vals[ix][j];
      uint32_t want = 0, got = 0;
      for (int k = 0; k < NK; k++)
        if (M.st[k] && m_indexed(ix, M.st[k], v)) want |= 1u << k;
      KT_EQ_INT(
          kl_store_by_index(S.s, ix_names[ix], v, strlen(v), mask_key, &got),
          0);
      if (got != want)
        KT_FAIL_("step %d: index %s value %s: %#x != %#x", step, ix_names[ix],
                 v, got, want);
      KT_EQ_INT(kl_store_index_len(S.s, ix_names[ix], v, strlen(v)),
                __builtin_popcount(want));
      nonempty += want != 0;
    }
    kl_store_index_values(S.s, ix_names[ix], count_val, &listed);
    KT_EQ_INT(listed, nonempty);
  }
  KT_EQ_INT(kl_store_repairs(S.s), 0);
}

static int collect_key(void *ctx, const char *key, size_t len) {
  int *q = ctx;
  q[q[NK]++] = key_id(key, len);
  return 0;
}

/* The SUT's queue order, q[NK] the count. */
static void sut_queue(int q[NK + 1]) {
  q[NK] = 0;
  kl_fifo_list_keys(S.f, collect_key, q);
}

/* After an operation that appended keys in an unspecified order from
 * position `from`: the same keys must be there; take the SUT's order. */
static void adopt_tail(size_t from, int step) {
  int q[NK + 1];
  sut_queue(q);
  if ((size_t)q[NK] != M.qn) return; /* check_fifo reports it */
  uint32_t want = 0, got = 0;
  for (size_t i = from; i < M.qn; i++) {
    want |= 1u << M.q[i];
    got |= 1u << q[i];
  }
  if (want != got)
    KT_FAIL_("step %d: unordered tail %#x != %#x", step, got, want);
  for (size_t i = from; i < M.qn; i++)
    M.q[i] = q[i];
}

static void check_fifo(int step) {
  int q[NK + 1];
  sut_queue(q);
  KT_EQ_INT(kl_fifo_len(S.f), M.qn);
  KT_EQ_INT(q[NK], M.qn);
  for (size_t i = 0; i < M.qn && i < (size_t)q[NK]; i++)
    if (q[i] != M.q[i]) {
      KT_FAIL_("step %d: queue position %zu: %d != %d", step, i, q[i], M.q[i]);
      break;
    }
  for (int k = 0; k < NK; k++) {
    const kl_delta_t *d = NULL;
    size_t n = kl_fifo_get(S.f, key_str(k), strlen(key_str(k)), &d);
    KT_EQ_INT(n, M.dn[k]);
    for (size_t i = 0; i < n && i < M.dn[k]; i++)
      if (d[i].type != M.d[k][i].type || d[i].obj != M.d[k][i].obj ||
          d[i].tombstone != M.d[k][i].ts) {
        KT_FAIL_("step %d: %s delta %zu: %s%s != %s%s", step, key_str(k), i,
                 kl_delta_type_name(d[i].type), d[i].tombstone ? "(ts)" : "",
                 kl_delta_type_name(M.d[k][i].type),
                 M.d[k][i].ts ? "(ts)" : "");
        break;
      }
  }
  KT_EQ_INT(kl_fifo_has_synced(S.f), M.synced);
  KT_EQ_INT(kl_proc_has_upstream_synced(S.p), M.synced);
  KT_EQ_INT(S.transforms, M.transforms);
}

/* Verifies what each listener received since the last check. */
static void check_listeners(int step, bool drained) {
  for (size_t i = 0; i < M.nls; i++) {
    ml *l = &M.ls[i];
    for (; l->checked < l->got.n; l->checked++) {
      const char *g = l->got.v[l->checked];
      if (l->checked < l->join.n) {
        size_t j;
        for (j = 0; j < l->join.n; j++)
          if (!l->joined[j] && strcmp(l->join.v[j], g) == 0) break;
        if (j == l->join.n) {
          KT_FAIL_("step %d: listener %zu got %s, not a join add", step, i, g);
          return;
        }
        l->joined[j] = true;
        continue;
      }
      size_t e = l->checked - l->join.n;
      if (e >= l->exp.n || strcmp(l->exp.v[e], g) != 0) {
        KT_FAIL_("step %d: listener %zu notification %zu: %s != %s", step, i, e,
                 g, e < l->exp.n ? l->exp.v[e] : "(none)");
        return;
      }
    }
    if (!l->active) {
      KT_EQ_INT(l->got.n, l->frozen);
      continue;
    }
    kl_proc_listener_info_t in;
    KT_EQ_INT(kl_proc_listener_info(S.p, l->id, &in), 0);
    KT_EQ_INT(in.depth, l->join.n + l->exp.n - l->got.n);
    KT_EQ_DBL(in.resync_period, l->period, 0);
    KT_EQ_INT(in.syncing, l->syncing);
    size_t initial_got = 0;
    for (size_t j = 0; j < l->got.n; j++)
      initial_got += strstr(l->got.v[j], "(i)") != NULL;
    KT_EQ_INT(kl_proc_listener_synced(S.p, l->id),
              M.synced && initial_got == l->initial_queued);
    if (drained) KT_EQ_INT(l->got.n, l->join.n + l->exp.n);
  }
  KT_EQ_DBL(kl_proc_resync_check_period(S.p), M.check, 0);
}

/* ---- operations ---- */

static kl_obj_t *server[NK]; /* the "apiserver's" current object per key */

static void op_add_listener(void) {
  static const double periods[] = {KL_PROC_DEFAULT_RESYNC, 0, 0.5, 5, 20, 45};
  double opt = periods[rnd(6)];
  ml *l = &M.ls[M.nls++];
  memset(l, 0, sizeof *l);
  /* The model's rules (CLIENTGO.md 10.4). */
  double req = opt < 0 ? M.dflt : opt;
  if (req > 0) {
    if (req < 1) req = 1;
    if (req < M.check) {
      if (M.started) {
        req = M.check;
      } else {
        M.check = req;
        for (size_t i = 0; i + 1 < M.nls; i++)
          if (M.ls[i].active)
            M.ls[i].period = m_eff(M.ls[i].requested, M.check);
      }
    }
  }
  l->requested = req;
  l->period = m_eff(req, M.check);
  l->next = kt_now + l->period;
  l->syncing = true;
  l->active = true;
  if (M.started)
    for (int k = 0; k < NK; k++) {
      if (!M.st[k]) continue;
      char a[64], note[80];
      vstr(a, sizeof a, M.st[k]);
      snprintf(note, sizeof note, "+%s(i)", a);
      sl_push(&l->join, note);
      l->initial_queued++;
    }
  l->joined = kl_xcalloc(l->join.n + 1, sizeof *l->joined);
  kl_proc_listener_opts_t lo = {handler, l, ml_free, opt, 0};
  l->id = kl_proc_add_listener(S.p, &lo);
  KT_TRUE(l->id != 0);
}

static void op_pop(int n, int step) {
  for (int i = 0; i < n; i++) {
    int rc = kl_fifo_pop(S.f, kl_proc_handle_deltas, S.p);
    if (M.qn == 0) {
      KT_EQ_INT(rc, KL_EAGAIN);
      return;
    }
    if (rc != 0) KT_FAIL_("step %d: pop: %s", step, kl_strerror(rc));
    m_pop();
  }
}

static size_t m_pending(void) {
  size_t n = 0;
  for (size_t i = 0; i < M.nls; i++)
    if (M.ls[i].active) n += M.ls[i].join.n + M.ls[i].exp.n - M.ls[i].got.n;
  return n;
}

static size_t total_got(void) {
  size_t n = 0;
  for (size_t i = 0; i < M.nls; i++)
    n += M.ls[i].got.n;
  return n;
}

static void op_deliver(size_t budget) {
  size_t before = total_got(), pending = m_pending();
  size_t removals = handler_removals;
  KT_EQ_INT(kl_proc_pending(S.p), pending);
  bool more = kl_proc_run(S.p, budget);
  size_t delivered = total_got() - before;
  /* Exactly min(budget, pending), unless a handler removed a listener
   * (its buffer went with it). */
  if (removals == handler_removals)
    KT_EQ_INT(delivered, budget < pending ? budget : pending);
  KT_EQ_INT(more, m_pending() > 0);
  KT_EQ_INT(kl_proc_pending(S.p), m_pending());
}

static void run_seed(uint64_t seed, int steps) {
  size_t heap0 = heap_used();
  memset(&M, 0, sizeof M);
  memset(&S, 0, sizeof S);
  memset(server, 0, sizeof server);
  handler_removals = 0;
  rng = seed;
  rvc = 0;
  kt_now = 1000;
  static const double construction[] = {0, 10, 30};
  M.check = M.dflt = construction[rnd(3)];
  S.ts = kl_timers_new(&kt_clock);
  S.s = kl_store_new();
  kl_store_indexer_t ix[4] = {
      {"namespace", KL_STORE_INDEX_NAMESPACE, NULL, NULL, NULL, NULL},
      {"app", KL_STORE_INDEX_LABEL, "app", NULL, NULL, NULL},
      {"owner", KL_STORE_INDEX_CONTROLLER, NULL, NULL, NULL, NULL},
      {"labels", KL_STORE_INDEX_CUSTOM, NULL, labels_fn, NULL, NULL}};
  KT_EQ_INT(kl_store_add_indexers(S.s, ix, 4, NULL, 0), 0);
  kl_fifo_opts_t fo = {
      kl_fifo_known_store(S.s), false, transform, NULL, fifo_synced, NULL};
  S.f = kl_fifo_new(&fo);
  kl_proc_opts_t po = {S.s, S.ts, NULL, M.dflt, do_resync, NULL, NULL, NULL};
  S.p = kl_proc_new(&po);
  int start_at = (int)rnd(60);
  size_t ops[16] = {0};

  for (int step = 0; step < steps && !kt_current_failed; step++) {
    if (step == start_at) {
      KT_EQ_INT(kl_proc_start(S.p), 0);
      M.started = true;
      M.next_check = kt_now + M.check;
    }
    uint32_t r = rnd(100);
    int k = (int)rnd(NK);
    kl_obj_t *o;
    if (r < 14) { /* add */
      ops[0]++;
      o = server[k] = version(k);
      KT_EQ_INT(kl_fifo_add(S.f, o), 0);
      M.populated = true;
      m_check_synced();
      M.transforms++;
      m_queue_action(k, KL_DELTA_ADDED, o, false);
    } else if (r < 28) { /* update */
      ops[1]++;
      o = server[k] = version(k);
      KT_EQ_INT(kl_fifo_update(S.f, o), 0);
      M.populated = true;
      m_check_synced();
      M.transforms++;
      m_queue_action(k, KL_DELTA_UPDATED, o, false);
    } else if (r < 38) { /* delete: the last version, or a fresh one */
      ops[2]++;
      o = server[k] && rnd(2) ? server[k] : version(k);
      server[k] = NULL;
      KT_EQ_INT(kl_fifo_delete(S.f, o), 0);
      M.populated = true;
      m_check_synced();
      if (queued(k) || M.st[k]) {
        M.transforms++;
        m_queue_action(k, KL_DELTA_DELETED, o, false);
      }
    } else if (r < 43) { /* relist */
      ops[3]++;
      kl_obj_t *list[NK + 2];
      size_t n = 0;
      for (int j = 0; j < NK; j++) {
        uint32_t c = rnd(10);
        if (c < 2) { /* vanished while not watching */
          server[j] = NULL;
        } else if (c < 4 || (!server[j] && c < 6)) {
          server[j] = version(j); /* changed, or created */
        }
        if (server[j]) list[n++] = server[j];
      }
      if (n && rnd(4) == 0) { /* a key listed twice */
        kl_obj_t *again = list[rnd((uint32_t)n)];
        list[n++] = again;
      }
      KT_EQ_INT(kl_fifo_replace(S.f, list, n), 0);
      adopt_tail(m_replace(list, n), step);
    } else if (r < 46) { /* a direct resync */
      ops[4]++;
      size_t before = M.qn;
      KT_EQ_INT(kl_fifo_resync(S.f), 0);
      m_resync();
      adopt_tail(before, step);
    } else if (r < 56) { /* time passes; the check timer may fire */
      ops[5]++;
      kt_now += 1 + rnd(25);
      size_t before = M.qn;
      kl_timers_run(S.ts);
      if (M.started && M.check > 0 && kt_now >= M.next_check) {
        M.next_check = kt_now + M.check;
        if (m_should_resync()) m_resync();
      }
      adopt_tail(before, step);
    } else if (r < 72) { /* pops */
      ops[6]++;
      if (M.started) op_pop(1 + (int)rnd(4), step);
    } else if (r < 86) { /* bounded delivery */
      ops[7]++;
      if (M.started) op_deliver(1 + rnd(6));
    } else if (r < 91) { /* drain everything */
      ops[8]++;
      if (M.started) {
        op_pop(NK, step);
        op_deliver(SIZE_MAX);
        check_listeners(step, true);
      }
    } else if (r < 95) { /* a new listener, while there are few */
      size_t active = 0;
      for (size_t i = 0; i < M.nls; i++)
        active += M.ls[i].active;
      if (M.nls < MAXL && active < 5 && rnd(3) == 0) {
        ops[9]++;
        op_add_listener();
      }
    } else if (r < 96) { /* removal */
      ml *l = M.nls ? &M.ls[rnd((uint32_t)M.nls)] : NULL;
      ops[10]++;
      if (l) {
        KT_EQ_INT(kl_proc_remove_listener(S.p, l->id),
                  l->active ? 0 : KL_ENOENT);
        if (l->active) remove_model_listener(l);
      }
    } else { /* nothing */
      ops[11]++;
    }
    check_store(step);
    check_fifo(step);
    check_listeners(step, false);
  }
  /* The end: start if never started, drain, compare everything. */
  if (!M.started) {
    kl_proc_start(S.p);
    M.started = true;
  }
  op_pop(1000000, steps);
  op_deliver(SIZE_MAX);
  check_store(steps);
  check_fifo(steps);
  check_listeners(steps, true);
  size_t notes = 0;
  for (size_t i = 0; i < M.nls; i++)
    notes += M.ls[i].got.n;
  printf("# seed %llu: %d steps, %u versions, %zu listeners, %zu "
         "notifications checked; ops add %zu upd %zu del %zu relist %zu "
         "resync %zu tick %zu pop %zu run %zu drain %zu listen %zu remove "
         "%zu\n",
         (unsigned long long)seed, steps, rvc, M.nls, notes, ops[0], ops[1],
         ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9],
         ops[10]);

  kl_proc_free(S.p);
  for (size_t i = 0; i < M.nls; i++) {
    KT_EQ_INT(M.ls[i].freed, 1);
    sl_free(&M.ls[i].join);
    sl_free(&M.ls[i].exp);
    sl_free(&M.ls[i].got);
    free(M.ls[i].joined);
  }
  kl_fifo_free(S.f);
  kl_store_free(S.s);
  kl_timers_free(S.ts);
  for (int k = 0; k < NK; k++)
    free(M.d[k]);
  for (size_t i = 0; i < npool; i++)
    kl_obj_unref(pool[i]);
  free(pool);
  pool = NULL;
  npool = cpool = 0;
  KT_EQ_INT(heap_used(), heap0);
}

static void test_seed_1(void) { run_seed(1, 5000); }
static void test_seed_2(void) { run_seed(2, 5000); }
static void test_seed_3(void) { run_seed(3, 5000); }
static void test_seed_42(void) { run_seed(42, 8000); }
static void test_seed_1234567(void) { run_seed(1234567, 8000); }
static void test_seed_deadbeef(void) { run_seed(0xdeadbeef, 8000); }

int main(int argc, char **argv) {
  (void)argc;
  without_tcache(argv);
  warm_up();
  KT_RUN(test_seed_1);
  KT_RUN(test_seed_2);
  KT_RUN(test_seed_3);
  KT_RUN(test_seed_42);
  KT_RUN(test_seed_1234567);
  KT_RUN(test_seed_deadbeef);
  return KT_DONE();
}
