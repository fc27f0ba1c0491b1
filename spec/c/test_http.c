/* test_http.c — the HTTP client (libcurl multi on the loop) against real
 * servers on loopback.
 *
 * Both sides share one kl_loop_t on the real clock: the project's httpd on
 * 127.0.0.1 port 0 (plain or TLS with a certificate made here by the openssl
 * CLI), and, for responses httpd never sends (1xx blocks, trailers, odd
 * header spacing, HTTP/1.0), a tiny canned-response server. Nothing sleeps:
 * UNTIL runs the loop one iteration at a time until a condition holds, with
 * an iteration bound and a wall-clock bound; a 10 ms guard timer bounds how
 * long one iteration may block. Timeouts are ~0.2 s and no assertion depends
 * on a duration. Every test ends with the client freed, the server's
 * counters at zero, and (in the ASan build) no leaks. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ev.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "http.h"
#include "httpd.h"
#include "loop.h"
#include "mem.h"
#include "test.h"
#include "kt_loop.h"

#define UA "kubelua-test/1.0"

/* ---- the loop and the waiting helpers ---- */

static kl_loop_t *loop;
static kl_httpd_t *srv;
static kl_http_t *http;
static int port;

/* ---- the server side ---- */

#define MAXHELD 64
static kl_httpd_req_t *held[MAXHELD];
static int nheld, nhandled, ncloses, last_close_reason;

/* What the server saw of the last request. */
static struct {
  char method[16], path[256], ua[128], xtest[128], ctype[128], expect[64];
  char accept[128], auth[128], host[128];
  int has_ctype, has_expect;
  char *body;
  size_t body_len;
} seen;

static void copy_header(const kl_httpd_req_t *r, const char *name, char *out,
                        size_t n, int *present) {
  const char *v = kl_httpd_req_header(r, name);
  snprintf(out, n, "%s", v ? v : "");
  if (present) *present = v != NULL;
}

static void on_close_cb(kl_httpd_req_t *r, int reason, void *ud) {
  (void)ud;
  ncloses++;
  last_close_reason = reason;
  for (int i = 0; i < nheld; i++)
    if (held[i] == r) held[i] = NULL;
}

static int held_count(void) {
  int n = 0;
  for (int i = 0; i < nheld; i++)
    n += held[i] != NULL;
  return n;
}

static void handler(kl_httpd_req_t *r, void *ud) {
  (void)ud;
  size_t plen, blen;
  const char *path = kl_httpd_req_path(r, &plen);
  const char *body = kl_httpd_req_body(r, &blen);
  nhandled++;
  snprintf(seen.method, sizeof seen.method, "%s", kl_httpd_req_method(r));
  snprintf(seen.path, sizeof seen.path, "%s", path);
  copy_header(r, "User-Agent", seen.ua, sizeof seen.ua, NULL);
  copy_header(r, "X-Test", seen.xtest, sizeof seen.xtest, NULL);
  copy_header(r, "content-type", seen.ctype, sizeof seen.ctype,
              &seen.has_ctype);
  copy_header(r, "Expect", seen.expect, sizeof seen.expect, &seen.has_expect);
  copy_header(r, "Accept", seen.accept, sizeof seen.accept, NULL);
  copy_header(r, "Authorization", seen.auth, sizeof seen.auth, NULL);
  copy_header(r, "Host", seen.host, sizeof seen.host, NULL);
  free(seen.body);
  seen.body = kl_xmalloc(blen + 1);
  memcpy(seen.body, body, blen);
  seen.body_len = blen;

  if (strcmp(path, "/hold") == 0 || strcmp(path, "/stream") == 0) {
    if (nheld < MAXHELD) held[nheld++] = r;
    kl_httpd_req_set_callbacks(r, on_close_cb, NULL, NULL);
    if (path[1] == 's') {
      kl_httpd_set_header(r, "Content-Type", "application/json");
      kl_httpd_stream_begin(r, 200);
    }
  } else if (strcmp(path, "/hello") == 0) {
    kl_httpd_set_header(r, "Content-Type", "text/plain");
    kl_httpd_set_header(r, "X-Custom-Header", "Yes please");
    kl_httpd_set_header(r, "X-Empty", "");
    kl_httpd_reply(r, 200, "hello", 5);
  } else if (strcmp(path, "/echo") == 0) {
    kl_httpd_set_header(r, "X-Method", kl_httpd_req_method(r));
    kl_httpd_reply(r, 200, body, blen);
  } else if (strcmp(path, "/n") == 0) {
    size_t n;
    const char *i = kl_httpd_req_param(r, "i", 0, &n);
    kl_httpd_reply(r, 200, i ? i : "", i ? n : 0);
  } else if (strcmp(path, "/big") == 0) {
    size_t n = 1 << 20;
    char *b = kl_xmalloc(n);
    for (size_t i = 0; i < n; i++)
      b[i] = (char)('a' + i % 26);
    kl_httpd_reply(r, 200, b, n);
    free(b);
  } else if (strcmp(path, "/close") == 0) {
    kl_httpd_set_header(r, "Connection", "close");
    kl_httpd_reply(r, 200, "bye", 3);
  } else {
    kl_httpd_reply(r, 404, "not found", 9);
  }
}

static kl_httpd_stats_t stats(void) {
  kl_httpd_stats_t st;
  kl_httpd_get_stats(srv, &st);
  return st;
}

/* ---- the client side ---- */

typedef struct call call_t;
struct call {
  kl_http_req_t *req; /* NULL once done or cancelled */
  char url[256];
  int heads, datas, dones, status_at_head, err;
  char msg[512];
  char *data;
  size_t len, cap;
  /* what on_done saw */
  int status;
  char version[16], ctype[128];
  /* behaviour */
  int cancel_in_head, cancel_in_data, cancel_in_done;
  int stop_in_head, stop_in_data;
  call_t *cancel_other; /* cancelled from this call's first on_data */
  call_t *cancel_other_in_done;
  call_t *start_other; /* started from this call's first on_data/on_done */
  int start_in;        /* 1: on_head, 2: on_data, 3: on_done */
  int free_in;         /* kl_http_free(http) from 2: on_data, 3: on_done */
  int chain;           /* on_done starts this call again, chain times */
  int cancelled, late; /* a callback after done or cancel */
  /* called from on_head with the request, to check what it sees there */
  void (*head_hook)(call_t *c, kl_http_req_t *req);
};

static void start_call(call_t *c);

static void call_reset(call_t *c) {
  free(c->data);
  memset(c, 0, sizeof *c);
}

static void cancel_call(call_t *c) {
  kl_http_cancel(c->req);
  c->req = NULL;
  c->cancelled = 1;
}

static void maybe_start_other(call_t *c, int where) {
  if (c->start_other && c->start_in == where) {
    call_t *o = c->start_other;
    c->start_other = NULL;
    start_call(o);
  }
}

static int on_head(kl_http_req_t *req, int status, void *ud) {
  call_t *c = ud;
  if (c->dones || c->cancelled || req != c->req) c->late++;
  c->heads++;
  c->status_at_head = status;
  if (kl_http_status(req) != status) c->late++;
  if (c->head_hook) c->head_hook(c, req);
  maybe_start_other(c, 1);
  if (c->cancel_in_head) {
    cancel_call(c);
    return 0;
  }
  return c->stop_in_head;
}

static int on_data(kl_http_req_t *req, const char *p, size_t n, void *ud) {
  call_t *c = ud;
  if (c->dones || c->cancelled || !c->heads || req != c->req) c->late++;
  c->datas++;
  if (c->len + n + 1 > c->cap) {
    c->cap = (c->len + n + 1) * 2;
    c->data = kl_xrealloc(c->data, c->cap);
  }
  memcpy(c->data + c->len, p, n);
  c->len += n;
  c->data[c->len] = '\0';
  if (c->cancel_other) {
    cancel_call(c->cancel_other);
    c->cancel_other = NULL;
  }
  maybe_start_other(c, 2);
  if (c->free_in == 2) {
    kl_http_free(http);
    http = NULL;
    return 0;
  }
  if (c->cancel_in_data) {
    cancel_call(c);
    return 0;
  }
  return c->stop_in_data;
}

