/* httpd.c — the HTTP/1.1 and HTTP/2 server (see httpd.h).
 *
 * Layers: the listener accepts sockets into connections; a connection owns
 * its socket, its TLS session, one ev_io, one deadline on the loop's timer
 * heap, an input and an output buffer; a codec turns input into requests
 * and responses into output: the HTTP/1 codec (h1_*), or, when ALPN chose
 * h2 on a TLS connection, an nghttp2 session (h2_*) behind the same request
 * API.
 *
 * Invariants:
 *   - An HTTP/1 connection holds at most one request (c->req): the one
 *     being read (RQ_BODY, owned by the server) or the one being answered
 *     (RQ_HANDLER, RQ_STREAM, owned by the handler). Pipelined requests
 *     wait as bytes in c->in, so responses leave in request order.
 *   - An HTTP/2 connection holds one h2s per open stream (c->streams), each
 *     with its request (r->s) and its own output buffer; c->req is unused.
 *   - Nothing is freed inside a callback that might still use it: a
 *     connection is killed (socket closed, watchers stopped, moved to the
 *     dead list) and freed from its kl_defer_t; a request whose connection
 *     (or stream) went away is detached, put on the zombie list, and freed
 *     from its own kl_defer_t after its on_close ran. kl_httpd_free
 *     finalizes both lists. Streams are freed by nghttp2's close callback,
 *     or with their session when the connection is freed.
 *   - Owner callbacks (handler, on_close, on_drain) run only from loop
 *     callbacks, bracketed by h->depth, and never inside nghttp2's;
 *     kl_httpd_free at depth > 0 closes everything and the outermost
 *     callback frees the server (h_leave).
 *   - Output is appended to c->out (HTTP/2: to the stream's buffer, which
 *     h2_pump moves into c->out as frames) and written before the loop
 *     next blocks (the connection's defer node, or the end of its io
 *     callback); a write that leaves 64 KiB queued is attempted at once.
 *   - With opts.send_thread, the bursts of a plain HTTP/1.1 stream are
 *     written by a thread of the server's instead (c->job, "the send
 *     thread" below): while a job is out, the socket is the thread's, the
 *     loop neither writes to nor closes it, and c->out waits behind the
 *     job. Everything else, the thread's jobs' lifetimes included, stays
 *     on the loop's one thread.
 * The server owns its connections, their buffers, streams and requests,
 * the listening socket and the SSL_CTX; request bodies given to
 * kl_httpd_reply and stream data stay the caller's. */
#define _GNU_SOURCE /* accept4, SOCK_NONBLOCK */
#include "httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "log.h"
#include "mem.h"

#define HTTPD_MAX_HEADERS 128
#define HTTPD_READ_CHUNK 16384
/* A burst of stream writes that does not return to the loop is sent every
 * this many bytes (at most a quarter of max_stream_buffer). Each send wakes
 * the reader, which on a VM costs an interrupt: at 64 KiB the wakeups took
 * 9% of a simulator writing to one watcher, at 256 KiB 4%; at 1 MiB that
 * simulator delivers about a tenth more events a second than at 256 KiB. */
#define HTTPD_SYNC_FLUSH (1024 * 1024)
#define HTTPD_ZEROCOPY_MIN (64 * 1024)
/* A stream's output the loop would send itself goes to the send thread
 * from this size. */
#define HTTPD_SEND_THREAD_MIN (64 * 1024)
/* How long a burst waits for its previous job (sendjob_burst). */
#define HTTPD_SEND_WAIT 0.02
#define HTTPD_CHUNK_LINE_MAX 4096
#define HTTPD_LINGER_TIMEOUT 2.0
#define HTTPD_LINGER_BYTES (1024 * 1024)
#define HTTPD_KEEP_BUF (64 * 1024)
/* A connection keeps its last response's header buffer up to this size
 * for the next response instead of an allocation each. */
#define HTTPD_RH_KEEP 4096
/* HTTP/2: frames are taken from the session into c->out up to this much,
 * so a blocked socket leaves the backlog in each stream's own buffer,
 * where its producer sees it (kl_httpd_buffered) and its cap applies. */
#define HTTPD_H2_OUT_HIGH (64 * 1024)
/* What kube-apiserver advertises (--http2-max-streams-per-connection). */
#define HTTPD_H2_MAX_STREAMS 1000
#define HTTPD_H2_BODIES 4 /* max_body_bytes a connection's streams may hold */

#define CONTAINER(p, type, member)                                             \
  ((type *)(void *)((char *)(p)-offsetof(type, member)))

/* ---- byte buffers: data is p[off, off + len) ---- */

typedef struct hbuf {
  char *p;
  size_t off, len, cap;
} hbuf;

/* Grows b for extra more bytes. Consumed space at the front is reclaimed
 * only when it is at least as large as the live data: a stream that is sent
 * in pieces while it is appended to would otherwise move its whole backlog
 * for every append once the buffer is full. */
static void hbuf_reserve(hbuf *b, size_t extra) {
  if (b->off + b->len + extra <= b->cap) return;
  if (b->off && b->off >= b->len) {
    memmove(b->p, b->p + b->off, b->len);
    b->off = 0;
    if (b->len + extra <= b->cap) return;
  }
  size_t need = b->off + b->len + extra; /* the front stays where it is */
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < need)
    cap *= 2;
  b->p = kl_xrealloc(b->p, cap);
  b->cap = cap;
}

static void hbuf_append(hbuf *b, const void *d, size_t n) {
  if (!n) return;
  hbuf_reserve(b, n);
  memcpy(b->p + b->off + b->len, d, n);
  b->len += n;
}

static void hbuf_puts(hbuf *b, const char *s) { hbuf_append(b, s, strlen(s)); }

static void hbuf_consume(hbuf *b, size_t n) {
  b->off += n;
  b->len -= n;
  if (!b->len) b->off = 0;
}

static void hbuf_free(hbuf *b) {
  free(b->p);
  b->p = NULL;
  b->off = b->len = b->cap = 0;
}

/* The live bytes; NULL for a buffer that never held any (no offset is
 * added to a null pointer: UBSan's pointer-overflow check). */
static char *hbuf_data(const hbuf *b) { return b->p ? b->p + b->off : NULL; }

/* ---- types ---- */

enum { RQ_BODY, RQ_HANDLER, RQ_STREAM };
enum { B_NONE, B_CL, B_CHUNK_SIZE, B_CHUNK_DATA, B_CHUNK_CRLF, B_TRAILER };
enum { F_NONE, F_LENGTH, F_CHUNKED, F_CLOSE };

typedef struct hdr {
  const char *name, *value;
} hdr;

typedef struct conn conn;
typedef struct h2s h2s;

struct kl_httpd_req {
  kl_defer_t defer; /* finalization of a detached request */
  kl_httpd_t *h;
  conn *c; /* NULL once detached */
  kl_httpd_req_t *zprev, *znext;
  int phase, dead, closing, reason;
  int minor, head, tls;
  const char *method, *path, *query;
  size_t path_len, query_len;
  hdr *hdrs, *params;
  size_t nhdrs, nparams;
  char *body;
  size_t body_len, body_cap;
  hbuf rh; /* response header lines set by the owner */
  int resp_close, chunked, want_drain, abort_armed;
  size_t abort_left;
  kl_httpd_close_fn *on_close;
  kl_httpd_drain_fn *on_drain;
  void *cb_ud;
  const char *peer;
  h2s *s; /* its HTTP/2 stream; NULL for HTTP/1 and once detached */
  int h2;
  /* the head's copy, the tables and decoded parameters follow */
};

/* An HTTP/2 stream: the request being read, then the response's payload
 * that nghttp2 has not taken yet. It lives from the client's HEADERS to
 * nghttp2's stream close; its request may end (the owner is done, or it
 * is detached) before that. */
struct h2s {
  conn *c;
  h2s *prev, *next;   /* c->streams */
  h2s *pprev, *pnext; /* c->pulled */
  int32_t id;
  kl_httpd_req_t *req; /* NULL until the head is complete, and after */
  hbuf head;           /* the fields as HTTP/1.1 header lines, while read */
  char *method, *path, *authority;
  hbuf out;        /* payload not yet taken by nghttp2 */
  size_t flush_at; /* a write tries the socket at this much unsent */
  int reason;      /* what the owner hears when the stream closes */
  int refused;     /* the status answered instead of the request */
  int host, ready, pulled, eof, cut, deferred;
  int complete;        /* the client's side ended (END_STREAM) */
  int expired;         /* reset by the server while the request arrived */
  size_t body_held;    /* its part of c->h2_body */
  size_t lingered;     /* bytes the client sent after the refusal */
  double linger_since; /* the refusal's last frame went out; 0: not yet */
  double wprogress;    /* out last became non-empty, or nghttp2 took some */
  double started;      /* its HEADERS arrived */
};

struct conn {
  kl_defer_t defer; /* service (live) or free (dead) */
  kl_timer_t timer;
  kl_httpd_t *h;
  conn *prev, *next;
  ev_io io;
  int fd, events;
  SSL *ssl;
  hbuf in, out;
  kl_httpd_req_t *req;
  size_t scan; /* bytes of in already searched for the end of the head */
  int bstate;  /* B_* while the request's body is read */
  uint64_t bleft;
  size_t trailer_bytes, lingered;
  size_t flush_at; /* a stream write tries the socket at this much unsent */
  double started;  /* first byte of the request being read; 0: none */
  double idle_since;
  double wprogress; /* last write progress while blocked */
  double linger_since;
  int dead, in_io, close_after, cut, lingering, handshake, blocked;
  int rd_eof; /* the client ended its side; output still to go */
  int tls_rw, tls_wr, hs_write;
  nghttp2_session *h2; /* ALPN chose h2: c->req and the h1_* codec unused */
  h2s *streams;        /* open streams */
  h2s *pulled;     /* streams whose output nghttp2 took since the drain pass */
  size_t h2_ready; /* streams whose request waits for the handler */
  size_t h2_body;  /* bytes of request bodies still arriving */
  int goaway;
  struct sendjob *job; /* out with the send thread: the socket is its */
  hbuf spare;          /* a sent job's buffer, for the next burst */
  hbuf rh_spare;       /* a completed request's header buffer, for the next */
  char peer[INET6_ADDRSTRLEN + 8];
};

/* A burst of a stream's bytes for the send thread (opts.send_thread):
 * the thread's from sendq_push until it has sent them all, or a send
 * failed, and set state to SJ_BACK; then the loop's again. */
enum { SJ_QUEUED, SJ_BACK };
typedef struct sendjob {
  struct sendjob *qnext; /* h->sendq (under h->sendmu), then the thread's */
  struct sendjob *lnext; /* h->jobs: every job out, the loop's */
  conn *c;               /* NULL once the connection died: an orphan */
  int fd;
  hbuf b;              /* the bytes, b.p + b.off, b.len of them */
  _Atomic size_t sent; /* how many are out: the thread's progress */
  _Atomic int moved;   /* a full socket took more: progress to note */
  size_t seen;         /* sent at the last burst point (sendjob_burst) */
  _Atomic int tried;   /* the thread has tried its socket */
  int err;             /* errno of the send that failed, by the thread */
  _Atomic int state;
} sendjob;

struct kl_httpd {
  kl_loop_t *loop;
  struct ev_loop *ev;
  kl_httpd_opts_t o;
  int lfd, port, listening;
  ev_io lio;
  kl_timer_t accept_timer;
  SSL_CTX *ssl_ctx;
  nghttp2_session_callbacks *h2cb;
  conn *live, *dead;
  kl_httpd_req_t *zombies;
  size_t nconns, nreqs, nstreams;
  uint64_t accepted, responses;
  int depth, free_pending, freeing;
  double accept_err_logged;
  time_t date_sec;
  char date[40];
  /* The send thread, started by the first burst handed to it. */
  int sender_state; /* 0: not started, 1: running, -1: could not start */
  int sender_stop;
  pthread_t sender;
  pthread_mutex_t sendmu;
  pthread_cond_t sendcv;        /* a job is back (sendjob_wait) */
  int sendwake;                 /* an eventfd: the queue has jobs, or stop */
  sendjob *sendq, **sendq_tail; /* the thread's queue, under sendmu */
  sendjob *jobs;                /* every job out (the loop's list) */
  ev_async sendback;            /* the thread has given a job back */
  uint64_t thread_sent;         /* bytes of the jobs taken back */
};

static void conn_kill(conn *c, int reason);
static void conn_kick(conn *c);
static void conn_update(conn *c);
static int conn_flush(conn *c, int callbacks);
static void sendjob_drop(conn *c);
static void sendq_push(kl_httpd_t *h, sendjob *j);
static void on_sendback(struct ev_loop *ev, ev_async *w, int revents);
static void sender_stop(kl_httpd_t *h);
static int send_thread_serves(conn *c);
static void sendjob_hand(conn *c);
static int sendjob_news(conn *c);
static void sendjob_free(kl_httpd_t *h, sendjob *j);
static void h1_process(conn *c);
static void accept_resume(kl_httpd_t *h);

static double now(kl_httpd_t *h) { return kl_loop_now(h->loop); }

static void h_enter(kl_httpd_t *h) { h->depth++; }
static void h_leave(kl_httpd_t *h) {
  if (--h->depth == 0 && h->free_pending) {
    h->free_pending = 0;
    kl_httpd_free(h);
  }
}

/* ---- small helpers ---- */

static int lower(int ch) { return ch >= 'A' && ch <= 'Z' ? ch + 32 : ch; }

static int ieq(const char *a, size_t an, const char *b) {
  size_t bn = strlen(b);
  if (an != bn) return 0;
  for (size_t i = 0; i < an; i++)
    if (lower((unsigned char)a[i]) != lower((unsigned char)b[i])) return 0;
  return 1;
}

static int is_tchar(unsigned char ch) {
  if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
      (ch >= 'A' && ch <= 'Z'))
    return 1;
  return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  ch = lower(ch);
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

/* Whether the comma-separated list value v holds tok (case-insensitive). */
static int has_token(const char *v, size_t n, const char *tok) {
  size_t i = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
      i++;
    size_t s = i;
    while (i < n && v[i] != ',')
      i++;
    size_t e = i;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
      e--;
    if (e > s && ieq(v + s, e - s, tok)) return 1;
  }
  return 0;
}

static const char *reason_phrase(int status) {
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 203: return "Non-Authoritative Information";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Request Entity Too Large";
  case 414: return "Request URI Too Long";
  case 415: return "Unsupported Media Type";
  case 417: return "Expectation Failed";
  case 422: return "Unprocessable Entity";
  case 428: return "Precondition Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return "";
  }
}

