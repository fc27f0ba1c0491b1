/* test_httpd.c — the HTTP/1.1 server against real sockets.
 *
 * Each test starts a server on 127.0.0.1 port 0 and talks to it with
 * non-blocking clients driven by the same libev loop (plain or TLS, through
 * OpenSSL's client side), so nothing sleeps: UNTIL runs the loop one
 * iteration at a time until a condition holds, with an iteration bound and a
 * wall-clock bound. The loop reads the test's fake clock (kt_now), so
 * timeouts fire only when a test moves time. Every test ends with the
 * server's counters back at zero, and the ASan build checks for leaks. */
#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "httpd.h"
#include "loop.h"
#include "mem.h"
#include "test.h"
#include "kt_loop.h"

/* ---- the loop and the waiting helpers ---- */

static kl_loop_t *loop;
static kl_httpd_t *srv;

/* ---- clients ---- */

typedef struct tc {
  int fd;
  ev_io io;
  char *buf;
  size_t len, cap;
  char *w;
  size_t wlen, woff;
  int eof, err, noread;
  SSL *ssl;
  int hs_done;
} tc;

static SSL_CTX *cli_ctx;
/* What TLS clients offer by ALPN: they speak HTTP/1.1. */
static const char *cli_alpn = "\x08http/1.1";

static void tc_update(tc *t);

static void tc_io(struct ev_loop *l, ev_io *w, int revents) {
  tc *t = w->data;
  (void)l;
  (void)revents;
  if (t->ssl && !t->hs_done) {
    int rc = SSL_do_handshake(t->ssl);
    if (rc != 1) {
      int e = SSL_get_error(t->ssl, rc);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) t->err = 1;
      tc_update(t);
      return;
    }
    t->hs_done = 1;
  }
  while (t->woff < t->wlen) {
    ssize_t n;
    if (t->ssl) {
      n = SSL_write(t->ssl, t->w + t->woff, (int)(t->wlen - t->woff));
      if (n <= 0) break;
    } else {
      n = send(t->fd, t->w + t->woff, t->wlen - t->woff, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno != EAGAIN) t->err = errno;
        break;
      }
    }
    t->woff += (size_t)n;
  }
  while (!t->noread && !t->eof) {
    if (t->cap - t->len < 65536) {
      t->cap = t->cap ? t->cap * 2 : 65536 * 2;
      t->buf = kl_xrealloc(t->buf, t->cap);
    }
    ssize_t n;
    if (t->ssl) {
      n = SSL_read(t->ssl, t->buf + t->len, (int)(t->cap - t->len - 1));
      if (n <= 0) {
        int e = SSL_get_error(t->ssl, (int)n);
        if (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL ||
            e == SSL_ERROR_SSL) {
          t->eof = 1;
          ERR_clear_error();
        }
        break;
      }
    } else {
      n = read(t->fd, t->buf + t->len, t->cap - t->len - 1);
      if (n == 0 || (n < 0 && errno != EAGAIN)) t->eof = 1;
      if (n <= 0) break;
    }
    t->len += (size_t)n;
    t->buf[t->len] = '\0';
  }
  tc_update(t);
}

static void tc_update(tc *t) {
  int ev = t->noread || t->eof ? 0 : EV_READ;
  if (t->woff < t->wlen || (t->ssl && !t->hs_done)) ev |= EV_WRITE;
  if (t->ssl && !t->hs_done) ev |= EV_READ;
  ev_io_stop(EV, &t->io);
  ev_io_set(&t->io, t->fd, ev);
  if (ev) ev_io_start(EV, &t->io);
}

/* Starts t's watcher on t->fd: a client ready to send. */
static tc *tc_watch(tc *t) {
  ev_io_init(&t->io, tc_io, t->fd, EV_READ);
  t->io.data = t;
  tc_update(t);
  return t;
}

/* A plain client on fd, a connected socket (one end of a socketpair). */
static tc *tc_on_fd(int fd) {
  tc *t = kl_xcalloc(1, sizeof *t);
  t->fd = fd;
  return tc_watch(t);
}

static tc *tc_open_at(const char *ip, int port, int tls, int rcvbuf) {
  tc *t = kl_xcalloc(1, sizeof *t);
  struct sockaddr_storage ss;
  socklen_t sl;
  memset(&ss, 0, sizeof ss);
  if (strchr(ip, ':')) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)(void *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    inet_pton(AF_INET6, ip, &a->sin6_addr);
    sl = sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)(void *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip, &a->sin_addr);
    sl = sizeof *a;
  }
  t->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (rcvbuf) setsockopt(t->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  if (connect(t->fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS)
    t->err = errno;
  if (tls) {
    t->ssl = SSL_new(cli_ctx);
    SSL_set_fd(t->ssl, t->fd);
    SSL_set_connect_state(t->ssl);
    SSL_set_tlsext_host_name(t->ssl, "localhost");
    SSL_set_alpn_protos(t->ssl, (const unsigned char *)cli_alpn,
                        (unsigned)strlen(cli_alpn));
  }
  return tc_watch(t);
}

static tc *tc_open(void) {
  return tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 0);
}

static void tc_sendn(tc *t, const char *s, size_t n) {
  if (t->woff == t->wlen) t->woff = t->wlen = 0;
  t->w = kl_xrealloc(t->w, t->wlen + n);
  memcpy(t->w + t->wlen, s, n);
  t->wlen += n;
  tc_update(t);
}

static void tc_send(tc *t, const char *s) { tc_sendn(t, s, strlen(s)); }

static void tc_clear(tc *t) { t->len = 0; }

static void tc_close(tc *t) {
  if (!t) return;
  ev_io_stop(EV, &t->io);
  if (t->ssl) SSL_free(t->ssl);
  close(t->fd);
  free(t->buf);
  free(t->w);
  free(t);
}

/* ---- the server under test ---- */

#define MAXHELD 1024
static kl_httpd_req_t *held[MAXHELD];
static int nheld, nhandled, ncloses, last_reason, ndrains;

static int held_count(void) {
  int n = 0;
  for (int i = 0; i < nheld; i++)
    n += held[i] != NULL;
  return n;
}

static kl_httpd_req_t *find_held(const char *path) {
  for (int i = 0; i < nheld; i++)
    if (held[i] && strcmp(kl_httpd_req_path(held[i], NULL), path) == 0)
      return held[i];
  return NULL;
}

static void forget(kl_httpd_req_t *r) {
  for (int i = 0; i < nheld; i++)
    if (held[i] == r) held[i] = NULL;
}

static void on_close_cb(kl_httpd_req_t *r, int reason, void *ud) {
  (void)ud;
  ncloses++;
  last_reason = reason;
  for (int i = 0; i < nheld; i++)
    if (held[i] == r) held[i] = NULL;
  /* The request's getters still work here. */
  if (!kl_httpd_req_method(r)[0]) KT_FAIL_("%s", "no method in on_close");
}

static void on_drain_cb(kl_httpd_req_t *r, void *ud) {
  (void)r;
  (void)ud;
  ndrains++;
}

/* /drip: 20 chunks of 1 KiB, each written from on_drain of the one
 * before, as a producer that waits for its client does. */
static int ndrips;

static void drip_drain(kl_httpd_req_t *r, void *ud) {
  static char kib[1024];
  (void)ud;
  memset(kib, 'd', sizeof kib);
  if (++ndrips == 20) {
    kl_httpd_stream_end(r);
    return;
  }
  kl_httpd_stream_write(r, kib, sizeof kib);
}

static void handler(kl_httpd_req_t *r, void *ud) {
  (void)ud;
  const char *path = kl_httpd_req_path(r, NULL);
  nhandled++;
  if (strcmp(path, "/drip") == 0) {
    kl_httpd_req_set_callbacks(r, NULL, drip_drain, NULL);
    kl_httpd_stream_begin(r, 200);
    drip_drain(r, NULL); /* the first chunk: the drains count from here */
    ndrips = 0;
  } else if (strncmp(path, "/hold", 5) == 0 ||
             strncmp(path, "/stream", 7) == 0) {
    if (nheld < MAXHELD) held[nheld++] = r;
    kl_httpd_req_set_callbacks(r, on_close_cb, on_drain_cb, NULL);
    if (path[1] == 's') {
      kl_httpd_set_header(r, "Content-Type", "application/json");
      kl_httpd_stream_begin(r, 200);
    }
  } else if (strcmp(path, "/hello") == 0) {
    kl_httpd_set_header(r, "Content-Type", "text/plain");
    kl_httpd_reply(r, 200, "hello", 5);
  } else if (strcmp(path, "/echo") == 0) {
    size_t n;
    const char *b = kl_httpd_req_body(r, &n);
    kl_httpd_set_header(r, "X-Method", kl_httpd_req_method(r));
    kl_httpd_reply(r, 200, b, n);
  } else if (strcmp(path, "/ignore") == 0) {
    /* never answered, no on_close: freed when the client goes */
  } else if (strcmp(path, "/big") == 0) {
    size_t n = 1 << 20;
    char *b = kl_xmalloc(n);
    for (size_t i = 0; i < n; i++)
      b[i] = (char)('a' + i % 26);
    kl_httpd_reply(r, 200, b, n);
    free(b);
  } else if (strcmp(path, "/close") == 0) {
    KT_EQ_INT(kl_httpd_set_header(r, "Connection", "close"), 0);
    kl_httpd_reply(r, 200, "bye", 3);
  } else if (strcmp(path, "/headers") == 0) {
    KT_EQ_INT(kl_httpd_set_header(r, "Content-Length", "3"), KL_EINVAL);
    KT_EQ_INT(kl_httpd_set_header(r, "Transfer-Encoding", "x"), KL_EINVAL);
    KT_EQ_INT(kl_httpd_set_header(r, "X-Bad", "a\r\nb"), KL_EINVAL);
    KT_EQ_INT(kl_httpd_set_header(r, "Bad Name", "a"), KL_EINVAL);
    KT_EQ_INT(kl_httpd_set_header(r, "Connection", "upgrade"), KL_EINVAL);
    KT_EQ_INT(kl_httpd_set_header(r, "X-A", "1"), 0);
    KT_EQ_INT(kl_httpd_reply(r, 99, "", 0), KL_EINVAL);
    KT_EQ_INT(kl_httpd_stream_write(r, "x", 1), KL_EINVAL);
    KT_EQ_INT(kl_httpd_stream_end(r), KL_EINVAL);
    KT_EQ_INT(kl_httpd_stream_abort(r, 5), KL_EINVAL);
    KT_EQ_INT(kl_httpd_reply(r, 204, NULL, 0), 0);
  } else if (strcmp(path, "/free") == 0) {
    kl_httpd_free(srv); /* from inside a callback */
    srv = NULL;
  } else {
    kl_httpd_reply(r, 404, "not found", 9);
  }
}

