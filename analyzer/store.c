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

/* The hand-over: `in` is the batch in flight (NULL: none), `done` says the
 * thread finished it. Both under lock. Everything else is set at creation
 * (conf, metrics) or is the store thread's (commits, pg_faults). */
struct st_store {
    struct st_store_conf conf;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct st_store_batch *in;
    int done, quit;
    int retrying; /* atomic: the store thread retries a batch */
    long commits;   /* PostgreSQL commits, for fault.crash_after_pg_commits */
    long pg_faults; /* transactions failed by fault.fail_pg_commits */
    struct st_metric *m_pg_s, *m_pg_err, *m_store_s, *m_wait_s, *m_refused;
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
    b->failed = b->committed = 0;
    b->nrefused = 0;
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
static int backoff_sleep(struct st_store *s, int64_t *backoff, const char *what,
                         const char *errstr)
{
    if (*s->conf.stop) {
        st_error("stopped while a batch was being retried: its offsets are not "
                 "committed (%s)",
                 errstr);
        return -1;
    }
    __atomic_store_n(&s->retrying, 1, __ATOMIC_RELAXED);
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
        if (backoff_sleep(s, &backoff, "batch not written", errstr))
            return -1;
    }
    return 0;
}

static int store_batch(struct st_store *s, struct st_store_batch *b)
{
    char errstr[512];
    int64_t backoff = 100;

    if (pg_write(s, b))
        return -1;
    s->commits++;
    while (s->conf.after_pg_commit &&
           s->conf.after_pg_commit(s->conf.hook_arg, b, errstr, sizeof(errstr)))
        if (backoff_sleep(s, &backoff, "batch stored, its after-commit hook failed",
                          errstr))
            return -1;
    /* offsets past a dead-lettered message only once Kafka has its record */
    while (st_deadletter_flush(s->conf.dlq, 5000, errstr, sizeof(errstr))) {
        st_error("%s: offsets are not committed until they are", errstr);
        if (*s->conf.stop)
            return -1;
    }
    if (s->conf.crash_after_commits && s->commits >= s->conf.crash_after_commits) {
        st_warn("fault injection: exiting after PostgreSQL commit %ld, before the Kafka "
                "commit",
                s->commits);
        _exit(3);
    }
    b->committed = st_consumer_commit(s->conf.consumer, b->parts, b->offsets, b->nparts) == 0;
    return 0;
}

static void *store_main(void *arg)
{
    struct st_store *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->quit && (!s->in || s->done))
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->quit)
            break;
        struct st_store_batch *b = s->in;
        pthread_mutex_unlock(&s->lock);

        int64_t t0 = st_time_mono_us();
        b->failed = store_batch(s, b) != 0;
        __atomic_store_n(&s->retrying, 0, __ATOMIC_RELAXED);
        b->store_us = st_time_mono_us() - t0;
        st_metric_observe(s->m_store_s, (double)b->store_us / 1e6);

        pthread_mutex_lock(&s->lock);
        s->done = 1;
        pthread_cond_broadcast(&s->cond);
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
                                 "time the store stage spent on one batch: its "
                                 "transaction, dead-letter acknowledgements and offset "
                                 "commit, retries included",
                                 "");
    s->m_wait_s = st_metric_get(m, ST_METRIC_HISTOGRAM,
                                "sandtrail_analyzer_store_wait_seconds",
                                "time the main thread waited for the store stage before "
                                "handing over the next batch (high: storage is the limit)",
                                "");
    s->m_refused = st_metric_get(m, ST_METRIC_COUNTER,
                                 "sandtrail_analyzer_dead_lettered_total",
                                 "consumed messages sent to the dead-letter topic, by reason",
                                 "reason=\"" ST_DEADLETTER_STORE_REFUSED "\"");
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    int e = pthread_create(&s->thread, NULL, store_main, s);
    if (e) {
        snprintf(errstr, errsz, "could not start the store thread: %s", strerror(e));
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        return NULL;
    }
    return s;
}

void st_store_submit(struct st_store *s, struct st_store_batch *b)
{
    pthread_mutex_lock(&s->lock);
    if (s->in)
        st_fatal("a batch handed to the store while another is in flight");
    s->in = b;
    s->done = 0;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

struct st_store_batch *st_store_wait(struct st_store *s)
{
    int64_t t0 = st_time_mono_us();
    pthread_mutex_lock(&s->lock);
    struct st_store_batch *b = s->in;
    while (b && !s->done)
        pthread_cond_wait(&s->cond, &s->lock);
    s->in = NULL;
    pthread_mutex_unlock(&s->lock);
    if (b)
        st_metric_observe(s->m_wait_s, (double)(st_time_mono_us() - t0) / 1e6);
    return b;
}

int st_store_busy(const struct st_store *s)
{
    /* in is written only by this (the main) thread */
    return s->in != NULL;
}

int st_store_retrying(const struct st_store *s)
{
    return __atomic_load_n(&s->retrying, __ATOMIC_RELAXED);
}

int st_store_done(struct st_store *s)
{
    pthread_mutex_lock(&s->lock);
    int done = s->in && s->done;
    pthread_mutex_unlock(&s->lock);
    return done;
}

void st_store_destroy(struct st_store *s)
{
    if (!s)
        return;
    st_store_wait(s);
    pthread_mutex_lock(&s->lock);
    s->quit = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}
