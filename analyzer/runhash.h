/* runhash.h: one Redis command per run for its detectors' small states.
 *
 * A small run state (runwin.c, the string layout) is a field of the run's
 * hash, <prefix>run:h:<run> (st_detect_run_hash_key; field: the
 * detector's name, value: runblob.h's string), shared by every detector
 * of the run. At a checkpoint each detector queues here what it writes of
 * its field (put); flush then sends, per run, one HSET of every field
 * set, one HDEL of every field emptied, and an EXPIRE when any detector
 * found its EXPIRE due: on the denial stream a run's three per-run
 * detectors change in the same batch, and cost one command instead of
 * three (docs/architecture.md, "Redis commands per event").
 *
 * Why an EXPIRE only when some detector's is due (st_detect_expire_due,
 * tracked per detector): a detector whose field stayed in Redis since it
 * last sent the key's EXPIRE knows the key existed all along (a hash
 * with a field exists), so the TTL that EXPIRE set is still on it; a
 * detector whose field was deleted (emptied, switched to the log and
 * hashes) or never written has its EXPIRE due on its next write. Nothing
 * else deletes a field or the key but its TTL, and no DEL of the whole
 * key is ever sent: a detector deletes only its field.
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

/* Queues field `field` of the hash of run (task, run; hash is
 * st_runidx_hash of them): set to data (len bytes, copied), or deleted
 * when data is NULL. expire: the key's EXPIRE is due (sent with the
 * run's HSET). task, run and field are not copied: they must live until
 * flush. A run's fields are put at most once each between flushes. */
void st_runhash_put(struct st_runhash *h, uint64_t hash, const char *task, const char *run,
                    const char *field, const char *data, size_t len, int expire);

/* Appends to ck the commands of every run put since the last flush, in
 * the order each run was first put: HSET (the fields set), HDEL (the
 * fields deleted), EXPIRE state.ttl_s (any put with expire and a field
 * set). Empties h. */
void st_runhash_flush(struct st_runhash *h, struct st_checkpoint *ck);

/* The number of runs queued since the last flush (tests). */
size_t st_runhash_pending(const struct st_runhash *h);

#endif