/* An RFC 7231 IMF-fixdate, formatted once per second, locale-free. */
static const char *date_now(kl_httpd_t *h) {
  static const char days[] = "SunMonTueWedThuFriSat";
  static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
  time_t t = time(NULL);
  if (t != h->date_sec) {
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(h->date, sizeof h->date, "%.3s, %02d %.3s %04d %02d:%02d:%02d GMT",
             days + 3 * tm.tm_wday, tm.tm_mday, months + 3 * tm.tm_mon,
             tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    h->date_sec = t;
  }
  return h->date;
}

static size_t fmt_u64(char *out, uint64_t v) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++)
    out[i] = tmp[n - 1 - i];
  return n;
}

static size_t fmt_hex(char *out, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = digits[v & 15];
    v >>= 4;
  } while (v);
  for (size_t i = 0; i < n; i++)
    out[i] = tmp[n - 1 - i];
  return n;
}

int kl_httpd_pct_decode(const char *in, size_t n, char *out, size_t *outlen,
                        int plus) {
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = in[i];
    if (ch == '%') {
      if (n - i < 3) return KL_EPARSE;
      int hi = hexval((unsigned char)in[i + 1]);
      int lo = hexval((unsigned char)in[i + 2]);
      if (hi < 0 || lo < 0) return KL_EPARSE;
      out[j++] = (char)(hi * 16 + lo);
      i += 2;
    } else if (plus && ch == '+') {
      out[j++] = ' ';
    } else {
      out[j++] = ch;
    }
  }
  *outlen = j;
  return 0;
}

/* ---- requests ---- */

static void req_free(kl_httpd_req_t *r) {
  r->h->nreqs--;
  free(r->body);
  hbuf_free(&r->rh);
  free(r);
}

static void zombie_unlink(kl_httpd_req_t *r) {
  kl_httpd_t *h = r->h;
  if (r->zprev)
    r->zprev->znext = r->znext;
  else
    h->zombies = r->znext;
  if (r->znext) r->znext->zprev = r->zprev;
  r->zprev = r->znext = NULL;
}

static void req_finalize(kl_defer_t *d) {
  kl_httpd_req_t *r = CONTAINER(d, kl_httpd_req_t, defer);
  kl_httpd_t *h = r->h;
  h_enter(h);
  zombie_unlink(r);
  r->closing = 1;
  if (r->on_close) r->on_close(r, r->reason, r->cb_ud);
  req_free(r);
  h_leave(h);
}

/* The connection is done with c->req: reset the connection's request state
 * so the next pipelined request can be read. */
static void conn_req_gone(conn *c) {
  c->req = NULL;
  c->idle_since = now(c->h);
  c->started = c->in.len ? c->idle_since : 0;
  c->scan = 0;
  c->bstate = B_NONE;
}

/* Separates r from its connection (or stream); the owner learns it from
 * on_close. */
static void req_detach(kl_httpd_req_t *r, int reason) {
  conn *c = r->c;
  kl_httpd_t *h = r->h;
  if (r->s) {
    r->s->req = NULL;
    r->s = NULL;
  } else {
    conn_req_gone(c);
  }
  r->c = NULL;
  if (r->phase == RQ_STREAM) h->nstreams--;
  if (r->phase == RQ_BODY) {
    req_free(r);
    return;
  }
  r->dead = 1;
  r->reason = reason;
  r->znext = h->zombies;
  if (h->zombies) h->zombies->zprev = r;
  h->zombies = r;
  kl_loop_defer(h->loop, &r->defer);
}

/* The owner ended a request whose connection is gone. */
static void req_drop_dead(kl_httpd_req_t *r) {
  if (r->closing) return; /* inside on_close: freed when it returns */
  kl_loop_undefer(r->h->loop, &r->defer);
  zombie_unlink(r);
  req_free(r);
}

/* The owner completed the response: the request is freed now. */
static void req_complete(conn *c, kl_httpd_req_t *r) {
  if (r->phase == RQ_STREAM) c->h->nstreams--;
  if (r->rh.p && !c->rh_spare.p && r->rh.cap <= HTTPD_RH_KEEP) {
    c->rh_spare = r->rh; /* its lines are in c->out or nghttp2's copy */
    c->rh_spare.off = c->rh_spare.len = 0;
    r->rh = (hbuf){NULL, 0, 0, 0};
  }
  if (r->s)
    r->s->req = NULL; /* the stream goes on until its bytes are out */
  else
    conn_req_gone(c);
  req_free(r);
  conn_kick(c);
}

/* ---- the HTTP/1 codec: requests ---- */

typedef struct span {
  size_t off, len;
} span;

/* Queues a server-generated error response and closes after it. */
/* The body of an error the server answers by itself: the owner's page for
 * status, or "<status> <reason>" written into plain. */
static void error_page(const kl_httpd_t *h, int status, char plain[64],
                       const char **ctype, const char **body) {
  *ctype = "text/plain; charset=utf-8";
  *body = plain;
  snprintf(plain, 64, "%d %s", status, reason_phrase(status));
  for (size_t i = 0; i < h->o.nerror_pages; i++)
    if (h->o.error_pages[i].status == status) {
      *ctype = h->o.error_pages[i].content_type;
      *body = h->o.error_pages[i].body;
    }
}

static void h1_error(conn *c, int status) {
  char buf[256];
  const char *why = reason_phrase(status);
  char plain[64];
  const char *ctype, *body;
  error_page(c->h, status, plain, &ctype, &body);
  size_t bn = strlen(body);
  int n = snprintf(buf, sizeof buf,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: "
                   "%zu\r\nConnection: close\r\n\r\n",
                   status, why, ctype, bn);
  kl_log(KL_LOG_DEBUG, "httpd: %s: %d %s", c->peer, status, why);
  if (c->req) {
    kl_httpd_req_t *r = c->req;
    conn_req_gone(c);
    req_free(r);
  }
  hbuf_append(&c->out, buf, (size_t)n < sizeof buf ? (size_t)n : 0);
  hbuf_append(&c->out, body, bn);
  c->h->responses++;
  c->close_after = 1;
  c->started = 0;
  hbuf_free(&c->in);
}

/* Counts the pairs of a query and the bytes their decoded copies need. */
static size_t query_pairs(const char *q, size_t n) {
  size_t k = n ? 1 : 0;
  for (size_t i = 0; i < n; i++)
    if (q[i] == '&') k++;
  return k;
}

static void decode_params(kl_httpd_req_t *r, char *store) {
  const char *q = r->query;
  size_t n = r->query_len, i = 0;
  r->nparams = 0;
  while (i < n) {
    size_t s = i;
    while (i < n && q[i] != '&')
      i++;
    size_t e = i++;
    if (e == s) continue;
    size_t eq = s;
    while (eq < e && q[eq] != '=')
      eq++;
    size_t kl, vl;
    char *k = store;
    if (kl_httpd_pct_decode(q + s, eq - s, k, &kl, 1) < 0) continue;
    k[kl] = '\0';
    char *v = k + kl + 1;
    size_t vs = eq < e ? eq + 1 : e;
    if (kl_httpd_pct_decode(q + vs, e - vs, v, &vl, 1) < 0) continue;
    v[vl] = '\0';
    store = v + vl + 1;
    r->params[r->nparams].name = k;
    r->params[r->nparams].value = v;
    r->nparams++;
  }
}

/* What a head says about its body and the connection. */
typedef struct head_info {
  int keepalive, chunked, expect;
  uint64_t cl;
} head_info;

/* Parses the complete head p[0, end) (the request line through the empty
 * line) into a new request of connection c, in phase RQ_BODY, in *out.
 * Returns 0, or -status when the head is refused. HTTP/2 requests come
 * here too, as the HTTP/1.1 head their fields spell (h2_request). */
static int head_parse(conn *c, const char *p, size_t end, head_info *hi,
                      kl_httpd_req_t **out) {
  kl_httpd_t *h = c->h;
  /* The request line. */
  size_t pos = 0;
  span method, target;
  while (pos < end && is_tchar((unsigned char)p[pos]))
    pos++;
  if (pos == 0 || p[pos] != ' ') return -400;
  method.off = 0;
  method.len = pos++;
  target.off = pos;
  while (pos < end && (unsigned char)p[pos] > ' ' && p[pos] != 0x7f)
    pos++;
  target.len = pos - target.off;
  if (!target.len || p[pos] != ' ') return -400;
  pos++;
  size_t vl = 0;
  while (pos + vl < end && p[pos + vl] != '\r' && p[pos + vl] != '\n')
    vl++;
  const char *v = p + pos;
  if (vl != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' ||
      v[5] > '9' || v[7] < '0' || v[7] > '9')
    return -400;
  if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) return -505;
  int minor = v[7] - '0';
  pos += vl;
  if (p[pos] == '\r') pos++;
  if (p[pos] != '\n') return -400;
  pos++;

  /* Header lines. */
  span names[HTTPD_MAX_HEADERS], values[HTTPD_MAX_HEADERS];
  size_t nh = 0;
  for (;;) {
    size_t ls = pos;
    while (pos < end && p[pos] != '\n')
      pos++;
    size_t le = pos++; /* at '\n' */
    if (le > ls && p[le - 1] == '\r') le--;
    if (le == ls) break;                            /* the empty line */
    if (p[ls] == ' ' || p[ls] == '\t') return -400; /* obs-fold */
    size_t k = ls;
    while (k < le && is_tchar((unsigned char)p[k]))
      k++;
    if (k == ls || k >= le || p[k] != ':') return -400;
    if (nh == HTTPD_MAX_HEADERS) return -431;
    names[nh].off = ls;
    names[nh].len = k - ls;
    k++;
    while (k < le && (p[k] == ' ' || p[k] == '\t'))
      k++;
    size_t ve = le;
    while (ve > k && (p[ve - 1] == ' ' || p[ve - 1] == '\t'))
      ve--;
    for (size_t j = k; j < ve; j++) {
      unsigned char ch = (unsigned char)p[j];
      if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return -400;
    }
    values[nh].off = k;
    values[nh].len = ve - k;
    nh++;
  }

  /* What the headers mean for framing and the connection. */
  int hosts = 0, chunked = 0, have_cl = 0, keepalive = minor == 1, expect = 0;
  uint64_t cl = 0;
  for (size_t j = 0; j < nh; j++) {
    const char *nm = p + names[j].off, *vv = p + values[j].off;
    size_t nl = names[j].len, vn = values[j].len;
    if (ieq(nm, nl, "host")) {
      hosts++;
    } else if (ieq(nm, nl, "content-length")) {
      uint64_t x = 0;
      if (!vn || vn > 18) return -400;
      for (size_t q = 0; q < vn; q++) {
        if (vv[q] < '0' || vv[q] > '9') return -400;
        x = x * 10 + (uint64_t)(vv[q] - '0');
      }
      if (have_cl && x != cl) return -400;
      have_cl = 1;
      cl = x;
    } else if (ieq(nm, nl, "transfer-encoding")) {
      if (!ieq(vv, vn, "chunked") || chunked) return -501;
      chunked = 1;
    } else if (ieq(nm, nl, "connection")) {
      if (has_token(vv, vn, "close"))
        keepalive = 0;
      else if (minor == 0 && has_token(vv, vn, "keep-alive"))
        keepalive = 1;
    } else if (ieq(nm, nl, "expect")) {
      if (!ieq(vv, vn, "100-continue")) return -417;
      expect = 1;
    }
  }
  if (minor == 1 && hosts != 1) return -400;
  if (chunked && (have_cl || minor == 0)) return -400;
  if (have_cl && cl > h->o.max_body_bytes) return -413;

  /* The target: origin-form, "*", or absolute-form (its path is used). */
  const char *t = p + target.off;
  size_t tl = target.len, po = 0;
  int nopath = 0;
  if (t[0] != '/' && !(tl == 1 && t[0] == '*')) {
    size_t k = 0;
    while (k < tl &&
           ((t[k] >= 'a' && t[k] <= 'z') || (t[k] >= 'A' && t[k] <= 'Z')))
      k++;
    if (!k || tl - k < 3 || memcmp(t + k, "://", 3) != 0) return -400;
    po = k + 3;
    while (po < tl && t[po] != '/' && t[po] != '?' && t[po] != '#')
      po++;
    nopath = po == tl || t[po] != '/';
  }
  size_t qm = po;
  while (qm < tl && t[qm] != '?' && t[qm] != '#')
    qm++;
  size_t qe = qm;
  if (qm < tl && t[qm] == '?')
    while (qe + 1 < tl && t[qe + 1] != '#')
      qe++;
  size_t qlen = qm < tl && t[qm] == '?' ? qe - qm : 0;
  size_t np = query_pairs(t + qm + 1, qlen);
  size_t peerlen = strlen(c->peer);

  /* One allocation: the request, its tables, the head's copy, decoded
   * parameters and the peer address. */
  size_t sz = sizeof(kl_httpd_req_t) + (nh + np) * sizeof(hdr) + end + 1 +
              qlen + 2 * np + peerlen + 1;
  kl_httpd_req_t *r = kl_xmalloc(sz);
  memset(r, 0, sizeof *r);
  r->hdrs = (hdr *)(void *)(r + 1);
  r->params = r->hdrs + nh;
  char *copy = (char *)(r->params + np);
  memcpy(copy, p, end);
  copy[end] = '\0';
  char *store = copy + end + 1;
  char *peer = store + qlen + 2 * np;
  memcpy(peer, c->peer, peerlen + 1);
  r->peer = peer;
  r->h = h;
  r->c = c;
  r->phase = RQ_BODY;
  r->minor = minor;
  r->tls = c->ssl != NULL;
  copy[method.len] = '\0';
  r->method = copy;
  r->head = method.len == 4 && memcmp(p, "HEAD", 4) == 0;
  char *tc = copy + target.off;
  if (nopath) {
    r->path = "/";
    r->path_len = 1;
  } else {
    r->path = tc + po;
    r->path_len = qm - po;
  }
  if (qlen) {
    r->query = tc + qm + 1;
    r->query_len = qlen;
    tc[qm + 1 + qlen] = '\0';
  } else {
    r->query = "";
  }
  tc[qm] = '\0';
  r->nhdrs = nh;
  for (size_t j = 0; j < nh; j++) {
    copy[names[j].off + names[j].len] = '\0';
    copy[values[j].off + values[j].len] = '\0';
    r->hdrs[j].name = copy + names[j].off;
    r->hdrs[j].value = copy + values[j].off;
  }
  decode_params(r, store);
  kl_defer_init(&r->defer, req_finalize);
  h->nreqs++;
  hi->keepalive = keepalive;
  hi->chunked = chunked;
  hi->expect = expect;
  hi->cl = cl;
  *out = r;
  return 0;
}

