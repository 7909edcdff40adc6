-- 011_finding_events_cache.sql: what the findings refresh reads of each
-- event, kept beside the finding_events row that names it.
--
-- sandtrail_refresh_findings (009) joined every finding_events row of each
-- finding a batch updated to the stored events, for the event's time,
-- trace id, target and skew: a finding updated again looked all of its
-- window's events up again. On a stream with a finding every dozen events
-- (scripts/bench-restart's) that join was most of an all analyzer's
-- transaction, 1.6-4.6 s a batch of 10,000 events, and the analyzer fell
-- behind a live stream of 10,000 events/s (docs/architecture.md, "The
-- findings refresh without a join per event").
--
-- Now each row carries those four values of its event, written when the
-- row is (analyzer/sinks/findings.c: looked up once, for a row not yet
-- holding them) or when the event is stored after it (the store role's
-- refresh, analyzer/sinks/refresh.c). A row whose event_ts is NULL holds
-- none of them (its event was not stored when it was written, or it was
-- written by an analyzer before this migration): the refresh looks that
-- row's event up, as before. So a finding comes out as the join alone
-- made it, whoever wrote its rows, but for two cases, on purpose:
--   - an event id stored with two times (the events' key holds ts since
--     005: a source that sent one id twice with different times): the
--     join counted the row twice and listed the id twice; now the row is
--     one event, the earliest of the two, wherever it is looked up;
--   - an event retention has removed: the join lost its time, trace id and
--     target at the finding's next refresh (its id sorted last, the rest
--     left the evidence); now the row keeps them, and the evidence of a
--     finding does not change because its events grew old.
-- This migration rewrites every finding_events row once (with a lookup of
-- its event), under the lock of its ALTER: on a large table, run it when
-- a pause of the analyzers is acceptable.
ALTER TABLE finding_events
    ADD COLUMN event_ts timestamptz,     -- events.ts; NULL: not known here
    ADD COLUMN event_trace_id text,      -- events.trace_id (when event_ts is set)
    ADD COLUMN event_target text,        -- events.target (when event_ts is set)
    ADD COLUMN event_skewed boolean;     -- events.skewed (when event_ts is set)

UPDATE finding_events fe
SET event_ts = e.ts, event_trace_id = e.trace_id, event_target = e.target,
    event_skewed = e.skewed
FROM (SELECT DISTINCT ON (source_name, event_id) source_name, event_id, ts, trace_id,
             target, skewed
      FROM events ORDER BY source_name, event_id, ts) e
WHERE e.source_name = fe.source_name AND e.event_id = fe.event_id;

-- The same results as 009's, from the rows' own values when they hold
-- them; the join only for a row that does not (gated per row: no lookup
-- for a row with its values). The LIMIT (one row of an id stored twice,
-- the earliest, as above) also keeps the lateral subquery from being
-- pulled up into a plain join, whose filter would run after the index
-- scans: the gate is a one-time filter before them.
CREATE OR REPLACE FUNCTION sandtrail_refresh_findings(ids text[]) RETURNS void
LANGUAGE sql AS $$
UPDATE findings f SET event_count = s.n, late_event_count = s.late,
    skewed_event_count = s.skewed,
    first_seen = LEAST(f.first_seen, s.first),
    last_seen = GREATEST(f.last_seen, s.last),
    evidence = jsonb_build_object('event_ids', s.ids, 'trace_ids', s.traces,
        'targets', s.targets)
FROM (SELECT v.finding_id, count(*)::int AS n,
        (count(*) FILTER (WHERE v.late))::int AS late,
        (count(*) FILTER (WHERE v.skewed))::int AS skewed,
        min(v.ts) AS first, max(v.ts) AS last,
        jsonb_agg(v.event_id ORDER BY v.ts, v.event_id) AS ids,
        coalesce(jsonb_agg(DISTINCT v.trace_id) FILTER (WHERE v.trace_id IS NOT NULL),
            '[]') AS traces,
        coalesce(jsonb_agg(DISTINCT v.target) FILTER (WHERE v.target <> ''),
            '[]') AS targets
    FROM (SELECT fe.finding_id, fe.event_id, fe.late,
                 coalesce(fe.event_ts, e.ts) AS ts,
                 CASE WHEN fe.event_ts IS NULL THEN e.trace_id ELSE fe.event_trace_id END
                     AS trace_id,
                 CASE WHEN fe.event_ts IS NULL THEN e.target ELSE fe.event_target END
                     AS target,
                 CASE WHEN fe.event_ts IS NULL THEN e.skewed ELSE fe.event_skewed END
                     AS skewed
          FROM finding_events fe
          LEFT JOIN LATERAL (SELECT ev.ts, ev.trace_id, ev.target, ev.skewed
                             FROM events ev
                             WHERE fe.event_ts IS NULL AND ev.source_name = fe.source_name
                               AND ev.event_id = fe.event_id
                             ORDER BY ev.ts LIMIT 1) e ON true
          WHERE fe.finding_id = ANY (ids)) v
    GROUP BY v.finding_id) s
WHERE f.finding_id = s.finding_id
$$;
