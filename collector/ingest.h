/* ingest.h: what happens to input lines, whatever the input.
 *
 * accept.c turns a line into a redacted, validated event; here it is
 * produced to the events topic, or, rejected, reported (stderr, metrics,
 * the caller's on_reject) and produced, redacted, to the dead-letter topic
 * with its reason. The file, follow and HTTP inputs all hand their lines to
 * st_ingest_add and call st_ingest_drain before they need the outcome.
 *
 * Lines are accepted in batches by input.workers executors, each with its
 * own st_accept (decoder, redactor): worker threads plus the calling
 * thread, which reads, helps, and produces the outcomes strictly in input
 * order. While one batch is being accepted the caller fills the next, so
 * reading and producing overlap the accepting. Everything that touches the
 * producer, the metrics and stderr happens on the calling thread. One
 * st_ingest serves one calling thread at a time; inputs that take lines on
 * several threads at once (HTTP) use one st_ingest per thread. */
#ifndef ST_INGEST_H
#define ST_INGEST_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "json.h"

struct st_collector_conf;
struct st_ingest_canaries;
struct st_ingest_pool;
struct st_metric;
struct st_metrics;
struct st_producer;

#define ST_REASON_SOURCE "source_not_allowed"

struct st_ingest_stats {
    long lines, accepted, rejected, skipped;
};

/* Reload (SIGHUP), main.c's side: hup is set by the signal handler; load
 * re-reads the configuration the way start-up did (same -c file,
 * environment and -X values), logs each property that differs from running
 * and cannot change live, and returns the new configuration (NULL, the
 * error logged, when it cannot be read); release frees it. */
struct st_reload {
    volatile sig_atomic_t *hup;
    struct st_collector_conf *(*load)(const struct st_collector_conf *running);
    void (*release)(struct st_collector_conf *fresh);
};

/* Called, in input order, for each rejected line once it is in the
 * dead-letter queue. */
typedef void st_ingest_reject_fn(void *arg, long lineno, const struct st_reject *rej);

struct st_ingest {
    const struct st_collector_conf *conf; /* none of these is owned */
    struct st_producer *prod;
    struct st_metrics *metrics;
    /* in messages and dead-letter records; set before adding lines */
    const char *input_name;
    long lineno; /* of the last line added; the caller may reset it */
    /* when set, an event must claim this source (HTTP: the caller's token);
     * set before adding lines, keep until st_ingest_drain returns;
     * allow_task, when set, is an fnmatch(3) pattern its task_id must match */
    const char *allow_kind, *allow_name, *allow_task;
    st_ingest_reject_fn *on_reject;
    void *on_reject_arg;
    /* 0: every rejected line is dead-lettered and reported on stderr; else
     * only the first dlq_max until the caller resets dlq_count, the rest
     * only counted (stats, metrics, on_reject) */
    long dlq_max, dlq_count;
    struct st_ingest_stats stats;
    struct st_ingest_pool *pool; /* owned */
    struct st_lineage *lineage;  /* NULL when lineage is off */
    int lineage_owned;           /* 0: a lane's, shared from st_ingest_init_lane */
    struct st_metric *m_lines, *m_accepted, *m_skipped;
    /* the canaries in force, shared with the lanes like the lineage: a
     * reload publishes new ones, which each st_ingest takes when it next
     * holds no batch (between requests, between tail batches) */
    struct st_ingest_canaries *canaries;
    const struct st_reload *reload; /* NULL: SIGHUP is not handled */
};

/* Starts input.workers executors (0: one per CPU), each with its own
 * st_accept. Returns -1 with errstr set (a key or canary file missing). */
int st_ingest_init(struct st_ingest *in, const struct st_collector_conf *conf,
                   struct st_producer *prod, struct st_metrics *metrics,
                   const char *input_name, char *errstr, size_t errsz);
/* The same for one more lane of an input that runs several at once (the
 * HTTP input): conf, producer and metrics are first's, and so is its
 * issued-credential lineage (one reader of the credentials topic and one
 * set per collector, not per lane). first must outlive in. */
int st_ingest_init_lane(struct st_ingest *in, const struct st_ingest *first,
                        const char *input_name, char *errstr, size_t errsz);
/* Stops the workers; lines added and not drained are dropped. */
void st_ingest_fini(struct st_ingest *in);

/* Hands one line over (copied). It is accepted and produced later, in
 * order; st_ingest_drain waits for that. Returns 0, or -1 when the producer
 * failed for good. */
int st_ingest_add(struct st_ingest *in, const char *line, size_t len, int too_long);

/* Accepts and produces every line added so far. Returns 0, or -1 when the
 * producer failed for good. */
int st_ingest_drain(struct st_ingest *in);

/* Adds other's counts (stats, redactions) to in's, for a run's summary
 * (the HTTP input's lanes, before they are finished). Neither may be in
 * use. */
void st_ingest_absorb(struct st_ingest *in, const struct st_ingest *other);

/* Reload. st_ingest_reload_begin, on the input's main loop when
 * *in->reload->hup is set (it clears it): re-reads the configuration and
 * the canaries file it names, checking that redactors can be built from
 * them. NULL (the error logged, nothing changed) when either fails; else
 * *fresh is the new configuration, for the input's own live settings (the
 * HTTP tokens). st_ingest_reload_end applies (commit) or drops the reload:
 * log.level, then the canaries, which every lane's executors take before
 * their next batch; a line in a batch already taken is redacted with the
 * canaries it started with. Returns 0, or -1 (nothing applied, logged).
 * @locality the input's main loop; @locks the canaries' own */
struct st_reload_txn *st_ingest_reload_begin(struct st_ingest *in,
                                             const struct st_collector_conf **fresh);
int st_ingest_reload_end(struct st_ingest *in, struct st_reload_txn *t, int commit);
/* Both, for an input with no live setting of its own. */
void st_ingest_reload(struct st_ingest *in);

/* Brings the redaction counters of the metrics up to date. */
void st_ingest_sync_metrics(struct st_ingest *in);

/* Values redacted so far by rule i of the redactors (summed over the
 * executors); name of rule i; number of rules. */
size_t st_ingest_nrules(const struct st_ingest *in);
const char *st_ingest_rule_name(const struct st_ingest *in, size_t i);
uint64_t st_ingest_rule_hits(const struct st_ingest *in, size_t i);

#endif
