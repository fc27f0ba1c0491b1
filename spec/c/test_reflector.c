/* test_reflector.c — the reflector against a scripted fake apiserver, on
 * CLIENTGO.md's conformance cases T-14..T-24 (classic profile).
 *
 * One kl_loop_t on the real clock carries both the project's httpd (the fake
 * apiserver on 127.0.0.1, port 0) and the libcurl client. The reflector and
 * the informer read a fake clock (kt_now) through their own timer heap, so
 * a backoff wait or a liveness timeout passes only when a test moves kt_now
 * and runs that heap: delays are measured exactly, with a fixed random
 * source. The server records every request's query and answers each from
 * the test's script (a reply, a held watch stream the test writes to, or a
 * held request); requests past the script get a held stream for a watch and
 * 500 for a list; the convergence test swaps the script for a small model
 * apiserver (history, compaction, paging) and injects faults at random with
 * fixed seeds. Nothing sleeps: UNTIL runs the loop until a condition
 * holds. Every test ends with the reflector stopped and freed, the client
 * idle and (under ASan) no leaks. */
#include <ev.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "http.h"
#include "httpd.h"
#include "informer.h"
#include "log.h"
#include "loop.h"
#include "reflector.h"
#include "test.h"
#include "kt_loop.h"
#include "timer.h"

#define PATH "/api/v1/namespaces/ns/configmaps"

/* ---- JSON the fake apiserver sends ---- */

#define CM(name, rv)                                                           \
  "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"ns\","                 \
  "\"resourceVersion\":\"" rv "\"},\"data\":{\"k\":\"" rv "\"}}"
#define LIST(rv, more, items)                                                  \
  "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{"           \
  "\"resourceVersion\":\"" rv "\"" more "},\"items\":[" items "]}"
#define CONT(t) ",\"continue\":\"" t "\""
#define EVT(type, name, rv)                                                    \
  "{\"type\":\"" type "\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":"  \
  "\"v1\",\"metadata\":{\"name\":\"" name "\",\"namespace\":\"ns\","           \
  "\"resourceVersion\":\"" rv "\"},\"data\":{\"k\":\"" rv "\"}}}\n"
#define BOOKMARK(rv)                                                           \
  "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":"  \
  "\"v1\",\"metadata\":{\"resourceVersion\":\"" rv "\"}}}\n"
#define BOOKMARK_END(rv)                                                       \
  "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":"  \
  "\"v1\",\"metadata\":{\"resourceVersion\":\"" rv "\",\"annotations\":{"      \
  "\"k8s.io/initial-events-end\":\"true\"}}}}\n"
#define STATUS(code, reason, msg, more)                                        \
  "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"     \
  "\"Failure\",\"message\":\"" msg "\",\"reason\":\"" reason                   \
  "\",\"code\":" #code more "}"
#define ERROR_EV(code, reason, msg)                                            \
  "{\"type\":\"ERROR\",\"object\":" STATUS(code, reason, msg, "") "}\n"
#define GONE STATUS(410, "Expired", "too old resource version: 1 (2)", "")

/* ---- the loop and waiting ---- */

static kl_loop_t *loop;
static kl_httpd_t *srv;
static kl_http_t *http;
static int port;
static kl_timers_t *fts; /* the fake-clock heap of the reflector */

/* Runs the loop for a while without expecting anything. */
static void settle_for(double secs) {
  double t0 = wall();
  while (wall() - t0 < secs)
    run_once();
}

static void settle(void) { settle_for(0.03); }

/* ---- what an operator reads: the log lines written meanwhile ---- */

static FILE *logf_;
static int saved_stderr = -1;
static char logbuf[64 * 1024];

static void log_begin(void) {
  fflush(stderr);
  logf_ = tmpfile();
  saved_stderr = dup(2);
  dup2(fileno(logf_), 2);
}

/* The lines since log_begin (at most 64 KiB), stderr restored. */
static const char *log_end(void) {
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  saved_stderr = -1;
  rewind(logf_);
  size_t n = fread(logbuf, 1, sizeof logbuf - 1, logf_);
  logbuf[n] = '\0';
  fclose(logf_);
  logf_ = NULL;
  return logbuf;
}

/* Occurrences of needle in hay. */
static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* ---- the fake apiserver ---- */

enum { REPLY, STREAM, HOLD };
typedef struct step {
  int kind;
  int status;
  const char *body;
  const char *retry_after;
} step_t;

#define MAXREQ 256
#define MAXSTEP 64
static char reqlog[MAXREQ][512];
static int nreq;
static step_t script[MAXSTEP];
static int nscript, spos;
static kl_httpd_req_t *wreq; /* the held stream or request */
static int closes;           /* held requests that went away */
static char last_auth[128];
static char acceptlog[MAXREQ][128]; /* each request's Accept */

static void add_step(int kind, int status, const char *body) {
  script[nscript++] = (step_t){kind, status, body, NULL};
}
#define REPLY_(status, body) add_step(REPLY, status, body)
#define STREAM_(body) add_step(STREAM, 200, body)

static void on_close(kl_httpd_req_t *r, int reason, void *ud) {
  (void)reason;
  (void)ud;
  if (r == wreq) wreq = NULL;
  closes++;
}

static bool model_on;
static void model_serve(kl_httpd_req_t *r);

static void handler(kl_httpd_req_t *r, void *ud) {
  size_t n;
  (void)ud;
  const char *path = kl_httpd_req_path(r, &n);
  const char *q = kl_httpd_req_query(r, &n);
  const char *auth = kl_httpd_req_header(r, "Authorization");
  snprintf(last_auth, sizeof last_auth, "%s", auth ? auth : "");
  if (strcmp(path, PATH) != 0) {
    kl_httpd_reply(r, 404, "", 0);
    return;
  }
  if (nreq < MAXREQ) {
    const char *accept = kl_httpd_req_header(r, "Accept");
    snprintf(reqlog[nreq], sizeof reqlog[nreq], "%s", q);
    snprintf(acceptlog[nreq], sizeof acceptlog[nreq], "%s",
             accept ? accept : "");
  }
  nreq++;
  if (model_on) {
    model_serve(r);
    return;
  }
  bool watch = strstr(q, "watch=true") != NULL;
  step_t s = spos < nscript ? script[spos++]
             : watch        ? (step_t){STREAM, 200, NULL, NULL}
                            : (step_t){REPLY, 500, "{}", NULL};
  if (s.retry_after) kl_httpd_set_header(r, "Retry-After", s.retry_after);
  kl_httpd_set_header(r, "Content-Type", "application/json");
  if (s.kind == REPLY) {
    kl_httpd_reply(r, s.status, s.body, strlen(s.body));
    return;
  }
  if (wreq) kl_httpd_stream_abort(wreq, 0);
  kl_httpd_req_set_callbacks(r, on_close, NULL, NULL);
  wreq = r;
  if (s.kind == STREAM) {
    kl_httpd_stream_begin(r, 200);
    if (s.body) kl_httpd_stream_write(r, s.body, strlen(s.body));
  }
}

static void wsend(const char *s) {
  if (!wreq) {
    KT_FAIL_("%s", "no watch stream to write to");
    return;
  }
  kl_httpd_stream_write(wreq, s, strlen(s));
}

static void wend(void) {
  if (!wreq) {
    KT_FAIL_("%s", "no watch stream to end");
    return;
  }
  kl_httpd_req_t *r = wreq;
  wreq = NULL;
  kl_httpd_stream_end(r);
}

static void server_start(int at_port) {
  char err[256];
  kl_httpd_opts_t o = {0};
  o.host = "127.0.0.1";
  o.port = at_port;
  o.handler = handler;
  srv = kl_httpd_new(loop, &o, err, sizeof err);
  if (!srv) {
    fprintf(stderr, "kl_httpd_new: %s\n", err);
    exit(1);
  }
  port = kl_httpd_port(srv);
}

static void server_stop(void) {
  wreq = NULL;
  kl_httpd_free(srv);
  srv = NULL;
}

/* ---- the informer, its notifications and the reflector ---- */

static kl_informer_t *inf;
static kl_reflector_t *refl;
static char notes[64][96];
static int nnotes, nerrors;
static char last_error[512];
static double rval = 0.5;

static double fixed_rand(void *ud) {
  (void)ud;
  return rval;
}

static void on_note(kl_proc_t *p, uint64_t id, const kl_proc_note_t *n,
                    void *ud) {
  (void)p;
  (void)id;
  (void)ud;
  const char *t = n->type == KL_PROC_ADD      ? "ADD"
                  : n->type == KL_PROC_UPDATE ? "UPDATE"
                                              : "DELETE";
  kl_json_span_t rv =
      n->obj ? kl_obj_resource_version(n->obj) : (kl_json_span_t){"", 0};
  if (nnotes < 64)
    snprintf(notes[nnotes], sizeof notes[nnotes], "%s %s %.*s%s", t, n->key,
             (int)rv.n, rv.p, n->tombstone ? " tombstone" : "");
  nnotes++;
}

static void on_error(kl_reflector_t *r, const char *msg, void *ud) {
  (void)r;
  (void)ud;
  nerrors++;
  snprintf(last_error, sizeof last_error, "%s", msg);
}

/* Applies whatever the informer has queued. */
static void pump(void) {
  while (kl_informer_run(inf, 1000)) {
  }
}

/* The cached object's resourceVersion, "-" when the key is not cached. */
static const char *cached(const char *key) {
  static char buf[64];
  kl_obj_t *o = kl_store_get(kl_informer_store(inf), key, strlen(key));
  if (!o) return "-";
  kl_json_span_t rv = kl_obj_resource_version(o);
  snprintf(buf, sizeof buf, "%.*s", (int)rv.n, rv.p);
  return buf;
}

static size_t ncached(void) { return kl_store_len(kl_informer_store(inf)); }

static kl_reflector_stats_t stats(void) {
  kl_reflector_stats_t st;
  kl_reflector_get_stats(refl, &st);
  return st;
}

