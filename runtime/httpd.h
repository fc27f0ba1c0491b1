/* httpd.h — a small HTTP/1.1 and HTTP/2 server on the runtime's loop.
 *
 * It serves the API simulator (many long-lived chunked watch streams plus
 * ordinary requests) and the /metrics, /healthz and /readyz endpoints, over
 * plain TCP (HTTP/1.1) or TLS (OpenSSL; ALPN offers "h2" first, then
 * "http/1.1", as kube-apiserver does; HTTP/2 by nghttp2). One thread, the
 * loop's: every callback comes from a loop callback, never from inside a
 * kl_httpd_* call.
 *
 * A request is handed to the handler once it is complete (head and body).
 * The handler answers it at once or later with kl_httpd_reply, or starts a
 * streaming response (kl_httpd_stream_begin / _write / _end). The request
 * pointer is the response handle; it stays valid until one of:
 *   - kl_httpd_reply or kl_httpd_stream_end returns (whatever it returns,
 *     except KL_EINVAL for misuse): the owner is done with it;
 *   - its on_close callback returns: the connection went away, the server
 *     closed the stream, or an abort completed, before the owner ended it.
 * So an owner that keeps a request after its handler returns sets on_close
 * (kl_httpd_req_set_callbacks) and forgets the pointer there. A request whose
 * owner set no on_close is freed silently when its connection goes.
 *
 * HTTP/1.1: responses on one connection go out in request order: the next
 * pipelined request is read only once the current response is complete.
 * HTTP/2: each stream is a request, answered independently of the others
 * on its connection; the stream is the unit that backpressure, caps,
 * aborts and closes apply to (a client's RST_STREAM ends its request as a
 * closed connection does), and "Connection: close" or the server's end
 * sends GOAWAY. */
#ifndef KL_HTTPD_H
#define KL_HTTPD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "loop.h"

typedef struct kl_httpd kl_httpd_t;
typedef struct kl_httpd_req kl_httpd_req_t;

/* Called once per complete request. The handler may answer before it
 * returns or keep req and answer later. */
typedef void kl_httpd_handler_fn(kl_httpd_req_t *req, void *ud);
/* The request ended before its owner ended it. reason: KL_EIO (the client
 * went away, an I/O error, or the client stopped reading for write_timeout),
 * KL_ELIMIT (a stream exceeded max_stream_buffer), KL_ESHUTDOWN (the server
 * closed it: kl_httpd_close_streams, kl_httpd_stream_abort completing,
 * kl_httpd_free). req is freed when this returns; its getters still work
 * during the call, responses return KL_ESHUTDOWN. */
typedef void kl_httpd_close_fn(kl_httpd_req_t *req, int reason, void *ud);
/* A stream's buffered output fell to stream_low_water or below after
 * writes: a producer that paused for backpressure resumes here. */
typedef void kl_httpd_drain_fn(kl_httpd_req_t *req, void *ud);

/* A body for an error the server answers by itself (400, 408, 413, 431,
 * 501...), instead of its plain-text default. */
typedef struct kl_httpd_error_page {
  int status;
  const char *content_type;
  const char *body;
} kl_httpd_error_page_t;

typedef struct kl_httpd_opts {
  /* An IPv4 or IPv6 literal ("127.0.0.1", "::1", "[::1]"); NULL or "":
   * every interface (IPv6 and IPv4 when the host has IPv6). */
  const char *host;
  int port; /* 0: an ephemeral port, see kl_httpd_port */
  kl_httpd_handler_fn *handler;
  void *ud;
  /* PEM files; both set: serve TLS (1.2 and later) instead of plain TCP. */
  const char *tls_cert_file;
  const char *tls_key_file;
  /* Limits; 0 takes the default in brackets. */
  size_t max_header_bytes;  /* request line + headers [64 KiB] → 431 */
  size_t max_body_bytes;    /* [3 MiB, kube-apiserver's] → 413 */
  size_t max_stream_buffer; /* unsent bytes of one stream [8 MiB] */
  size_t stream_low_water;  /* on_drain threshold [64 KiB] */
  size_t max_connections;   /* stop accepting beyond [unlimited] */
  double read_timeout;  /* a request's first byte to its last [30 s] → 408 */
  double idle_timeout;  /* keep-alive wait for the next request [90 s] */
  double write_timeout; /* unsent output and no progress [60 s] */
  int send_date;        /* add a Date header to every response */
  /* Send long bursts of plain HTTP/1.1 stream writes from a thread of the
   * server's (started on first use) while the loop goes on: for a process
   * that streams much (the simulator's watches) on a machine with a core
   * to spare. */
  int send_thread;
  /* TLS connections keep OpenSSL's read and write buffers (~34 KiB each)
   * between records instead of an allocation and a free of each for every
   * record: for a server of few busy connections (a webhook's, called by
   * the API servers), not one of many idle ones (watches). */
  int tls_keep_buffers;
  /* Error pages by status (copied); others get "<status> <reason>". */
  const kl_httpd_error_page_t *error_pages;
  size_t nerror_pages;
} kl_httpd_opts_t;

