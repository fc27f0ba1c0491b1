/* http.h — HTTP requests on the loop: libcurl's multi-socket interface
 * driven by libev, no threads and no polling.
 *
 * A kl_http_t owns one CURLM; requests share its connections (keep-alive,
 * and HTTP/2 multiplexing over TLS when the server offers it, so many
 * watches ride one connection as with client-go). A request streams its body
 * to on_data as bytes arrive — watches never end by themselves — and ends
 * with exactly one on_done, unless it was cancelled first. */
#ifndef KL_HTTP_H
#define KL_HTTP_H

#include <stddef.h>

#include "loop.h"

typedef struct kl_http kl_http_t;
typedef struct kl_http_req kl_http_req_t;

/* Called once when the final response's headers are complete (status
 * known; not for 1xx interim blocks, not again after trailers). Return 0 to
 * go on, non-zero to abort the request (on_done follows with KL_EIO and
 * "aborted"); kl_http_cancel is the silent way to stop.
 * Every callback runs from the loop. Inside any of them the caller may start
 * requests, cancel any request (this one included) and free the client. */
typedef int kl_http_head_fn(kl_http_req_t *req, int status, void *ud);
/* Called with each piece of the response body as it arrives. Return 0 to go
 * on, KL_HTTP_PAUSE to take nothing for now (the same piece comes again
 * after kl_http_resume), anything else to abort (on_done follows with
 * KL_EIO and "aborted"). */
typedef int kl_http_data_fn(kl_http_req_t *req, const char *p, size_t n,
                            void *ud);
#define KL_HTTP_PAUSE 0x7fff
/* Called once at the end: err is 0 when the exchange completed (whatever the
 * HTTP status; msg is ""), KL_ETIMEDOUT when timeout or connect_timeout
 * passed, or KL_EIO, with a message in msg (curl's reason, never a header
 * value). The request is freed right after this returns. */
typedef void kl_http_done_fn(kl_http_req_t *req, int err, const char *msg,
                             void *ud);

/* Copied by kl_http_start. Without a CA (or without this struct) the
 * system's CA bundle verifies the server; verification of the certificate
 * and of the host name is always on unless insecure is set. Connections
 * are reused only by requests with the same CA and verification settings. */
typedef struct kl_http_tls {
  const char *ca_file; /* CA bundle path, or */
  const char *ca_pem;  /* CA certificates as PEM text */
  size_t ca_pem_len;
  const char *cert_file; /* client certificate path, or PEM text: */
  const char *cert_pem;
  size_t cert_pem_len;
  const char *key_file; /* client key path, or PEM text: */
  const char *key_pem;
  size_t key_pem_len;
  int insecure; /* skip verification: only when configured so */
  /* kubeconfig's tls-server-name: the name sent in SNI and checked against
   * the server's certificate, while the connection still goes to the URL's
   * host (which the Host header keeps); NULL: the URL's host. */
  const char *server_name;
} kl_http_tls_t;

typedef struct kl_http_opts {
  const char *method; /* "GET" when NULL; a token, sent as given */
  const char *url;    /* http:// or https:// */
  /* "Name: value" lines, NULL-terminated; copied. A line with CR or LF or
   * without a colon makes kl_http_start fail. "Name:" removes a header
   * curl would add; a User-Agent here overrides the client's. */
  const char *const *headers;
  /* Copied. Sent for any method when set, and always (maybe empty) for
   * POST, PUT and PATCH. No Content-Type is added: give one in headers. */
  const void *body;
  size_t body_len;
  double timeout;         /* whole exchange, seconds; 0 = none (watches) */
  double connect_timeout; /* seconds; 0 = 10 */
  /* Fails the request (KL_ETIMEDOUT) when it receives under one byte a
   * second, on average, for this many seconds (rounded up; checked about
   * once a second); 0 = never. Not for watches: a quiet watch may be
   * silent until its end, and its connection's death is found below
   * HTTP (keepalive). */
  double idle_timeout;
  /* Ignored: every connection finds a dead peer the same way (TCP
   * keepalive after 30 s without traffic, dead when nothing answers for
   * 15 s more; see http.c), because connections are shared and a watch
   * often rides one that another request opened. */
  int keepalive;
  /* Bytes curl reads from the connection at a time for this request; 0 is
   * curl's 16 KiB. A stream of many small events (a watch, a list) takes
   * far fewer reads with more (on_data still gets at most 16 KiB at once). */
  size_t read_size;
  const kl_http_tls_t *tls;
  kl_http_head_fn *on_head;
  kl_http_data_fn *on_data;
  kl_http_done_fn *on_done;
  void *ud;
} kl_http_opts_t;

/* A client on `loop` with a User-Agent header value (copied). NULL when curl
 * cannot be initialised. Clients are independent; each holds a reference
 * on libcurl's global state. */
kl_http_t *kl_http_new(kl_loop_t *loop, const char *user_agent);
/* Cancels every request still in flight (no callbacks) and frees; closes
 * the pooled connections. From inside one of this client's callbacks, it
 * silences everything at once and frees when that callback returns. NULL
 * is a no-op. */
void kl_http_free(kl_http_t *h);

/* Starts a request. Returns it, or NULL with a message in err (errlen bytes)
 * when the options are unusable. Callbacks come from the loop, never from
 * inside this call. Over https, a request waits for a connection being set
 * up to the same host to tell (by ALPN) whether it multiplexes. */
kl_http_req_t *kl_http_start(kl_http_t *h, const kl_http_opts_t *opts,
                             char *err, size_t errlen);
/* Ends a request at once: no callback will follow, and req must not be used
 * again. Safe from inside any callback, the request's own included (then it
 * is freed when curl returns); a no-op inside its own on_done, and for
 * NULL. */
void kl_http_cancel(kl_http_req_t *req);

/* Takes the body again after on_data returned KL_HTTP_PAUSE: the piece it
 * refused may arrive inside this call. A request that is not paused is left
 * alone. Call it from the loop, not from this request's callbacks. */
void kl_http_resume(kl_http_req_t *req);

/* The value of a response header (case-insensitive name; the first when
 * repeated), NUL-terminated, without surrounding blanks, from the last
 * header block received (trailers are added to it); NULL when absent. Valid
 * until the request is freed: use it in the callbacks. */
const char *kl_http_header(const kl_http_req_t *req, const char *name);
int kl_http_status(const kl_http_req_t *req);
/* "HTTP/1.1", "HTTP/2" … of the response, "" before it is known. */
const char *kl_http_version(const kl_http_req_t *req);

/* Requests in flight (started, not yet done or cancelled). */
size_t kl_http_active(const kl_http_t *h);

#endif