static int stop_in_work, works;
static void on_work(kl_informer_t *i, void *ud) {
  (void)i;
  (void)ud;
  works++;
  if (stop_in_work) kl_reflector_stop(refl);
}

static void setup_with(const kl_reflector_opts_t *extra) {
  char err[256], url[128];
  memset(reqlog, 0, sizeof reqlog);
  nreq = nscript = spos = closes = nnotes = nerrors = 0;
  last_error[0] = '\0';
  wreq = NULL;
  rval = 0.5;
  kt_now = 1000.0;
  loop = kl_loop_new(NULL);
  EV = kl_loop_ev(loop);
  ev_timer_init(&guard, guard_cb, 0.01, 0.01);
  ev_timer_start(EV, &guard);
  server_start(0);
  http = kl_http_new(loop, "kubelua-test");
  fts = kl_timers_new(&kt_clock);

  kl_informer_opts_t io = {0};
  io.name = "cms";
  io.timers = fts;
  io.api_version = "v1";
  io.kind = "ConfigMap";
  io.on_work = on_work;
  stop_in_work = works = 0;
  inf = kl_informer_new(&io);
  kl_proc_listener_opts_t lo = {0};
  lo.fn = on_note;
  kl_proc_add_listener(kl_informer_proc(inf), &lo);

  kl_reflector_opts_t o = extra ? *extra : (kl_reflector_opts_t){0};
  snprintf(url, sizeof url, "http://127.0.0.1:%d" PATH, port);
  o.url = url;
  o.timers = fts;
  o.rand = fixed_rand;
  if (!o.on_error) o.on_error = on_error;
  o.api_version = "v1";
  o.kind = "ConfigMap";
  refl = kl_reflector_new(loop, http, inf, &o, err, sizeof err);
  if (!refl) {
    fprintf(stderr, "kl_reflector_new: %s\n", err);
    exit(1);
  }
}

static void setup(void) { setup_with(NULL); }

static void teardown(void) {
  kl_reflector_free(refl);
  refl = NULL;
  KT_EQ_INT(kl_http_active(http), 0);
  kl_http_free(http);
  http = NULL;
  if (wreq) kl_httpd_stream_end(wreq);
  wreq = NULL;
  settle();
  server_stop();
  kl_informer_free(inf);
  inf = NULL;
  KT_EQ_INT(kl_timers_count(fts), 0);
  kl_timers_free(fts);
  fts = NULL;
  ev_timer_stop(EV, &guard);
  kl_loop_free(loop);
  loop = NULL;
}

/* The reflector waits on its backoff timer, alone on the fake heap: moves
 * the clock to it, fires it and returns the delay. */
static double fire_backoff(void) {
  if (kl_timers_count(fts) != 1) {
    KT_FAIL_("%zu timers armed, expected one backoff wait",
             kl_timers_count(fts));
    return -1;
  }
  double d = kl_timers_next(fts) - kt_now;
  kt_now = kl_timers_next(fts);
  kl_timers_run(fts);
  return d;
}

/* Moves the fake clock by dt and fires what is due. */
static void advance(double dt) {
  kt_now += dt;
  kl_timers_run(fts);
}

/* x in [lo, hi), lo give or take the rounding of the fake clock. */
#define KT_IN(x, lo, hi)                                                       \
  do {                                                                         \
    double kt_x = (x);                                                         \
    if (!(kt_x >= (lo)-1e-9 && kt_x < (hi)))                                   \
      KT_FAIL_("%s = %.6g not in [%g, %g)", #x, kt_x, (double)(lo),            \
               (double)(hi));                                                  \
  } while (0)

/* Lists at "100" with a and b, then watches from 100 (T-14's start). */
static void start_listed(void) {
  REPLY_(200, LIST("100", "", CM("a", "90") "," CM("b", "95")));
  STREAM_(NULL);
  KT_EQ_INT(kl_reflector_start(refl), 0);
  UNTIL(nreq == 2 && kl_reflector_watching(refl));
  pump();
}

/* ---- T-14 .. T-24 ---- */

/* T-14: the first list is limit=500&resourceVersion=0; Replace(items, 100);
 * then a watch from 100 with bookmarks and timeoutSeconds in [300, 600). */
static void test_first_list_then_watch(void) {
  setup();
  start_listed();
  KT_EQ_STR(reqlog[0], "limit=500&resourceVersion=0");
  KT_EQ_STR(reqlog[1], "allowWatchBookmarks=true&resourceVersion=100&"
                       "timeoutSeconds=450&watch=true");
  KT_EQ_INT(ncached(), 2);
  KT_EQ_STR(cached("ns/a"), "90");
  KT_EQ_STR(cached("ns/b"), "95");
  KT_EQ_STR(kl_reflector_last_rv(refl), "100");
  KT_EQ_STR(kl_informer_last_rv(inf), "100");
  KT_TRUE(kl_informer_has_synced(inf));
  KT_TRUE(kl_reflector_listed(refl));
  KT_EQ_INT(nnotes, 2);
  KT_EQ_STR(notes[0], "ADD ns/a 90");
  KT_EQ_STR(notes[1], "ADD ns/b 95");
  KT_EQ_STR(last_auth, "");
  KT_EQ_INT(stats().lists, 1);
  KT_EQ_INT(stats().watches, 1);
  KT_EQ_INT(stats().backoffs, 0);

  /* The ends of the timeoutSeconds window. */
  rval = 0.0;
  advance(2);
  wend();
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=100&"
                       "timeoutSeconds=300&watch=true");
  rval = 0.99999999;
  advance(2);
  wend();
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[3], "allowWatchBookmarks=true&resourceVersion=100&"
                       "timeoutSeconds=599&watch=true");
  KT_EQ_INT(stats().lists, 1);
  teardown();
}

/* Selectors and headers go on every request, escaped as Go does. */
static void test_selectors_and_headers(void) {
  static const char *const hdrs[] = {"Authorization: Bearer tok", NULL};
  kl_reflector_opts_t o = {0};
  o.label_selector = "app in (a,b),tier!=db";
  o.field_selector = "metadata.name=x y";
  o.headers = hdrs;
  setup_with(&o);
  REPLY_(200, LIST("7", CONT("c/1+"), CM("a", "5")));
  REPLY_(200, LIST("7", "", ""));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[0], "fieldSelector=metadata.name%3Dx+y&labelSelector=app+"
                       "in+%28a%2Cb%29%2Ctier%21%3Ddb&limit=500&"
                       "resourceVersion=0");
  KT_EQ_STR(reqlog[1], "continue=c%2F1%2B&fieldSelector=metadata.name%3Dx+y&"
                       "labelSelector=app+in+%28a%2Cb%29%2Ctier%21%3Ddb&"
                       "limit=500");
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&fieldSelector=metadata.name%"
                       "3Dx+y&labelSelector=app+in+%28a%2Cb%29%2Ctier%21%"
                       "3Ddb&resourceVersion=7&timeoutSeconds=450&watch=true");
  KT_EQ_STR(last_auth, "Bearer tok");
  teardown();
}

/* T-15: page 2 is continue=t1&limit=500 without resourceVersion; one
 * Replace with every item at the first page's RV; later relists keep
 * limit=500. */
static void test_pagination(void) {
  setup();
  REPLY_(200, LIST("100", CONT("t1"), CM("a", "90")));
  REPLY_(200, LIST("100", "", CM("b", "95") "," CM("c", "99")));
  STREAM_(ERROR_EV(410, "Expired", "too old resource version: 100 (150)"));
  REPLY_(200, LIST("160", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 3);
  KT_EQ_STR(reqlog[0], "limit=500&resourceVersion=0");
  KT_EQ_STR(reqlog[1], "continue=t1&limit=500");
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=100&"
                       "timeoutSeconds=450&watch=true");
  /* One Replace: each key has exactly one queued delta. */
  const kl_delta_t *d;
  KT_EQ_INT(kl_fifo_len(kl_informer_fifo(inf)), 3);
  KT_EQ_INT(kl_fifo_get(kl_informer_fifo(inf), "ns/a", 4, &d), 1);
  KT_EQ_INT(stats().lists, 1);
  pump();
  KT_EQ_INT(ncached(), 3);
  UNTIL(stats().backoffs == 1);
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(nreq == 5 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[3], "limit=500&resourceVersion=100");
  KT_EQ_STR(reqlog[4], "allowWatchBookmarks=true&resourceVersion=160&"
                       "timeoutSeconds=450&watch=true");
  pump();
  KT_EQ_INT(ncached(), 1);
  KT_EQ_INT(nnotes, 6);
  KT_EQ_STR(notes[3], "UPDATE ns/a 90"); /* a sync: the same version */
  KT_EQ_STR(notes[4], "DELETE ns/b 95 tombstone");
  KT_EQ_STR(notes[5], "DELETE ns/c 99 tombstone");
  KT_EQ_INT(stats().relists, 1);
  teardown();
}

/* T-16: a 410 Expired on page 2 gives one full list with no limit, no
 * continue and the original resourceVersion=0, whose result is replaced. */
