/* log.c — formatted log lines on stderr (see log.h).
 *
 * The level is process state set once from the command line: a logger is the
 * one piece of configuration every module may read without a runtime handle. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"

static kl_log_level_t min_level = KL_LOG_INFO;

void kl_log_set_level(kl_log_level_t level) { min_level = level; }
kl_log_level_t kl_log_get_level(void) { return min_level; }

static const char *const names[] = {"debug", "info", "warn", "error"};

int kl_log_parse_level(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

const char *kl_log_level_name(kl_log_level_t level) {
  return (unsigned)level < 4 ? names[level] : "?";
}

void kl_log_fields(kl_log_level_t level, const char *fields, const char *fmt,
                   ...) {
  static const char *const tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  char msg[4096], line[8192], stamp[32];
  if (level < min_level) return;

  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);

  double now = kl_clock_wall();
  time_t secs = (time_t)now;
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);

  size_t n = (size_t)snprintf(line, sizeof line, "%s.%03dZ %-5s ", stamp,
                              (int)((now - (double)secs) * 1000), tags[level]);
  for (const char *p = msg; *p && n < sizeof line - 3; p++) {
    if (*p == '\n') {
      line[n++] = '\\';
      line[n++] = 'n';
    } else {
      line[n++] = *p;
    }
  }
  line[n] = '\0';
  fprintf(stderr, "%s%s\n", line, fields ? fields : "");
}
