/* reflector.c — client-go's Reflector, classic profile (see reflector.h and
 * CLIENTGO.md 5.2 and 6).
 *
 * One state machine on the loop, one request at a time:
 *
 *   WAITING --(defer or backoff timer)--> LISTING (one page after another)
 *   LISTING --(every page in: Replace)--> WATCHING
 *   WATCHING --(normal close, broken connection)--> WAITING(watch, no delay)
 *   WATCHING --(429 / refused to set up, ERROR 429)--> WAITING(watch, backoff)
 *   WATCHING --(410 after a watch that worked)--> WAITING(list, no delay)
 *   anything else that ends a round --> WAITING(list, backoff)
 *
 * With watch_list, a round starts WATCHING with sendInitialEvents instead of
 * LISTING: the initial ADDED events are collected (r->initial) and replace
 * the informer's content at the end bookmark, then the same stream is an
 * ordinary watch. Whether the server does streaming lists is asked once per
 * server and process (kl_reflector_servers_t): one reflector asks while the
 * others wait for its answer; a refusal, or a server that ignores the
 * parameters (another event than ADDED before the end bookmark, or no end
 * bookmark at all), makes every round of every reflector there list.
 *
 * A round is client-go's ListAndWatch; each round ends with a backoff wait
 * (the Run loop's sliding BackoffUntil), failed or not. One backoff state
 * (ExponentialBackoffManager: reset after backoff_reset without a backoff)
 * serves the round loop and the watch retries. The pager's rules (limit,
 * continue, one full list when a continue token expired) and the list()
 * rules (resourceVersion 0 first, then the last one; on Expired or too
 * large, one immediate retry at "") are followed to the letter, as are the
 * query strings, whose parameters come in Go's sorted order.
 *
 * Beyond client-go: a 410 on a watch that worked (it ran, or the one before
 * it ended normally) relists at once with no backoff step: compaction is
 * routine, and counting it as a failure grew the backoff until the cache
 * stayed stale for half a minute; after failures, the watch that opens
 * again says so once (how long, how many tries); a 429's
 * Retry-After lengthens the backoff (client-go's REST client honours it
 * before the reflector sees the error); and an event that does not decode,
 * an unknown event type included, ends the stream and relists after a
 * backoff where client-go would skip an unknown type. Credentials are
 * asked for before each request (opts.auth) rather than fixed at creation,
 * so a rotated token reaches the next list or watch, and a 401 makes the
 * caller forget the refused one before the backoff (client-go's transport
 * does this under the reflector).
 *
 * A quiet watch is not a dead one: a server may send nothing, not even a
 * bookmark, until its timeoutSeconds, so only the watch's deadline ends it
 * here; a dead connection is found under the HTTP client (TCP keepalive).
 * Only a streaming list's initial events have a silence limit
 * (initial_timeout): a real server sends them at once.
 *
 * Invariants: r->req is the only request in flight and is non-NULL only in
 * LISTING and WATCHING; the wait timer and the step node are armed only in
 * WAITING, the deadline timer only in WATCHING; nothing reaches the informer
 * unless a request of ours is live, so once stop has cancelled it nothing does.
 * r->gen changes on stop and start, so code that called out (on_error, the
 * informer) can tell it must not go on. The reflector owns its strings, its
 * list accumulator, the watch bytes it keeps back for the next piece
 * (watch_data) and its copy of the headers; the loop, the client, the heap
 * and the informer are borrowed. */
#define _GNU_SOURCE /* memrchr */
#include "reflector.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "json.h"
#include "log.h"
#include "mem.h"

#define RV_MAX 64
#define ERRBODY_MAX (64 * 1024) /* bytes of an error response kept */
#define URL_MAX (64 * 1024)
#define VERY_SHORT 1.0       /* a watch shorter than this with no event */
#define RETRY_AFTER_MAX 60.0 /* a 429's Retry-After honoured up to this */
#define AUTH_MAX (16 * 1024) /* the credential's header line */
#define AUTH_POLL 0.05       /* seconds between asks while auth says EAGAIN */
#define ASK_POLL 0.05        /* seconds between looks while another asks */
#define WL_MAX ((size_t)16 << 20) /* objects in one streaming list */
#define INITIAL_EVENTS_END "k8s.io/initial-events-end"

typedef enum state { ST_STOPPED, ST_WAITING, ST_LISTING, ST_WATCHING } state_t;
typedef enum next { NEXT_LIST, NEXT_WATCH } next_t;

/* A server's streaming lists, as far as the process knows. */
typedef enum sv_state {
  SV_UNKNOWN,
  SV_ASKING,
  SV_STREAMS,
  SV_LISTS
} sv_state_t;

typedef struct server {
  char *url;
  sv_state_t state;
  const kl_reflector_t *asker; /* in SV_ASKING: the one whose answer waits */
  struct server *next;
} server_t;

struct kl_reflector_servers {
  server_t *list;
};

/* A failed request or an ERROR event, classified as apimachinery's errors
 * package does (CLIENTGO.md 2.7). */
typedef struct failure {
  bool expired;      /* IsResourceExpired: reason Expired */
  bool gone;         /* IsGone: reason Gone, or 410 with an unknown reason */
  bool too_large;    /* isTooLargeResourceVersionError */
  bool too_many;     /* IsTooManyRequests */
  bool refused;      /* the connection was refused */
  bool unauthorized; /* 401: the credential was refused */
  long code;         /* the Status's or HTTP code; 0: no response */
  double retry_after;
  char msg[512];
} failure_t;

struct kl_reflector {
  kl_loop_t *loop;
  kl_http_t *http;
  kl_informer_t *inf;
  kl_timers_t *timers;
  char *name, *url, *label_selector, *field_selector;
  char *api_version, *kind; /* expected of events; NULL: not checked */
  char **headers;           /* NULL-terminated copies */
  char *watch_accept; /* "Accept: …" of watches; NULL: headers' Accept */
  const kl_http_tls_t *tls;
  double (*rand)(void *ud);
  void *rand_ud;
  uint64_t seed; /* the default generator's state */
  double bo_initial, bo_factor, bo_jitter, bo_max, bo_reset;
  double min_watch, initial_silence;
  int page_size;
  bool watch_list; /* opts.watch_list */
  bool wl_skip;    /* this round lists: its streaming list failed */
  bool wl_ignored; /* the initial events had another type than ADDED */
  kl_reflector_servers_t *servers; /* opts.servers, or own_servers */
  kl_reflector_servers_t *own_servers;
  server_t *sv; /* this reflector's server in servers */
  kl_reflector_error_fn *on_error;
  void *ud;
  kl_reflector_auth_fn *auth;
  kl_reflector_unauthorized_fn *on_unauthorized;
  void *auth_ud;
  size_t nheaders; /* in headers, without the NULL */

  state_t state;
  next_t next;
  unsigned gen;
  kl_timer_t wait; /* the backoff wait */
  kl_defer_t step; /* the next step without a wait */
  kl_timer_t live; /* the watch's deadline (and initial events' silence) */
  kl_http_req_t *req;

  /* The reflector's state (6.1). */
  char rv[RV_MAX];
  bool unavailable, paginated_result, listed;

  /* The backoff manager (6.3). */
  double bo_dur, bo_last;
  int bo_steps;

  /* Failed attempts since the last watch that opened, and when the first
   * of them failed: the recovery line. */
  unsigned down_tries;
  double down_since;

  /* The list in progress: list() and the pager (5.2, 6.5). */
  kl_informer_list_t *acc;
  char list_rv[RV_MAX]; /* the RV requested by this pager run */
  char page_rv[RV_MAX]; /* the RV of the first page: the list's */
  char *cont;           /* the continue token being followed */
  int limit;            /* the page size chosen by list() */
  bool at_zero;         /* list() asked for resourceVersion 0 */
  bool retried;         /* the retry at "" after Expired was made */
  bool fallback;        /* the full list after an expired continue */
  bool paginated;       /* this pager run followed a continue token */
  bool page_seen;       /* the first page of this pager run is in */