static void test_expired_continue_full_list(void) {
  setup();
  REPLY_(200, LIST("100", CONT("t1"), CM("a", "90")));
  REPLY_(410, STATUS(410, "Expired",
                     "The provided continue parameter is too "
                     "old",
                     ""));
  REPLY_(200, LIST("120", "", CM("a", "90") "," CM("b", "118")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[0], "limit=500&resourceVersion=0");
  KT_EQ_STR(reqlog[1], "continue=t1&limit=500");
  KT_EQ_STR(reqlog[2], "resourceVersion=0");
  KT_EQ_STR(reqlog[3], "allowWatchBookmarks=true&resourceVersion=120&"
                       "timeoutSeconds=450&watch=true");
  pump();
  KT_EQ_INT(ncached(), 2);
  KT_EQ_STR(cached("ns/b"), "118");
  KT_EQ_INT(stats().lists, 1);
  KT_EQ_INT(stats().backoffs, 0);
  KT_EQ_INT(nerrors, 0);
  teardown();
}

/* T-17: a watch that ends normally after more than 1 s is resumed from the
 * last event's resourceVersion, at once, without a list. */
static void test_normal_close_resumes(void) {
  setup();
  start_listed();
  wsend(EVT("MODIFIED", "a", "105"));
  UNTIL(stats().events == 1);
  advance(2);
  wend();
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=105&"
                       "timeoutSeconds=450&watch=true");
  KT_EQ_DBL(kt_now, 1002.0, 0);
  KT_EQ_INT(stats().backoffs, 0);
  KT_EQ_INT(stats().list_requests, 1);
  pump();
  KT_EQ_STR(cached("ns/a"), "105");
  /* A connection dropped in the middle of an event resumes the same way;
   * the cut event comes again on the new watch. */
  wsend(EVT("MODIFIED", "b", "106"));
  UNTIL(stats().events == 2);
  advance(2);
  kl_httpd_stream_abort(wreq, 20);
  wsend(EVT("MODIFIED", "a", "107"));
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[3], "allowWatchBookmarks=true&resourceVersion=106&"
                       "timeoutSeconds=450&watch=true");
  wsend(EVT("MODIFIED", "a", "107"));
  UNTIL(stats().events == 3);
  pump();
  KT_EQ_STR(cached("ns/a"), "107");
  KT_EQ_STR(cached("ns/b"), "106");
  KT_EQ_INT(stats().list_requests, 1);
  KT_EQ_INT(nerrors, 0);
  teardown();
}

/* T-18: an ERROR 410 in a stream that worked: at once (no backoff, unlike
 * client-go) a list at the last RV with no limit; when that 410s too, at
 * once a list with no resourceVersion; then a watch from what that list
 * returned. */
static void test_error_410_relists_at_last_rv(void) {
  setup();
  start_listed();
  wsend(EVT("MODIFIED", "a", "105"));
  UNTIL(stats().events == 1);
  advance(2);
  REPLY_(410, GONE);
  REPLY_(200, LIST("200", "", CM("a", "150") "," CM("c", "190")));
  STREAM_(NULL);
  wsend(ERROR_EV(410, "Expired", "too old resource version: 105 (150)"));
  UNTIL(nreq == 5 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_DBL(kt_now, 1002.0, 0);
  KT_EQ_INT(stats().backoffs, 0);
  KT_EQ_STR(reqlog[2], "resourceVersion=105");
  KT_EQ_STR(reqlog[3], "");
  KT_EQ_STR(reqlog[4], "allowWatchBookmarks=true&resourceVersion=200&"
                       "timeoutSeconds=450&watch=true");
  KT_EQ_INT(nerrors, 0); /* a stream error is not a ListAndWatch error */
  pump();
  KT_EQ_INT(ncached(), 2);
  KT_EQ_STR(cached("ns/a"), "150");
  KT_EQ_STR(cached("ns/b"), "-");
  KT_EQ_STR(cached("ns/c"), "190");
  KT_EQ_STR(kl_informer_last_rv(inf), "200");
  teardown();
}

/* T-19: a list at 105 answered 504 with the ResourceVersionTooLarge cause
 * (or, from old servers, only the message) is retried at once at ""; the
 * flag clears once that list succeeds. */
static void test_too_large_rv(void) {
  setup();
  start_listed();
  wsend(EVT("MODIFIED", "a", "105"));
  UNTIL(stats().events == 1);
  advance(2);
  REPLY_(504, STATUS(504, "Timeout", "Too large resource version",
                     ",\"details\":{\"causes\":[{\"reason\":"
                     "\"ResourceVersionTooLarge\",\"message\":\"Too large "
                     "resource version\"}],\"retryAfterSeconds\":1}"));
  REPLY_(200, LIST("300", "", CM("a", "300")));
  STREAM_(NULL);
  wsend(ERROR_EV(410, "Gone", "gone"));
  UNTIL(nreq == 5 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "resourceVersion=105");
  KT_EQ_STR(reqlog[3], "");
  KT_EQ_STR(reqlog[4], "allowWatchBookmarks=true&resourceVersion=300&"
                       "timeoutSeconds=450&watch=true");
  /* Cleared: the next relist is at the last RV again; this time the server
   * says so only in the message. */
  advance(2);
  REPLY_(504, STATUS(504, "Timeout",
                     "Too large resource version: 300, current: 250", ""));
  REPLY_(200, LIST("310", "", CM("a", "300")));
  STREAM_(NULL);
  wsend(ERROR_EV(410, "Expired", "too old"));
  UNTIL(nreq == 8 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_INT(stats().backoffs, 0);
  KT_EQ_STR(reqlog[5], "resourceVersion=300");
  KT_EQ_STR(reqlog[6], "");
  KT_EQ_STR(reqlog[7], "allowWatchBookmarks=true&resourceVersion=310&"
                       "timeoutSeconds=450&watch=true");
  KT_EQ_INT(nerrors, 0);
  teardown();
}

/* T-20: a 429 and then a refused connection on watch set-up: two backoff
 * waits, then a watch from the same RV; no list. */
static void test_watch_setup_429_and_refused(void) {
  setup();
  REPLY_(200, LIST("100", "", CM("a", "90")));
  REPLY_(429, STATUS(429, "TooManyRequests", "slow down", ""));
  kl_reflector_start(refl);
  UNTIL(nreq == 2 && stats().backoffs == 1);
  int p = port;
  server_stop();
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(stats().backoffs == 2);
  KT_EQ_INT(stats().watches, 2);
  server_start(p);
  STREAM_(NULL);
  KT_IN(fire_backoff(), 1.6, 3.2);
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[0], "limit=500&resourceVersion=0");
  KT_EQ_STR(reqlog[1], "allowWatchBookmarks=true&resourceVersion=100&"
                       "timeoutSeconds=450&watch=true");
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=100&"
                       "timeoutSeconds=450&watch=true");
  KT_EQ_INT(stats().watches, 3);
  KT_EQ_INT(stats().list_requests, 1);
  KT_EQ_INT(nerrors, 0);
  teardown();
}

/* An ERROR 429 inside a stream backs off and watches again, no list; a
 * Retry-After longer than the backoff is honoured. */
static void test_stream_429_and_retry_after(void) {
  setup();
  start_listed();
  wsend(EVT("MODIFIED", "a", "105"));
  UNTIL(stats().events == 1);
  advance(2);
  wsend(ERROR_EV(429, "TooManyRequests", "storage is busy"));
  UNTIL(stats().backoffs == 1);
  script[nscript++] = (step_t){REPLY, 429, STATUS(429, "", "x", ""), "7"};
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(nreq == 3 && stats().backoffs == 2);
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=105&"
                       "timeoutSeconds=450&watch=true");
  KT_EQ_DBL(fire_backoff(), 7, 1e-9);
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[3], reqlog[2]);
  KT_EQ_INT(stats().list_requests, 1);
  teardown();
}

/* T-21: a stream that closes after 100 ms with no event is a very short
 * watch: logged, not passed to the error handler, backoff, relist. */
static void test_very_short_watch(void) {
  setup();
  start_listed();
  advance(0.1);
  REPLY_(200, LIST("100", "", CM("a", "90") "," CM("b", "95")));
  wend();
  UNTIL(stats().backoffs == 1);
  KT_EQ_INT(nerrors, 0);
  KT_EQ_INT(stats().errors, 1);
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "resourceVersion=100");
  KT_EQ_INT(stats().lists, 2);
  teardown();
}

/* T-22: a bookmark moves the RV but never touches the cache. */
static void test_bookmark_moves_rv_only(void) {
  setup();
  start_listed();
  int before = nnotes;
  wsend(BOOKMARK("150"));
  UNTIL(stats().events == 1);
  KT_EQ_INT(kl_fifo_len(kl_informer_fifo(inf)), 0);
  pump();
  KT_EQ_INT(nnotes, before);
  KT_EQ_STR(kl_reflector_last_rv(refl), "150");
  KT_EQ_STR(kl_informer_last_rv(inf), "150");
  KT_EQ_STR(cached("ns/a"), "90");
  advance(2);
  wend();
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=150&"
                       "timeoutSeconds=450&watch=true");
  teardown();
}

/* T-23: every round fails at once: the delays fall in [0.8,1.6),
 * [1.6,3.2), … [25.6,51.2), then [30,60) for good; classic reset: only a gap
 * of more than 2 min between two backoff requests restarts at 0.8. */
static void test_backoff_sequence_and_reset(void) {
  static const double lo[] = {0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30, 30, 30};
  static const double rs[] = {0, 0.999999, 0.5};
  setup();
  rval = rs[0];
  kl_reflector_start(refl);
  UNTIL(nreq == 1 && stats().backoffs == 1);
  for (int i = 0; i < 10; i++) {
    double hi = i < 6 ? 2 * lo[i] : 60;
    double want = lo[i] + rs[i % 3] * (i < 6 ? lo[i] : 30);
    double d = fire_backoff();
    KT_IN(d, lo[i], hi);
    KT_EQ_DBL(d, want, 1e-6);
    rval = rs[(i + 1) % 3];
    UNTIL(nreq == i + 2 && stats().backoffs == (uint64_t)i + 2);
  }
  KT_EQ_INT(nerrors, 11);
  KT_TRUE(strstr(last_error, "list: 500") != NULL);
  /* Wait 3 minutes before the next attempt: its backoff starts over. */
  kt_now += 180;
  rval = 0.5;
  kl_timers_run(fts);
  UNTIL(nreq == 12 && stats().backoffs == 12);
  KT_EQ_DBL(kl_timers_next(fts) - kt_now, 1.2, 1e-9);
  /* Exactly 2 minutes is not more than 2 minutes: no reset. */
  kt_now += 120;
  kl_timers_run(fts);
  UNTIL(nreq == 13 && stats().backoffs == 13);
  KT_EQ_DBL(kl_timers_next(fts) - kt_now, 2.4, 1e-9);
  KT_EQ_INT(stats().lists, 0);
  teardown();
}

/* T-24: an event of another kind is skipped (and the RV stays); a Table
 * list fails with "unsupported list gvk". */