static void on_done(kl_http_req_t *req, int err, const char *msg, void *ud) {
  call_t *c = ud;
  if (c->dones || c->cancelled || req != c->req) c->late++;
  c->dones++;
  c->err = err;
  snprintf(c->msg, sizeof c->msg, "%s", msg ? msg : "(null)");
  c->status = kl_http_status(req);
  snprintf(c->version, sizeof c->version, "%s", kl_http_version(req));
  const char *ct = kl_http_header(req, "content-type");
  snprintf(c->ctype, sizeof c->ctype, "%s", ct ? ct : "(none)");
  if (c->cancel_in_done) kl_http_cancel(req); /* a no-op */
  if (c->cancel_other_in_done) {
    cancel_call(c->cancel_other_in_done);
    c->cancel_other_in_done = NULL;
  }
  c->req = NULL;
  maybe_start_other(c, 3);
  if (c->free_in == 3) {
    kl_http_free(http);
    http = NULL;
    return;
  }
  if (c->chain > 0) {
    c->chain--;
    c->dones = 0;
    c->heads = 0;
    c->len = 0;
    start_call(c);
  }
}

static kl_http_opts_t opts_for(call_t *c) {
  kl_http_opts_t o = {0};
  o.url = c->url;
  o.on_head = on_head;
  o.on_data = on_data;
  o.on_done = on_done;
  o.ud = c;
  return o;
}

static void start_opts(call_t *c, const kl_http_opts_t *o) {
  char err[256] = "";
  c->req = kl_http_start(http, o, err, sizeof err);
  if (!c->req) KT_FAIL_("kl_http_start(%s): %s", c->url, err);
}

static void start_call(call_t *c) {
  kl_http_opts_t o = opts_for(c);
  start_opts(c, &o);
}

static void url(call_t *c, const char *path) {
  snprintf(c->url, sizeof c->url, "http://127.0.0.1:%d%s", port, path);
}

/* Starts a GET of path on the test server. */
static void get(call_t *c, const char *path) {
  url(c, path);
  start_call(c);
}

static int count_done(const call_t *cs, int n) {
  int done = 0;
  for (int i = 0; i < n; i++)
    done += cs[i].dones;
  return done;
}

/* The call ended once, with no callback out of order. */
static int ok(const call_t *c) { return c->dones == 1 && !c->late; }

/* ---- set-up and tear-down ---- */

static void setup_tls(const char *cert, const char *key) {
  char err[256];
  memset(held, 0, sizeof held);
  nheld = nhandled = ncloses = last_close_reason = 0;
  loop = kl_loop_new(NULL);
  EV = kl_loop_ev(loop);
  ev_timer_init(&guard, guard_cb, 0.01, 0.01);
  ev_timer_start(EV, &guard);
  kl_httpd_opts_t o = {0};
  o.host = "127.0.0.1";
  o.handler = handler;
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  srv = kl_httpd_new(loop, &o, err, sizeof err);
  if (!srv) {
    KT_FAIL_("kl_httpd_new: %s", err);
    exit(1);
  }
  port = kl_httpd_port(srv);
  http = kl_http_new(loop, UA);
  if (!http) {
    KT_FAIL_("%s", "kl_http_new failed");
    exit(1);
  }
}

static void setup(void) { setup_tls(NULL, NULL); }

/* Frees the client (which must be idle), checks that the server holds
 * nothing once it has seen the connections go, and frees the rest. */
static void teardown(void) {
  if (http) {
    KT_EQ_INT(kl_http_active(http), 0);
    kl_http_free(http);
    http = NULL;
  }
  for (int i = 0; i < nheld; i++) {
    if (held[i]) kl_httpd_stream_end(held[i]);
    held[i] = NULL;
  }
  UNTIL(stats().connections == 0);
  KT_EQ_INT(stats().requests, 0);
  KT_EQ_INT(stats().streams, 0);
  kl_httpd_free(srv);
  srv = NULL;
  spin(2);
  ev_timer_stop(EV, &guard);
  kl_loop_free(loop);
  loop = NULL;
  free(seen.body);
  memset(&seen, 0, sizeof seen);
}

/* ---- a canned-response server for what httpd never sends ---- */

typedef struct raw {
  int lfd, cfd, port;
  ev_io lio, cio;
  char in[16384];
  size_t inlen;
  const char *resp;
  int close_after; /* close once the response is written */
  int accepted;
} raw_t;

static void raw_conn_cb(struct ev_loop *l, ev_io *w, int revents) {
  raw_t *s = w->data;
  (void)revents;
  ssize_t n = read(s->cfd, s->in + s->inlen, sizeof s->in - s->inlen - 1);
  if (n > 0) {
    s->inlen += (size_t)n;
    s->in[s->inlen] = '\0';
    if (strstr(s->in, "\r\n\r\n")) {
      size_t len = strlen(s->resp), off = 0;
      while (off < len) { /* small: fits the socket buffer */
        ssize_t m = send(s->cfd, s->resp + off, len - off, MSG_NOSIGNAL);
        if (m <= 0) break;
        off += (size_t)m;
      }
      s->inlen = 0;
      if (s->close_after) n = 0;
    }
  }
  if (n == 0 || (n < 0 && errno != EAGAIN)) {
    ev_io_stop(l, w);
    close(s->cfd);
    s->cfd = -1;
  }
}

static void raw_accept_cb(struct ev_loop *l, ev_io *w, int revents) {
  raw_t *s = w->data;
  (void)revents;
  int fd = accept(s->lfd, NULL, NULL);
  if (fd < 0) return;
  fcntl(fd, F_SETFL, O_NONBLOCK);
  if (s->cfd >= 0) {
    ev_io_stop(l, &s->cio);
    close(s->cfd);
  }
  s->accepted++;
  s->cfd = fd;
  s->inlen = 0;
  ev_io_init(&s->cio, raw_conn_cb, fd, EV_READ);
  s->cio.data = s;
  ev_io_start(l, &s->cio);
}

static int listen_any(int *port_out) {
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
      listen(fd, 16) < 0 || getsockname(fd, (struct sockaddr *)&a, &al) < 0)
    return -1;
  *port_out = ntohs(a.sin_port);
  return fd;
}

static void raw_start(raw_t *s, const char *resp, int close_after) {
  memset(s, 0, sizeof *s);
  s->cfd = -1;
  s->resp = resp;
  s->close_after = close_after;
  s->lfd = listen_any(&s->port);
  KT_TRUE(s->lfd >= 0);
  ev_io_init(&s->lio, raw_accept_cb, s->lfd, EV_READ);
  s->lio.data = s;
  ev_io_start(EV, &s->lio);
}

static void raw_stop(raw_t *s) {
  ev_io_stop(EV, &s->lio);
  close(s->lfd);
  if (s->cfd >= 0) {
    ev_io_stop(EV, &s->cio);
    close(s->cfd);
  }
}

static void raw_get(call_t *c, const raw_t *s) {
  snprintf(c->url, sizeof c->url, "http://127.0.0.1:%d/raw", s->port);
  start_call(c);
}

/* ---- tests ---- */

static void check_hello_head(call_t *c, kl_http_req_t *req) {
  KT_EQ_INT(c->datas, 0);
  KT_EQ_INT(kl_http_status(req), 200);
  KT_EQ_STR(kl_http_version(req), "HTTP/1.1");
  KT_EQ_STR(kl_http_header(req, "Content-Type"), "text/plain");
  KT_EQ_STR(kl_http_header(req, "content-type"), "text/plain");
  KT_EQ_STR(kl_http_header(req, "CONTENT-LENGTH"), "5");
  KT_EQ_STR(kl_http_header(req, "x-custom-header"), "Yes please");
  KT_EQ_STR(kl_http_header(req, "X-Empty"), "");
  KT_TRUE(kl_http_header(req, "X-Absent") == NULL);
  KT_TRUE(kl_http_header(req, "Content") == NULL);
  KT_TRUE(kl_http_header(req, "Content-Type-X") == NULL);
  c->head_hook = NULL;
}

