/* http.c — libcurl multi-socket on the loop (see http.h).
 *
 * curl tells us which sockets to watch (socket callback: one ev_io per
 * socket, attached with curl_multi_assign) and when to call it back (timer
 * callback: one kl_timer_t in the loop's heap). Both callbacks only record;
 * curl is called again from the ev_io and timer callbacks (drive), never from
 * inside its own callbacks. Finished transfers are collected with
 * curl_multi_info_read after each curl_multi_socket_action.
 *
 * Every user callback runs inside drive. So while drive runs (in_curl), what
 * would call curl is put off until curl_multi_socket_action has returned:
 *   - kl_http_start marks the request pending; drive adds it to the multi
 *     handle right after curl returns;
 *   - kl_http_cancel marks the request cancelled (a "zombie"): its write and
 *     header callbacks refuse data from then on and no callback of it runs;
 *     drive frees it once curl has returned and on_done calls are over;
 *   - kl_http_free cancels everything and frees the client at the end.
 * Outside drive, cancel and free act at once.
 *
 * Ownership: the client owns its requests and its sockets; a request is
 * freed after its on_done or when its cancel takes effect. */
#include "http.h"

#include <curl/curl.h>
#include <ev.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "error.h"
#include "mem.h"

#define MAX_HEADER_BYTES (64 * 1024)

/* Dead connections. client-go finds them with HTTP/2 PINGs (one after 30 s
 * without a read, dead when unanswered for 15 s) and TCP keepalive. libcurl
 * 7.88 sends a PING only from curl_easy_upkeep, which looks at the
 * connections of curl_easy_perform's private multi handle, never at those
 * of a shared CURLM like ours (lib/easy.c; tried: with
 * CURLOPT_UPKEEP_INTERVAL_MS set, no PING reaches the server), and it
 * would not say whether one was answered. So the kernel does the same
 * work on every connection, HTTP/2 or HTTP/1.1: keepalive probes after
 * KEEP_IDLE seconds without traffic, every KEEP_INTVL, and TCP_USER_TIMEOUT
 * of KEEP_IDLE + KEEP_DEAD, which ends a connection when nothing answered
 * the probes for KEEP_DEAD seconds, or when bytes sent stay unacknowledged
 * that long. Curl then sees the socket fail and the transfer ends with an
 * error (a watch resumes). The difference from a PING: a probe's answer
 * proves the peer's host alive, not its process; a silent watch on a
 * living connection is never ended. */
#define KEEP_IDLE 30
#define KEEP_INTVL 5
#define KEEP_DEAD 15

typedef struct sock sock_t;

struct kl_http {
  kl_loop_t *loop;
  CURLM *multi;
  kl_timer_t timer;
  char *user_agent;
  kl_http_req_t *reqs; /* all requests not yet freed (doubly linked) */
  sock_t *socks;       /* sockets curl asked us to watch (doubly linked) */
  size_t active;
  size_t zombies; /* cancelled requests not yet freed */
  size_t pending; /* started inside drive, not yet added to the multi */
  int in_curl;    /* inside drive: user callbacks may be running */
  int in_action;  /* inside curl_multi_socket_action itself */
  int dying;      /* kl_http_free was called inside drive */
};

struct sock {
  ev_io io;
  kl_http_t *h;
  curl_socket_t fd;
  sock_t *prev, *next;
};

struct kl_http_req {
  kl_http_t *h;
  CURL *easy;
  struct curl_slist *headers;
  struct curl_slist *connect_to; /* for tls->server_name, or NULL */
  char *body;
  kl_http_head_fn *on_head;
  kl_http_data_fn *on_data;
  kl_http_done_fn *on_done;
  void *ud;
  kl_http_req_t *prev, *next;
  int status;
  int head_done; /* on_head ran for the final header block */
  int added;     /* handed to curl_multi_add_handle */
  int cancelled;
  int aborted; /* a callback asked to stop */
  int paused;  /* on_data refused a piece: curl holds it */
  char version[12];
  /* response headers of the last block: "name\0value\0…" */
  char *hbuf;
  size_t hlen, hcap;
  char errbuf[CURL_ERROR_SIZE];
};

static void check_done(kl_http_t *h);
static void client_free(kl_http_t *h);

