/* runkeys.h: one record per run for all the run windows of a detection
 * part (runwin.h), so that an event's run is looked up once, not once per
 * per-run detector.
 *
 * A part's per-run detectors (denial_burst, retry_across_paths,
 * volume_anomaly; scope_drift's denials in the global part) each keep a
 * window per run. Each used to keep its own table of runs: an event cost
 * three lookups, three copies of the ids, three entries in the run index
 * and, at each checkpoint, three comparisons of the ids to group the run's
 * fields (runhash.h), each a cache miss on a state 250,000 runs wide
 * (docs/architecture.md, "Where the analyzer's time goes"). Here a run's
 * ids and hash are kept once, with a pointer to each window's state of it
 * (a slot per window): the record's address names the run within the
 * part.
 *
 * A record lives while any slot holds a state: st_runkeys_set of the last
 * slot to NULL frees it. The ids stay valid as long as the record.
 *
 * Not thread-safe: one per detection part, used by its thread (workers.c).
 * A window given no table by its context makes its own (tests). */
#ifndef ST_RUNKEYS_H
#define ST_RUNKEYS_H

#include <stdint.h>

struct st_event;

/* windows per table; a window past it makes its own table */
#define ST_RUNKEYS_SLOTS 6

struct st_runkey {
    struct st_runkey *hnext;   /* hash chain (runkeys.c's own) */
    uint64_t hash;             /* st_event_run_hash */
    const char *task_id, *run_id; /* in the record's own block */
    void *slot[ST_RUNKEYS_SLOTS]; /* each window's state of the run, or NULL */
    /* the run index entry noted for the run (runwin.c): in which index
     * and flush of it (st_runidx_flushes), and whether with its expiry due
     * (then for which second) */
    const void *noted_by;
    uint64_t noted;
    int64_t noted_s;
    int32_t noted_part; /* the partition whose index it was noted in */
    uint8_t noted_due;
};

struct st_runkeys;

struct st_runkeys *st_runkeys_new(void);
/* Frees the table; every record must have been emptied (its windows
 * destroyed or forgotten first). Accepts NULL. */
void st_runkeys_destroy(struct st_runkeys *t);

/* A slot for a new window, or -1 when all are taken. */
int st_runkeys_slot(struct st_runkeys *t);
/* Gives a window's slot back (the window destroyed: no record holds a
 * state in it any more). */
void st_runkeys_slot_release(struct st_runkeys *t, int slot);

/* The record of ev's run, made (every slot empty) when absent when make is
 * set, else NULL then. The last event asked for is remembered until
 * st_runkeys_begin: the windows of a part ask in turn for the same event. */
struct st_runkey *st_runkeys_get(struct st_runkeys *t, const struct st_event *ev, int make);

/* Hints for an event a few ahead of the one being looked up (cache
 * prefetches, no effect on results): stage 1 the table slot of its run's
 * hash, stage 2 (a few events later, the slot then in cache) the record
 * it points to. */
void st_runkeys_prefetch(const struct st_runkeys *t, uint64_t hash, int stage);

/* Before a batch's first st_runkeys_get: events of the last batch are
 * gone, and a new one may have the same address. */
void st_runkeys_begin(struct st_runkeys *t);

/* Sets k's slot; setting the last one to NULL frees k. */
void st_runkeys_set(struct st_runkeys *t, struct st_runkey *k, int slot, void *state);

/* Records in the table (tests, stats). */
uint64_t st_runkeys_count(const struct st_runkeys *t);

#endif