static void test_wrong_kind_and_table(void) {
  setup();
  REPLY_(200, "{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\","
              "\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[],"
              "\"rows\":[]}");
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(stats().backoffs == 1);
  KT_EQ_INT(nerrors, 1);
  KT_TRUE(strstr(last_error, "unsupported list gvk") != NULL);
  KT_EQ_INT(kl_fifo_len(kl_informer_fifo(inf)), 0);
  fire_backoff();
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  wsend("{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":"
        "\"v1\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\","
        "\"resourceVersion\":\"120\"}}}\n" EVT("ADDED", "b", "121"));
  UNTIL(stats().events == 2);
  pump();
  KT_EQ_STR(cached("ns/p"), "-");
  KT_EQ_STR(cached("ns/b"), "121");
  KT_EQ_STR(kl_reflector_last_rv(refl), "121");
  teardown();
}

/* ---- beyond the T-cases ---- */

/* 6.9: a watch from "" (a list that gave no resourceVersion) gets
 * synthetic ADDED events in key order: they do not move the RV; the first
 * other event does. */
static void test_synthetic_adds_do_not_move_rv(void) {
  setup();
  REPLY_(200, LIST("", "", ""));
  STREAM_(EVT("ADDED", "b", "50") EVT("ADDED", "a", "40"));
  kl_reflector_start(refl);
  UNTIL(nreq == 2 && stats().events == 2);
  KT_EQ_STR(reqlog[1],
            "allowWatchBookmarks=true&timeoutSeconds=450&watch=true");
  KT_EQ_STR(kl_reflector_last_rv(refl), "");
  wsend(EVT("MODIFIED", "a", "60") EVT("ADDED", "c", "55"));
  UNTIL(stats().events == 4);
  KT_EQ_STR(kl_reflector_last_rv(refl), "55");
  pump();
  KT_EQ_INT(ncached(), 3);
  teardown();
}

/* A list answered 429 with Retry-After waits at least that long. */
static void test_list_429_retry_after(void) {
  setup();
  script[nscript++] =
      (step_t){REPLY, 429, STATUS(429, "TooManyRequests", "later", ""), "9"};
  kl_reflector_start(refl);
  UNTIL(stats().backoffs == 1);
  KT_EQ_DBL(fire_backoff(), 9, 1e-9);
  UNTIL(nreq == 2 && nerrors == 2);
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  teardown();
}

/* Events reach the informer in the order sent, whatever the chunking. */
static void test_events_in_order(void) {
  static const char stream[] =
      EVT("ADDED", "c", "101") EVT("MODIFIED", "a", "102")
          EVT("DELETED", "b", "103") EVT("MODIFIED", "c", "104") BOOKMARK("105")
              EVT("MODIFIED", "a", "106");
  setup();
  start_listed();
  int before = nnotes;
  /* Cut into 13-byte pieces, each its own chunk. */
  for (size_t i = 0; i < sizeof stream - 1; i += 13) {
    char piece[14];
    size_t n = sizeof stream - 1 - i < 13 ? sizeof stream - 1 - i : 13;
    memcpy(piece, stream + i, n);
    piece[n] = '\0';
    wsend(piece);
    settle_for(0.003);
    pump(); /* apply as they come: one notification per event */
  }
  UNTIL(stats().events == 6);
  pump();
  KT_EQ_INT(nnotes - before, 5);
  KT_EQ_STR(notes[before + 0], "ADD ns/c 101");
  KT_EQ_STR(notes[before + 1], "UPDATE ns/a 102");
  KT_EQ_STR(notes[before + 2], "DELETE ns/b 103");
  KT_EQ_STR(notes[before + 3], "UPDATE ns/c 104");
  KT_EQ_STR(notes[before + 4], "UPDATE ns/a 106");
  KT_EQ_STR(kl_reflector_last_rv(refl), "106");
  KT_EQ_INT(ncached(), 2);
  teardown();
}

/* An event with no newline after it: EVT without its last byte. */
static void evt_bare(char *out, size_t cap, const char *evt) {
  snprintf(out, cap, "%s", evt);
  out[strlen(out) - 1] = '\0';
}

/* A server that does not end its events with a newline: an event that
 * ends in a piece reaches the informer with that piece, though the piece
 * goes on into the next event. */
static void test_events_without_newlines(void) {
  char a[256], b[256], piece[512];
  evt_bare(a, sizeof a, EVT("MODIFIED", "a", "102"));
  evt_bare(b, sizeof b, EVT("MODIFIED", "b", "103"));
  setup();
  start_listed();
  int before = nnotes;
  snprintf(piece, sizeof piece, "%s%.20s", a, b);
  wsend(piece);
  UNTIL(stats().events == 1);
  pump();
  KT_EQ_INT(nnotes - before, 1);
  KT_EQ_STR(notes[before], "UPDATE ns/a 102");
  wsend(b + 20);
  UNTIL(stats().events == 2);
  pump();
  KT_EQ_STR(notes[before + 1], "UPDATE ns/b 103");
  KT_EQ_STR(kl_reflector_last_rv(refl), "103");
  KT_EQ_INT(nerrors, 0);
  teardown();
}

/* The bytes after a piece's last newline wait for the next piece; when
 * the server ends the watch instead, they are decoded then: an event they
 * hold whole reaches the informer, and the cut one after it is dropped
 * and the watch resumes after the last whole one. */
static void test_event_kept_back_at_the_end(void) {
  char b[256], piece[512];
  const char *a = EVT("MODIFIED", "a", "102");
  evt_bare(b, sizeof b, EVT("MODIFIED", "b", "103"));
  setup();
  start_listed();
  int before = nnotes;
  snprintf(piece, sizeof piece, "%s%.30s", a, b);
  wsend(piece);
  UNTIL(stats().events == 1);
  pump();
  KT_EQ_STR(notes[before], "UPDATE ns/a 102");
  snprintf(piece, sizeof piece, "%s{\"type\":\"MOD", b + 30);
  wsend(piece);
  settle_for(0.01);
  advance(2);
  wend();
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=103&"
                       "timeoutSeconds=450&watch=true");
  pump();
  KT_EQ_INT(nnotes - before, 2);
  KT_EQ_STR(notes[before + 1], "UPDATE ns/b 103");
  KT_EQ_STR(cached("ns/b"), "103");
  KT_EQ_INT(nerrors, 0);
  teardown();
}

/* While 4096 events wait in the informer (the handlers are behind), the
 * watch stream is not read; it is read again once half are gone, and
 * nothing is lost or reordered. */
static void test_backlog_pauses_the_watch(void) {
  enum { N = 5000 };
  size_t cap = (size_t)N * 200, len = 0;
  char *burst = malloc(cap);
  for (int i = 0; i < N; i++)
    len += (size_t)snprintf(
        burst + len, cap - len,
        "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\","
        "\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"o%d\","
        "\"namespace\":\"ns\",\"resourceVersion\":\"%d\"}}}\n",
        i, 200 + i);
  setup();
  start_listed();
  wsend(burst);
  UNTIL(stats().events >= 4096);
  settle();
  uint64_t seen = stats().events;
  KT_TRUE(seen >= 4096 && seen < N);
  KT_TRUE(kl_informer_backlog(inf) >= 4096);
  KT_EQ_INT(stats().watch_pauses, 1);
  advance(0.01); /* still behind: stays paused */
  settle();
  KT_EQ_INT(stats().events, seen);
  pump();
  KT_EQ_INT(kl_informer_backlog(inf), 0);
  advance(0.01);
  UNTIL(stats().events == N);
  KT_EQ_INT(stats().watch_pauses, 1);
  pump();
  KT_EQ_INT(ncached(), N + 2);
  KT_EQ_STR(cached("ns/o0"), "200");
  KT_EQ_STR(cached("ns/o4999"), "5199");
  KT_EQ_STR(kl_reflector_last_rv(refl), "5199");
  KT_EQ_INT(nerrors, 0);
  free(burst);
  teardown();
}

/* A quiet watch is not a dead one: a 1.26 server sends nothing at all, no
 * bookmark, until its timeoutSeconds. The watch stays open however long
 * it is silent, then resumes from the last RV: no backoff, no error, and
 * nothing logged above debug. */
static void test_quiet_watch_left_alone(void) {
  setup();
  log_begin();
  start_listed();
  wsend(EVT("MODIFIED", "a", "105"));
  UNTIL(stats().events == 1);
  for (int i = 0; i < 4; i++) {
    advance(110); /* 440 s of silence in all */
    settle();
  }
  KT_EQ_INT(nreq, 2);
  KT_TRUE(kl_reflector_watching(refl));
  advance(10); /* 450 s: timeoutSeconds */
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=105&"
                       "timeoutSeconds=450&watch=true");
  /* The server ends the next one first, cleanly. */
  advance(300);
  wend();
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[3], reqlog[2]);
  KT_EQ_STR(log_end(), "");
  KT_EQ_INT(stats().watch_restarts, 0);
  KT_EQ_INT(stats().backoffs, 0);
  KT_EQ_INT(stats().errors, 0);
  KT_EQ_INT(stats().list_requests, 1);
  /* At debug, each restart is one line. */
  kl_log_set_level(KL_LOG_DEBUG);
  log_begin();
  advance(60);
  wend();
  UNTIL(nreq == 5 && wreq != NULL && kl_reflector_watching(refl));
  const char *out = log_end();
  kl_log_set_level(KL_LOG_INFO);
  KT_EQ_INT(count(out, "DEBUG reflector cms: the server ended the watch after "
                       "60s: watching again from resourceVersion 105\n"),
            1);
  teardown();
}

/* A streaming list's initial events that stay silent for initial_timeout
 * mean a server that ignores streaming lists: list and watch. Switched
 * off, the initial events may take until timeoutSeconds. */
static void test_initial_timeout_configurable(void) {
  kl_reflector_opts_t o = {0};
  o.watch_list = true;
  o.initial_timeout = 5;
  setup_with(&o);
  STREAM_(NULL);
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 1 && wreq != NULL && kl_reflector_watching(refl));
  advance(4.9);
  settle();
  KT_EQ_INT(nreq, 1);
  advance(0.2);
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  teardown();
  o.initial_timeout = -1;
  setup_with(&o);
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 1 && wreq != NULL && kl_reflector_watching(refl));
  advance(449);
  settle();
  KT_EQ_INT(nreq, 1);
  teardown();
}

