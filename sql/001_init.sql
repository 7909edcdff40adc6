-- 001_init.sql: events and findings.
--
-- Applied by sandtrail-analyzer (or `sandtrail migrate`) inside one
-- transaction and recorded in schema_migrations. Security teams query these
-- tables directly: columns are named for what they hold, and what they
-- filter on is indexed.

CREATE TYPE severity AS ENUM ('low', 'medium', 'high', 'critical');

-- Every event the analyzer consumed, once: event_id is unique per source.
CREATE TABLE events (
    source_name     text        NOT NULL,
    event_id        text        NOT NULL,
    source_kind     text        NOT NULL CHECK (source_kind IN ('sandbox', 'proxy', 'broker')),
    source_platform text,
    ts              timestamptz NOT NULL,          -- event time
    task_id         text        NOT NULL,
    run_id          text        NOT NULL,
    trace_id        text,
    type            text        NOT NULL,
    decision        text        NOT NULL CHECK (decision IN ('allow', 'deny', 'error')),
    reason          text,
    target          text        NOT NULL DEFAULT '', -- host, command, path or scope acted on
    body            jsonb       NOT NULL,          -- the whole event as delivered
    kafka_topic     text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    ingested_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_name, event_id)
);
CREATE INDEX events_run_ts ON events (task_id, run_id, ts);
CREATE INDEX events_ts ON events (ts);
CREATE INDEX events_trace ON events (trace_id) WHERE trace_id IS NOT NULL;

-- One row per (detector, run, episode), updated as evidence grows.
CREATE TABLE findings (
    finding_id       text        PRIMARY KEY,     -- deterministic: replays update, never add
    detector         text        NOT NULL,
    detector_version integer     NOT NULL,
    config_hash      text        NOT NULL,        -- of the detect.* settings in force
    severity         severity    NOT NULL,
    task_id          text        NOT NULL,
    run_id           text        NOT NULL,
    first_seen       timestamptz NOT NULL,        -- event time of the earliest evidence
    last_seen        timestamptz NOT NULL,        -- event time of the latest evidence
    event_count      integer     NOT NULL,
    late_event_count integer     NOT NULL DEFAULT 0, -- evidence that arrived after the watermark
    evidence         jsonb       NOT NULL,        -- event_ids, trace_ids, targets
    summary          text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX findings_run ON findings (task_id, run_id);
CREATE INDEX findings_detector_severity ON findings (detector, severity);
CREATE INDEX findings_last_seen ON findings (last_seen);

-- The events behind each finding; the source of event_count and evidence.
CREATE TABLE finding_events (
    finding_id  text NOT NULL REFERENCES findings (finding_id) ON DELETE CASCADE,
    source_name text NOT NULL,
    event_id    text NOT NULL,
    late        boolean NOT NULL DEFAULT false,  -- arrived after the watermark
    -- no foreign key to events: a replayed window may name an event whose
    -- own row arrives in a later transaction
    PRIMARY KEY (finding_id, source_name, event_id)
);
CREATE INDEX finding_events_event ON finding_events (source_name, event_id);

-- What stood behind a finding, across the three kinds of source: the
-- sandbox commands and the credentials of the same run, linked by trace_id
-- or by run within ten minutes of the finding. A view, so that it is always
-- complete, whatever order the events arrived in.
CREATE VIEW finding_context AS
SELECT f.finding_id,
       coalesce(jsonb_agg(DISTINCT e.body -> 'attrs' ->> 'command')
                FILTER (WHERE e.type = 'exec'), '[]') AS commands,
       coalesce(jsonb_agg(DISTINCT e.body -> 'identity' ->> 'credential_id')
                FILTER (WHERE e.type IN ('token_issue', 'token_use')
                        AND e.body -> 'identity' ->> 'credential_id' IS NOT NULL),
                '[]') AS credentials,
       coalesce(jsonb_agg(DISTINCT e.trace_id)
                FILTER (WHERE e.trace_id IS NOT NULL), '[]') AS trace_ids
FROM findings f
LEFT JOIN events e
       ON e.task_id = f.task_id AND e.run_id = f.run_id
      AND (e.trace_id IN (SELECT jsonb_array_elements_text(f.evidence -> 'trace_ids'))
           OR e.ts BETWEEN f.first_seen - interval '10 minutes' AND f.last_seen)
GROUP BY f.finding_id;
