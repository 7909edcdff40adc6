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
 * batches in flight (a rebalance hands a partition over mid-batch), plus
 * room for the offsets of Kafka's transaction markers. */
#define ST_AHEAD_MOST_OFFSETS (2 * ST_BATCH_MOST_EVENTS + 50000)

#endif
