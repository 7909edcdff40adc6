-- 006_analysts.sql: the views analysts query, and least-privilege roles.
--
-- Every view reads the tables the analyzer writes; none stores anything.
-- The dashboards in dashboards/ and the evidence export's queries.sql use
-- these views, so a number on a dashboard is the number an auditor
-- reconciles with. Example queries: README.md, "Querying in SQL".

-- Findings nobody has closed yet (open or acknowledged), newest evidence
-- first, with how long they have been waiting.
CREATE VIEW open_findings AS
SELECT f.finding_id, f.detector, f.severity, f.status, f.task_id, f.run_id,
       f.first_seen, f.last_seen, f.event_count, f.summary, f.created_at,
       now() - f.created_at AS age
FROM findings f
WHERE f.status IN ('open', 'acknowledged');

-- Every event of every run in one timeline across the three kinds of
-- source: what the sandbox ran, what the proxy let through or refused, what
-- the broker issued. `detail` is the one line a reader needs per type; the
-- findings an event is evidence for are listed with it.
CREATE VIEW run_timeline AS
SELECT e.task_id, e.run_id, e.ts, e.source_kind, e.source_name,
       e.source_platform, e.type, e.decision, e.reason, e.target, e.trace_id,
       e.event_id,
       CASE e.type
           WHEN 'exec' THEN concat_ws(' ', e.body -> 'attrs' ->> 'command',
               '(exit ' || (e.body -> 'attrs' ->> 'exit_code') || ')')
           WHEN 'request' THEN concat_ws(' ', e.body -> 'attrs' ->> 'method',
               (e.body -> 'attrs' ->> 'host') ||
                   coalesce(':' || (e.body -> 'attrs' ->> 'port'), '') ||
                   coalesce(e.body -> 'attrs' ->> 'path', ''),
               e.body -> 'attrs' ->> 'status')
           WHEN 'token_issue' THEN concat_ws(' ',
               e.body -> 'identity' ->> 'credential_id',
               (SELECT string_agg(s, ',') FROM jsonb_array_elements_text(
                    CASE WHEN jsonb_typeof(e.body -> 'identity' -> 'scopes') = 'array'
                         THEN e.body -> 'identity' -> 'scopes' END) s))
           WHEN 'token_use' THEN concat_ws(' ',
               e.body -> 'identity' ->> 'credential_id',
               e.body -> 'attrs' ->> 'operation')
           ELSE e.target
       END AS detail,
       CASE WHEN jsonb_typeof(e.body -> 'redactions') = 'array'
            THEN jsonb_array_length(e.body -> 'redactions') ELSE 0 END AS redactions,
       coalesce((SELECT array_agg(fe.finding_id ORDER BY fe.finding_id)
                 FROM finding_events fe
                 WHERE fe.source_name = e.source_name AND fe.event_id = e.event_id),
                '{}') AS finding_ids
FROM events e;

-- One row per run: what it did, where it went, which credentials it held,
-- what was found and what was redacted.
CREATE VIEW run_summary AS
WITH ev AS (
    SELECT task_id, run_id,
           min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS events,
           count(*) FILTER (WHERE type = 'exec') AS commands,
           count(*) FILTER (WHERE type = 'exec' AND
                            (body -> 'attrs' ->> 'exit_code') IS DISTINCT FROM '0'
                            AND body -> 'attrs' ? 'exit_code') AS commands_failed,
           count(*) FILTER (WHERE type = 'file_read') AS files_read,
           count(*) FILTER (WHERE type = 'file_write') AS files_written,
           count(*) FILTER (WHERE type IN ('commit', 'upload')) AS commits_uploads,
           count(*) FILTER (WHERE type = 'request' AND decision = 'allow') AS requests_allowed,
           count(*) FILTER (WHERE type = 'request' AND decision <> 'allow') AS requests_denied,
           count(DISTINCT target) FILTER (WHERE type = 'request' AND decision = 'allow')
               AS destinations_allowed,
           count(DISTINCT target) FILTER (WHERE type = 'request' AND decision <> 'allow')
               AS destinations_denied,
           count(DISTINCT body -> 'identity' ->> 'credential_id')
               FILTER (WHERE type = 'token_issue') AS credentials_issued,
           count(*) FILTER (WHERE type = 'token_deny') AS credential_denials,
           coalesce(sum(CASE WHEN jsonb_typeof(body -> 'redactions') = 'array'
                             THEN jsonb_array_length(body -> 'redactions') END), 0)
               AS redactions
    FROM events
    GROUP BY task_id, run_id
), fi AS (
    SELECT task_id, run_id, count(*) AS findings,
           count(*) FILTER (WHERE status IN ('open', 'acknowledged')) AS findings_open,
           max(severity) AS max_severity
    FROM findings
    GROUP BY task_id, run_id
)
SELECT ev.*, coalesce(fi.findings, 0) AS findings,
       coalesce(fi.findings_open, 0) AS findings_open, fi.max_severity
