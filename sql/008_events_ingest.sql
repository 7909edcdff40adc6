-- 008_events_ingest.sql: the events table's indexes chosen for ingest.
--
-- events_id (source_name, event_id) is the leading part of the primary key
-- (source_name, event_id, ts): every lookup by (source_name, event_id) --
-- the findings refresh's join from finding_events, the analysts' view of a
-- finding's events (006) -- is served by the primary key's index as well,
-- partition by partition as before. Keeping both cost about a tenth of every COPY into events
-- (scripts/bench/events-ingest; docs/architecture.md, "The events table at
-- ingest"). No view, role, dashboard, CLI query or test names it.
DROP INDEX IF EXISTS events_id;