/* Parses the head at the start of c->in. Returns 1 when c->req was created
 * (head consumed), 0 when more bytes are needed, or -status. */
static int h1_parse_head(conn *c) {
  kl_httpd_t *h = c->h;
  const size_t max = h->o.max_header_bytes;
  /* Empty lines before a request line are ignored (RFC 9112 2.2). */
  while (c->in.len &&
         (hbuf_data(&c->in)[0] == '\r' || hbuf_data(&c->in)[0] == '\n')) {
    hbuf_consume(&c->in, 1);
    c->scan = 0;
  }
  const char *p = hbuf_data(&c->in);
  size_t n = c->in.len, end = 0;
  if (!n) return 0;

  /* Find the empty line that ends the head, resuming where the last search
   * stopped (a slow client must not make this quadratic). */
  size_t i = c->scan;
  while (i < n) {
    const char *nl = memchr(p + i, '\n', n - i);
    if (!nl) break;
    i = (size_t)(nl - p);
    if ((i >= 1 && p[i - 1] == '\n') ||
        (i >= 2 && p[i - 1] == '\r' && p[i - 2] == '\n')) {
      end = i + 1;
      break;
    }
    i++;
  }
  if (!end) {
    c->scan = n;
    if (n > max) return memchr(p, '\n', n) ? -431 : -414;
    return 0;
  }
  if (end > max) {
    const char *nl = memchr(p, '\n', n);
    return (size_t)(nl - p) >= max ? -414 : -431;
  }

  head_info hi;
  kl_httpd_req_t *r;
  int rc = head_parse(c, p, end, &hi, &r);
  if (rc < 0) return rc;
  hbuf_consume(&c->in, end);
  c->scan = 0;
  c->req = r;
  c->trailer_bytes = 0;
  if (!hi.keepalive) c->close_after = 1;
  if (hi.chunked) {
    c->bstate = B_CHUNK_SIZE;
  } else if (hi.cl) {
    c->bstate = B_CL;
    c->bleft = hi.cl;
    r->body_cap = (size_t)hi.cl + 1;
    r->body = kl_xmalloc(r->body_cap);
  } else {
    c->bstate = B_NONE;
  }
  if (hi.expect && r->minor == 1 && c->bstate != B_NONE && !c->in.len)
    hbuf_puts(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
  return 1;
}

static void body_reserve(kl_httpd_req_t *r, size_t extra) {
  if (r->body_len + extra + 1 <= r->body_cap) return;
  size_t cap = r->body_cap ? r->body_cap : 1024;
  while (cap < r->body_len + extra + 1)
    cap *= 2;
  r->body = kl_xrealloc(r->body, cap);
  r->body_cap = cap;
}

/* Finds a line in c->in; returns its length with the '\n', 0 if none yet,
 * or (size_t)-1 when longer than max. */
static size_t in_line(conn *c, size_t max) {
  const char *p = hbuf_data(&c->in);
  const char *nl = memchr(p, '\n', c->in.len < max ? c->in.len : max);
  if (nl) return (size_t)(nl - p) + 1;
  return c->in.len >= max ? (size_t)-1 : 0;
}

/* Moves body bytes from c->in into c->req. Returns 1 when the body is
 * complete, 0 when more bytes are needed, or -status. */
static int h1_read_body(conn *c) {
  kl_httpd_req_t *r = c->req;
  const size_t max = c->h->o.max_body_bytes;
  for (;;) {
    const char *p = hbuf_data(&c->in);
    switch (c->bstate) {
    case B_NONE: return 1;
    case B_CL:
    case B_CHUNK_DATA: {
      size_t take = c->in.len < c->bleft ? c->in.len : (size_t)c->bleft;
      if (!take) return 0;
      memcpy(r->body + r->body_len, p, take);
      r->body_len += take;
      r->body[r->body_len] = '\0';
      hbuf_consume(&c->in, take);
      c->bleft -= take;
      if (c->bleft) return 0;
      c->bstate = c->bstate == B_CL ? B_NONE : B_CHUNK_CRLF;
      break;
    }
    case B_CHUNK_SIZE: {
      size_t ll = in_line(c, HTTPD_CHUNK_LINE_MAX);
      if (ll == (size_t)-1) return -400;
      if (!ll) return 0;
      uint64_t size = 0;
      size_t k = 0;
      int d;
      while (k < ll && (d = hexval((unsigned char)p[k])) >= 0) {
        if (k >= 15) return -400;
        size = size * 16 + (uint64_t)d;
        k++;
      }
      if (!k) return -400;
      while (k < ll && (p[k] == ' ' || p[k] == '\t'))
        k++;
      if (p[k] == ';') {
        for (; p[k] != '\n'; k++) {
          unsigned char ch = (unsigned char)p[k];
          if ((ch < 0x20 && ch != '\t' && ch != '\r') || ch == 0x7f)
            return -400;
        }
      }
      if (p[k] == '\r') k++;
      if (k != ll - 1) return -400;
      hbuf_consume(&c->in, ll);
      if (size == 0) {
        c->bstate = B_TRAILER;
      } else {
        if (r->body_len + size > max) return -413;
        body_reserve(r, (size_t)size);
        c->bleft = size;
        c->bstate = B_CHUNK_DATA;
      }
      break;
    }
    case B_CHUNK_CRLF:
      if (!c->in.len) return 0;
      if (p[0] == '\n') {
        hbuf_consume(&c->in, 1);
      } else if (p[0] == '\r') {
        if (c->in.len < 2) return 0;
        if (p[1] != '\n') return -400;
        hbuf_consume(&c->in, 2);
      } else {
        return -400;
      }
      c->bstate = B_CHUNK_SIZE;
      break;
    case B_TRAILER: {
      size_t ll = in_line(c, c->h->o.max_header_bytes);
      if (ll == (size_t)-1) return -431;
      if (!ll) return 0;
      int empty = ll == 1 || (ll == 2 && p[0] == '\r');
      hbuf_consume(&c->in, ll);
      if (empty) {
        c->bstate = B_NONE;
        break;
      }
      c->trailer_bytes += ll;
      if (c->trailer_bytes > c->h->o.max_header_bytes) return -431;
      break;
    }
    }
  }
}

/* Reads and dispatches the requests waiting in c->in, one at a time. */
static void h1_process(conn *c) {
  kl_httpd_t *h = c->h;
  while (!c->dead && !c->lingering) {
    if (c->req && c->req->phase != RQ_BODY) return; /* busy */
    if (!c->req) {
      if (c->close_after || !c->in.len) return;
      int rc = h1_parse_head(c);
      if (rc == 0) return;
      if (rc < 0) {
        h1_error(c, -rc);
        return;
      }
    }
    int rc = h1_read_body(c);
    if (rc == 0) return;
    if (rc < 0) {
      h1_error(c, -rc);
      return;
    }
    kl_httpd_req_t *r = c->req;
    r->phase = RQ_HANDLER;
    c->started = 0;
    c->bstate = B_NONE;
    h->o.handler(r, h->o.ud);
  }
}

/* ---- the HTTP/1 codec: responses ---- */

static void h1_head(conn *c, kl_httpd_req_t *r, int status, int framing,
                    uint64_t clen) {
  kl_httpd_t *h = c->h;
  char line[64];
  const char *why = reason_phrase(status);
  hbuf *o = &c->out;
  size_t wl = strlen(why);
  hbuf_reserve(o, 64 + wl + r->rh.len + 128);
  memcpy(line, "HTTP/1.1 ", 9);
  size_t n = 9 + fmt_u64(line + 9, (uint64_t)status);
  line[n++] = ' ';
  hbuf_append(o, line, n);
  hbuf_append(o, why, wl);
  hbuf_append(o, "\r\n", 2);
  if (h->o.send_date) {
    hbuf_append(o, "Date: ", 6);
    hbuf_puts(o, date_now(h));
    hbuf_append(o, "\r\n", 2);
  }
  hbuf_append(o, hbuf_data(&r->rh), r->rh.len);
  if (framing == F_LENGTH) {
    memcpy(line, "Content-Length: ", 16);
    n = 16 + fmt_u64(line + 16, clen);
    memcpy(line + n, "\r\n", 2);
    hbuf_append(o, line, n + 2);
  } else if (framing == F_CHUNKED) {
    hbuf_puts(o, "Transfer-Encoding: chunked\r\n");
  }
  if (c->close_after)
    hbuf_puts(o, "Connection: close\r\n");
  else if (r->minor == 0)
    hbuf_puts(o, "Connection: keep-alive\r\n");
  hbuf_append(o, "\r\n", 2);
  h->responses++;
}

/* ---- the HTTP/2 codec (nghttp2): one session per connection ----
 *
 * nghttp2 parses what c->in holds and produces what goes into c->out; this
 * layer maps its streams to requests. Owner code never runs inside an
 * nghttp2 callback: a complete request is marked ready there and handed
 * to the handler once nghttp2_session_mem_recv has returned (h2_dispatch),
 * and a request whose stream closes is detached, so its on_close comes
 * from the loop. The response functions only submit to the session and
 * append to the stream's buffer; frames are taken out by h2_pump, from
 * conn_flush, at most HTTPD_H2_OUT_HIGH ahead of the socket. */

static void h2_stream_link(h2s **head, h2s *s, int pulled) {
  h2s **prev = pulled ? &s->pprev : &s->prev;
  h2s **next = pulled ? &s->pnext : &s->next;
  *prev = NULL;
  *next = *head;
  if (*head) {
    if (pulled)
      (*head)->pprev = s;
    else
      (*head)->prev = s;
  }
  *head = s;
}

static void h2_stream_unlink(h2s **head, h2s *s, int pulled) {
  h2s *prev = pulled ? s->pprev : s->prev;
  h2s *next = pulled ? s->pnext : s->next;
  if (prev) {
    if (pulled)
      prev->pnext = next;
    else
      prev->next = next;
  } else {
    *head = next;
  }
  if (next) {
    if (pulled)
      next->pprev = prev;
    else
      next->prev = prev;
  }
}

static void h2_stream_free(h2s *s) {
  hbuf_free(&s->head);
  hbuf_free(&s->out);
  free(s->method);
  free(s->path);
  free(s->authority);
  free(s);
}

/* Payload is about to join the stream's unsent bytes: a stream that had
 * none starts its write_timeout now. */
static void h2_out_mark(h2s *s) {
  if (!s->out.len) s->wprogress = now(s->c->h);
}

/* nghttp2 takes the stream's payload; it waits (DEFERRED) for more until
 * the owner ends it (EOF), and resets the stream with INTERNAL_ERROR once
 * an aborted stream's last byte is out, as a Go client sees a cut watch. */
static ssize_t h2_read(nghttp2_session *ss, int32_t id, uint8_t *buf,
                       size_t length, uint32_t *flags, nghttp2_data_source *src,
                       void *ud) {
  h2s *s = src->ptr;
  conn *c = ud;
  (void)ss;
  (void)id;
  size_t n = s->out.len < length ? s->out.len : length;
  if (n) memcpy(buf, hbuf_data(&s->out), n);
  hbuf_consume(&s->out, n);
  if (n) s->wprogress = now(c->h);
  if (n && !s->pulled) {
    s->pulled = 1;
    h2_stream_link(&c->pulled, s, 1);
  }
  if (s->out.len) return (ssize_t)n;
  s->flush_at = 0; /* drained: the next burst flushes every 64 KiB again */
  if (s->cut) return n ? (ssize_t)n : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (s->eof) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
  }
  if (n) return (ssize_t)n;
  s->deferred = 1;
  return NGHTTP2_ERR_DEFERRED;
}

/* The stream has more for h2_read: wake its deferred data. */
static void h2_resume(h2s *s) {
  if (s->deferred) {
    s->deferred = 0;
    nghttp2_session_resume_data(s->c->h2, s->id);
  }
  conn_kick(s->c);
}

/* Fields HTTP/2 forbids in a response (RFC 9113 8.2.2). */
static int h2_hop_by_hop(const char *name, size_t n) {
  return ieq(name, n, "keep-alive") || ieq(name, n, "proxy-connection") ||
         ieq(name, n, "upgrade") || ieq(name, n, "te");
}

/* Submits the response head: status, Date, the "Name: value\r\n" lines of
 * fields (names lowercased, as HTTP/2 wants), content-length unless clen
 * is negative, and a payload from s->out when body is set (else the
 * HEADERS frame ends the stream). */
static void h2_submit(h2s *s, int status, const char *fields, size_t flen,
                      int64_t clen, int body) {
  conn *c = s->c;
  kl_httpd_t *h = c->h;
  size_t lines = 0;
  for (size_t i = 0; i < flen; i++)
    if (fields[i] == '\n') lines++;
  nghttp2_nv *nv = kl_xmalloc((lines + 3) * sizeof *nv);
  char *lower_fields = kl_xmalloc(flen + 1);
  char st[8], len[24];
  size_t n = 0;
  snprintf(st, sizeof st, "%d", status);
#define NV(nm, nml, val, vall)                                                 \
  nv[n++] = (nghttp2_nv){(uint8_t *)(nm), (uint8_t *)(val), (nml), (vall),     \
                         NGHTTP2_NV_FLAG_NONE}
  NV(":status", 7, st, strlen(st));
  if (h->o.send_date) {
    const char *d = date_now(h);
    NV("date", 4, d, strlen(d));
  }
  if (clen >= 0) NV("content-length", 14, len, fmt_u64(len, (uint64_t)clen));
  for (size_t i = 0; i < flen; i++)
    lower_fields[i] = (char)lower((unsigned char)fields[i]);
  char *p = lower_fields, *end = lower_fields + flen;
  while (p < end) {
    char *colon = memchr(p, ':', (size_t)(end - p));
    char *eol = memchr(p, '\r', (size_t)(end - p));
    const char *value = fields + (colon - lower_fields) + 2;
    if (!h2_hop_by_hop(p, (size_t)(colon - p)))
      NV(p, (size_t)(colon - p), value, (size_t)(eol - (colon + 2)));
    p = eol + 2;
  }
#undef NV
  nghttp2_data_provider prd;
  prd.source.ptr = s;
  prd.read_callback = h2_read;
  int rv = nghttp2_submit_response(c->h2, s->id, nv, n, body ? &prd : NULL);
  free(nv);
  free(lower_fields);
  if (rv != 0) {
    /* no response can go out: reset the stream rather than leave the
     * client waiting on it */
    kl_log(KL_LOG_DEBUG, "httpd: %s: HTTP/2 response: %s", c->peer,
           nghttp2_strerror(rv));
    nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id,
                              NGHTTP2_INTERNAL_ERROR);
    return;
  }
  h->responses++;
}

