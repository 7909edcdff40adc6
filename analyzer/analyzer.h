/* analyzer.h: the analyzer's configuration (one table, in main.c). */
#ifndef ST_ANALYZER_H
#define ST_ANALYZER_H

#include <stdint.h>

#include "kafka.h"
#include "override.h"

struct st_analyzer_conf {
    char *role_name; /* analyzer.role */
    int role;        /* its enum st_role (role.h), set by main after loading */
    char *brokers;
    struct st_kafka_props kafka; /* kafka.rdkafka.*, kafka.sasl.password_file */
    char *topic_events;
    char *topic_dlq;
    int64_t dlq_raw_bytes;
    char *group;
    char *group_instance_id;
    int64_t session_timeout_ms;
    char *pg_dsn;
    int64_t copy_connections;  /* pg.copy_connections (sinks/events.c) */
    int64_t copy_split_events; /* pg.copy_split_events */
    char *redis_url;
    char *redis_password_file;
    char *redis_prefix;
    int64_t redis_round_trip_ms; /* redis.round_trip_timeout_ms (rpipe.h) */
    char *sql_dir;
    char *metrics_listen;
    char *log_level;  /* log.level */
    char *log_format; /* log.format */
    int64_t batch_max_events;
    int64_t batch_behind_events; /* batch.behind_events (consume.h) */
    int64_t batch_behind_ms;     /* batch.behind_ms (consume.h) */
    int drain; /* --drain (no property): the consumer's end-of-partition wait */
    int64_t batch_max_ms;
    int64_t detect_workers; /* workers.h */
    int64_t parse_split_min; /* main.c, ingest */
    int64_t detect_overlap; /* detect.overlap (main.c, detect_start) */
    int64_t park_above; /* detect.park_above (reorder.h, st_reorder_park) */
    int64_t assign_timeout_ms;
    int64_t retry_max_backoff_ms;
    int64_t lateness_s;
    int64_t max_future_s; /* detect.max_future_s */
    int64_t max_past_s;   /* detect.max_past_s (0: off) */
    int64_t state_ttl_s;
    int64_t state_evict_s;    /* state.evict_s */
    int64_t checkpoint_ms;    /* state.checkpoint_ms (0: every batch) */
    int64_t checkpoint_behind_ms; /* state.checkpoint_behind_ms (while behind) */
    int64_t state_blob_max;   /* state.blob_max_bytes (runwin.c) */
    int64_t hold_trims;       /* state.hold_trims (0, 1) */
    int64_t write_final_trims; /* state.write_final_trims (0, 1) */
    char *detect_enabled;     /* detect.enabled */
    /* the detectors detect.enabled leaves out: bit d for st_detectors[d]
     * (0, every detector on, in a zeroed conf: st_detect_parse_enabled) */
    uint32_t detect_off;
    int64_t db_threshold;     /* detect.denial_burst.threshold */
    int64_t db_window_s;      /* detect.denial_burst.window_s */
    int64_t db_high_targets;  /* detect.denial_burst.high_targets */
    int64_t retry_window_s;   /* detect.retry_across_paths.window_s */
    int64_t retry_min_attempts;
    int64_t vol_window_s;     /* detect.volume_anomaly.window_s */
    int64_t vol_max_requests;
    int64_t vol_max_bytes_out;
    int64_t scope_deny_count; /* detect.scope_drift.deny_loop_count */
    int64_t scope_deny_window_s;
    int64_t scope_platforms;  /* detect.scope_drift.allowlist_platforms */
    char *canary_fps;         /* detect.token_write.canary_fingerprints */
    char *evidence_key_file;          /* evidence.key_file (unset: off) */
    int64_t evidence_checkpoint_events;
    int64_t evidence_checkpoint_s;
    int64_t health_max_lag;   /* health.max_lag */
    int64_t crash_after_commits; /* fault.crash_after_pg_commits (tests) */
    int64_t crash_in_dlq_commits; /* fault.crash_in_dlq_commits (tests) */
    int64_t fail_pg_commits;     /* fault.fail_pg_commits (tests) */
    int64_t crash_after_copy_splits; /* fault.crash_after_copy_splits (tests) */
    int64_t fail_copy_sides;         /* fault.fail_copy_sides (tests) */
    int64_t fail_copy_ahead;         /* fault.fail_copy_ahead (tests) */
    int64_t stall_checkpoint_ms; /* fault.stall_checkpoint_ms (tests; fence.h) */
    int64_t slow_detect_ms;      /* fault.slow_detect_ms (tests) */
    struct st_overrides overrides; /* override.task|platform.* */
    char config_hash[17];     /* of the detect.* properties and overrides */
};

#endif
