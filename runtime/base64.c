/* base64.c — standard base64 decoding and encoding (see base64.h).
 *
 * The decoder takes what Go's base64.StdEncoding takes in a kubeconfig (the
 * standard alphabet, '=' padding, non-zero trailing bits) and is lenient in
 * two ways that cost nothing: any ASCII whitespace is skipped and the padding
 * may be left out. A '=' ends the data: after it only '=' (up to the quantum)
 * and whitespace may follow. Errors give an offset, never the bytes. */
#include "base64.h"

#include <stdint.h>
#include <stdlib.h>

#include "error.h"
#include "mem.h"

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* 0-63 for alphabet bytes, 64 for whitespace, 65 for '=', 255 otherwise. */
static uint8_t class_of(uint8_t c) {
  if (c >= 'A' && c <= 'Z') return (uint8_t)(c - 'A');
  if (c >= 'a' && c <= 'z') return (uint8_t)(c - 'a' + 26);
  if (c >= '0' && c <= '9') return (uint8_t)(c - '0' + 52);
  if (c == '+') return 62;
  if (c == '/') return 63;
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v')
    return 64;
  if (c == '=') return 65;
  return 255;
}

int kl_base64_decode(const char *in, size_t n, char **out, size_t *outlen,
                     size_t *bad) {
  const uint8_t *s = (const uint8_t *)in;
  uint8_t *buf = kl_xmalloc(n / 4 * 3 + 4);
  size_t len = 0, quad = 0, pads = 0;
  uint32_t acc = 0;
  size_t i;

  for (i = 0; i < n; i++) {
    uint8_t c = class_of(s[i]);
    if (c == 64) continue;
    if (c == 255) goto fail;
    if (c == 65) {
      /* Padding: allowed only where the quantum has 2 or 3 data bytes. */
      if (pads == 0 && quad < 2) goto fail;
      if (quad + pads >= 4) goto fail;
      pads++;
      continue;
    }
    if (pads) goto fail; /* data after padding */
    acc = acc << 6 | c;
    if (++quad == 4) {
      buf[len++] = (uint8_t)(acc >> 16);
      buf[len++] = (uint8_t)(acc >> 8);
      buf[len++] = (uint8_t)acc;
      quad = 0;
      acc = 0;
    }
  }
  if (pads && quad + pads != 4) {
    i = n; /* "ab=" : the padding stops short of the quantum */
    goto fail;
  }
  if (quad == 1) {
    i = n; /* one lone character cannot encode a byte */
    goto fail;
  }
  if (quad == 2) {
    buf[len++] = (uint8_t)(acc >> 4);
  } else if (quad == 3) {
    buf[len++] = (uint8_t)(acc >> 10);
    buf[len++] = (uint8_t)(acc >> 2);
  }
  buf[len] = '\0';
  *out = (char *)buf;
  *outlen = len;
  return KL_OK;

fail:
  free(buf);
  *out = NULL;
  *outlen = 0;
  if (bad) *bad = i;
  return KL_EPARSE;
}

size_t kl_base64_encode(const void *in, size_t n, char *out) {
  const uint8_t *s = in;
  size_t o = 0, i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
    out[o++] = alphabet[v >> 18];
    out[o++] = alphabet[v >> 12 & 63];
    out[o++] = alphabet[v >> 6 & 63];
    out[o++] = alphabet[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)s[i] << 16;
    out[o++] = alphabet[v >> 18];
    out[o++] = alphabet[v >> 12 & 63];
    out[o++] = '=';
    out[o++] = '=';
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
    out[o++] = alphabet[v >> 18];
    out[o++] = alphabet[v >> 12 & 63];
    out[o++] = alphabet[v >> 6 & 63];
    out[o++] = '=';
  }
  out[o] = '\0';
  return o;
}
