/* refresh.h: the sink part of the store role (analyzer.role=store) that
 * brings findings up to date with the events it stores.
 *
 * A finding's count, window and evidence (trace ids, targets, skewed
 * events) are computed by SQL from finding_events joined with events
 * (sinks/findings.c). When a detect analyzer writes the finding before a
 * store analyzer has stored its events, that join finds nothing yet; this
 * part recomputes, with the same statement's set form, every finding that
 * names an event of the batch, once those events are in the transaction.
 *
 * Both roles take one advisory transaction lock (ST_REFRESH_LOCK) before
 * their refresh, so that one of the two always sees the other's committed
 * rows: without it each could refresh under a snapshot lacking the other's
 * uncommitted rows, and the finding would keep its partial values. */
#ifndef ST_SINK_REFRESH_H
#define ST_SINK_REFRESH_H

#include "sink.h"

/* pg_advisory_xact_lock key shared by the two roles (arbitrary, fixed). */
#define ST_REFRESH_LOCK "SELECT pg_advisory_xact_lock(5357224131)"

extern const struct st_sink_part_ops st_sink_refresh;

#endif
