/* bench_httpd.c — throughput of the HTTP server over loopback.
 *
 * The server runs on the runtime's loop in this process; the client is a
 * forked child with blocking-free poll() sockets, so the two sides use two
 * cores and the figures are the server's, not a shared loop's. Three runs:
 *   - keep-alive GETs: 32 connections, one request in flight on each, a
 *     small fixed response (what /healthz or a small GET costs);
 *   - a stream of 300-byte chunks (a watch event of a small object) to a
 *     client that reads as fast as it can, the producer refilling from
 *     on_drain whenever the server's buffer falls below 64 KiB;
 *   - the same with 2400-byte chunks (a Pod's watch event).
 * Prints one JSON line: {"bench":"httpd","requests_per_s":…,
 * "stream_mb_per_s":…,"stream_chunks_per_s":… (300-byte chunks),
 * "stream_2400_mb_per_s":…,"stream_2400_chunks_per_s":…}; MB are 10^6
 * payload bytes. */
#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "httpd.h"
#include "loop.h"
#include "mem.h"

enum { CONNS = 32, REQUESTS = 300000, HIGH_WATER = 256 * 1024 };

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the server side ---- */

typedef struct producer {
  kl_httpd_req_t *req;
  char *chunk;
  size_t size;
  long left;
} producer;

static void produce(kl_httpd_req_t *req, void *ud) {
  producer *p = ud;
  int batch = 0;
  while (p->left > 0 && kl_httpd_buffered(req) < HIGH_WATER && batch++ < 4096) {
    if (kl_httpd_stream_write(req, p->chunk, p->size) < 0) return;
    p->left--;
  }
  if (p->left == 0) {
    kl_httpd_stream_end(req);
    free(p->chunk);
    free(p);
  }
}

static void producer_gone(kl_httpd_req_t *req, int reason, void *ud) {
  producer *p = ud;
  (void)req;
  (void)reason;
  free(p->chunk);
  free(p);
}

static void handler(kl_httpd_req_t *req, void *ud) {
  (void)ud;
  const char *path = kl_httpd_req_path(req, NULL);
  if (strcmp(path, "/stream") == 0) {
    producer *p = kl_xcalloc(1, sizeof *p);
    p->size = (size_t)atol(kl_httpd_req_param(req, "size", 0, NULL));
    p->left = atol(kl_httpd_req_param(req, "count", 0, NULL));
    p->chunk = kl_xmalloc(p->size);
    memset(p->chunk, 'e', p->size);
    p->chunk[p->size - 1] = '\n';
    kl_httpd_req_set_callbacks(req, producer_gone, produce, p);
    kl_httpd_set_header(req, "Content-Type", "application/json");
    kl_httpd_stream_begin(req, 200);
    produce(req, p);
    return;
  }
  kl_httpd_set_header(req, "Content-Type", "application/json");
  kl_httpd_set_header(req, "Cache-Control", "no-cache, private");
  kl_httpd_reply(req, 200, "{\"status\":\"ok\"}\n", 16);
}

static void on_result(struct ev_loop *ev, ev_io *w, int revents) {
  (void)revents;
  ev_io_stop(ev, w);
  ev_break(ev, EVBREAK_ALL);
}

/* ---- the client side (the child) ---- */

static int dial(int port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    perror("connect");
    exit(1);
  }
  return fd;
}

typedef struct cconn {
  int fd;
  char buf[4096];
  size_t len;
} cconn;

/* Returns 1 when buf holds a complete response (and drops it). */
static int response_done(cconn *c) {
  c->buf[c->len] = '\0';
  char *end = strstr(c->buf, "\r\n\r\n");
  if (!end) return 0;
  char *cl = strstr(c->buf, "Content-Length: ");
  size_t body = cl ? (size_t)atol(cl + 16) : 0;
  size_t total = (size_t)(end + 4 - c->buf) + body;
  if (c->len < total) return 0;
  memmove(c->buf, c->buf + total, c->len - total);
  c->len -= total;
  return 1;
}