/* An aborted stream: RST_STREAM INTERNAL_ERROR once its last byte is out
 * (h2_read), and its owner hears KL_ESHUTDOWN. */
static void h2_cut(h2s *s) {
  s->cut = 1;
  s->reason = KL_ESHUTDOWN;
}

/* Resets the stream now (RST_STREAM INTERNAL_ERROR), its unsent bytes
 * dropped; its request, if any, is detached with reason. */
static void h2_reset(h2s *s, int reason) {
  s->cut = 1;
  s->reason = reason;
  hbuf_free(&s->out);
  nghttp2_submit_rst_stream(s->c->h2, NGHTTP2_FLAG_NONE, s->id,
                            NGHTTP2_INTERNAL_ERROR);
  if (s->req) req_detach(s->req, reason);
  conn_kick(s->c);
}

/* Answers an error by itself, as h1_error does; the request, if any, was
 * the server's and is freed. */
/* The stream's body no longer counts against the connection's budget. */
static void h2_body_release(h2s *s) {
  s->c->h2_body -= s->body_held;
  s->body_held = 0;
}

static void h2_error(h2s *s, int status) {
  conn *c = s->c;
  h2_body_release(s);
  char plain[64], fields[320];
  const char *ctype, *body;
  error_page(c->h, status, plain, &ctype, &body);
  kl_log(KL_LOG_DEBUG, "httpd: %s: %d %s", c->peer, status,
         reason_phrase(status));
  if (s->req) req_detach(s->req, 0); /* RQ_BODY: freed */
  int fl = snprintf(fields, sizeof fields, "Content-Type: %s\r\n", ctype);
  if (fl < 0 || (size_t)fl >= sizeof fields) fl = 0;
  s->refused = status;
  h2_out_mark(s);
  hbuf_puts(&s->out, body);
  s->eof = 1;
  h2_submit(s, status, fields, (size_t)fl, (int64_t)s->out.len, 1);
}

/* Sends GOAWAY once: no new streams; the connection closes when the
 * streams it has are done. */
static void h2_goaway(conn *c) {
  if (c->goaway) return;
  c->goaway = 1;
  nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(c->h2),
                        NGHTTP2_NO_ERROR, NULL, 0);
}

static int h2_on_begin_headers(nghttp2_session *ss, const nghttp2_frame *f,
                               void *ud) {
  conn *c = ud;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0;
  h2s *s = kl_xcalloc(1, sizeof *s);
  s->c = c;
  s->id = f->hd.stream_id;
  s->reason = KL_EIO; /* unless the server ends it: the client went away */
  s->started = now(c->h);
  h2_stream_link(&c->streams, s, 0);
  nghttp2_session_set_stream_user_data(ss, s->id, s);
  return 0;
}

/* Collects a request's fields; trailers are read and ignored, as the
 * HTTP/1 codec ignores chunked trailers. */
static int h2_on_header(nghttp2_session *ss, const nghttp2_frame *f,
                        const uint8_t *name, size_t nl, const uint8_t *value,
                        size_t vl, uint8_t flags, void *ud) {
  conn *c = ud;
  (void)flags;
  h2s *s = nghttp2_session_get_stream_user_data(ss, f->hd.stream_id);
  if (!s || f->headers.cat != NGHTTP2_HCAT_REQUEST || s->refused) return 0;
  const char *n = (const char *)name;
  if (nl && n[0] == ':') {
    char **slot = ieq(n, nl, ":method")      ? &s->method
                  : ieq(n, nl, ":path")      ? &s->path
                  : ieq(n, nl, ":authority") ? &s->authority
                                             : NULL;
    if (slot && !*slot) *slot = kl_xstrndup((const char *)value, vl);
    return 0;
  }
  if (s->head.len + nl + vl + 4 > c->h->o.max_header_bytes) {
    s->refused = 431;
    hbuf_free(&s->head);
    return 0;
  }
  if (ieq(n, nl, "host")) s->host = 1;
  hbuf_append(&s->head, name, nl);
  hbuf_append(&s->head, ": ", 2);
  hbuf_append(&s->head, value, vl);
  hbuf_append(&s->head, "\r\n", 2);
  return 0;
}

/* The head is complete: the request is made as the HTTP/1 codec makes
 * one, from the HTTP/1.1 head its fields spell (:authority as Host), so
 * both protocols give the handler the same request. */
static void h2_request(h2s *s) {
  conn *c = s->c;
  kl_httpd_t *h = c->h;
  if (s->refused) {
    h2_error(s, s->refused);
    return;
  }
  if (!s->method || !s->path) { /* CONNECT */
    h2_error(s, 400);
    return;
  }
  hbuf t = {0};
  hbuf_puts(&t, s->method);
  hbuf_append(&t, " ", 1);
  hbuf_puts(&t, s->path);
  hbuf_puts(&t, " HTTP/1.1\r\n");
  if (s->authority && !s->host) {
    hbuf_puts(&t, "Host: ");
    hbuf_puts(&t, s->authority);
    hbuf_append(&t, "\r\n", 2);
  }
  hbuf_append(&t, hbuf_data(&s->head), s->head.len);
  hbuf_append(&t, "\r\n", 2);
  hbuf_free(&s->head);
  head_info hi;
  kl_httpd_req_t *r = NULL;
  int rc = t.len > h->o.max_header_bytes
               ? -431
               : head_parse(c, hbuf_data(&t), t.len, &hi, &r);
  hbuf_free(&t);
  if (rc < 0) {
    h2_error(s, -rc);
    return;
  }
  r->s = s;
  r->h2 = 1;
  s->req = r;
  if (hi.cl) {
    r->body_cap = (size_t)hi.cl + 1;
    r->body = kl_xmalloc(r->body_cap);
  }
}

/* Asks the client of a refused stream to stop sending (h2_on_frame_send):
 * RST_STREAM NO_ERROR. */
static void h2_linger_end(h2s *s) {
  s->expired = 1;
  nghttp2_submit_rst_stream(s->c->h2, NGHTTP2_FLAG_NONE, s->id,
                            NGHTTP2_NO_ERROR);
  conn_kick(s->c);
}

/* The client sent len more bytes on a refused stream; they are dropped. */
static void h2_linger(h2s *s, size_t len) {
  s->lingered += len;
  if (s->linger_since > 0 && !s->expired && s->lingered > HTTPD_LINGER_BYTES)
    h2_linger_end(s);
}

static int h2_on_data(nghttp2_session *ss, uint8_t flags, int32_t id,
                      const uint8_t *data, size_t len, void *ud) {
  conn *c = ud;
  (void)flags;
  h2s *s = nghttp2_session_get_stream_user_data(ss, id);
  if (!s) return 0;
  if (!s->req) { /* refused: the rest is dropped */
    if (s->refused) h2_linger(s, len);
    return 0;
  }
  kl_httpd_req_t *r = s->req;
  if (r->body_len + len > c->h->o.max_body_bytes) {
    h2_error(s, 413);
    h2_linger(s, len);
    return 0;
  }
  /* Bodies are read whole before the handler sees them: the streams of one
   * connection may hold HTTPD_H2_BODIES of the largest at once; a stream
   * past that is refused (the client may send it again). */
  if (c->h2_body + len > HTTPD_H2_BODIES * c->h->o.max_body_bytes) {
    kl_log(KL_LOG_DEBUG,
           "httpd: %s: stream %d refused: %zu bytes of request bodies "
           "arriving",
           c->peer, (int)id, c->h2_body);
    h2_body_release(s);
    req_detach(r, 0); /* RQ_BODY: freed */
    s->expired = 1;
    nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, id,
                              NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  s->body_held += len;
  c->h2_body += len;
  body_reserve(r, len);
  memcpy(r->body + r->body_len, data, len);
  r->body_len += len;
  r->body[r->body_len] = '\0';
  return 0;
}

static int h2_on_frame_recv(nghttp2_session *ss, const nghttp2_frame *f,
                            void *ud) {
  conn *c = ud;
  h2s *s = nghttp2_session_get_stream_user_data(ss, f->hd.stream_id);
  if (!s) return 0;
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
    h2_request(s);
  else if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
    return 0;
  if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
    s->complete = 1;
    h2_body_release(s);
  }
  if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && s->req && !s->ready) {
    s->ready = 1;
    c->h2_ready++;
  }
  return 0;
}

static int h2_on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code,
                              void *ud) {
  conn *c = ud;
  (void)code;
  h2s *s = nghttp2_session_get_stream_user_data(ss, id);
  if (!s) return 0;
  h2_body_release(s);
  if (s->req) req_detach(s->req, s->reason);
  if (s->ready) c->h2_ready--;
  if (s->pulled) h2_stream_unlink(&c->pulled, s, 1);
  h2_stream_unlink(&c->streams, s, 0);
  h2_stream_free(s);
  if (!c->streams) c->idle_since = now(c->h);
  return 0;
}

/* A stream answered before its request came whole (an early 413 or 431,
 * h2_error): once the response's last frame is out, the stream lingers as
 * an HTTP/1.1 connection does, so that the client reads the answer (curl
 * stops its upload when it sees it; a client reset while it still sends
 * may report a stream error instead). What the client still sends is
 * dropped; a client that goes on past HTTPD_LINGER_BYTES, or for
 * HTTPD_LINGER_TIMEOUT, is asked to stop with RST_STREAM NO_ERROR (RFC
 * 9113, 8.1). */
static int h2_on_frame_send(nghttp2_session *ss, const nghttp2_frame *f,
                            void *ud) {
  conn *c = ud;
  int32_t id = f->hd.stream_id;
  if (!(f->hd.flags & NGHTTP2_FLAG_END_STREAM) ||
      (f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS))
    return 0;
  h2s *s = nghttp2_session_get_stream_user_data(ss, id);
  if (!s || !s->refused || s->expired ||
      nghttp2_session_get_stream_remote_close(ss, id))
    return 0;
  s->linger_since = now(c->h);
  if (s->lingered > HTTPD_LINGER_BYTES) h2_linger_end(s);
  return 0;
}

/* nghttp2 fails these only when out of memory. */
static void h2_oom(void) {
  kl_log(KL_LOG_ERROR, "httpd: out of memory");
  abort();
}

static nghttp2_session_callbacks *h2_callbacks_new(void) {
  nghttp2_session_callbacks *cb;
  if (nghttp2_session_callbacks_new(&cb) != 0) h2_oom();
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
                                                          h2_on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, h2_on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2_on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb,
                                                         h2_on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, h2_on_frame_send);
  return cb;
}

/* ALPN chose h2: the connection speaks it from its first byte on. */
static void h2_start(conn *c) {
  kl_httpd_t *h = c->h;
  if (nghttp2_session_server_new(&c->h2, h->h2cb, c) != 0) h2_oom();
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, HTTPD_H2_MAX_STREAMS},
  };
  nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 1);
  c->started = 0;
  c->idle_since = now(h);
}

/* Hands the complete requests to the handler, oldest stream last. The
 * scan starts over after each: a handler's write may flush, and nghttp2
 * may then close and free other streams. */
static void h2_dispatch(conn *c) {
  kl_httpd_t *h = c->h;
  while (c->h2_ready && !c->dead) {
    h2s *s = c->streams;
    while (s && !s->ready)
      s = s->next;
    if (!s) break;
    s->ready = 0;
    c->h2_ready--;
    kl_httpd_req_t *r = s->req;
    if (!r) continue;
    r->phase = RQ_HANDLER;
    h->o.handler(r, h->o.ud);
  }
}

/* Feeds c->in to the session, then runs the requests it completed. */
static void h2_recv(conn *c) {
  ssize_t n = nghttp2_session_mem_recv(
      c->h2, (const uint8_t *)hbuf_data(&c->in), c->in.len);
  hbuf_consume(&c->in, c->in.len);
  if (n < 0) {
    kl_log(KL_LOG_DEBUG, "httpd: %s: HTTP/2: %s", c->peer,
           nghttp2_strerror((int)n));
    conn_kill(c, KL_EIO);
    return;
  }
  h2_dispatch(c);
}

/* Moves frames from the session into c->out. Returns -1 on a fatal
 * session error. */
static int h2_pump(conn *c) {
  while (c->out.len < HTTPD_H2_OUT_HIGH) {
    const uint8_t *d;
    ssize_t n = nghttp2_session_mem_send(c->h2, &d);
    if (n < 0) {
      kl_log(KL_LOG_DEBUG, "httpd: %s: HTTP/2: %s", c->peer,
             nghttp2_strerror((int)n));
      return -1;
    }
    if (!n) break;
    hbuf_append(&c->out, d, (size_t)n);
  }
  return 0;
}

/* Both sides are done (GOAWAY and no streams left, or nothing to read). */
static int h2_finished(conn *c) {
  return !nghttp2_session_want_read(c->h2) &&
         !nghttp2_session_want_write(c->h2);
}

/* The drain pass after a flush: streams whose producers wait for room
 * hear about it; drained buffers of idle streams are given back. */
static void h2_drained(conn *c) {
  size_t low = c->h->o.stream_low_water;
  int called = 0;
  while (c->pulled && !c->dead) {
    h2s *s = c->pulled;
    h2_stream_unlink(&c->pulled, s, 1);
    s->pulled = 0;
    if (!s->out.len) hbuf_free(&s->out);
    kl_httpd_req_t *r = s->req;
    if (r && r->phase == RQ_STREAM && r->want_drain && s->out.len <= low) {
      r->want_drain = 0;
      if (r->on_drain) {
        r->on_drain(r, r->cb_ud);
        called = 1;
      }
    }
  }
  /* This runs in the connection's last flush, where conn_kick does
   * nothing (in_io): what an on_drain wrote would wait for the client's
   * next frame. */
  if (called && !c->dead && nghttp2_session_want_write(c->h2))
    kl_loop_defer(c->h->loop, &c->defer);
}

/* Every stream's request is detached (the connection is gone); the
 * streams themselves are freed with the session. */
static void h2_detach_all(conn *c, int reason) {
  for (h2s *s = c->streams; s; s = s->next)
    if (s->req) req_detach(s->req, reason);
}

static void h2_free(conn *c) {
  if (!c->h2) return;
  nghttp2_session_del(c->h2);
  c->h2 = NULL;
  while (c->streams) {
    h2s *s = c->streams;
    h2_stream_unlink(&c->streams, s, 0);
    h2_stream_free(s);
  }
}

/* ---- connections ---- */