/* A streaming list's query. */
#define WL_Q                                                                   \
  "resourceVersionMatch=NotOlderThan&sendInitialEvents=true&"                  \
  "timeoutSeconds=450&watch=true"

/* Compaction is routine: a watch that worked and ended normally, resumed
 * and answered 410 (in the stream or on set-up), relists at once with no
 * backoff step, however often it happens, and says so in one line. A new
 * list's watch that 410s at once is a failure: backoff. */
static void test_routine_410_relists_at_once(void) {
  setup();
  start_listed();
  for (int i = 0; i < 3; i++) { /* quiet rounds the server ends */
    advance(300);
    wend();
    UNTIL(nreq == 3 + i && wreq != NULL && kl_reflector_watching(refl));
  }
  log_begin();
  for (int i = 0; i < 4; i++) {
    int n = nreq;
    double t = kt_now;
    advance(300);
    if (i % 2 == 0)
      STREAM_(ERROR_EV(410, "Expired", "too old resource version: 100 (250)"));
    else
      REPLY_(410,
             STATUS(410, "Expired", "too old resource version: 100 (250)", ""));
    REPLY_(200, LIST("100", "", CM("a", "90") "," CM("b", "95")));
    STREAM_(NULL);
    wend();
    UNTIL(nreq == n + 3 && wreq != NULL && kl_reflector_watching(refl));
    KT_EQ_DBL(kt_now, t + 300, 0);
    KT_EQ_STR(reqlog[n + 1], "resourceVersion=100");
  }
  const char *out = log_end();
  KT_EQ_INT(count(out, "INFO  reflector cms: resourceVersion 100 is gone "
                       "(watch: 410 Expired: too old resource version: 100 "
                       "(250)): relisting\n"),
            4);
  KT_EQ_INT(count(out, "\n"), 4);
  KT_EQ_INT(stats().backoffs, 0);
  KT_EQ_INT(stats().relists, 4);
  KT_EQ_INT(nerrors, 0);
  /* The watch of that last list 410s at once: a backoff before the next. */
  log_begin();
  REPLY_(200, LIST("300", "", CM("a", "90")));
  STREAM_(NULL);
  wsend(ERROR_EV(410, "Expired", "too old resource version: 100 (300)"));
  UNTIL(stats().backoffs == 1);
  out = log_end();
  KT_EQ_INT(count(out, "INFO  reflector cms: resourceVersion 100 is gone "
                       "(watch: 410 Expired: too old resource version: 100 "
                       "(300)): relisting after a backoff\n"),
            1);
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(wreq != NULL && kl_reflector_watching(refl) && stats().relists == 5);
  teardown();
}
/* After failures, the watch that opens again says so once: how many
 * attempts failed, over how long. */
static void test_recovery_is_logged_once(void) {
  setup();
  start_listed();
  advance(2);
  int p = port;
  log_begin();
  server_stop(); /* the watch breaks; resuming it is refused */
  UNTIL(stats().backoffs == 1);
  KT_EQ_DBL(fire_backoff(), 1.2, 1e-9);
  UNTIL(stats().backoffs == 2);
  server_start(p);
  STREAM_(NULL);
  KT_EQ_DBL(fire_backoff(), 2.4, 1e-9);
  UNTIL(wreq != NULL && kl_reflector_watching(refl));
  /* A routine end later says nothing more. */
  advance(300);
  wend();
  UNTIL(wreq != NULL && kl_reflector_watching(refl) && stats().watches == 5);
  const char *out = log_end();
  KT_EQ_INT(count(out, "INFO  reflector cms: watching again after 2 failed "
                       "attempts in 3.6s\n"),
            1);
  KT_EQ_INT(count(out, "INFO "), 1);
  KT_EQ_INT(count(out, "WARN  reflector cms: watch: "), 2);
  KT_EQ_INT(stats().list_requests, 1);
  teardown();
}

/* Reflectors that share what they know of a server ask it once whether it
 * streams lists: one asks while the others wait; a refusal is said once,
 * at info, and each lists and watches, now and after a restart. */
static void test_servers_asked_once(void) {
  char err[256], url[128];
  kl_reflector_servers_t *servers = kl_reflector_servers_new();
  kl_reflector_opts_t o = {0};
  o.watch_list = true;
  o.servers = servers;
  setup_with(&o);
  kl_informer_opts_t io = {0};
  io.name = "cms2";
  io.timers = fts;
  kl_informer_t *inf2 = kl_informer_new(&io);
  snprintf(url, sizeof url, "http://127.0.0.1:%d" PATH, port);
  o.url = url;
  o.timers = fts;
  o.rand = fixed_rand;
  o.on_error = on_error;
  kl_reflector_t *r2 = kl_reflector_new(loop, http, inf2, &o, err, sizeof err);
  log_begin();
  REPLY_(422, STATUS(422, "Invalid",
                     "ListOptions.meta.k8s.io \\\"\\\" is invalid: "
                     "resourceVersionMatch: Forbidden: resourceVersionMatch "
                     "is forbidden for watch",
                     ""));
  REPLY_(200, LIST("100", "", CM("a", "90")));
  kl_reflector_start(refl);
  kl_reflector_start(r2);
  UNTIL(nreq == 3 && kl_reflector_watching(refl));
  KT_TRUE(!kl_reflector_listed(r2)); /* waiting for the answer */
  kl_reflector_stop(refl);
  REPLY_(200, LIST("100", "", CM("a", "90")));
  advance(0.05);
  UNTIL(nreq == 5 && kl_reflector_watching(r2));
  const char *out = log_end();
  KT_EQ_STR(reqlog[0], "allowWatchBookmarks=true&" WL_Q);
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  KT_EQ_STR(reqlog[3], "limit=500&resourceVersion=0");
  KT_EQ_INT(count(out, "INFO  reflector cms: streaming list: watch: 422 "
                       "Invalid: ListOptions.meta.k8s.io \"\" is invalid: "
                       "resourceVersionMatch: Forbidden: resourceVersionMatch "
                       "is forbidden for watch: http://127.0.0.1:"),
            1);
  KT_EQ_INT(count(out, " does not serve streaming lists; listing and "
                       "watching from now on\n"),
            1);
  KT_EQ_INT(count(out, "\n"), 1);
  /* Stopped and started again, it lists at once. */
  kl_reflector_stop(r2);
  REPLY_(200, LIST("100", "", CM("a", "90")));
  kl_reflector_start(r2);
  UNTIL(nreq == 7 && kl_reflector_watching(r2));
  KT_EQ_STR(reqlog[5], "resourceVersion=100");
  kl_reflector_free(r2);
  kl_informer_free(inf2);
  teardown();
  kl_reflector_servers_free(servers);
}

/* A server that ignores the streaming-list parameters answers with a plain
 * watch: a MODIFIED event among the initial events. Said once, the round
 * lists at once, and so does every later one. */
static void test_watch_list_ignored(void) {
  kl_reflector_opts_t o = {0};
  o.watch_list = true;
  setup_with(&o);
  log_begin();
  STREAM_(EVT("ADDED", "a", "90") EVT("MODIFIED", "a", "91"));
  REPLY_(200, LIST("100", "", CM("a", "91")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  KT_EQ_INT(stats().backoffs, 0);
  /* A relist later lists too. */
  advance(2);
  REPLY_(200, LIST("120", "", CM("a", "91")));
  STREAM_(NULL);
  wsend(ERROR_EV(410, "Expired", "too old resource version: 100 (110)"));
  UNTIL(nreq == 5 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[3], "resourceVersion=100");
  const char *out = log_end();
  KT_EQ_INT(count(out, "INFO  reflector cms: streaming list: a MODIFIED event "
                       "among a streaming list's initial events: "
                       "http://127.0.0.1:"),
            1);
  KT_EQ_INT(count(out, "does not serve streaming lists"), 1);
  KT_EQ_INT(count(out, "\n"), 2);
  pump();
  KT_EQ_STR(cached("ns/a"), "91");
  teardown();
}

/* A malformed event is logged and leads to a relist after a backoff; the
 * events before it were applied. */
static void test_decode_error_relists(void) {
  setup();
  start_listed();
  REPLY_(200, LIST("120", "", CM("a", "105") "," CM("b", "95")));
  STREAM_(NULL);
  wsend(EVT("MODIFIED", "a", "105") "{\"type\":\"ADDED\",\"object\":[1]}\n");
  UNTIL(stats().backoffs == 1);
  KT_EQ_INT(stats().events, 1);
  KT_EQ_INT(nerrors, 0);
  pump();
  KT_EQ_STR(cached("ns/a"), "105");
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "resourceVersion=105");
  KT_EQ_STR(reqlog[3], "allowWatchBookmarks=true&resourceVersion=120&"
                       "timeoutSeconds=450&watch=true");
  /* Malformed JSON too. */
  REPLY_(200, LIST("130", "", CM("a", "105")));
  wsend("{\"type\":\"ADDED\",\"object\":{\"metadata\":{]}}\n");
  UNTIL(stats().backoffs == 2);
  fire_backoff();
  UNTIL(nreq == 6 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[4], "resourceVersion=120");
  pump();
  KT_EQ_INT(ncached(), 1);
  teardown();
}

/* A list whose body does not decode, a 500 and a refused connection are
 * ListAndWatch errors: the handler, a backoff, a relist. */
static void test_list_errors(void) {
  setup();
  REPLY_(200, "{\"kind\":\"ConfigMapList\",\"items\":[{\"metadata\":");
  REPLY_(500, STATUS(500, "InternalError", "etcd is down", ""));
  kl_reflector_start(refl);
  UNTIL(stats().backoffs == 1);
  KT_TRUE(strstr(last_error, "list: decoding") != NULL);
  fire_backoff();
  UNTIL(stats().backoffs == 2);
  KT_EQ_STR(last_error, "list: 500 InternalError: etcd is down");
  int p = port;
  server_stop();
  fire_backoff();
  UNTIL(stats().backoffs == 3);
  KT_TRUE(strstr(last_error, "list: ") != NULL);
  KT_EQ_INT(nerrors, 3);
  server_start(p);
  REPLY_(200, LIST("100", "", CM("a", "90")));
  fire_backoff();
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "limit=500&resourceVersion=0");
  pump();
  KT_EQ_INT(ncached(), 1);
  teardown();
}