static double client_requests(int port) {
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n";
  cconn cs[CONNS];
  struct pollfd pf[CONNS];
  long sent = 0, done = 0;
  for (int i = 0; i < CONNS; i++) {
    cs[i].fd = dial(port);
    cs[i].len = 0;
    pf[i].fd = cs[i].fd;
    pf[i].events = POLLIN;
  }
  double t0 = wall();
  for (int i = 0; i < CONNS; i++, sent++)
    if (write(cs[i].fd, req, sizeof req - 1) < 0) exit(1);
  while (done < REQUESTS) {
    if (poll(pf, CONNS, 5000) <= 0) exit(1);
    for (int i = 0; i < CONNS; i++) {
      if (!(pf[i].revents & POLLIN)) continue;
      ssize_t n = read(cs[i].fd, cs[i].buf + cs[i].len,
                       sizeof cs[i].buf - 1 - cs[i].len);
      if (n <= 0) exit(1);
      cs[i].len += (size_t)n;
      while (response_done(&cs[i])) {
        done++;
        if (sent < REQUESTS) {
          if (write(cs[i].fd, req, sizeof req - 1) < 0) exit(1);
          sent++;
        }
      }
    }
  }
  double t = wall() - t0;
  for (int i = 0; i < CONNS; i++)
    close(cs[i].fd);
  return REQUESTS / t;
}

/* Reads one stream to its terminating chunk; returns the seconds it took. */
static double client_stream(int port, size_t size, long count) {
  char req[128];
  int n = snprintf(req, sizeof req,
                   "GET /stream?size=%zu&count=%ld HTTP/1.1\r\nHost: bench\r\n"
                   "\r\n",
                   size, count);
  int fd = dial(port);
  size_t cap = 1 << 20, total = 0;
  char *buf = kl_xmalloc(cap);
  char tail[8] = {0};
  double t0 = wall();
  if (write(fd, req, (size_t)n) < 0) exit(1);
  for (;;) {
    ssize_t r = read(fd, buf, cap);
    if (r <= 0) {
      fprintf(stderr, "bench_httpd: stream ended early\n");
      exit(1);
    }
    total += (size_t)r;
    if (r >= 7) {
      memcpy(tail, buf + r - 7, 7);
    } else {
      memmove(tail, tail + r, 7 - (size_t)r);
      memcpy(tail + 7 - r, buf, (size_t)r);
    }
    if (memcmp(tail, "\r\n0\r\n\r\n", 7) == 0) break;
  }
  double t = wall() - t0;
  size_t want = size * (size_t)count;
  if (total < want) {
    fprintf(stderr, "bench_httpd: short stream\n");
    exit(1);
  }
  close(fd);
  free(buf);
  return t;
}

int main(void) {
  kl_loop_t *loop = kl_loop_new(NULL);
  kl_httpd_opts_t o = {0};
  char err[256];
  o.host = "127.0.0.1";
  o.handler = handler;
  o.max_stream_buffer = 64u << 20;
  kl_httpd_t *h = kl_httpd_new(loop, &o, err, sizeof err);
  if (!h) {
    fprintf(stderr, "bench_httpd: %s\n", err);
    return 1;
  }
  int port = kl_httpd_port(h), pipefd[2];
  if (pipe(pipefd) < 0) return 1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    const long n300 = 2000000, n2400 = 400000;
    double rps = client_requests(port);
    double t300 = client_stream(port, 300, n300);
    double t2400 = client_stream(port, 2400, n2400);
    char line[512];
    int n = snprintf(line, sizeof line,
                     "{\"bench\":\"httpd\",\"requests_per_s\":%.0f,"
                     "\"stream_mb_per_s\":%.1f,\"stream_chunks_per_s\":%.0f,"
                     "\"stream_2400_mb_per_s\":%.1f,"
                     "\"stream_2400_chunks_per_s\":%.0f}\n",
                     rps, 300.0 * n300 / t300 / 1e6, n300 / t300,
                     2400.0 * n2400 / t2400 / 1e6, n2400 / t2400);
    if (write(pipefd[1], line, (size_t)n) < 0) _exit(1);
    _exit(0);
  }
  close(pipefd[1]);
  ev_io result;
  ev_io_init(&result, on_result, pipefd[0], EV_READ);
  ev_io_start(kl_loop_ev(loop), &result);
  ev_run(kl_loop_ev(loop), 0);
  char line[512];
  ssize_t n = read(pipefd[0], line, sizeof line - 1);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "bench_httpd: the client failed\n");
    return 1;
  }
  line[n] = '\0';
  fputs(line, stdout);
  close(pipefd[0]);
  kl_httpd_free(h);
  kl_loop_free(loop);
  return 0;
}
