/* runhash.h: one Redis command per bucket for the small states of the
 * runs a checkpoint changed.
 *
 * A small run state (runwin.c, the string layout) is a field of its run's
 * bucket, <prefix>run:b:<n> (detect.h: st_detect_run_bucket_key_buf; field
 * "<run>:<detector>", st_detect_run_field_buf; value: runblob.h's string).
 * At a checkpoint each detector queues here what it writes of its field
 * (put); flush then sends, per bucket, one HSET of every field set, one
 * HDEL of every field emptied, and the key's EXPIRE (state.ttl_s) after
 * an HSET. On the denial stream a checkpoint changes thousands of runs,
 * each with its three per-run detectors: one command per bucket (64)
 * instead of one or two per run (docs/architecture.md, "Redis commands
 * per event": a command costs Redis about 5 us whatever it carries, a
 * field of a large HSET a fraction of one).
 *
 * Why the bucket's EXPIRE on every write, and what removes a run's state
 * then: the key lives as long as any of its runs is written; a run's
 * fields go state.ttl_s after its index score (the wall time of its last
 * write with its EXPIRE due, st_detect_expire_due), deleted by the sweep
 * of its partition's owner (runidx.h), as the run's own key's EXPIRE did
 * when each run had a key. A bucket no analyzer writes for state.ttl_s
 * expires whole: every run in it is older than that.
 *
 * Not thread-safe: one per detection worker (workers.c), used by its
 * thread between the detectors' end_batch and flush. */
#ifndef ST_RUNHASH_H
#define ST_RUNHASH_H

#include <stddef.h>
#include <stdint.h>

#include "analyzer.h"
#include "checkpoint.h"

struct st_runhash;

struct st_runhash *st_runhash_new(const struct st_analyzer_conf *conf);
void st_runhash_destroy(struct st_runhash *h); /* accepts NULL */

/* Queues detector `field`'s state of run (task, run; hash is
 * st_runidx_hash of them) in the run's bucket: set to data (len bytes),
 * or deleted when data is NULL. Everything is copied at once (formatted as
 * the command's arguments). A run's fields are put at most once each
 * between flushes (a field put twice would be sent twice, the later
 * winning only within the same command). */
void st_runhash_put(struct st_runhash *h, uint64_t hash, const char *task, const char *run,
                    const char *field, const char *data, size_t len);

/* Appends to ck the commands of every put since the last flush, by
 * bucket in ascending order, each bucket's fields in the order put:
 * HSET (the fields set), HDEL (the fields deleted), EXPIRE state.ttl_s
 * (when a field was set). Empties h. */
void st_runhash_flush(struct st_runhash *h, struct st_checkpoint *ck);

/* The number of puts since the last flush (tests). */
size_t st_runhash_pending(const struct st_runhash *h);

#endif
