-- 012_finding_events_unfilled.sql: the finding_events rows still without
-- their event's values (011), indexed.
--
-- The store role gives such rows their values for the events of each batch
-- it stores (analyzer/sinks/refresh.c). Planned against the whole table's
-- (source_name, event_id) index, a batch of 10,000 events made PostgreSQL
-- scan every finding_events row instead (a hash join: 113 ms a batch at
-- 275,000 rows, growing with the table); this index holds only the rows
-- waiting for an event -- none for an all analyzer, whose rows get their
-- values when written; a detect analyzer's until the store catches up --
-- and the same batch's update reads it: 37 ms (docs/architecture.md, "The
-- findings refresh without a join per event").
CREATE INDEX finding_events_unfilled ON finding_events (source_name, event_id)
    WHERE event_ts IS NULL;
