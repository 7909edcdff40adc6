-- 007_retention_evidence.sql: what retention removed from the evidence
-- store, so that an audit of what remains still checks every checkpoint.
--
-- For each checkpoint some of whose events a `sandtrail retention` run
-- removed: their offsets and how many were of each run. The checkpoint's
-- signed leaf hashes (evidence_checkpoints.leaves) stand in for the removed
-- rows: `sandtrail evidence audit` recomputes the root from the rows that
-- remain and those hashes, so the chain still verifies, and it tells a
-- pruned offset from a deleted one.
CREATE TABLE evidence_pruned (
    retention_run   bigint   NOT NULL REFERENCES retention_runs (run_id),
    kafka_topic     text     NOT NULL,
    kafka_partition integer  NOT NULL,
    seq             bigint   NOT NULL,   -- the checkpoint
    offsets         bigint[] NOT NULL,   -- removed, ascending
    runs            jsonb    NOT NULL,   -- [[task, run, n], ...] of those removed
    PRIMARY KEY (kafka_topic, kafka_partition, seq, retention_run)
);

SELECT sandtrail_grant_roles();
