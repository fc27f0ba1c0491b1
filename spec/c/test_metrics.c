/* test_metrics.c — the metrics registry and the Prometheus text format:
 * registration (same name → same family, mismatches refused), series by
 * label values, the exact exposition (HELP/TYPE, escaping, histograms with
 * cumulative buckets and +Inf), collectors and the process collector. Leaks
 * are the sanitizer build's to find. */
#include <math.h>
#include <string.h>

#include "error.h"
#include "metrics.h"
#include "test.h"

static kl_metric_t *reg(kl_metrics_t *m, kl_metric_type_t t, const char *name,
                        const char *help, const char *const *labels, size_t n,
                        const double *b, size_t nb) {
  char err[256] = "";
  kl_metric_opts_t o = {t, name, help, labels, n, b, nb};
  kl_metric_t *f = kl_metrics_register(m, &o, err, sizeof err);
  if (!f) KT_FAIL_("register %s: %s", name, err);
  return f;
}

static void test_exposition_exact(void) {
  kl_metrics_t *m = kl_metrics_new();
  static const char *const ql[] = {"name"};
  static const char *const rl[] = {"controller", "result"};
  static const double b[] = {0.1, 1, 2.5};
  char err[128];
  kl_metric_t *adds = reg(m, KL_METRIC_COUNTER, "workqueue_adds_total",
                          "Total number of adds", ql, 1, NULL, 0);
  kl_metric_t *rec = reg(m, KL_METRIC_COUNTER, "reconcile_total",
                         "Help with \\ and\nnewline", rl, 2, NULL, 0);
  kl_metric_t *g =
      reg(m, KL_METRIC_GAUGE, "heap_bytes", NULL, NULL, 0, NULL, 0);
  kl_metric_t *h =
      reg(m, KL_METRIC_HISTOGRAM, "lat_seconds", "Latency", ql, 1, b, 3);
  reg(m, KL_METRIC_GAUGE, "never_used", "no series: left out", NULL, 0, NULL,
      0);

  const char *q[] = {"q"};
  kl_series_t *s = kl_metric_series(adds, q, err, sizeof err);
  KT_EQ_INT(kl_series_add(s, 1), 0);
  KT_EQ_INT(kl_series_add(s, 2), 0);
  KT_EQ_INT(kl_series_add(s, -1), KL_EINVAL);
  KT_EQ_INT(kl_series_add(s, NAN), KL_EINVAL);
  KT_TRUE(kl_metric_series(adds, q, err, sizeof err) == s);
  const char *v1[] = {"a\"b\\c\nd", "error"};
  kl_series_add(kl_metric_series(rec, v1, err, sizeof err), 1);
  kl_series_t *gs = kl_metric_series(g, NULL, err, sizeof err);
  kl_series_set(gs, 1.5);
  KT_EQ_INT(kl_series_add(gs, -2), 0);
  kl_series_t *hs = kl_metric_series(h, q, err, sizeof err);
  kl_series_observe(hs, 0.0625);
  kl_series_observe(hs, 1);
  kl_series_observe(hs, 7);
  kl_series_observe(hs, 0.1);

  size_t len;
  char *text = kl_metrics_render(m, &len);
  KT_EQ_STR(
      text,
      "# HELP workqueue_adds_total Total number of adds\n"
      "# TYPE workqueue_adds_total counter\n"
      "workqueue_adds_total{name=\"q\"} 3\n"
      "# HELP reconcile_total Help with \\\\ and\\nnewline\n"
      "# TYPE reconcile_total counter\n"
      "reconcile_total{controller=\"a\\\"b\\\\c\\nd\",result=\"error\"} 1\n"
      "# TYPE heap_bytes gauge\n"
      "heap_bytes -0.5\n"
      "# HELP lat_seconds Latency\n"
      "# TYPE lat_seconds histogram\n"
      "lat_seconds_bucket{name=\"q\",le=\"0.1\"} 2\n"
      "lat_seconds_bucket{name=\"q\",le=\"1\"} 3\n"
      "lat_seconds_bucket{name=\"q\",le=\"2.5\"} 3\n"
      "lat_seconds_bucket{name=\"q\",le=\"+Inf\"} 4\n"
      "lat_seconds_sum{name=\"q\"} 8.1625\n"
      "lat_seconds_count{name=\"q\"} 4\n");
  KT_EQ_INT(len, strlen(text));
  free(text);
  kl_metrics_free(m);
}

