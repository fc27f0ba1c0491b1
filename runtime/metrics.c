/* metrics.c — the metrics registry and the Prometheus text format (see
 * metrics.h).
 *
 * The registry owns its families (an array in registration order and a
 * dict by name); a family owns its series (an array in creation order and a
 * dict by the encoded label values: each value as a 4-byte length and its
 * bytes, so no value can collide with another). A series holds its label
 * values, a value (counters, gauges) or the per-bucket counts, sum and
 * count (histograms; cumulated only when rendered). Nothing is freed before
 * the registry: series pointers stay valid, which is what lets callers
 * cache them. Collectors are a small array of (fn, ud). */
#include "metrics.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "dict.h"
#include "error.h"
#include "mem.h"

struct kl_series {
  kl_metric_t *family;
  double value;      /* counters, gauges */
  double sum;        /* histograms */
  uint64_t count;    /* histograms */
  uint64_t *buckets; /* histograms: per bucket (nbuckets + 1), not cumulated */
  char **values;     /* nlabels label values */
  size_t klen;
  char key[]; /* the encoded values, the dict's key */
};

struct kl_metric {
  kl_metric_type_t type;
  char *name, *help;
  char **labels;
  size_t nlabels;
  double *bounds; /* histograms: finite upper bounds */
  size_t nbounds;
  kl_dict_t *byvalues;
  kl_series_t **series;
  size_t nseries, cap;
};

typedef struct collector {
  kl_metrics_collect_fn *fn;
  void *ud;
} collector_t;

struct kl_metrics {
  kl_dict_t *byname;
  kl_metric_t **families;
  size_t nfamilies, cap;
  collector_t *collectors;
  size_t ncollectors;
  int process; /* kl_metrics_add_process was called */
};

static const double def_buckets[] = {.005, .01, .025, .05, .1, .25,
                                     .5,   1,   2.5,  5,   10};

static const char *family_key(const void *v, size_t *len) {
  const kl_metric_t *f = v;
  *len = strlen(f->name);
  return f->name;
}

static const char *series_key(const void *v, size_t *len) {
  const kl_series_t *s = v;
  *len = s->klen;
  return s->key;
}

kl_metrics_t *kl_metrics_new(void) {
  kl_metrics_t *m = kl_xcalloc(1, sizeof *m);
  m->byname = kl_dict_new(family_key);
  return m;
}

static void family_free(kl_metric_t *f) {
  for (size_t i = 0; i < f->nseries; i++) {
    kl_series_t *s = f->series[i];
    for (size_t j = 0; j < f->nlabels; j++)
      free(s->values[j]);
    free(s->values);
    free(s->buckets);
    free(s);
  }
  for (size_t j = 0; j < f->nlabels; j++)
    free(f->labels[j]);
  kl_dict_free(f->byvalues);
  free(f->series);
  free(f->labels);
  free(f->bounds);
  free(f->name);
  free(f->help);
  free(f);
}

void kl_metrics_free(kl_metrics_t *m) {
  if (!m) return;
  for (size_t i = 0; i < m->nfamilies; i++)
    family_free(m->families[i]);
  free(m->families);
  free(m->collectors);
  kl_dict_free(m->byname);
  free(m);
}

/* ---- registration ---- */

static int valid_name(const char *s, int colon) {
  if (!s || !*s) return 0;
  for (const char *p = s; *p; p++) {
    int c = (unsigned char)*p;
    if (!(isalpha(c) || c == '_' || (colon && c == ':') ||
          (p > s && isdigit(c))))
      return 0;
  }
  return 1;
}

static const char *type_name(kl_metric_type_t t) {
  return t == KL_METRIC_COUNTER ? "counter"
         : t == KL_METRIC_GAUGE ? "gauge"
                                : "histogram";
}