static size_t in_limit(const kl_httpd_t *h) {
  return h->o.max_header_bytes + HTTPD_READ_CHUNK;
}

static double conn_deadline(conn *c) {
  const kl_httpd_opts_t *o = &c->h->o;
  if (c->lingering) return c->linger_since + HTTPD_LINGER_TIMEOUT;
  double d = INFINITY;
  if (c->blocked || c->job) d = c->wprogress + o->write_timeout;
  if (c->h2) { /* a request still arriving has read_timeout from HEADERS,
                  a response waiting for its window write_timeout */
    for (const h2s *s = c->streams; s; s = s->next) {
      if (s->expired) continue;
      double rd = s->linger_since > 0 ? s->linger_since + HTTPD_LINGER_TIMEOUT
                                      : s->started + o->read_timeout;
      if (!s->complete && rd < d) d = rd;
      if (s->out.len && s->wprogress + o->write_timeout < d)
        d = s->wprogress + o->write_timeout;
    }
    double idle = c->idle_since + o->idle_timeout;
    return !c->streams && !c->out.len && idle < d ? idle : d;
  }
  if (!c->req || c->req->phase == RQ_BODY || c->handshake) {
    double x = c->started > 0           ? c->started + o->read_timeout
               : !c->out.len && !c->job ? c->idle_since + o->idle_timeout
                                        : INFINITY;
    if (x < d) d = x;
  }
  return d;
}

static void conn_arm(conn *c) {
  kl_timers_t *ts = kl_loop_timers(c->h->loop);
  double d = conn_deadline(c);
  if (d == INFINITY) {
    kl_timers_stop(ts, &c->timer);
    return;
  }
  /* A later deadline waits for the armed one to fire and re-arm. */
  if (!kl_timer_armed(&c->timer) || d < c->timer.at)
    kl_timers_start(ts, &c->timer, d);
}

static void conn_update(conn *c) {
  if (c->dead) return;
  int ev = 0;
  if (c->handshake) {
    ev = c->hs_write ? EV_WRITE : EV_READ;
  } else {
    if (c->lingering || (!c->rd_eof && c->in.len < in_limit(c->h)))
      ev |= EV_READ;
    if (c->out.len && !c->tls_wr && !c->job) ev |= EV_WRITE;
    if (c->tls_wr) ev |= EV_READ;
    if (c->tls_rw) ev |= EV_WRITE;
  }
  if (ev != c->events) {
    ev_io_stop(c->h->ev, &c->io);
    ev_io_set(&c->io, c->fd, ev);
    if (ev) ev_io_start(c->h->ev, &c->io);
    c->events = ev;
  }
  /* Bytes TLS decrypted already make the socket look idle: read them from
   * the defer node once there is room. */
  if (c->ssl && !c->handshake && !c->lingering && c->in.len < in_limit(c->h) &&
      SSL_pending(c->ssl) > 0)
    kl_loop_defer(c->h->loop, &c->defer);
  conn_arm(c);
}

static void conn_kick(conn *c) {
  if (!c->in_io && !c->dead) kl_loop_defer(c->h->loop, &c->defer);
}

static void list_unlink(conn **head, conn *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    *head = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

static void list_push(conn **head, conn *c) {
  c->prev = NULL;
  c->next = *head;
  if (*head) (*head)->prev = c;
  *head = c;
}

/* Closes the socket now. The request, if any, is detached with `reason`;
 * the memory goes from the connection's defer node. */
static void conn_kill(conn *c, int reason) {
  kl_httpd_t *h = c->h;
  if (c->dead) return;
  c->dead = 1;
  ev_io_stop(h->ev, &c->io);
  kl_timers_stop(kl_loop_timers(h->loop), &c->timer);
  if (c->ssl) SSL_free(c->ssl);
  c->ssl = NULL;
  if (c->job && atomic_load(&c->job->state) != SJ_BACK) {
    /* The thread may be writing to it: it fails at once and the job,
     * given back, closes the socket (no other may take its number). */
    shutdown(c->fd, SHUT_RDWR);
    c->job->c = NULL;
    c->job = NULL;
  } else {
    sendjob_drop(c);
    close(c->fd);
  }
  c->fd = -1;
  list_unlink(&h->live, c);
  list_push(&h->dead, c);
  h->nconns--;
  if (c->req) req_detach(c->req, reason);
  if (c->h2) h2_detach_all(c, reason);
  hbuf_free(&c->in);
  hbuf_free(&c->out);
  hbuf_free(&c->spare);
  hbuf_free(&c->rh_spare);
  kl_loop_defer(h->loop, &c->defer);
  accept_resume(h);
}

/* Empties the thread's OpenSSL error queue before an SSL_ call, so that
 * SSL_get_error reads that call's failure only (it looks at the queue with
 * ERR_peek_error too). The queue is nearly always empty, and a look costs
 * a quarter of ERR_clear_error's sweep of every slot. */
static void tls_clear(void) {
  if (ERR_peek_error()) ERR_clear_error();
}

/* The response is over and its bytes are written: send FIN, then read and
 * discard what the client still sends, so that closing does not reset a
 * response it has not read yet. */
static void conn_shutdown(conn *c) {
  if (c->req) req_detach(c->req, KL_ESHUTDOWN);
  if (c->h2) h2_detach_all(c, KL_ESHUTDOWN);
  if (c->ssl && !c->cut) {
    tls_clear();
    SSL_shutdown(c->ssl);
  }
  shutdown(c->fd, SHUT_WR);
  c->lingering = 1;
  c->linger_since = now(c->h);
  c->blocked = 0;
  hbuf_free(&c->in);
}

/* Writes c->out. Returns -1 when the connection was killed or shut down. */
static int conn_flush(conn *c, int callbacks) {
  kl_httpd_t *h = c->h;
  if (c->dead || c->lingering || c->handshake) return -1;
  if (c->job) return 0; /* the send thread's socket: c->out waits */
  if (c->out.len >= HTTPD_SEND_THREAD_MIN && send_thread_serves(c)) {
    sendjob_hand(c);
    return 0;
  }
  for (;;) {
    if (c->h2 && c->out.len < HTTPD_H2_OUT_HIGH && h2_pump(c) < 0) {
      conn_kill(c, KL_EIO);
      return -1;
    }
    if (!c->out.len) break;
    ssize_t n;
    if (c->ssl) {
      size_t len = c->out.len > INT_MAX ? INT_MAX : c->out.len;
      tls_clear();
      n = SSL_write(c->ssl, hbuf_data(&c->out), (int)len);
      if (n <= 0) {
        int e = SSL_get_error(c->ssl, (int)n);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
          c->tls_wr = e == SSL_ERROR_WANT_READ;
          goto blocked;
        }
        kl_log(KL_LOG_DEBUG, "httpd: %s: TLS write failed", c->peer);
        conn_kill(c, KL_EIO);
        return -1;
      }
    } else {
      n = send(c->fd, hbuf_data(&c->out), c->out.len, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) goto blocked;
        kl_log(KL_LOG_DEBUG, "httpd: %s: write: %s", c->peer, strerror(errno));
        conn_kill(c, KL_EIO);
        return -1;
      }
    }
    hbuf_consume(&c->out, (size_t)n);
    if (c->blocked) c->wprogress = now(h);
  }
  c->blocked = 0;
  c->flush_at = 0;
  /* A drained stream gives its buffer back once its producer is done for
   * now (thousands of watches sit idle most of the time), but not in the
   * middle of a burst of writes (callbacks == 0), which would refill it. */
  if (callbacks &&
      (c->out.cap > HTTPD_KEEP_BUF || (c->req && c->req->phase == RQ_STREAM))) {
    hbuf_free(&c->out);
    hbuf_free(&c->spare);
  }
  if (c->h2 ? h2_finished(c) : c->cut || (c->close_after && !c->req)) {
    conn_shutdown(c);
    return -1;
  }
  goto drained;
blocked:
  if (!c->blocked) {
    c->blocked = 1;
    c->wprogress = now(h);
  }
drained:
  if (callbacks && c->h2) h2_drained(c);
  if (callbacks && c->req && c->req->phase == RQ_STREAM && c->req->want_drain &&
      c->out.len <= h->o.stream_low_water) {
    kl_httpd_req_t *r = c->req;
    r->want_drain = 0;
    if (r->on_drain) r->on_drain(r, r->cb_ud);
  }
  return 0;
}

static void conn_eof(conn *c) {
  if (c->h2 || (c->req && c->req->phase != RQ_BODY)) {
    conn_kill(c, KL_EIO); /* the client went away */
    return;
  }
  if (c->out.len || c->job) {
    /* Complete responses are still queued: send them, then close. */
    if (c->req) {
      kl_httpd_req_t *r = c->req;
      conn_req_gone(c);
      req_free(r);
    }
    c->close_after = 1;
    c->rd_eof = 1; /* a socket at its end reads as ready: stop asking */
    c->started = 0;
    hbuf_free(&c->in);
    return;
  }
  conn_kill(c, 0);
}

static void conn_linger_read(conn *c) {
  char tmp[16384];
  for (;;) {
    ssize_t n = read(c->fd, tmp, sizeof tmp);
    if (n > 0) {
      c->lingered += (size_t)n;
      if (c->lingered > HTTPD_LINGER_BYTES) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;
  }
  conn_kill(c, 0);
}

static void conn_read(conn *c) {
  kl_httpd_t *h = c->h;
  if (c->lingering) {
    conn_linger_read(c);
    return;
  }
  for (int round = 0; round < 8 && !c->dead && !c->lingering; round++) {
    size_t limit = in_limit(h);
    if (c->in.len >= limit) return; /* busy and the client pipelines on */
    size_t want = limit - c->in.len;
    if (want > HTTPD_READ_CHUNK) want = HTTPD_READ_CHUNK;
    hbuf_reserve(&c->in, want);
    char *dst = c->in.p + c->in.off + c->in.len;
    ssize_t n;
    if (c->ssl) {
      tls_clear();
      n = SSL_read(c->ssl, dst, (int)want);
      if (n <= 0) {
        int e = SSL_get_error(c->ssl, (int)n);
        if (e == SSL_ERROR_WANT_READ) return;
        if (e == SSL_ERROR_WANT_WRITE) {
          c->tls_rw = 1;
          return;
        }
        if (e == SSL_ERROR_ZERO_RETURN) {
          conn_eof(c);
          return;
        }
        kl_log(KL_LOG_DEBUG, "httpd: %s: TLS read failed", c->peer);
        conn_kill(c, KL_EIO);
        return;
      }
    } else {
      n = read(c->fd, dst, want);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        kl_log(KL_LOG_DEBUG, "httpd: %s: read: %s", c->peer, strerror(errno));
        conn_kill(c, KL_EIO);
        return;
      }
      if (n == 0) {
        conn_eof(c);
        return;
      }
    }
    c->in.len += (size_t)n;
    if (c->h2) {
      h2_recv(c);
    } else {
      if (!c->req && c->started == 0) c->started = now(h);
      h1_process(c);
      if (c->close_after && !c->req) hbuf_consume(&c->in, c->in.len);
    }
    if ((size_t)n < want && !(c->ssl && SSL_pending(c->ssl))) return;
  }
}

static void conn_handshake(conn *c) {
  tls_clear();
  int rc = SSL_do_handshake(c->ssl);
  if (rc == 1) {
    c->handshake = 0;
    c->hs_write = 0;
    const unsigned char *proto;
    unsigned int plen;
    SSL_get0_alpn_selected(c->ssl, &proto, &plen);
    if (plen == 2 && memcmp(proto, "h2", 2) == 0) h2_start(c);
    conn_read(c);
    return;
  }
  int e = SSL_get_error(c->ssl, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    c->hs_write = e == SSL_ERROR_WANT_WRITE;
    return;
  }
  char msg[256];
  ERR_error_string_n(ERR_get_error(), msg, sizeof msg);
  kl_log(KL_LOG_DEBUG, "httpd: %s: TLS handshake failed: %s", c->peer, msg);
  conn_kill(c, 0);
}

static void conn_on_io(struct ev_loop *ev, ev_io *w, int revents) {
  conn *c = w->data;
  kl_httpd_t *h = c->h;
  (void)ev;
  h_enter(h);
  c->in_io = 1;
  if (c->handshake) {
    conn_handshake(c);
  } else {
    if (c->job) {
      /* the send thread's socket: c->out waits for the job */
    } else if ((revents & EV_WRITE) || (c->tls_wr && (revents & EV_READ))) {
      c->tls_wr = 0;
      conn_flush(c, 1);
    }
    if (!c->dead &&
        ((revents & EV_READ) || (c->tls_rw && (revents & EV_WRITE)))) {
      c->tls_rw = 0;
      conn_read(c);
    }
  }
  if (!c->dead && !c->handshake && (c->out.len || c->h2)) conn_flush(c, 1);
  c->in_io = 0;
  conn_update(c);
  h_leave(h);
}

static void conn_free(conn *c) {
  h2_free(c);
  free(c);
}

/* The defer node: frees a dead connection, or serves a live one after an
 * owner's call from outside its io callback. */
static void conn_on_defer(kl_defer_t *d) {
  conn *c = CONTAINER(d, conn, defer);
  kl_httpd_t *h = c->h;
  if (c->dead) {
    list_unlink(&h->dead, c);
    conn_free(c);
    return;
  }
  h_enter(h);
  c->in_io = 1;
  if (!c->handshake) {
    if (c->ssl && !c->lingering && SSL_pending(c->ssl) > 0) conn_read(c);
    if (c->h2)
      h2_dispatch(c);
    else
      h1_process(c);
    conn_flush(c, 1);
  }
  c->in_io = 0;
  conn_update(c);
  h_leave(h);
}

/* Resets (CANCEL; on_stream_close frees them) the streams whose requests
 * did not arrive whole within read_timeout of their HEADERS, and those
 * whose unsent bytes found no room in the client's window for
 * write_timeout; a refused stream still sent to HTTPD_LINGER_TIMEOUT after
 * its answer, with NO_ERROR (h2_on_frame_send). Returns how many. */
static int h2_expire(conn *c, double tnow) {
  const kl_httpd_opts_t *o = &c->h->o;
  int n = 0;
  for (h2s *s = c->streams; s; s = s->next) {
    if (s->expired) continue;
    if (!s->complete && s->linger_since > 0) {
      if (s->linger_since + HTTPD_LINGER_TIMEOUT > tnow) continue;
      kl_log(KL_LOG_DEBUG, "httpd: %s: stream %d: still sending after %d",
             c->peer, (int)s->id, s->refused);
      h2_linger_end(s);
      n++;
      continue;
    }
    int rd = !s->complete && s->started + o->read_timeout <= tnow;
    int wr = s->out.len && s->wprogress + o->write_timeout <= tnow;
    if (!rd && !wr) continue;
    kl_log(KL_LOG_DEBUG, "httpd: %s: stream %d: %s timeout", c->peer,
           (int)s->id, rd ? "request read" : "write");
    s->expired = 1;
    nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
    n++;
  }
  return n;
}

