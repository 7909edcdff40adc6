/* findings.h: the sink part that upserts a batch's findings and their
 * evidence rows (see sink.h). A finding's count, window and evidence are
 * recomputed from finding_events, so they come out the same however often
 * and in whatever batches its events were seen. */
#ifndef ST_SINK_FINDINGS_H
#define ST_SINK_FINDINGS_H

#include "sink.h"

extern const struct st_sink_part_ops st_sink_findings;

#endif