/* How kl_httpd_close_streams ends the streams. */
enum {
  KL_HTTPD_END = 0, /* send the terminating chunk; the connection lives on */
  KL_HTTPD_DROP = 1 /* close the connection (HTTP/2: reset the stream with
                       INTERNAL_ERROR), unsent bytes discarded */
};

typedef struct kl_httpd_stats {
  size_t connections;   /* open */
  size_t requests;      /* alive: being read, handled or streamed */
  size_t streams;       /* streaming responses in progress */
  uint64_t accepted;    /* connections, since the start */
  uint64_t responses;   /* responses started, since the start */
  uint64_t thread_sent; /* bytes the send thread sent, since the start */
} kl_httpd_stats_t;

/* Listens on opts->host:port and serves on loop. Returns NULL and a message
 * in err (may be NULL) when the address, the certificate or the key cannot be
 * used. opts is copied; its strings need not outlive the call. */
kl_httpd_t *kl_httpd_new(kl_loop_t *loop, const kl_httpd_opts_t *opts,
                         char *err, size_t errlen);
/* Closes the listener and every connection and frees the server. Requests
 * still owned by a handler get on_close(KL_ESHUTDOWN) before this returns.
 * Called from inside one of this server's callbacks, it closes everything at
 * once and frees the rest when that callback returns. NULL is a no-op. */
void kl_httpd_free(kl_httpd_t *h);

/* Serves fd, a connected non-blocking stream socket, as a connection the
 * listener accepted but without TLS (a socket handed over, the two ends of
 * a socketpair in the fuzz targets); peer names it in logs (NULL: "fd").
 * h2: the client speaks HTTP/2 from its first byte (prior knowledge, RFC
 * 9113 3.3), else HTTP/1.1. The server owns fd from this call on, and
 * closes it with the connection. Returns 0, or KL_EINVAL (fd < 0, a server
 * being freed; fd is then the caller's). */
int kl_httpd_serve_fd(kl_httpd_t *h, int fd, const char *peer, int h2);
/* The bound port (the ephemeral one when opts.port was 0). */
int kl_httpd_port(const kl_httpd_t *h);
/* The listening socket (non-blocking), or -1 once it is closed. */
int kl_httpd_listen_fd(const kl_httpd_t *h);
void kl_httpd_get_stats(const kl_httpd_t *h, kl_httpd_stats_t *st);
/* Loads a new certificate and key (PEM files) for the connections accepted
 * from now on; open connections keep theirs and are not dropped. Returns 0,
 * or KL_EINVAL with a message in err (a server without TLS, a file that
 * cannot be read, a key that does not match): the old ones stay. */
int kl_httpd_set_tls(kl_httpd_t *h, const char *cert_file, const char *key_file,
                     char *err, size_t errlen);
/* Ends every streaming response in progress (how: KL_HTTPD_END or
 * KL_HTTPD_DROP); each owner gets on_close(KL_ESHUTDOWN) from the loop.
 * Returns how many streams it ended. */
size_t kl_httpd_close_streams(kl_httpd_t *h, int how);

/* --- The request. Strings are NUL-terminated and live as long as req. --- */

const char *kl_httpd_req_method(const kl_httpd_req_t *req);
/* The path as sent (still percent-encoded), "/..." or "*". */
const char *kl_httpd_req_path(const kl_httpd_req_t *req, size_t *len);
/* The raw query after '?' (without it), "" when there is none. */
const char *kl_httpd_req_query(const kl_httpd_req_t *req, size_t *len);
/* The nth (0-based) value of query parameter key, percent-decoded ('+' is a
 * space), or NULL. Pairs with a malformed escape are skipped, as Go's
 * url.ParseQuery skips them. len may be NULL. */
const char *kl_httpd_req_param(const kl_httpd_req_t *req, const char *key,
                               size_t nth, size_t *len);
size_t kl_httpd_req_nparams(const kl_httpd_req_t *req);
/* The ith decoded pair in order; KL_ENOENT past the end. */
int kl_httpd_req_param_at(const kl_httpd_req_t *req, size_t i, const char **key,
                          const char **value);
/* The first value of header name (case-insensitive), trimmed, or NULL. */
const char *kl_httpd_req_header(const kl_httpd_req_t *req, const char *name);
size_t kl_httpd_req_nheaders(const kl_httpd_req_t *req);
/* The ith header as sent; KL_ENOENT past the end. */
int kl_httpd_req_header_at(const kl_httpd_req_t *req, size_t i,
                           const char **name, const char **value);