static void test_get_status_headers_and_body_exact(void) {
  setup();
  call_t c = {0};
  get(&c, "/hello");
  KT_TRUE(c.req != NULL);
  KT_EQ_INT(kl_http_active(http), 1);
  /* Nothing is known, and nothing is called, before the loop runs. */
  KT_EQ_INT(kl_http_status(c.req), 0);
  KT_EQ_STR(kl_http_version(c.req), "");
  KT_TRUE(kl_http_header(c.req, "content-type") == NULL);
  KT_EQ_INT(c.heads + c.datas + c.dones, 0);

  /* Headers are read in on_head, before any body. */
  c.head_hook = check_hello_head;
  UNTIL(c.heads == 1);
  KT_EQ_INT(c.status_at_head, 200);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, 0);
  KT_EQ_STR(c.msg, "");
  KT_EQ_INT(c.status, 200);
  KT_EQ_STR(c.version, "HTTP/1.1");
  KT_EQ_STR(c.ctype, "text/plain");
  KT_EQ_MEM(c.data, c.len, "hello");
  KT_EQ_INT(kl_http_active(http), 0);

  /* What the server received. */
  KT_EQ_STR(seen.method, "GET");
  KT_EQ_STR(seen.path, "/hello");
  KT_EQ_STR(seen.ua, UA);
  KT_EQ_INT(seen.body_len, 0);
  KT_EQ_INT(seen.has_expect, 0);

  /* Any HTTP status is a completed exchange. */
  call_reset(&c);
  get(&c, "/nope");
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, 0);
  KT_EQ_INT(c.status, 404);
  KT_EQ_INT(c.status_at_head, 404);
  KT_EQ_MEM(c.data, c.len, "not found");
  KT_EQ_STR(c.ctype, "(none)");

  /* A 1 MiB body arrives whole and in order. */
  call_reset(&c);
  get(&c, "/big");
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.len, 1 << 20);
  int good = c.len == 1 << 20;
  for (size_t i = 0; good && i < c.len; i++)
    good = c.data[i] == (char)('a' + i % 26);
  KT_TRUE(good);
  KT_TRUE(c.datas > 1);

  /* No callbacks at all: the request still runs and is freed. */
  kl_http_opts_t o = {0};
  char u[128], err[128];
  snprintf(u, sizeof u, "http://127.0.0.1:%d/hello", port);
  o.url = u;
  KT_TRUE(kl_http_start(http, &o, err, sizeof err) != NULL);
  int before = nhandled;
  UNTIL(kl_http_active(http) == 0);
  KT_EQ_INT(nhandled, before + 1);
  call_reset(&c);
  teardown();
}

static void test_methods_and_bodies(void) {
  setup();
  static const char *methods[] = {"POST", "PUT", "PATCH", "DELETE"};
  for (int i = 0; i < 4; i++) {
    call_t c = {0};
    char body[64];
    int n = snprintf(body, sizeof body, "{\"verb\":\"%s\",\"i\":%d}",
                     methods[i], i);
    url(&c, "/echo");
    kl_http_opts_t o = opts_for(&c);
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    o.method = methods[i];
    o.body = body;
    o.body_len = (size_t)n;
    o.headers = hdrs;
    start_opts(&c, &o);
    memset(body, 'X', sizeof body); /* the body was copied */
    UNTIL(c.dones == 1);
    KT_TRUE(ok(&c));
    KT_EQ_INT(c.err, 0);
    KT_EQ_INT(c.status, 200);
    KT_EQ_STR(seen.method, methods[i]);
    char want[64];
    snprintf(want, sizeof want, "{\"verb\":\"%s\",\"i\":%d}", methods[i], i);
    KT_EQ_MEM(seen.body, seen.body_len, want);
    KT_EQ_MEM(c.data, c.len, want);
    KT_EQ_STR(seen.ctype, "application/json");
    KT_EQ_INT(seen.has_expect, 0);
    call_reset(&c);
  }

  /* DELETE without a body; POST with an empty one; HEAD. */
  call_t c = {0};
  url(&c, "/echo");
  kl_http_opts_t o = opts_for(&c);
  o.method = "DELETE";
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0 && c.status == 200);
  KT_EQ_STR(seen.method, "DELETE");
  KT_EQ_INT(seen.body_len, 0);

  call_reset(&c);
  url(&c, "/echo");
  o = opts_for(&c);
  o.method = "POST";
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0 && c.status == 200);
  KT_EQ_STR(seen.method, "POST");
  KT_EQ_INT(seen.body_len, 0);
  KT_EQ_INT(c.len, 0);

  call_reset(&c);
  url(&c, "/hello");
  o = opts_for(&c);
  o.method = "HEAD";
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0 && c.status == 200);
  KT_EQ_STR(seen.method, "HEAD");
  KT_EQ_INT(c.datas, 0);
  KT_EQ_STR(c.ctype, "text/plain");

  /* Binary bodies with NUL bytes, and a body bigger than a socket buffer:
   * no Content-Type is invented when the caller gives none. */
  size_t big = 1 << 20;
  char *b = kl_xmalloc(big);
  for (size_t i = 0; i < big; i++)
    b[i] = (char)(i * 7);
  call_reset(&c);
  url(&c, "/echo");
  o = opts_for(&c);
  o.method = "PUT";
  o.body = b;
  o.body_len = big;
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0 && c.status == 200);
  KT_EQ_INT(seen.body_len, big);
  KT_TRUE(seen.body_len == big && memcmp(seen.body, b, big) == 0);
  KT_TRUE(c.len == big && memcmp(c.data, b, big) == 0);
  KT_EQ_INT(seen.has_ctype, 0);
  free(b);

  /* A body on a GET stays a GET (curl would make it a POST). */
  call_reset(&c);
  url(&c, "/echo");
  o = opts_for(&c);
  o.body = "q";
  o.body_len = 1;
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0);
  KT_EQ_STR(seen.method, "GET");
  KT_EQ_MEM(seen.body, seen.body_len, "q");

  /* Unusable options fail at once, with a message. */
  char err[128] = "";
  o = opts_for(&c);
  o.url = NULL;
  KT_TRUE(kl_http_start(http, &o, err, sizeof err) == NULL);
  KT_TRUE(err[0] != '\0');
  err[0] = '\0';
  o.url = "";
  KT_TRUE(kl_http_start(http, &o, err, sizeof err) == NULL);
  KT_TRUE(err[0] != '\0');
  err[0] = '\0';
  o = opts_for(&c);
  o.body = NULL;
  o.body_len = 10;
  KT_TRUE(kl_http_start(http, &o, err, sizeof err) == NULL);
  KT_TRUE(err[0] != '\0');
  KT_EQ_INT(kl_http_active(http), 0);
  call_reset(&c);
  teardown();
}

static void test_request_headers_are_sent(void) {
  setup();
  call_t c = {0};
  url(&c, "/echo");
  kl_http_opts_t o = opts_for(&c);
  char h1[64], h2[64], h3[64];
  snprintf(h1, sizeof h1, "X-Test: one two");
  snprintf(h2, sizeof h2, "Accept: application/json");
  snprintf(h3, sizeof h3, "Authorization: Bearer tok");
  const char *hdrs[] = {h1, h2, h3, NULL};
  o.headers = hdrs;
  o.method = "POST";
  o.body = "{}";
  o.body_len = 2;
  start_opts(&c, &o);
  /* The header lines were copied. */
  memset(h1, 'Z', sizeof h1 - 1);
  memset(h3, 'Z', sizeof h3 - 1);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0);
  KT_EQ_STR(seen.xtest, "one two");
  KT_EQ_STR(seen.accept, "application/json");
  KT_EQ_STR(seen.auth, "Bearer tok");
  KT_EQ_STR(seen.ua, UA);
  KT_EQ_INT(seen.has_expect, 0);
  KT_EQ_INT(seen.has_ctype, 0); /* no form type made up for a JSON body */

  /* A caller's User-Agent wins over the client's. */
  call_reset(&c);
  url(&c, "/hello");
  o = opts_for(&c);
  const char *ua[] = {"User-Agent: other/2", NULL};
  o.headers = ua;
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_EQ_STR(seen.ua, "other/2");
  call_reset(&c);
  teardown();
}

static void test_keepalive_reuses_one_connection(void) {
  setup();
  for (int i = 0; i < 5; i++) {
    call_t c = {0};
    get(&c, i % 2 ? "/hello" : "/nope");
    UNTIL(c.dones == 1);
    KT_TRUE(ok(&c) && c.err == 0);
    call_reset(&c);
  }
  call_t p = {0};
  url(&p, "/echo");
  kl_http_opts_t o = opts_for(&p);
  o.method = "PATCH";
  o.body = "x";
  o.body_len = 1;
  start_opts(&p, &o);
  UNTIL(p.dones == 1);
  KT_EQ_INT(stats().accepted, 1);
  KT_EQ_INT(stats().responses, 6);
  KT_EQ_INT(stats().connections, 1);

  /* Chained from on_done: still one connection. */
  call_reset(&p);
  p.chain = 4;
  get(&p, "/hello");
  UNTIL(p.chain == 0 && p.dones == 1);
  KT_EQ_INT(stats().accepted, 1);
  KT_EQ_INT(stats().responses, 11);

  /* A server that closes after its response: the next request dials
   * again. */
  call_reset(&p);
  get(&p, "/close");
  UNTIL(p.dones == 1);
  KT_TRUE(ok(&p) && p.err == 0);
  KT_EQ_MEM(p.data, p.len, "bye");
  call_reset(&p);
  get(&p, "/hello");
  UNTIL(p.dones == 1);
  KT_TRUE(ok(&p) && p.err == 0);
  KT_EQ_INT(stats().accepted, 2);
  call_reset(&p);
  teardown();
}

