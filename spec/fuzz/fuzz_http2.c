/* fuzz_http2.c — the HTTP/2 path of the server (httpd.c): frames through
 * nghttp2 into the same request API as HTTP/1.1 (the head rebuilt as an
 * HTTP/1.1 one, :authority as Host), DATA into bodies against the per
 * stream and per connection bounds, early answers (400, 413, 431) and the
 * lingering after them, resets, GOAWAY, and the responses' frames back.
 *
 * The input is what one client connection sends after the client preface
 * (which the harness sends first, so that every input reaches the frame
 * layer), before it ends its side (fuzz_httpd.h). Besides ASan and UBSan,
 * the answer must be frames: the server's SETTINGS first, then whole
 * frames of known types within the default 16 KiB frame size (the last
 * may be cut by the close). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_httpd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t *in;
  static size_t cap;
  size_t pn = sizeof preface - 1;
  if (pn + size > cap) {
    cap = pn + size;
    in = realloc(in, cap);
    if (!in) abort();
  }
  memcpy(in, preface, pn);
  if (size) memcpy(in + pn, data, size);
  const fuzz_out_t *o = fuzz_httpd_feed(in, pn + size, 1);
  const unsigned char *p = (const unsigned char *)o->p;
  const char *why = NULL;
  size_t off = 0;
  if (o->len >= 9 && p[3] != 4) why = "the first frame is not SETTINGS";
  while (!why && off + 9 <= o->len) {
    size_t flen = (size_t)p[off] << 16 | (size_t)p[off + 1] << 8 | p[off + 2];
    if (flen > 16384)
      why = "a frame over 16 KiB";
    else if (p[off + 3] > 9)
      why = "a frame of an unknown type";
    off += 9 + flen;
  }
  if (why) {
    fprintf(stderr, "fuzz: %s at byte %zu of the answer (%zu bytes)\n", why,
            off, o->len);
    abort();
  }
  return 0;
}