static void req_free(kl_http_req_t *r) {
  kl_http_t *h = r->h;
  if (r->cancelled) h->zombies--;
  if (!r->added) h->pending--;
  if (r->added) curl_multi_remove_handle(h->multi, r->easy);
  curl_easy_cleanup(r->easy);
  curl_slist_free_all(r->headers);
  curl_slist_free_all(r->connect_to);
  if (r->prev)
    r->prev->next = r->next;
  else
    h->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  h->active--;
  free(r->body);
  free(r->hbuf);
  free(r);
}

static int req_add(kl_http_req_t *r) {
  r->added = 1;
  r->h->pending--;
  CURLMcode mc = curl_multi_add_handle(r->h->multi, r->easy);
  if (mc != CURLM_OK) {
    r->added = 0;
    r->h->pending++;
    snprintf(r->errbuf, sizeof r->errbuf, "%s", curl_multi_strerror(mc));
    return -1;
  }
  return 0;
}

/* Adds the requests started from callbacks while curl ran. One that curl
 * refuses ends with on_done(KL_EIO) (we are in drive: callbacks are fine). */
static void add_pending(kl_http_t *h) {
  for (kl_http_req_t *r = h->reqs, *next; r && h->pending; r = next) {
    next = r->next;
    if (r->added || r->cancelled) continue;
    if (req_add(r) == 0) continue;
    if (r->on_done) r->on_done(r, KL_EIO, r->errbuf, r->ud);
    req_free(r);
  }
}

/* Frees the cancelled requests: called only when no callback runs. */
static void reap(kl_http_t *h) {
  for (kl_http_req_t *r = h->reqs, *next; r && h->zombies; r = next) {
    next = r->next;
    if (r->cancelled) req_free(r);
  }
}

/* Runs curl for one socket event or the timeout, then collects finished
 * transfers. */
static void drive(kl_http_t *h, curl_socket_t fd, int flags) {
  int running;
  h->in_curl = 1;
  h->in_action = 1;
  curl_multi_socket_action(h->multi, fd, flags, &running);
  h->in_action = 0;
  if (h->pending && !h->dying) add_pending(h);
  check_done(h); /* requests started from on_done are added at once */
  h->in_curl = 0;
  reap(h);
  if (h->dying) client_free(h);
}

static void on_io(struct ev_loop *ev, ev_io *w, int revents) {
  sock_t *s = (sock_t *)w;
  int flags = (revents & EV_READ ? CURL_CSELECT_IN : 0) |
              (revents & EV_WRITE ? CURL_CSELECT_OUT : 0) |
              (revents & EV_ERROR ? CURL_CSELECT_ERR : 0);
  (void)ev;
  drive(s->h, s->fd, flags);
}

static void on_timer(kl_timer_t *t, void *ud) {
  (void)t;
  drive(ud, CURL_SOCKET_TIMEOUT, 0);
}

static void sock_free(kl_http_t *h, sock_t *s) {
  ev_io_stop(kl_loop_ev(h->loop), &s->io);
  if (s->prev)
    s->prev->next = s->next;
  else
    h->socks = s->next;
  if (s->next) s->next->prev = s->prev;
  free(s);
}

static int sock_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
                   void *socketp) {
  kl_http_t *h = userp;
  sock_t *s = socketp;
  struct ev_loop *ev = kl_loop_ev(h->loop);
  (void)easy;
  if (what == CURL_POLL_REMOVE) {
    if (s) {
      curl_multi_assign(h->multi, fd, NULL);
      sock_free(h, s);
    }
    return 0;
  }
  int events = (what & CURL_POLL_IN ? EV_READ : 0) |
               (what & CURL_POLL_OUT ? EV_WRITE : 0);
  if (!s) {
    s = kl_xcalloc(1, sizeof *s);
    s->h = h;
    s->fd = fd;
    s->next = h->socks;
    if (h->socks) h->socks->prev = s;
    h->socks = s;
    ev_init(&s->io, on_io);
    curl_multi_assign(h->multi, fd, s);
  } else {
    ev_io_stop(ev, &s->io);
  }
  ev_io_set(&s->io, fd, events);
  if (events) ev_io_start(ev, &s->io);
  return 0;
}