  /* The request in flight. */
  int status;
  char *ebody; /* a non-200 response's body, capped at ERRBODY_MAX */
  size_t elen;
  double retry_after;

  /* The watch in flight (6.6, 6.7). */
  double w_start, w_last, w_end;
  uint64_t w_events;
  bool streaming; /* the watch answered 200: its stream is open */
  bool w_open;    /* this watch answered 200 */
  bool w_ok;      /* the last watch worked and ended normally */
  bool paused;    /* the stream waits while the informer catches up */
  kl_timer_t unpause;
  char *carry; /* the bytes after a piece's last newline (watch_data) */
  size_t clen, ccap;
  bool propagate, besides_added;
  failure_t evfail; /* the ERROR event that ended the stream */

  /* A streaming list (6.11): the initial ADDED events, collected until the
   * end bookmark (client-go's temporary store). */
  bool initial; /* the initial events are coming */
  kl_obj_t **wl_objs;
  size_t wl_n, wl_cap;
  size_t wl_cached; /* wl_objs[0..wl_cached) are in their cache form */

  kl_reflector_stats_t st;
};

static double now(const kl_reflector_t *r) {
  return kl_clock_now(kl_timers_clock(r->timers));
}

/* splitmix64, for when no random source is injected. */
static double default_rand(void *ud) {
  uint64_t *s = ud, z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static double rnd(kl_reflector_t *r) {
  double x = r->rand(r->rand_ud);
  return x >= 0 && x < 1 ? x : 0;
}

static void copy_rv(char *dst, const char *p, size_t n) {
  if (n > RV_MAX - 1) n = RV_MAX - 1;
  memcpy(dst, p, n);
  dst[n] = '\0';
}

/* ---- what the process knows of servers ---- */

kl_reflector_servers_t *kl_reflector_servers_new(void) {
  return kl_xcalloc(1, sizeof(kl_reflector_servers_t));
}

void kl_reflector_servers_free(kl_reflector_servers_t *ss) {
  if (!ss) return;
  for (server_t *s = ss->list, *next; s; s = next) {
    next = s->next;
    free(s->url);
    free(s);
  }
  free(ss);
}

/* The server of a collection URL: up to its "/api/" or "/apis/" (a
 * server's URL may have a path of its own), else scheme and authority. */
static char *server_url(const char *url) {
  const char *p = strstr(url, "://"), *end;
  p = p ? p + 3 : url;
  const char *api = strstr(p, "/api/"), *apis = strstr(p, "/apis/");
  if (api && (!apis || api < apis))
    end = api;
  else if (apis)
    end = apis;
  else
    end = p + strcspn(p, "/");
  return kl_xstrndup(url, (size_t)(end - url));
}

static server_t *server_find(kl_reflector_servers_t *ss, const char *url) {
  server_t *s = ss->list;
  while (s && strcmp(s->url, url) != 0)
    s = s->next;
  if (s) return s;
  s = kl_xcalloc(1, sizeof *s);
  s->url = kl_xstrdup(url);
  s->next = ss->list;
  ss->list = s;
  return s;
}

/* The asker goes without an answer (it failed otherwise, or stopped): the
 * next round of any reflector there asks again. */
static void server_release(kl_reflector_t *r) {
  if (r->sv->state == SV_ASKING && r->sv->asker == r) {
    r->sv->state = SV_UNKNOWN;
    r->sv->asker = NULL;
  }
}

static void server_streams(kl_reflector_t *r) {
  if (r->sv->state == SV_ASKING || r->sv->state == SV_UNKNOWN) {
    r->sv->state = SV_STREAMS;
    r->sv->asker = NULL;
  }
}

/* The server refused or ignored a streaming list (why): every reflector
 * there lists and watches from now on. Said once per server, at info: it
 * is how the server is, not a failure. */
static void server_lists(kl_reflector_t *r, const char *why) {
  if (r->sv->state == SV_LISTS) {
    kl_log(KL_LOG_DEBUG, "reflector %s: streaming list: %s: listing", r->name,
           why);
    return;
  }
  r->sv->state = SV_LISTS;
  r->sv->asker = NULL;
  kl_log(KL_LOG_INFO,
         "reflector %s: streaming list: %s: %s does not serve streaming "
         "lists; listing and watching from now on",
         r->name, why, r->sv->url);
}

/* ---- backoff: wait.ExponentialBackoffManager over wait.Backoff.Step ---- */

static double backoff_delay(kl_reflector_t *r) {
  double t = now(r), d;
  if (t - r->bo_last > r->bo_reset) {
    r->bo_dur = r->bo_initial;
    r->bo_steps = INT_MAX;
  }
  r->bo_last = t;
  d = r->bo_dur;
  if (r->bo_steps >= 1) {
    r->bo_steps--;
    r->bo_dur *= r->bo_factor;
    if (r->bo_dur > r->bo_max) {
      r->bo_dur = r->bo_max;
      r->bo_steps = 0;
    }
  }
  if (r->bo_jitter > 0) d += rnd(r) * r->bo_jitter * d;
  return d;
}

/* ---- scheduling ---- */

static void request_start(kl_reflector_t *r, bool watch, const char *url);
static void list_begin(kl_reflector_t *r);
static void watch_begin(kl_reflector_t *r, bool initial);

static void run_next(kl_reflector_t *r) {
  if (r->state != ST_WAITING) return;
  if (r->next == NEXT_LIST)
    list_begin(r);
  else
    watch_begin(r, false);
}

static void on_step(kl_defer_t *d) {
  run_next(
      (kl_reflector_t *)(void *)((char *)d - offsetof(kl_reflector_t, step)));
}

static void on_wait(kl_timer_t *t, void *ud) {
  (void)t;
  run_next(ud);
}

/* Goes to WAITING: the next step runs from the loop, after delay seconds on
 * the reflector's clock when delay > 0. */
static void go(kl_reflector_t *r, next_t next, double delay) {
  r->state = ST_WAITING;
  r->next = next;
  if (delay > 0)
    kl_timers_start(r->timers, &r->wait, now(r) + delay);
  else
    kl_loop_defer(r->loop, &r->step);
}

/* A failed attempt: counted for the line that says the watch is back. */
static void note_failure(kl_reflector_t *r) {
  r->st.errors++;
  if (r->down_tries++ == 0) r->down_since = now(r);
}

static void backoff_then(kl_reflector_t *r, next_t next, double at_least) {
  double d = backoff_delay(r);
  if (d < at_least) d = at_least;
  r->st.backoffs++;
  kl_log(KL_LOG_DEBUG, "reflector %s: %s in %.3fs", r->name,
         next == NEXT_LIST ? "listing" : "watching", d);
  go(r, next, d);
}

/* A 401: the credential is forgotten before the backoff, so that the next
 * request carries a fresh one (a re-read token file, a new exec run). */
static void refused_credential(kl_reflector_t *r, const failure_t *f) {
  if (!f->unauthorized) return;
  r->st.unauthorized++;
  if (r->on_unauthorized) r->on_unauthorized(r, r->auth_ud);
}

/* ListAndWatch returned an error: the error handler, then backoff (at
 * least a 429's Retry-After) and a new round. */
static void round_failed(kl_reflector_t *r, const char *msg, double at_least) {
  unsigned gen = r->gen;
  note_failure(r);
  r->w_ok = false;
  server_release(r);
  r->state = ST_WAITING;
  kl_log(KL_LOG_WARN, "reflector %s: %s", r->name, msg);
  if (r->on_error) r->on_error(r, msg, r->ud);
  if (r->gen != gen || r->state == ST_STOPPED) return;
  backoff_then(r, NEXT_LIST, at_least);
}

/* ListAndWatch returned nil: backoff and a new round. */
static void round_over(kl_reflector_t *r) { backoff_then(r, NEXT_LIST, 0); }

/* ---- failures ---- */

static bool known_reason(const char *s) {
  static const char *const known[] = {"Unauthorized",
                                      "Forbidden",
                                      "NotFound",
                                      "AlreadyExists",
                                      "Conflict",
                                      "Gone",
                                      "Invalid",
                                      "ServerTimeout",
                                      "Timeout",
                                      "TooManyRequests",
                                      "BadRequest",
                                      "MethodNotAllowed",
                                      "NotAcceptable",
                                      "RequestEntityTooLarge",
                                      "UnsupportedMediaType",
                                      "InternalError",
                                      "Expired",
                                      "ServiceUnavailable"};
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (strcmp(s, known[i]) == 0) return true;
  return false;
}

/* A string member of obj, decoded and truncated to cap - 1 bytes; "" when
 * absent or not a string. */
static void member_str(kl_json_span_t obj, const char *key, char *out,
                       size_t cap) {
  kl_json_span_t v;
  out[0] = '\0';
  if (!kl_json_member(obj, key, &v) || v.n < 2 || v.p[0] != '"') return;
  char *tmp = kl_xmalloc(v.n);
  size_t n = kl_json_unescape(v.p + 1, v.n - 2, tmp);
  if (n > cap - 1) n = cap - 1;
  memcpy(out, tmp, n);
  out[n] = '\0';
  free(tmp);
}

/* details.causes[]: a cause of type ResourceVersionTooLarge, or one whose
 * message says "Too large resource version". */
static void scan_causes(kl_json_span_t status, bool *type_hit, bool *msg_hit) {
  kl_json_span_t details, causes;
  if (!kl_json_member(status, "details", &details) ||
      !kl_json_member(details, "causes", &causes) || causes.n < 2 ||
      causes.p[0] != '[')
    return;
  const char *p = causes.p + 1, *end = causes.p + causes.n - 1;
  for (;;) {
    p = kl_json_ws(p, end);
    if (p >= end || *p != '{') break;
    const char *e = kl_json_skip(p, end);
    if (!e) break;
    kl_json_span_t c = {p, (size_t)(e - p)};
    char buf[256];
    member_str(c, "reason", buf, sizeof buf);
    if (strcmp(buf, "ResourceVersionTooLarge") == 0) *type_hit = true;
    member_str(c, "message", buf, sizeof buf);
    if (strstr(buf, "Too large resource version")) *msg_hit = true;
    p = kl_json_ws(e, end);
    if (p >= end || *p != ',') break;
    p++;
  }
}

/* Classifies a Status (code, reason, message; its JSON for the details,
 * may be empty) as client-go's reflector tests it. */
static void classify(failure_t *f, long code, const char *reason,
                     const char *message, kl_json_span_t status,
                     const char *what) {
  bool known = known_reason(reason), cause_type = false, cause_msg = false;
  if (status.n) scan_causes(status, &cause_type, &cause_msg);
  bool timeout = strcmp(reason, "Timeout") == 0 || (!known && code == 504);
  f->expired = strcmp(reason, "Expired") == 0;
  f->gone = strcmp(reason, "Gone") == 0 || (!known && code == 410);
  f->too_many =
      strcmp(reason, "TooManyRequests") == 0 || (!known && code == 429);
  f->too_large =
      cause_type ||
      (timeout && (cause_msg || strstr(message, "Too large resource version")));
  f->code = code;
  snprintf(f->msg, sizeof f->msg, "%s: %ld %s: %.300s", what, code,
           reason[0] ? reason : "(no reason)",
           message[0] ? message : "(no message)");
}

/* A non-200 response: its body is a Status, or anything else. */
static void failure_from_response(kl_reflector_t *r, failure_t *f,
                                  const char *what) {
  char reason[64] = "", message[512] = "";
  kl_json_value_t v;
  kl_json_span_t status = {"", 0};
  long code = r->status;
  memset(f, 0, sizeof *f);
  if (r->elen && kl_json_check(r->ebody, r->elen, &v, NULL, 0) == 0) {
    kl_json_span_t kind, c;
    int64_t n;
    if (kl_json_member(v.json, "kind", &kind) && kind.n == 8 &&
        memcmp(kind.p, "\"Status\"", 8) == 0) {
      status = v.json;
      member_str(status, "reason", reason, sizeof reason);
      member_str(status, "message", message, sizeof message);
      if (kl_json_member(status, "code", &c) && kl_json_int64(c, &n) && n > 0 &&
          n < 1000)
        code = (long)n;
    }
  }
  if (!message[0] && r->elen) {
    size_t n = r->elen < sizeof message - 1 ? r->elen : sizeof message - 1;
    memcpy(message, r->ebody, n);
    message[n] = '\0';
  }
  classify(f, code, reason, message, status, what);
  f->retry_after = r->retry_after;
  f->unauthorized = r->status == 401;
}

/* A transport failure (no response). */
static void failure_from_transport(failure_t *f, const char *msg,
                                   const char *what) {
  memset(f, 0, sizeof *f);
  f->refused = strstr(msg, "Connection refused") ||
               strstr(msg, "Couldn't connect to server");
  snprintf(f->msg, sizeof f->msg, "%s: %.400s", what, msg);
}

/* ---- requests ---- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool over;
} sbuf_t;

static void sb_add(sbuf_t *b, const char *s, size_t n) {
  if (b->over || b->n + n + 1 > URL_MAX) {
    b->over = true;
    return;
  }
  if (b->n + n + 1 > b->cap) {
    b->cap = (b->n + n + 1) * 2;
    b->p = kl_xrealloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

/* Appends "&key=value" (the first parameter gets '?'), value escaped as
 * Go's url.QueryEscape does. */
static void sb_param(sbuf_t *b, bool *first, const char *key, const char *val) {
  static const char hex[] = "0123456789ABCDEF";
  sb_add(b, *first ? "?" : "&", 1);
  *first = false;
  sb_add(b, key, strlen(key));
  sb_add(b, "=", 1);
  for (const unsigned char *s = (const unsigned char *)val; *s; s++) {
    char e[3];
    if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
        (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.' ||
        *s == '~') {
      sb_add(b, (const char *)s, 1);
    } else if (*s == ' ') {
      sb_add(b, "+", 1);
    } else {
      e[0] = '%';
      e[1] = hex[*s >> 4];
      e[2] = hex[*s & 15];
      sb_add(b, e, 3);
    }
  }
}

static int on_head(kl_http_req_t *req, int status, void *ud) {
  kl_reflector_t *r = ud;
  r->status = status;
  r->elen = 0;
  r->retry_after = 0;
  if (status == 429) {
    const char *ra = kl_http_header(req, "Retry-After");
    char *end;
    long s = ra ? strtol(ra, &end, 10) : 0;
    if (ra && end != ra && *end == '\0' && s > 0)
      r->retry_after = s < RETRY_AFTER_MAX ? (double)s : RETRY_AFTER_MAX;
  }
  if (r->state == ST_WATCHING && status == 200) {
    r->streaming = r->w_open = true;
    r->w_start = now(r);
    r->w_last = r->w_start;
    if (r->down_tries) {
      kl_log(KL_LOG_INFO,
             "reflector %s: watching again after %u failed attempt%s in "
             "%.1fs",
             r->name, r->down_tries, r->down_tries == 1 ? "" : "s",
             r->w_start - r->down_since);
      r->down_tries = 0;
    }
  }
  return 0;
}

static void keep_error_body(kl_reflector_t *r, const char *p, size_t n) {
  if (r->elen + n > ERRBODY_MAX) n = ERRBODY_MAX - r->elen;
  if (!n) return;
  r->ebody = kl_xrealloc(r->ebody, r->elen + n + 1);
  memcpy(r->ebody + r->elen, p, n);
  r->elen += n;
  r->ebody[r->elen] = '\0';
}

/* Ends the request in flight from inside one of its callbacks or a timer;
 * no callback of it follows. */
static void drop_request(kl_reflector_t *r) {
  kl_http_cancel(r->req);
  r->req = NULL;
  r->streaming = false;
  r->paused = false;
  kl_timers_stop(r->timers, &r->live);
  kl_timers_stop(r->timers, &r->unpause);
}

/* ---- list(): the pager, then Replace ---- */

static void list_failed(kl_reflector_t *r, failure_t *f);
static void list_send(kl_reflector_t *r);

/* Starts one run of the pager at relistResourceVersion. */
static void pager_begin(kl_reflector_t *r) {
  const char *rv = r->unavailable ? "" : r->rv[0] ? r->rv : "0";
  snprintf(r->list_rv, sizeof r->list_rv, "%s", rv);
  kl_informer_list_free(r->acc);
  r->acc = kl_informer_list_begin(r->inf);
  free(r->cont);
  r->cont = NULL;
  r->fallback = r->paginated = r->page_seen = false;
  r->page_rv[0] = '\0';
  list_send(r);
}

/* A round: a streaming list when asked for and the server does them,
 * else list() (6.4). */
static void list_begin(kl_reflector_t *r) {
  bool stream = r->watch_list && !r->wl_skip && r->sv->state != SV_LISTS;
  r->wl_skip = false;
  if (stream && r->sv->state == SV_ASKING && r->sv->asker != r) {
    go(r, NEXT_LIST, ASK_POLL); /* another reflector asks the server */
    return;
  }
  if (stream) {
    if (r->sv->state == SV_UNKNOWN) {
      r->sv->state = SV_ASKING;
      r->sv->asker = r;
    }
    watch_begin(r, true);
    return;
  }
  const char *rv = r->unavailable ? "" : r->rv[0] ? r->rv : "0";
  r->retried = false;
  r->at_zero = strcmp(rv, "0") == 0;
  if (r->page_size > 0)
    r->limit = r->page_size;
  else if (r->paginated_result)
    r->limit = KL_REFLECTOR_PAGE_SIZE;
  else if (rv[0] && strcmp(rv, "0") != 0)
    r->limit = 0; /* one list the watch cache serves: not older than rv */
  else
    r->limit = KL_REFLECTOR_PAGE_SIZE;
  pager_begin(r);
}

static void list_send(kl_reflector_t *r) {
  sbuf_t b = {0};
  bool first = true;
  char num[32];
  sb_add(&b, r->url, strlen(r->url));
  if (r->cont) sb_param(&b, &first, "continue", r->cont);
  if (r->field_selector)
    sb_param(&b, &first, "fieldSelector", r->field_selector);
  if (r->label_selector)
    sb_param(&b, &first, "labelSelector", r->label_selector);
  if (r->limit > 0 && !r->fallback) {
    snprintf(num, sizeof num, "%d", r->limit);
    sb_param(&b, &first, "limit", num);
  }
  if (!r->cont && r->list_rv[0])
    sb_param(&b, &first, "resourceVersion", r->list_rv);
  r->state = ST_LISTING;
  r->st.list_requests++;
  if (b.over)
    round_failed(r, "list: the request URL is too long", 0);
  else
    request_start(r, false, b.p);
  free(b.p);
}

/* Every page is in (or the fallback list): Replace, then watch. */
static void list_done(kl_reflector_t *r) {
  char err[512] = "";
  unsigned gen = r->gen;
  kl_informer_list_t *acc = r->acc;
  /* list()'s options, not the retry's, as client-go checks them. */
  if (r->at_zero && r->paginated) r->paginated_result = true;
  r->unavailable = false;
  r->acc = NULL; /* the informer's on_work may stop us during the commit */
  int rc = kl_informer_list_commit(acc, r->page_rv, err, sizeof err);
  size_t n = kl_informer_list_count(acc);
  kl_informer_list_free(acc);
  if (r->gen != gen) return;
  if (rc != 0) {
    char msg[700];
    snprintf(msg, sizeof msg, "list: unable to sync list result: %s", err);
    round_failed(r, msg, 0);
    return;
  }
  snprintf(r->rv, sizeof r->rv, "%s", r->page_rv);
  r->listed = true;
  r->w_ok = false;
  if (++r->st.lists > 1) r->st.relists++;
  kl_log(KL_LOG_DEBUG,
         "reflector %s: caches populated: %zu items at resourceVersion %s",
         r->name, n, r->rv);
  watch_begin(r, false);
}

static bool span_is(kl_json_span_t s, const char *c) {
  size_t n = strlen(c);
  return s.n == n && memcmp(s.p, c, n) == 0;
}

static bool is_table(kl_json_span_t kind, kl_json_span_t api_version) {
  return span_is(kind, "Table") &&
         (span_is(api_version, "meta.k8s.io/v1") ||
          span_is(api_version, "meta.k8s.io/v1beta1"));
}

static int list_data(kl_http_req_t *req, const char *p, size_t n, void *ud) {
  kl_reflector_t *r = ud;
  char err[512] = "";
  (void)req;
  if (r->status != 200) {
    keep_error_body(r, p, n);
    return 0;
  }
  if (kl_informer_list_feed(r->acc, p, n, err, sizeof err) == 0) return 0;
  failure_t f = {0};
  snprintf(f.msg, sizeof f.msg, "list: decoding: %.400s", err);
  drop_request(r);
  list_failed(r, &f);
  return 0;
}

static void list_response(kl_http_req_t *req, int err, const char *msg,
                          void *ud) {
  kl_reflector_t *r = ud;
  failure_t f;
  char derr[512] = "";
  const kl_json_list_t *env;
  (void)req;
  r->req = NULL;
  if (err != 0) {
    failure_from_transport(&f, msg, "list");
    list_failed(r, &f);
    return;
  }
  if (r->status != 200) {
    failure_from_response(r, &f, "list");
    list_failed(r, &f);
    return;
  }
  if (kl_informer_list_page_end(r->acc, &env, derr, sizeof derr) != 0) {
    memset(&f, 0, sizeof f);
    snprintf(f.msg, sizeof f.msg, "list: decoding: %.400s", derr);
    list_failed(r, &f);
    return;
  }
  if (is_table(env->kind, env->api_version)) {
    memset(&f, 0, sizeof f);
    snprintf(f.msg, sizeof f.msg, "list: unsupported list gvk: %.*s, Kind=%s",
             (int)env->api_version.n, env->api_version.p, "Table");
    list_failed(r, &f);
    return;
  }
  /* The aggregate's RV is the first page's; a fallback list is its own. */
  if (!r->page_seen || r->fallback)
    copy_rv(r->page_rv, env->resource_version.p, env->resource_version.n);
  r->page_seen = true;
  if (env->continue_token.n > 0 && !r->fallback) {
    free(r->cont);
    r->cont = kl_xstrndup(env->continue_token.p, env->continue_token.n);
    r->paginated = true;
    list_send(r);
    return;
  }
  list_done(r);
}

/* A page failed (or its body did not decode). */
static void list_failed(kl_reflector_t *r, failure_t *f) {
  if (r->cont && !r->fallback && f->expired) {
    /* The pager: an expired continue token gets one full list at the
     * originally requested resourceVersion. */
    kl_log(KL_LOG_DEBUG, "reflector %s: %s: one full list instead", r->name,
           f->msg);
    free(r->cont);
    r->cont = NULL;
    r->fallback = true;
    kl_informer_list_free(r->acc);
    r->acc = kl_informer_list_begin(r->inf);
    list_send(r);
    return;
  }
  if (!r->retried && (f->expired || f->gone || f->too_large)) {
    /* list(): the resourceVersion is unavailable; at once, list at "". */
    kl_log(KL_LOG_DEBUG, "reflector %s: %s: listing at the latest version",
           r->name, f->msg);
    r->unavailable = true;
    r->retried = true;
    pager_begin(r);
    return;
  }
  kl_informer_list_free(r->acc);
  r->acc = NULL;
  free(r->cont);
  r->cont = NULL;
  refused_credential(r, f);
  round_failed(r, f->msg, f->retry_after);
}

/* ---- watch() and handleWatch ---- */

static void arm_live(kl_reflector_t *r) {
  double at = r->w_end;
  if (r->initial && r->initial_silence >= 0 &&
      r->w_last + r->initial_silence < at)
    at = r->w_last + r->initial_silence;
  kl_timers_start(r->timers, &r->live, at);
}

/* Forgets a streaming list's collected objects. */
static void wl_clear(kl_reflector_t *r) {
  for (size_t i = 0; i < r->wl_n; i++)
    kl_obj_unref(r->wl_objs[i]);
  free(r->wl_objs);
  r->wl_objs = NULL;
  r->wl_n = r->wl_cap = r->wl_cached = 0;
  r->initial = false;
  r->wl_ignored = false;
}

/* watch(), or with initial set watchList()'s request (6.6, 6.11): the
 * initial state streamed as ADDED events, at least as fresh as the last
 * resourceVersion ("" at first or when it is unavailable). */
static void watch_begin(kl_reflector_t *r, bool initial) {
  sbuf_t b = {0};
  bool first = true;
  char num[32];
  const char *rv = initial && r->unavailable ? "" : r->rv;
  int timeout = (int)floor(r->min_watch + rnd(r) * r->min_watch);
  if (timeout >= (int)(2 * r->min_watch)) timeout = (int)(2 * r->min_watch) - 1;
  sb_add(&b, r->url, strlen(r->url));
  sb_param(&b, &first, "allowWatchBookmarks", "true");
  if (r->field_selector)
    sb_param(&b, &first, "fieldSelector", r->field_selector);
  if (r->label_selector)
    sb_param(&b, &first, "labelSelector", r->label_selector);
  if (rv[0]) sb_param(&b, &first, "resourceVersion", rv);
  if (initial) {
    sb_param(&b, &first, "resourceVersionMatch", "NotOlderThan");
    sb_param(&b, &first, "sendInitialEvents", "true");
  }
  snprintf(num, sizeof num, "%d", timeout);
  sb_param(&b, &first, "timeoutSeconds", num);
  sb_param(&b, &first, "watch", "true");

  /* Synthetic ADDED events of a watch from "" or "0" come in key order:
   * they must not move the resourceVersion (6.9); a streaming list moves
   * it at its end bookmark. */
  r->propagate = !initial && r->rv[0] && strcmp(r->rv, "0") != 0;
  wl_clear(r);
  r->initial = initial;
  r->besides_added = false;
  r->w_open = false;
  r->w_events = 0;
  memset(&r->evfail, 0, sizeof r->evfail);
  bool kept = r->clen != 0; /* bytes of an event the last watch cut */
  r->clen = 0;
  if (kl_informer_watch_reset(r->inf) != 0 || kept)
    kl_log(KL_LOG_DEBUG, "reflector %s: a partial watch event was dropped",
           r->name);
  r->state = ST_WATCHING;
  r->st.watches++;
  r->w_start = r->w_last = now(r);
  r->w_end = r->w_start + timeout;
  if (b.over) {
    round_failed(r, "watch: the request URL is too long", 0);
  } else {
    request_start(r, true, b.p);
    if (r->state == ST_WATCHING) arm_live(r);
  }
  free(b.p);
}

/* True when a bookmark carries the annotation that ends a streaming
 * list's initial events. */
static bool initial_events_end(const kl_obj_t *o) {
  kl_json_span_t md, ann, v;
  return kl_json_member(kl_obj_json(o), "metadata", &md) &&
         kl_json_member(md, "annotations", &ann) &&
         kl_json_member(ann, INITIAL_EVENTS_END, &v) && span_is(v, "\"true\"");
}

/* The end bookmark: Replace with the collected objects at its
 * resourceVersion, as list() does, and watch on (6.11 step 5). Returns 1
 * (nothing to queue), or an error that ends the stream. */
static int wl_commit(kl_reflector_t *r, const kl_obj_t *bookmark, char *err,
                     size_t errlen) {
  char rv[RV_MAX];
  kl_json_span_t s = kl_obj_resource_version(bookmark);
  unsigned gen = r->gen;
  kl_obj_t **objs = r->wl_objs;
  size_t n = r->wl_n;
  copy_rv(rv, s.p, s.n);
  r->wl_objs = NULL; /* the informer's on_work may stop us meanwhile */
  r->wl_n = r->wl_cap = r->wl_cached = 0;
  r->initial = false;
  int rc = kl_informer_replace(r->inf, objs, n, rv, err, errlen);
  for (size_t i = 0; i < n; i++)
    kl_obj_unref(objs[i]);
  free(objs);
  if (r->gen != gen) return KL_ESHUTDOWN;
  if (rc != 0) return rc;
  r->unavailable = false;
  snprintf(r->rv, sizeof r->rv, "%s", rv);
  r->listed = true;
  r->w_ok = false;
  server_streams(r);
  r->propagate = true; /* past the initial events: every RV counts */
  r->st.watch_lists++;
  if (++r->st.lists > 1) r->st.relists++;
  kl_log(KL_LOG_DEBUG,
         "reflector %s: caches populated: %zu items at resourceVersion %s "
         "(streaming list)",
         r->name, n, r->rv);
  return 1;
}

/* An event of a streaming list's initial part: collected, not queued. */
static int initial_event(kl_reflector_t *r, const kl_obj_event_t *ev, char *err,
                         size_t errlen) {
  if (ev->type == KL_OBJ_ADDED) {
    if (r->wl_n == WL_MAX) {
      snprintf(err, errlen, "more than %zu objects in a streaming list",
               WL_MAX);
      return KL_ELIMIT;
    }
    if (r->wl_n == r->wl_cap) {
      r->wl_cap = r->wl_cap ? r->wl_cap * 2 : 64;
      r->wl_objs = kl_xrealloc(r->wl_objs, r->wl_cap * sizeof *r->wl_objs);
    }
    r->wl_objs[r->wl_n++] = kl_obj_ref(ev->obj);
    kl_informer_cache_forms(r->inf, r->wl_objs, r->wl_n, &r->wl_cached);
    return 1;
  }
  if (ev->type != KL_OBJ_BOOKMARK) {
    snprintf(err, errlen, "a %s event among a streaming list's initial events",
             kl_obj_event_type_name(ev->type));
    r->wl_ignored = true;
    return KL_EPARSE;
  }
  return initial_events_end(ev->obj) ? wl_commit(r, ev->obj, err, errlen) : 1;
}

/* Sees each event before the informer queues it (6.7). */
static int on_event(void *ud, const kl_obj_event_t *ev, char *err,
                    size_t errlen) {
  kl_reflector_t *r = ud;
  if (r->state != ST_WATCHING) { /* stopped from the informer's on_work */
    snprintf(err, errlen, "stopped");
    return KL_ESHUTDOWN;
  }
  if (ev->type == KL_OBJ_ERROR) {
    const kl_obj_status_t *s = &ev->status;
    classify(&r->evfail, (long)s->code, s->reason ? s->reason : "",
             s->message ? s->message : "", kl_obj_json(ev->obj), "watch");
    return 0;
  }
  r->st.events++;
  r->w_events++;
  kl_json_span_t kind = kl_obj_kind(ev->obj), av = kl_obj_api_version(ev->obj);
  if (r->kind && kind.n &&
      (!span_is(kind, r->kind) ||
       (r->api_version && av.n && !span_is(av, r->api_version)))) {
    kl_log(KL_LOG_WARN,
           "reflector %s: expected %s %s, got %.*s %.*s in a %s event: "
           "skipped",
           r->name, r->api_version ? r->api_version : "", r->kind,
           (int)(av.n < 100 ? av.n : 100), av.p,
           (int)(kind.n < 100 ? kind.n : 100), kind.p,
           kl_obj_event_type_name(ev->type));
    return 1;
  }
  if (span_is(kind, "Table") &&
      (span_is(av, "meta.k8s.io/v1") || span_is(av, "meta.k8s.io/v1beta1"))) {
    kl_log(KL_LOG_WARN, "reflector %s: a Table in a watch event: skipped",
           r->name);
    return 1;
  }
  if (r->initial) return initial_event(r, ev, err, errlen);
  if (ev->type != KL_OBJ_ADDED) r->besides_added = true;
  kl_json_span_t rv = kl_obj_resource_version(ev->obj);
  if ((r->propagate || r->besides_added) && rv.n) {
    copy_rv(r->rv, rv.p, rv.n);
    kl_informer_set_rv(r->inf, r->rv);
  }
  return 0;
}

/* The server ignores streaming lists (why: it sent other events than the
 * initial ADDED ones, or its stream ended, timed out or went silent
 * without the end bookmark — an aggregated server on older libraries, a
 * proxy): list at once, and every reflector there lists from now on.
 * client-go would stream again for ever, never synced (14.3). */
static void wl_ignored(kl_reflector_t *r, const char *why) {
  wl_clear(r);
  r->st.errors++;
  server_lists(r, why);
  go(r, NEXT_LIST, 0);
}

static void wl_no_bookmark(kl_reflector_t *r, const char *why) {
  char msg[200];
  snprintf(msg, sizeof msg, "%s without the %s bookmark", why,
           INITIAL_EVENTS_END);
  wl_ignored(r, msg);
}

/* watchList() failed to set up, or with an ERROR event (6.11 step 3):
 * back off and stream again, stream again at once at "" when the
 * resourceVersion is gone, or list at once (6.4 step 1) — for good when
 * the server refuses streaming lists (a server older than 1.27 answers a
 * watch with resourceVersionMatch 422, so does one with the WatchList gate
 * off; 400, 405 and 501 are refusals too). */
static void wl_failed(kl_reflector_t *r, failure_t *f) {
  long c = f->code;
  wl_clear(r);
  refused_credential(r, f);
  if ((f->expired || f->gone || f->too_large) && !r->unavailable) {
    kl_log(KL_LOG_DEBUG, "reflector %s: %s: streaming at the latest version",
           r->name, f->msg);
    r->unavailable = true;
    go(r, NEXT_LIST, 0);
    return;
  }
  if (!f->refused && !f->too_many && !f->unauthorized &&
      (c == 400 || c == 405 || c == 422 || c == 501)) {
    r->st.errors++;
    r->wl_skip = true;
    server_lists(r, f->msg);
    go(r, NEXT_LIST, 0);
    return;
  }
  server_release(r); /* no answer: another reflector may ask */
  if (f->refused || f->too_many) {
    note_failure(r);
    kl_log(KL_LOG_WARN, "reflector %s: %s: streaming again after a backoff",
           r->name, f->msg);
    backoff_then(r, NEXT_LIST, f->retry_after);
  } else if (f->unauthorized) {
    round_failed(r, f->msg, f->retry_after);
  } else {
    r->wl_skip = true;
    note_failure(r);
    kl_log(KL_LOG_WARN, "reflector %s: streaming list: %s: listing instead",
           r->name, f->msg);
    go(r, NEXT_LIST, 0);
  }
}

/* True when the watch that just ended worked: it ran a while or brought
 * events. */
static bool watch_worked(const kl_reflector_t *r) {
  return r->w_events > 0 || (r->w_open && now(r) - r->w_start >= VERY_SHORT);
}

/* The watch's resourceVersion is gone (a 410 on set-up or in the stream):
 * relist (6.6), at the last resourceVersion first. When the watch worked,
 * or the one before it ended normally and this one resumed it, the 410 is
 * routine (the server compacted) and the relist starts at once, with no
 * backoff step; otherwise (a new list's watch expired at once) after a
 * backoff, as any round ends. */
static void watch_expired(kl_reflector_t *r, const failure_t *f) {
  bool routine = r->w_ok || watch_worked(r);
  r->w_ok = false;
  r->st.errors++;
  kl_log(KL_LOG_INFO, "reflector %s: resourceVersion %s is gone (%s): %s",
         r->name, r->rv[0] ? r->rv : "\"\"", f->msg,
         routine ? "relisting" : "relisting after a backoff");
  if (routine)
    go(r, NEXT_LIST, 0);
  else
    round_over(r);
}

/* The watch's request failed or was refused before any stream. */
static void watch_setup_failed(kl_reflector_t *r, failure_t *f) {
  refused_credential(r, f);
  if (f->expired || f->gone) {
    watch_expired(r, f);
    return;
  }
  r->w_ok = false;
  if (f->refused || f->too_many) {
    /* isWatchErrorRetriable: back off and watch again, no relist. */
    note_failure(r);
    kl_log(KL_LOG_WARN, "reflector %s: %s: watching again after a backoff",
           r->name, f->msg);
    backoff_then(r, NEXT_WATCH, f->retry_after);
    return;
  }
  round_failed(r, f->msg, f->retry_after);
}

/* The stream ended with an ERROR event or an undecodable event. */
static void watch_stream_failed(kl_reflector_t *r, int rc, const char *err) {
  failure_t *f = &r->evfail;
  bool initial = r->initial, ignored = r->wl_ignored;
  wl_clear(r);
  if (initial && ignored) {
    wl_ignored(r, err);
    return;
  }
  if (initial && rc == KL_EIO) {
    wl_failed(r, f);
    return;
  }
  if (rc == KL_EIO && (f->expired || f->gone)) {
    watch_expired(r, f);
    return;
  }
  r->w_ok = false;
  if (initial) server_release(r);
  note_failure(r);
  if (rc != KL_EIO) {
    kl_log(KL_LOG_ERROR,
           "reflector %s: watch ended with error: decoding an event: %s; "
           "relisting",
           r->name, err);
    round_over(r);
  } else if (f->too_many) {
    kl_log(KL_LOG_WARN, "reflector %s: %s: watching again after a backoff",
           r->name, f->msg);
    backoff_then(r, NEXT_WATCH, 0);
  } else {
    kl_log(KL_LOG_WARN, "reflector %s: watch ended with error: %s", r->name,
           f->msg);
    round_over(r);
  }
}

/* A watch stream stops being read while this many events wait in the
 * informer (queued deltas and undelivered notifications), and is read again
 * once half of them are gone: a burst (a watch catching up, a server
 * replaying its history) then passes through a small working set instead
 * of piling up in memory; the server holds the rest. */
#define BACKLOG_HIGH 4096u

/* Lists and watches read 256 KiB at a time: a burst of 2.4 KB events went
 * through a 16 KiB read (a system call and a feed) every six events. */
#define READ_SIZE (256u * 1024u)
#define UNPAUSE_CHECK 0.001

static void on_unpause(kl_timer_t *t, void *ud) {
  kl_reflector_t *r = ud;
  (void)t;
  if (!r->paused || !r->req) return;
  r->w_last = now(r); /* quiet because we are not reading */
  if (kl_informer_backlog(r->inf) > BACKLOG_HIGH / 2) {
    kl_timers_start(r->timers, &r->unpause, now(r) + UNPAUSE_CHECK);
    return;
  }
  r->paused = false;
  kl_http_resume(r->req); /* the held piece may come back in here */
}

/* The piece p, n of the watch's stream to the informer; false when the
 * watch ended or was stopped meanwhile. */
static bool watch_feed(kl_reflector_t *r, const char *p, size_t n) {
  char err[512] = "";
  unsigned gen = r->gen;
  int rc = kl_informer_feed_events(r->inf, p, n, on_event, r, err, sizeof err);
  if (r->gen != gen || r->state != ST_WATCHING) return false; /* stopped */
  if (rc != 0) {
    drop_request(r);
    watch_stream_failed(r, rc, err);
    return false;
  }
  return true;
}

/* Bytes of an event kept back from one piece for the next (watch_data). */
#define CARRY_MAX (256u * 1024u)

static void carry_add(kl_reflector_t *r, const char *p, size_t n) {
  if (!n) return;
  if (r->clen + n > r->ccap) {
    r->ccap = r->clen + n > 16384 ? r->clen + n : 16384;
    r->carry = kl_xrealloc(r->carry, r->ccap);
  }
  memcpy(r->carry + r->clen, p, n);
  r->clen += n;
}

/* Hands over what watch_data kept back, as it is. */
static bool carry_flush(kl_reflector_t *r) {
  size_t n = r->clen;
  r->clen = 0;
  return !n || watch_feed(r, r->carry, n);
}

/* The last byte of p, n that is not whitespace, or 0. */
static char last_byte(const char *p, size_t n) {
  while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r'))
    n--;
  return n ? p[n - 1] : 0;
}

/* A server ends each watch event with a newline, and libcurl hands the
 * stream over in pieces of at most 16 KiB that cut an event in four.
 * The decoder reads an event a piece cuts byte by byte (it must keep its
 * state across pieces), a third more work than one that lies whole in a
 * piece, so the bytes after a piece's last newline are kept back and go
 * with the next piece's head, up to its first newline: every piece the
 * decoder sees ends with a newline. A piece without a newline (a server
 * that does not end events with one) starts nothing kept back, and bytes
 * that may end an event (the last one that is not whitespace is a '}')
 * and an event longer than CARRY_MAX go at once, as they come: no event
 * waits for bytes it does not need. */
static int watch_data(kl_http_req_t *req, const char *p, size_t n, void *ud) {
  kl_reflector_t *r = ud;
  (void)req;
  if (r->status != 200) {
    keep_error_body(r, p, n);
    return 0;
  }
  if (!r->initial && kl_informer_backlog(r->inf) >= BACKLOG_HIGH) {
    r->paused = true;
    r->st.watch_pauses++;
    kl_timers_start(r->timers, &r->unpause, now(r) + UNPAUSE_CHECK);
    return KL_HTTP_PAUSE;
  }
  r->w_last = now(r);
  arm_live(r);
  if (r->clen) {
    const char *nl = memchr(p, '\n', n);
    size_t head = nl ? (size_t)(nl + 1 - p) : n;
    if (r->clen + head > CARRY_MAX) {
      if (!carry_flush(r)) return 0;
    } else {
      carry_add(r, p, head);
      p += head;
      n -= head;
      if ((nl || last_byte(r->carry, r->clen) == '}') && !carry_flush(r))
        return 0;
      if (!n) return 0;
    }
  }
  const char *nl = memrchr(p, '\n', n);
  size_t keep = nl ? n - (size_t)(nl + 1 - p) : 0;
  if (keep > CARRY_MAX / 2 || last_byte(p + n - keep, keep) == '}') keep = 0;
  if (n > keep && !watch_feed(r, p, n - keep)) return 0;
  carry_add(r, p + n - keep, keep);
  return 0;
}

static void watch_response(kl_http_req_t *req, int err, const char *msg,
                           void *ud) {
  kl_reflector_t *r = ud;
  failure_t f;
  (void)req;
  r->req = NULL;
  r->streaming = false;
  r->paused = false;
  kl_timers_stop(r->timers, &r->live);
  kl_timers_stop(r->timers, &r->unpause);
  if (r->status == 0 && err != 0) {
    failure_from_transport(&f, msg, "watch");
    (r->initial ? wl_failed : watch_setup_failed)(r, &f);
    return;
  }
  if (r->status != 200) {
    failure_from_response(r, &f, "watch");
    (r->initial ? wl_failed : watch_setup_failed)(r, &f);
    return;
  }
  if (!carry_flush(r)) return; /* what watch_data kept back decides */
  if (r->initial && err == 0) {
    wl_no_bookmark(r, "the stream ended");
    return;
  }
  if (r->initial) { /* the connection broke: stream again after a backoff */
    wl_clear(r);
    server_release(r);
    note_failure(r);
    kl_log(KL_LOG_WARN, "reflector %s: streaming list: %s", r->name, msg);
    round_over(r);
    return;
  }
  if (now(r) - r->w_start < VERY_SHORT && r->w_events == 0) {
    r->w_ok = false;
    note_failure(r);
    kl_log(KL_LOG_WARN,
           "reflector %s: watch ended with error: very short watch: "
           "Unexpected watch close - watch lasted less than a second and no "
           "items received",
           r->name);
    round_over(r);
    return;
  }
  /* The stream ended: at its timeout, or the connection went (client-go
   * treats a probable EOF as a normal close). Either way the watch worked:
   * resume it from the last resourceVersion, no backoff. */
  r->w_ok = true;
  if (err != 0) {
    r->st.watch_restarts++;
    kl_log(KL_LOG_DEBUG,
           "reflector %s: the watch's connection broke after %.0fs (%s): "
           "watching again from resourceVersion %s",
           r->name, now(r) - r->w_start, msg, r->rv[0] ? r->rv : "\"\"");
  } else {
    kl_log(KL_LOG_DEBUG,
           "reflector %s: the server ended the watch after %.0fs: watching "
           "again from resourceVersion %s",
           r->name, now(r) - r->w_start, r->rv[0] ? r->rv : "\"\"");
  }
  go(r, NEXT_WATCH, 0);
}

/* The watch's deadline, or a streaming list's initial events' silence. */
static void on_live(kl_timer_t *t, void *ud) {
  kl_reflector_t *r = ud;
  (void)t;
  if (r->state != ST_WATCHING || !r->req) return;
  double at = now(r);
  if (r->initial &&
      (at >= r->w_end ||
       (r->initial_silence >= 0 && at - r->w_last >= r->initial_silence))) {
    /* Streaming the initial events again would meet the same silence:
     * client-go's never-synced informer (CLIENTGO.md 14.3). */
    drop_request(r);
    wl_no_bookmark(r, at >= r->w_end ? "timeoutSeconds passed"
                                     : "the stream went silent");
  } else if (at >= r->w_end) {
    /* timeoutSeconds passed on our side too: a normal end. */
    drop_request(r);
    r->w_ok = true;
    kl_log(KL_LOG_DEBUG,
           "reflector %s: the watch reached its timeoutSeconds: watching "
           "again from resourceVersion %s",
           r->name, r->rv[0] ? r->rv : "\"\"");
    go(r, NEXT_WATCH, 0);
  } else {
    arm_live(r);
  }
}

/* The fixed headers plus the credential's line, in hdrs (nheaders + 2
 * slots) and line (cap bytes); a watch's Accept is watch_accept when there
 * is one. Returns 0, or the auth callback's error with its message in err. */
static int request_headers(kl_reflector_t *r, bool watch, const char **hdrs,
                           char *line, size_t cap, char *err, size_t errlen) {
  size_t n = 0;
  for (; n < r->nheaders; n++) {
    bool accept = strncasecmp(r->headers[n], "Accept:", 7) == 0;
    hdrs[n] =
        watch && accept && r->watch_accept ? r->watch_accept : r->headers[n];
  }
  hdrs[n] = NULL;
  if (!r->auth) return 0;
  line[0] = '\0';
  int rc = r->auth(r, line, cap, r->auth_ud);
  if (rc != 0) {
    snprintf(err, errlen, "%.200s", line[0] ? line : kl_strerror(rc));
    return rc < 0 ? rc : KL_EIO;
  }
  if (line[0]) hdrs[n++] = line;
  hdrs[n] = NULL;
  return 0;
}

static void request_start(kl_reflector_t *r, bool watch, const char *url) {
  kl_http_opts_t o = {0};
  char err[256] = "";
  char line[AUTH_MAX];
  const char **hdrs = kl_xcalloc(r->nheaders + 2, sizeof *hdrs);
  int rc = request_headers(r, watch, hdrs, line, sizeof line, err, sizeof err);
  o.url = url;
  o.headers = hdrs;
  if (!watch) o.idle_timeout = KL_REFLECTOR_LIST_IDLE;
  o.read_size = READ_SIZE;
  o.tls = r->tls;
  o.on_head = on_head;
  o.on_data = watch ? watch_data : list_data;
  o.on_done = watch ? watch_response : list_response;
  o.ud = r;
  r->status = 0;
  r->elen = 0;
  r->retry_after = 0;
  kl_log(KL_LOG_DEBUG, "reflector %s: GET %s", r->name, url);
  /* curl copies the header lines: the credential is cleared at once. */
  r->req = rc == 0 ? kl_http_start(r->http, &o, err, sizeof err) : NULL;
  memset(line, 0, sizeof line);
  free(hdrs);
  if (!r->req) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s: %s%s", watch ? "watch" : "list",
             rc != 0 ? "credentials: " : "", err);
    if (!watch) {
      kl_informer_list_free(r->acc);
      r->acc = NULL;
    }
    if (rc == KL_EAGAIN) { /* an exec plugin runs: this step, a bit later */
      kl_log(KL_LOG_DEBUG, "reflector %s: %s", r->name, msg);
      go(r, watch && !r->initial ? NEXT_WATCH : NEXT_LIST, AUTH_POLL);
      return;
    }
    round_failed(r, msg, 0);
  }
}

