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

typedef enum kl_log_format {
  KL_LOG_TEXT, /* 2026-11-30T01:02:03.456Z INFO  message key=value … */
  KL_LOG_JSON, /* {"ts":"…","level":"info","msg":"…","key":"value",…} */
} kl_log_format_t;

/* How records are written; text by default. */
void kl_log_set_format(kl_log_format_t format);
/* Parses "text" or "json"; returns -1 for anything else. */
int kl_log_parse_format(const char *s);

/* Lines below `level` are dropped. The default is KL_LOG_INFO. */
void kl_log_set_level(kl_log_level_t level);
kl_log_level_t kl_log_get_level(void);
/* Parses "debug", "info", "warn" or "error"; returns -1 for anything else. */
int kl_log_parse_level(const char *s);
const char *kl_log_level_name(kl_log_level_t level);

/* Writes one line: the message from fmt, then the text of `fields` (already
 * formatted as ` key=value …`, may be NULL; a value with spaces, quotes or
 * `=` is quoted as "…" with \" and \\ escapes). A newline in the message
 * is written as "\n" so a record stays on one line, but for a Lua
 * traceback ("\nstack traceback:" and what follows, in the message or in
 * a quoted value), which text writes under the record as lines indented by
 * four spaces. In JSON, each field becomes a string member (a traceback
 * stays in its member); a token without `=` belongs to the value before
 * it. */
void kl_log_fields(kl_log_level_t level, const char *fields, const char *fmt,
                   ...) __attribute__((format(printf, 3, 4)));
#define kl_log(level, ...) kl_log_fields(level, NULL, __VA_ARGS__)

#endif