/* Checks opts; fills the bucket list to use (*b, *nb). */
static int check_opts(const kl_metric_opts_t *o, const double **b, size_t *nb,
                      char *err, size_t errlen) {
  if (o->type != KL_METRIC_COUNTER && o->type != KL_METRIC_GAUGE &&
      o->type != KL_METRIC_HISTOGRAM) {
    snprintf(err, errlen, "unknown metric type %d", (int)o->type);
    return KL_EINVAL;
  }
  if (!valid_name(o->name, 1)) {
    snprintf(err, errlen, "invalid metric name \"%s\"",
             o->name ? o->name : "(null)");
    return KL_EINVAL;
  }
  if (o->nlabels > KL_METRICS_MAX_LABELS) {
    snprintf(err, errlen, "%s: more than %d labels", o->name,
             KL_METRICS_MAX_LABELS);
    return KL_ELIMIT;
  }
  for (size_t i = 0; i < o->nlabels; i++) {
    const char *l = o->labels[i];
    if (!valid_name(l, 0) || strncmp(l, "__", 2) == 0) {
      snprintf(err, errlen, "%s: invalid label name \"%s\"", o->name,
               l ? l : "(null)");
      return KL_EINVAL;
    }
    if (o->type == KL_METRIC_HISTOGRAM && strcmp(l, "le") == 0) {
      snprintf(err, errlen, "%s: \"le\" is reserved in histograms", o->name);
      return KL_EINVAL;
    }
    for (size_t j = 0; j < i; j++)
      if (strcmp(l, o->labels[j]) == 0) {
        snprintf(err, errlen, "%s: label \"%s\" given twice", o->name, l);
        return KL_EINVAL;
      }
  }
  *b = NULL;
  *nb = 0;
  if (o->type != KL_METRIC_HISTOGRAM) return 0;
  *b = o->buckets ? o->buckets : def_buckets;
  *nb = o->buckets ? o->nbuckets : sizeof def_buckets / sizeof def_buckets[0];
  if (*nb > 0 && (*b)[*nb - 1] == INFINITY) (*nb)--;
  if (*nb == 0 || *nb > KL_METRICS_MAX_BUCKETS) {
    snprintf(err, errlen, "%s: a histogram needs 1 to %d buckets", o->name,
             KL_METRICS_MAX_BUCKETS);
    return KL_EINVAL;
  }
  for (size_t i = 0; i < *nb; i++)
    if (!isfinite((*b)[i]) || (i > 0 && !((*b)[i] > (*b)[i - 1]))) {
      snprintf(err, errlen,
               "%s: buckets must be finite and strictly increasing", o->name);
      return KL_EINVAL;
    }
  return 0;
}

static int same_family(const kl_metric_t *f, const kl_metric_opts_t *o,
                       const double *b, size_t nb, char *err, size_t errlen) {
  if (f->type != o->type) {
    snprintf(err, errlen, "%s is registered as a %s, not a %s", f->name,
             type_name(f->type), type_name(o->type));
    return 0;
  }
  int same = f->nlabels == o->nlabels;
  for (size_t i = 0; same && i < f->nlabels; i++)
    same = strcmp(f->labels[i], o->labels[i]) == 0;
  if (!same) {
    char have[256] = "", *p = have;
    for (size_t i = 0; i < f->nlabels && p < have + sizeof have - 1; i++)
      p += snprintf(p, (size_t)(have + sizeof have - p), "%s%s", i ? "," : "",
                    f->labels[i]);
    snprintf(err, errlen, "%s is registered with labels {%s}", f->name, have);
    return 0;
  }
  same = f->nbounds == nb;
  for (size_t i = 0; same && i < nb; i++)
    same = f->bounds[i] == b[i];
  if (!same) {
    snprintf(err, errlen, "%s is registered with other buckets", f->name);
    return 0;
  }
  return 1;
}

kl_metric_t *kl_metrics_register(kl_metrics_t *m, const kl_metric_opts_t *o,
                                 char *err, size_t errlen) {
  const double *b;
  size_t nb;
  if (check_opts(o, &b, &nb, err, errlen) != 0) return NULL;
  kl_metric_t *f = kl_dict_get(m->byname, o->name, strlen(o->name));
  if (f) {
    if (!same_family(f, o, b, nb, err, errlen)) return NULL;
    if (o->help && (!f->help || strcmp(o->help, f->help) != 0)) {
      free(f->help);
      f->help = kl_xstrdup(o->help);
    }
    return f;
  }
  f = kl_xcalloc(1, sizeof *f);
  f->type = o->type;
  f->name = kl_xstrdup(o->name);
  f->help = o->help ? kl_xstrdup(o->help) : NULL;
  f->nlabels = o->nlabels;
  f->labels = kl_xcalloc(o->nlabels ? o->nlabels : 1, sizeof *f->labels);
  for (size_t i = 0; i < o->nlabels; i++)
    f->labels[i] = kl_xstrdup(o->labels[i]);
  if (nb) {
    f->bounds = kl_xmalloc(nb * sizeof *f->bounds);
    memcpy(f->bounds, b, nb * sizeof *b);
    f->nbounds = nb;
  }
  f->byvalues = kl_dict_new(series_key);
  if (m->nfamilies == m->cap) {
    m->cap = m->cap ? m->cap * 2 : 16;
    m->families = kl_xrealloc(m->families, m->cap * sizeof *m->families);
  }
  m->families[m->nfamilies++] = f;
  kl_dict_set(m->byname, f);
  return f;
}

