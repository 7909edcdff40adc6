/* metrics.h: Prometheus metrics, rendered in the text exposition format and
 * served over HTTP by libmicrohttpd.
 *
 * A metric is one time series: a name, fixed labels and a value. Stages get
 * their series once (st_metric_get) and keep the pointer; updates are atomic
 * and cost no lock, so the hot path never waits for a scrape. Labels hold
 * identifiers only (detector, severity, partition, reason), never event
 * content. */
#ifndef ST_METRICS_H
#define ST_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum st_metric_type { ST_METRIC_COUNTER, ST_METRIC_GAUGE, ST_METRIC_HISTOGRAM };

struct st_metrics;
struct st_metric;

struct st_metrics *st_metrics_new(void);
void st_metrics_destroy(struct st_metrics *m); /* stops serving; accepts NULL */

/* The series name{labels}, created on first use (name, help and labels are
 * copied). labels is "" or Prometheus label text, e.g. "detector=\"x\"".
 * Histograms use fixed latency buckets in seconds. Thread-safe. */
struct st_metric *st_metric_get(struct st_metrics *m, enum st_metric_type type,
                                const char *name, const char *help, const char *labels);

void st_metric_add(struct st_metric *s, int64_t v);   /* counter, gauge */
void st_metric_set(struct st_metric *s, int64_t v);   /* gauge */
void st_metric_observe(struct st_metric *s, double seconds); /* histogram */

/* The exposition text. Caller frees. */
char *st_metrics_render(struct st_metrics *m);

/* What GET /readyz answers: NULL is ready (200 "ready"), otherwise 503 with
 * reason as the body (copied; identifiers and counts only, never event
 * content). GET /healthz always answers 200 "ok" while the process serves.
 * A new metrics registry starts not ready ("starting"). Thread-safe. */
void st_metrics_set_ready(struct st_metrics *m, const char *reason);

/* Serves GET /metrics, /healthz and /readyz on listen ("127.0.0.1:9464"); "" or NULL serves
 * nothing. Returns 0, or -1 with errstr naming the address. */
int st_metrics_serve(struct st_metrics *m, const char *listen, char *errstr,
                     size_t errsz);

#endif