/* A watch refused with another status (403) ends the round: the handler,
 * a backoff, a relist. */
static void test_watch_setup_other_error(void) {
  setup();
  REPLY_(200, LIST("100", "", CM("a", "90")));
  REPLY_(403, STATUS(403, "Forbidden", "no", ""));
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(stats().backoffs == 1);
  KT_EQ_STR(last_error, "watch: 403 Forbidden: no");
  fire_backoff();
  UNTIL(nreq == 4 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "resourceVersion=100");
  teardown();
}

static int stop_in_error;
static void stop_on_error(kl_reflector_t *r, const char *msg, void *ud) {
  on_error(r, msg, ud);
  if (stop_in_error) kl_reflector_stop(r);
}

/* Stop cancels the request in flight or the wait, and nothing follows:
 * no request, no event into the informer, no callback. Start again
 * relists at the last RV. */
static void test_stop_cancels_everything(void) {
  kl_reflector_opts_t o = {0};
  o.on_error = stop_on_error;
  setup_with(&o);
  /* During a list. */
  add_step(HOLD, 0, NULL);
  kl_reflector_start(refl);
  KT_EQ_INT(kl_reflector_start(refl), KL_EINVAL);
  UNTIL(nreq == 1 && wreq != NULL);
  kl_reflector_stop(refl);
  KT_TRUE(!kl_reflector_running(refl));
  KT_EQ_INT(kl_http_active(http), 0);
  UNTIL(closes == 1);
  KT_EQ_INT(kl_timers_count(fts), 0);
  settle();
  KT_EQ_INT(nreq, 1);

  /* During a watch: events written after the stop go nowhere. */
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  pump();
  kl_httpd_req_t *w = wreq;
  kl_reflector_stop(refl);
  kl_httpd_stream_write(w, EVT("ADDED", "z", "101"),
                        strlen(EVT("ADDED", "z", "101")));
  UNTIL(wreq == NULL);
  settle();
  KT_EQ_INT(kl_fifo_len(kl_informer_fifo(inf)), 0);
  KT_EQ_INT(stats().events, 0);
  KT_EQ_INT(kl_timers_count(fts), 0);

  /* During a backoff wait, and from inside the error handler. */
  REPLY_(500, "{}");
  stop_in_error = 1;
  kl_reflector_start(refl);
  UNTIL(nerrors == 1);
  stop_in_error = 0;
  KT_TRUE(!kl_reflector_running(refl));
  KT_EQ_INT(kl_timers_count(fts), 0);
  REPLY_(500, "{}");
  kl_reflector_start(refl);
  UNTIL(nerrors == 2 && kl_timers_count(fts) == 1);
  kl_reflector_stop(refl);
  KT_EQ_INT(kl_timers_count(fts), 0);
  advance(100);
  settle();
  KT_EQ_INT(nreq, 5);
  KT_EQ_STR(reqlog[3], "resourceVersion=100");
  KT_EQ_INT(nerrors, 2);
  teardown();
}

/* ---- after faults, the cache equals the server's state ---- */

/* A small apiserver: NOBJ objects, a history of events with their RVs, a
 * compaction floor. Lists serve the current state in pages of `limit` (a
 * continue token names the next index and the RV of its snapshot, and
 * expires once the state has moved on), answer 410 below the floor and 504
 * above the current RV; watches replay the history after their RV (or an
 * ERROR 410 below the floor) and then stream live events. */
#define NOBJ 8
static struct {
  int rv;
  bool live;
} mobj[NOBJ];
static struct { int type, obj, rv; } mhist[4096];
static int mrv, nmhist, mfloor, m429;
static uint64_t mseed = 42;

static unsigned mrand(unsigned n) {
  mseed = mseed * 6364136223846793005u + 1442695040888963407u;
  return (unsigned)(mseed >> 33) % n;
}

static void model_event(kl_httpd_req_t *r, int type, int obj, int rv) {
  static const char *const names[] = {"", "ADDED", "MODIFIED", "DELETED"};
  char b[512];
  snprintf(b, sizeof b,
           "{\"type\":\"%s\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":"
           "\"v1\",\"metadata\":{\"name\":\"o%d\",\"namespace\":\"ns\","
           "\"resourceVersion\":\"%d\"}}}\n",
           names[type], obj, rv);
  kl_httpd_stream_write(r, b, strlen(b));
}

static void model_reply(kl_httpd_req_t *r, int code, const char *body) {
  kl_httpd_reply(r, code, body, strlen(body));
}

static void model_serve(kl_httpd_req_t *r) {
  const char *rvs = kl_httpd_req_param(r, "resourceVersion", 0, NULL);
  const char *cont = kl_httpd_req_param(r, "continue", 0, NULL);
  const char *lim = kl_httpd_req_param(r, "limit", 0, NULL);
  int rv = rvs && rvs[0] ? atoi(rvs) : -1;
  if (kl_httpd_req_param(r, "watch", 0, NULL)) {
    if (m429 > 0) {
      m429--;
      model_reply(r, 429, STATUS(429, "TooManyRequests", "busy", ""));
      return;
    }
    if (wreq) kl_httpd_stream_abort(wreq, 0);
    kl_httpd_req_set_callbacks(r, on_close, NULL, NULL);
    kl_httpd_stream_begin(r, 200);
    wreq = r;
    if (rv < mfloor) {
      const char *e = ERROR_EV(410, "Expired", "too old resource version");
      kl_httpd_stream_write(r, e, strlen(e));
      kl_httpd_stream_end(r);
      wreq = NULL;
      return;
    }
    for (int i = 0; i < nmhist; i++)
      if (mhist[i].rv > rv)
        model_event(r, mhist[i].type, mhist[i].obj, mhist[i].rv);
    return;
  }
  if (rv > mrv) {
    model_reply(r, 504,
                STATUS(504, "Timeout", "Too large resource version",
                       ",\"details\":{\"causes\":[{\"reason\":"
                       "\"ResourceVersionTooLarge\"}]}"));
    return;
  }
  if (rv > 0 && rv < mfloor) {
    model_reply(r, 410, GONE);
    return;
  }
  int start = 0, limit = lim ? atoi(lim) : 0;
  if (cont) {
    int snap;
    if (sscanf(cont, "%d.%d", &start, &snap) != 2 || snap != mrv) {
      model_reply(r, 410, STATUS(410, "Expired", "continue expired", ""));
      return;
    }
  }
  char b[4096];
  size_t n = (size_t)snprintf(b, sizeof b,
                              "{\"kind\":\"ConfigMapList\","
                              "\"apiVersion\":\"v1\",\"items\":[");
  int count = 0, i = start;
  for (; i < NOBJ && (limit == 0 || count < limit); i++) {
    if (!mobj[i].live) continue;
    n += (size_t)snprintf(b + n, sizeof b - n,
                          "%s{\"metadata\":{\"name\":\"o%d\",\"namespace\":"
                          "\"ns\",\"resourceVersion\":\"%d\"}}",
                          count ? "," : "", i, mobj[i].rv);
    count++;
  }
  n += (size_t)snprintf(b + n, sizeof b - n,
                        "],\"metadata\":{\"resourceVersion\":\"%d\"", mrv);
  if (i < NOBJ)
    n += (size_t)snprintf(b + n, sizeof b - n, ",\"continue\":\"%d.%d\"", i,
                          mrv);
  snprintf(b + n, sizeof b - n, "}}");
  model_reply(r, 200, b);
}

static void model_mutate(void) {
  int i = (int)mrand(NOBJ), type;
  if (!mobj[i].live)
    type = 1;
  else
    type = mrand(10) < 5 ? 2 : 3;
  mrv++;
  mobj[i].rv = mrv;
  mobj[i].live = type != 3;
  if (nmhist < 4096) {
    mhist[nmhist].type = type;
    mhist[nmhist].obj = i;
    mhist[nmhist++].rv = mrv;
  }
  if (wreq) model_event(wreq, type, i, mrv);
}

/* Runs the loop a little; with no watch open, lets the fake clock reach the
 * next deadline (a backoff, or a watch that never answered). */
static void model_drive(bool block) {
  for (int i = 0; i < 4; i++)
    ev_run(EV, block ? EVRUN_ONCE : EVRUN_NOWAIT);
  if (!kl_reflector_watching(refl) && kl_timers_count(fts) > 0) {
    kt_now = kl_timers_next(fts);
    kl_timers_run(fts);
  }
}

