/* sources.h: per-source metrics, so that a source that has gone silent
 * stands out (dashboards/prometheus: SandtrailSourceSilent).
 *
 *   sandtrail_analyzer_source_events_total{source="..."}
 *   sandtrail_analyzer_source_last_event_seconds{source="..."}  (wall clock)
 *
 * The label is the event's source.name, an identifier the collector
 * validated; the number of series follows the number of sources.
 * @locality: the analyzer's main thread. */
#ifndef ST_SOURCES_H
#define ST_SOURCES_H

#include <stdint.h>

struct st_metrics;
struct st_sources;

struct st_sources *st_sources_new(struct st_metrics *metrics); /* not owned */
void st_sources_destroy(struct st_sources *s);                  /* accepts NULL */

/* Counts one event of source name, seen at wall-clock time now_s; the
 * metrics show it from the next st_sources_publish (the caller's, once a
 * batch: two atomic writes per event were on the main thread's path). */
void st_sources_seen(struct st_sources *s, const char *name, int64_t now_s);
void st_sources_publish(struct st_sources *s);

#endif
