/* events.h: the sink part that stores a batch's events (see sink.h).
 *
 * Rows go with COPY straight into `events`; only a replay brings rows that
 * are already there, and then the batch goes through a staging table and
 * INSERT ... ON CONFLICT DO NOTHING. Writing the same batch twice leaves the
 * same rows. */
#ifndef ST_SINK_EVENTS_H
#define ST_SINK_EVENTS_H

#include "sink.h"

extern const struct st_sink_part_ops st_sink_events;

#endif