kl_metric_t *kl_metrics_find(const kl_metrics_t *m, const char *name) {
  return kl_dict_get(m->byname, name, strlen(name));
}

kl_metric_type_t kl_metric_type(const kl_metric_t *f) { return f->type; }
const char *kl_metric_name(const kl_metric_t *f) { return f->name; }
size_t kl_metric_nlabels(const kl_metric_t *f) { return f->nlabels; }
const char *kl_metric_label(const kl_metric_t *f, size_t i) {
  return i < f->nlabels ? f->labels[i] : NULL;
}

/* ---- series ---- */

/* Encodes the values into buf (cap bytes); returns the length needed. */
static size_t encode_values(const char *const *values, size_t n, char *buf,
                            size_t cap) {
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(values[i]);
    uint32_t l32 = (uint32_t)l;
    if (off + 4 + l <= cap) {
      memcpy(buf + off, &l32, 4);
      memcpy(buf + off + 4, values[i], l);
    }
    off += 4 + l;
  }
  return off;
}

kl_series_t *kl_metric_series(kl_metric_t *f, const char *const *values,
                              char *err, size_t errlen) {
  char small[256];
  size_t klen = encode_values(values, f->nlabels, small, sizeof small);
  char *key = small;
  if (klen > sizeof small) {
    key = kl_xmalloc(klen);
    encode_values(values, f->nlabels, key, klen);
  }
  kl_series_t *s = kl_dict_get(f->byvalues, key, klen);
  if (s) goto out;
  if (f->nseries >= KL_METRICS_MAX_SERIES) {
    snprintf(err, errlen, "%s: more than %d series (label values)", f->name,
             KL_METRICS_MAX_SERIES);
    goto out;
  }
  s = kl_xcalloc(1, sizeof *s + klen);
  s->family = f;
  memcpy(s->key, key, klen);
  s->klen = klen;
  s->values = kl_xcalloc(f->nlabels ? f->nlabels : 1, sizeof *s->values);
  for (size_t i = 0; i < f->nlabels; i++)
    s->values[i] = kl_xstrdup(values[i]);
  if (f->type == KL_METRIC_HISTOGRAM)
    s->buckets = kl_xcalloc(f->nbounds + 1, sizeof *s->buckets);
  if (f->nseries == f->cap) {
    f->cap = f->cap ? f->cap * 2 : 4;
    f->series = kl_xrealloc(f->series, f->cap * sizeof *f->series);
  }
  f->series[f->nseries++] = s;
  kl_dict_set(f->byvalues, s);
out:
  if (key != small) free(key);
  return s;
}

int kl_series_add(kl_series_t *s, double v) {
  if (s->family->type == KL_METRIC_COUNTER && !(v >= 0)) return KL_EINVAL;
  s->value += v;
  return 0;
}

void kl_series_set(kl_series_t *s, double v) { s->value = v; }
double kl_series_value(const kl_series_t *s) { return s->value; }
uint64_t kl_series_count(const kl_series_t *s) { return s->count; }
double kl_series_sum(const kl_series_t *s) { return s->sum; }

void kl_series_observe(kl_series_t *s, double v) {
  const kl_metric_t *f = s->family;
  if (!s->buckets) return;
  size_t i = 0;
  while (i < f->nbounds && !(v <= f->bounds[i]))
    i++;
  s->buckets[i]++;
  s->count++;
  s->sum += v;
}

int kl_series_set_histogram(kl_series_t *s, uint64_t count, double sum,
                            const uint64_t *cumulative, size_t n) {
  const kl_metric_t *f = s->family;
  if (!s->buckets || n != f->nbounds + 1) return KL_EINVAL;
  for (size_t i = 0; i < n; i++)
    s->buckets[i] = cumulative[i] - (i ? cumulative[i - 1] : 0);
  s->count = count;
  s->sum = sum;
  return 0;
}

/* ---- collectors ---- */

