/* window.h: event-time window arithmetic, free of I/O so that it is tested
 * on its own. Times are microseconds since the epoch. */
#ifndef ST_WINDOW_H
#define ST_WINDOW_H

#include <stddef.h>
#include <stdint.h>

struct st_window_member {
    int64_t ts_us;
    const char *target; /* not copied; "" when the event names none */
    size_t idx;         /* the caller's index of the member (free for its use) */
};

/* Counts the members with from_us <= ts_us <= to_us, and how many distinct
 * non-empty targets they name. */
void st_window_count(const struct st_window_member *m, size_t n, int64_t from_us,
                     int64_t to_us, size_t *count, size_t *distinct_targets);

/* An episode is a run of overlapping windows that all met a threshold: one
 * finding. It goes on while each new triggering event lies within one window
 * of the episode (before its first trigger or after its last). */
struct st_episode {
    int64_t first_us; /* event time of the first trigger */
    int64_t last_us;  /* event time of the latest trigger */
};

/* 1 when a trigger at ts_us belongs to ep, 0 when it starts a new episode. */
int st_episode_continues(const struct st_episode *ep, int64_t ts_us,
                         int64_t window_us);

/* Extends ep with a trigger at ts_us. */
void st_episode_extend(struct st_episode *ep, int64_t ts_us);

#endif
