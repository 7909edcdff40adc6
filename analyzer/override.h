/* override.h: per-task and per-platform detection thresholds.
 *
 *   override.task.<task_id>.<property> = <value>
 *   override.platform.<source.platform>.<property> = <value>
 *
 * <property> is one of the detect.* thresholds and budgets (not the window
 * lengths, which shape the state kept in Redis). For an event, a task
 * override wins over a platform override, which wins over the property. */
#ifndef ST_OVERRIDE_H
#define ST_OVERRIDE_H

#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "event.h"

struct st_override {
    int by_task; /* else by platform */
    char *id;
    const char *prop; /* the property's name, from the table */
    int64_t value;
};

struct st_overrides {
    struct st_override *v;
    size_t n;
    const struct st_conf_prop *props; /* the analyzer's table */
};

/* An st_conf_extra_fn: arg is a struct st_overrides. */
int st_override_parse(void *arg, const char *name, const char *value, char *errstr,
                      size_t errsz);

void st_overrides_fini(struct st_overrides *o);

/* The value of prop for ev: an override if one matches, else dflt. */
int64_t st_override_int(const struct st_overrides *o, const struct st_event *ev,
                        const char *prop, int64_t dflt);

/* Appends every override as "name=value\n" (for the configuration hash). */
struct st_buf;
void st_overrides_describe(const struct st_overrides *o, struct st_buf *out);

#endif
