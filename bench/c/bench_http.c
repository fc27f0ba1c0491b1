/* bench_http.c — throughput of the HTTP client (runtime/http.*) over
 * loopback.
 *
 * The server is the project's httpd in a forked child, on its own loop and
 * core, answering GET /healthz with a small JSON body; the client keeps 50
 * GETs in flight on the parent's loop, each on_done starting the next, over
 * keep-alive connections. After a warm-up it times REQUESTS requests. As a
 * reference in the same run, the curl CLI (when installed) makes the same
 * GETs with `--parallel --parallel-max 50` against the same server.
 * Prints one JSON line: {"bench":"http_c","requests_per_s":…,
 * "curl_requests_per_s":… (null without the curl CLI)}. */
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http.h"
#include "httpd.h"
#include "loop.h"

enum { INFLIGHT = 50, WARMUP = 5000, REQUESTS = 200000, CURL_REQUESTS = 50000 };

static const char BODY[] = "{\"status\":\"ok\"}\n";

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the server (the child) ---- */

static void handler(kl_httpd_req_t *req, void *ud) {
  (void)ud;
  kl_httpd_set_header(req, "Content-Type", "application/json");
  kl_httpd_reply(req, 200, BODY, sizeof BODY - 1);
}

static void on_parent_gone(struct ev_loop *ev, ev_io *w, int revents) {
  (void)revents;
  ev_io_stop(ev, w);
  ev_break(ev, EVBREAK_ALL);
}

/* Serves until the parent closes its end of `ctl`; reports the port on
 * `report`. */
static int serve(int report, int ctl) {
  kl_loop_t *loop = kl_loop_new(NULL);
  kl_httpd_opts_t o = {0};
  char err[256];
  o.host = "127.0.0.1";
  o.handler = handler;
  kl_httpd_t *h = kl_httpd_new(loop, &o, err, sizeof err);
  if (!h) {
    fprintf(stderr, "bench_http: %s\n", err);
    return 1;
  }
  int port = kl_httpd_port(h);
  if (write(report, &port, sizeof port) != sizeof port) return 1;
  close(report);
  ev_io gone;
  ev_io_init(&gone, on_parent_gone, ctl, EV_READ);
  ev_io_start(kl_loop_ev(loop), &gone);
  ev_run(kl_loop_ev(loop), 0);
  kl_httpd_free(h);
  kl_loop_free(loop);
  return 0;
}

/* ---- the client (the parent) ---- */

typedef struct bench {
  kl_http_t *http;
  char url[64];
  long started, done, failed, limit;
} bench_t;

typedef struct slot {
  bench_t *b;
  size_t len;
} slot_t;

static void start_one(slot_t *s);

static int on_data(kl_http_req_t *req, const char *p, size_t n, void *ud) {
  slot_t *s = ud;
  (void)req;
  (void)p;
  s->len += n;
  return 0;
}

static void on_done(kl_http_req_t *req, int err, const char *msg, void *ud) {
  slot_t *s = ud;
  bench_t *b = s->b;
  if (err || kl_http_status(req) != 200 || s->len != sizeof BODY - 1) {
    if (b->failed++ == 0) fprintf(stderr, "bench_http: %s\n", msg);
  }
  b->done++;
  if (b->started < b->limit) start_one(s);
}

static void start_one(slot_t *s) {
  bench_t *b = s->b;
  kl_http_opts_t o = {0};
  char err[128];
  o.url = b->url;
  o.on_data = on_data;
  o.on_done = on_done;
  o.ud = s;
  s->len = 0;
  if (!kl_http_start(b->http, &o, err, sizeof err)) {
    fprintf(stderr, "bench_http: %s\n", err);
    exit(1);
  }
  b->started++;
}

/* Runs `count` GETs with INFLIGHT in flight; returns the seconds. */
static double run(kl_loop_t *loop, bench_t *b, slot_t *slots, long count) {
  b->started = b->done = 0;
  b->limit = count;
  double t0 = wall();
  for (int i = 0; i < INFLIGHT && b->started < count; i++)
    start_one(&slots[i]);
  while (b->done < count)
    ev_run(kl_loop_ev(loop), EVRUN_ONCE);
  return wall() - t0;
}

/* The curl CLI's figure for the same GETs, or -1 without it. */
static double curl_cli(int port) {
  if (system("command -v curl >/dev/null 2>&1") != 0) return -1;
  char cmd[256];
  snprintf(cmd, sizeof cmd,
           "curl -sf --no-progress-meter --parallel --parallel-max %d "
           "'http://127.0.0.1:%d/healthz?i=[1-%d]' >/dev/null",
           INFLIGHT, port, CURL_REQUESTS);
  double t0 = wall();
  if (system(cmd) != 0) return -1;
  return CURL_REQUESTS / (wall() - t0);
}

int main(void) {
  int report[2], ctl[2];
  if (pipe(report) < 0 || pipe(ctl) < 0) return 1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(report[0]);
    close(ctl[1]);
    _exit(serve(report[1], ctl[0]));
  }
  close(report[1]);
  close(ctl[0]);
  int port = 0;
  if (read(report[0], &port, sizeof port) != sizeof port) {
    fprintf(stderr, "bench_http: the server did not start\n");
    return 1;
  }
  close(report[0]);

  kl_loop_t *loop = kl_loop_new(NULL);
  bench_t b = {0};
  slot_t slots[INFLIGHT];
  for (int i = 0; i < INFLIGHT; i++)
    slots[i].b = &b;
  b.http = kl_http_new(loop, "kubelua-bench");
  snprintf(b.url, sizeof b.url, "http://127.0.0.1:%d/healthz", port);
  run(loop, &b, slots, WARMUP);
  double t = run(loop, &b, slots, REQUESTS);
  long failed = b.failed;
  kl_http_free(b.http);
  kl_loop_free(loop);
  double curl_rps = curl_cli(port);

  close(ctl[1]); /* the server stops */
  int status = 0;
  waitpid(pid, &status, 0);
  if (failed) {
    fprintf(stderr, "bench_http: %ld requests failed\n", failed);
    return 1;
  }
  char curl_s[32] = "null";
  if (curl_rps > 0) snprintf(curl_s, sizeof curl_s, "%.0f", curl_rps);
  printf("{\"bench\":\"http_c\",\"requests_per_s\":%.0f,"
         "\"curl_requests_per_s\":%s}\n",
         REQUESTS / t, curl_s);
  return 0;
}
