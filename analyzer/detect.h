/* detect.h: the detector interface.
 *
 * A detector is one file in detectors/ behind a const struct
 * st_detector_ops. For each batch the analyzer calls feed() once per event,
 * in partition order; a detector queues the Redis commands it needs on
 * ctx->redis, with callbacks that run when the pipeline executes and record
 * findings in ctx->findings. end_batch() then queues state write-backs,
 * which run in a second round trip. Both round trips happen before the
 * PostgreSQL transaction, so what they write must be what a redo of the
 * batch computes again: members keyed by event (adding one twice changes
 * nothing), episodes that only grow. A batch is retried, or replayed after
 * a crash, until its offsets are committed.
 *
 * What destroys information -- trimming windows, dropping old episodes --
 * is queued by after_commit(), which the analyzer runs only once the batch's
 * PostgreSQL transaction and its Kafka offsets are both committed, so no
 * redo can need what it removes (docs/architecture.md, "Why a redone batch
 * changes nothing"). It trims relative to the newest on-time event of the
 * batch, keeping 2 x window + detect.lateness_s behind it. If it fails, the
 * state is only larger: a later batch trims it.
 *
 * Events reach feed() per partition in event-time order (reorder.c), except
 * late ones, which come when they arrive with ctx->late set: a detector
 * re-evaluates what a late event changes and marks it late in the evidence. */
#ifndef ST_DETECT_H
#define ST_DETECT_H

#include "analyzer.h"
#include "event.h"
#include "findings.h"
#include "rpipe.h"

struct st_detect_ctx {
    struct st_rpipe *redis;
    struct st_findings *findings;
    const struct st_analyzer_conf *conf;
    int late; /* the event being fed arrived after its partition's watermark */
    /* its time is the receive time (reorder.h): fed out of order, like a
     * late event, and never moves a run's newest time (no trim) */
    int skewed;
};

struct st_detector_ops {
    const char *name;
    int version;
    /* Returns the detector's state; NULL when it has none. */
    void *(*create)(const struct st_analyzer_conf *conf);
    void (*destroy)(void *state);
    /* Called before the batch's first feed with the number of events it
     * will feed, so that per-event state is sized once (callbacks hold
     * pointers into it). */
    void (*begin_batch)(void *state, size_t nevents);
    /* ev lives until reset_batch. */
    void (*feed)(void *state, struct st_detect_ctx *ctx, const struct st_event *ev);
    void (*end_batch)(void *state, struct st_detect_ctx *ctx);
    /* Queues the destructive part of the write-back, after the commits;
     * NULL when there is none. Runs before reset_batch. */
    void (*after_commit)(void *state, struct st_detect_ctx *ctx);
    /* Forgets the batch (after it is written, or before it is retried). */
    void (*reset_batch)(void *state);
};

extern const struct st_detector_ops st_denial_burst_ops;
extern const struct st_detector_ops st_retry_across_paths_ops;
extern const struct st_detector_ops st_scope_drift_ops;
extern const struct st_detector_ops st_token_write_ops;
extern const struct st_detector_ops st_volume_anomaly_ops;
extern const struct st_detector_ops st_private_destination_ops;

/* NULL-terminated list of every detector. */
extern const struct st_detector_ops *const st_detectors[];

/* Joins a Redis key: conf->redis_prefix, detector, kind, task, run. The
 * parts are separated by ':' and the ids are length-prefixed so that no pair
 * of ids can collide. Returns a new string. */
char *st_detect_key(const struct st_analyzer_conf *conf, const char *detector,
                    const char *kind, const char *task_id, const char *run_id);

#endif
