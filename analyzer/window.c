/* window.c: event-time window arithmetic (see window.h). */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "window.h"

static int cmp_target(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void st_window_count(const struct st_window_member *m, size_t n, int64_t from_us,
                     int64_t to_us, size_t *count, size_t *distinct_targets)
{
    const char **t = st_malloc((n ? n : 1) * sizeof(*t));
    size_t c = 0, nt = 0;

    for (size_t i = 0; i < n; i++) {
        if (m[i].ts_us < from_us || m[i].ts_us > to_us)
            continue;
        c++;
        if (m[i].target && m[i].target[0])
            t[nt++] = m[i].target;
    }
    qsort(t, nt, sizeof(*t), cmp_target);
    size_t d = nt ? 1 : 0;
    for (size_t i = 1; i < nt; i++)
        if (strcmp(t[i - 1], t[i]) != 0)
            d++;
    free(t);
    *count = c;
    *distinct_targets = d;
}

int st_episode_continues(const struct st_episode *ep, int64_t ts_us,
                         int64_t window_us)
{
    return ts_us >= ep->first_us - window_us && ts_us <= ep->last_us + window_us;
}

void st_episode_extend(struct st_episode *ep, int64_t ts_us)
{
    if (ts_us < ep->first_us)
        ep->first_us = ts_us;
    if (ts_us > ep->last_us)
        ep->last_us = ts_us;
}