void kl_metrics_add_collector(kl_metrics_t *m, kl_metrics_collect_fn *fn,
                              void *ud) {
  for (size_t i = 0; i < m->ncollectors; i++)
    if (m->collectors[i].fn == fn && m->collectors[i].ud == ud) return;
  m->collectors =
      kl_xrealloc(m->collectors, (m->ncollectors + 1) * sizeof *m->collectors);
  m->collectors[m->ncollectors++] = (collector_t){fn, ud};
}

void kl_metrics_remove_collector(kl_metrics_t *m, kl_metrics_collect_fn *fn,
                                 void *ud) {
  for (size_t i = 0; i < m->ncollectors; i++)
    if (m->collectors[i].fn == fn && m->collectors[i].ud == ud) {
      memmove(m->collectors + i, m->collectors + i + 1,
              (m->ncollectors - i - 1) * sizeof *m->collectors);
      m->ncollectors--;
      return;
    }
}

/* ---- rendering ---- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf_t;

static void sb_grow(sbuf_t *b, size_t more) {
  if (b->n + more + 1 <= b->cap) return;
  while (b->n + more + 1 > b->cap)
    b->cap = b->cap ? b->cap * 2 : 4096;
  b->p = kl_xrealloc(b->p, b->cap);
}

static void sb_put(sbuf_t *b, const char *s, size_t n) {
  sb_grow(b, n);
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_puts(sbuf_t *b, const char *s) { sb_put(b, s, strlen(s)); }

/* HELP text escapes backslash and newline; label values also '"'. */
static void sb_escaped(sbuf_t *b, const char *s, int quote) {
  for (; *s; s++) {
    if (*s == '\\')
      sb_put(b, "\\\\", 2);
    else if (*s == '\n')
      sb_put(b, "\\n", 2);
    else if (quote && *s == '"')
      sb_put(b, "\\\"", 2);
    else
      sb_put(b, s, 1);
  }
}

char *kl_metrics_format_value(double v, char *buf, size_t size) {
  if (v != v)
    snprintf(buf, size, "NaN");
  else if (isinf(v))
    snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) < 1e15)
    snprintf(buf, size, "%.0f", v);
  else {
    snprintf(buf, size, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, size, "%.17g", v);
  }
  return buf;
}

/* name{l1="v1",…[,le="x"]} value */
static void sb_sample(sbuf_t *b, const kl_metric_t *f, const kl_series_t *s,
                      const char *suffix, const char *le, double v) {
  char num[40];
  sb_puts(b, f->name);
  sb_puts(b, suffix);
  if (f->nlabels || le) {
    sb_put(b, "{", 1);
    for (size_t i = 0; i < f->nlabels; i++) {
      if (i) sb_put(b, ",", 1);
      sb_puts(b, f->labels[i]);
      sb_put(b, "=\"", 2);
      sb_escaped(b, s->values[i], 1);
      sb_put(b, "\"", 1);
    }
    if (le) {
      if (f->nlabels) sb_put(b, ",", 1);
      sb_puts(b, "le=\"");
      sb_puts(b, le);
      sb_put(b, "\"", 1);
    }
    sb_put(b, "}", 1);
  }
  sb_put(b, " ", 1);
  sb_puts(b, kl_metrics_format_value(v, num, sizeof num));
  sb_put(b, "\n", 1);
}

static void render_family(sbuf_t *b, const kl_metric_t *f) {
  if (f->nseries == 0) return;
  if (f->help) {
    sb_puts(b, "# HELP ");
    sb_puts(b, f->name);
    sb_put(b, " ", 1);
    sb_escaped(b, f->help, 0);
    sb_put(b, "\n", 1);
  }
  sb_puts(b, "# TYPE ");
  sb_puts(b, f->name);
  sb_put(b, " ", 1);
  sb_puts(b, type_name(f->type));
  sb_put(b, "\n", 1);
  for (size_t i = 0; i < f->nseries; i++) {
    const kl_series_t *s = f->series[i];
    if (f->type != KL_METRIC_HISTOGRAM) {
      sb_sample(b, f, s, "", NULL, s->value);
      continue;
    }
    char le[40];
    uint64_t cum = 0;
    for (size_t j = 0; j <= f->nbounds; j++) {
      cum += s->buckets[j];
      if (j < f->nbounds)
        kl_metrics_format_value(f->bounds[j], le, sizeof le);
      else
        snprintf(le, sizeof le, "+Inf");
      sb_sample(b, f, s, "_bucket", le, (double)cum);
    }
    sb_sample(b, f, s, "_sum", NULL, s->sum);
    sb_sample(b, f, s, "_count", NULL, (double)s->count);
  }
}