FROM ev LEFT JOIN fi USING (task_id, run_id);

-- Proxy traffic by destination host across runs.
CREATE VIEW egress_by_destination AS
SELECT e.target AS host,
       count(*) AS requests,
       count(*) FILTER (WHERE e.decision = 'allow') AS allowed,
       count(*) FILTER (WHERE e.decision <> 'allow') AS denied,
       count(DISTINCT (e.task_id, e.run_id)) AS runs,
       count(DISTINCT e.source_name) AS proxies,
       coalesce(sum((e.body -> 'attrs' ->> 'bytes_out')::numeric)
                FILTER (WHERE jsonb_typeof(e.body -> 'attrs' -> 'bytes_out') = 'number'),
                0) AS bytes_out,
       min(e.ts) AS first_seen, max(e.ts) AS last_seen
FROM events e
WHERE e.type = 'request'
GROUP BY e.target;

-- Each credential a broker issued, from issue to its end: scopes and
-- expiry as issued, how often and by how many runs it was used (more than
-- one is a replay), the uses refused, the broker's refusals of the issuing
-- run, and when it was revoked or expired.
CREATE VIEW credential_lifecycle AS
WITH c AS (
    SELECT body -> 'identity' ->> 'credential_id' AS credential_id,
           task_id, run_id, type, decision, ts, body
    FROM events
    WHERE type IN ('token_issue', 'token_use', 'token_revoke', 'token_expire')
      AND body -> 'identity' ->> 'credential_id' IS NOT NULL
), agg AS (
    SELECT c.credential_id,
           coalesce(min(c.task_id) FILTER (WHERE c.type = 'token_issue'), min(c.task_id))
               AS task_id,
           coalesce(min(c.run_id) FILTER (WHERE c.type = 'token_issue'), min(c.run_id))
               AS run_id,
           min(c.ts) FILTER (WHERE c.type = 'token_issue') AS issued_at,
           min(c.body -> 'attrs' ->> 'expires_at') FILTER (WHERE c.type = 'token_issue')
               AS expires_at,
           (array_agg(c.body -> 'identity' -> 'scopes')
                FILTER (WHERE c.type = 'token_issue'))[1] AS scopes,
           min(c.body -> 'identity' ->> 'audience') FILTER (WHERE c.type = 'token_issue')
               AS audience,
           count(*) FILTER (WHERE c.type = 'token_use') AS uses,
           count(*) FILTER (WHERE c.type = 'token_use' AND c.decision <> 'allow')
               AS uses_refused,
           count(DISTINCT (c.task_id, c.run_id)) FILTER (WHERE c.type = 'token_use')
               AS using_runs,
           min(c.ts) FILTER (WHERE c.type = 'token_use') AS first_used,
           max(c.ts) FILTER (WHERE c.type = 'token_use') AS last_used,
           min(c.ts) FILTER (WHERE c.type = 'token_revoke') AS revoked_at,
           min(c.ts) FILTER (WHERE c.type = 'token_expire') AS expired_at
    FROM c
    GROUP BY c.credential_id
), denials AS (
    SELECT task_id, run_id, count(*) AS run_denials
    FROM events WHERE type = 'token_deny'
    GROUP BY task_id, run_id
)
SELECT agg.*, coalesce(denials.run_denials, 0) AS run_denials,
       CASE WHEN agg.revoked_at IS NOT NULL THEN 'revoked'
            WHEN agg.expired_at IS NOT NULL THEN 'expired'
            ELSE 'active' END AS state
FROM agg LEFT JOIN denials USING (task_id, run_id);

-- Every source with its last event and its recent rate. A source that
-- normally writes every few seconds and has been quiet for far longer is
-- what an agent that switched off its own logging looks like: `silent` is
-- true when the time since its last event is over three times its median
-- gap of the last day (and over a minute).
CREATE VIEW source_health AS
WITH recent AS (
    SELECT source_name, source_kind, source_platform, ingested_at,
           ingested_at - lag(ingested_at) OVER (PARTITION BY source_name
                                                ORDER BY ingested_at) AS gap
    FROM events
    WHERE ingested_at > now() - interval '1 day'
), gaps AS (
    SELECT source_name,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM gap))
               FILTER (WHERE gap > interval '0') AS median_gap_s
    FROM recent
    GROUP BY source_name
), last AS (
    SELECT source_name, min(source_kind) AS source_kind,
           min(source_platform) AS source_platform,
           max(ts) AS last_event_ts, max(ingested_at) AS last_ingested_at,
           count(*) FILTER (WHERE ingested_at > now() - interval '1 hour') AS events_1h,
           count(*) FILTER (WHERE ingested_at > now() - interval '1 day') AS events_24h
    FROM events
    GROUP BY source_name
)
SELECT l.source_name, l.source_kind, l.source_platform, l.last_event_ts,
       l.last_ingested_at, now() - l.last_ingested_at AS quiet_for,
       l.events_1h, l.events_24h, g.median_gap_s,
       (extract(epoch FROM now() - l.last_ingested_at) > 60 AND
        extract(epoch FROM now() - l.last_ingested_at) >
            3 * coalesce(g.median_gap_s, 3600)) AS silent
