/* log.c — formatted log lines on stderr (see log.h).
 *
 * The level is process state set once from the command line: a logger is the
 * one piece of configuration every module may read without a runtime handle. */
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

static kl_log_level_t min_level = KL_LOG_INFO;
static kl_log_format_t format = KL_LOG_TEXT;

void kl_log_set_format(kl_log_format_t f) { format = f; }

int kl_log_parse_format(const char *s) {
  if (strcmp(s, "text") == 0) return KL_LOG_TEXT;
  if (strcmp(s, "json") == 0) return KL_LOG_JSON;
  return -1;
}

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

/* A growing line buffer: records are short, but a traceback is not. */
typedef struct line {
  char *p;
  size_t n, cap;
  char stack[8192];
} line_t;

static void put(line_t *l, const char *s, size_t n) {
  if (l->n + n + 2 > l->cap) {
    size_t cap = (l->n + n + 2) * 2;
    char *p = malloc(cap);
    if (!p) return; /* out of memory: the record is cut short */
    memcpy(p, l->p, l->n);
    if (l->p != l->stack) free(l->p);
    l->p = p;
    l->cap = cap;
  }
  memcpy(l->p + l->n, s, n);
  l->n += n;
}

static void puts_(line_t *l, const char *s) { put(l, s, strlen(s)); }

/* A JSON string's contents. */
static void put_json(line_t *l, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      put(l, esc, 2);
    } else if (c == '\n') {
      put(l, "\\n", 2);
    } else if (c == '\t') {
      put(l, "\\t", 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      put(l, esc, 6);
    } else {
      put(l, (const char *)&c, 1);
    }
  }
}

/* n bytes of the message as text: a newline becomes "\n". */
static void put_text(line_t *l, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\n')
      put(l, "\\n", 2);
    else
      put(l, s + i, 1);
  }
}

/* Where a Lua traceback begins in a message or a field's value. */
#define TRACE_MARK "\nstack traceback:"

/* The fields as text, but for a traceback in a quoted value
 * (` error="x.lua:3: boom\nstack traceback:\n\t…"`): the value ends
 * before it and the traceback, unescaped, goes to trace. */
static void put_text_fields(line_t *l, const char *f, line_t *trace) {
  const char *mark = NULL;
  for (const char *p = f; *p && !mark; p++) {
    if (*p != '\\' || !p[1]) continue;
    if (p[1] == 'n' &&
        strncmp(p + 2, &TRACE_MARK[1], strlen(TRACE_MARK) - 1) == 0)
      mark = p;
    p++; /* an escape is two characters */
  }
  if (!mark) {
    puts_(l, f);
    return;
  }
  put(l, f, (size_t)(mark - f));
  put(l, "\"", 1);
  const char *p = mark + 2;
  for (; *p && *p != '"'; p++) {
    if (*p == '\\' && p[1]) {
      p++;
      put(trace, *p == 'n' ? "\n" : p, 1);
    } else {
      put(trace, p, 1);
    }
  }
  puts_(l, *p ? p + 1 : p);
}

/* A traceback as lines under the record, each indented, so that none can
 * pass for a record of its own; a frame's tab becomes four spaces. */
static void put_trace(line_t *l, const char *s, size_t n) {
  int bol = 1; /* at the beginning of a line */
  for (size_t i = 0; i < n; i++) {
    if (bol) {
      put(l, "\n    ", 5);
      if (s[i] == '\t') {
        put(l, "    ", 4);
        bol = 0;
        continue;
      }
    }
    bol = s[i] == '\n';
    if (!bol) put(l, s + i, 1);
  }
}

/* Turns " k=v k2=\"a b\"" into ,"k":"v","k2":"a b". */
static void put_json_fields(line_t *l, const char *f) {
  int open = 0; /* a value is being written */
  while (*f) {
    while (*f == ' ')
      f++;
    if (!*f) break;
    const char *eq = strchr(f, '=');
    const char *sp = strchr(f, ' ');
    if (!eq || (sp && sp < eq)) { /* no key: part of the last value */
      size_t n = sp ? (size_t)(sp - f) : strlen(f);
      if (open) {
        put(l, " ", 1);
        put_json(l, f, n);
      }
      f += n;
      continue;
    }
    if (open) put(l, "\"", 1);
    put(l, ",\"", 2);
    put_json(l, f, (size_t)(eq - f));
    put(l, "\":\"", 3);
    f = eq + 1;
    if (*f == '"') { /* quoted: \" and \\ escapes */
      f++;
      while (*f && *f != '"') {
        if (*f == '\\' && f[1]) {
          f++;
          if (*f == 'n')
            put(l, "\\n", 2);
          else
            put_json(l, f, 1);
        } else {
          put_json(l, f, 1);
        }
        f++;
      }
      if (*f == '"') f++;
    } else {
      size_t n = strcspn(f, " ");
      put_json(l, f, n);
      f += n;
    }
    open = 1;
  }
  if (open) put(l, "\"", 1);
}

void kl_log_fields(kl_log_level_t level, const char *fields, const char *fmt,
                   ...) {
  static const char *const tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  char msg[4096], stamp[48];
  if (level < min_level) return;

  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);

  double now = kl_clock_wall();
  time_t secs = (time_t)now;
  struct tm tm;
  gmtime_r(&secs, &tm);
  size_t k = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(stamp + k, sizeof stamp - k, ".%03dZ",
           (int)((now - (double)secs) * 1000));

  line_t l = {0};
  l.p = l.stack;
  l.cap = sizeof l.stack;
  if (format == KL_LOG_JSON) {
    puts_(&l, "{\"ts\":\"");
    puts_(&l, stamp);
    puts_(&l, "\",\"level\":\"");
    puts_(&l, names[level]);
    puts_(&l, "\",\"msg\":\"");
    put_json(&l, msg, strlen(msg));
    put(&l, "\"", 1);
    if (fields) put_json_fields(&l, fields);
    put(&l, "}", 1);
  } else {
    puts_(&l, stamp);
    put(&l, " ", 1);
    char tag[8];
    snprintf(tag, sizeof tag, "%-5s ", tags[level]);
    puts_(&l, tag);
    const char *mtrace = strstr(msg, TRACE_MARK);
    put_text(&l, msg, mtrace ? (size_t)(mtrace - msg) : strlen(msg));
    line_t ftrace = {0};
    ftrace.p = ftrace.stack;
    ftrace.cap = sizeof ftrace.stack;
    if (fields) put_text_fields(&l, fields, &ftrace);
    if (mtrace) put_trace(&l, mtrace + 1, strlen(mtrace + 1));
    put_trace(&l, ftrace.p, ftrace.n);
    if (ftrace.p != ftrace.stack) free(ftrace.p);
  }
  put(&l, "\n", 1);
  fwrite(l.p, 1, l.n, stderr);
  if (l.p != l.stack) free(l.p);
}