static void test_200_concurrent_requests(void) {
  enum { N = 200 };
  setup();
  static call_t cs[N];
  for (int i = 0; i < N; i++) {
    char path[32];
    memset(&cs[i], 0, sizeof cs[i]);
    snprintf(path, sizeof path, "/n?i=%d", i);
    get(&cs[i], path);
  }
  KT_EQ_INT(kl_http_active(http), N);
  UNTIL(count_done(cs, N) == N);
  for (int i = 0; i < N; i++) {
    char want[16];
    snprintf(want, sizeof want, "%d", i);
    KT_TRUE(ok(&cs[i]));
    KT_EQ_INT(cs[i].err, 0);
    KT_EQ_INT(cs[i].status, 200);
    KT_EQ_MEM(cs[i].data, cs[i].len, want);
    call_reset(&cs[i]);
  }
  KT_EQ_INT(kl_http_active(http), 0);
  KT_EQ_INT(stats().responses, N);
  /* A second wave reuses the connections the first one left. */
  uint64_t accepted = stats().accepted;
  for (int i = 0; i < N; i++) {
    char path[32];
    snprintf(path, sizeof path, "/n?i=%d", i);
    get(&cs[i], path);
  }
  UNTIL(count_done(cs, N) == N);
  printf("  # second wave: %d new connections\n",
         (int)(stats().accepted - accepted));
  KT_TRUE(stats().accepted < accepted + N);
  for (int i = 0; i < N; i++) {
    KT_TRUE(ok(&cs[i]) && cs[i].err == 0);
    call_reset(&cs[i]);
  }
  teardown();
}

static void test_stream_chunks_arrive_in_order_as_written(void) {
  setup();
  call_t c = {0};
  url(&c, "/stream");
  kl_http_opts_t o = opts_for(&c);
  o.keepalive = 1; /* a watch */
  start_opts(&c, &o);
  UNTIL(c.heads == 1 && held[0]);
  KT_EQ_INT(c.status_at_head, 200);
  KT_EQ_STR(kl_http_header(c.req, "Transfer-Encoding"), "chunked");
  KT_EQ_INT(c.datas, 0);
  char want[4096] = "";
  size_t wl = 0;
  for (int i = 0; i < 30; i++) {
    char ev[64];
    int n = snprintf(ev, sizeof ev, "{\"type\":\"ADDED\",\"n\":%d}\n", i);
    KT_EQ_INT(kl_httpd_stream_write(held[0], ev, (size_t)n), 0);
    memcpy(want + wl, ev, (size_t)n);
    wl += (size_t)n;
    /* Each event reaches on_data before the next is written. */
    WITHIN(20, c.len == wl);
    KT_EQ_MEM(c.data, c.len, want);
  }
  KT_EQ_INT(c.dones, 0);
  KT_EQ_INT(kl_httpd_stream_end(held[0]), 0);
  held[0] = NULL;
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, 0);
  KT_EQ_MEM(c.data, c.len, want);
  call_reset(&c);
  teardown();
}

static void test_server_abort_mid_stream_is_an_error(void) {
  setup();
  call_t c = {0};
  get(&c, "/stream");
  UNTIL(c.heads == 1 && held[0]);
  kl_httpd_stream_write(held[0], "first", 5);
  UNTIL(c.len == 5);
  KT_EQ_INT(kl_httpd_stream_abort(held[0], 3), 0);
  kl_httpd_stream_write(held[0], "abcdef", 6);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, KL_EIO);
  KT_TRUE(c.msg[0] != '\0');
  printf("  # aborted stream: %s\n", c.msg);
  KT_EQ_MEM(c.data, c.len, "firstabc");
  UNTIL(ncloses == 1);

  /* Closed before any response. */
  call_reset(&c);
  get(&c, "/hold");
  UNTIL(held[1] != NULL);
  KT_EQ_INT(kl_httpd_stream_abort(held[1], 0), 0);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.heads, 0);
  KT_EQ_INT(c.err, KL_EIO);
  KT_TRUE(c.msg[0] != '\0');
  printf("  # closed before a response: %s\n", c.msg);
  call_reset(&c);
  teardown();
}

static void test_cancel_before_any_response(void) {
  setup();
  /* Before the loop ran at all: not even connected. */
  call_t c = {0};
  get(&c, "/hello");
  cancel_call(&c);
  KT_EQ_INT(kl_http_active(http), 0);
  spin(20);
  KT_EQ_INT(c.heads + c.datas + c.dones + c.late, 0);

  /* The server holds the request: cancelling closes the connection. */
  call_reset(&c);
  get(&c, "/hold");
  UNTIL(held[0] != NULL);
  cancel_call(&c);
  KT_EQ_INT(kl_http_active(http), 0);
  UNTIL(ncloses == 1);
  KT_EQ_INT(last_close_reason, KL_EIO);
  spin(20);
  KT_EQ_INT(c.heads + c.datas + c.dones + c.late, 0);
  kl_http_cancel(NULL); /* a no-op */

  /* The client still works after cancels. */
  call_reset(&c);
  get(&c, "/hello");
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0 && c.status == 200);
  call_reset(&c);
  teardown();
}

static void test_cancel_inside_callbacks(void) {
  setup();
  /* In on_head: no data, no on_done. */
  call_t c = {0};
  c.cancel_in_head = 1;
  get(&c, "/hello");
  UNTIL(c.heads == 1);
  spin(20);
  KT_EQ_INT(c.datas + c.dones + c.late, 0);
  KT_EQ_INT(kl_http_active(http), 0);

  /* In on_head of a stream: the server sees the client go. */
  call_reset(&c);
  c.cancel_in_head = 1;
  get(&c, "/stream");
  UNTIL(c.heads == 1);
  KT_EQ_INT(kl_http_active(http), 0);
  UNTIL(ncloses == 1);
  KT_EQ_INT(c.datas + c.dones + c.late, 0);

  /* In on_data: nothing more is delivered. */
  call_reset(&c);
  c.cancel_in_data = 1;
  get(&c, "/stream");
  UNTIL(c.heads == 1 && held[1]);
  kl_httpd_stream_write(held[1], "one", 3);
  kl_httpd_stream_write(held[1], "two", 3);
  UNTIL(c.datas == 1);
  KT_EQ_INT(kl_http_active(http), 0);
  if (held[1]) kl_httpd_stream_write(held[1], "three", 5);
  UNTIL(ncloses == 2);
  spin(20);
  KT_EQ_INT(c.datas, 1);
  KT_EQ_INT(c.dones + c.late, 0);
  KT_TRUE(c.len == 3 || c.len == 6);

  /* In on_done: a no-op, on_done runs once. */
  call_reset(&c);
  c.cancel_in_done = 1;
  get(&c, "/hello");
  UNTIL(c.dones == 1);
  spin(20);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, 0);
  KT_EQ_MEM(c.data, c.len, "hello");
  KT_EQ_INT(kl_http_active(http), 0);

  /* The client still works. */
  call_reset(&c);
  get(&c, "/hello");
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0);
  KT_EQ_INT(stats().streams, 0);
  call_reset(&c);
  teardown();
}

/* Request A's on_data cancels request B, with B's data arriving in the same
 * loop iteration (written before A's, and after). */