static void test_register_same_and_mismatch(void) {
  kl_metrics_t *m = kl_metrics_new();
  static const char *const l1[] = {"a", "b"};
  static const char *const l2[] = {"b", "a"};
  static const char *const bad[] = {"le"};
  static const double b1[] = {1, 2}, b2[] = {1, 3}, b3[] = {2, 1};
  static const double binf[] = {1, 2, INFINITY};
  char err[256];
  kl_metric_t *c = reg(m, KL_METRIC_COUNTER, "x_total", "x", l1, 2, NULL, 0);
  KT_TRUE(reg(m, KL_METRIC_COUNTER, "x_total", "x again", l1, 2, NULL, 0) == c);
  KT_TRUE(kl_metrics_find(m, "x_total") == c);
  KT_TRUE(kl_metrics_find(m, "y") == NULL);

  kl_metric_opts_t o = {KL_METRIC_GAUGE, "x_total", NULL, l1, 2, NULL, 0};
  KT_TRUE(kl_metrics_register(m, &o, err, sizeof err) == NULL);
  KT_EQ_STR(err, "x_total is registered as a counter, not a gauge");
  o = (kl_metric_opts_t){KL_METRIC_COUNTER, "x_total", NULL, l2, 2, NULL, 0};
  KT_TRUE(kl_metrics_register(m, &o, err, sizeof err) == NULL);
  KT_EQ_STR(err, "x_total is registered with labels {a,b}");
  o = (kl_metric_opts_t){KL_METRIC_COUNTER, "1x", NULL, NULL, 0, NULL, 0};
  KT_TRUE(kl_metrics_register(m, &o, err, sizeof err) == NULL);
  KT_EQ_STR(err, "invalid metric name \"1x\"");
  o = (kl_metric_opts_t){KL_METRIC_HISTOGRAM, "h", NULL, bad, 1, NULL, 0};
  KT_TRUE(kl_metrics_register(m, &o, err, sizeof err) == NULL);
  KT_EQ_STR(err, "h: \"le\" is reserved in histograms");
  o = (kl_metric_opts_t){KL_METRIC_HISTOGRAM, "h", NULL, NULL, 0, b3, 2};
  KT_TRUE(kl_metrics_register(m, &o, err, sizeof err) == NULL);
  KT_EQ_STR(err, "h: buckets must be finite and strictly increasing");

  kl_metric_t *h = reg(m, KL_METRIC_HISTOGRAM, "h", NULL, NULL, 0, b1, 2);
  KT_TRUE(reg(m, KL_METRIC_HISTOGRAM, "h", NULL, NULL, 0, binf, 3) == h);
  o = (kl_metric_opts_t){KL_METRIC_HISTOGRAM, "h", NULL, NULL, 0, b2, 2};
  KT_TRUE(kl_metrics_register(m, &o, err, sizeof err) == NULL);
  KT_EQ_STR(err, "h is registered with other buckets");
  /* Default buckets: client_golang's DefBuckets. */
  kl_metric_t *d = reg(m, KL_METRIC_HISTOGRAM, "d", NULL, NULL, 0, NULL, 0);
  kl_series_observe(kl_metric_series(d, NULL, err, sizeof err), 0.3);
  char *text = kl_metrics_render(m, NULL);
  KT_TRUE(strstr(text, "d_bucket{le=\"0.25\"} 0\nd_bucket{le=\"0.5\"} 1\n") !=
          NULL);
  KT_TRUE(strstr(text, "d_bucket{le=\"10\"} 1\nd_bucket{le=\"+Inf\"} 1\n") !=
          NULL);
  free(text);
  kl_metrics_free(m);
}

static void test_series_limit_and_binary_values(void) {
  kl_metrics_t *m = kl_metrics_new();
  static const char *const l[] = {"k", "v"};
  char err[256] = "";
  kl_metric_t *g = reg(m, KL_METRIC_GAUGE, "g", NULL, l, 2, NULL, 0);
  /* ("ab", "c") and ("a", "bc") are different series. */
  const char *x[] = {"ab", "c"}, *y[] = {"a", "bc"};
  KT_TRUE(kl_metric_series(g, x, err, sizeof err) !=
          kl_metric_series(g, y, err, sizeof err));
  char k[16];
  const char *vals[] = {k, ""};
  for (int i = 2; i < KL_METRICS_MAX_SERIES; i++) {
    snprintf(k, sizeof k, "%d", i);
    KT_TRUE(kl_metric_series(g, vals, err, sizeof err) != NULL);
  }
  snprintf(k, sizeof k, "over");
  KT_TRUE(kl_metric_series(g, vals, err, sizeof err) == NULL);
  KT_EQ_STR(err, "g: more than 10000 series (label values)");
  snprintf(k, sizeof k, "7");
  KT_TRUE(kl_metric_series(g, vals, err, sizeof err) != NULL); /* exists */
  kl_metrics_free(m);
}

