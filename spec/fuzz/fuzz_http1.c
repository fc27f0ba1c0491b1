/* fuzz_http1.c — the HTTP/1.1 codec of the server (httpd.c) from the
 * bytes a client sends: request lines and headers, pipelined requests,
 * Content-Length and chunked bodies with their trailers, Expect:
 * 100-continue, the limits (431, 413, 414), keep-alive and its end.
 *
 * The input is what one client connection sends before it ends its side
 * (fuzz_httpd.h). Besides ASan and UBSan, the answer must be a sequence of
 * well-formed responses: a status line "HTTP/1.1 NNN reason", header lines,
 * then a body framed by Content-Length or chunked (none after 1xx, 204 and
 * 304), or by the close (Connection: close, a stream to HTTP/1.0), with
 * nothing after the last; only a chunked stream the handler cut
 * short (/streamx) may end early, and only an answer to a HEAD may omit the
 * body its Content-Length gives. Every request the handler saw has its
 * response. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz_httpd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The value of header name in head[0, n), or NULL. */
static const char *field(const char *head, size_t n, const char *name) {
  size_t nl = strlen(name);
  const char *p = memchr(head, '\n', n), *end = head + n;
  while (p && p + 1 < end) {
    p++;
    const char *eol = memchr(p, '\r', (size_t)(end - p));
    if (!eol) return NULL;
    if ((size_t)(eol - p) > nl + 1 && strncasecmp(p, name, nl) == 0 &&
        p[nl] == ':')
      return p + nl + 1;
    p = memchr(eol, '\n', (size_t)(end - eol));
  }
  return NULL;
}

/* Whether a Connection field's value (field's result) is "close". */
static int closes(const char *v) {
  if (!v) return 0;
  while (*v == ' ')
    v++;
  return strncasecmp(v, "close\r", 6) == 0;
}

/* Skips a chunked body at o->p[*at]: NULL when whole, "" when cut short,
 * else what is wrong. */
static const char *chunked(const fuzz_out_t *o, size_t *at) {
  for (;;) {
    const char *line = o->p + *at;
    const char *eol = strstr(line, "\r\n");
    if (!eol) return "";
    char *end;
    unsigned long n = strtoul(line, &end, 16);
    if (end == line || end != eol) return "a bad chunk size line";
    *at += (size_t)(eol - line) + 2;
    if (n == 0) {
      if (o->len - *at < 2) return "";
      if (memcmp(o->p + *at, "\r\n", 2) != 0) return "no end of chunks";
      *at += 2;
      return NULL;
    }
    if (o->len - *at < n + 2) return "";
    if (memcmp(o->p + *at + n, "\r\n", 2) != 0)
      return "a chunk without its CRLF";
    *at += n + 2;
  }
}

/* NULL when o holds well-formed responses, else what is wrong at *at. */
static const char *check(const fuzz_out_t *o, int cut_ok, size_t *at) {
  size_t finals = 0;
  while (*at < o->len) {
    const char *p = o->p + *at;
    if (o->len - *at < 12 || memcmp(p, "HTTP/1.1 ", 9) != 0)
      return "not a status line";
    int status = atoi(p + 9);
    if (status < 100 || status > 599) return "a bad status";
    const char *end = strstr(p, "\r\n\r\n");
    if (!end) return "a head without its end";
    size_t hn = (size_t)(end - p) + 4;
    *at += hn;
    if (status < 200) continue;
    finals++;
    if (status == 204 || status == 304) continue;
    const char *cl = field(p, hn, "content-length");
    if (cl) {
      size_t n = strtoul(cl, NULL, 10);
      if (o->len - *at < n) return "a body shorter than its Content-Length";
      *at += n;
    } else if (field(p, hn, "transfer-encoding")) {
      const char *why = chunked(o, at);
      if (why && (*why || !cut_ok)) return *why ? why : "a cut stream";
      if (why) return NULL;
    } else if (closes(field(p, hn, "connection"))) {
      *at = o->len; /* close-delimited (a stream to HTTP/1.0): the rest */
    } else {
      return "a response without framing";
    }
  }
  return finals < o->handled ? "fewer responses than requests handled" : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const fuzz_out_t *o = fuzz_httpd_feed(data, size, 0);
  size_t at = 0;
  const char *why = check(o, memmem(data, size, "/streamx", 8) != NULL, &at);
  /* an answer to HEAD has no body: its Content-Length says nothing */
  if (why && !memmem(data, size, "HEAD", 4)) {
    fprintf(stderr, "fuzz: %s at byte %zu of the answer (%zu handled):\n%.*s\n",
            why, at, o->handled, (int)(o->len < 2048 ? o->len : 2048), o->p);
    abort();
  }
  return 0;
}