static void test_cancel_another_request_from_on_data(void) {
  setup();
  for (int order = 0; order < 2; order++) {
    call_t a = {0}, b = {0};
    int h0 = nhandled;
    get(&a, "/stream");
    UNTIL(a.heads == 1 && nhandled == h0 + 1);
    kl_httpd_req_t *ra = held[nheld - 1];
    get(&b, "/stream");
    UNTIL(b.heads == 1 && nhandled == h0 + 2);
    kl_httpd_req_t *rb = held[nheld - 1];
    a.cancel_other = &b;
    if (order == 0) {
      kl_httpd_stream_write(rb, "b1", 2);
      kl_httpd_stream_write(ra, "a1", 2);
    } else {
      kl_httpd_stream_write(ra, "a1", 2);
      kl_httpd_stream_write(rb, "b1", 2);
    }
    UNTIL(a.datas == 1);
    KT_TRUE(b.cancelled);
    KT_EQ_INT(kl_http_active(http), 1);
    /* B's server side sees its client go; B gets nothing more. */
    UNTIL(ncloses == order + 1);
    spin(20);
    KT_EQ_INT(b.dones + b.late, 0);
    KT_TRUE(b.datas <= 1);
    /* A goes on. */
    kl_httpd_stream_write(ra, "a2", 2);
    UNTIL(a.len == 4);
    KT_EQ_MEM(a.data, a.len, "a1a2");
    kl_httpd_stream_end(ra);
    for (int i = 0; i < nheld; i++)
      if (held[i] == ra) held[i] = NULL;
    UNTIL(a.dones == 1);
    KT_TRUE(ok(&a) && a.err == 0);
    call_reset(&a);
    call_reset(&b);
  }

  /* A's on_done cancels B, which is still waiting; then B2 is cancelled
   * from outside any callback while A2 runs. */
  for (int i = 0; i < 2; i++) {
    call_t a = {0}, b = {0};
    get(&b, "/hold");
    UNTIL(held_count() == 1);
    if (i == 0) a.cancel_other_in_done = &b;
    get(&a, "/hello");
    UNTIL(a.heads == 1);
    if (i == 1) cancel_call(&b);
    UNTIL(a.dones == 1);
    KT_TRUE(ok(&a) && a.err == 0);
    KT_TRUE(b.cancelled);
    UNTIL(held_count() == 0);
    KT_EQ_INT(b.heads + b.datas + b.dones + b.late, 0);
    KT_EQ_INT(kl_http_active(http), 0);
    call_reset(&a);
    call_reset(&b);
  }
  teardown();
}

static void test_callbacks_returning_nonzero_abort(void) {
  setup();
  call_t c = {0};
  c.stop_in_head = 1;
  get(&c, "/hello");
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.heads, 1);
  KT_EQ_INT(c.datas, 0);
  KT_EQ_INT(c.err, KL_EIO);
  KT_EQ_STR(c.msg, "aborted");
  KT_EQ_INT(c.status, 200);

  call_reset(&c);
  c.stop_in_data = 1;
  get(&c, "/stream");
  UNTIL(c.heads == 1 && held[0]);
  kl_httpd_stream_write(held[0], "one", 3);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.datas, 1);
  KT_EQ_MEM(c.data, c.len, "one");
  KT_EQ_INT(c.err, KL_EIO);
  KT_EQ_STR(c.msg, "aborted");
  UNTIL(ncloses == 1);
  KT_EQ_INT(kl_http_active(http), 0);
  call_reset(&c);
  teardown();
}

/* Writes a byte to a stream if it is still there. */
static void trickle(kl_httpd_req_t *r) {
  if (r) kl_httpd_stream_write(r, "x", 1);
}

static void test_per_request_timeout(void) {
  setup();
  call_t c = {0};
  url(&c, "/hold");
  kl_http_opts_t o = opts_for(&c);
  o.timeout = 0.2;
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, KL_ETIMEDOUT);
  KT_TRUE(strstr(c.msg, "timed out") != NULL);
  printf("  # timeout: %s\n", c.msg);
  UNTIL(ncloses == 1);

  /* A stream that keeps sending is cut at its deadline too. */
  call_reset(&c);
  url(&c, "/stream");
  o = opts_for(&c);
  o.timeout = 0.2;
  start_opts(&c, &o);
  UNTIL(c.heads == 1 && held[1]);
  UNTIL((trickle(held[1]), c.dones == 1));
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, KL_ETIMEDOUT);
  KT_TRUE(c.len > 0);
  UNTIL(ncloses == 2);

  /* A tiny timeout is a timeout, not "none". */
  call_reset(&c);
  url(&c, "/hold");
  o = opts_for(&c);
  o.timeout = 0.0001;
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_EQ_INT(c.err, KL_ETIMEDOUT);
  UNTIL(held_count() == 0);

  /* Idle: a request that receives nothing for a second fails. */
  call_reset(&c);
  url(&c, "/hold");
  o = opts_for(&c);
  o.idle_timeout = 0.5; /* rounded up to 1 s */
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_EQ_INT(c.err, KL_ETIMEDOUT);
  printf("  # idle: %s\n", c.msg);
  UNTIL(held_count() == 0);

  /* A deadline far away does not disturb a quick request. */
  call_reset(&c);
  url(&c, "/hello");
  o = opts_for(&c);
  o.timeout = 30;
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0);
  call_reset(&c);
  teardown();
}

static void test_connection_refused(void) {
  setup();
  int p;
  int fd = listen_any(&p);
  KT_TRUE(fd >= 0);
  close(fd); /* nothing listens on p now */
  call_t c = {0};
  snprintf(c.url, sizeof c.url, "http://127.0.0.1:%d/", p);
  start_call(&c);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.heads, 0);
  KT_EQ_INT(c.err, KL_EIO);
  KT_TRUE(strstr(c.msg, "connect") != NULL || strstr(c.msg, "refused"));
  printf("  # refused: %s\n", c.msg);

  /* A malformed URL fails on the loop, not in start. */
  call_reset(&c);
  snprintf(c.url, sizeof c.url, "ftp://127.0.0.1:%d/", p);
  char err[128] = "";
  kl_http_opts_t o = opts_for(&c);
  c.req = kl_http_start(http, &o, err, sizeof err);
  if (c.req) {
    UNTIL(c.dones == 1);
    KT_EQ_INT(c.err, KL_EIO);
    printf("  # ftp: %s\n", c.msg);
  } else {
    KT_TRUE(err[0] != '\0');
  }
  call_reset(&c);
  teardown();
}

static void test_free_with_requests_in_flight(void) {
  setup();
  static call_t cs[6];
  memset(cs, 0, sizeof cs);
  get(&cs[0], "/hold");
  get(&cs[1], "/stream");
  get(&cs[2], "/hello");
  int p, fd = listen_any(&p);
  close(fd);
  snprintf(cs[3].url, sizeof cs[3].url, "http://127.0.0.1:%d/", p);
  start_call(&cs[3]);
  UNTIL(held_count() == 2 && cs[1].heads == 1 && cs[2].dones == 1);
  kl_httpd_stream_write(held[1], "data", 4);
  get(&cs[4], "/hello"); /* not started yet */
  /* Started, never run. */
  get(&cs[5], "/stream");
  KT_TRUE(kl_http_active(http) >= 3);
  kl_http_free(http);
  http = NULL;
  UNTIL(held_count() == 0);
  spin(20);
  KT_EQ_INT(cs[0].heads + cs[0].dones + cs[0].late, 0);
  KT_EQ_INT(cs[1].dones + cs[1].late, 0);
  KT_EQ_INT(cs[4].heads + cs[4].dones + cs[4].late, 0);
  KT_EQ_INT(cs[5].heads + cs[5].dones + cs[5].late, 0);
  for (int i = 0; i < 6; i++)
    call_reset(&cs[i]);
  /* A client freed with nothing in flight, and NULL. */
  kl_http_free(NULL);
  teardown();
}

static void test_requests_started_from_callbacks(void) {
  setup();
  for (int where = 1; where <= 3; where++) {
    call_t a = {0}, b = {0};
    url(&b, "/echo");
    a.start_other = &b;
    a.start_in = where;
    get(&a, "/hello");
    UNTIL(a.dones == 1 && b.dones == 1);
    KT_TRUE(ok(&a) && a.err == 0);
    KT_TRUE(ok(&b) && b.err == 0 && b.status == 200);
    KT_EQ_INT(kl_http_active(http), 0);
    call_reset(&a);
    call_reset(&b);
  }
  /* From a stream's on_data, while the stream goes on. */
  call_t a = {0}, b = {0};
  url(&b, "/hello");
  a.start_other = &b;
  a.start_in = 2;
  get(&a, "/stream");
  UNTIL(held[0] != NULL && a.heads == 1);
  kl_httpd_stream_write(held[0], "x", 1);
  UNTIL(b.dones == 1);
  KT_TRUE(ok(&b) && b.err == 0);
  KT_EQ_MEM(b.data, b.len, "hello");
  kl_httpd_stream_end(held[0]);
  held[0] = NULL;
  UNTIL(a.dones == 1);
  call_reset(&a);
  call_reset(&b);
  teardown();
}

