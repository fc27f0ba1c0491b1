/* error.h — the runtime's error codes.
 *
 * C functions return 0 or a negative KL_E* code (STYLE rule 7); a human
 * message, when there is more to say, goes into a caller's buffer. */
#ifndef KL_ERROR_H
#define KL_ERROR_H

enum {
  KL_OK = 0,
  KL_EINVAL = -1,    /* an argument is not acceptable */
  KL_ENOENT = -2,    /* no such item */
  KL_EEXIST = -3,    /* the item exists already */
  KL_EAGAIN = -4,    /* nothing available now; try when notified */
  KL_ESHUTDOWN = -5, /* the object is shutting down */
  KL_ELIMIT = -6,    /* a configured limit was reached */
  KL_EPARSE = -7,    /* malformed input */
  KL_EIO = -8,       /* an operating-system or network failure */
  KL_ETIMEDOUT = -9, /* a deadline passed */
};

/* A short, static description of a KL_E* code. */
const char *kl_strerror(int code);

#endif
