/* mem.h — allocation that cannot fail.
 *
 * As in Redis, running out of memory is not a condition the runtime recovers
 * from: these wrappers log one line and abort. Everything else is handled. */
#ifndef KL_MEM_H
#define KL_MEM_H

#include <stddef.h>

void *kl_xmalloc(size_t n);
void *kl_xcalloc(size_t count, size_t n);
void *kl_xrealloc(void *p, size_t n);
char *kl_xstrndup(const char *s, size_t n);
char *kl_xstrdup(const char *s);

#endif