static void converge(uint64_t seed) {
  kl_reflector_opts_t o = {0};
  mseed = seed;
  o.page_size = 3;
  setup_with(&o);
  memset(mobj, 0, sizeof mobj);
  mrv = 10;
  nmhist = mfloor = m429 = 0;
  for (int i = 0; i < NOBJ; i += 2) {
    mobj[i].live = true;
    mobj[i].rv = ++mrv;
  }
  model_on = true;
  kl_reflector_start(refl);
  int faults[8] = {0};
  for (int step = 0; step < 400; step++) {
    model_drive(false);
    kt_now += 0.25;
    kl_timers_run(fts);
    if (step % 4 == 0) pump();
    unsigned f = mrand(40);
    if (f < 24) {
      model_mutate();
    } else if (f < 26 && wreq && kl_reflector_watching(refl)) {
      /* The connection drops in the middle of an event. */
      faults[0]++;
      kl_httpd_stream_abort(wreq, 30);
      model_mutate();
      wreq = NULL;
    } else if (f < 28) {
      /* Compaction: older versions are gone. */
      faults[1]++;
      mfloor = mrv;
      nmhist = 0;
    } else if (f < 29 && wreq && kl_reflector_watching(refl)) {
      faults[2]++;
      kl_httpd_stream_write(wreq, ERROR_EV(410, "Expired", "too old"),
                            strlen(ERROR_EV(410, "Expired", "too old")));
      kl_httpd_stream_end(wreq);
      wreq = NULL;
    } else if (f < 30) {
      faults[3]++;
      m429 = 1 + (int)mrand(2);
    } else if (f < 32 && wreq && kl_reflector_watching(refl)) {
      faults[4]++;
      char b[256];
      snprintf(b, sizeof b,
               "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\","
               "\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"%d\""
               "}}}\n",
               mrv);
      kl_httpd_stream_write(wreq, b, strlen(b));
    } else if (f < 34 && wreq && kl_reflector_watching(refl)) {
      faults[5]++; /* the server's timeout */
      kt_now += 2;
      kl_httpd_stream_end(wreq);
      wreq = NULL;
    } else if (f < 35 && kl_reflector_watching(refl)) {
      faults[6]++; /* silence: the liveness timeout */
      kt_now += 91;
      kl_timers_run(fts);
    }
  }
  /* Quiet: wait until the reflector has caught up with the server. */
  char want[32];
  snprintf(want, sizeof want, "%d", mrv);
  for (int k = 0; k < 2000 && strcmp(kl_reflector_last_rv(refl), want) != 0;
       k++)
    model_drive(true);
  KT_EQ_STR(kl_reflector_last_rv(refl), want);
  pump();
  size_t live = 0;
  for (int i = 0; i < NOBJ; i++) {
    char key[16], rv[16];
    snprintf(key, sizeof key, "ns/o%d", i);
    snprintf(rv, sizeof rv, "%d", mobj[i].rv);
    KT_EQ_STR(cached(key), mobj[i].live ? rv : "-");
    live += mobj[i].live;
  }
  KT_EQ_INT(ncached(), live);
  kl_reflector_stats_t st = stats();
  printf("# %d versions, %zu live; faults: %d cut, %d compactions, %d "
         "ERROR 410, %d 429s, %d bookmarks, %d closes, %d silences; "
         "%llu lists, %llu watches, %llu backoffs\n",
         mrv, live, faults[0], faults[1], faults[2], faults[3], faults[4],
         faults[5], faults[6], (unsigned long long)st.lists,
         (unsigned long long)st.watches, (unsigned long long)st.backoffs);
  KT_TRUE(st.relists > 0 && st.watch_restarts > 0);
  model_on = false;
  teardown();
}

static void test_converges_after_faults(void) {
  for (uint64_t seed = 1; seed <= 4; seed++)
    converge(seed);
}

/* Stopped from the informer's on_work, in the middle of a Replace or of a
 * chunk of events: nothing more reaches the informer, no request follows. */
static void test_stop_from_on_work(void) {
  setup();
  REPLY_(200, LIST("100", "", CM("a", "90")));
  stop_in_work = 1;
  kl_reflector_start(refl);
  UNTIL(!kl_reflector_running(refl));
  settle();
  KT_EQ_INT(nreq, 1);
  KT_EQ_INT(works, 1);
  KT_EQ_INT(kl_timers_count(fts), 0);
  pump();
  KT_EQ_INT(ncached(), 1);

  stop_in_work = 0;
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 3 && kl_reflector_watching(refl));
  pump();
  stop_in_work = 1;
  wsend(EVT("ADDED", "b", "101") EVT("ADDED", "c", "102")
            EVT("ADDED", "d", "103"));
  UNTIL(!kl_reflector_running(refl));
  settle();
  KT_EQ_INT(kl_fifo_len(kl_informer_fifo(inf)), 1);
  KT_EQ_INT(stats().events, 1);
  KT_EQ_STR(kl_reflector_last_rv(refl), "101");
  KT_EQ_INT(nreq, 3);
  KT_EQ_INT(kl_timers_count(fts), 0);
  teardown();
}

/* Bad options are refused with a message. */
/* Credentials are asked for before every request; a 401 on a list or on a
 * watch's set-up forgets them, backs off and retries with fresh ones; a
 * credential that cannot be had fails the round, retried after a backoff. */
static int auth_gen, auth_calls, auth_refused, auth_fail, auth_pending;

static int fake_auth(kl_reflector_t *r, char *line, size_t cap, void *ud) {
  (void)r;
  (void)ud;
  auth_calls++;
  if (auth_pending > 0) {
    auth_pending--;
    snprintf(line, cap, "exec plugin x: running");
    return KL_EAGAIN;
  }
  if (auth_fail) {
    snprintf(line, cap, "exec plugin x: exited with status 1");
    return KL_EIO;
  }
  snprintf(line, cap, "Authorization: Bearer tok%d", auth_gen);
  return 0;
}

static void fake_unauthorized(kl_reflector_t *r, void *ud) {
  (void)r;
  (void)ud;
  auth_refused++;
  auth_gen++; /* the next read finds a rotated token */
}

static void test_credentials_per_request(void) {
  kl_reflector_opts_t o = {0};
  o.auth = fake_auth;
  o.on_unauthorized = fake_unauthorized;
  auth_gen = auth_calls = auth_refused = auth_fail = auth_pending = 0;
  setup_with(&o);
  REPLY_(401, STATUS(401, "Unauthorized", "Unauthorized", ""));
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(stats().backoffs == 1);
  KT_EQ_STR(last_auth, "Bearer tok0");
  KT_EQ_INT(auth_refused, 1);
  KT_EQ_INT(nerrors, 1);
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(last_auth, "Bearer tok1");
  KT_EQ_INT(auth_calls, 3);
  pump();
  KT_EQ_INT(ncached(), 1);

  /* The watch resumes with the same token, is refused, relists. */
  REPLY_(401, STATUS(401, "Unauthorized", "Unauthorized", ""));
  REPLY_(200, LIST("110", "", CM("a", "105")));
  STREAM_(NULL);
  advance(2);
  wend();
  UNTIL(stats().backoffs == 2);
  KT_EQ_STR(last_auth, "Bearer tok1");
  KT_EQ_INT(auth_refused, 2);
  KT_IN(fire_backoff(), 1.6, 3.2);
  UNTIL(nreq == 6 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(last_auth, "Bearer tok2");
  KT_EQ_STR(reqlog[4], "resourceVersion=100");
  KT_EQ_INT(stats().unauthorized, 2);
  pump();
  KT_EQ_STR(cached("ns/a"), "105");

  /* No credential: the round fails before any request. */
  auth_fail = 1;
  advance(2);
  wend();
  UNTIL(stats().backoffs == 3);
  KT_EQ_INT(nreq, 6);
  KT_TRUE(strstr(last_error, "watch: credentials: exec plugin x") != NULL);
  teardown();
}

/* A credential on its way (an exec plugin runs): the same step 50 ms
 * later, no error, no backoff; then the request. */
static void test_credentials_pending(void) {
  kl_reflector_opts_t o = {0};
  o.auth = fake_auth;
  o.on_unauthorized = fake_unauthorized;
  auth_gen = auth_calls = auth_refused = auth_fail = 0;
  auth_pending = 2;
  setup_with(&o);
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(auth_calls == 1);
  KT_EQ_DBL(kl_timers_next(fts) - kt_now, 0.05, 1e-9);
  advance(0.05);
  UNTIL(auth_calls == 2);
  KT_EQ_INT(nreq, 0);
  advance(0.05);
  UNTIL(nreq == 2 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(last_auth, "Bearer tok0");
  KT_EQ_INT(nerrors, 0);
  KT_EQ_INT(stats().errors, 0);
  KT_EQ_INT(stats().backoffs, 0);
  /* A watch waits the same way, and stays a watch. */
  auth_pending = 1;
  advance(2);
  wend();
  UNTIL(auth_calls == 5);
  advance(0.05);
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=100&"
                       "timeoutSeconds=450&watch=true");
  teardown();
}

/* Streaming lists (6.11): the initial events replace the cache at the end
 * bookmark and the stream goes on as a watch; a normal close resumes with
 * an ordinary watch; a 410 on the watch streams again from the last RV, and
 * a 410 on that streams once more at "". */
static void test_watch_list(void) {
  kl_reflector_opts_t o = {0};
  o.watch_list = true;
  setup_with(&o);
  STREAM_(EVT("ADDED", "a", "90") EVT("ADDED", "b", "95"));
  kl_reflector_start(refl);
  UNTIL(nreq == 1 && stats().events == 2);
  KT_EQ_STR(reqlog[0], "allowWatchBookmarks=true&" WL_Q);
  KT_EQ_INT(kl_fifo_len(kl_informer_fifo(inf)), 0); /* collected, not queued */
  KT_TRUE(!kl_reflector_listed(refl));
  KT_EQ_STR(kl_reflector_last_rv(refl), "");
  wsend(BOOKMARK_END("100") EVT("MODIFIED", "a", "105"));
  UNTIL(stats().events == 4);
  KT_TRUE(kl_reflector_listed(refl));
  pump();
  KT_TRUE(kl_informer_has_synced(inf));
  KT_EQ_STR(cached("ns/a"), "105");
  KT_EQ_STR(cached("ns/b"), "95");
  KT_EQ_STR(kl_reflector_last_rv(refl), "105");
  KT_EQ_INT(stats().lists, 1);
  KT_EQ_INT(stats().watch_lists, 1);
  KT_EQ_INT(stats().list_requests, 0);

  /* A normal close: an ordinary watch from the last RV. */
  advance(2);
  wend();
  UNTIL(nreq == 2 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[1], "allowWatchBookmarks=true&resourceVersion=105&"
                       "timeoutSeconds=450&watch=true");
  /* 410 on resuming it: at once a new round streams from 105; 410 again:
   * at "". */
  STREAM_(ERROR_EV(410, "Expired", "too old resource version: 105 (200)"));
  STREAM_(EVT("ADDED", "a", "210") BOOKMARK_END("220"));
  wsend(ERROR_EV(410, "Expired", "too old resource version: 105 (200)"));
  UNTIL(nreq == 4 && stats().lists == 2);
  KT_EQ_INT(stats().backoffs, 0);
  KT_EQ_STR(reqlog[2], "allowWatchBookmarks=true&resourceVersion=105&" WL_Q);
  KT_EQ_STR(reqlog[3], "allowWatchBookmarks=true&" WL_Q);
  pump();
  KT_EQ_STR(cached("ns/a"), "210");
  KT_EQ_STR(cached("ns/b"), "-"); /* gone while we were away: a tombstone */
  KT_EQ_STR(notes[nnotes - 1], "DELETE ns/b 95 tombstone");
  KT_EQ_STR(kl_reflector_last_rv(refl), "220");
  KT_EQ_INT(stats().relists, 1);
  KT_EQ_INT(stats().list_requests, 0);
  teardown();
}

/* A streaming list's initial events of n ConfigMaps of about 1.1 KB
 * (cm-1..cm-n), then its end bookmark at RV 100. */
static char *large_initial_events(int n) {
  size_t cap = (size_t)n * 1400 + 512, len = 0;
  char *b = malloc(cap);
  for (int i = 1; i <= n; i++) {
    len += (size_t)snprintf(
        b + len, cap - len,
        "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\","
        "\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"cm-%d\","
        "\"namespace\":\"ns\",\"resourceVersion\":\"%d\"},\"data\":{",
        i, i);
    for (int k = 0; k < 16; k++)
      len += (size_t)snprintf(b + len, cap - len,
                              "%s\"key-%d\":\"value %d of config map %d, "
                              "shared by many\"",
                              k ? "," : "", k, k * i % 97, i);
    len += (size_t)snprintf(b + len, cap - len, "}}}\n");
  }
  snprintf(b + len, cap - len, BOOKMARK_END("100"));
  return b;
}

/* A streaming list's objects are cached compressed, those that came before
 * the cache was large enough for the codec (512 keys) and those it learned
 * from (about 130) too, not kept plain. */
static void test_watch_list_compressed(void) {
  kl_reflector_opts_t o = {0};
  o.watch_list = true;
  setup_with(&o);
  char *events = large_initial_events(700);
  STREAM_(events);
  kl_reflector_start(refl);
  UNTIL(kl_reflector_listed(refl));
  pump();
  KT_EQ_INT(kl_store_len(kl_informer_store(inf)), 700);
  int compressed = 0;
  for (int i = 1; i <= 700; i++) {
    char key[32];
    int n = snprintf(key, sizeof key, "ns/cm-%d", i);
    kl_obj_t *c = kl_store_get(kl_informer_store(inf), key, (size_t)n);
    KT_TRUE(c != NULL);
    compressed += c && kl_obj_compressed(c);
  }
  KT_EQ_INT(compressed, 700);
  teardown();
  free(events);
}

/* A streaming list that gets one ADDED event (and nothing more, in these
 * tests), with a list and a watch scripted after it. */
static void stream_initial_then_list(void) {
  STREAM_(EVT("ADDED", "a", "90"));
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 1 && stats().events == 1);
}

