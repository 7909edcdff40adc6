/* override.c: per-task and per-platform thresholds (see override.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "override.h"

/* Thresholds and budgets that may be overridden. */
static const char *const overridable[] = {
    "detect.denial_burst.threshold",
    "detect.denial_burst.high_targets",
    "detect.retry_across_paths.min_attempts",
    "detect.volume_anomaly.max_requests",
    "detect.volume_anomaly.max_bytes_out",
    "detect.scope_drift.deny_loop_count",
    NULL,
};

int st_override_parse(void *arg, const char *name, const char *value, char *errstr,
                      size_t errsz)
{
    struct st_overrides *o = arg;
    int by_task;
    const char *rest;

    if (!strncmp(name, "override.task.", 14)) {
        by_task = 1;
        rest = name + 14;
    } else if (!strncmp(name, "override.platform.", 18)) {
        by_task = 0;
        rest = name + 18;
    } else {
        return 1;
    }
    /* the id ends where the property begins: ids may hold dots */
    const char *prop = strstr(rest, ".detect.");
    if (!prop || prop == rest) {
        snprintf(errstr, errsz,
                 "invalid override \"%s\": expected override.task|platform.<id>.<property>",
                 name);
        return -1;
    }
    prop++;
    const struct st_conf_prop *p = NULL;
    for (int i = 0; overridable[i]; i++)
        if (!strcmp(prop, overridable[i]))
            for (p = o->props; p->name && strcmp(p->name, prop); p++)
                ;
    if (!p || !p->name) {
        snprintf(errstr, errsz, "invalid override \"%s\": \"%s\" cannot be overridden",
                 name, prop);
        return -1;
    }
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end || v < p->min || v > p->max) {
        snprintf(errstr, errsz, "invalid value for \"%s\": \"%s\" (range %" PRId64
                 "..%" PRId64 ")", name, value, p->min, p->max);
        return -1;
    }
    o->v = st_realloc(o->v, (o->n + 1) * sizeof(*o->v));
    o->v[o->n].by_task = by_task;
    o->v[o->n].id = st_strndup(rest, (size_t)(prop - 1 - rest));
    o->v[o->n].prop = p->name;
    o->v[o->n].value = v;
    o->n++;
    return 0;
}

void st_overrides_fini(struct st_overrides *o)
{
    for (size_t i = 0; i < o->n; i++)
        free(o->v[i].id);
    free(o->v);
    o->v = NULL;
    o->n = 0;
}

int64_t st_override_int(const struct st_overrides *o, const struct st_event *ev,
                        const char *prop, int64_t dflt)
{
    int64_t by_platform = dflt;
    int found_platform = 0;
    for (size_t i = 0; i < o->n; i++) {
        const struct st_override *x = &o->v[i];
        if (strcmp(x->prop, prop) != 0)
            continue;
        if (x->by_task && !strcmp(x->id, ev->task_id))
            return x->value;
        if (!x->by_task && !found_platform && ev->source_platform &&
            !strcmp(x->id, ev->source_platform)) {
            by_platform = x->value;
            found_platform = 1;
        }
    }
    return by_platform;
}

void st_overrides_describe(const struct st_overrides *o, struct st_buf *out)
{
    for (size_t i = 0; i < o->n; i++)
        st_buf_printf(out, "%s.%s.%s=%" PRId64 "\n", o->v[i].by_task ? "task" : "platform",
                      o->v[i].id, o->v[i].prop, o->v[i].value);
}