static int ncollect;
static void collect(kl_metrics_t *m, void *ud) {
  char err[64];
  ncollect++;
  kl_metric_t *f = kl_metrics_find(m, "copied_total");
  kl_series_t *s = kl_metric_series(f, NULL, err, sizeof err);
  kl_series_set(s, *(double *)ud);
  static const uint64_t cum[] = {1, 3, 4};
  kl_metric_t *h = kl_metrics_find(m, "hist");
  kl_series_t *hs = kl_metric_series(h, NULL, err, sizeof err);
  KT_EQ_INT(kl_series_set_histogram(hs, 4, 2.5, cum, 3), 0);
  KT_EQ_INT(kl_series_set_histogram(hs, 4, 2.5, cum, 2), KL_EINVAL);
}

static void test_collectors(void) {
  kl_metrics_t *m = kl_metrics_new();
  static const double b[] = {0.5, 1};
  double total = 42;
  reg(m, KL_METRIC_COUNTER, "copied_total", "c", NULL, 0, NULL, 0);
  reg(m, KL_METRIC_HISTOGRAM, "hist", "h", NULL, 0, b, 2);
  ncollect = 0;
  kl_metrics_add_collector(m, collect, &total);
  kl_metrics_add_collector(m, collect, &total); /* once */
  char *text = kl_metrics_render(m, NULL);
  KT_EQ_INT(ncollect, 1);
  KT_EQ_STR(text, "# HELP copied_total c\n"
                  "# TYPE copied_total counter\n"
                  "copied_total 42\n"
                  "# HELP hist h\n"
                  "# TYPE hist histogram\n"
                  "hist_bucket{le=\"0.5\"} 1\n"
                  "hist_bucket{le=\"1\"} 3\n"
                  "hist_bucket{le=\"+Inf\"} 4\n"
                  "hist_sum 2.5\n"
                  "hist_count 4\n");
  free(text);
  kl_metrics_remove_collector(m, collect, &total);
  free(kl_metrics_render(m, NULL));
  KT_EQ_INT(ncollect, 1);
  kl_metrics_free(m);
}

static void test_process_collector(void) {
  kl_metrics_t *m = kl_metrics_new();
  kl_metrics_add_process(m);
  kl_metrics_add_process(m);
  char *text = kl_metrics_render(m, NULL);
  static const char *const names[] = {
      "\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ",
      "\nprocess_open_fds ",
      "\nprocess_max_fds ",
      "\nprocess_virtual_memory_bytes ",
      "\nprocess_resident_memory_bytes ",
      "\nprocess_start_time_seconds "};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strstr(text, names[i])) KT_FAIL_("missing %s in\n%s", names[i], text);
  kl_series_t *fds =
      kl_metric_series(kl_metrics_find(m, "process_open_fds"), NULL, NULL, 0);
  KT_TRUE(kl_series_value(fds) >= 3); /* stdin, stdout, stderr */
  kl_series_t *st = kl_metric_series(
      kl_metrics_find(m, "process_start_time_seconds"), NULL, NULL, 0);
  KT_TRUE(kl_series_value(st) > 1.6e9);
  free(text);
  kl_metrics_free(m);
}

static void test_format_value(void) {
  char b[40];
  KT_EQ_STR(kl_metrics_format_value(0, b, sizeof b), "0");
  KT_EQ_STR(kl_metrics_format_value(1e-6, b, sizeof b), "1e-06");
  KT_EQ_STR(kl_metrics_format_value(0.1, b, sizeof b), "0.1");
  KT_EQ_STR(kl_metrics_format_value(123456789012, b, sizeof b), "123456789012");
  KT_EQ_STR(kl_metrics_format_value(1e20, b, sizeof b), "1e+20");
  KT_EQ_STR(kl_metrics_format_value(INFINITY, b, sizeof b), "+Inf");
  KT_EQ_STR(kl_metrics_format_value(-INFINITY, b, sizeof b), "-Inf");
  KT_EQ_STR(kl_metrics_format_value(NAN, b, sizeof b), "NaN");
  KT_EQ_STR(kl_metrics_format_value(1.0 / 3, b, sizeof b),
            "0.33333333333333331");
}

int main(void) {
  KT_RUN(test_exposition_exact);
  KT_RUN(test_register_same_and_mismatch);
  KT_RUN(test_series_limit_and_binary_values);
  KT_RUN(test_collectors);
  KT_RUN(test_process_collector);
  KT_RUN(test_format_value);
  return KT_DONE();
}
