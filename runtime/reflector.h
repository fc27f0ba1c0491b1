/* reflector.h — client-go's Reflector (classic profile) on the loop: list,
 * then watch, into an informer, for as long as it runs.
 *
 * It lists the collection in pages (limit 500 and continue tokens; the first
 * list at resourceVersion 0), replaces the informer's content with the
 * result, then watches from the list's resourceVersion with bookmarks and a
 * random timeoutSeconds, resuming from the last resourceVersion seen when a
 * watch ends, and relisting when the server says that version is gone. Each
 * failure is classified as client-go's reflector does (CLIENTGO.md 6.8) and
 * retried after client-go's exponential backoff. A quiet watch is left
 * alone until the server ends it at its timeoutSeconds (a server may send
 * nothing at all until then); dead connections are the HTTP client's to
 * find (TCP keepalive, see http.h).
 *
 * Time comes from the heap's clock and randomness from an injected source,
 * so tests drive both. No Lua here. */
#ifndef KL_REFLECTOR_H
#define KL_REFLECTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "http.h"
#include "informer.h"
#include "loop.h"
#include "timer.h"

typedef struct kl_reflector kl_reflector_t;

/* What the reflectors of a process learnt about their servers, kept by the
 * runtime and shared: whether a server serves streaming lists, asked of it
 * once (by one reflector while the others wait) and remembered. A server is
 * the collection URL up to its "/api/" or "/apis/". */
typedef struct kl_reflector_servers kl_reflector_servers_t;
kl_reflector_servers_t *kl_reflector_servers_new(void);
/* Frees; every reflector using it must be freed first. NULL is a no-op. */
void kl_reflector_servers_free(kl_reflector_servers_t *s);

/* Defaults: client-go's figures (CLIENTGO.md 6.3, 13). */
#define KL_REFLECTOR_PAGE_SIZE 500
#define KL_REFLECTOR_BACKOFF_INITIAL 0.8
#define KL_REFLECTOR_BACKOFF_FACTOR 2.0
#define KL_REFLECTOR_BACKOFF_JITTER 1.0
#define KL_REFLECTOR_BACKOFF_MAX 30.0
#define KL_REFLECTOR_BACKOFF_RESET 120.0
#define KL_REFLECTOR_MIN_WATCH_TIMEOUT 300.0
/* A streaming list's initial events that stay silent this long mean a
 * server that ignores streaming lists. */
#define KL_REFLECTOR_INITIAL_SILENCE 90.0
/* A list page that receives nothing for this long fails (and is retried
 * after a backoff): lists have no overall timeout, a big one can take
 * minutes, but a silent one is dead. */
#define KL_REFLECTOR_LIST_IDLE 60.0

/* Called with the error that ended a list-and-watch round (client-go's
 * WatchErrorHandler), before the backoff wait: a failed list or a failed
 * watch request. Not called for errors in a watch stream, which client-go
 * only logs. It may call kl_reflector_stop, not kl_reflector_free. */
typedef void kl_reflector_error_fn(kl_reflector_t *r, const char *msg,
                                   void *ud);

/* Called before each list and watch request, so that credentials that
 * change (a rotated token file, an exec plugin's expiring token) are picked
 * up by every new request: writes one header line ("Authorization: Bearer
 * …") into line (cap bytes), or "" for none, and returns 0; or returns a
 * negative KL_E* code with a message in line (naming no secret), and the
 * round fails and is retried after a backoff; KL_EAGAIN means the
 * credential is on its way (an exec plugin runs): the reflector asks again
 * 50 ms later for the same step, with no error counted. The line is a
 * secret: the reflector sends it and clears it, never logs it. May block
 * briefly (a token file read); must not stop or free r. */
typedef int kl_reflector_auth_fn(kl_reflector_t *r, char *line, size_t cap,
                                 void *ud);
/* Called when a list or watch request was answered 401 Unauthorized: the
 * credential that auth gave it is to be forgotten, so the retry (after the
 * usual backoff) gets a fresh one. Must not stop or free r. */
typedef void kl_reflector_unauthorized_fn(kl_reflector_t *r, void *ud);

