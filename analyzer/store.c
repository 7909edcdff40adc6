/* store.c: the store stage (see store.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "event.h"
#include "log.h"
#include "store.h"
#include "timeutil.h"

/* The hand-over, all under lock. `fifo` holds the batches in flight in
 * the order they were submitted (the oldest first): at most
 * ST_STORE_IN_FLIGHT, one with the prestorer (`to_ahead`) or waiting for
 * the writer, one with the writer (`to_write`) or waiting for the
 * committer, one with the committer (`to_commit`). A batch is done when the committer finished it
 * (or the writer gave up on it: asked to stop). Everything else is set at
 * creation (conf, metrics) or is one thread's own (commits and
 * pg_faults the writer's). */
enum { RETRY_WRITER = 1, RETRY_COMMITTER = 2 };

struct st_store {
    struct st_store_conf conf;
    pthread_t writer, committer, prestorer;
    int nthreads;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct st_store_batch *fifo[ST_STORE_IN_FLIGHT];
    int nfifo;
    struct st_store_batch *to_ahead, *to_write, *to_commit;
    int quit;
    /* a batch failed (asked to stop while retrying): every later one fails
     * too, without a transaction (the next one's events may be stored
     * ahead: its redo meets them), so that no offset commit passes the
     * failed batch */
    int broken;
    int retrying; /* atomic: RETRY_* bits of the threads retrying a batch */
    long commits;   /* PostgreSQL commits, for fault.crash_after_pg_commits */
    long pg_faults; /* transactions failed by fault.fail_pg_commits */
    long ahead;     /* atomic: batches the prestorer stored something of */
    int ahead_failing; /* the prestorer's: its last try failed (warned) */
    struct st_metric *m_pg_s, *m_pg_err, *m_store_s, *m_wait_s, *m_refused, *m_ahead_s;
};

struct st_store_batch *st_store_batch_new(struct st_sink *sink, int max_msgs)
{
    struct st_store_batch *b = st_calloc(1, sizeof(*b));
    b->rows = st_sink_batch_new(sink);
    st_findings_init(&b->findings);
    b->capmsgs = max_msgs;
    b->msgs = st_calloc((size_t)max_msgs, sizeof(*b->msgs));
    return b;
}

void st_store_batch_reset(struct st_store_batch *b)
{
    for (int i = 0; i < b->nmsgs; i++)
        rd_kafka_message_destroy(b->msgs[i]);
    b->nmsgs = 0;
    st_findings_reset(&b->findings);
    b->nparts = 0;
    b->failed = b->committed = b->done = 0;
    b->nrefused = 0;
    b->submitted_us = 0;
    b->store_us = 0;
}

void st_store_batch_destroy(struct st_store_batch *b)
{
    if (!b)
        return;
    st_store_batch_reset(b);
    st_sink_batch_destroy(b->rows);
    st_findings_fini(&b->findings);
    free(b->msgs);
    free(b->parts);
    free(b->offsets);
    free(b->clocks);
    free(b->refused);
    free(b);
}

/* --- the store thread ------------------------------------------------ */

struct refusal {
    struct st_store *s;
    struct st_store_batch *b;
    int found;
};

/* A message PostgreSQL refuses on its own: dead-lettered, its rows leave
 * the batch, and so does the evidence naming it in the batch's findings.
 * The findings themselves stay as detected (detection is not redone: the
 * main thread may have detected the next batch already). */
static void on_refused(void *arg, int32_t partition, int64_t offset, const char *error)
{
    struct refusal *r = arg;
    struct st_store_batch *b = r->b;
    for (int i = 0; i < b->nmsgs; i++) {
        const rd_kafka_message_t *m = b->msgs[i];
        if (m->partition != partition || m->offset != offset)
            continue;
        st_warn("dead-lettering the message at %s [%" PRId32 "] offset %" PRId64 ": %s",
                rd_kafka_topic_name(m->rkt), partition, offset,
                ST_DEADLETTER_STORE_REFUSED);
        st_deadletter_send(r->s->conf.dlq, m, ST_DEADLETTER_STORE_REFUSED, error);
        st_sink_skip(r->s->conf.sink, b->rows, m, ST_DEADLETTER_STORE_REFUSED);
        st_metric_add(r->s->m_refused, 1);
        struct st_event ev;
        struct st_reject rej;
        /* it parsed when it was staged */
        if (st_event_parse(&ev, m->payload, m->len, &rej) == 0) {
            st_findings_forget_event(&b->findings, ev.source_name, ev.event_id);
            st_event_fini(&ev);
        }
        if (b->nrefused == b->caprefused) {
            b->caprefused = b->caprefused ? 2 * b->caprefused : 8;
            b->refused = st_realloc(b->refused, b->caprefused * sizeof(*b->refused));
        }
        b->refused[b->nrefused++] = (struct st_store_refused){partition, offset};
        r->found++;
        return;
    }
}

