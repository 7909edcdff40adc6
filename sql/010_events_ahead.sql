-- 010_events_ahead.sql: events stored ahead of their evidence.
--
-- A large batch stores its events over several connections, each share in
-- a transaction of its own, committed before the batch's transaction that
-- holds their evidence (up to a batch earlier: the store's prestorer) (analyzer/sinks/events.c; docs/architecture.md,
-- "A large batch's events over several connections"). Until that
-- transaction commits (or, after a crash, until the batch is redone) those
-- rows lie past evidence_state.next_offset. Each share, in its own
-- transaction, raises `below` past the batch's last offset of each
-- partition, so that
-- `sandtrail evidence audit` reports rows in [next_offset, below) as stored
-- ahead of their evidence (not covered yet) rather than as added after the
-- fact. `below` only grows; rows past it are still faults.
CREATE TABLE events_ahead (
    kafka_topic     text    NOT NULL,
    kafka_partition integer NOT NULL,
    below           bigint  NOT NULL,   -- every such row's offset is lower
    PRIMARY KEY (kafka_topic, kafka_partition)
);

-- sandtrail_grant_roles (006) grants the writer what it writes from a
-- fixed list; this one calls it and adds the new table, so that a
-- superuser's later call (roles made without CREATEROLE) grants it too.
ALTER FUNCTION sandtrail_grant_roles() RENAME TO sandtrail_grant_roles_006;
CREATE FUNCTION sandtrail_grant_roles() RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    missing text[] := sandtrail_grant_roles_006();
BEGIN
    IF cardinality(missing) = 0 THEN
        GRANT INSERT, UPDATE ON events_ahead TO sandtrail_writer;
    END IF;
    RETURN missing;
END $$;
REVOKE EXECUTE ON FUNCTION sandtrail_grant_roles() FROM PUBLIC;
SELECT sandtrail_grant_roles();
