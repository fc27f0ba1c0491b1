/* fuzz_httpd.h — the server under the HTTP fuzz targets (fuzz_http1.c,
 * fuzz_http2.c): one kl_httpd per process on its own loop, with small
 * limits (2 KiB of head, 8 KiB of body) so that inputs reach them, and a
 * handler that reads every part of the request (method, path, query and
 * its parameters, headers, body) and answers as the runtime's handlers do:
 * a reply, a stream in pieces, or a stream cut short.
 *
 * fuzz_httpd_feed() hands one end of a socketpair to the server
 * (kl_httpd_serve_fd), writes the input into the other as a client would,
 * ends it (shutdown), and runs the loop until the server has closed the
 * connection, collecting what it answered. A server that does not close a
 * connection whose client has ended is a hang: the harness aborts. */
#ifndef KL_FUZZ_HTTPD_H
#define KL_FUZZ_HTTPD_H

#include <errno.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "httpd.h"
#include "loop.h"

typedef struct fuzz_out {
  char *p;
  size_t len, cap;
  size_t handled; /* requests the handler saw */
} fuzz_out_t;

static fuzz_out_t fuzz_httpd_out;

static void fuzz_handler(kl_httpd_req_t *r, void *ud) {
  (void)ud;
  size_t plen, qlen, blen, sum = 0;
  const char *path = kl_httpd_req_path(r, &plen);
  kl_httpd_req_query(r, &qlen);
  sum += strlen(kl_httpd_req_method(r)) + qlen;
  for (size_t i = 0; i < kl_httpd_req_nparams(r); i++) {
    const char *k, *v;
    if (kl_httpd_req_param_at(r, i, &k, &v) == 0) sum += strlen(k) + strlen(v);
  }
  for (size_t i = 0; i < kl_httpd_req_nheaders(r); i++) {
    const char *k, *v;
    if (kl_httpd_req_header_at(r, i, &k, &v) == 0) sum += strlen(k) + strlen(v);
  }
  kl_httpd_req_header(r, "content-type");
  kl_httpd_req_remote(r);
  kl_httpd_req_version(r);
  const char *body = kl_httpd_req_body(r, &blen);
  fuzz_httpd_out.handled++;
  char len[32];
  int n = snprintf(len, sizeof len, "%zu", sum);
  if (plen >= 7 && memcmp(path, "/stream", 7) == 0) {
    kl_httpd_set_header(r, "Content-Type", "application/json");
    if (kl_httpd_stream_begin(r, 200) != 0) return;
    kl_httpd_stream_write(r, body, blen);
    kl_httpd_stream_write(r, len, (size_t)n);
    if (plen > 7 && path[7] == 'x')
      kl_httpd_stream_abort(r, blen / 2);
    else
      kl_httpd_stream_end(r);
    return;
  }
  kl_httpd_set_header(r, "X-Sum", len);
  kl_httpd_reply(r, blen ? 201 : 200, body, blen);
}

static kl_loop_t *fuzz_httpd_loop;

/* The server, made on the first call; it lives as long as the process. */
static kl_httpd_t *fuzz_httpd(void) {
  static kl_httpd_t *h;
  if (h) return h;
  fuzz_httpd_loop = kl_loop_new(NULL);
  if (!fuzz_httpd_loop) abort();
  kl_httpd_opts_t o = {0};
  o.host = "127.0.0.1";
  o.handler = fuzz_handler;
  o.max_header_bytes = 2048;
  o.max_body_bytes = 8192;
  char err[256];
  h = kl_httpd_new(fuzz_httpd_loop, &o, err, sizeof err);
  if (!h) {
    fprintf(stderr, "fuzz: kl_httpd_new: %s\n", err);
    abort();
  }
  return h;
}

static void fuzz_out_read(int fd) {
  fuzz_out_t *o = &fuzz_httpd_out;
  for (;;) {
    if (o->cap - o->len < 16384) {
      o->cap = o->cap ? o->cap * 2 : 65536;
      o->p = realloc(o->p, o->cap);
      if (!o->p) abort();
    }
    ssize_t n = read(fd, o->p + o->len, o->cap - o->len - 1);
    if (n <= 0) return;
    o->len += (size_t)n;
    o->p[o->len] = '\0';
  }
}

/* Serves data as one client connection (h2: HTTP/2 from the first byte);
 * returns what the server wrote (fuzz_httpd_out: reset on each call). */
static const fuzz_out_t *fuzz_httpd_feed(const uint8_t *data, size_t size,
                                         int h2) {
  kl_httpd_t *h = fuzz_httpd();
  struct ev_loop *ev = kl_loop_ev(fuzz_httpd_loop);
  fuzz_httpd_out.len = 0;
  fuzz_httpd_out.handled = 0;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) !=
      0)
    abort();
  if (kl_httpd_serve_fd(h, sv[0], "fuzz", h2) != 0) abort();
  size_t off = 0;
  long spins = 0;
  kl_httpd_stats_t st;
  for (;;) {
    if (off < size) {
      ssize_t n = write(sv[1], data + off, size - off);
      if (n > 0) off += (size_t)n;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) off = size;
      if (off == size) shutdown(sv[1], SHUT_WR);
    } else if (size == 0 && spins == 0) {
      shutdown(sv[1], SHUT_WR);
    }
    ev_run(ev, EVRUN_NOWAIT);
    fuzz_out_read(sv[1]);
    kl_httpd_get_stats(h, &st);
    if (off == size && !st.connections && !st.requests && !st.streams) break;
    if (++spins > 200000) {
      fprintf(stderr,
              "fuzz: after the client's end (%zu of %zu bytes written), "
              "%zu connections, %zu requests, %zu streams are left\n",
              off, size, st.connections, st.requests, st.streams);
      abort();
    }
  }
  fuzz_out_read(sv[1]);
  close(sv[1]);
  return &fuzz_httpd_out;
}

#endif