/* ---- the public surface ---- */

static int check_header(const char *h) {
  return strchr(h, ':') && !strpbrk(h, "\r\n") ? 0 : KL_EINVAL;
}

kl_reflector_t *kl_reflector_new(kl_loop_t *loop, kl_http_t *http,
                                 kl_informer_t *inf,
                                 const kl_reflector_opts_t *o, char *err,
                                 size_t errlen) {
  size_t nh = 0;
  bool accept = false;
  if (!loop || !http || !inf || !o || !o->url || !o->url[0]) {
    snprintf(err, errlen,
             "reflector: a loop, a client, an informer and a "
             "URL are required");
    return NULL;
  }
  if (strchr(o->url, '?') || strchr(o->url, '#')) {
    snprintf(err, errlen, "reflector: the URL must have no query");
    return NULL;
  }
  for (const char *const *h = o->headers; h && *h; h++, nh++) {
    if (check_header(*h) != 0) {
      snprintf(err, errlen, "reflector: bad header line %zu", nh + 1);
      return NULL;
    }
    accept |= strncasecmp(*h, "Accept:", 7) == 0;
  }
  if (o->watch_accept &&
      (!o->watch_accept[0] || strpbrk(o->watch_accept, "\r\n") || !accept)) {
    snprintf(err, errlen,
             "reflector: watch_accept needs an Accept header for lists "
             "and must be one value");
    return NULL;
  }
  kl_reflector_t *r = kl_xcalloc(1, sizeof *r);
  r->loop = loop;
  r->http = http;
  r->inf = inf;
  r->timers = o->timers ? o->timers : kl_loop_timers(loop);
  r->name = kl_xstrdup(o->name ? o->name : kl_informer_name(inf));
  r->url = kl_xstrdup(o->url);
  if (o->label_selector && o->label_selector[0])
    r->label_selector = kl_xstrdup(o->label_selector);
  if (o->field_selector && o->field_selector[0])
    r->field_selector = kl_xstrdup(o->field_selector);
  if (o->kind && o->kind[0]) r->kind = kl_xstrdup(o->kind);
  if (o->api_version && o->api_version[0])
    r->api_version = kl_xstrdup(o->api_version);
  r->headers = kl_xcalloc(nh + 2, sizeof *r->headers);
  for (size_t i = 0; i < nh; i++)
    r->headers[i] = kl_xstrdup(o->headers[i]);
  if (!accept) r->headers[nh++] = kl_xstrdup("Accept: application/json");
  if (o->watch_accept) {
    size_t len = strlen("Accept: ") + strlen(o->watch_accept) + 1;
    r->watch_accept = kl_xmalloc(len);
    snprintf(r->watch_accept, len, "Accept: %s", o->watch_accept);
  }
  r->nheaders = nh;
  r->auth = o->auth;
  r->on_unauthorized = o->on_unauthorized;
  r->auth_ud = o->auth_ud;
  r->tls = o->tls;
  r->seed = (uint64_t)(now(r) * 1e6) ^ (uint64_t)(uintptr_t)r;
  r->rand = o->rand ? o->rand : default_rand;
  r->rand_ud = o->rand ? o->rand_ud : &r->seed;
#define OR(v, d) ((v) > 0 ? (v) : (d))
  r->bo_initial = OR(o->backoff_initial, KL_REFLECTOR_BACKOFF_INITIAL);
  r->bo_factor = OR(o->backoff_factor, KL_REFLECTOR_BACKOFF_FACTOR);
  r->bo_jitter = OR(o->backoff_jitter, KL_REFLECTOR_BACKOFF_JITTER);
  r->bo_max = OR(o->backoff_max, KL_REFLECTOR_BACKOFF_MAX);
  r->bo_reset = OR(o->backoff_reset, KL_REFLECTOR_BACKOFF_RESET);
  r->min_watch = OR(o->min_watch_timeout, KL_REFLECTOR_MIN_WATCH_TIMEOUT);
#undef OR
  r->initial_silence = o->initial_timeout < 0   ? -1
                       : o->initial_timeout > 0 ? o->initial_timeout
                                                : KL_REFLECTOR_INITIAL_SILENCE;
  r->page_size = o->page_size > 0 ? o->page_size : 0;
  r->watch_list = o->watch_list;
  r->servers = o->servers;
  if (!r->servers) r->servers = r->own_servers = kl_reflector_servers_new();
  char *server = server_url(r->url);
  r->sv = server_find(r->servers, server);
  free(server);
  r->on_error = o->on_error;
  r->ud = o->ud;
  /* NewExponentialBackoffManager: Steps = ceil(max / initial). */
  r->bo_dur = r->bo_initial;
  r->bo_steps = (int)ceil(r->bo_max / r->bo_initial);
  r->bo_last = now(r);
  kl_timer_init(&r->wait, on_wait, r);
  kl_timer_init(&r->live, on_live, r);
  kl_timer_init(&r->unpause, on_unpause, r);
  kl_defer_init(&r->step, on_step);
  return r;
}