static void conn_on_timer(kl_timer_t *t, void *ud) {
  conn *c = ud;
  kl_httpd_t *h = c->h;
  (void)t;
  h_enter(h);
  double tnow = now(h);
  if (c->job && !sendjob_news(c)) { /* the timeout sees the thread's news */
    h_leave(h);
    return;
  }
  double d = conn_deadline(c);
  if (tnow < d) {
    conn_arm(c);
  } else if (c->lingering) {
    conn_kill(c, 0);
  } else if (c->blocked || c->job) {
    kl_log(KL_LOG_DEBUG, "httpd: %s: write timeout", c->peer);
    conn_kill(c, KL_EIO);
  } else if (c->h2 && h2_expire(c, tnow)) {
    c->in_io = 1;
    conn_flush(c, 0);
    c->in_io = 0;
    conn_update(c);
  } else if (c->started > 0 && !c->handshake && (c->in.len || c->req) &&
             (!c->req || c->req->phase == RQ_BODY)) {
    c->in_io = 1;
    h1_error(c, 408);
    conn_flush(c, 0);
    c->in_io = 0;
    conn_update(c);
  } else if (c->h2 && !c->goaway) { /* idle: say so, then close */
    c->in_io = 1;
    h2_goaway(c);
    conn_flush(c, 0);
    c->in_io = 0;
    conn_update(c);
  } else {
    conn_kill(c, 0); /* idle, or a connection that never sent a byte */
  }
  h_leave(h);
}

/* "ip:port" or "[ip6]:port" of an accepted socket's peer into out. */
static void peer_name(const struct sockaddr_storage *ss, char *out, size_t n) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)ss;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(out, n, "%s:%d", ip, ntohs(a->sin_port));
  } else {
    const struct sockaddr_in6 *a =
        (const struct sockaddr_in6 *)(const void *)ss;
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    snprintf(out, n, "[%s]:%d", ip, ntohs(a->sin6_port));
  }
}

/* A connection on fd, with TLS when the server has it and tls is set.
 * Returns NULL (fd closed) when TLS cannot start. */
static conn *conn_new(kl_httpd_t *h, int fd, const char *peer, int tls) {
  conn *c = kl_xcalloc(1, sizeof *c);
  c->h = h;
  c->fd = fd;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  kl_defer_init(&c->defer, conn_on_defer);
  kl_timer_init(&c->timer, conn_on_timer, c);
  ev_io_init(&c->io, conn_on_io, fd, EV_READ);
  c->io.data = c;
  c->events = EV_READ;
  c->started = c->idle_since = now(h);
  if (h->ssl_ctx && tls) {
    c->ssl = SSL_new(h->ssl_ctx);
    if (!c->ssl) {
      kl_log(KL_LOG_ERROR, "httpd: SSL_new failed");
      close(fd);
      free(c);
      return NULL;
    }
    SSL_set_fd(c->ssl, fd);
    SSL_set_accept_state(c->ssl);
    c->handshake = 1;
  }
  list_push(&h->live, c);
  h->nconns++;
  h->accepted++;
  ev_io_start(h->ev, &c->io);
  conn_arm(c);
  return c;
}

/* ---- the listener ---- */

static void accept_pause(kl_httpd_t *h) {
  if (!h->listening) return;
  ev_io_stop(h->ev, &h->lio);
  h->listening = 0;
}

static void accept_resume(kl_httpd_t *h) {
  if (h->listening || h->lfd < 0 || kl_timer_armed(&h->accept_timer)) return;
  if (h->o.max_connections && h->nconns >= h->o.max_connections) return;
  ev_io_start(h->ev, &h->lio);
  h->listening = 1;
}

static void on_accept_timer(kl_timer_t *t, void *ud) {
  (void)t;
  accept_resume(ud);
}

static void on_accept(struct ev_loop *ev, ev_io *w, int revents) {
  kl_httpd_t *h = w->data;
  (void)ev;
  (void)revents;
  h_enter(h);
  for (int i = 0; i < 64; i++) {
    if (h->o.max_connections && h->nconns >= h->o.max_connections) {
      accept_pause(h);
      break;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(h->lfd, (struct sockaddr *)&ss, &sl,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      double t = now(h);
      if (t - h->accept_err_logged >= 1.0) {
        kl_log(KL_LOG_ERROR, "httpd: accept: %s", strerror(errno));
        h->accept_err_logged = t;
      }
      /* Out of descriptors or memory: try again in a little while. */
      accept_pause(h);
      kl_timers_start(kl_loop_timers(h->loop), &h->accept_timer, t + 0.1);
      break;
    }
    char peer[INET6_ADDRSTRLEN + 8];
    peer_name(&ss, peer, sizeof peer);
    conn_new(h, fd, peer, 1);
  }
  h_leave(h);
}

static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  /* h2 first: the server's preference decides, as kube-apiserver's. */
  static const unsigned char protos[] = "\x02h2\x08http/1.1";
  (void)ssl;
  (void)arg;
  if (SSL_select_next_proto((unsigned char **)out, outlen, protos,
                            sizeof protos - 1, in,
                            inlen) == OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_OK;
  return SSL_TLSEXT_ERR_NOACK;
}

static void tls_err(char *err, size_t errlen, const char *what,
                    const char *file) {
  char msg[256];
  unsigned long e = ERR_get_error();
  ERR_error_string_n(e, msg, sizeof msg);
  if (err) snprintf(err, errlen, "%s %s: %s", what, file ? file : "", msg);
  ERR_clear_error();
}

static SSL_CTX *tls_ctx_new(const kl_httpd_opts_t *o, char *err,
                            size_t errlen) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) {
    tls_err(err, errlen, "TLS context", NULL);
    return NULL;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (!o->tls_keep_buffers) SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  /* TLS 1.3 suites in the order Go's servers prefer them on hardware with
   * AES instructions (kube-apiserver, controller-runtime): AES-128-GCM
   * first, which costs fewer rounds per record than OpenSSL's first
   * choice, AES-256-GCM. */
  if (SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:"
                                    "TLS_CHACHA20_POLY1305_SHA256:"
                                    "TLS_AES_256_GCM_SHA384") != 1) {
    tls_err(err, errlen, "TLS cipher suites", NULL);
    goto fail;
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, o->tls_cert_file) != 1) {
    tls_err(err, errlen, "TLS certificate", o->tls_cert_file);
    goto fail;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, o->tls_key_file, SSL_FILETYPE_PEM) !=
      1) {
    tls_err(err, errlen, "TLS key", o->tls_key_file);
    goto fail;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    tls_err(err, errlen, "TLS key does not match the certificate",
            o->tls_key_file);
    goto fail;
  }
  SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
  return ctx;
fail:
  SSL_CTX_free(ctx);
  return NULL;
}

/* Opens the listening socket. Returns the fd or -1 with a message. */
static int listen_on(const char *host, int port, char *err, size_t errlen) {
  struct sockaddr_storage ss;
  socklen_t sl;
  char lit[INET6_ADDRSTRLEN + 2];
  int any = !host || !*host;
  memset(&ss, 0, sizeof ss);
  if (!any && host[0] == '[') {
    size_t n = strlen(host);
    if (n < 3 || host[n - 1] != ']' || n - 2 >= sizeof lit) goto badhost;
    memcpy(lit, host + 1, n - 2);
    lit[n - 2] = '\0';
  } else if (!any) {
    if (strlen(host) >= sizeof lit) goto badhost;
    strcpy(lit, host);
  } else {
    strcpy(lit, "::");
  }
  for (int attempt = 0; attempt < 2; attempt++) {
    struct sockaddr_in *a4 = (struct sockaddr_in *)(void *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)(void *)&ss;
    memset(&ss, 0, sizeof ss);
    if (inet_pton(AF_INET, lit, &a4->sin_addr) == 1) {
      a4->sin_family = AF_INET;
      a4->sin_port = htons((uint16_t)port);
      sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, lit, &a6->sin6_addr) == 1) {
      a6->sin6_family = AF_INET6;
      a6->sin6_port = htons((uint16_t)port);
      sl = sizeof *a6;
    } else {
      goto badhost;
    }
    int fd =
        socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      if (any && attempt == 0 && errno == EAFNOSUPPORT) {
        strcpy(lit, "0.0.0.0");
        continue;
      }
      if (err) snprintf(err, errlen, "socket: %s", strerror(errno));
      return -1;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (any && ss.ss_family == AF_INET6)
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 4096) < 0) {
      int e = errno;
      close(fd);
      if (any && attempt == 0 && e == EADDRNOTAVAIL) {
        strcpy(lit, "0.0.0.0");
        continue;
      }
      if (err)
        snprintf(err, errlen, "listen on %s port %d: %s", any ? "*" : host,
                 port, strerror(e));
      return -1;
    }
    return fd;
  }
badhost:
  if (err) snprintf(err, errlen, "listen: %s is not an IP address", host);
  return -1;
}

/* ---- the server ---- */

static void error_pages_free(kl_httpd_t *h) {
  kl_httpd_error_page_t *pages = (kl_httpd_error_page_t *)h->o.error_pages;
  for (size_t i = 0; i < h->o.nerror_pages; i++) {
    free((char *)pages[i].content_type);
    free((char *)pages[i].body);
  }
  free(pages);
}

kl_httpd_t *kl_httpd_new(kl_loop_t *loop, const kl_httpd_opts_t *opts,
                         char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!loop || !opts || !opts->handler || opts->port < 0 ||
      opts->port > 65535 || !opts->tls_cert_file != !opts->tls_key_file) {
    if (err) snprintf(err, errlen, "httpd: invalid options");
    return NULL;
  }
  kl_httpd_t *h = kl_xcalloc(1, sizeof *h);
  h->loop = loop;
  h->ev = kl_loop_ev(loop);
  h->o = *opts;
  h->o.host = h->o.tls_cert_file = h->o.tls_key_file = NULL;
  h->o.error_pages = NULL;
  h->o.nerror_pages = 0;
  if (opts->nerror_pages) {
    kl_httpd_error_page_t *pages =
        kl_xcalloc(opts->nerror_pages, sizeof *pages);
    for (size_t i = 0; i < opts->nerror_pages; i++) {
      const kl_httpd_error_page_t *p = &opts->error_pages[i];
      pages[i].status = p->status;
      pages[i].content_type = kl_xstrdup(p->content_type);
      pages[i].body = kl_xstrdup(p->body);
    }
    h->o.error_pages = pages;
    h->o.nerror_pages = opts->nerror_pages;
  }
  if (!h->o.max_header_bytes) h->o.max_header_bytes = 64 * 1024;
  if (!h->o.max_body_bytes) h->o.max_body_bytes = 3 * 1024 * 1024;
  if (!h->o.max_stream_buffer) h->o.max_stream_buffer = 8 * 1024 * 1024;
  if (!h->o.stream_low_water) h->o.stream_low_water = 64 * 1024;
  if (h->o.read_timeout <= 0) h->o.read_timeout = 30;
  if (h->o.idle_timeout <= 0) h->o.idle_timeout = 90;
  if (h->o.write_timeout <= 0) h->o.write_timeout = 60;
  h->lfd = -1;
  h->accept_err_logged = -1e9;
  ev_async_init(&h->sendback, on_sendback);
  h->sendback.data = h;
  kl_timer_init(&h->accept_timer, on_accept_timer, h);
  if (opts->tls_cert_file) {
    h->ssl_ctx = tls_ctx_new(opts, err, errlen);
    if (!h->ssl_ctx) goto fail;
  }
  h->h2cb = h2_callbacks_new(); /* TLS by ALPN, or kl_httpd_serve_fd */
  h->lfd = listen_on(opts->host, opts->port, err, errlen);
  if (h->lfd < 0) goto fail;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(h->lfd, (struct sockaddr *)&ss, &sl);
  h->port = ntohs(ss.ss_family == AF_INET
                      ? ((struct sockaddr_in *)(void *)&ss)->sin_port
                      : ((struct sockaddr_in6 *)(void *)&ss)->sin6_port);
  ev_io_init(&h->lio, on_accept, h->lfd, EV_READ);
  h->lio.data = h;
  accept_resume(h);
  return h;
fail:
  if (h->ssl_ctx) SSL_CTX_free(h->ssl_ctx);
  nghttp2_session_callbacks_del(h->h2cb);
  error_pages_free(h);
  free(h);
  return NULL;
}

void kl_httpd_free(kl_httpd_t *h) {
  if (!h || h->freeing) return;
  /* Close everything now: no new callbacks start after this. */
  if (h->lfd >= 0) {
    accept_pause(h);
    kl_timers_stop(kl_loop_timers(h->loop), &h->accept_timer);
    close(h->lfd);
    h->lfd = -1;
  }
  /* HTTP/2 clients are told with GOAWAY, as far as the socket takes it
   * now, that the connection ends and no stream of theirs was lost after
   * the last one the server took. */
  for (conn *c = h->live, *next; c; c = next) {
    next = c->next;
    if (c->h2 && !c->dead && !c->lingering && !c->handshake) {
      h2_goaway(c);
      conn_flush(c, 0);
    }
  }
  while (h->live)
    conn_kill(h->live, KL_ESHUTDOWN);
  if (h->depth > 0) {
    h->free_pending = 1;
    return;
  }
  h->freeing = 1;
  h->depth++; /* an on_close calling kl_httpd_free returns at once */
  while (h->zombies) {
    kl_httpd_req_t *r = h->zombies;
    kl_loop_undefer(h->loop, &r->defer);
    zombie_unlink(r);
    r->closing = 1;
    if (r->on_close) r->on_close(r, r->reason, r->cb_ud);
    req_free(r);
  }
  while (h->dead) {
    conn *c = h->dead;
    kl_loop_undefer(h->loop, &c->defer);
    list_unlink(&h->dead, c);
    conn_free(c);
  }
  sender_stop(h);
  if (h->ssl_ctx) SSL_CTX_free(h->ssl_ctx);
  nghttp2_session_callbacks_del(h->h2cb);
  error_pages_free(h);
  free(h);
}

int kl_httpd_serve_fd(kl_httpd_t *h, int fd, const char *peer, int h2) {
  if (fd < 0 || h->free_pending || h->freeing) return KL_EINVAL;
  conn *c = conn_new(h, fd, peer ? peer : "fd", 0);
  if (c && h2) h2_start(c);
  return 0;
}