char *kl_metrics_render(kl_metrics_t *m, size_t *len) {
  for (size_t i = 0; i < m->ncollectors; i++)
    m->collectors[i].fn(m, m->collectors[i].ud);
  sbuf_t b = {0};
  sb_grow(&b, 0);
  b.p[0] = 0;
  for (size_t i = 0; i < m->nfamilies; i++)
    render_family(&b, m->families[i]);
  if (len) *len = b.n;
  return b.p;
}

/* ---- process_* from /proc/self ---- */

/* Sets the unlabelled series of a process_* family (unless a script took
 * the name for something else). */
static void set_plain(kl_metrics_t *m, kl_metric_type_t type, const char *name,
                      double v) {
  char err[128];
  kl_metric_opts_t o = {type, name, NULL, NULL, 0, NULL, 0};
  kl_metric_t *f = kl_metrics_register(m, &o, err, sizeof err);
  kl_series_t *s = f ? kl_metric_series(f, NULL, err, sizeof err) : NULL;
  if (s) kl_series_set(s, v);
}

/* Seconds since the epoch at boot, from /proc/stat's btime. */
static double boot_time(void) {
  FILE *fp = fopen("/proc/stat", "r");
  char line[256];
  double bt = 0;
  if (!fp) return 0;
  while (fgets(line, sizeof line, fp))
    if (sscanf(line, "btime %lf", &bt) == 1) break;
  fclose(fp);
  return bt;
}

static void collect_process(kl_metrics_t *m, void *ud) {
  (void)ud;
  double ticks = (double)sysconf(_SC_CLK_TCK);
  double page = (double)sysconf(_SC_PAGESIZE);
  char buf[1024];
  FILE *fp = fopen("/proc/self/stat", "r");
  size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
  if (fp) fclose(fp);
  buf[n] = 0;
  /* Fields after the command, which ends at the last ')': state is
   * field 3; utime 14, stime 15, starttime 22, vsize 23, rss 24. */
  char *p = strrchr(buf, ')');
  if (p && ticks > 0) {
    unsigned long long f[24] = {0};
    int i = 3;
    p += 2;
    while (*p && i <= 24) {
      while (*p == ' ')
        p++;
      if (i > 3) f[i - 1] = strtoull(p, NULL, 10);
      while (*p && *p != ' ')
        p++;
      i++;
    }
    set_plain(m, KL_METRIC_COUNTER, "process_cpu_seconds_total",
              (double)(f[13] + f[14]) / ticks);
    set_plain(m, KL_METRIC_GAUGE, "process_start_time_seconds",
              boot_time() + (double)f[21] / ticks);
    set_plain(m, KL_METRIC_GAUGE, "process_virtual_memory_bytes",
              (double)f[22]);
    set_plain(m, KL_METRIC_GAUGE, "process_resident_memory_bytes",
              (double)f[23] * page);
  }
  size_t fds = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') fds++;
    closedir(d);
    fds--; /* the directory being read */
  }
  set_plain(m, KL_METRIC_GAUGE, "process_open_fds", (double)fds);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    set_plain(m, KL_METRIC_GAUGE, "process_max_fds",
              rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur);
}

void kl_metrics_add_process(kl_metrics_t *m) {
  static const struct {
    kl_metric_type_t type;
    const char *name, *help;
  } fams[] = {
      {KL_METRIC_COUNTER, "process_cpu_seconds_total",
       "Total user and system CPU time spent in seconds."},
      {KL_METRIC_GAUGE, "process_open_fds", "Number of open file descriptors."},
      {KL_METRIC_GAUGE, "process_max_fds",
       "Maximum number of open file descriptors."},
      {KL_METRIC_GAUGE, "process_virtual_memory_bytes",
       "Virtual memory size in bytes."},
      {KL_METRIC_GAUGE, "process_resident_memory_bytes",
       "Resident memory size in bytes."},
      {KL_METRIC_GAUGE, "process_start_time_seconds",
       "Start time of the process since unix epoch in seconds."},
  };
  if (m->process) return;
  m->process = 1;
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
    char err[128];
    kl_metric_opts_t o = {
        fams[i].type, fams[i].name, fams[i].help, NULL, 0, NULL, 0};
    kl_metrics_register(m, &o, err, sizeof err);
  }
  kl_metrics_add_collector(m, collect_process, NULL);
}