static int timer_cb(CURLM *multi, long ms, void *userp) {
  kl_http_t *h = userp;
  kl_timers_t *ts = kl_loop_timers(h->loop);
  (void)multi;
  if (ms < 0)
    kl_timers_stop(ts, &h->timer);
  else
    kl_timers_start(ts, &h->timer, kl_loop_now(h->loop) + (double)ms / 1000.0);
  return 0;
}

kl_http_t *kl_http_new(kl_loop_t *loop, const char *user_agent) {
  /* Reference-counted by libcurl; kl_http_free gives the reference back. */
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return NULL;
  kl_http_t *h = kl_xcalloc(1, sizeof *h);
  h->loop = loop;
  h->multi = curl_multi_init();
  if (!h->multi) {
    free(h);
    curl_global_cleanup();
    return NULL;
  }
  h->user_agent = kl_xstrdup(user_agent ? user_agent : "kubelua");
  kl_timer_init(&h->timer, on_timer, h);
  curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
  curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
  curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
  curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
  curl_multi_setopt(h->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
  /* Many watches share an HTTP/2 connection; allow many streams each. */
  curl_multi_setopt(h->multi, CURLMOPT_MAX_CONCURRENT_STREAMS, 1000L);
  return h;
}

static void client_free(kl_http_t *h) {
  while (h->reqs)
    req_free(h->reqs);
  /* Closes the cached connections; their sockets come back through
   * sock_cb, and curl may re-arm the timer: stop it afterwards. */
  curl_multi_cleanup(h->multi);
  kl_timers_stop(kl_loop_timers(h->loop), &h->timer);
  while (h->socks) /* none expected; never leave a watcher on freed memory */
    sock_free(h, h->socks);
  free(h->user_agent);
  free(h);
  curl_global_cleanup();
}

void kl_http_free(kl_http_t *h) {
  if (!h || h->dying) return;
  if (!h->in_curl) {
    client_free(h);
    return;
  }
  /* Inside a callback: silence every request now, free when drive ends. */
  h->dying = 1;
  for (kl_http_req_t *r = h->reqs; r; r = r->next)
    kl_http_cancel(r);
}

size_t kl_http_active(const kl_http_t *h) { return h->active - h->zombies; }

/* Response headers */

static void hbuf_add(kl_http_req_t *r, const char *name, size_t nlen,
                     const char *val, size_t vlen) {
  size_t need = nlen + vlen + 2;
  if (r->hlen + need > MAX_HEADER_BYTES) return; /* dropped, not fatal */
  if (r->hlen + need > r->hcap) {
    r->hcap = (r->hlen + need) * 2;
    r->hbuf = kl_xrealloc(r->hbuf, r->hcap);
  }
  memcpy(r->hbuf + r->hlen, name, nlen);
  r->hbuf[r->hlen + nlen] = '\0';
  memcpy(r->hbuf + r->hlen + nlen + 1, val, vlen);
  r->hbuf[r->hlen + nlen + 1 + vlen] = '\0';
  r->hlen += need;
}

const char *kl_http_header(const kl_http_req_t *r, const char *name) {
  size_t i = 0;
  while (i < r->hlen) {
    const char *n = r->hbuf + i;
    const char *v = n + strlen(n) + 1;
    if (strcasecmp(n, name) == 0) return v;
    i = (size_t)(v - r->hbuf) + strlen(v) + 1;
  }
  return NULL;
}

int kl_http_status(const kl_http_req_t *r) { return r->status; }
const char *kl_http_version(const kl_http_req_t *r) { return r->version; }

static size_t header_cb(char *p, size_t size, size_t n, void *ud) {
  kl_http_req_t *r = ud;
  size_t len = size * n, l = len;
  if (r->cancelled || r->aborted) return 0;
  while (l > 0 && (p[l - 1] == '\n' || p[l - 1] == '\r'))
    l--;
  if (l >= 5 && memcmp(p, "HTTP/", 5) == 0) { /* a new status line */
    r->hlen = 0;
    r->head_done = 0;
    const char *sp = memchr(p, ' ', l);
    size_t vl = sp ? (size_t)(sp - p) : l;
    snprintf(r->version, sizeof r->version, "%.*s", (int)vl, p);
    r->status = sp ? atoi(sp + 1) : 0;
    return len;
  }
  if (l == 0) { /* end of a header block */
    if (r->status >= 100 && r->status < 200) return len; /* interim */
    if (r->head_done) return len; /* the end of trailers */
    r->head_done = 1;
    if (r->on_head) {
      int stop = r->on_head(r, r->status, r->ud);
      if (r->cancelled) return 0;
      if (stop) {
        r->aborted = 1;
        return 0;
      }
    }
    return len;
  }
  const char *colon = memchr(p, ':', l);
  if (!colon) return len;
  const char *v = colon + 1, *end = p + l;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
    end--;
  hbuf_add(r, p, (size_t)(colon - p), v, (size_t)(end - v));
  return len;
}

static size_t write_cb(char *p, size_t size, size_t n, void *ud) {
  kl_http_req_t *r = ud;
  size_t len = size * n;
  if (r->cancelled || r->aborted) return 0;
  if (r->on_data) {
    int stop = r->on_data(r, p, len, r->ud);
    if (r->cancelled) return 0;
    if (stop == KL_HTTP_PAUSE) {
      r->paused = 1;
      return CURL_WRITEFUNC_PAUSE;
    }
    if (stop) {
      r->aborted = 1;
      return 0;
    }
  }
  return len;
}

static void check_done(kl_http_t *h) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(h->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    char *priv;
    CURLcode rc = m->data.result;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
    kl_http_req_t *r = (kl_http_req_t *)(void *)priv;
    if (!r->cancelled && r->on_done) {
      char msg[CURL_ERROR_SIZE + 32];
      int err = 0;
      if (r->aborted) {
        err = KL_EIO;
        snprintf(msg, sizeof msg, "aborted");
      } else if (rc != CURLE_OK) {
        err = rc == CURLE_OPERATION_TIMEDOUT ? KL_ETIMEDOUT : KL_EIO;
        snprintf(msg, sizeof msg, "%s",
                 r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc));
      } else {
        msg[0] = '\0';
      }
      r->on_done(r, err, msg, r->ud);
    }
    req_free(r);
  }
}