/* Sleeps for *backoff ms and doubles it up to the configured maximum.
 * Returns -1 (without sleeping) when asked to stop. */
static int backoff_sleep(struct st_store *s, int who, int64_t *backoff, const char *what,
                         const char *errstr)
{
    if (*s->conf.stop) {
        st_error("stopped while a batch was being retried: its offsets are not "
                 "committed (%s)",
                 errstr);
        return -1;
    }
    __atomic_or_fetch(&s->retrying, who, __ATOMIC_RELAXED);
    st_error("%s, retrying in %" PRId64 " ms: %s", what, *backoff, errstr);
    usleep((useconds_t)*backoff * 1000);
    *backoff = *backoff * 2 > s->conf.retry_max_backoff_ms ? s->conf.retry_max_backoff_ms
                                                           : *backoff * 2;
    return 0;
}

/* One try of the batch's transaction. */
static int pg_try(struct st_store *s, struct st_store_batch *b, char *errstr, size_t errsz)
{
    int64_t t0 = st_time_mono_us();
    int rc;
    if (s->pg_faults < s->conf.fail_pg_commits) {
        snprintf(errstr, errsz, "fault injection: PostgreSQL transaction %ld failed",
                 ++s->pg_faults);
        rc = ST_SINK_RETRY;
    } else {
        rc = st_sink_write(s->conf.sink, b->rows, &b->findings, errstr, errsz);
    }
    st_metric_observe(s->m_pg_s, (double)(st_time_mono_us() - t0) / 1e6);
    if (rc)
        st_metric_add(s->m_pg_err, 1);
    return rc;
}

/* Writes b until it is stored. Returns 0, or -1 when asked to stop. */
static int pg_write(struct st_store *s, struct st_store_batch *b)
{
    int64_t backoff = 100;
    char errstr[1024];
    int rc;

    while ((rc = pg_try(s, b, errstr, sizeof(errstr)))) {
        if (rc == ST_SINK_DATA) {
            struct refusal r = {s, b, 0};
            char err[1024];
            if (st_sink_isolate(s->conf.sink, b->rows, on_refused, &r, err,
                                sizeof(err)) == 0 &&
                r.found > 0)
                continue; /* write the rest at once */
            st_error("PostgreSQL refused the batch but no single event of it: %s", errstr);
        }
        /* the reason names the store, not the error text, which may quote
         * event data */
        st_metrics_set_ready(s->conf.metrics, "a batch cannot be written to PostgreSQL or "
                                              "Redis: retrying");
        if (backoff_sleep(s, RETRY_WRITER, &backoff, "batch not written", errstr))
            return -1;
    }
    return 0;
}

/* The writer: the batch's transaction. The crash fault fires here, right
 * after the PostgreSQL commit, before the batch's checkpoint and offset
 * commit (and maybe before the previous batch's: the committer may still
 * hold it). Returns 0, or -1 when asked to stop. */
static int write_batch(struct st_store *s, struct st_store_batch *b)
{
    if (pg_write(s, b))
        return -1;
    s->commits++;
    if (s->conf.crash_after_commits && s->commits >= s->conf.crash_after_commits) {
        st_warn("fault injection: exiting after PostgreSQL commit %ld, before its "
                "checkpoint and Kafka commit",
                s->commits);
        _exit(3);
    }
    return 0;
}

/* The committer: the sink's writes that follow the batch's transaction
 * (st_sink_write_after), the after-commit hook (the detectors'
 * checkpoint), then the offsets with their dead-letter records. Batches
 * reach it in submission order, so Redis is written and offsets committed in order.
 * Returns 0, or -1 when asked to stop. */
static int commit_batch(struct st_store *s, struct st_store_batch *b)
{
    char errstr[512];
    int64_t backoff = 100;

    /* the sink's parts that follow the batch's transaction (the store
     * role's refresh), while the writer already writes the next batch */
    while (st_sink_write_after(s->conf.sink, b->rows, errstr, sizeof(errstr)))
        if (backoff_sleep(s, RETRY_COMMITTER, &backoff,
                          "batch stored, the writes that follow it failed", errstr))
            return -1;
    backoff = 100;
    while (s->conf.after_pg_commit &&
           s->conf.after_pg_commit(s->conf.hook_arg, b, errstr, sizeof(errstr)))
        if (backoff_sleep(s, RETRY_COMMITTER, &backoff,
                          "batch stored, its after-commit hook failed", errstr))
            return -1;
    /* the offsets, each with the dead-letter records of the messages it
     * passes, in one transaction (deadletter.h), retried until Kafka takes
     * them: the store waits, as for PostgreSQL */
    backoff = 100;
    int rc;
    while ((rc = st_deadletter_commit(s->conf.dlq, s->conf.consumer, b->parts, b->offsets,
                                      b->clocks, b->nparts, s->conf.stop, errstr,
                                      sizeof(errstr))) < 0)
        if (backoff_sleep(s, RETRY_COMMITTER, &backoff,
                          "batch stored, its offsets and dead-letter records not committed",
                          errstr))
            return -1;
    b->committed = rc == 0;
    if (rc)
        st_warn("%s", errstr);
    return 0;
}

