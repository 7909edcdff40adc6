-- 009_finding_refresh.sql: what a finding's count, window and evidence
-- follow from, written once.
--
-- A finding's event_count, late and skewed counts, first_seen/last_seen
-- and evidence (event ids in time order, trace ids, targets) are computed
-- from its finding_events rows joined to the stored events, so they come
-- out the same however often and in whatever batches the events were seen.
-- Two writers call it (analyzer/sinks/findings.c for the findings of a
-- batch; analyzer/sinks/refresh.c, analyzer.role=store, for the findings
-- naming the events a batch stored), so that a store and a detect analyzer
-- leave what one analyzer of the all role leaves. It runs with the
-- caller's rights: only a role that may update findings can use it.
CREATE FUNCTION sandtrail_refresh_findings(ids text[]) RETURNS void
LANGUAGE sql AS $$
UPDATE findings f SET event_count = s.n, late_event_count = s.late,
    skewed_event_count = s.skewed,
    first_seen = LEAST(f.first_seen, s.first),
    last_seen = GREATEST(f.last_seen, s.last),
    evidence = jsonb_build_object('event_ids', s.ids, 'trace_ids', s.traces,
        'targets', s.targets)
FROM (SELECT fe.finding_id, count(*)::int AS n,
        (count(*) FILTER (WHERE fe.late))::int AS late,
        (count(*) FILTER (WHERE e.skewed))::int AS skewed,
        min(e.ts) AS first, max(e.ts) AS last,
        jsonb_agg(fe.event_id ORDER BY e.ts, fe.event_id) AS ids,
        coalesce(jsonb_agg(DISTINCT e.trace_id) FILTER (WHERE e.trace_id IS NOT NULL),
            '[]') AS traces,
        coalesce(jsonb_agg(DISTINCT e.target) FILTER (WHERE e.target <> ''),
            '[]') AS targets
    FROM finding_events fe LEFT JOIN events e USING (source_name, event_id)
    WHERE fe.finding_id = ANY (ids)
    GROUP BY fe.finding_id) s
WHERE f.finding_id = s.finding_id
$$;