void kl_reflector_stop(kl_reflector_t *r) {
  if (r->state == ST_STOPPED) return;
  r->gen++;
  r->state = ST_STOPPED;
  if (r->req) {
    kl_http_cancel(r->req);
    r->req = NULL;
  }
  r->streaming = false;
  r->paused = false;
  server_release(r);
  kl_timers_stop(r->timers, &r->wait);
  kl_timers_stop(r->timers, &r->live);
  kl_timers_stop(r->timers, &r->unpause);
  kl_loop_undefer(r->loop, &r->step);
  kl_informer_list_free(r->acc);
  r->acc = NULL;
  free(r->cont);
  r->cont = NULL;
  wl_clear(r);
  /* The informer's watch decoder is reset when the next watch starts: the
   * stop may come from inside its feed. */
}

void kl_reflector_free(kl_reflector_t *r) {
  if (!r) return;
  kl_reflector_stop(r);
  for (char **h = r->headers; *h; h++)
    free(*h);
  free(r->headers);
  free(r->watch_accept);
  free(r->ebody);
  free(r->carry);
  free(r->name);
  free(r->url);
  free(r->label_selector);
  free(r->field_selector);
  free(r->kind);
  free(r->api_version);
  kl_reflector_servers_free(r->own_servers);
  free(r);
}

int kl_reflector_start(kl_reflector_t *r) {
  if (r->state != ST_STOPPED) return KL_EINVAL;
  r->gen++;
  r->listed = false;
  r->w_ok = false;
  go(r, NEXT_LIST, 0);
  return 0;
}

bool kl_reflector_running(const kl_reflector_t *r) {
  return r->state != ST_STOPPED;
}
bool kl_reflector_watching(const kl_reflector_t *r) { return r->streaming; }
const char *kl_reflector_last_rv(const kl_reflector_t *r) { return r->rv; }
bool kl_reflector_listed(const kl_reflector_t *r) { return r->listed; }

void kl_reflector_get_stats(const kl_reflector_t *r, kl_reflector_stats_t *st) {
  *st = r->st;
}
