/* log.h — the runtime's log lines.
 *
 * One line per record on stderr: time, level, message, then key=value
 * fields. Secrets never reach a log line: callers pass what may be printed. */
#ifndef KL_LOG_H
#define KL_LOG_H

#include <stdarg.h>

typedef enum kl_log_level {
  KL_LOG_DEBUG,
  KL_LOG_INFO,
  KL_LOG_WARN,
  KL_LOG_ERROR,
} kl_log_level_t;

/* Lines below `level` are dropped. The default is KL_LOG_INFO. */
void kl_log_set_level(kl_log_level_t level);
kl_log_level_t kl_log_get_level(void);
/* Parses "debug", "info", "warn" or "error"; returns -1 for anything else. */
int kl_log_parse_level(const char *s);
const char *kl_log_level_name(kl_log_level_t level);

/* Writes one line: the message from fmt, then the text of `fields` (already
 * formatted as ` key=value …`, may be NULL). A newline in the message is
 * written as "\n" so a record stays on one line. */
void kl_log_fields(kl_log_level_t level, const char *fields, const char *fmt,
                   ...) __attribute__((format(printf, 3, 4)));
#define kl_log(level, ...) kl_log_fields(level, NULL, __VA_ARGS__)

#endif
