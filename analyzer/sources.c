/* sources.c: per-source metrics (see sources.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "sources.h"

struct source {
    char *name;
    struct st_metric *events, *last;
    int64_t pending, pending_s; /* seen since the last st_sources_publish */
};

struct st_sources {
    struct st_metrics *metrics;
    struct source *v;
    size_t n, cap;
    size_t hint; /* the last source seen: events come in runs of one source */
};

struct st_sources *st_sources_new(struct st_metrics *metrics)
{
    struct st_sources *s = st_calloc(1, sizeof(*s));
    s->metrics = metrics;
    return s;
}

void st_sources_destroy(struct st_sources *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].name);
    free(s->v);
    free(s);
}

static struct source *lookup(struct st_sources *s, const char *name)
{
    if (s->hint < s->n && strcmp(s->v[s->hint].name, name) == 0)
        return &s->v[s->hint];
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i].name, name) == 0)
            return &s->v[s->hint = i];
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->v = st_realloc(s->v, s->cap * sizeof(*s->v));
    }
    char labels[320];
    /* a source name has no control characters (schema); quotes and
     * backslashes are escaped for the exposition format */
    size_t o = 0;
    o += (size_t)snprintf(labels, sizeof(labels), "source=\"");
    for (const char *c = name; *c && o + 4 < sizeof(labels); c++) {
        if (*c == '"' || *c == '\\')
            labels[o++] = '\\';
        labels[o++] = *c;
    }
    snprintf(labels + o, sizeof(labels) - o, "\"");
    struct source *src = &s->v[s->hint = s->n++];
    src->name = st_strdup(name);
    src->events = st_metric_get(s->metrics, ST_METRIC_COUNTER,
                                "sandtrail_analyzer_source_events_total",
                                "events consumed, by source", labels);
    src->last = st_metric_get(s->metrics, ST_METRIC_GAUGE,
                              "sandtrail_analyzer_source_last_event_seconds",
                              "wall-clock time (Unix seconds) the last event of the "
                              "source was consumed",
                              labels);
    return src;
}

void st_sources_seen(struct st_sources *s, const char *name, int64_t now_s)
{
    if (!name)
        return;
    struct source *src = lookup(s, name);
    src->pending++;
    src->pending_s = now_s;
}

void st_sources_publish(struct st_sources *s)
{
    for (size_t i = 0; i < s->n; i++) {
        struct source *src = &s->v[i];
        if (!src->pending)
            continue;
        st_metric_add(src->events, src->pending);
        st_metric_set(src->last, src->pending_s);
        src->pending = 0;
    }
}
