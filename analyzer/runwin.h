/* runwin.h: a per-run event-time window in Redis, and the run's open
 * episode, shared by the windowed detectors (denial_burst,
 * retry_across_paths, volume_anomaly, the token_deny loop of scope_drift).
 *
 * For each event a detector feeds, one pipeline step adds the event to a
 * sorted set of the run (score: event time; member: source, event id and a
 * detector-chosen payload, so that adding it twice is a no-op) and reads
 * back the window ending at the event -- or, for a late event, every window
 * that holds it. What no window can reach any more is trimmed after the
 * batch is committed. When the reply
 * arrives the detector's callback sees the members sorted by time.
 *
 * An episode is a run of overlapping windows that met the detector's
 * condition: one finding. Its id is derived from the member that opened it,
 * so the same events give the same finding in any process; the run's
 * episodes live in Redis next to the window so that a restarted or another
 * analyzer continues them. */
#ifndef ST_RUNWIN_H
#define ST_RUNWIN_H

#include <stddef.h>
#include <stdint.h>

#include "detect.h"

struct st_runwin_member {
    int64_t ts_us;
    const char *key;    /* "source\x1fevent_id\x1fpayload": the whole member */
    char *source;       /* split copies, valid during the callback */
    char *event_id;
    const char *payload;
};

struct st_runwin_view {
    const struct st_event *ev; /* the event fed */
    int late;
    const struct st_runwin_member *m; /* sorted by time */
    size_t n;
    int64_t window_us;
    int ooo; /* late or skewed: every window that holds it is evaluated */
};

/* Called when the window of a fed event arrives. Returns 0, or -1 to fail
 * the batch. */
typedef int (*st_runwin_cb)(void *arg, const struct st_runwin_view *v);

struct st_runwin;

/* name names the detector in Redis keys; window_us is the window length;
 * keep_us how much event time behind the newest event stays in Redis. */
struct st_runwin *st_runwin_new(const struct st_analyzer_conf *conf,
                                const char *name, int64_t window_us,
                                int64_t keep_us);
void st_runwin_destroy(struct st_runwin *w);

void st_runwin_begin(struct st_runwin *w, size_t nevents);
void st_runwin_reset(struct st_runwin *w);

/* Adds ev (with payload, which must not contain '\x1f') to its run's window
 * and queues the read; cb(arg, view) runs when the pipeline executes. With
 * add_only set, the event joins the window but nothing is read back. */
void st_runwin_feed(struct st_runwin *w, struct st_detect_ctx *ctx,
                    const struct st_event *ev, const char *payload, int add_only,
                    st_runwin_cb cb, void *arg);

/* Inside a callback: the finding id for a window ending at end_us whose
 * oldest member is opener, extending the run's open episode when the window
 * overlaps it, opening a new one otherwise. out gets 33 bytes. */
void st_runwin_episode(struct st_runwin *w, const struct st_runwin_view *v,
                       int64_t end_us, const struct st_runwin_member *opener,
                       char out[33]);

/* Queues the write-back of the episodes changed in this batch (before the
 * PostgreSQL commit: episodes only grow, so a redo computes them again). */
void st_runwin_end_batch(struct st_runwin *w, struct st_detect_ctx *ctx);

/* Queues the trims: members and episodes older than keep_us behind the
 * newest on-time event of each run of the batch. Only once the batch's
 * offsets are committed (detect.h). */
void st_runwin_after_commit(struct st_runwin *w, struct st_detect_ctx *ctx);

/* The windows a view holds: for an on-time event one, ending at it; for a
 * late event one ending at each later distinct time. Calls fn with the
 * index range [lo, hi) of each window and its end time. */
typedef int (*st_runwin_window_fn)(void *arg, const struct st_runwin_view *v,
                                   size_t lo, size_t hi, int64_t end_us);
int st_runwin_each_window(const struct st_runwin_view *v, st_runwin_window_fn fn,
                          void *arg);

/* Adds the members [lo, hi) to f's evidence; the fed event is marked late
 * when it was. */
void st_runwin_evidence(const struct st_runwin_view *v, struct st_finding *f,
                        size_t lo, size_t hi);

#endif
