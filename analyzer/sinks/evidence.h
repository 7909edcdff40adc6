/* evidence.h: the sink part that keeps the tamper-evident store (issue 9).
 *
 * Per Kafka partition an RFC 6962 Merkle tree over the offsets in order
 * (sql/004_evidence.sql says what each leaf is). The tree's state is a row
 * of evidence_state, read (locked) and written in every batch's
 * transaction, so a rolled-back batch, a crash, a rebalance or a replay
 * from offset 0 continue exactly where the last commit left: offsets below
 * next_offset are already leaves and are passed over. A signed checkpoint
 * is cut after evidence.checkpoint_events leaves, before a leaf whose Kafka
 * timestamp is evidence.checkpoint_s after the first pending one, and when
 * the analyzer asks (st_sink_seal: caught up). Counts and Kafka timestamps,
 * never the wall clock or batch boundaries, decide where the first two
 * cuts fall, so one clean run and a crashed-and-replayed one sign the same
 * checkpoints. Off when evidence.key_file is unset. */
#ifndef ST_SINK_EVIDENCE_H
#define ST_SINK_EVIDENCE_H

#include "sink.h"

extern const struct st_sink_part_ops st_sink_evidence;

#endif