int kl_httpd_port(const kl_httpd_t *h) { return h->port; }
int kl_httpd_listen_fd(const kl_httpd_t *h) { return h->lfd; }

int kl_httpd_set_tls(kl_httpd_t *h, const char *cert_file, const char *key_file,
                     char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!h->ssl_ctx || !cert_file || !key_file) {
    if (err) snprintf(err, errlen, "httpd: not a TLS server");
    return KL_EINVAL;
  }
  kl_httpd_opts_t o = h->o;
  o.tls_cert_file = cert_file;
  o.tls_key_file = key_file;
  SSL_CTX *ctx = tls_ctx_new(&o, err, errlen);
  if (!ctx) return KL_EINVAL;
  /* connections made before keep the old context: each SSL holds a
   * reference to it, so freeing ours here leaves theirs alive */
  SSL_CTX_free(h->ssl_ctx);
  h->ssl_ctx = ctx;
  return 0;
}

void kl_httpd_get_stats(const kl_httpd_t *h, kl_httpd_stats_t *st) {
  st->connections = h->nconns;
  st->requests = h->nreqs;
  st->streams = h->nstreams;
  st->accepted = h->accepted;
  st->responses = h->responses;
  st->thread_sent = h->thread_sent;
}

/* kl_httpd_close_streams on one HTTP/2 connection: each stream is ended
 * or reset; the connection and its other requests go on. */
static size_t h2_close_streams(conn *c, int how) {
  size_t n = 0;
  for (h2s *s = c->streams; s; s = s->next) {
    kl_httpd_req_t *r = s->req;
    if (!r || r->phase != RQ_STREAM) continue;
    n++;
    if (how == KL_HTTPD_DROP) {
      h2_reset(s, KL_ESHUTDOWN);
      continue;
    }
    s->eof = 1; /* or the reset, if an abort cut it */
    req_detach(r, KL_ESHUTDOWN);
    h2_resume(s);
  }
  return n;
}

size_t kl_httpd_close_streams(kl_httpd_t *h, int how) {
  size_t n = 0;
  conn *next;
  for (conn *c = h->live; c; c = next) {
    next = c->next;
    if (c->h2) {
      n += h2_close_streams(c, how);
      continue;
    }
    kl_httpd_req_t *r = c->req;
    if (!r || r->phase != RQ_STREAM) continue;
    n++;
    if (how == KL_HTTPD_DROP) {
      conn_kill(c, KL_ESHUTDOWN);
      continue;
    }
    if (!r->chunked || c->cut)
      c->close_after = 1;
    else if (!r->head)
      hbuf_puts(&c->out, "0\r\n\r\n");
    req_detach(r, KL_ESHUTDOWN);
    conn_kick(c);
  }
  return n;
}

/* ---- request getters ---- */

const char *kl_httpd_req_method(const kl_httpd_req_t *r) { return r->method; }

const char *kl_httpd_req_path(const kl_httpd_req_t *r, size_t *len) {
  if (len) *len = r->path_len;
  return r->path;
}

const char *kl_httpd_req_query(const kl_httpd_req_t *r, size_t *len) {
  if (len) *len = r->query_len;
  return r->query;
}

const char *kl_httpd_req_param(const kl_httpd_req_t *r, const char *key,
                               size_t nth, size_t *len) {
  for (size_t i = 0; i < r->nparams; i++) {
    if (strcmp(r->params[i].name, key) != 0) continue;
    if (nth-- == 0) {
      if (len) *len = strlen(r->params[i].value);
      return r->params[i].value;
    }
  }
  return NULL;
}

size_t kl_httpd_req_nparams(const kl_httpd_req_t *r) { return r->nparams; }

int kl_httpd_req_param_at(const kl_httpd_req_t *r, size_t i, const char **key,
                          const char **value) {
  if (i >= r->nparams) return KL_ENOENT;
  *key = r->params[i].name;
  *value = r->params[i].value;
  return 0;
}

const char *kl_httpd_req_header(const kl_httpd_req_t *r, const char *name) {
  for (size_t i = 0; i < r->nhdrs; i++)
    if (ieq(r->hdrs[i].name, strlen(r->hdrs[i].name), name))
      return r->hdrs[i].value;
  return NULL;
}

size_t kl_httpd_req_nheaders(const kl_httpd_req_t *r) { return r->nhdrs; }

int kl_httpd_req_header_at(const kl_httpd_req_t *r, size_t i, const char **name,
                           const char **value) {
  if (i >= r->nhdrs) return KL_ENOENT;
  *name = r->hdrs[i].name;
  *value = r->hdrs[i].value;
  return 0;
}

const char *kl_httpd_req_body(const kl_httpd_req_t *r, size_t *len) {
  if (len) *len = r->body_len;
  return r->body ? r->body : "";
}

const char *kl_httpd_req_remote(const kl_httpd_req_t *r) { return r->peer; }
int kl_httpd_req_version(const kl_httpd_req_t *r) {
  return r->h2 ? 20 : 10 + r->minor;
}
int kl_httpd_req_is_tls(const kl_httpd_req_t *r) { return r->tls; }

/* ---- responses ---- */

void kl_httpd_req_set_callbacks(kl_httpd_req_t *r, kl_httpd_close_fn *on_close,
                                kl_httpd_drain_fn *on_drain, void *ud) {
  r->on_close = on_close;
  r->on_drain = on_drain;
  r->cb_ud = ud;
}

int kl_httpd_set_header(kl_httpd_req_t *r, const char *name,
                        const char *value) {
  if (!r || !name || !value || r->phase != RQ_HANDLER) return KL_EINVAL;
  size_t nl = strlen(name), vl = strlen(value);
  if (!nl) return KL_EINVAL;
  for (size_t i = 0; i < nl; i++)
    if (!is_tchar((unsigned char)name[i])) return KL_EINVAL;
  for (size_t i = 0; i < vl; i++) {
    unsigned char ch = (unsigned char)value[i];
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return KL_EINVAL;
  }
  if (ieq(name, nl, "content-length") || ieq(name, nl, "transfer-encoding"))
    return KL_EINVAL;
  if (r->dead) return KL_ESHUTDOWN;
  if (ieq(name, nl, "connection")) {
    if (!ieq(value, vl, "close")) return KL_EINVAL;
    r->resp_close = 1;
    return 0;
  }
  if (r->rh.len + nl + vl + 4 > r->h->o.max_header_bytes) return KL_ELIMIT;
  if (!r->rh.p && r->c && r->c->rh_spare.p) {
    r->rh = r->c->rh_spare;
    r->c->rh_spare = (hbuf){NULL, 0, 0, 0};
  }
  hbuf_reserve(&r->rh, nl + vl + 4);
  hbuf_append(&r->rh, name, nl);
  hbuf_append(&r->rh, ": ", 2);
  hbuf_append(&r->rh, value, vl);
  hbuf_append(&r->rh, "\r\n", 2);
  return 0;
}

/* kl_httpd_reply on an HTTP/2 stream. "Connection: close" becomes GOAWAY:
 * the connection ends once its streams are done. */
static int h2_reply(kl_httpd_req_t *r, int status, const void *body, size_t len,
                    int nobody) {
  h2s *s = r->s;
  if (r->resp_close) h2_goaway(r->c);
  if (!s->cut) { /* an abort before the response sent RST_STREAM instead */
    int payload = !r->head && !nobody;
    if (payload) {
      h2_out_mark(s);
      hbuf_append(&s->out, body, len);
    }
    s->eof = 1;
    h2_submit(s, status, hbuf_data(&r->rh), r->rh.len,
              nobody ? -1 : (int64_t)len, payload);
  }
  req_complete(r->c, r);
  return 0;
}

int kl_httpd_reply(kl_httpd_req_t *r, int status, const void *body,
                   size_t len) {
  if (!r || r->phase != RQ_HANDLER || status < 200 || status > 999 ||
      (len && !body))
    return KL_EINVAL;
  if (r->dead) {
    req_drop_dead(r);
    return KL_ESHUTDOWN;
  }
  conn *c = r->c;
  int nobody = status == 204 || status == 304;
  if (r->s) return h2_reply(r, status, body, nobody ? 0 : len, nobody);
  if (r->resp_close) c->close_after = 1;
  if (c->cut) { /* an abort before the response: nothing more is sent */
    req_complete(c, r);
    return 0;
  }
  h1_head(c, r, status, nobody ? F_NONE : F_LENGTH, nobody ? 0 : len);
  if (r->head || nobody) len = 0;
  /* The body may be the request's own memory: send or copy it before the
   * request is freed. A large one goes out from that memory when it can. */
  if (len >= HTTPD_ZEROCOPY_MIN && !c->ssl && !c->blocked && !c->job) {
    struct iovec iov[2] = {{hbuf_data(&c->out), c->out.len},
                           {(void *)(uintptr_t)body, len}};
    ssize_t n;
    do {
      n = writev(c->fd, iov, 2);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      req_complete(c, r);
      conn_kill(c, KL_EIO);
      return 0;
    }
    size_t sent = n > 0 ? (size_t)n : 0, ol = c->out.len;
    hbuf_consume(&c->out, sent < ol ? sent : ol);
    if (sent > ol) {
      body = (const char *)body + (sent - ol);
      len -= sent - ol;
    }
  }
  hbuf_append(&c->out, body, len);
  req_complete(c, r);
  /* An answer made outside the connection's io callback (from a handler's
   * task, which runs after it) goes out now: through the defer node it
   * would wait for every other handler ready in this pass of the loop, and
   * then for the next pass's reads of every ready connection. The defer node
   * still reads what the client pipelined, and closes. */
  if (!c->in_io && !c->blocked && !c->job && !c->close_after) conn_flush(c, 0);
  return 0;
}

int kl_httpd_stream_begin(kl_httpd_req_t *r, int status) {
  if (!r || r->phase != RQ_HANDLER || status < 200 || status > 999 ||
      status == 204 || status == 304)
    return KL_EINVAL;
  if (r->dead) return KL_ESHUTDOWN;
  conn *c = r->c;
  if (r->s) {
    r->phase = RQ_STREAM;
    c->h->nstreams++;
    if (r->resp_close) h2_goaway(c);
    if (!r->s->cut)
      h2_submit(r->s, status, hbuf_data(&r->rh), r->rh.len, -1, 1);
    conn_kick(c);
    return 0;
  }
  r->chunked = r->minor >= 1;
  if (!r->chunked || r->resp_close) c->close_after = 1;
  r->phase = RQ_STREAM;
  c->h->nstreams++;
  if (!c->cut) h1_head(c, r, status, r->chunked ? F_CHUNKED : F_CLOSE, 0);
  if (!c->in.len) hbuf_free(&c->in); /* a long stream reads nothing */
  conn_kick(c);
  return 0;
}

/* How much of a write of total bytes an armed abort lets out. */
static size_t abort_take(const kl_httpd_req_t *r, size_t total) {
  return r->abort_armed && total > r->abort_left ? r->abort_left : total;
}

/* Appends the first take bytes of the n pieces. */
static void hbuf_append_iov(hbuf *b, const struct iovec *iov, int n,
                            size_t take) {
  hbuf_reserve(b, take);
  for (int i = 0; i < n && take; i++) {
    size_t k = iov[i].iov_len < take ? iov[i].iov_len : take;
    hbuf_append(b, iov[i].iov_base, k);
    take -= k;
  }
}

/* Where a burst of writes is sent without waiting for the loop. */
static size_t sync_flush(const kl_httpd_t *h) {
  size_t quarter = h->o.max_stream_buffer / 4;
  return quarter < HTTPD_SYNC_FLUSH ? quarter : HTTPD_SYNC_FLUSH;
}

static void log_over_cap(const kl_httpd_req_t *r, const char *what,
                         size_t unsent) {
  kl_log(KL_LOG_WARN,
         "httpd: %s: %s stream of %s %s: %zu bytes unsent, over the cap of "
         "%zu",
         r->peer, what, r->method, r->path, unsent, r->h->o.max_stream_buffer);
}

/* kl_httpd_stream_writev on an HTTP/2 stream: the payload waits in the
 * stream's buffer, which nghttp2 empties as the client's flow-control
 * window and the socket allow; max_stream_buffer caps it per stream, and
 * passing it resets only that stream. */
static int h2_writev(kl_httpd_req_t *r, const struct iovec *iov, int n,
                     size_t total) {
  h2s *s = r->s;
  conn *c = r->c;
  kl_httpd_t *h = c->h;
  if (!total || r->head || s->cut) return 0;
  if (s->out.len + total > h->o.max_stream_buffer) {
    log_over_cap(r, "resetting an HTTP/2", s->out.len + total);
    h2_reset(s, KL_ELIMIT);
    return KL_ELIMIT;
  }
  size_t take = abort_take(r, total);
  h2_out_mark(s);
  hbuf_append_iov(&s->out, iov, n, take);
  if (r->abort_armed) {
    r->abort_left -= take;
    if (!r->abort_left) h2_cut(s);
  }
  r->want_drain = 1;
  h2_resume(s);
  /* As on HTTP/1: a long burst of writes is sent as it grows. */
  if (s->out.len >= sync_flush(h) && s->out.len >= s->flush_at) {
    conn_flush(c, 0);
    if (c->dead) return KL_ESHUTDOWN;
    if (!r->s) return 0; /* cut, reset and closed by the flush: s is gone */
    s->flush_at = s->out.len + sync_flush(h);
  }
  return 0;
}

/* ---- the send thread ----
 * With opts.send_thread, a producer that writes a long burst to a plain
 * HTTP/1.1 stream (a simulator's writer, a watch catching up) hands each
 * sync_flush() of it to a thread of the server's, which copies it into the
 * socket while the loop goes on producing: where a core is free, the
 * kernel's send (a copy of every byte, and the reader's wakeups) leaves the
 * producer's. A connection has at most one job out; c->out fills behind
 * it and goes out after it, so the bytes keep their order. The thread
 * waits for all the sockets its jobs wait on at once, so a slow client
 * holds up no other; the loop's write timeout watches its progress. */

/* Sends what j's socket takes now; gives j back and returns 1 when all is
 * sent or a send failed, returns 0 when the socket is full. */