static void test_idle_connection_closed_by_server(void) {
  /* The server's idle timeout closes the kept-alive connection; the next
   * request finds it dead and dials again. */
  char err[256];
  memset(held, 0, sizeof held);
  nheld = nhandled = ncloses = 0;
  loop = kl_loop_new(NULL);
  EV = kl_loop_ev(loop);
  ev_timer_init(&guard, guard_cb, 0.01, 0.01);
  ev_timer_start(EV, &guard);
  kl_httpd_opts_t so = {0};
  so.host = "127.0.0.1";
  so.handler = handler;
  so.idle_timeout = 0.1;
  srv = kl_httpd_new(loop, &so, err, sizeof err);
  KT_TRUE(srv != NULL);
  port = kl_httpd_port(srv);
  http = kl_http_new(loop, UA);
  for (int i = 0; i < 3; i++) {
    call_t c = {0};
    get(&c, "/hello");
    UNTIL(c.dones == 1);
    KT_TRUE(ok(&c) && c.err == 0 && c.status == 200);
    KT_EQ_INT(stats().accepted, (uint64_t)i + 1);
    UNTIL(stats().connections == 0);
    call_reset(&c);
  }
  teardown();
}

static void check_odd_head(call_t *c, kl_http_req_t *req) {
  KT_EQ_STR(kl_http_header(req, "X-Mixed"), "spaced value");
  KT_EQ_STR(kl_http_header(req, "x-dup"), "1");
  KT_EQ_STR(kl_http_header(req, "X-TIGHT"), "v");
  KT_EQ_STR(kl_http_version(req), "HTTP/1.0");
  c->head_hook = NULL;
}

/* Responses httpd never sends, from the canned server. */
static void test_header_blocks_trailers_and_spacing(void) {
  setup();
  raw_t s;
  call_t c = {0};

  /* An interim 1xx block: on_head once, for the final status, whose
   * headers alone are visible. */
  raw_start(&s,
            "HTTP/1.1 102 Processing\r\nX-Interim: 1\r\n\r\n"
            "HTTP/1.1 201 Created\r\nX-Final: yes\r\nContent-Length: 2\r\n"
            "\r\nok",
            0);
  raw_get(&c, &s);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, 0);
  KT_EQ_INT(c.heads, 1);
  KT_EQ_INT(c.status_at_head, 201);
  KT_EQ_INT(c.status, 201);
  KT_EQ_MEM(c.data, c.len, "ok");
  raw_stop(&s);

  /* Trailers after a chunked body: on_head is not called again. */
  call_reset(&c);
  raw_start(&s,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
            "Trailer: X-Trailer\r\n\r\n2\r\nok\r\n0\r\nX-Trailer: t\r\n\r\n",
            0);
  raw_get(&c, &s);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, 0);
  KT_EQ_INT(c.heads, 1);
  KT_EQ_MEM(c.data, c.len, "ok");
  raw_stop(&s);

  /* Whitespace around values, odd case, duplicates (the first wins), no
   * reason phrase, HTTP/1.0 with the body delimited by the close. */
  call_reset(&c);
  raw_start(&s,
            "HTTP/1.0 200\r\nx-MiXeD:   spaced value \t \r\nX-Dup: 1\r\n"
            "x-dup: 2\r\nX-Tight:v\r\nContent-Type: application/json\r\n\r\n"
            "{\"a\":1}",
            1);
  c.head_hook = check_odd_head;
  raw_get(&c, &s);
  UNTIL(c.dones == 1);
  KT_EQ_INT(c.heads, 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, 0);
  KT_EQ_INT(c.status, 200);
  KT_EQ_STR(c.ctype, "application/json");
  KT_EQ_MEM(c.data, c.len, "{\"a\":1}");
  raw_stop(&s);

  /* Not HTTP at all. */
  call_reset(&c);
  raw_start(&s, "SSH-2.0-OpenSSH\r\n\r\n", 1);
  raw_get(&c, &s);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c));
  KT_EQ_INT(c.err, KL_EIO);
  printf("  # not HTTP: %s\n", c.msg);
  raw_stop(&s);
  call_reset(&c);
  teardown();
}

/* ---- TLS ---- */

static char tls_dir[64], tls_cert[128], tls_key[128], other_cert[128],
    other_key[128];

static int make_certs(void) {
  char cmd[1024];
  strcpy(tls_dir, "/tmp/kl_http_tlsXXXXXX");
  if (!mkdtemp(tls_dir)) return -1;
  snprintf(tls_cert, sizeof tls_cert, "%s/cert.pem", tls_dir);
  snprintf(tls_key, sizeof tls_key, "%s/key.pem", tls_dir);
  snprintf(other_cert, sizeof other_cert, "%s/other.pem", tls_dir);
  snprintf(other_key, sizeof other_key, "%s/other-key.pem", tls_dir);
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt "
             "ec_paramgen_curve:prime256v1 -nodes -keyout %s -out %s "
             "-subj /CN=localhost -addext "
             "subjectAltName=DNS:localhost,IP:127.0.0.1 -days 1 "
             ">/dev/null 2>&1",
             i ? other_key : tls_key, i ? other_cert : tls_cert);
    if (system(cmd) != 0) return -1;
  }
  return 0;
}

static void remove_certs(void) {
  unlink(tls_cert);
  unlink(tls_key);
  unlink(other_cert);
  unlink(other_key);
  rmdir(tls_dir);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b = kl_xmalloc(65536);
  *len = fread(b, 1, 65535, f);
  b[*len] = '\0';
  fclose(f);
  return b;
}

/* A GET of /hello over TLS with t; returns the call's error. */
static int tls_get(call_t *c, const kl_http_tls_t *t) {
  call_reset(c);
  snprintf(c->url, sizeof c->url, "https://127.0.0.1:%d/hello", port);
  kl_http_opts_t o = opts_for(c);
  o.tls = t;
  start_opts(c, &o);
  UNTIL(c->dones == 1);
  KT_TRUE(ok(c));
  return c->err;
}

