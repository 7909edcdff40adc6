/* outbox.h: the sink part that writes the alert outbox (see sink.h and
 * sql/003_alerts.sql). After the findings part has upserted a batch's
 * findings, one statement compares each of them with the notifications
 * already recorded and adds a 'created' row for a finding never notified
 * and a 'severity_raised' row when its stored severity is above every
 * severity notified so far. Rows are keyed (finding_id, kind, severity),
 * so a redone batch or a replay from offset 0 adds nothing. */
#ifndef ST_SINK_OUTBOX_H
#define ST_SINK_OUTBOX_H

#include "sink.h"

extern const struct st_sink_part_ops st_sink_outbox;

#endif