static void reset(void) {
  memset(held, 0, sizeof held);
  nheld = nhandled = ncloses = last_reason = ndrains = 0;
}

/* Servers start with opts.send_thread set to this. */
static int thread_mode;

static void start_opts(kl_httpd_opts_t *o) {
  char err[256];
  reset();
  o->send_thread = thread_mode;
  kt_now = 1000.0;
  loop = kl_loop_new(&kt_clock);
  EV = kl_loop_ev(loop);
  ev_timer_init(&guard, guard_cb, 0.01, 0.01);
  ev_timer_start(EV, &guard);
  if (!o->host) o->host = "127.0.0.1";
  o->handler = handler;
  srv = kl_httpd_new(loop, o, err, sizeof err);
  if (!srv) KT_FAIL_("kl_httpd_new: %s", err);
}

static void start(void) {
  kl_httpd_opts_t o = {0};
  start_opts(&o);
}

/* Checks that the server holds nothing, then frees it and the loop. */
static void stop(void) {
  if (srv) {
    kl_httpd_stats_t st;
    UNTIL((kl_httpd_get_stats(srv, &st), st.connections == 0));
    kl_httpd_get_stats(srv, &st);
    KT_EQ_INT(st.connections, 0);
    KT_EQ_INT(st.requests, 0);
    KT_EQ_INT(st.streams, 0);
    kl_httpd_free(srv);
    srv = NULL;
  }
  spin(2);
  ev_timer_stop(EV, &guard);
  kl_loop_free(loop);
  loop = NULL;
}

static kl_httpd_stats_t stats(void) {
  kl_httpd_stats_t st;
  kl_httpd_get_stats(srv, &st);
  return st;
}

static int has(const tc *t, const char *s) {
  return t->len && strstr(t->buf, s) != NULL;
}

#define HELLO                                                                  \
  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "            \
  "5\r\n\r\nhello"

/* ---- tests ---- */

