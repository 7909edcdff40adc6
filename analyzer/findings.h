/* findings.h: the findings one batch produces, before they are written.
 *
 * A finding is identified by a deterministic id (detector, run and the
 * event that opened it), so that reprocessing the same events updates the
 * same row instead of adding one. Within a batch, updates to one finding are
 * merged here; the sink then upserts each once. */
#ifndef ST_FINDINGS_H
#define ST_FINDINGS_H

#include <stddef.h>
#include <stdint.h>

enum st_severity { ST_SEV_LOW, ST_SEV_MEDIUM, ST_SEV_HIGH, ST_SEV_CRITICAL };

const char *st_severity_name(enum st_severity s);

struct st_finding_event {
    char *source_name;
    char *event_id;
    int late; /* arrived after its partition's watermark */
};

struct st_finding {
    char id[33];
    const char *detector; /* static string of the detector */
    int detector_version;
    enum st_severity severity;
    char *task_id;
    char *run_id;
    int64_t first_us, last_us;
    char *summary;
    struct st_finding_event *events;
    size_t nevents, capevents;
};

struct st_findings {
    struct st_finding *items;
    size_t n, cap;
};

void st_findings_init(struct st_findings *fs);
void st_findings_fini(struct st_findings *fs);
void st_findings_reset(struct st_findings *fs); /* empties, keeps memory */

/* Moves every finding of src to the end of dst; src is left empty. A
 * finding whose id dst holds already is merged into dst's, as a later
 * st_findings_update of it would (a run's findings come from one worker,
 * but not after partitions were added to the topic: workers.c), so the
 * ids of dst stay distinct. */
void st_findings_take(struct st_findings *dst, struct st_findings *src);

/* Makes a finding id: the first 128 bits of SHA-256 over the parts, hex. */
void st_finding_id(char out[33], const char *detector, const char *task_id,
                   const char *run_id, const char *key);

/* Returns the finding with this id, creating it (strings copied) if this
 * batch has not seen it. Severity only rises; first/last widen; the summary
 * is replaced. */
struct st_finding *st_findings_update(struct st_findings *fs, const char *id,
                                      const char *detector, int version,
                                      enum st_severity sev, const char *task_id,
                                      const char *run_id, int64_t first_us,
                                      int64_t last_us, const char *summary);

/* Adds one event to a finding's evidence (copied; duplicates are removed by
 * the sink). */
void st_finding_add_event(struct st_finding *f, const char *source_name,
                          const char *event_id, int late);
/* The same from the source's slen bytes and the event id's idlen bytes
 * (not NUL-terminated: parts of a window's member, runwin.h). */
void st_finding_add_event_n(struct st_finding *f, const char *source_name, size_t slen,
                            const char *event_id, size_t idlen, int late);

/* Removes one event from every finding's evidence (an event PostgreSQL
 * refused, which will not be stored), and the findings this leaves with no
 * evidence in the batch. */
void st_findings_forget_event(struct st_findings *fs, const char *source_name,
                              const char *event_id);

#endif
