/* refresh.h: the sink part of the store role (analyzer.role=store) that
 * brings findings up to date with the events it stores.
 *
 * A finding's count, window and evidence (trace ids, targets, skewed
 * events) are computed by SQL from finding_events joined with events
 * (sinks/findings.c). When a detect analyzer writes the finding before a
 * store analyzer has stored its events, that join finds nothing yet; this
 * part recomputes, with the same statement's set form, every finding that
 * names an event of the batch, in a transaction of its own that follows
 * the batch's (sink.c's parts[]: written by st_sink_write_after on the
 * store's committer thread, while the next batch's COPY runs), once those
 * events are committed. The batch's offsets are committed only after it,
 * so a crash in between redoes the batch and this part with it.
 *
 * Both roles take one advisory transaction lock (ST_REFRESH_LOCK) before
 * their refresh, so that one of the two always sees the other's committed
 * rows: without it each could refresh under a snapshot lacking the other's
 * uncommitted rows, and the finding would keep its partial values. (The
 * store's events commit before its refresh takes the lock: whichever
 * refresh takes the lock second sees the events and the finding_events
 * rows both.) The
 * argument needs each statement's own snapshot (read committed: the one
 * taken after the lock is granted), so both roles' connections set it
 * (ST_REFRESH_ISOLATION), whatever the server's default. */
#ifndef ST_SINK_REFRESH_H
#define ST_SINK_REFRESH_H

#include "sink.h"

/* pg_advisory_xact_lock key shared by the two roles (arbitrary, fixed). */
#define ST_REFRESH_LOCK "SELECT pg_advisory_xact_lock(5357224131)"

/* Run once per connection by both roles (a part's prepare). */
#define ST_REFRESH_ISOLATION                                                   \
    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED"

extern const struct st_sink_part_ops st_sink_refresh;

#endif
