/* metrics.h — counters, gauges and histograms, rendered for Prometheus.
 *
 * A registry holds metric families registered by name (client_golang's
 * vocabulary: a family has a type, help text and label names; each set of
 * label values is one series). Asking again for a name with the same type,
 * label names and buckets returns the same family, which is how metrics
 * survive hot reloads; anything else is an error. Series are created on
 * first use and live as long as the registry, so a caller may keep the
 * kl_series_t pointer and update it with no lookup (the hot path).
 *
 * Collectors are callbacks run at the start of each render: metrics whose
 * truth lives elsewhere (a workqueue's counters, /proc) are copied into
 * their series there, so keeping them costs nothing between scrapes.
 *
 * Output is the Prometheus text exposition format 0.0.4: # HELP and # TYPE
 * per family, families in registration order, series in creation order,
 * families with no series left out (as client_golang does). */
#ifndef KL_METRICS_H
#define KL_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kl_metrics kl_metrics_t;
typedef struct kl_metric kl_metric_t;
typedef struct kl_series kl_series_t;

typedef enum kl_metric_type {
  KL_METRIC_COUNTER = 0,
  KL_METRIC_GAUGE = 1,
  KL_METRIC_HISTOGRAM = 2,
} kl_metric_type_t;

/* Limits: label names per family, series per family, buckets. */
#define KL_METRICS_MAX_LABELS 16
#define KL_METRICS_MAX_SERIES 10000
#define KL_METRICS_MAX_BUCKETS 64

typedef struct kl_metric_opts {
  kl_metric_type_t type;
  const char *name;          /* [a-zA-Z_:][a-zA-Z0-9_:]* */
  const char *help;          /* may be NULL */
  const char *const *labels; /* label names, [a-zA-Z_][a-zA-Z0-9_]* */
  size_t nlabels;
  /* Histograms: upper bounds, strictly increasing, finite; +Inf is added
   * (a trailing +Inf given here is ignored). NULL: client_golang's
   * DefBuckets (.005 .01 .025 .05 .1 .25 .5 1 2.5 5 10). */
  const double *buckets;
  size_t nbuckets;
} kl_metric_opts_t;

typedef void kl_metrics_collect_fn(kl_metrics_t *m, void *ud);

kl_metrics_t *kl_metrics_new(void);
/* Frees the registry with every family and series. NULL is a no-op. */
void kl_metrics_free(kl_metrics_t *m);

/* Registers a family, or returns the one of that name when type, label
 * names (in order) and buckets match; the help text is then updated.
 * Returns NULL with a message in err (errlen bytes) for a bad name, label
 * or bucket list, or a mismatch with the registered family. opts' strings
 * are copied. */
kl_metric_t *kl_metrics_register(kl_metrics_t *m, const kl_metric_opts_t *opts,
                                 char *err, size_t errlen);
/* The family of that name, or NULL. */
kl_metric_t *kl_metrics_find(const kl_metrics_t *m, const char *name);
kl_metric_type_t kl_metric_type(const kl_metric_t *f);
const char *kl_metric_name(const kl_metric_t *f);
size_t kl_metric_nlabels(const kl_metric_t *f);
const char *kl_metric_label(const kl_metric_t *f, size_t i);

/* The series of these label values (one NUL-terminated string per label
 * name, in order), created on first use. Returns NULL with a message in err
 * when the family has KL_METRICS_MAX_SERIES series already. The pointer is
 * valid as long as the registry. */
kl_series_t *kl_metric_series(kl_metric_t *f, const char *const *values,
                              char *err, size_t errlen);

/* Counters and gauges: adds v (a counter refuses v < 0 or NaN with
 * KL_EINVAL). */
int kl_series_add(kl_series_t *s, double v);
/* Gauges; and counters from collectors that copy a total kept elsewhere. */
void kl_series_set(kl_series_t *s, double v);
double kl_series_value(const kl_series_t *s);
/* Histograms: one observation. NaN counts in +Inf, as in client_golang. */
void kl_series_observe(kl_series_t *s, double v);
/* Histograms, from a collector: replaces the state with count, sum and the
 * n cumulative bucket counts (n == buckets + 1, the last is +Inf). Returns
 * 0 or KL_EINVAL when n does not match. */
int kl_series_set_histogram(kl_series_t *s, uint64_t count, double sum,
                            const uint64_t *cumulative, size_t n);
uint64_t kl_series_count(const kl_series_t *s);
double kl_series_sum(const kl_series_t *s);

/* Collectors run in registration order at the start of kl_metrics_render.
 * Adding the same (fn, ud) twice registers it once. */
void kl_metrics_add_collector(kl_metrics_t *m, kl_metrics_collect_fn *fn,
                              void *ud);
void kl_metrics_remove_collector(kl_metrics_t *m, kl_metrics_collect_fn *fn,
                                 void *ud);

/* Runs the collectors and returns the exposition text (malloc'd, NUL-
 * terminated, the caller frees it) and its length in *len (may be NULL). */
char *kl_metrics_render(kl_metrics_t *m, size_t *len);

/* Registers the process_* family (client_golang's process collector, read
 * from /proc/self): process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds,
 * process_start_time_seconds. Idempotent. */
void kl_metrics_add_process(kl_metrics_t *m);

/* Formats v as Prometheus does (the shortest text that reads back to v;
 * "+Inf", "-Inf", "NaN") into buf (at least 32 bytes); returns buf. */
char *kl_metrics_format_value(double v, char *buf, size_t size);

#endif