FROM last l LEFT JOIN gaps g USING (source_name);

-- Least-privilege roles (cluster-wide group roles, NOLOGIN; grant them to
-- people and to the daemons' login roles, README "Roles"):
--   sandtrail_writer   the analyzer and the alerter: add events (never change
--                      or remove one), write findings and what describes them
--   sandtrail_analyst  read every table and view; change a finding's triage
--                      status only through sandtrail_triage(), which records
--                      who and why
--   sandtrail_auditor  read every table and view, for exports
-- Nobody but the owner that runs the migrations may change or delete a
-- stored event: that is what the evidence audit checks.
--
-- Roles are made when the owner may (CREATEROLE); an owner that may not
-- still migrates, with a notice: a superuser then makes the three roles and
-- the owner runs SELECT sandtrail_grant_roles(). Every later migration that
-- adds a table a role needs calls it again.

-- The analyzer makes the day partitions of the events it stores through
-- this function only (sql/005_partitions.sql); triage goes through
-- sandtrail_triage, which runs with its owner's rights so that it can record
-- the change it makes (the history row names the caller's own role,
-- session_user, beside the person it was given).
REVOKE EXECUTE ON FUNCTION sandtrail_event_partitions(date[]) FROM PUBLIC;
ALTER FUNCTION sandtrail_triage(text, finding_status, text, text)
    SECURITY DEFINER SET search_path = public, pg_temp;
REVOKE EXECUTE ON FUNCTION sandtrail_triage(text, finding_status, text, text) FROM PUBLIC;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

CREATE FUNCTION sandtrail_grant_roles() RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    r text;
    missing text[] := '{}';
    -- what the writer writes, and how; everything else it only reads
    writes CONSTANT text[][] := ARRAY[
        ['events', 'INSERT'],
        ['findings', 'INSERT, UPDATE'],
        ['finding_events', 'INSERT, UPDATE'],
        ['notifications', 'INSERT'],
        ['notification_queue', 'INSERT, UPDATE'],
        ['deliveries', 'INSERT'],
        ['evidence_skips', 'INSERT'],
        ['evidence_checkpoints', 'INSERT'],
        ['evidence_state', 'INSERT, UPDATE']];
BEGIN
    FOREACH r IN ARRAY ARRAY['sandtrail_writer', 'sandtrail_analyst', 'sandtrail_auditor']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN
                    NULL; -- made meanwhile by a migration of another database
                WHEN insufficient_privilege THEN
                    missing := missing || r;
            END;
        END IF;
    END LOOP;
    IF cardinality(missing) > 0 THEN
        RAISE NOTICE 'roles % not made (no CREATEROLE): a superuser makes them with '
                     'CREATE ROLE ... NOLOGIN, then the owner runs SELECT '
                     'sandtrail_grant_roles()', missing;
        RETURN missing;
    END IF;
    EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO sandtrail_writer,'
                   ' sandtrail_analyst, sandtrail_auditor', current_database());
    GRANT USAGE ON SCHEMA public TO sandtrail_writer, sandtrail_analyst, sandtrail_auditor;
    GRANT SELECT ON ALL TABLES IN SCHEMA public
        TO sandtrail_writer, sandtrail_analyst, sandtrail_auditor;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public
        GRANT SELECT ON TABLES TO sandtrail_analyst, sandtrail_auditor;
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO sandtrail_writer;
    FOR i IN 1 .. array_length(writes, 1) LOOP
        IF to_regclass(writes[i][1]) IS NOT NULL THEN
            EXECUTE format('GRANT %s ON %I TO sandtrail_writer', writes[i][2], writes[i][1]);
        END IF;
    END LOOP;
    GRANT EXECUTE ON FUNCTION sandtrail_event_partitions(date[]) TO sandtrail_writer;
    GRANT EXECUTE ON FUNCTION sandtrail_triage(text, finding_status, text, text)
        TO sandtrail_analyst;
    RETURN missing;
END $$;

REVOKE EXECUTE ON FUNCTION sandtrail_grant_roles() FROM PUBLIC;
SELECT sandtrail_grant_roles();