static int sendjob_try(kl_httpd_t *h, sendjob *j) {
  size_t sent = atomic_load(&j->sent);
  atomic_store(&j->tried, 1);
  while (sent < j->b.len) {
    ssize_t n = send(j->fd, j->b.p + j->b.off + sent, j->b.len - sent,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += (size_t)n;
      atomic_store(&j->sent, sent);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    } else {
      j->err = n < 0 ? errno : EPIPE;
      break;
    }
  }
  pthread_mutex_lock(&h->sendmu); /* for sendjob_wait */
  atomic_store(&j->state, SJ_BACK);
  pthread_cond_broadcast(&h->sendcv);
  pthread_mutex_unlock(&h->sendmu);
  ev_async_send(h->ev, &h->sendback);
  return 1;
}

/* The thread: takes the queued jobs, sends each as far as its socket
 * takes it, and waits (poll) for the queue and the full sockets. */
static void *sender_main(void *arg) {
  kl_httpd_t *h = arg;
  size_t nwait = 0, cap = 16;
  sendjob **wait = kl_xmalloc(cap * sizeof *wait); /* full sockets' jobs */
  struct pollfd *pf = kl_xmalloc((cap + 1) * sizeof *pf); /* 0: sendwake */
  for (;;) {
    pthread_mutex_lock(&h->sendmu);
    sendjob *q = h->sendq;
    h->sendq = NULL;
    h->sendq_tail = &h->sendq;
    int stop = h->sender_stop;
    pthread_mutex_unlock(&h->sendmu);
    for (sendjob *next; q; q = next) {
      next = q->qnext;
      if (sendjob_try(h, q)) continue;
      if (nwait == cap) {
        cap *= 2;
        wait = kl_xrealloc(wait, cap * sizeof *wait);
        pf = kl_xrealloc(pf, (cap + 1) * sizeof *pf);
      }
      wait[nwait++] = q;
    }
    if (stop && !nwait) break; /* stopping: every socket is shut down */
    pf[0] = (struct pollfd){h->sendwake, POLLIN, 0};
    for (size_t i = 0; i < nwait; i++)
      pf[1 + i] = (struct pollfd){wait[i]->fd, POLLOUT, 0};
    if (poll(pf, (nfds_t)(1 + nwait), -1) < 0) continue; /* EINTR */
    if (pf[0].revents) {
      uint64_t n;
      ssize_t rc = read(h->sendwake, &n, sizeof n);
      (void)rc; /* nonblocking: at worst, awake once more */
    }
    for (size_t i = nwait; i-- > 0;) { /* from the end: removal swaps */
      if (!pf[1 + i].revents) continue;
      size_t before = atomic_load(&wait[i]->sent);
      if (sendjob_try(h, wait[i])) {
        wait[i] = wait[--nwait];
      } else if (atomic_load(&wait[i]->sent) != before) {
        atomic_store(&wait[i]->moved, 1); /* for the write timeout */
        ev_async_send(h->ev, &h->sendback);
      }
    }
  }
  free(wait);
  free(pf);
  return NULL;
}

static void sender_wake(kl_httpd_t *h) {
  uint64_t one = 1;
  ssize_t rc = write(h->sendwake, &one, sizeof one);
  (void)rc; /* full (never at 2^64 - 2): the thread is awake anyway */
}

/* Starts the thread; returns 0 when it cannot (bursts are then sent
 * from the loop, as without opts.send_thread). */
static int sender_start(kl_httpd_t *h) {
  if (h->sender_state) return h->sender_state > 0;
  h->sender_state = -1;
  h->sendwake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (h->sendwake < 0) {
    kl_log(KL_LOG_WARN,
           "httpd: no send thread (eventfd: %s): streams are "
           "sent from the loop",
           strerror(errno));
    return 0;
  }
  pthread_mutex_init(&h->sendmu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&h->sendcv, &ca);
  pthread_condattr_destroy(&ca);
  h->sendq = NULL;
  h->sendq_tail = &h->sendq;
  sigset_t all, old; /* signals are the loop's */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&h->sender, NULL, sender_main, h);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    kl_log(KL_LOG_WARN,
           "httpd: no send thread (%s): streams are sent from "
           "the loop",
           strerror(rc));
    pthread_cond_destroy(&h->sendcv);
    pthread_mutex_destroy(&h->sendmu);
    close(h->sendwake);
    return 0;
  }
  ev_async_start(h->ev, &h->sendback);
  h->sender_state = 1;
  return 1;
}

/* Stops the thread, which ends once its jobs are done (every connection
 * is gone, and their sockets shut down: each fails at once), and frees
 * the jobs. */
static void sender_stop(kl_httpd_t *h) {
  if (h->sender_state > 0) {
    pthread_mutex_lock(&h->sendmu);
    h->sender_stop = 1;
    pthread_mutex_unlock(&h->sendmu);
    sender_wake(h);
    pthread_join(h->sender, NULL);
    ev_async_stop(h->ev, &h->sendback);
    pthread_cond_destroy(&h->sendcv);
    pthread_mutex_destroy(&h->sendmu);
    close(h->sendwake);
  }
  h->sender_state = 0;
  while (h->jobs) { /* orphans only */
    sendjob *j = h->jobs;
    h->jobs = j->lnext;
    close(j->fd);
    sendjob_free(h, j);
  }
}

static void sendq_push(kl_httpd_t *h, sendjob *j) {
  atomic_store(&j->state, SJ_QUEUED);
  pthread_mutex_lock(&h->sendmu);
  j->qnext = NULL;
  *h->sendq_tail = j;
  h->sendq_tail = &j->qnext;
  pthread_mutex_unlock(&h->sendmu);
  sender_wake(h);
}

static void jobs_unlink(kl_httpd_t *h, sendjob *j) {
  sendjob **pp = &h->jobs;
  while (*pp != j)
    pp = &(*pp)->lnext;
  *pp = j->lnext;
}

/* Hands c->out to the thread (c->out takes the spare buffer). */
static void sendjob_hand(conn *c) {
  kl_httpd_t *h = c->h;
  sendjob *j = kl_xcalloc(1, sizeof *j);
  j->c = c;
  j->fd = c->fd;
  j->b = c->out;
  c->out = c->spare;
  c->out.off = c->out.len = 0;
  memset(&c->spare, 0, sizeof c->spare);
  j->lnext = h->jobs;
  h->jobs = j;
  c->job = j;
  c->blocked = 0;
  c->flush_at = 0;       /* a burst from here is sent at sync_flush() again */
  c->wprogress = now(h); /* the write timeout runs while it is out */
  sendq_push(h, j);
}

/* Frees job j, which the loop holds, counting what the thread sent. */
static void sendjob_free(kl_httpd_t *h, sendjob *j) {
  h->thread_sent += atomic_load(&j->sent);
  hbuf_free(&j->b);
  free(j);
}

/* Frees c's job, which the loop holds. */
static void sendjob_drop(conn *c) {
  sendjob *j = c->job;
  if (!j) return;
  jobs_unlink(c->h, j);
  sendjob_free(c->h, j);
  c->job = NULL;
}

/* Takes back c's job, given back by the thread: kills c when a send
 * failed, keeps the job's buffer for the next burst when it went out
 * whole. Returns 0 when c died. */
static int sendjob_back(conn *c) {
  sendjob *j = c->job;
  c->wprogress = now(c->h);
  if (j->err) {
    kl_log(KL_LOG_DEBUG, "httpd: %s: write: %s", c->peer, strerror(j->err));
    conn_kill(c, KL_EIO);
    return 0;
  }
  hbuf_free(&c->spare);
  c->spare = j->b;
  j->b = (hbuf){NULL, 0, 0, 0};
  sendjob_drop(c);
  return 1;
}

/* What the thread has done with c's job since the loop last looked: its
 * progress on a full socket moves the write timeout, and a job it gave
 * back is taken back, c going on from its defer node. Returns 0 when c
 * died. */
static int sendjob_news(conn *c) {
  if (atomic_exchange(&c->job->moved, 0)) c->wprogress = now(c->h);
  if (atomic_load(&c->job->state) != SJ_BACK) return 1;
  if (!sendjob_back(c)) return 0;
  conn_kick(c);
  return 1;
}

/* The thread has given jobs back: orphans close their sockets; the
 * connections of the others go on from their defer nodes. Each job taken
 * back leaves the list, and the search starts over: taking one back may
 * kill a connection, whose owner may write to others and hand over or
 * take back their jobs. */
static void on_sendback(struct ev_loop *ev, ev_async *w, int revents) {
  kl_httpd_t *h = w->data;
  (void)ev;
  (void)revents;
  for (sendjob *j = h->jobs; j; j = j->lnext)
    if (atomic_exchange(&j->moved, 0) && j->c) j->c->wprogress = now(h);
  for (;;) {
    sendjob *j = h->jobs;
    while (j && atomic_load(&j->state) != SJ_BACK)
      j = j->lnext;
    if (!j) break;
    if (!j->c) {
      jobs_unlink(h, j);
      close(j->fd);
      sendjob_free(h, j);
      continue;
    }
    sendjob_news(j->c);
  }
}

/* Waits at most HTTPD_SEND_WAIT for c's job to come back. */
static void sendjob_wait(conn *c) {
  kl_httpd_t *h = c->h;
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_nsec += (long)(HTTPD_SEND_WAIT * 1e9);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&h->sendmu);
  while (atomic_load(&c->job->state) != SJ_BACK &&
         pthread_cond_timedwait(&h->sendcv, &h->sendmu, &until) == 0)
    ;
  pthread_mutex_unlock(&h->sendmu);
}

/* A burst's sync_flush() point on a plain HTTP/1.1 stream: hands c->out
 * to the thread. A job still out that the thread has not tried yet, or
 * whose client has read since the last such point, is waited for a moment
 * first: the burst goes at the pace its client reads, with one
 * sync_flush() out while the next is written, as the loop's own sends
 * would pace it. A client that reads nothing costs the loop one wait at
 * most: then its c->out grows toward the cap. Returns 0 when c died. */
static int sendjob_burst(conn *c) {
  if (c->job && atomic_load(&c->job->state) != SJ_BACK) {
    size_t sent = atomic_load(&c->job->sent);
    /* new to the thread, or its client reads: keep the client's pace */
    if (!atomic_load(&c->job->tried) || sent != c->job->seen) {
      c->job->seen = sent;
      sendjob_wait(c);
    }
  }
  if (c->job && !sendjob_news(c)) return 0;
  if (!c->job) sendjob_hand(c);
  return 1;
}

/* Whether the send thread takes c's bursts: a plain HTTP/1.1 stream of
 * a server with opts.send_thread whose thread runs. */
static int send_thread_serves(conn *c) {
  return c->h->o.send_thread && !c->ssl && !c->h2 && c->req &&
         c->req->phase == RQ_STREAM && sender_start(c->h);
}

/* Bytes of c's stream not yet sent. */
static size_t conn_unsent(const conn *c) {
  return c->out.len + (c->job ? c->job->b.len - atomic_load(&c->job->sent) : 0);
}

int kl_httpd_stream_writev(kl_httpd_req_t *r, const struct iovec *iov, int n) {
  if (!r || r->phase != RQ_STREAM || n < 0) return KL_EINVAL;
  if (r->dead) return KL_ESHUTDOWN;
  conn *c = r->c;
  kl_httpd_t *h = c->h;
  size_t total = 0;
  for (int i = 0; i < n; i++)
    total += iov[i].iov_len;
  if (r->s) return h2_writev(r, iov, n, total);
  if (!total || r->head || c->cut) return 0;
  if (conn_unsent(c) + total + 32 > h->o.max_stream_buffer) {
    log_over_cap(r, "closing a", conn_unsent(c) + total);
    conn_kill(c, KL_ELIMIT);
    return KL_ELIMIT;
  }
  size_t take = abort_take(r, total);
  hbuf_reserve(&c->out, take + 24);
  if (r->chunked) {
    char line[24];
    size_t ln = fmt_hex(line, total);
    line[ln++] = '\r';
    line[ln++] = '\n';
    hbuf_append(&c->out, line, ln);
  }
  hbuf_append_iov(&c->out, iov, n, take);
  if (r->chunked && take == total) hbuf_append(&c->out, "\r\n", 2);
  if (r->abort_armed) {
    r->abort_left -= take;
    if (!r->abort_left) c->cut = 1;
  }
  r->want_drain = 1;
  /* A producer that writes many events without returning to the loop has
   * them sent every sync_flush() bytes, so the client keeps reading;
   * a socket that is full is tried again only after as many more bytes,
   * not on every write (each try would be a failed send). */
  if (c->out.len >= sync_flush(h) && c->out.len >= c->flush_at) {
    if (send_thread_serves(c)) {
      if (!sendjob_burst(c)) return KL_ESHUTDOWN;
    } else {
      conn_flush(c, 0);
      if (c->dead) return KL_ESHUTDOWN;
    }
    c->flush_at = c->out.len + sync_flush(h);
  }
  conn_kick(c);
  return 0;
}

int kl_httpd_stream_write(kl_httpd_req_t *r, const void *data, size_t len) {
  struct iovec iov = {(void *)(uintptr_t)data, len};
  return kl_httpd_stream_writev(r, &iov, 1);
}

size_t kl_httpd_buffered(const kl_httpd_req_t *r) {
  if (r && r->s) return r->s->out.len;
  return r && r->c ? conn_unsent(r->c) : 0;
}

int kl_httpd_stream_end(kl_httpd_req_t *r) {
  if (!r || r->phase != RQ_STREAM) return KL_EINVAL;
  if (r->dead) {
    req_drop_dead(r);
    return KL_ESHUTDOWN;
  }
  conn *c = r->c;
  if (r->abort_armed) { /* an aborted stream never ends cleanly */
    if (r->s)
      h2_cut(r->s);
    else
      c->cut = 1;
  } else if (r->s) {
    r->s->eof = 1;
  } else if (r->chunked && !r->head) {
    hbuf_puts(&c->out, "0\r\n\r\n");
  }
  if (r->s) h2_resume(r->s);
  req_complete(c, r);
  return 0;
}

int kl_httpd_stream_abort(kl_httpd_req_t *r, size_t n) {
  if (!r || (r->phase != RQ_STREAM && r->phase != RQ_HANDLER) ||
      (r->phase == RQ_HANDLER && n))
    return KL_EINVAL;
  if (r->dead) return KL_ESHUTDOWN;
  conn *c = r->c;
  r->abort_armed = 1;
  r->abort_left = n;
  if (r->s && r->phase == RQ_HANDLER) {
    h2_reset(r->s, KL_ESHUTDOWN); /* no response: RST_STREAM at once */
  } else if (r->s) {
    if (!n || r->head) h2_cut(r->s); /* once what was written is out */
    h2_resume(r->s);
  } else {
    if (!n || r->head) c->cut = 1;
    conn_kick(c);
  }
  return 0;
}
