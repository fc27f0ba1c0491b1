/* base64.h — standard base64 (RFC 4648 section 4), for the *-data fields of
 * kubeconfig files and the certificate-authority-data an exec credential
 * plugin is given. No Lua, no libev. */
#ifndef KL_BASE64_H
#define KL_BASE64_H

#include <stddef.h>

/* Decodes the n bytes at in: the standard alphabet (A-Z a-z 0-9 + /), with or
 * without '=' padding; ASCII whitespace anywhere is skipped, as in the folded
 * values of YAML files. On success returns KL_OK and sets *out to a new
 * buffer (the caller frees it) holding *outlen decoded bytes plus a NUL that
 * *outlen does not count. On malformed input returns KL_EPARSE, sets *out to
 * NULL and *bad to the offset in `in` of the offending byte (n when the input
 * ends early); the input is never echoed, since it is usually a secret. */
int kl_base64_decode(const char *in, size_t n, char **out, size_t *outlen,
                     size_t *bad);

/* The length of the padded encoding of n bytes (without a NUL). */
static inline size_t kl_base64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }

/* Writes the padded encoding of the n bytes at in into out, which has room
 * for kl_base64_encoded_len(n) + 1 bytes, and NUL-terminates it. Returns the
 * length written (without the NUL). */
size_t kl_base64_encode(const void *in, size_t n, char *out);

#endif