/* Marks b done (under lock). */
static void finish(struct st_store *s, struct st_store_batch *b)
{
    b->store_us = st_time_mono_us() - b->submitted_us;
    st_metric_observe(s->m_store_s, (double)b->store_us / 1e6);
    b->done = 1;
    pthread_cond_broadcast(&s->cond);
}

/* The prestorer: what the sink may store of b ahead of its transaction
 * (st_sink_prestore: a split batch's events), while the writer writes the
 * batch before it. A failure is left to the writer, whose try stores
 * everything st_sink_prestore did not, and retries and reports. */
static void prestore(struct st_store *s, struct st_store_batch *b)
{
    char errstr[1024];
    int64_t t0 = st_time_mono_us();
    int rc = st_sink_prestore(s->conf.sink, b->rows, errstr, sizeof(errstr));
    if (rc == ST_SINK_OK)
        return; /* nothing of it to store ahead */
    st_metric_observe(s->m_ahead_s, (double)(st_time_mono_us() - t0) / 1e6);
    if (rc > 0) {
        __atomic_add_fetch(&s->ahead, 1, __ATOMIC_RELAXED);
        if (s->ahead_failing)
            st_info("a batch's events are stored ahead again");
        s->ahead_failing = 0;
        return;
    }
    /* the writer retries, and reports what it cannot store; this is said
     * once per run of failures (e.g. a connection PostgreSQL refuses:
     * max_connections) */
    if (!s->ahead_failing)
        st_warn("a batch's events could not be stored ahead of the batch before it (the "
                "writer stores them, after it): %s",
                /* a refusal's text may quote the row: the writer isolates it */
                rc == ST_SINK_DATA ? "PostgreSQL refused a row for its data" : errstr);
    s->ahead_failing = 1;
}

static void *prestorer_main(void *arg)
{
    struct st_store *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->quit && !s->to_ahead)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->quit)
            break;
        struct st_store_batch *b = s->to_ahead;
        int broken = s->broken;
        pthread_mutex_unlock(&s->lock);

        if (!broken)
            prestore(s, b);

        pthread_mutex_lock(&s->lock);
        /* one batch at the writer at a time, in order */
        while (!s->quit && s->to_write)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->quit)
            break;
        s->to_write = b;
        s->to_ahead = NULL;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void *writer_main(void *arg)
{
    struct st_store *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->quit && !s->to_write)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->quit)
            break;
        struct st_store_batch *b = s->to_write;
        int broken = s->broken;
        pthread_mutex_unlock(&s->lock);

        int failed = broken || write_batch(s, b) != 0;
        __atomic_and_fetch(&s->retrying, ~RETRY_WRITER, __ATOMIC_RELAXED);

        pthread_mutex_lock(&s->lock);
        if (failed) {
            b->failed = 1;
            s->broken = 1;
            s->to_write = NULL;
            finish(s, b);
            continue;
        }
        /* one batch at the committer at a time, in order */
        while (!s->quit && s->to_commit)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->quit)
            break;
        s->to_commit = b;
        s->to_write = NULL;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void *committer_main(void *arg)
{
    struct st_store *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->quit && !s->to_commit)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->quit)
            break;
        struct st_store_batch *b = s->to_commit;
        int broken = s->broken;
        pthread_mutex_unlock(&s->lock);

        int failed = broken || commit_batch(s, b) != 0;
        __atomic_and_fetch(&s->retrying, ~RETRY_COMMITTER, __ATOMIC_RELAXED);

        pthread_mutex_lock(&s->lock);
        b->failed = failed;
        s->broken |= failed;
        s->to_commit = NULL;
        finish(s, b);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* --- the main thread's side ------------------------------------------ */