static void test_tls_verification(void) {
  if (make_certs() < 0) {
    KT_FAIL_("%s", "cannot make certificates with the openssl CLI");
    return;
  }
  setup_tls(tls_cert, tls_key);
  call_t c = {0};
  size_t pem_len, other_len;
  char *pem = slurp(tls_cert, &pem_len);
  char *other = slurp(other_cert, &other_len);
  KT_TRUE(pem && other);

  /* The CA as a file. */
  kl_http_tls_t t = {0};
  t.ca_file = tls_cert;
  KT_EQ_INT(tls_get(&c, &t), 0);
  KT_EQ_INT(c.status, 200);
  KT_EQ_MEM(c.data, c.len, "hello");
  KT_EQ_STR(c.version, "HTTP/2"); /* ALPN: httpd prefers h2, as curl does */

  /* No CA: the system's bundle does not know this certificate, and the
   * verified connection above is not reused for it. */
  kl_http_tls_t none = {0};
  KT_EQ_INT(tls_get(&c, &none), KL_EIO);
  KT_TRUE(strstr(c.msg, "certificate") != NULL);
  printf("  # no CA: %s\n", c.msg);
  KT_EQ_INT(tls_get(&c, NULL), KL_EIO);
  KT_TRUE(strstr(c.msg, "certificate") != NULL);

  /* The CA as PEM bytes (not NUL-terminated on purpose: a length is
   * given). */
  kl_http_tls_t tp = {0};
  pem[pem_len] = '#';
  tp.ca_pem = pem;
  tp.ca_pem_len = pem_len;
  KT_EQ_INT(tls_get(&c, &tp), 0);
  KT_EQ_MEM(c.data, c.len, "hello");

  /* The wrong CA. */
  kl_http_tls_t wrong = {0};
  wrong.ca_pem = other;
  wrong.ca_pem_len = other_len;
  KT_EQ_INT(tls_get(&c, &wrong), KL_EIO);
  KT_TRUE(strstr(c.msg, "certificate") != NULL);
  printf("  # wrong CA: %s\n", c.msg);
  wrong.ca_pem = NULL;
  wrong.ca_file = other_cert;
  KT_EQ_INT(tls_get(&c, &wrong), KL_EIO);

  /* Insecure: anything goes, and its connection is not reused for a
   * verifying request afterwards. */
  kl_http_tls_t ins = {0};
  ins.insecure = 1;
  KT_EQ_INT(tls_get(&c, &ins), 0);
  KT_EQ_MEM(c.data, c.len, "hello");
  KT_EQ_INT(tls_get(&c, &none), KL_EIO);
  KT_EQ_INT(tls_get(&c, &wrong), KL_EIO);
  KT_EQ_INT(tls_get(&c, &t), 0);

  /* A client certificate and key (the server does not ask for one), as
   * files and as PEM; a key that is not a key is an error. */
  kl_http_tls_t cc = t;
  cc.cert_file = other_cert;
  cc.key_file = other_key;
  KT_EQ_INT(tls_get(&c, &cc), 0);
  size_t okey_len;
  char *okey = slurp(other_key, &okey_len);
  cc.cert_file = cc.key_file = NULL;
  cc.cert_pem = other;
  cc.cert_pem_len = other_len;
  cc.key_pem = okey;
  cc.key_pem_len = okey_len;
  KT_EQ_INT(tls_get(&c, &cc), 0);
  /* (curl keys connections by certificate, not key: use a fresh pair) */
  cc.cert_pem = NULL;
  cc.cert_file = tls_cert;
  cc.key_pem = "not a key";
  cc.key_pem_len = 9;
  KT_EQ_INT(tls_get(&c, &cc), KL_EIO);
  printf("  # bad key: %s\n", c.msg);
  free(okey);

  /* tls-server-name: the certificate is checked against it while the
   * connection goes to the URL's host, which the Host header keeps. */
  kl_http_tls_t sn = t;
  char want_host[64];
  snprintf(want_host, sizeof want_host, "127.0.0.1:%d", port);
  sn.server_name = "localhost";
  KT_EQ_INT(tls_get(&c, &sn), 0);
  KT_EQ_MEM(c.data, c.len, "hello");
  KT_EQ_STR(seen.host, want_host);
  sn.server_name = "kubernetes.test";
  KT_EQ_INT(tls_get(&c, &sn), KL_EIO);
  KT_TRUE(strstr(c.msg, "kubernetes.test") != NULL);
  printf("  # a server name the certificate lacks: %s\n", c.msg);
  call_reset(&c);
  snprintf(c.url, sizeof c.url, "https://127.0.0.1:%d/hello", port);
  kl_http_opts_t so = opts_for(&c);
  sn.server_name = "a:b";
  so.tls = &sn;
  char serr[128];
  KT_TRUE(kl_http_start(http, &so, serr, sizeof serr) == NULL);
  KT_EQ_STR(serr, "bad TLS server name");

  /* Many TLS requests at once, all verified. */
  static call_t cs[20];
  for (int i = 0; i < 20; i++) {
    memset(&cs[i], 0, sizeof cs[i]);
    snprintf(cs[i].url, sizeof cs[i].url, "https://127.0.0.1:%d/n?i=%d", port,
             i);
    kl_http_opts_t o = opts_for(&cs[i]);
    o.tls = &t;
    start_opts(&cs[i], &o);
  }
  UNTIL(count_done(cs, 20) == 20);
  for (int i = 0; i < 20; i++) {
    char want[8];
    snprintf(want, sizeof want, "%d", i);
    KT_TRUE(ok(&cs[i]) && cs[i].err == 0);
    KT_EQ_MEM(cs[i].data, cs[i].len, want);
    call_reset(&cs[i]);
  }

  /* A TLS stream, cancelled from on_data. */
  call_reset(&c);
  snprintf(c.url, sizeof c.url, "https://127.0.0.1:%d/stream", port);
  kl_http_opts_t o = opts_for(&c);
  o.tls = &t;
  start_opts(&c, &o);
  UNTIL(c.heads == 1 && held_count() == 1);
  kl_httpd_req_t *r = NULL;
  for (int i = 0; i < nheld; i++)
    if (held[i]) r = held[i];
  kl_httpd_stream_write(r, "e1\n", 3);
  UNTIL(c.len == 3);
  c.cancel_in_data = 1;
  kl_httpd_stream_write(r, "e2\n", 3);
  UNTIL(c.cancelled);
  KT_EQ_INT(c.dones + c.late, 0);
  /* Over HTTP/2 curl (7.88) sends the cancelled stream's RST_STREAM when it
   * next uses the connection; the server's request ends then. */
  call_t next = {0};
  KT_EQ_INT(tls_get(&next, &t), 0);
  UNTIL(held_count() == 0);
  call_reset(&next);

  call_reset(&c);
  free(pem);
  free(other);
  teardown();
  remove_certs();
}

/* Over plain HTTP curl cannot know whether a connection multiplexes before
 * a response arrives: a request the server holds must not stall the
 * requests started after it. */
static void test_a_held_request_does_not_stall_others(void) {
  setup();
  call_t w = {0}, c = {0};
  get(&w, "/hold");
  UNTIL(held_count() == 1);
  for (int i = 0; i < 3; i++) {
    call_reset(&c);
    get(&c, "/hello");
    UNTIL(c.dones == 1);
    KT_TRUE(ok(&c) && c.err == 0 && c.status == 200);
  }
  /* Started together with a held one, before anything connected. */
  call_t w2 = {0};
  get(&w2, "/hold");
  call_reset(&c);
  get(&c, "/hello");
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0);
  UNTIL(held_count() == 2);
  KT_EQ_INT(w.heads + w.dones + w2.heads + w2.dones, 0);
  KT_EQ_INT(kl_http_active(http), 2);
  cancel_call(&w);
  cancel_call(&w2);
  UNTIL(held_count() == 0);
  call_reset(&w);
  call_reset(&w2);
  call_reset(&c);
  teardown();
}

static void test_bad_options_are_refused(void) {
  setup();
  call_t c = {0};
  char err[128];
  url(&c, "/hello");
  const char *crlf[] = {"X-Ok: 1", "Authorization: Bearer tok\n", NULL};
  const char *nocolon[] = {"Just-A-Name", NULL};
  const char *const *bad[] = {crlf, nocolon};
  for (int i = 0; i < 2; i++) {
    kl_http_opts_t o = opts_for(&c);
    o.headers = bad[i];
    err[0] = '\0';
    KT_TRUE(kl_http_start(http, &o, err, sizeof err) == NULL);
    KT_TRUE(err[0] != '\0');
    KT_TRUE(strstr(err, "tok") == NULL); /* never a header's value */
  }
  const char *methods[] = {"", "GET /x HTTP/1.1\r\n", "GE T"};
  for (int i = 0; i < 3; i++) {
    kl_http_opts_t o = opts_for(&c);
    o.method = methods[i];
    err[0] = '\0';
    KT_TRUE(kl_http_start(http, &o, err, sizeof err) == NULL);
    KT_TRUE(err[0] != '\0');
  }
  KT_EQ_INT(kl_http_active(http), 0);
  KT_EQ_INT(nhandled, 0);
  /* An unusual but valid method goes out as given. */
  kl_http_opts_t o = opts_for(&c);
  url(&c, "/echo");
  o.method = "OPTIONS";
  start_opts(&c, &o);
  UNTIL(c.dones == 1);
  KT_TRUE(ok(&c) && c.err == 0);
  KT_EQ_STR(seen.method, "OPTIONS");
  call_reset(&c);
  teardown();
}

/* kl_http_free from inside a callback: no further callback, everything
 * freed when the callback returns. */
static void test_free_from_inside_callbacks(void) {
  for (int where = 2; where <= 3; where++) {
    setup();
    call_t a = {0}, b = {0}, d = {0};
    get(&b, "/hold");
    UNTIL(held_count() == 1);
    get(&d, "/stream");
    UNTIL(held_count() == 2 && d.heads == 1);
    a.free_in = where;
    get(&a, where == 2 ? "/stream" : "/hello");
    if (where == 2) {
      UNTIL(held_count() == 3 && a.heads == 1);
      kl_httpd_req_t *ra = held[2], *rd = held[1];
      /* A and D get data in the same iteration. */
      kl_httpd_stream_write(rd, "d", 1);
      kl_httpd_stream_write(ra, "a", 1);
      UNTIL(a.datas == 1 || d.datas == 1);
      if (!a.datas) { /* D came first: now A */
        KT_TRUE(http != NULL);
        kl_httpd_stream_write(ra, "a", 1);
        UNTIL(a.datas == 1);
      }
    } else {
      UNTIL(a.dones == 1);
    }
    KT_TRUE(http == NULL);
    UNTIL(held_count() == 0);
    spin(20);
    KT_EQ_INT(a.late + b.late + d.late, 0);
    KT_EQ_INT(b.heads + b.dones + d.dones, 0);
    call_reset(&a);
    call_reset(&b);
    call_reset(&d);
    teardown();
  }
}

/* Our socket whose local port is the one the server saw as remote; -1. */
static int client_fd_for(const kl_httpd_req_t *r) {
  const char *remote = kl_httpd_req_remote(r);
  const char *colon = strrchr(remote, ':');
  int want = colon ? atoi(colon + 1) : -1;
  for (int fd = 3; fd < 4096; fd++) {
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &al) == 0 &&
        a.sin_family == AF_INET && ntohs(a.sin_port) == want)
      return fd;
  }
  return -1;
}