/* Every new socket: the dead-peer settings above (with KEEP_CNT probes in
 * KEEP_DEAD seconds). A failure leaves the socket as it is. */
static int sockopt_cb(void *ud, curl_socket_t fd, curlsocktype purpose) {
  int on = 1, idle = KEEP_IDLE, intvl = KEEP_INTVL,
      cnt = KEEP_DEAD / KEEP_INTVL;
  unsigned int user = (KEEP_IDLE + KEEP_DEAD) * 1000u;
  (void)ud;
  if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKOPT_OK;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof user);
  return CURL_SOCKOPT_OK;
}

static int set_blob(CURL *e, CURLoption opt, const char *p, size_t n) {
  struct curl_blob b = {(void *)p, n, CURL_BLOB_COPY};
  return curl_easy_setopt(e, opt, &b) == CURLE_OK ? 0 : -1;
}

static int apply_tls(CURL *e, const kl_http_tls_t *t, char *err,
                     size_t errlen) {
  int bad = 0;
  if (t->insecure) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (t->ca_file) bad |= curl_easy_setopt(e, CURLOPT_CAINFO, t->ca_file) != 0;
  if (t->ca_pem)
    bad |= set_blob(e, CURLOPT_CAINFO_BLOB, t->ca_pem, t->ca_pem_len);
  if (t->cert_file)
    bad |= curl_easy_setopt(e, CURLOPT_SSLCERT, t->cert_file) != 0;
  if (t->cert_pem)
    bad |= set_blob(e, CURLOPT_SSLCERT_BLOB, t->cert_pem, t->cert_pem_len);
  if (t->key_file) bad |= curl_easy_setopt(e, CURLOPT_SSLKEY, t->key_file) != 0;
  if (t->key_pem)
    bad |= set_blob(e, CURLOPT_SSLKEY_BLOB, t->key_pem, t->key_pem_len);
  if (bad) snprintf(err, errlen, "TLS options not supported by libcurl");
  return bad ? -1 : 0;
}