/* A server that refuses streaming lists, or streams without the end
 * bookmark: the round lists at once, and later rounds too. */
static void test_watch_list_falls_back(void) {
  kl_reflector_opts_t o = {0};
  o.watch_list = true;
  setup_with(&o);
  REPLY_(422, STATUS(422, "Invalid", "sendInitialEvents: Forbidden", ""));
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(ERROR_EV(410, "Expired", "too old resource version: 100 (150)"));
  REPLY_(200, LIST("160", "", CM("a", "150")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 3 && stats().backoffs == 1);
  KT_EQ_STR(reqlog[0], "allowWatchBookmarks=true&" WL_Q);
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(nreq == 5 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[3], "resourceVersion=100");
  KT_EQ_INT(stats().watch_lists, 0);
  KT_EQ_INT(nerrors, 0);
  teardown();

  /* Another failure (a 500) lists this round only. */
  setup_with(&o);
  REPLY_(500, STATUS(500, "InternalError", "etcd is down", ""));
  REPLY_(200, LIST("100", "", CM("a", "90")));
  STREAM_(ERROR_EV(410, "Expired", "too old resource version: 100 (150)"));
  STREAM_(EVT("ADDED", "a", "150") BOOKMARK_END("160"));
  kl_reflector_start(refl);
  UNTIL(nreq == 3 && stats().backoffs == 1);
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  KT_IN(fire_backoff(), 0.8, 1.6);
  UNTIL(nreq == 4 && stats().watch_lists == 1);
  KT_EQ_STR(reqlog[3], "allowWatchBookmarks=true&resourceVersion=100&" WL_Q);
  teardown();

  /* The initial events, then the stream ends with no end bookmark. */
  setup_with(&o);
  stream_initial_then_list();
  advance(2);
  wend();
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  KT_EQ_INT(stats().backoffs, 0);
  pump();
  KT_EQ_STR(cached("ns/a"), "90");
  KT_EQ_INT(nnotes, 1);
  teardown();

  /* The initial events, then silence: no waiting for ever. */
  setup_with(&o);
  stream_initial_then_list();
  advance(KL_REFLECTOR_INITIAL_SILENCE);
  UNTIL(nreq == 3 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(reqlog[1], "limit=500&resourceVersion=0");
  teardown();
}

/* A metadata-only informer: lists ask for PartialObjectMetadataList,
 * watches (a streaming list's too) for PartialObjectMetadata; the other
 * headers go on both. */
static void test_watch_accept(void) {
  static const char *const hdrs[] = {
      "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;"
      "v=v1",
      "Authorization: Bearer tok", NULL};
  kl_reflector_opts_t o = {0};
  o.headers = hdrs;
  o.watch_accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;"
                   "v=v1";
  setup_with(&o);
  REPLY_(200, LIST("7", "", CM("a", "5")));
  STREAM_(NULL);
  kl_reflector_start(refl);
  UNTIL(nreq == 2 && wreq != NULL && kl_reflector_watching(refl));
  KT_EQ_STR(acceptlog[0], "application/json;as=PartialObjectMetadataList;"
                          "g=meta.k8s.io;v=v1");
  KT_EQ_STR(acceptlog[1], "application/json;as=PartialObjectMetadata;"
                          "g=meta.k8s.io;v=v1");
  KT_EQ_STR(last_auth, "Bearer tok");
  teardown();

  o.watch_list = true;
  setup_with(&o);
  STREAM_(EVT("ADDED", "a", "90") BOOKMARK_END("100"));
  kl_reflector_start(refl);
  UNTIL(nreq == 1 && stats().lists == 1);
  KT_EQ_STR(reqlog[0], "allowWatchBookmarks=true&" WL_Q);
  KT_EQ_STR(acceptlog[0], "application/json;as=PartialObjectMetadata;"
                          "g=meta.k8s.io;v=v1");
  teardown();
}

static void test_bad_options(void) {
  char err[256];
  setup();
  kl_reflector_opts_t o = {0};
  KT_TRUE(kl_reflector_new(loop, http, inf, &o, err, sizeof err) == NULL);
  o.url = "http://x/api/v1/pods?watch=1";
  KT_TRUE(kl_reflector_new(loop, http, inf, &o, err, sizeof err) == NULL);
  KT_TRUE(strstr(err, "query") != NULL);
  static const char *const bad[] = {"X-A: b\r\nX-B: c", NULL};
  o.url = "http://x/api/v1/pods";
  o.headers = bad;
  KT_TRUE(kl_reflector_new(loop, http, inf, &o, err, sizeof err) == NULL);
  o.headers = NULL; /* a watch's Accept needs the lists' */
  o.watch_accept = "application/json;as=PartialObjectMetadata";
  KT_TRUE(kl_reflector_new(loop, http, inf, &o, err, sizeof err) == NULL);
  KT_EQ_STR(err, "reflector: watch_accept needs an Accept header for lists "
                 "and must be one value");
  teardown();
}

int main(void) {
  /* Quiet unless KT_LOG is set: the faults here log by design. */
  kl_log_set_level(getenv("KT_LOG") ? KL_LOG_DEBUG
                                    : (kl_log_level_t)(KL_LOG_ERROR + 1));
  KT_RUN(test_first_list_then_watch);
  KT_RUN(test_selectors_and_headers);
  KT_RUN(test_pagination);
  KT_RUN(test_expired_continue_full_list);
  KT_RUN(test_normal_close_resumes);
  KT_RUN(test_error_410_relists_at_last_rv);
  KT_RUN(test_too_large_rv);
  KT_RUN(test_watch_setup_429_and_refused);
  KT_RUN(test_stream_429_and_retry_after);
  KT_RUN(test_very_short_watch);
  KT_RUN(test_bookmark_moves_rv_only);
  KT_RUN(test_backoff_sequence_and_reset);
  KT_RUN(test_wrong_kind_and_table);
  KT_RUN(test_synthetic_adds_do_not_move_rv);
  KT_RUN(test_list_429_retry_after);
  KT_RUN(test_events_in_order);
  KT_RUN(test_events_without_newlines);
  KT_RUN(test_event_kept_back_at_the_end);
  KT_RUN(test_backlog_pauses_the_watch);
  KT_RUN(test_quiet_watch_left_alone);
  KT_RUN(test_initial_timeout_configurable);
  KT_RUN(test_routine_410_relists_at_once);
  KT_RUN(test_recovery_is_logged_once);
  KT_RUN(test_servers_asked_once);
  KT_RUN(test_watch_list_ignored);
  KT_RUN(test_decode_error_relists);
  KT_RUN(test_list_errors);
  KT_RUN(test_watch_setup_other_error);
  KT_RUN(test_stop_cancels_everything);
  KT_RUN(test_stop_from_on_work);
  KT_RUN(test_converges_after_faults);
  KT_RUN(test_credentials_per_request);
  KT_RUN(test_credentials_pending);
  KT_RUN(test_watch_list);
  KT_RUN(test_watch_list_compressed);
  KT_RUN(test_watch_accept);
  KT_RUN(test_watch_list_falls_back);
  KT_RUN(test_bad_options);
  return KT_DONE();
}