static void test_get_exact_bytes(void) {
  start();
  tc *t = tc_open();
  tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(HELLO));
  KT_EQ_MEM(t->buf, t->len, HELLO);
  KT_EQ_INT(t->eof, 0);
  tc_clear(t);
  tc_send(t, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(has(t, "not found"));
  KT_EQ_MEM(t->buf, t->len,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found");
  tc_close(t);
  stop();
}

/* Each response of a connection carries its own header lines only (the
 * connection hands its last one's buffer to the next). */
static void test_keepalive_serves_many_requests(void) {
  const char *echo = "HTTP/1.1 200 OK\r\nX-Method: GET\r\nContent-Length: 0"
                     "\r\n\r\n";
  start();
  tc *t = tc_open();
  for (int i = 0; i < 5; i++) {
    tc_clear(t);
    tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    UNTIL(t->len >= strlen(HELLO));
    KT_EQ_MEM(t->buf, t->len, HELLO);
    tc_clear(t);
    tc_send(t, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    UNTIL(t->len >= strlen(echo));
    KT_EQ_MEM(t->buf, t->len, echo);
  }
  KT_EQ_INT(stats().accepted, 1);
  KT_EQ_INT(stats().responses, 10);
  KT_EQ_INT(t->eof, 0);
  tc_close(t);
  stop();
}

/* Holds a request, pipelines 150 requests of 1 KiB behind it (more than
 * the server buffers while busy), answers, and expects every response. */
static void pipeline_behind_a_held_request(tc *t, int handled) {
  enum { N = 150 };
  static char req[1100];
  int n =
      snprintf(req, sizeof req,
               "GET /hello HTTP/1.1\r\nHost: x\r\nX-Pad: %01000d\r\n\r\n", 0);
  tc_send(t, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  for (int i = 0; i < N; i++)
    tc_sendn(t, req, (size_t)n);
  UNTIL(nhandled == handled + 1);
  spin(20);
  KT_EQ_INT(nhandled, handled + 1);
  kl_httpd_req_t *r = find_held("/hold");
  kl_httpd_reply(r, 200, "", 0);
  forget(r);
  size_t want = 38 + N * strlen(HELLO);
  UNTIL(t->len >= want);
  KT_EQ_INT(t->len, want);
  KT_EQ_INT(nhandled, handled + 1 + N);
}

/* Sends, in one write, a held request and /hello requests filling exactly
 * `total` bytes, answers the held one and expects every response. Over TLS
 * with total = 6 records of 16 KiB, the server's buffer fills in the middle
 * of the last record, which then waits decrypted inside OpenSSL while the
 * socket is empty. */
static void pipeline_exact(tc *t, size_t total, int handled) {
  const char *hold = "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n";
  char *buf = kl_xmalloc(total);
  size_t off = strlen(hold);
  int nreq = 0;
  memcpy(buf, hold, off);
  while (off < total) {
    size_t left = total - off, size = left >= 2048 ? 1024 : left;
    int n =
        snprintf(buf + off, size, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Pad: ");
    memset(buf + off + n, 'p', size - (size_t)n - 4);
    memcpy(buf + off + size - 4, "\r\n\r\n", 4);
    off += size;
    nreq++;
  }
  tc_sendn(t, buf, total);
  free(buf);
  UNTIL(nhandled == handled + 1);
  spin(20);
  kl_httpd_req_t *r = find_held("/hold");
  kl_httpd_reply(r, 200, "", 0);
  forget(r);
  size_t want = 38 + (size_t)nreq * strlen(HELLO);
  UNTIL(t->len >= want);
  KT_EQ_INT(t->len, want);
  KT_EQ_INT(nhandled, handled + 1 + nreq);
}

/* An answer made outside the connection's io callback is on the socket
 * when kl_httpd_reply returns, before the loop turns again (the loop is
 * not run here: the bytes come from the reply itself). */
static void test_reply_from_outside_goes_out_at_once(void) {
  const char *want = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nheld";
  char got[128];
  start();
  tc *t = tc_open();
  tc_send(t, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  kl_httpd_req_t *r = find_held("/hold");
  KT_EQ_INT(kl_httpd_reply(r, 200, "held", 4), 0);
  forget(r);
  struct pollfd pf = {.fd = t->fd, .events = POLLIN};
  KT_EQ_INT(poll(&pf, 1, 5000), 1);
  ssize_t n = recv(t->fd, got, sizeof got, MSG_DONTWAIT);
  KT_EQ_MEM(got, n > 0 ? (size_t)n : 0, want);
  tc_close(t);
  stop();
}

static void test_pipelined_responses_keep_request_order(void) {
  start();
  tc *t = tc_open();
  tc_send(t, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"
             "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
             "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  UNTIL(nhandled == 1);
  spin(10);
  KT_EQ_INT(nhandled, 1); /* the next request waits for this response */
  KT_EQ_INT(t->len, 0);
  KT_EQ_INT(kl_httpd_reply(held[0], 200, "first", 5), 0);
  held[0] = NULL;
  const char *want = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst" HELLO
                     "HTTP/1.1 200 OK\r\nX-Method: POST\r\nContent-Length: "
                     "3\r\n\r\nabc";
  UNTIL(t->len >= strlen(want));
  KT_EQ_MEM(t->buf, t->len, want);
  KT_EQ_INT(nhandled, 3);
  KT_EQ_INT(ncloses, 0);
  tc_clear(t);
  pipeline_behind_a_held_request(t, 3);
  tc_clear(t);
  pipeline_exact(t, 6 * 16384, nhandled);
  tc_close(t);
  stop();
}

static void test_post_bodies_content_length_and_chunked(void) {
  start();
  tc *t = tc_open();
  const char *want = "HTTP/1.1 200 OK\r\nX-Method: POST\r\nContent-Length: "
                     "11\r\n\r\nhello world";
  tc_send(t, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n"
             "hello");
  spin(5);
  KT_EQ_INT(nhandled, 0);
  tc_send(t, " world");
  UNTIL(t->len >= strlen(want));
  KT_EQ_MEM(t->buf, t->len, want);

  /* Chunked, with an extension, a trailer and arbitrary split points. */
  tc_clear(t);
  const char *req = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                    "Chunked\r\n\r\n5;name=v\r\nhello\r\n6\r\n world\r\n"
                    "0\r\nX-Trailer: yes\r\n\r\n";
  for (size_t i = 0, len = strlen(req); i < len; i += 7) {
    tc_sendn(t, req + i, len - i < 7 ? len - i : 7);
    spin(2);
  }
  UNTIL(t->len >= strlen(want));
  KT_EQ_MEM(t->buf, t->len, want);

  /* An empty chunked body and one chunk with bare LF line ends. */
  tc_clear(t);
  tc_send(t, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
             "\r\n3\nabc\n0\n\n");
  UNTIL(has(t, "\r\n\r\nabc"));
  KT_EQ_MEM(t->buf, t->len,
            "HTTP/1.1 200 OK\r\nX-Method: POST\r\nContent-Length: "
            "3\r\n\r\nabc");
  tc_close(t);
  stop();
}

static void test_request_getters_and_query(void) {
  start();
  tc *t = tc_open();
  tc_send(t, "GET /hold/a%2Fb?a=1&b=x%20y&a=2&c=a+b&d&e=%zz&f=%41&&=v#frag "
             "HTTP/1.1\r\nHost: example\r\nX-Test:   Value  \r\n"
             "x-test: second\r\n\r\n");
  UNTIL(nhandled == 1);
  kl_httpd_req_t *r = held[0];
  size_t n;
  KT_EQ_STR(kl_httpd_req_method(r), "GET");
  KT_EQ_STR(kl_httpd_req_path(r, &n), "/hold/a%2Fb");
  KT_EQ_INT(n, 11);
  KT_EQ_STR(kl_httpd_req_query(r, &n),
            "a=1&b=x%20y&a=2&c=a+b&d&e=%zz&f=%41&&=v");
  KT_EQ_STR(kl_httpd_req_param(r, "a", 0, &n), "1");
  KT_EQ_INT(n, 1);
  KT_EQ_STR(kl_httpd_req_param(r, "a", 1, NULL), "2");
  KT_TRUE(kl_httpd_req_param(r, "a", 2, NULL) == NULL);
  KT_EQ_STR(kl_httpd_req_param(r, "b", 0, NULL), "x y");
  KT_EQ_STR(kl_httpd_req_param(r, "c", 0, NULL), "a b");
  KT_EQ_STR(kl_httpd_req_param(r, "d", 0, NULL), "");
  KT_TRUE(kl_httpd_req_param(r, "e", 0, NULL) == NULL); /* bad escape */
  KT_EQ_STR(kl_httpd_req_param(r, "f", 0, NULL), "A");
  KT_EQ_STR(kl_httpd_req_param(r, "", 0, NULL), "v");
  KT_EQ_INT(kl_httpd_req_nparams(r), 7);
  const char *k, *v;
  KT_EQ_INT(kl_httpd_req_param_at(r, 2, &k, &v), 0);
  KT_EQ_STR(k, "a");
  KT_EQ_STR(v, "2");
  KT_EQ_INT(kl_httpd_req_param_at(r, 7, &k, &v), KL_ENOENT);
  KT_EQ_STR(kl_httpd_req_header(r, "x-TEST"), "Value");
  KT_EQ_STR(kl_httpd_req_header(r, "host"), "example");
  KT_TRUE(kl_httpd_req_header(r, "missing") == NULL);
  KT_EQ_INT(kl_httpd_req_nheaders(r), 3);
  KT_EQ_INT(kl_httpd_req_header_at(r, 2, &k, &v), 0);
  KT_EQ_STR(k, "x-test");
  KT_EQ_STR(v, "second");
  KT_EQ_INT(kl_httpd_req_header_at(r, 3, &k, &v), KL_ENOENT);
  KT_EQ_STR(kl_httpd_req_body(r, &n), "");
  KT_EQ_INT(n, 0);
  KT_TRUE(strncmp(kl_httpd_req_remote(r), "127.0.0.1:", 10) == 0);
  KT_EQ_INT(kl_httpd_req_version(r), 11);
  KT_EQ_INT(kl_httpd_req_is_tls(r), 0);

  /* The decoding helper, in place. */
  char p[32];
  strcpy(p, "/a%2Fb%20c+d");
  KT_EQ_INT(kl_httpd_pct_decode(p, strlen(p), p, &n, 0), 0);
  KT_EQ_MEM(p, n, "/a/b c+d");
  KT_EQ_INT(kl_httpd_pct_decode("a+%41", 5, p, &n, 1), 0);
  KT_EQ_MEM(p, n, "a A");
  KT_EQ_INT(kl_httpd_pct_decode("%4", 2, p, &n, 0), KL_EPARSE);
  KT_EQ_INT(kl_httpd_pct_decode("%g0", 3, p, &n, 0), KL_EPARSE);
  kl_httpd_reply(r, 200, "", 0);

  /* Absolute-form and OPTIONS *. */
  tc_clear(t);
  tc_send(t, "GET http://example.com/hold2?q=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 2);
  KT_EQ_STR(kl_httpd_req_path(held[1], NULL), "/hold2");
  KT_EQ_STR(kl_httpd_req_param(held[1], "q", 0, NULL), "1");
  kl_httpd_reply(held[1], 200, "", 0);
  tc_send(t, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(has(t, "404"));
  tc_close(t);
  stop();
}

/* Sends raw bytes on a fresh connection and expects `status` and a close. */
static void expect_error(const char *raw, size_t rawlen, int status) {
  char line[64];
  tc *t = tc_open();
  tc_sendn(t, raw, rawlen);
  snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
  UNTIL(t->eof);
  if (t->len < strlen(line) || memcmp(t->buf, line, strlen(line)) != 0)
    KT_FAIL_("want %d, got \"%.60s\"", status, t->len ? t->buf : "");
  if (!has(t, "Connection: close\r\n"))
    KT_FAIL_("no Connection: close for %d", status);
  tc_close(t);
}

#define ERR(raw, status) expect_error(raw, strlen(raw), status)

/* Sends raw and expects exactly want, then the connection's end. */
static void expect_exact(const char *raw, const char *want) {
  tc *t = tc_open();
  tc_send(t, raw);
  UNTIL(t->eof);
  KT_EQ_MEM(t->buf, t->len, want);
  tc_close(t);
}

static void test_limits_and_malformed_requests(void) {
  kl_httpd_opts_t o = {0};
  o.max_body_bytes = 1024;
  start_opts(&o);
  /* The exact bytes of one error response. */
  expect_exact("BAD\r\n\r\n",
               "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; "
               "charset=utf-8\r\nContent-Length: 15\r\nConnection: "
               "close\r\n\r\n400 Bad Request");

  size_t big = 70000;
  char *raw = kl_xmalloc(big + 200);
  int n = snprintf(raw, 200, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: ");
  memset(raw + n, 'a', big);
  memcpy(raw + n + big, "\r\n\r\n", 4);
  expect_error(raw, (size_t)n + big + 4, 431);
  n = snprintf(raw, 200, "GET /");
  memset(raw + n, 'a', big);
  expect_error(raw, (size_t)n + big, 414);
  n = snprintf(raw, 200, "GET / HTTP/1.1\r\nHost: x\r\n");
  for (int i = 0; i < 200; i++)
    n += snprintf(raw + n, 32, "X-%d: y\r\n", i);
  n += snprintf(raw + n, 8, "\r\n");
  expect_error(raw, (size_t)n, 431); /* too many header lines */
  free(raw);

  ERR("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n", 413);
  ERR("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "800\r\n",
      413);
  ERR("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400);
  ERR("GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n", 400);
  ERR("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
  ERR("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505);
  ERR("GET / HTTX/1.1\r\nHost: x\r\n\r\n", 400);
  ERR("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400);
  ERR("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: "
      "chunked\r\n\r\n",
      400);
  ERR("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: "
      "4\r\n\r\n",
      400);
  ERR("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400);
  ERR("GET / HTTP/1.1\r\n\r\n", 400); /* no Host */
  ERR("GET / HTTP/1.1\r\nHost: x\r\nX: a\001b\r\n\r\n", 400);
  ERR("GET / HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", 417);
  ERR("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "zz\r\n",
      400);
  ERR("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabcX",
      400);
  ERR("GET relative HTTP/1.1\r\nHost: x\r\n\r\n", 400);
  KT_EQ_INT(nhandled, 0);
  stop();
}

static void test_expect_100_continue(void) {
  start();
  tc *t = tc_open();
  tc_send(t, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
             "Content-Length: 4\r\n\r\n");
  UNTIL(t->len >= 25);
  KT_EQ_MEM(t->buf, t->len, "HTTP/1.1 100 Continue\r\n\r\n");
  tc_clear(t);
  tc_send(t, "body");
  UNTIL(has(t, "body"));
  KT_EQ_MEM(t->buf, t->len,
            "HTTP/1.1 200 OK\r\nX-Method: POST\r\nContent-Length: "
            "4\r\n\r\nbody");
  tc_close(t);
  stop();
}

static void test_head_http10_and_connection_close(void) {
  start();
  tc *t = tc_open();
  tc_send(t, "HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n"
             "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  const char *want =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
      "5\r\n\r\n" HELLO;
  UNTIL(t->len >= strlen(want));
  KT_EQ_MEM(t->buf, t->len, want);
  tc_close(t);

  t = tc_open(); /* HTTP/1.0: closes after the response */
  tc_send(t, "GET /hello HTTP/1.0\r\n\r\n");
  UNTIL(t->eof);
  KT_EQ_MEM(t->buf, t->len,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
            "5\r\nConnection: close\r\n\r\nhello");
  tc_close(t);

  t = tc_open(); /* HTTP/1.0 keep-alive */
  tc_send(t, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  UNTIL(t->len >= 90);
  KT_EQ_MEM(t->buf, t->len,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
            "5\r\nConnection: keep-alive\r\n\r\nhello");
  spin(5);
  KT_EQ_INT(t->eof, 0);
  tc_close(t);

  t = tc_open(); /* Connection: close from the client */
  tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
             "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->eof);
  KT_EQ_MEM(t->buf, t->len,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
            "5\r\nConnection: close\r\n\r\nhello");
  KT_EQ_INT(nhandled, 5);
  tc_close(t);

  t = tc_open(); /* Connection: close from the handler, and header rules */
  tc_send(t, "GET /headers HTTP/1.1\r\nHost: x\r\n\r\n"
             "GET /close HTTP/1.1\r\nHost: x\r\n\r\n"
             "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->eof);
  KT_EQ_MEM(t->buf, t->len,
            "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: "
            "close\r\n\r\nbye");
  tc_close(t);
  stop();
}

static void test_timeouts_read_idle_and_fresh(void) {
  start();
  tc *slow = tc_open(), *idle = tc_open(), *fresh = tc_open();
  tc_send(slow, "GET /hello HTTP/1.1\r\nHo");
  tc_send(idle, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(idle->len >= strlen(HELLO));
  UNTIL(stats().connections == 3);
  kt_now += 20; /* within both timeouts: the slow one keeps dripping */
  tc_send(slow, "st");
  spin(5);
  KT_EQ_INT(slow->eof + idle->eof + fresh->eof, 0);
  kt_now += 11; /* 31 s after the slow request's first byte */
  UNTIL(slow->eof && fresh->eof);
  KT_TRUE(strncmp(slow->buf, "HTTP/1.1 408 Request Timeout\r\n", 30) == 0);
  KT_EQ_INT(fresh->len, 0); /* silent: it never sent a byte */
  KT_EQ_INT(idle->eof, 0);
  kt_now += 60; /* 91 s idle */
  UNTIL(idle->eof);
  KT_EQ_INT(idle->len, strlen(HELLO)); /* closed without another byte */
  tc_close(slow);
  tc_close(idle);
  tc_close(fresh);
  stop();
}

#define STREAM_HEAD                                                            \
  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: "   \
  "chunked\r\n\r\n"

static void test_stream_chunks_arrive_in_order_and_promptly(void) {
  start();
  tc *t = tc_open();
  tc_send(t, "GET /stream?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(STREAM_HEAD));
  KT_EQ_MEM(t->buf, t->len, STREAM_HEAD);
  kl_httpd_req_t *r = held[0];
  KT_EQ_INT(stats().streams, 1);
  tc_clear(t);
  KT_EQ_INT(kl_httpd_stream_write(r, "{\"a\":1}\n", 8), 0);
  WITHIN(3, t->len >= 13);
  KT_EQ_MEM(t->buf, t->len, "8\r\n{\"a\":1}\n\r\n");
  char event[300];
  memset(event, 'e', sizeof event);
  tc_clear(t);
  KT_EQ_INT(kl_httpd_stream_write(r, event, sizeof event), 0);
  WITHIN(3, t->len >= 307);
  KT_EQ_INT(t->len, 307);
  KT_TRUE(memcmp(t->buf, "12c\r\neee", 8) == 0);
  KT_TRUE(memcmp(t->buf + 305, "\r\n", 2) == 0);
  tc_clear(t);
  struct iovec iov[3] = {{"{\"type\":", 8}, {"\"ADDED\"", 7}, {"}\n", 2}};
  KT_EQ_INT(kl_httpd_stream_writev(r, iov, 3), 0);
  KT_EQ_INT(kl_httpd_stream_write(r, "", 0), 0); /* no empty chunk */
  for (int i = 0; i < 100; i++)
    kl_httpd_stream_write(r, "x", 1);
  WITHIN(3, t->len >= 23 + 600);
  KT_TRUE(memcmp(t->buf, "11\r\n{\"type\":\"ADDED\"}\n\r\n1\r\nx\r\n", 29) ==
          0);
  KT_EQ_INT(t->len, 23 + 600);
  tc_clear(t);
  KT_EQ_INT(kl_httpd_stream_end(r), 0);
  held[0] = NULL;
  WITHIN(3, t->len >= 5);
  KT_EQ_MEM(t->buf, t->len, "0\r\n\r\n");
  KT_EQ_INT(ncloses, 0);
  KT_EQ_INT(stats().streams, 0);
  /* The connection lives on. */
  tc_clear(t);
  tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(HELLO));
  KT_EQ_MEM(t->buf, t->len, HELLO);

  /* HEAD of a stream: the head only. */
  tc_clear(t);
  tc_send(t, "HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(STREAM_HEAD));
  KT_EQ_INT(kl_httpd_stream_write(held[1], "abc", 3), 0);
  KT_EQ_INT(kl_httpd_stream_end(held[1]), 0);
  held[1] = NULL;
  tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(STREAM_HEAD HELLO));
  KT_EQ_MEM(t->buf, t->len, STREAM_HEAD HELLO);
  tc_close(t);

  /* HTTP/1.0: no chunks; the end is the close. */
  t = tc_open();
  tc_send(t, "GET /stream HTTP/1.0\r\n\r\n");
  UNTIL(nhandled == 5);
  r = held[2];
  kl_httpd_stream_write(r, "raw1", 4);
  kl_httpd_stream_write(r, "raw2", 4);
  kl_httpd_stream_end(r);
  held[2] = NULL;
  UNTIL(t->eof);
  KT_EQ_MEM(t->buf, t->len,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            "Connection: close\r\n\r\nraw1raw2");
  tc_close(t);
  stop();
}

static void test_abort_after_n_bytes(void) {
  start();
  tc *t = tc_open();
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(STREAM_HEAD));
  tc_clear(t);
  kl_httpd_req_t *r = held[0];
  char event[300];
  memset(event, 'e', sizeof event);
  KT_EQ_INT(kl_httpd_stream_write(r, "first", 5), 0);
  KT_EQ_INT(kl_httpd_stream_abort(r, 10), 0);
  KT_EQ_INT(kl_httpd_stream_write(r, event, sizeof event), 0);
  KT_EQ_INT(kl_httpd_stream_write(r, event, sizeof event), 0); /* dropped */
  UNTIL(t->eof);
  KT_EQ_MEM(t->buf, t->len, "5\r\nfirst\r\n12c\r\neeeeeeeeee");
  UNTIL(ncloses == 1);
  KT_EQ_INT(last_reason, KL_ESHUTDOWN);
  KT_TRUE(held[0] == NULL);
  tc_close(t);

  /* The cut may span chunks, and an end after an abort is no clean end. */
  t = tc_open();
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 2);
  r = held[1];
  KT_EQ_INT(kl_httpd_stream_abort(r, 6), 0);
  kl_httpd_stream_write(r, "abcd", 4);
  kl_httpd_stream_write(r, "efgh", 4);
  UNTIL(t->eof);
  KT_EQ_MEM(t->buf, t->len, STREAM_HEAD "4\r\nabcd\r\n4\r\nef");
  UNTIL(ncloses == 2);
  tc_close(t);

  t = tc_open();
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 3);
  r = held[2];
  kl_httpd_stream_abort(r, 100);
  kl_httpd_stream_write(r, "abcd", 4);
  KT_EQ_INT(kl_httpd_stream_end(r), 0); /* owner done: no on_close */
  held[2] = NULL;
  UNTIL(t->eof);
  KT_EQ_MEM(t->buf, t->len, STREAM_HEAD "4\r\nabcd\r\n");
  spin(3);
  KT_EQ_INT(ncloses, 2);
  tc_close(t);

  /* abort(0) before any response: the client sees a bare close. */
  t = tc_open();
  tc_send(t, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 4);
  KT_EQ_INT(kl_httpd_stream_abort(held[3], 0), 0);
  UNTIL(t->eof);
  KT_EQ_INT(t->len, 0);
  UNTIL(ncloses == 3);
  KT_EQ_INT(last_reason, KL_ESHUTDOWN);
  tc_close(t);
  stop();
}

static void test_on_close_when_the_client_goes(void) {
  start();
  tc *s = tc_open(), *a = tc_open(), *ig = tc_open();
  tc_send(s, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  tc_send(a, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  tc_send(ig, "GET /ignore HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 3);
  UNTIL(s->len >= strlen(STREAM_HEAD));
  KT_EQ_INT(stats().requests, 3);
  tc_close(s);
  UNTIL(ncloses == 1);
  KT_EQ_INT(last_reason, KL_EIO);
  KT_EQ_INT(stats().streams, 0);
  tc_close(a);
  UNTIL(ncloses == 2);
  KT_EQ_INT(last_reason, KL_EIO);
  tc_close(ig);
  UNTIL(stats().requests == 0);
  KT_EQ_INT(held_count(), 0);
  KT_EQ_INT(ncloses, 2);
  stop();
}

static void test_close_streams_end_and_drop(void) {
  start();
  tc *t[3];
  for (int i = 0; i < 3; i++) {
    t[i] = tc_open();
    tc_send(t[i], "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  tc *plain = tc_open();
  tc_send(plain, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 4);
  for (int i = 0; i < 3; i++) {
    UNTIL(t[i]->len >= strlen(STREAM_HEAD));
    tc_clear(t[i]);
  }
  KT_EQ_INT(kl_httpd_close_streams(srv, KL_HTTPD_END), 3);
  for (int i = 0; i < 3; i++) {
    UNTIL(t[i]->len >= 5);
    KT_EQ_MEM(t[i]->buf, t[i]->len, "0\r\n\r\n");
  }
  UNTIL(ncloses == 3);
  KT_EQ_INT(last_reason, KL_ESHUTDOWN);
  KT_EQ_INT(held_count(), 1); /* the non-streaming request is untouched */
  /* Each connection serves the next request. */
  for (int i = 0; i < 3; i++) {
    tc_clear(t[i]);
    tc_send(t[i], "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  UNTIL(nhandled == 7);
  KT_EQ_INT(stats().streams, 3);
  KT_EQ_INT(kl_httpd_close_streams(srv, KL_HTTPD_DROP), 3);
  for (int i = 0; i < 3; i++) {
    UNTIL(t[i]->eof);
    tc_close(t[i]);
  }
  UNTIL(ncloses == 6);
  kl_httpd_req_t *r = find_held("/hold");
  KT_EQ_INT(kl_httpd_reply(r, 200, "", 0), 0);
  forget(r);
  UNTIL(has(plain, "Content-Length: 0"));
  tc_close(plain);
  stop();
}

static void test_async_reply_and_large_body(void) {
  start();
  tc *t = tc_open();
  tc_send(t, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  spin(20);
  KT_EQ_INT(t->len, 0);
  kl_httpd_req_t *r = held[0];
  KT_EQ_INT(kl_httpd_set_header(r, "Content-Type", "application/json"), 0);
  KT_EQ_INT(kl_httpd_reply(r, 201, "{}", 2), 0);
  held[0] = NULL;
  const char *want = "HTTP/1.1 201 Created\r\nContent-Type: "
                     "application/json\r\nContent-Length: 2\r\n\r\n{}";
  WITHIN(3, t->len >= strlen(want));
  KT_EQ_MEM(t->buf, t->len, want);

  /* A 1 MiB body arrives whole (written from the caller's memory). */
  tc_clear(t);
  tc_send(t, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
  const char *head = "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
  UNTIL(t->len >= strlen(head) + (1 << 20));
  KT_EQ_INT(t->len, strlen(head) + (1 << 20));
  KT_TRUE(memcmp(t->buf, head, strlen(head)) == 0);
  int ok = 1;
  for (size_t i = 0; i < (1 << 20); i++)
    ok &= t->buf[strlen(head) + i] == (char)('a' + i % 26);
  KT_TRUE(ok);

  /* Replying after the client left: KL_ESHUTDOWN, and no on_close after. */
  tc_clear(t);
  tc_send(t, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 3);
  r = held[1];
  tc_close(t);
  UNTIL(stats().connections == 0);
  KT_EQ_INT(kl_httpd_reply(r, 200, "late", 4), KL_ESHUTDOWN);
  spin(3);
  KT_EQ_INT(ncloses, 0);
  stop();
}

static void test_backpressure_drain_cap_and_write_timeout(void) {
  kl_httpd_opts_t o = {0};
  o.max_stream_buffer = 1 << 20;
  start_opts(&o);
  static char chunk[65536];
  memset(chunk, 'z', sizeof chunk);

  /* A reading client: on_drain follows writes once the buffer drains. */
  tc *fast = tc_open();
  tc_send(fast, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  for (int i = 0; i < 4; i++)
    KT_EQ_INT(kl_httpd_stream_write(held[0], chunk, sizeof chunk), 0);
  UNTIL(ndrains >= 1);
  KT_TRUE(kl_httpd_buffered(held[0]) <= 64 * 1024);
  UNTIL(fast->len >= strlen(STREAM_HEAD) + 4 * (65536 + 9));

  /* A client that never reads: the cap closes its stream, and the loop
   * keeps serving everyone else meanwhile. */
  tc *stuck = tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 4096);
  stuck->noread = 1;
  tc_send(stuck, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 2);
  kl_httpd_req_t *r = held[1];
  int rc = 0, writes = 0;
  while (rc == 0 && writes < 2000) {
    rc = kl_httpd_stream_write(r, chunk, sizeof chunk);
    writes++;
    ev_run(EV, EVRUN_NOWAIT);
  }
  KT_EQ_INT(rc, KL_ELIMIT);
  UNTIL(ncloses == 1);
  KT_EQ_INT(last_reason, KL_ELIMIT);
  tc *other = tc_open();
  tc_send(other, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(other->len >= strlen(HELLO));
  tc_close(other);
  tc_close(stuck);

  /* A producer that respects backpressure meets the write timeout. */
  stuck = tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 4096);
  stuck->noread = 1;
  tc_send(stuck, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 4);
  r = held[2];
  writes = 0;
  while (kl_httpd_buffered(r) < 256 * 1024 && writes++ < 2000) {
    KT_EQ_INT(kl_httpd_stream_write(r, chunk, sizeof chunk), 0);
    ev_run(EV, EVRUN_NOWAIT);
  }
  spin(5);
  KT_EQ_INT(ncloses, 1);
  kt_now += 61;
  UNTIL(ncloses == 2);
  KT_EQ_INT(last_reason, KL_EIO);
  tc_close(stuck);
  kl_httpd_stream_end(held[0]);
  held[0] = NULL;
  tc_close(fast);
  stop();
}

/* A burst of writes that never returns to the loop is sent as it grows,
 * at a quarter of a small max_stream_buffer at the latest: a reading
 * client's stream never reaches its cap for want of a send. */
static void test_burst_sent_before_a_small_cap(void) {
  kl_httpd_opts_t o = {0};
  o.max_stream_buffer = 128 * 1024;
  start_opts(&o);
  tc *t = tc_open();
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  static char chunk[16 * 1024];
  memset(chunk, 'b', sizeof chunk);
  for (int i = 0; i < 32; i++) /* 512 KiB, four times the cap */
    KT_EQ_INT(kl_httpd_stream_write(held[0], chunk, sizeof chunk), 0);
  KT_TRUE(kl_httpd_buffered(held[0]) < 128 * 1024);
  UNTIL(t->len >= strlen(STREAM_HEAD) + 32 * (sizeof chunk + 8));
  KT_EQ_INT(ncloses, 0);
  kl_httpd_stream_end(held[0]);
  held[0] = NULL;
  tc_close(t);
  stop();
}

/* A stream written in bursts faster than its client reads: the backlog is
 * sent from the front while it grows at the back, and every byte arrives
 * in order (a buffer that kept its consumed front while growing once
 * wrote past its end). */
static void test_backlog_sent_while_it_grows(void) {
  start();
  tc *t = tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 8192);
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  enum { N = 600, SZ = 3000 };
  static char ev[SZ];
  char *want = kl_xmalloc(N * (SZ + 16));
  size_t wl = 0;
  for (int i = 0; i < N; i++) {
    memset(ev, 'a' + i % 26, sizeof ev);
    snprintf(ev, 16, "%06d", i);
    KT_EQ_INT(kl_httpd_stream_write(held[0], ev, sizeof ev), 0);
    wl += (size_t)sprintf(want + wl, "bb8\r\n");
    memcpy(want + wl, ev, sizeof ev);
    wl += sizeof ev;
    memcpy(want + wl, "\r\n", 2);
    wl += 2;
    if (i % 8 == 0) ev_run(EV, EVRUN_NOWAIT); /* the client reads a bit */
  }
  UNTIL(t->len >= strlen(STREAM_HEAD) + wl);
  KT_EQ_INT((long long)t->len, (long long)(strlen(STREAM_HEAD) + wl));
  KT_TRUE(memcmp(t->buf + strlen(STREAM_HEAD), want, wl) == 0);
  free(want);
  kl_httpd_stream_end(held[0]);
  held[0] = NULL;
  tc_close(t);
  stop();
}

/* opts.error_pages words the errors httpd answers itself. */
static void test_error_pages(void) {
  kl_httpd_error_page_t pages[] = {
      {413, "application/json", "{\"code\":413}\n"}};
  kl_httpd_opts_t o = {0};
  o.max_body_bytes = 10;
  o.error_pages = pages;
  o.nerror_pages = 1;
  start_opts(&o);
  expect_exact("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n",
               "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: "
               "application/json\r\nContent-Length: 13\r\nConnection: "
               "close\r\n\r\n{\"code\":413}\n");
  ERR("BAD\r\n\r\n", 400); /* the others keep the default */
  stop();
}

static int count_answered(tc **t, int n) {
  int done = 0;
  for (int i = 0; i < n; i++)
    done += t[i]->len >= strlen(HELLO);
  return done;
}

static void test_500_concurrent_connections(void) {
  enum { N = 500 };
  start();
  static tc *t[N];
  for (int i = 0; i < N; i++) {
    t[i] = tc_open();
    tc_send(t[i], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  UNTIL(count_answered(t, N) == N);
  for (int i = 0; i < N; i++)
    if (t[i]->len != strlen(HELLO) || memcmp(t[i]->buf, HELLO, t[i]->len))
      KT_FAIL_("client %d got \"%.40s\"", i, t[i]->buf);
  KT_EQ_INT(stats().connections, N);
  /* Half of them open streams, and all streams are dropped at once. */
  for (int i = 0; i < N / 2; i++)
    tc_send(t[i], "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(stats().streams == N / 2);
  KT_EQ_INT(kl_httpd_close_streams(srv, KL_HTTPD_DROP), N / 2);
  UNTIL(ncloses == N / 2);
  for (int i = 0; i < N; i++)
    tc_close(t[i]);
  stop();
}

static int free_closes;
static void count_close(kl_httpd_req_t *r, int reason, void *ud) {
  (void)r;
  (void)ud;
  KT_EQ_INT(reason, KL_ESHUTDOWN);
  free_closes++;
}

static void test_free_with_requests_in_flight(void) {
  start();
  tc *a = tc_open(), *b = tc_open(), *c = tc_open();
  tc_send(a, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  tc_send(b, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  tc_send(c, "GET /hello HTTP/1.1\r\nHost: x\r\nX: y");
  UNTIL(nhandled == 2);
  kl_httpd_req_set_callbacks(held[0], count_close, NULL, NULL);
  kl_httpd_req_set_callbacks(held[1], count_close, NULL, NULL);
  free_closes = 0;
  kl_httpd_free(srv); /* on_close for both before it returns */
  srv = NULL;
  KT_EQ_INT(free_closes, 2);
  UNTIL(a->eof && b->eof && c->eof);
  tc_close(a);
  tc_close(b);
  tc_close(c);
  stop();

  /* kl_httpd_free from inside the handler. */
  start();
  a = tc_open();
  b = tc_open();
  tc_send(a, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  tc_send(b, "GET /free HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(srv == NULL);
  KT_EQ_INT(ncloses, 1);
  KT_EQ_INT(last_reason, KL_ESHUTDOWN);
  UNTIL(a->eof && b->eof);
  tc_close(a);
  tc_close(b);
  stop();
}

/* ---- the send thread (opts.send_thread) ---- */

static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d))
    n++;
  closedir(d);
  return n;
}

/* Writes event i of a numbered stream (sz bytes, "%06d" then a letter)
 * and appends the chunk the client must read to want. */
static void numbered_event(kl_httpd_req_t *r, int i, size_t sz, char *want,
                           size_t *wl) {
  static char ev[8192];
  memset(ev, 'a' + i % 26, sz);
  snprintf(ev, 16, "%06d", i);
  ev[6] = '-';
  KT_EQ_INT(kl_httpd_stream_write(r, ev, sz), 0);
  *wl += (size_t)sprintf(want + *wl, "%zx\r\n", sz);
  memcpy(want + *wl, ev, sz);
  *wl += sz;
  memcpy(want + *wl, "\r\n", 2);
  *wl += 2;
}

/* Bursts far longer than sync_flush go out through the thread to a client
 * that reads slower than they are written: every byte arrives, in order,
 * the stream's end after them, and the connection serves the next
 * request; the thread sent most of it. */
static void test_send_thread_bursts_arrive_in_order(void) {
  thread_mode = 1;
  kl_httpd_opts_t o = {0};
  o.max_stream_buffer = 1 << 20; /* sync_flush: 256 KiB */
  start_opts(&o);
  tc *t = tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 8192);
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  enum { N = 2400, SZ = 2500 };
  char *want = kl_xmalloc((size_t)N * (SZ + 16) + 16);
  size_t wl = 0;
  kl_httpd_req_t *r = held[0];
  for (int i = 0; i < N; i++) {
    numbered_event(r, i, SZ, want, &wl);
    if (i % 64 == 0) spin(1); /* the client reads a little */
    if (kl_httpd_buffered(r) > 512 * 1024) {
      int drains = ndrains;
      UNTIL(ndrains > drains); /* a producer that respects backpressure */
    }
  }
  KT_EQ_INT(kl_httpd_stream_end(r), 0);
  held[0] = NULL;
  memcpy(want + wl, "0\r\n\r\n", 5);
  wl += 5;
  UNTIL(t->len >= strlen(STREAM_HEAD) + wl);
  KT_EQ_INT((long long)t->len, (long long)(strlen(STREAM_HEAD) + wl));
  KT_TRUE(memcmp(t->buf + strlen(STREAM_HEAD), want, wl) == 0);
  KT_TRUE(stats().thread_sent > wl / 2 && stats().thread_sent <= wl);
  KT_EQ_INT(ncloses, 0);
  tc_clear(t);
  tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(HELLO));
  KT_EQ_MEM(t->buf, t->len, HELLO);
  free(want);
  tc_close(t);
  stop();
  thread_mode = 0;
}

/* A client of /stream that reads nothing (a 4 KiB receive buffer), the
 * server's n-th request. */
static tc *stuck_stream(int n) {
  tc *t = tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 4096);
  t->noread = 1;
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == n);
  return t;
}

/* Writes up to n chunks of 64 KiB in one burst, stopping at the first
 * that fails; returns how many were taken. */
static int write_chunks(kl_httpd_req_t *r, int n) {
  static char chunk[65536];
  memset(chunk, 'q', sizeof chunk);
  for (int i = 0; i < n; i++)
    if (kl_httpd_stream_write(r, chunk, sizeof chunk) != 0) return i;
  return n;
}

/* Writes 64 KiB chunks to r until its client's socket is full and more
 * than 256 KiB stay unsent: then the thread holds a job waiting on the
 * socket. After each chunk it waits until the unsent count stops moving:
 * on loopback the kernel takes megabytes before the socket is full. */
static void fill_socket(kl_httpd_req_t *r) {
  for (int i = 0; i < 512 && kl_httpd_buffered(r) <= 256 * 1024; i++) {
    KT_EQ_INT(write_chunks(r, 1), 1);
    const struct timespec ms = {0, 1000000};
    size_t before;
    do {
      before = kl_httpd_buffered(r);
      nanosleep(&ms, NULL);
      spin(1);
    } while (kl_httpd_buffered(r) != before);
  }
}

/* A client that stops reading while the thread holds its bytes: it goes
 * away (the thread's send fails: on_close with KL_EIO), it is closed by
 * the cap or the write timeout, or the server is freed under it. Each
 * time the socket is closed once the thread lets go of it, and no
 * descriptor is left behind. (How much a loopback socket takes before it
 * is full depends on what the kernel learnt of 127.0.0.1 from earlier
 * connections: fill_socket writes until it is.) */
static void test_send_thread_lets_go_of_dead_clients(void) {
  thread_mode = 1;
  int fds = open_fds();
  kl_httpd_opts_t o = {0};
  o.max_stream_buffer = 1 << 20;
  start_opts(&o);

  /* The client goes. */
  tc *t = stuck_stream(1);
  fill_socket(held[0]); /* a job out, waiting */
  KT_TRUE(kl_httpd_buffered(held[0]) > 256 * 1024);
  tc_close(t);
  UNTIL(ncloses == 1);
  KT_EQ_INT(last_reason, KL_EIO);

  /* The cap: writes go on past it. */
  t = stuck_stream(2);
  KT_TRUE(write_chunks(held[1], 200) <
          200); /* 12.5 MiB: more than any socket takes */
  UNTIL(ncloses == 2);
  KT_EQ_INT(last_reason, KL_ELIMIT);
  tc_close(t);

  /* The write timeout, while the thread waits on the socket. */
  t = stuck_stream(3);
  fill_socket(held[2]);
  KT_TRUE(kl_httpd_buffered(held[2]) > 256 * 1024);
  spin(5);
  kt_now += 59;
  spin(5);
  KT_EQ_INT(ncloses, 2);
  kt_now += 2;
  UNTIL(ncloses == 3);
  KT_EQ_INT(last_reason, KL_EIO);
  tc_close(t);
  UNTIL(stats().connections == 0);

  /* The server freed with a job out. */
  t = stuck_stream(4);
  fill_socket(held[3]);
  KT_TRUE(kl_httpd_buffered(held[3]) > 256 * 1024);
  kl_httpd_free(srv);
  srv = NULL;
  KT_EQ_INT(ncloses, 4);
  KT_EQ_INT(last_reason, KL_ESHUTDOWN);
  tc_close(t);
  stop();
  KT_EQ_INT(open_fds(), fds);
  thread_mode = 0;
}

/* An HTTP/1.0 stream (its end is the close) whose client half-closes
 * while the thread holds all the bytes: they still arrive, then the
 * close. */
static void test_send_thread_finishes_for_a_half_closed_client(void) {
  thread_mode = 1;
  start();
  tc *t = tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 4096);
  t->noread = 1;
  tc_send(t, "GET /stream HTTP/1.0\r\n\r\n");
  UNTIL(nhandled == 1);
  UNTIL(t->woff == t->wlen);
  KT_EQ_INT(write_chunks(held[0], 16), 16); /* 1 MiB: all in one job */
  KT_EQ_INT(kl_httpd_stream_end(held[0]), 0);
  held[0] = NULL;
  shutdown(t->fd, SHUT_WR);
  spin(20); /* the server reads the end of the request side */
  t->noread = 0;
  tc_update(t);
  UNTIL(t->eof);
  const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Connection: close\r\n\r\n";
  KT_EQ_INT((long long)t->len, (long long)(strlen(head) + 16 * 65536));
  KT_TRUE(memcmp(t->buf, head, strlen(head)) == 0);
  KT_EQ_INT(ncloses, 0);
  tc_close(t);
  stop();
  thread_mode = 0;
}

/* What the thread has sent is no longer unsent: kl_httpd_buffered (and
 * the cap) count only the bytes still to go, also before the loop takes
 * the job back. The client's receive buffer holds the whole burst, so the
 * thread sends it all while the loop sleeps. */
static void test_send_thread_counts_only_unsent_bytes(void) {
  thread_mode = 1;
  kl_httpd_opts_t o = {0};
  o.max_stream_buffer = 4 << 20; /* sync_flush: 1 MiB */
  start_opts(&o);
  tc *t = tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 4 << 20);
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  UNTIL(t->len >= strlen(STREAM_HEAD));
  KT_EQ_INT(write_chunks(held[0], 16), 16); /* 1 MiB and its framing */
  KT_TRUE(kl_httpd_buffered(held[0]) >= 16 * 65536);
  struct timespec ms5 = {0, 5000000};
  for (int i = 0; i < 400 && kl_httpd_buffered(held[0]) > 0; i++)
    nanosleep(&ms5, NULL); /* the loop sleeps; the thread sends */
  KT_EQ_INT(kl_httpd_buffered(held[0]), 0);
  UNTIL(t->len >= strlen(STREAM_HEAD) + 16 * (65536 + 9));
  KT_EQ_INT(kl_httpd_stream_end(held[0]), 0);
  held[0] = NULL;
  UNTIL(t->len == strlen(STREAM_HEAD) + 16 * (65536 + 9) + 5);
  tc_close(t);
  stop();
  thread_mode = 0;
}

/* A stream whose client reads only once it is over, ended by how: 0 an
 * abort 100 bytes into the next write, 1 kl_httpd_close_streams (the
 * terminating chunk), 2 the same dropping it. Returns what the client
 * got, head and all, up to the close or the end. */
static char *ended_stream(int how, size_t *len) {
  start();
  tc *t = tc_open_at("127.0.0.1", kl_httpd_port(srv), 0, 4096);
  t->noread = 1;
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 1);
  kl_httpd_req_t *r = held[0];
  KT_EQ_INT(write_chunks(r, 20), 20); /* with the thread: a job is out */
  if (how == 0) {
    KT_EQ_INT(kl_httpd_stream_abort(r, 100), 0);
    KT_EQ_INT(write_chunks(r, 2), 2);
  } else {
    KT_EQ_INT(
        kl_httpd_close_streams(srv, how == 1 ? KL_HTTPD_END : KL_HTTPD_DROP),
        1);
  }
  spin(5);
  t->noread = 0;
  tc_update(t);
  if (how == 1) {
    UNTIL(t->len >= strlen(STREAM_HEAD) + 20 * (65536 + 9) + 5);
    spin(20);
  } else {
    UNTIL(t->eof);
  }
  char *got = kl_xmalloc(t->len + 1);
  memcpy(got, t->buf, t->len);
  *len = t->len;
  tc_close(t);
  stop();
  return got;
}

/* Ending a stream while the thread holds part of it (an abort N bytes on,
 * close_streams ending it) gives the client exactly what the loop's own
 * sends give it; dropping it (unsent bytes discarded) gives a part of
 * that, from its start. */
static void test_send_thread_ends_streams_as_the_loop_does(void) {
  size_t whole = strlen(STREAM_HEAD) + 20 * (65536 + 9);
  size_t want[2] = {whole + 7 + 100, whole + 5}; /* "10000\r\n", "0\r\n\r\n" */
  for (int how = 0; how < 3; how++) {
    size_t n0, n1;
    char *loop_got = ended_stream(how, &n0);
    thread_mode = 1;
    char *thread_got = ended_stream(how, &n1);
    thread_mode = 0;
    if (how < 2) {
      KT_EQ_INT((long long)n0, (long long)want[how]);
      KT_EQ_INT((long long)n1, (long long)n0);
    } else {
      KT_TRUE(n1 >= strlen(STREAM_HEAD) && n1 <= n0);
    }
    KT_TRUE(n1 <= n0 && memcmp(loop_got, thread_got, n1) == 0);
    free(loop_got);
    free(thread_got);
  }
}

/* The stream tests whose writes come in bursts, again with the thread:
 * the same bytes, drains, cap, timeout and order. Not the burst to a
 * small cap: with the thread, staying under the cap takes the thread
 * being run within the loop's short waits for it, which a loaded machine
 * does not promise (the cap then closes the stream, as designed). */
static void test_stream_bursts_again_with_the_send_thread(void) {
  thread_mode = 1;
  test_backpressure_drain_cap_and_write_timeout();
  test_backlog_sent_while_it_grows();
  test_abort_after_n_bytes();
  test_close_streams_end_and_drop();
  test_free_with_requests_in_flight();
  thread_mode = 0;
}

static void test_ipv6_and_bad_options(void) {
  char err[256];
  kl_httpd_opts_t o = {0};
  o.host = "::1";
  start_opts(&o);
  if (srv) {
    tc *t = tc_open_at("::1", kl_httpd_port(srv), 0, 0);
    tc_send(t, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
    UNTIL(nhandled == 1);
    KT_TRUE(strncmp(kl_httpd_req_remote(held[0]), "[::1]:", 6) == 0);
    kl_httpd_reply(held[0], 200, "", 0);
    tc_close(t);
  } else {
    kt_current_failed = 0; /* no IPv6 on this host: not a failure */
    fprintf(stderr, "  (no IPv6 loopback: skipped)\n");
  }
  stop();

  loop = kl_loop_new(&kt_clock);
  o.host = "not-an-ip";
  o.handler = handler;
  KT_TRUE(kl_httpd_new(loop, &o, err, sizeof err) == NULL);
  KT_TRUE(strstr(err, "not an IP address") != NULL);
  o.host = "127.0.0.1";
  o.tls_cert_file = "/nonexistent/cert.pem";
  o.tls_key_file = "/nonexistent/key.pem";
  KT_TRUE(kl_httpd_new(loop, &o, err, sizeof err) == NULL);
  KT_TRUE(strstr(err, "TLS certificate") != NULL);
  o.tls_key_file = NULL;
  KT_TRUE(kl_httpd_new(loop, &o, err, sizeof err) == NULL);
  /* The port is taken. */
  o.tls_cert_file = NULL;
  kl_httpd_t *a = kl_httpd_new(loop, &o, err, sizeof err);
  KT_TRUE(a != NULL);
  o.port = kl_httpd_port(a);
  KT_TRUE(kl_httpd_new(loop, &o, err, sizeof err) == NULL);
  KT_TRUE(strstr(err, "in use") != NULL);
  kl_httpd_free(a);
  kl_httpd_free(NULL);
  kl_loop_free(loop);
  loop = NULL;
}

static void test_max_connections_and_date_header(void) {
  kl_httpd_opts_t o = {0};
  o.max_connections = 2;
  o.send_date = 1;
  start_opts(&o);
  tc *t[3];
  for (int i = 0; i < 3; i++) {
    t[i] = tc_open();
    tc_send(t[i], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  UNTIL(t[0]->len && t[1]->len);
  spin(10);
  KT_EQ_INT(t[2]->len, 0); /* waits in the backlog */
  KT_EQ_INT(stats().connections, 2);
  /* "Date: Sun, 29 Nov 2026 23:12:28 GMT" */
  const char *d = strstr(t[0]->buf, "\r\nDate: ");
  KT_TRUE(d != NULL);
  if (d) {
    KT_TRUE(d[11] == ',' && d[15] == ' ' && d[19] == ' ' && d[24] == ' ' &&
            d[27] == ':' && d[30] == ':' && memcmp(d + 33, " GMT\r\n", 6) == 0);
  }
  tc_close(t[0]);
  UNTIL(t[2]->len >= strlen(HELLO));
  KT_TRUE(strncmp(t[2]->buf, "HTTP/1.1 200 OK\r\nDate: ", 23) == 0);
  tc_close(t[1]);
  tc_close(t[2]);
  stop();
}

static char tls_dir[64], tls_cert[128], tls_key[128];

static int make_cert(void) {
  char cmd[512];
  strcpy(tls_dir, "/tmp/kl_httpd_tlsXXXXXX");
  if (!mkdtemp(tls_dir)) return -1;
  snprintf(tls_cert, sizeof tls_cert, "%s/cert.pem", tls_dir);
  snprintf(tls_key, sizeof tls_key, "%s/key.pem", tls_dir);
  snprintf(cmd, sizeof cmd,
           "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
           "-nodes -keyout %s -out %s -subj /CN=localhost -days 1 "
           ">/dev/null 2>&1",
           tls_key, tls_cert);
  return system(cmd) == 0 ? 0 : -1;
}

/* The offset of the first frame of type for stream id at or after offset
 * from (a frame's start) in what the raw HTTP/2 client t received; -1 when
 * there is none. */
static long h2_find(const tc *t, size_t from, int type, unsigned id) {
  for (size_t off = from; off + 9 <= t->len;) {
    const unsigned char *f = (const unsigned char *)t->buf + off;
    size_t flen = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
    unsigned sid = ((unsigned)f[5] & 0x7f) << 24 | (unsigned)f[6] << 16 |
                   (unsigned)f[7] << 8 | f[8];
    if (off + 9 + flen > t->len) break;
    if (f[3] == type && sid == id) return (long)off;
    off += 9 + flen;
  }
  return -1;
}

static long h2_first(const tc *t, int type, unsigned id) {
  return h2_find(t, 0, type, id);
}

/* 1 + the error code of the first RST_STREAM for stream id in what the
 * raw HTTP/2 client t received; 0 when there is none. */
static int h2_rst(const tc *t, unsigned id) {
  long off = h2_first(t, 3, id);
  if (off < 0) return 0;
  const unsigned char *f = (const unsigned char *)t->buf + off;
  if (f[0] || f[1] || f[2] != 4) return 0; /* not a well-formed one */
  return 1 + (int)((unsigned)f[9] << 24 | (unsigned)f[10] << 16 |
                   (unsigned)f[11] << 8 | f[12]);
}

/* The sum of the WINDOW_UPDATE increments for stream id (0: the
 * connection) in what the raw HTTP/2 client t received. */
static size_t h2_credit(const tc *t, unsigned id) {
  size_t sum = 0;
  for (long off = h2_find(t, 0, 8, id); off >= 0;
       off = h2_find(t, (size_t)off + 13, 8, id)) {
    const unsigned char *f = (const unsigned char *)t->buf + off;
    sum += ((size_t)f[9] & 0x7f) << 24 | (size_t)f[10] << 16 |
           (size_t)f[11] << 8 | f[12];
  }
  return sum;
}

/* Sends one HTTP/2 frame on the raw client t. */
static void h2_frame(tc *t, int type, int flags, unsigned id, const char *p,
                     size_t n) {
  const char hd[9] = {
      (char)(n >> 16),  (char)(n >> 8),  (char)n,
      (char)type,       (char)flags,     (char)(id >> 24 & 0x7f),
      (char)(id >> 16), (char)(id >> 8), (char)id};
  tc_sendn(t, hd, 9);
  if (n) tc_sendn(t, p, n);
}

static void test_tls_round_trip(void) {
  if (make_cert() < 0) {
    KT_FAIL_("%s", "cannot make a certificate with the openssl CLI");
    return;
  }
  kl_httpd_opts_t o = {0};
  o.tls_cert_file = tls_cert;
  o.tls_key_file = tls_key;
  start_opts(&o);
  cli_ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(cli_ctx, SSL_VERIFY_PEER, NULL);
  KT_EQ_INT(SSL_CTX_load_verify_locations(cli_ctx, tls_cert, NULL), 1);
  tc *t = tc_open_at("127.0.0.1", kl_httpd_port(srv), 1, 0);
  tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(HELLO) || t->err || t->eof);
  KT_EQ_MEM(t->buf, t->len, HELLO);
  const unsigned char *proto;
  unsigned plen;
  SSL_get0_alpn_selected(t->ssl, &proto, &plen);
  KT_EQ_MEM(proto, plen, "http/1.1");
  KT_EQ_INT(SSL_get_verify_result(t->ssl), X509_V_OK);

  /* A chunked POST, then a stream over the same TLS connection. */
  tc_clear(t);
  tc_send(t, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
             "\r\n4\r\ntls!\r\n0\r\n\r\n");
  UNTIL(has(t, "tls!"));
  tc_clear(t);
  tc_send(t, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(nhandled == 3);
  KT_EQ_INT(kl_httpd_req_is_tls(held[0]), 1);
  static char big[100000];
  memset(big, 'q', sizeof big);
  kl_httpd_stream_write(held[0], "{}\n", 3);
  kl_httpd_stream_write(held[0], big, sizeof big);
  kl_httpd_stream_end(held[0]);
  held[0] = NULL;
  size_t want = strlen(STREAM_HEAD) + 8 + 7 + sizeof big + 2 + 5;
  UNTIL(t->len >= want);
  KT_EQ_INT(t->len, want);
  KT_TRUE(memcmp(t->buf + strlen(STREAM_HEAD), "3\r\n{}\n\r\n186a0\r\nqq",
                 17) == 0);
  KT_TRUE(memcmp(t->buf + want - 7, "\r\n0\r\n\r\n", 7) == 0);

  tc_clear(t);
  pipeline_behind_a_held_request(t, 3);
  tc_clear(t);
  pipeline_exact(t, 6 * 16384, nhandled);

  /* A client that offers h2 as well gets it, as from kube-apiserver. */
  cli_alpn = "\x02h2\x08http/1.1";
  tc *h2 = tc_open_at("127.0.0.1", kl_httpd_port(srv), 1, 0);
  /* the preface and an empty SETTINGS frame */
  tc_sendn(h2, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0", 33);
  UNTIL(h2->len >= 9 || h2->err || h2->eof);
  SSL_get0_alpn_selected(h2->ssl, &proto, &plen);
  KT_EQ_MEM(proto, plen, "h2");
  KT_EQ_INT(h2->buf[3], 4); /* the server's SETTINGS frame comes first */
  cli_alpn = "\x08http/1.1";

  /* A request whose body never comes is reset (CANCEL) read_timeout after
   * its HEADERS: POST / on stream 1, END_HEADERS but not END_STREAM. A
   * stream whose request came whole (GET /stream on 3) stays. */
  int before = nheld;
  tc_sendn(h2, "\0\0\6\1\4\0\0\0\1\x83\x87\x84\x41\x01x", 15);
  tc_sendn(h2, "\0\0\x0e\1\5\0\0\0\3\x82\x87\x44\x07/stream\x41\x01x", 23);
  UNTIL(nheld == before + 1);
  spin(5);
  KT_EQ_INT(h2_rst(h2, 1), 0);
  kt_now += 31;
  UNTIL(h2_rst(h2, 1) || h2->err || h2->eof);
  KT_EQ_INT(h2_rst(h2, 1), 1 + 8); /* CANCEL */
  spin(5);
  KT_EQ_INT(h2_rst(h2, 3), 0);
  KT_EQ_INT(kl_httpd_stream_end(held[before]), 0);
  held[before] = NULL;

  /* A response whose bytes find no room in the client's window (this one
   * never opens it) is reset write_timeout after its last progress, and
   * its owner hears that it closed. */
  before = nheld;
  tc_sendn(h2, "\0\0\x0e\1\5\0\0\0\5\x82\x87\x44\x07/stream\x41\x01x", 23);
  UNTIL(nheld == before + 1);
  static char win[100000];
  memset(win, 'w', sizeof win);
  size_t seen = h2->len;
  KT_EQ_INT(kl_httpd_stream_write(held[before], win, sizeof win), 0);
  UNTIL(h2->len >= seen + 65535); /* the stream's first window */
  spin(5);
  KT_EQ_INT(h2_rst(h2, 5), 0);
  kt_now += 59;
  spin(5);
  KT_EQ_INT(h2_rst(h2, 5), 0);
  kt_now += 2;
  UNTIL(h2_rst(h2, 5) || h2->err || h2->eof);
  KT_EQ_INT(h2_rst(h2, 5), 1 + 8); /* CANCEL */
  UNTIL(held[before] == NULL);
  KT_EQ_INT(last_reason, KL_EIO);

  /* A client that is not speaking TLS is dropped. */
  tc *plain = tc_open();
  tc_send(plain, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(plain->eof);
  tc_close(plain);
  tc_close(t);

  /* Freeing the server tells the h2 client with GOAWAY (NO_ERROR). */
  UNTIL(stats().connections == 1);
  kl_httpd_free(srv);
  srv = NULL;
  UNTIL(h2->eof || h2->err);
  int goaway = 0;
  for (size_t off = 0; off + 9 <= h2->len;) {
    const unsigned char *f = (const unsigned char *)h2->buf + off;
    size_t flen = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
    if (f[3] == 7 && flen >= 8 && off + 9 + flen <= h2->len)
      goaway = 1 + (f[13] | f[14] | f[15] | f[16]); /* 1: NO_ERROR */
    off += 9 + flen;
  }
  KT_EQ_INT(goaway, 1);
  tc_close(h2);
  stop();

  /* What on_drain writes goes out without waiting for the client's next
   * frame (curl sends none over h2), and over HTTP/1.1 a drained buffer
   * calls on_drain even when the write's own flush emptied it. */
  static const char *const protos[][2] = {{"--http2", "2 20480"},
                                          {"--http1.1", "1.1 20480"}};
  for (int k = 0; k < 2; k++) {
    start_opts(&o);
    char cmd[512], out[160];
    snprintf(out, sizeof out, "%s/drip.out", tls_dir);
    snprintf(cmd, sizeof cmd,
             "curl -s -k %s -o /dev/null -w '%%{http_version} "
             "%%{size_download}' https://127.0.0.1:%d/drip >%s 2>&1",
             protos[k][0], kl_httpd_port(srv), out);
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
      _exit(127);
    }
    int wst = 0;
    /* done when reaped, here or by libev's own SIGCHLD handler */
    UNTIL(waitpid(pid, &wst, WNOHANG) != 0);
    char got[64] = "";
    FILE *f = fopen(out, "r");
    if (f) {
      if (!fgets(got, sizeof got, f)) got[0] = '\0';
      fclose(f);
    }
    KT_EQ_STR(got, protos[k][1]);
    KT_EQ_INT(ndrips, 20);
    unlink(out);
    stop();
  }

  /* The request bodies still arriving on one h2 connection may add up to
   * 4 of the largest; the stream that would pass that is refused
   * (REFUSED_STREAM: the client may send it again), and a body that
   * completes makes room. */
  o.max_body_bytes = 1000;
  start_opts(&o);
  cli_alpn = "\x02h2\x08http/1.1";
  h2 = tc_open_at("127.0.0.1", kl_httpd_port(srv), 1, 0);
  cli_alpn = "\x08http/1.1";
  tc_sendn(h2, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0", 33);
  static char part[900];
  memset(part, 'b', sizeof part);
  for (unsigned id = 1; id <= 9; id += 2) { /* POST /, bodies unfinished */
    h2_frame(h2, 1, 4, id, "\x83\x87\x84\x41\x01x", 6);
    h2_frame(h2, 0, 0, id, part, sizeof part);
  }
  UNTIL(h2_rst(h2, 9) || h2->err || h2->eof);
  KT_EQ_INT(h2_rst(h2, 9), 1 + 7); /* REFUSED_STREAM */
  h2_frame(h2, 0, 1, 1, "", 0);    /* stream 1's body is complete */
  h2_frame(h2, 1, 4, 11, "\x83\x87\x84\x41\x01x", 6);
  h2_frame(h2, 0, 0, 11, part, sizeof part);
  h2_frame(h2, 1, 4, 13, "\x83\x87\x84\x41\x01x", 6);
  h2_frame(h2, 0, 0, 13, part, sizeof part);
  UNTIL(h2_rst(h2, 13) || h2->err || h2->eof);
  KT_EQ_INT(h2_rst(h2, 13), 1 + 7);
  for (unsigned id = 1; id <= 11; id += 2)
    KT_EQ_INT(h2_rst(h2, id), id == 9 ? 1 + 7 : 0);
  tc_close(h2);

  /* A request answered before its body came (413: too large, by its
   * content-length on stream 1, by its DATA on streams 3 and 5) gets its
   * whole answer, then its stream lingers as an HTTP/1.1 connection does:
   * the client that ends its body (3) is not reset; the one that sends on
   * past 1 MiB (5), or for 2 s (1), is asked to stop with RST_STREAM
   * NO_ERROR (RFC 9113, 8.1). What they send is dropped within the flow
   * control windows the server gives back. */
  cli_alpn = "\x02h2\x08http/1.1";
  h2 = tc_open_at("127.0.0.1", kl_httpd_port(srv), 1, 0);
  cli_alpn = "\x08http/1.1";
  tc_sendn(h2, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0", 33);
  /* POST / with content-length: 2000 (literal, static name 28) */
  h2_frame(h2, 1, 4, 1,
           "\x83\x87\x84\x41\x01x\x0f\x0d\x04"
           "2000",
           13);
  size_t conn_sent = 0, sent5 = 2 * sizeof part;
  for (unsigned id = 3; id <= 5; id += 2) {
    h2_frame(h2, 1, 4, id, "\x83\x87\x84\x41\x01x", 6);
    h2_frame(h2, 0, 0, id, part, sizeof part);
    h2_frame(h2, 0, 0, id, part, sizeof part);
    conn_sent += 2 * sizeof part;
  }
  UNTIL((h2_first(h2, 0, 1) >= 0 && h2_first(h2, 0, 3) >= 0 &&
         h2_first(h2, 0, 5) >= 0) ||
        h2->err || h2->eof);
  for (unsigned id = 1; id <= 5; id += 2) {
    long data = h2_first(h2, 0, id);
    KT_TRUE(data >= 0);
    if (data < 0) continue;
    const char *f = h2->buf + data;
    KT_EQ_INT(f[4] & 1, 1); /* END_STREAM: the whole answer */
    KT_EQ_MEM(f + 9, (size_t)(unsigned char)f[2],
              "413 Request Entity Too Large");
    KT_EQ_INT(h2_rst(h2, id), 0);
  }
  h2_frame(h2, 0, 1, 3, "", 0); /* stream 3's body ends */
  static char more[16000];
  memset(more, 'm', sizeof more);
  while (sent5 <= 1024 * 1024 + 2 * sizeof more && !h2_rst(h2, 5)) {
    UNTIL((conn_sent + sizeof more <= 65535 + h2_credit(h2, 0) &&
           sent5 + sizeof more <= 65535 + h2_credit(h2, 5)) ||
          h2_rst(h2, 5) || h2->err || h2->eof);
    if (h2->err || h2->eof) break;
    h2_frame(h2, 0, 0, 5, more, sizeof more);
    conn_sent += sizeof more;
    sent5 += sizeof more;
  }
  UNTIL(h2_rst(h2, 5) || h2->err || h2->eof);
  KT_EQ_INT(h2_rst(h2, 5), 1 + 0); /* NO_ERROR */
  KT_TRUE(sent5 > 1024 * 1024);
  KT_EQ_INT(h2_rst(h2, 1), 0);
  kt_now += 1.9;
  for (int i = 0; i < 10; i++)
    ev_run(EV, EVRUN_NOWAIT);
  KT_EQ_INT(h2_rst(h2, 1), 0);
  kt_now += 0.2; /* 2 s after its answer */
  UNTIL(h2_rst(h2, 1) || h2->err || h2->eof);
  KT_EQ_INT(h2_rst(h2, 1), 1 + 0);
  KT_EQ_INT(h2_rst(h2, 3), 0);
  KT_EQ_INT(h2->err, 0);
  KT_EQ_INT(h2->eof, 0);
  tc_close(h2);
  stop();
  SSL_CTX_free(cli_ctx);
  cli_ctx = NULL;
  unlink(tls_cert);
  unlink(tls_key);
  rmdir(tls_dir);
}

/* A socket handed to the server is served as an accepted one: HTTP/1.1,
 * or HTTP/2 from its first byte (prior knowledge). */
/* OpenSSL's allocations, counted by these (set first thing in main): the
 * bytes it holds now. */
static _Atomic size_t ossl_live;

static void *ossl_malloc(size_t n, const char *file, int line) {
  (void)file;
  (void)line;
  size_t *p = malloc(n + 16); /* the size, then the block, 16-aligned */
  if (!p) return NULL;
  p[0] = n;
  ossl_live += n;
  return (char *)p + 16;
}

static void ossl_free(void *q, const char *file, int line) {
  (void)file;
  (void)line;
  if (!q) return;
  size_t *p = (size_t *)(void *)((char *)q - 16);
  ossl_live -= p[0];
  free(p);
}

static void *ossl_realloc(void *q, size_t n, const char *file, int line) {
  if (!q) return ossl_malloc(n, file, line);
  size_t *p = (size_t *)(void *)((char *)q - 16), old = p[0];
  p = realloc(p, n + 16);
  if (!p) return NULL;
  p[0] = n;
  ossl_live += n - old;
  return (char *)p + 16;
}

/* The bytes OpenSSL holds while one TLS connection that has been answered
 * stays open, with tls_keep_buffers as given. */
static size_t heap_with_an_answered_tls_connection(int keep) {
  kl_httpd_opts_t o = {0};
  o.tls_cert_file = tls_cert;
  o.tls_key_file = tls_key;
  o.tls_keep_buffers = keep;
  start_opts(&o);
  tc *t = tc_open_at("127.0.0.1", kl_httpd_port(srv), 1, 0);
  tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  UNTIL(t->len >= strlen(HELLO) || t->err || t->eof);
  KT_EQ_MEM(t->buf, t->len, HELLO);
  for (int i = 0; i < 10; i++)
    ev_run(EV, EVRUN_NOWAIT);
  size_t used = ossl_live;
  tc_close(t);
  stop();
  return used;
}

/* tls_keep_buffers: an idle TLS connection holds OpenSSL's read and write
 * buffers (33,296 bytes here) instead of giving them back after each
 * record. */
static void test_tls_keep_buffers(void) {
  if (make_cert() < 0) {
    KT_FAIL_("%s", "cannot make a certificate with the openssl CLI");
    return;
  }
  cli_ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(cli_ctx, SSL_VERIFY_PEER, NULL);
  KT_EQ_INT(SSL_CTX_load_verify_locations(cli_ctx, tls_cert, NULL), 1);
  heap_with_an_answered_tls_connection(0); /* OpenSSL's own first uses */
  size_t released = heap_with_an_answered_tls_connection(0);
  size_t kept = heap_with_an_answered_tls_connection(1);
  KT_TRUE(kept >= released + 24 * 1024);
  KT_TRUE(kept <= released + 48 * 1024);
  SSL_CTX_free(cli_ctx);
  cli_ctx = NULL;
  unlink(tls_cert);
  unlink(tls_key);
  rmdir(tls_dir);
}

static void test_serve_fd_http1_and_h2_prior_knowledge(void) {
  start();
  for (int h2 = 0; h2 <= 1; h2++) {
    int sv[2];
    KT_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    KT_EQ_INT(kl_httpd_serve_fd(srv, sv[0], "pair", h2), 0);
    tc *t = tc_on_fd(sv[1]);
    if (!h2) {
      tc_send(t, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
      UNTIL(t->len >= strlen(HELLO) || t->err || t->eof);
      KT_EQ_MEM(t->buf, t->len, HELLO);
    } else {
      tc_sendn(t, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0", 33);
      /* GET http://x/hello */
      h2_frame(t, 1, 5, 1, "\x82\x86\x04\x06/hello\x41\x01x", 13);
      UNTIL(h2_first(t, 0, 1) >= 0 || t->err || t->eof);
      long data = h2_first(t, 0, 1);
      KT_TRUE(h2_first(t, 1, 1) >= 0 && data > h2_first(t, 1, 1));
      if (data >= 0) KT_EQ_MEM(t->buf + data + 9, 5, "hello");
    }
    tc_close(t);
  }
  KT_EQ_INT(kl_httpd_serve_fd(srv, -1, NULL, 0), KL_EINVAL);
  stop();
}

int main(void) {
  CRYPTO_set_mem_functions(ossl_malloc, ossl_realloc, ossl_free);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2048) {
    rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  KT_RUN(test_get_exact_bytes);
  KT_RUN(test_keepalive_serves_many_requests);
  KT_RUN(test_reply_from_outside_goes_out_at_once);
  KT_RUN(test_pipelined_responses_keep_request_order);
  KT_RUN(test_post_bodies_content_length_and_chunked);
  KT_RUN(test_request_getters_and_query);
  KT_RUN(test_limits_and_malformed_requests);
  KT_RUN(test_expect_100_continue);
  KT_RUN(test_head_http10_and_connection_close);
  KT_RUN(test_timeouts_read_idle_and_fresh);
  KT_RUN(test_stream_chunks_arrive_in_order_and_promptly);
  KT_RUN(test_abort_after_n_bytes);
  KT_RUN(test_on_close_when_the_client_goes);
  KT_RUN(test_close_streams_end_and_drop);
  KT_RUN(test_async_reply_and_large_body);
  KT_RUN(test_backpressure_drain_cap_and_write_timeout);
  KT_RUN(test_burst_sent_before_a_small_cap);
  KT_RUN(test_backlog_sent_while_it_grows);
  KT_RUN(test_error_pages);
  KT_RUN(test_500_concurrent_connections);
  KT_RUN(test_free_with_requests_in_flight);
  KT_RUN(test_max_connections_and_date_header);
  KT_RUN(test_ipv6_and_bad_options);
  KT_RUN(test_tls_round_trip);
  KT_RUN(test_tls_keep_buffers);
  KT_RUN(test_serve_fd_http1_and_h2_prior_knowledge);
  KT_RUN(test_send_thread_bursts_arrive_in_order);
  KT_RUN(test_send_thread_lets_go_of_dead_clients);
  KT_RUN(test_send_thread_finishes_for_a_half_closed_client);
  KT_RUN(test_send_thread_counts_only_unsent_bytes);
  KT_RUN(test_send_thread_ends_streams_as_the_loop_does);
  KT_RUN(test_stream_bursts_again_with_the_send_thread);
  return KT_DONE();
}