/* kubeconfig's tls-server-name: the TLS handshake (SNI) and the
 * certificate check use `name` while the connection goes to the URL's host,
 * as Go's tls.Config.ServerName does for kubectl. libcurl 7.88 has no option
 * for that alone, so the URL gets `name` as its host, CURLOPT_CONNECT_TO
 * sends the connection to the real host and port, and the Host header keeps
 * the real host (unless the caller set one). Returns 0, or -1 with a
 * message. */
static int apply_server_name(kl_http_req_t *r, const char *url,
                             const char *name, int has_host, char *err,
                             size_t errlen) {
  CURLU *u = curl_url();
  char *host = NULL, *port = NULL, *nurl = NULL, line[1100];
  int rc = -1;
  if (!u) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (!*name || strlen(name) > 253 || strpbrk(name, ":/?#[]@ \t\r\n")) {
    snprintf(err, errlen, "bad TLS server name");
    goto out;
  }
  if (curl_url_set(u, CURLUPART_URL, url, 0) ||
      curl_url_get(u, CURLUPART_HOST, &host, 0) ||
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) ||
      curl_url_set(u, CURLUPART_HOST, name, 0) ||
      curl_url_get(u, CURLUPART_URL, &nurl, 0) || strlen(host) > 256) {
    snprintf(err, errlen, "bad URL");
    goto out;
  }
  snprintf(line, sizeof line, "%s:%s:%s:%s", name, port, host, port);
  r->connect_to = curl_slist_append(NULL, line);
  if (!has_host) {
    snprintf(line, sizeof line, "Host: %s:%s", host, port);
    r->headers = curl_slist_append(r->headers, line);
  }
  if (!r->connect_to ||
      curl_easy_setopt(r->easy, CURLOPT_CONNECT_TO, r->connect_to) ||
      curl_easy_setopt(r->easy, CURLOPT_URL, nurl)) {
    snprintf(err, errlen, "TLS server name not supported by libcurl");
    goto out;
  }
  rc = 0;
out:
  curl_free(host);
  curl_free(port);
  curl_free(nurl);
  curl_url_cleanup(u);
  return rc;
}

/* A line that goes into the request head must not carry CR or LF: a token
 * read with its trailing newline would otherwise split the head. */
static int has_crlf(const char *s) { return strpbrk(s, "\r\n") != NULL; }

static int is_content_type(const char *line) {
  return strncasecmp(line, "Content-Type:", 13) == 0;
}

static int check_opts(const kl_http_opts_t *o, char *err, size_t errlen) {
  if (!o->url || !*o->url) {
    snprintf(err, errlen, "no URL");
    return -1;
  }
  if (o->method && (!*o->method || strpbrk(o->method, " \t\r\n:"))) {
    snprintf(err, errlen, "bad method");
    return -1;
  }
  if (!o->body && o->body_len) {
    snprintf(err, errlen, "body_len without a body");
    return -1;
  }
  for (const char *const *hd = o->headers; hd && *hd; hd++) {
    if (has_crlf(*hd) || !strchr(*hd, ':')) {
      snprintf(err, errlen, "bad request header line (#%d)",
               (int)(hd - o->headers) + 1);
      return -1;
    }
  }
  return 0;
}

