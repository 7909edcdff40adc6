-- 005_partitions.sql: events partitioned by day of event time, so that
-- retention drops whole days instead of deleting rows one by one.
--
--   events_YYYYMMDD     one partition per UTC day of `ts`, made on demand by
--                       sandtrail_event_partitions() (the analyzer calls it
--                       in the batch transaction before it stores the rows)
--   events_expired      the default partition: only events of a day that
--                       retention has already removed arrive here (a replay,
--                       a straggler); the next retention run deletes them
--   retention_runs      what each `sandtrail retention` removed
--
-- A partitioned table's primary key must hold its partition key, so an
-- event is now unique by (source_name, event_id, ts). A resent or replayed
-- event is the same bytes, so the same ts: it is still stored once.

ALTER TABLE events RENAME TO events_unpartitioned;
ALTER INDEX events_pkey RENAME TO events_unpartitioned_pkey;
ALTER INDEX events_run_ts RENAME TO events_unpartitioned_run_ts;
ALTER INDEX events_ts RENAME TO events_unpartitioned_ts;
ALTER INDEX events_trace RENAME TO events_unpartitioned_trace;
ALTER INDEX events_kafka RENAME TO events_unpartitioned_kafka; -- 004_evidence.sql

CREATE TABLE events (LIKE events_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS
                     INCLUDING COMMENTS)
    PARTITION BY RANGE (ts);
ALTER TABLE events ADD PRIMARY KEY (source_name, event_id, ts);
CREATE INDEX events_run_ts ON events (task_id, run_id, ts);
CREATE INDEX events_ts ON events (ts);
CREATE INDEX events_trace ON events (trace_id) WHERE trace_id IS NOT NULL;
CREATE INDEX events_id ON events (source_name, event_id);
CREATE INDEX events_kafka ON events (kafka_topic, kafka_partition, kafka_offset);
CREATE TABLE events_expired PARTITION OF events DEFAULT;

-- What retention removed: each run, the day up to which events are gone
-- (`horizon`: every event before it), the partitions dropped, the rows, and
-- per Kafka partition the offsets of the removed events.
CREATE TABLE retention_runs (
    run_id        bigserial   PRIMARY KEY,
    run_at        timestamptz NOT NULL DEFAULT now(),
    run_by        text        NOT NULL DEFAULT session_user,
    keep_days     integer     NOT NULL,
    horizon       timestamptz NOT NULL,
    partitions    text[]      NOT NULL,
    events        bigint      NOT NULL,
    offsets       jsonb       NOT NULL  -- [{"topic","partition","min","max","events"}]
);

-- Makes the day partitions that rows of these days need, except for days
-- retention has removed (their rows go to events_expired). Owned by the
-- migrations' owner, so the analyzer's writer role needs no CREATE right.
-- Safe when analyzers race: a partition made meanwhile is not an error.
CREATE FUNCTION sandtrail_event_partitions(p_days date[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    d date;
    horizon timestamptz;
    made integer := 0;
    name text;
BEGIN
    SELECT max(r.horizon) INTO horizon FROM retention_runs r;
    FOREACH d IN ARRAY p_days LOOP
        CONTINUE WHEN d IS NULL;
        CONTINUE WHEN horizon IS NOT NULL AND (d::timestamp AT TIME ZONE 'UTC') < horizon;
        name := 'events_' || to_char(d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(name) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                           name, d::timestamp AT TIME ZONE 'UTC',
                           (d + 1)::timestamp AT TIME ZONE 'UTC');
            made := made + 1;
        EXCEPTION WHEN duplicate_table OR unique_violation THEN
            NULL;
        END;
    END LOOP;
    RETURN made;
END $$;

-- Move what was stored before this migration, then the old table. The view
-- of 001 reads events, so it is made again over the new table.
SELECT sandtrail_event_partitions(coalesce(array_agg(DISTINCT (ts AT TIME ZONE 'UTC')::date),
                                           '{}'))
FROM events_unpartitioned;
INSERT INTO events SELECT * FROM events_unpartitioned;
DROP VIEW finding_context;
DROP TABLE events_unpartitioned;

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