/* The body (decoded from chunked framing), NUL-terminated; "" when none. */
const char *kl_httpd_req_body(const kl_httpd_req_t *req, size_t *len);
/* The client's address, "127.0.0.1:50000" or "[::1]:50000". */
const char *kl_httpd_req_remote(const kl_httpd_req_t *req);
/* 10 for HTTP/1.0, 11 for HTTP/1.1, 20 for HTTP/2. */
int kl_httpd_req_version(const kl_httpd_req_t *req);
int kl_httpd_req_is_tls(const kl_httpd_req_t *req);

/* Decodes the n bytes of `in` (%XX escapes; '+' as a space when plus is set)
 * into out, which has room for n bytes and may be `in` itself; no NUL is
 * added. Returns 0 and the decoded length in *outlen, or KL_EPARSE for a
 * malformed escape. */
int kl_httpd_pct_decode(const char *in, size_t n, char *out, size_t *outlen,
                        int plus);

/* --- The response --- */

/* Sets the owner's callbacks (either may be NULL); any time before the
 * request ends. */
void kl_httpd_req_set_callbacks(kl_httpd_req_t *req,
                                kl_httpd_close_fn *on_close,
                                kl_httpd_drain_fn *on_drain, void *ud);
/* Adds a response header before the response starts. The server writes
 * Content-Length and Transfer-Encoding itself (setting them is KL_EINVAL);
 * "Connection: close" closes the connection after this response. Returns 0,
 * KL_EINVAL (bad name or value, or the response started), KL_ELIMIT (more
 * than max_header_bytes) or KL_ESHUTDOWN (the connection is gone). */
int kl_httpd_set_header(kl_httpd_req_t *req, const char *name,
                        const char *value);
/* Sends a complete response with Content-Length (no body for HEAD, 204, 304)
 * and ends the request: req is invalid when this returns 0 or KL_ESHUTDOWN
 * (the connection was gone; nothing sent, no on_close follows). body is
 * copied or written before return. KL_EINVAL (status not 200-999, or a
 * stream started) leaves req to the caller. */
int kl_httpd_reply(kl_httpd_req_t *req, int status, const void *body,
                   size_t len);
/* Starts a streaming response: chunked for HTTP/1.1, delimited by closing
 * the connection for HTTP/1.0, DATA frames ended by END_STREAM for HTTP/2.
 * Returns 0, KL_EINVAL (started already, or a status that has no body) or
 * KL_ESHUTDOWN (on_close follows or came). */
int kl_httpd_stream_begin(kl_httpd_req_t *req, int status);
/* Queues data as one chunk (nothing for len 0) and sends it before the loop
 * next blocks; never blocks, never calls back. Returns 0, KL_ESHUTDOWN (the
 * connection is gone), KL_ELIMIT (unsent bytes would pass
 * max_stream_buffer: the connection is closed — HTTP/2: the stream is
 * reset — with a log line and on_close(KL_ELIMIT) follows) or KL_EINVAL
 * (no stream started). */
int kl_httpd_stream_write(kl_httpd_req_t *req, const void *data, size_t len);
/* The same for the concatenation of n pieces, sent as one chunk. */
int kl_httpd_stream_writev(kl_httpd_req_t *req, const struct iovec *iov, int n);
/* Bytes queued on the request's connection and not yet taken by the socket
 * (or TLS); HTTP/2: on the request's stream and not yet taken by its
 * flow-control window: the producer's measure of backpressure. */
size_t kl_httpd_buffered(const kl_httpd_req_t *req);
/* Ends the stream with the terminating chunk (HTTP/1.1), by closing the
 * connection (HTTP/1.0) or with END_STREAM (HTTP/2) and ends the request,
 * as kl_httpd_reply does. */
int kl_httpd_stream_end(kl_httpd_req_t *req);
/* Fault injection: closes the connection without ending the response. What
 * was written before is sent; then exactly n more bytes of payload written
 * after this call (chunk-size lines are sent whole, so a chunk is cut
 * mid-data), then the connection closes and on_close(KL_ESHUTDOWN) follows.
 * Bytes past the n-th are dropped. Before a stream is started only n = 0 is
 * accepted (close without a response). HTTP/2 resets the stream instead
 * (RST_STREAM INTERNAL_ERROR, as a Go client sees a cut watch); the
 * connection and its other streams go on. Returns 0, KL_EINVAL or
 * KL_ESHUTDOWN. */
int kl_httpd_stream_abort(kl_httpd_req_t *req, size_t n);

#endif
