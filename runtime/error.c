/* error.c — descriptions of the KL_E* codes (see error.h). */
#include "error.h"

const char *kl_strerror(int code) {
  switch (code) {
  case KL_OK: return "success";
  case KL_EINVAL: return "invalid argument";
  case KL_ENOENT: return "not found";
  case KL_EEXIST: return "already exists";
  case KL_EAGAIN: return "not available now";
  case KL_ESHUTDOWN: return "shutting down";
  case KL_ELIMIT: return "limit reached";
  case KL_EPARSE: return "malformed input";
  case KL_EIO: return "input/output error";
  case KL_ETIMEDOUT: return "timed out";
  default: return "unknown error";
  }
}