kl_http_req_t *kl_http_start(kl_http_t *h, const kl_http_opts_t *o, char *err,
                             size_t errlen) {
  if (check_opts(o, err, errlen) != 0) return NULL;
  if (h->dying) {
    snprintf(err, errlen, "the client is being freed");
    return NULL;
  }
  kl_http_req_t *r = kl_xcalloc(1, sizeof *r);
  r->h = h;
  r->on_head = o->on_head;
  r->on_data = o->on_data;
  r->on_done = o->on_done;
  r->ud = o->ud;
  r->easy = curl_easy_init();
  if (!r->easy) {
    snprintf(err, errlen, "cannot create a curl handle");
    free(r);
    return NULL;
  }
  CURL *e = r->easy;
  const char *method = o->method ? o->method : "GET";
  int is_head = strcmp(method, "HEAD") == 0;
  int tls = strncasecmp(o->url, "https://", 8) == 0;
  curl_easy_setopt(e, CURLOPT_URL, o->url);
  curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_USERAGENT, h->user_agent);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  if (o->read_size) curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)o->read_size);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
  /* Wait for a connection being set up to tell whether it multiplexes —
   * only over TLS, where ALPN tells at the handshake. Over plain HTTP curl
   * would learn it only from the first response's status line, and a
   * request held by the server (a watch, a slow list) would stall every
   * request queued behind it. */
  if (tls) curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  double ct = o->connect_timeout > 0 ? o->connect_timeout : 10;
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(ct * 1000 + 0.999));
  if (o->timeout > 0) /* rounded up: a tiny timeout is not "none" */
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(o->timeout * 1000 + 0.999));
  /* Idle: under one byte a second, on average, for that many (whole)
   * seconds; curl checks it about once a second. */
  if (o->idle_timeout > 0) {
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)ceil(o->idle_timeout));
  }
  /* Dead-peer detection (KEEP_*) on every connection: a connection is set
   * up by whichever request opens it and then shared, so a watch often
   * rides one opened by a GET — settings asked for by the watch alone
   * would be missing exactly there. curl's own keepalive options say the
   * same as the socket callback, whichever runs last. */
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, (long)KEEP_IDLE);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, (long)KEEP_INTVL);
  curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, sockopt_cb);
  int with_body =
      !is_head && (o->body || strcmp(method, "POST") == 0 ||
                   strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0);
  if (is_head) {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (with_body) {
    r->body = kl_xmalloc(o->body_len + 1);
    if (o->body_len) memcpy(r->body, o->body, o->body_len);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    /* POSTFIELDS makes a POST; any other method (a GET with a body too)
     * is named explicitly. */
    if (strcmp(method, "POST") != 0)
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  } else if (strcmp(method, "GET") != 0) {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  }
  /* No "Expect: 100-continue" round trip for bodies. */
  r->headers = curl_slist_append(r->headers, "Expect:");
  int caller_ctype = 0, caller_host = 0;
  for (const char *const *hd = o->headers; hd && *hd; hd++) {
    r->headers = curl_slist_append(r->headers, *hd);
    caller_ctype |= is_content_type(*hd);
    caller_host |= strncasecmp(*hd, "Host:", 5) == 0;
  }
  /* curl labels a body application/x-www-form-urlencoded unless told
   * otherwise; the API server would refuse that. No type unless the
   * caller gives one. */
  if (with_body && !caller_ctype)
    r->headers = curl_slist_append(r->headers, "Content-Type:");
  if (tls && o->tls && o->tls->server_name &&
      apply_server_name(r, o->url, o->tls->server_name, caller_host, err,
                        errlen) != 0)
    goto fail;
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  if (o->tls && apply_tls(e, o->tls, err, errlen) != 0) goto fail;

  r->next = h->reqs;
  if (h->reqs) h->reqs->prev = r;
  h->reqs = r;
  h->active++;
  h->pending++;
  /* Inside curl (a callback of another request) the handle is added when
   * curl returns. Either way curl asks for a timer and the transfer starts
   * from the loop. */
  if (!h->in_action && req_add(r) != 0) {
    snprintf(err, errlen, "%s", r->errbuf);
    req_free(r);
    return NULL;
  }
  return r;

fail:
  curl_easy_cleanup(e);
  curl_slist_free_all(r->headers);
  curl_slist_free_all(r->connect_to);
  free(r->body);
  free(r);
  return NULL;
}

void kl_http_resume(kl_http_req_t *r) {
  if (!r || !r->paused || r->cancelled) return;
  kl_http_t *h = r->h;
  int outer = h->in_curl;
  r->paused = 0;
  h->in_curl = 1;
  curl_easy_pause(r->easy, CURLPAUSE_CONT); /* may hand back the piece */
  h->in_curl = outer;
  if (!outer) drive(h, CURL_SOCKET_TIMEOUT, 0); /* read on */
}

void kl_http_cancel(kl_http_req_t *r) {
  if (!r || r->cancelled) return;
  r->cancelled = 1;
  r->h->zombies++;
  /* Inside drive curl may still be using the handle, or a callback of this
   * request is on the stack: its write/header callback refuses further data
   * and drive frees it once curl has returned. */
  if (!r->h->in_curl) req_free(r);
}