struct st_store *st_store_new(const struct st_store_conf *conf, char *errstr,
                              size_t errsz)
{
    struct st_store *s = st_calloc(1, sizeof(*s));
    struct st_metrics *m = conf->metrics;
    s->conf = *conf;
    s->m_pg_s = st_metric_get(m, ST_METRIC_HISTOGRAM, "sandtrail_analyzer_pg_seconds",
                              "time of one batch's PostgreSQL transaction", "");
    s->m_pg_err = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_pg_errors_total",
                                "failed PostgreSQL transactions (the batch is retried)", "");
    s->m_store_s = st_metric_get(m, ST_METRIC_HISTOGRAM, "sandtrail_analyzer_store_seconds",
                                 "time from handing a batch to the store to its being "
                                 "done: its transaction, checkpoint and offset commit "
                                 "(with its dead-letter records), retries included",
                                 "");
    s->m_wait_s = st_metric_get(m, ST_METRIC_HISTOGRAM,
                                "sandtrail_analyzer_store_wait_seconds",
                                "time the main thread waited for the store (a free prestorer, "
                                "or the oldest batch done) before handing over the next "
                                "batch (high: storage is the limit)",
                                "");
    s->m_refused = st_metric_get(m, ST_METRIC_COUNTER,
                                 "sandtrail_analyzer_dead_lettered_total",
                                 "consumed messages sent to the dead-letter topic, by reason",
                                 "reason=\"" ST_DEADLETTER_STORE_REFUSED "\"");
    s->m_ahead_s = st_metric_get(m, ST_METRIC_HISTOGRAM, "sandtrail_analyzer_ahead_seconds",
                                 "time of storing a batch's events ahead of its "
                                 "transaction, while the batch before it is written (a "
                                 "split batch: pg.copy_split_events)",
                                 "");
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    int e = pthread_create(&s->writer, NULL, writer_main, s);
    if (!e) {
        s->nthreads = 1;
        e = pthread_create(&s->committer, NULL, committer_main, s);
    }
    if (!e) {
        s->nthreads = 2;
        e = pthread_create(&s->prestorer, NULL, prestorer_main, s);
    }
    if (e) {
        snprintf(errstr, errsz, "could not start the store threads: %s", strerror(e));
        st_store_destroy(s);
        return NULL;
    }
    s->nthreads = 3;
    return s;
}

void st_store_submit(struct st_store *s, struct st_store_batch *b)
{
    int64_t t0 = st_time_mono_us();
    pthread_mutex_lock(&s->lock);
    if (s->nfifo == ST_STORE_IN_FLIGHT)
        st_fatal("a batch handed to the store while %d are in flight", ST_STORE_IN_FLIGHT);
    /* the prestorer takes one batch at a time: wait until it passed the
     * last one on to the writer */
    while (s->to_ahead)
        pthread_cond_wait(&s->cond, &s->lock);
    b->done = 0;
    b->submitted_us = st_time_mono_us();
    s->fifo[s->nfifo++] = b;
    s->to_ahead = b;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    st_metric_observe(s->m_wait_s, (double)(st_time_mono_us() - t0) / 1e6);
}

struct st_store_batch *st_store_wait(struct st_store *s)
{
    int64_t t0 = st_time_mono_us();
    pthread_mutex_lock(&s->lock);
    struct st_store_batch *b = s->nfifo ? s->fifo[0] : NULL;
    while (b && !b->done)
        pthread_cond_wait(&s->cond, &s->lock);
    if (b) {
        memmove(&s->fifo[0], &s->fifo[1], (size_t)(s->nfifo - 1) * sizeof(s->fifo[0]));
        s->nfifo--;
    }
    pthread_mutex_unlock(&s->lock);
    if (b)
        st_metric_observe(s->m_wait_s, (double)(st_time_mono_us() - t0) / 1e6);
    return b;
}

int st_store_busy(const struct st_store *s)
{
    /* nfifo shrinks and grows only on this (the main) thread */
    return s->nfifo > 0;
}

int st_store_in_flight(const struct st_store *s)
{
    return s->nfifo;
}

long st_store_ahead(const struct st_store *s)
{
    return s ? __atomic_load_n(&s->ahead, __ATOMIC_RELAXED) : 0;
}

int st_store_retrying(const struct st_store *s)
{
    return __atomic_load_n(&s->retrying, __ATOMIC_RELAXED);
}

int st_store_done(struct st_store *s)
{
    pthread_mutex_lock(&s->lock);
    int done = s->nfifo > 0 && s->fifo[0]->done;
    pthread_mutex_unlock(&s->lock);
    return done;
}

void st_store_destroy(struct st_store *s)
{
    if (!s)
        return;
    if (s->nthreads == 3)
        while (st_store_wait(s))
            ;
    pthread_mutex_lock(&s->lock);
    s->quit = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    if (s->nthreads >= 1)
        pthread_join(s->writer, NULL);
    if (s->nthreads >= 2)
        pthread_join(s->committer, NULL);
    if (s->nthreads == 3)
        pthread_join(s->prestorer, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}
