-- 004_evidence.sql: the tamper-evident event store (issue 9).
--
-- Per Kafka partition the analyzer keeps an RFC 6962 Merkle tree over the
-- partition's offsets in order: an offset that holds a stored event is the
-- leaf SHA-256(0x00 || events.raw); one that holds none (dead-lettered, a
-- duplicate of an event already stored, never delivered) is a row of
-- evidence_skips and the leaf of its st_evidence_skip_leaf() text. Signed
-- checkpoints of the tree are written in the transaction of the rows they
-- cover. `sandtrail evidence audit` recomputes them from these tables.

-- The event exactly as delivered and hashed: body (jsonb) normalises it.
-- NULL for rows stored before this migration (not covered by any checkpoint).
ALTER TABLE events ADD COLUMN raw text;
CREATE INDEX events_kafka ON events (kafka_topic, kafka_partition, kafka_offset);

-- Offsets first..last_offset of a partition that hold no stored event.
CREATE TABLE evidence_skips (
    kafka_topic     text    NOT NULL,
    kafka_partition integer NOT NULL,
    kafka_offset    bigint  NOT NULL,
    last_offset     bigint  NOT NULL,
    reason          text    NOT NULL,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);

-- One signed checkpoint: leaves first_index..tree_size-1 (offsets
-- first_offset..last_offset) and the tree head after them. body is the
-- exact signed document (JSON); the other columns repeat it for queries.
CREATE TABLE evidence_checkpoints (
    kafka_topic     text        NOT NULL,
    kafka_partition integer     NOT NULL,
    seq             bigint      NOT NULL,      -- 1, 2, ... per partition
    first_offset    bigint      NOT NULL,
    last_offset     bigint      NOT NULL,
    first_index     bigint      NOT NULL,
    tree_size       bigint      NOT NULL,
    root            text        NOT NULL,      -- hex
    prev_hash       text        NOT NULL,      -- SHA-256 of the previous body, hex
    hash            text        NOT NULL,      -- SHA-256 of body, hex
    cp_time         timestamptz NOT NULL,      -- Kafka timestamp of the last leaf
    key_id          text        NOT NULL,
    body            text        NOT NULL,
    signature       text        NOT NULL,      -- Ed25519 of body, hex
    frontier        bytea       NOT NULL,      -- st_merkle_frontier_save() after it
    -- the leaf hashes of first_index..tree_size-1 (32 bytes each): when they
    -- still give the signed root, audit names the very row whose bytes changed
    leaves          bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kafka_topic, kafka_partition, seq)
);
CREATE INDEX evidence_checkpoints_offsets
    ON evidence_checkpoints (kafka_topic, kafka_partition, last_offset);

-- The analyzer's tree per partition as of the last committed batch, so that
-- a restart, a rebalance or a replay continues exactly where it stopped.
CREATE TABLE evidence_state (
    kafka_topic      text    NOT NULL,
    kafka_partition  integer NOT NULL,
    next_offset      bigint  NOT NULL,        -- first offset not yet a leaf
    frontier         bytea   NOT NULL,
    seq              bigint  NOT NULL,        -- of the last checkpoint
    last_hash        text    NOT NULL,
    pending_leaves   bigint  NOT NULL,        -- leaves since the last checkpoint
    pending_first    bigint  NOT NULL,        -- their first offset
    pending_since_ms bigint  NOT NULL,        -- Kafka timestamp of the first
    pending_last_ms  bigint  NOT NULL,        -- and of the last
    pending          bytea   NOT NULL,        -- their leaf hashes
    PRIMARY KEY (kafka_topic, kafka_partition)
);