/* A watch that rides a connection opened by a plain GET still finds a dead
 * peer as client-go's HTTP/2 health check does: probes after 30 s without
 * traffic, the connection ended when nothing answers for 15 s more. */
static void test_tcp_keepalive_on_shared_connections(void) {
  setup();
  call_t c = {0}, w = {0};
  get(&c, "/hello");
  UNTIL(c.dones == 1);
  url(&w, "/stream");
  kl_http_opts_t o = opts_for(&w);
  o.keepalive = 1;
  start_opts(&w, &o);
  UNTIL(w.heads == 1 && held_count() == 1);
  KT_EQ_INT(stats().accepted, 1); /* the GET's connection */
  int fd = client_fd_for(held[0]);
  KT_TRUE(fd >= 0);
  int on = 0, idle = 0, intvl = 0, cnt = 0;
  unsigned int user = 0;
  socklen_t l = sizeof on;
  getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, &l);
  l = sizeof idle;
  getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &l);
  l = sizeof intvl;
  getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, &l);
  l = sizeof cnt;
  getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, &l);
  l = sizeof user;
  getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, &l);
  KT_EQ_INT(on, 1);
  KT_EQ_INT(idle, 30);
  KT_EQ_INT(intvl, 5);
  KT_EQ_INT(cnt, 3);
  KT_EQ_INT(user, 45000);
  cancel_call(&w);
  UNTIL(held_count() == 0);
  call_reset(&c);
  call_reset(&w);
  teardown();
}

/* ---- HTTP/2, when nghttpd is installed ---- */

static pid_t h2_pid;

static int start_nghttpd(const char *docroot, int *p) {
  int fd = listen_any(p);
  if (fd < 0) return -1;
  close(fd); /* nghttpd binds it again right away */
  char portstr[16];
  snprintf(portstr, sizeof portstr, "%d", *p);
  h2_pid = fork();
  if (h2_pid < 0) return -1;
  if (h2_pid == 0) {
    char log[192];
    snprintf(log, sizeof log, "%s/nghttpd.log", tls_dir);
    int out = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    dup2(out, 2);
    execlp("nghttpd", "nghttpd", "-v", "-a", "127.0.0.1", "-d", docroot,
           portstr, tls_key, tls_cert, (char *)NULL);
    _exit(127);
  }
  return 0;
}

/* The highest connection id in nghttpd's log: how many connections it
 * has seen. */
static int nghttpd_connections(void) {
  char log[192], line[512];
  int max = 0;
  snprintf(log, sizeof log, "%s/nghttpd.log", tls_dir);
  FILE *f = fopen(log, "r");
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    const char *id = strstr(line, "[id=");
    if (id && atoi(id + 4) > max) max = atoi(id + 4);
  }
  fclose(f);
  return max;
}

static void stop_nghttpd(void) {
  if (h2_pid > 0) {
    kill(h2_pid, SIGTERM);
    waitpid(h2_pid, NULL, 0);
    h2_pid = 0;
  }
}

static void h2_get(call_t *c, int p, const char *path, const kl_http_tls_t *t) {
  snprintf(c->url, sizeof c->url, "https://127.0.0.1:%d%s", p, path);
  kl_http_opts_t o = opts_for(c);
  o.tls = t;
  start_opts(c, &o);
}

static void test_http2_over_tls(void) {
  if (system("command -v nghttpd >/dev/null 2>&1") != 0) {
    printf("  # skipped: nghttpd (Debian nghttp2-server) is not installed\n");
    return;
  }
  if (make_certs() < 0) {
    KT_FAIL_("%s", "cannot make certificates with the openssl CLI");
    return;
  }
  char docroot[128], path[192];
  snprintf(docroot, sizeof docroot, "%s/htdocs", tls_dir);
  mkdir(docroot, 0700);
  snprintf(path, sizeof path, "%s/hello", docroot);
  FILE *f = fopen(path, "w");
  fputs("hello", f);
  fclose(f);
  enum { BIG = 4 << 20 };
  snprintf(path, sizeof path, "%s/big", docroot);
  f = fopen(path, "w");
  for (int i = 0; i < BIG; i++)
    fputc('a' + i % 26, f);
  fclose(f);

  setup();
  int p;
  KT_TRUE(start_nghttpd(docroot, &p) == 0);
  kl_http_tls_t t = {0};
  t.ca_file = tls_cert;
  call_t c = {0};
  /* Wait for it to listen: each refused attempt ends at once. */
  double t0 = wall();
  do {
    call_reset(&c);
    h2_get(&c, p, "/hello", &t);
    UNTIL(c.dones == 1);
  } while (c.err != 0 && wall() - t0 < 10);
  KT_EQ_INT(c.err, 0);
  KT_EQ_INT(c.status, 200);
  KT_EQ_STR(c.version, "HTTP/2");
  KT_EQ_MEM(c.data, c.len, "hello");

  /* Many streams at once; big bodies interleaved; one cancelled from
   * another's on_data on the same connection; one aborted. */
  enum { N = 40 };
  static call_t cs[N];
  memset(cs, 0, sizeof cs);
  for (int i = 0; i < N; i++)
    h2_get(&cs[i], p, i < 4 ? "/big" : "/hello", &t);
  cs[0].cancel_other = &cs[1];
  cs[2].stop_in_data = 1;
  UNTIL(count_done(cs, N) == N - 1);
  spin(20);
  KT_TRUE(cs[1].cancelled);
  KT_EQ_INT(cs[1].dones + cs[1].late, 0);
  KT_TRUE(ok(&cs[2]) && cs[2].err == KL_EIO);
  KT_EQ_STR(cs[2].msg, "aborted");
  for (int i = 0; i < N; i++) {
    if (i == 1 || i == 2) continue;
    KT_TRUE(ok(&cs[i]) && cs[i].err == 0 && cs[i].status == 200);
    KT_EQ_STR(cs[i].version, "HTTP/2");
    KT_EQ_INT(cs[i].len, i < 4 ? BIG : 5);
  }
  KT_TRUE(cs[0].len == BIG && cs[0].data[BIG - 1] == 'a' + (BIG - 1) % 26);
  KT_EQ_INT(kl_http_active(http), 0);
  for (int i = 0; i < N; i++)
    call_reset(&cs[i]);
  /* All of them rode the first connection. */
  KT_EQ_INT(nghttpd_connections(), 1);

  /* Without the CA it fails, as over HTTP/1.1. */
  call_reset(&c);
  h2_get(&c, p, "/hello", NULL);
  UNTIL(c.dones == 1);
  KT_EQ_INT(c.err, KL_EIO);
  call_reset(&c);

  kl_http_free(http); /* closes the HTTP/2 connection */
  http = NULL;
  stop_nghttpd();
  teardown();
  snprintf(path, sizeof path, "%s/hello", docroot);
  unlink(path);
  snprintf(path, sizeof path, "%s/big", docroot);
  unlink(path);
  rmdir(docroot);
  snprintf(path, sizeof path, "%s/nghttpd.log", tls_dir);
  unlink(path);
  remove_certs();
}

int main(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2048) {
    rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  KT_RUN(test_get_status_headers_and_body_exact);
  KT_RUN(test_methods_and_bodies);
  KT_RUN(test_request_headers_are_sent);
  KT_RUN(test_keepalive_reuses_one_connection);
  KT_RUN(test_200_concurrent_requests);
  KT_RUN(test_stream_chunks_arrive_in_order_as_written);
  KT_RUN(test_server_abort_mid_stream_is_an_error);
  KT_RUN(test_cancel_before_any_response);
  KT_RUN(test_cancel_inside_callbacks);
  KT_RUN(test_cancel_another_request_from_on_data);
  KT_RUN(test_callbacks_returning_nonzero_abort);
  KT_RUN(test_per_request_timeout);
  KT_RUN(test_connection_refused);
  KT_RUN(test_free_with_requests_in_flight);
  KT_RUN(test_requests_started_from_callbacks);
  KT_RUN(test_idle_connection_closed_by_server);
  KT_RUN(test_header_blocks_trailers_and_spacing);
  KT_RUN(test_tls_verification);
  KT_RUN(test_a_held_request_does_not_stall_others);
  KT_RUN(test_bad_options_are_refused);
  KT_RUN(test_free_from_inside_callbacks);
  KT_RUN(test_tcp_keepalive_on_shared_connections);
  KT_RUN(test_http2_over_tls);
  return KT_DONE();
}
