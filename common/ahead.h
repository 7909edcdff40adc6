/* ahead.h: how far a split batch's events may lie ahead of their evidence
 * (sql/010_events_ahead.sql), written once for the analyzer, which bounds
 * its batches by it, and for `sandtrail evidence audit`, which trusts an
 * events_ahead mark only that far past a partition's evidence. */
#ifndef ST_AHEAD_H
#define ST_AHEAD_H

/* The most events one batch may hold (batch.max_events, batch.behind_events). */
#define ST_BATCH_MOST_EVENTS 100000

/* Offsets past evidence_state.next_offset (or below the mark, for a
 * partition without evidence yet) that events stored ahead may span: two
 * batches (the writer's, whose transaction is not committed yet, and the
 * next, whose events the store's prestorer stores meanwhile: store.h), one
 * batch more of margin (a rebalance hands a partition over mid-batch, and
 * the new owner's batches need not end where the old one's did), plus room
 * for the offsets of Kafka's transaction markers (none from the collector,
 * whose producer is idempotent, not transactional). */
#define ST_AHEAD_MOST_OFFSETS (3 * ST_BATCH_MOST_EVENTS + 50000)

#endif