typedef struct kl_reflector_opts {
  const char *name; /* for logs; copied; NULL: the informer's name */
  /* The collection's URL without a query, e.g.
   * "https://host:6443/api/v1/namespaces/ns/configmaps"; copied. */
  const char *url;
  const char *label_selector, *field_selector; /* copied; NULL: none */
  /* The expected apiVersion and kind of watch events (client-go's
   * expectedGVK): an event carrying another is logged and skipped. NULL:
   * not checked. Copied. */
  const char *api_version, *kind;
  /* "Name: value" lines, NULL-terminated (Authorization, …); copied. An
   * "Accept: application/json" is added unless one is given. */
  const char *const *headers;
  /* The Accept value of watch requests when it differs from the lists'
   * (a metadata-only informer lists as=PartialObjectMetadataList and
   * watches as=PartialObjectMetadata); copied; headers must then hold the
   * lists' Accept. NULL: watches send the headers' Accept. */
  const char *watch_accept;
  const kl_http_tls_t *tls; /* borrowed; must outlive the reflector */
  /* The heap for every deadline and the clock read through it; NULL: the
   * loop's heap. Backoff waits, the initial-events timeout and watch
   * durations are all measured on this clock. */
  kl_timers_t *timers;
  /* A uniform number in [0, 1) (jitter, timeoutSeconds); NULL: a generator
   * seeded from the clock. */
  double (*rand)(void *ud);
  void *rand_ud;
  /* Each 0 takes the KL_REFLECTOR_* default above. */
  double backoff_initial, backoff_factor, backoff_jitter, backoff_max;
  double backoff_reset;     /* no backoff for this long resets the backoff */
  double min_watch_timeout; /* timeoutSeconds in [min, 2 min) */
  /* Seconds a streaming list's initial events may receive nothing (no byte
   * at all) before the server is deemed to ignore streaming lists; < 0:
   * never. An ordinary watch may stay silent until its timeoutSeconds. */
  double initial_timeout;
  /* client-go's WatchListPageSize: > 0 uses this page size for every list;
   * 0 chooses as client-go does (500, or one unpaginated list when listing
   * at a known resourceVersion from the watch cache). */
  int page_size;
  /* Streaming lists (watch-list, KEP-3157; CLIENTGO.md 2.6 and 6.11): each
   * round opens a watch with sendInitialEvents=true instead of listing,
   * collects the initial ADDED events, and replaces the informer's content
   * at the bookmark annotated k8s.io/initial-events-end, then goes on
   * watching on the same stream. A server that refuses it (400, 422 …), or
   * that ignores it (an event other than ADDED among the initial events, or
   * a stream that ends, times out or goes silent (initial_timeout) without
   * that bookmark) is remembered in servers: every reflector lists and
   * watches there from then on. Another failure (a 500, a broken
   * connection) lists for that round only. */
  bool watch_list;
  /* Borrowed; must outlive the reflector. NULL: the reflector keeps its
   * own (it learns alone). */
  kl_reflector_servers_t *servers;
  kl_reflector_error_fn *on_error;
  void *ud;
  /* Credentials asked for before each request (see above); NULL: only
   * the fixed headers. Both get auth_ud. */
  kl_reflector_auth_fn *auth;
  kl_reflector_unauthorized_fn *on_unauthorized;
  void *auth_ud;
} kl_reflector_opts_t;

/* Counters since kl_reflector_new, for metrics. */
typedef struct kl_reflector_stats {
  uint64_t list_requests;  /* list requests sent (each page counts) */
  uint64_t lists;          /* lists completed (Replace calls) */
  uint64_t watch_lists;    /* of which streaming lists */
  uint64_t relists;        /* lists completed after the first */
  uint64_t watches;        /* watch requests sent */
  uint64_t watch_restarts; /* watches resumed after their connection broke */
  uint64_t watch_pauses;   /* times a watch stream waited for the informer */
  uint64_t events;         /* watch events received (bookmarks included) */
  uint64_t errors;         /* failed rounds and watch-stream errors */
  uint64_t backoffs;       /* backoff waits */
  uint64_t unauthorized;   /* requests answered 401 */
} kl_reflector_stats_t;

/* A stopped reflector feeding inf (borrowed: it must outlive the
 * reflector) with requests on http (borrowed, likewise). Returns NULL with
 * a message in err (errlen bytes) when opts are unusable (no URL, a URL
 * with a query, a header line with CR or LF or without a colon). */
kl_reflector_t *kl_reflector_new(kl_loop_t *loop, kl_http_t *http,
                                 kl_informer_t *inf,
                                 const kl_reflector_opts_t *opts, char *err,
                                 size_t errlen);
/* Stops and frees; NULL is a no-op. Not from inside on_error. */
void kl_reflector_free(kl_reflector_t *r);

/* Starts listing and watching (from the loop, never inside this call).
 * Returns 0, or KL_EINVAL when it is running already. A stopped reflector
 * may start again: it keeps its last resourceVersion and relists. */
int kl_reflector_start(kl_reflector_t *r);
/* Cancels the request in flight and every timer: nothing reaches the
 * informer and no callback runs after this returns. A no-op when stopped. */
void kl_reflector_stop(kl_reflector_t *r);
bool kl_reflector_running(const kl_reflector_t *r);
/* True while a watch stream is open (its request was answered 200). */
bool kl_reflector_watching(const kl_reflector_t *r);

/* lastSyncResourceVersion: the list's, then the last event's or bookmark's
 * (as client-go moves it); "" before the first list. */
const char *kl_reflector_last_rv(const kl_reflector_t *r);
/* True once a list has completed since the last start. */
bool kl_reflector_listed(const kl_reflector_t *r);
void kl_reflector_get_stats(const kl_reflector_t *r, kl_reflector_stats_t *st);

#endif
