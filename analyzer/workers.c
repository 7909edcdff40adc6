/* workers.c: the detection stage, one part per worker and one global part
 * (see workers.h for the design and the threading rules). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "onepass.h"
#include "registry.h"
#include "runhash.h"
#include "runidx.h"
#include "runkeys.h"
#include "timeutil.h"
#include "workers.h"

#define MAX_DETECTORS 16
#define MAX_WORKERS 64
#define ST_WORKERS_MAX_RESUMED 1024 /* partitions (consume.c's bound) */

enum job {
    JOB_NONE,
    JOB_PREFETCH,
    JOB_FEED,
    JOB_PARSE,
    JOB_END_BATCH,
    JOB_AFTER_COMMIT,
    JOB_FORGET,
    JOB_QUIT
};

/* One worker's share (index < K) or the global part (index == K). Written
 * by its thread only between a hand-off and its answer; by the main thread
 * otherwise. */
struct part {
    struct st_workers *w;
    int index;
    int global;
    void *det[MAX_DETECTORS];   /* instances of the detectors of its scope */
    struct st_rpipe *redis;     /* owned, except the global part's */
    struct st_checkpoint *ckpt; /* this batch's write-back, joined after */
    struct st_checkpoint *state; /* the detectors' part of it, while built */
    struct st_runidx *runidx;   /* the run index of the partitions it sees */
    /* its detectors' small run states of a checkpoint, grouped by run: a
     * run's events, so all its per-run detectors, are in one worker
     * (runhash.h) */
    struct st_runhash *runhash;
    /* its runs, one record for all its run windows (runkeys.h): freed
     * after its detectors, whose windows hold them */
    struct st_runkeys *runkeys;
    /* its reader of events (st_event_read): a part parses its share of a
     * batch on its own thread (JOB_PARSE) */
    struct st_onepass *reader;
    /* the names of its detectors' run windows: the fields its sweep
     * deletes (runidx.h) */
    const char *sweep[MAX_DETECTORS];
    int nsweep;
    struct st_findings findings;
    struct st_detect_stats stats;
    int64_t events;             /* events fed, every batch */
    int64_t events_published;   /* of them, added to m_events */
    int64_t redis_us;           /* the last prefetch round trip */
    int64_t cpu_us;             /* CPU time of its thread in its jobs, every batch */
    int rc;
    char errstr[512];
    struct st_metric *m_events;
    pthread_t thread;
};

struct st_workers {
    struct st_workers_conf wc;
    int k;
    int nthreads;       /* threads started: they run workers 1 .. nthreads */
    int nparts;         /* k + 1 */
    struct part *parts; /* k workers, then the global part */
    /* the batch being detected: set by the main thread before a hand-off */
    const struct st_reorder_item *rel;
    size_t nrel;
    uint64_t seq;
    uint64_t pending_from; /* ctx->pending_from of its end_batch */
    int write; /* a checkpoint to write into: end_batch writes */
    /* between batches (st_workers_end_batch, st_workers_after_commit):
     * the checkpoint's number, the next one's, and whether the trims held
     * back go too */
    uint64_t job_seq, job_dirty_seq;
    const struct st_detect_offsets *job_final; /* JOB_AFTER_COMMIT's ctx->final */
    /* each partition's committed offset as this process last knew it at
     * an assignment or a forced flush's commit (ctx->resumed) */
    int32_t resumed_parts[ST_WORKERS_MAX_RESUMED];
    int64_t resumed_offsets[ST_WORKERS_MAX_RESUMED];
    struct st_detect_offsets resumed;
    int job_all;
    /* the batch being parsed (st_workers_parse), the same way */
    rd_kafka_message_t *const *pmsgs;
    size_t npmsgs;
    struct st_parsed *parsed;
    /* the hand-off: job and gen set under mu, then go broadcast; each
     * worker answers with ndone++ and done */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    enum job job;
    uint64_t gen;
    int ndone;
    struct st_metric *m_wait;
    struct st_metric *m_trusted; /* the run index is trusted (runidx.h) */
    int trusted;
    /* the main thread's time in st_workers_detect, and of it the time
     * spent waiting for the workers */
    int64_t detect_us, wait_us;
};

/* Whether detector d is of p's kind (the global part: the cross-run
 * ones; the others: the per-run ones), enabled or not. */
static int of_part(const struct part *p, int d)
{
    const struct st_detector_ops *ops = st_detectors[d];
    return p->global ? ops->scope == ST_DETECT_GLOBAL : ops->scope == ST_DETECT_PER_RUN;
}

/* Whether p runs detector d: of its kind, and enabled (detect.enabled). */
static int is_mine(const struct part *p, int d)
{
    return of_part(p, d) && !(p->w->wc.conf->detect_off & (UINT32_C(1) << d));
}

static struct st_detect_ctx part_ctx(struct part *p, struct st_checkpoint *ckpt)
{
    struct st_detect_ctx ctx = {
        .redis = p->redis,
        .ckpt = ckpt,
        .findings = &p->findings,
        .conf = p->w->wc.conf,
        /* a per-run detector has no business there: NULL makes a wrong
         * classification crash at once rather than race */
        .registry = p->global ? p->w->wc.registry : NULL,
        .stats = &p->stats,
        .runidx = p->runidx,
        .runhash = p->runhash,
        .runkeys = p->runkeys,
        .offset = -1,
        .resumed = &p->w->resumed,
        /* trims held while they are few (runwin.c); with a checkpoint
         * after every batch, every trim goes with the next, as before */
        .hold_trims = p->w->wc.conf->checkpoint_ms > 0 && p->w->wc.conf->hold_trims,
    };
    return ctx;
}

/* The calling thread's CPU time. */
static int64_t thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Whether the released event goes to p. */
static int feeds(const struct part *p, const struct st_reorder_item *it)
{
    return p->global || (uint32_t)it->partition % (uint32_t)p->w->k == (uint32_t)p->index;
}

/* Cache prefetches for the events a few ahead of event i of the batch
 * (no effect on results): an event's ids, and its run's record in the
 * part's table, are cold by the time the detectors read them (parsed a
 * batch's worth of memory earlier; the record one of hundreds of
 * thousands), and each detector's first read of them waited for memory
 * (docs/architecture.md, "Where the analyzer's time goes", session 16). */
#define AHEAD_FAR 12
#define AHEAD_NEAR 6
static void ahead(const struct part *p, size_t i)
{
    const struct st_workers *w = p->w;
    if (i + AHEAD_FAR < w->nrel && feeds(p, &w->rel[i + AHEAD_FAR])) {
        const struct st_event *ev = &w->rel[i + AHEAD_FAR].ev;
        __builtin_prefetch(ev->run_id);
        __builtin_prefetch(ev->event_id);
        if (p->global) { /* scope_drift's destination: its platform and source */
            __builtin_prefetch(ev->source_platform);
            __builtin_prefetch(ev->source_name);
        }
        if (p->runkeys && ev->run_hash)
            st_runkeys_prefetch(p->runkeys, ev->run_hash, 1);
    }
    if (p->runkeys && i + AHEAD_NEAR < w->nrel && feeds(p, &w->rel[i + AHEAD_NEAR]) &&
        w->rel[i + AHEAD_NEAR].ev.run_hash)
        st_runkeys_prefetch(p->runkeys, w->rel[i + AHEAD_NEAR].ev.run_hash, 2);
}

/* Queues the loads of the part's events and runs its round trip. */
static void part_prefetch(struct part *p)
{
    struct st_workers *w = p->w;
    struct st_detect_ctx ctx = part_ctx(p, p->ckpt);
    int64_t cpu0 = thread_cpu_us();

    st_findings_reset(&p->findings);
    st_checkpoint_clear(p->ckpt);
    p->redis_us = 0;
    for (int d = 0; st_detectors[d]; d++)
        if (is_mine(p, d))
            st_detectors[d]->begin_batch(p->det[d], w->nrel);
    if (p->global)
        st_registry_begin(w->wc.registry, &ctx);
    /* the run index of each partition seen for the first time since
     * assignment, before anything decides what to load: one round trip */
    int queued = 0;
    if (st_runidx_check(p->runidx, p->redis, w->seq, p->errstr, sizeof(p->errstr)) ||
        st_runidx_compact(p->runidx, p->redis, w->wc.fence, p->errstr, sizeof(p->errstr))) {
        p->rc = -1;
        p->cpu_us += thread_cpu_us() - cpu0;
        return;
    }
    st_runidx_begin(p->runidx);
    for (size_t i = 0; i < w->nrel; i++)
        if (feeds(p, &w->rel[i]))
            queued |= st_runidx_queue_load(p->runidx, p->redis, w->rel[i].partition);
    queued |= st_runidx_queue_sweeps(p->runidx, p->redis, (int64_t)time(NULL));
    if (queued) {
        int64_t t0 = st_time_mono_us();
        p->rc = st_rpipe_exec(p->redis, p->errstr, sizeof(p->errstr));
        p->redis_us = st_time_mono_us() - t0;
        if (p->rc) {
            p->cpu_us += thread_cpu_us() - cpu0;
            return;
        }
    }
    for (size_t i = 0; i < w->nrel; i++) {
        ahead(p, i);
        if (!feeds(p, &w->rel[i]))
            continue;
        ctx.partition = w->rel[i].partition;
        ctx.late = w->rel[i].late;
        ctx.skewed = w->rel[i].skewed;
        for (int d = 0; st_detectors[d]; d++)
            if (is_mine(p, d) && st_detectors[d]->prefetch)
                st_detectors[d]->prefetch(p->det[d], &ctx, &w->rel[i].ev);
    }
    if (p->global)
        st_registry_prefetch_end(w->wc.registry, &ctx);
    int64_t t0 = st_time_mono_us();
    p->rc = st_rpipe_exec(p->redis, p->errstr, sizeof(p->errstr));
    p->redis_us += st_time_mono_us() - t0;
    p->cpu_us += thread_cpu_us() - cpu0;
}

/* Calls the end_batch of the part's detectors (and the registry's) into
 * out, preceded by the run index entries their state needs: Redis applies
 * the pipeline in order, so no state is ever there without its entry
 * (runidx.h). out NULL: a batch without a checkpoint (state.checkpoint_ms),
 * whose changes stay pending in the detectors. */
static void part_end_batch(struct part *p, struct st_detect_ctx *ctx,
                           struct st_checkpoint *out)
{
    if (!out) {
        ctx->ckpt = NULL;
        for (int d = 0; st_detectors[d]; d++)
            if (is_mine(p, d) && st_detectors[d]->end_batch)
                st_detectors[d]->end_batch(p->det[d], ctx);
        if (p->global)
            st_registry_end_batch(p->w->wc.registry, ctx);
        return;
    }
    ctx->ckpt = p->state;
    st_checkpoint_clear(p->state);
    for (int d = 0; st_detectors[d]; d++)
        if (is_mine(p, d) && st_detectors[d]->end_batch)
            st_detectors[d]->end_batch(p->det[d], ctx);
    st_runhash_flush(p->runhash, p->state); /* one HSET per bucket */
    if (p->global)
        st_registry_end_batch(p->w->wc.registry, ctx);
    st_runidx_flush(p->runidx, out, ctx->now_s ? ctx->now_s : (int64_t)time(NULL));
    st_checkpoint_take(out, p->state);
    ctx->ckpt = out;
}

/* Feeds the part's events and builds its checkpoint part. */
static void part_feed(struct part *p)
{
    struct st_workers *w = p->w;
    struct st_detect_ctx ctx = part_ctx(p, p->ckpt);
    int64_t cpu0 = thread_cpu_us();

    ctx.seq = w->seq;
    ctx.pending_from = w->pending_from;
    for (size_t i = 0; i < w->nrel; i++) {
        if (i + AHEAD_FAR < w->nrel && feeds(p, &w->rel[i + AHEAD_FAR])) {
            const struct st_event *ev = &w->rel[i + AHEAD_FAR].ev;
            __builtin_prefetch(ev->event_id);
            __builtin_prefetch(ev->source_name);
            if (p->global)
                __builtin_prefetch(ev->source_platform);
        }
        if (!feeds(p, &w->rel[i]))
            continue;
        ctx.partition = w->rel[i].partition;
        ctx.offset = w->rel[i].offset;
        ctx.late = w->rel[i].late;
        ctx.skewed = w->rel[i].skewed;
        for (int d = 0; st_detectors[d]; d++)
            if (is_mine(p, d))
                st_detectors[d]->feed(p->det[d], &ctx, &w->rel[i].ev);
        p->events++;
    }
    part_end_batch(p, &ctx, w->write ? p->ckpt : NULL);
    p->cpu_us += thread_cpu_us() - cpu0;
}

/* Writes every change of the part's detectors no checkpoint carried yet
 * into its own checkpoint part (JOB_END_BATCH), which st_workers_end_batch
 * joins after: between batches p->ckpt is empty (st_workers_detect took
 * it). */
static void part_flush(struct part *p)
{
    struct st_workers *w = p->w;
    struct st_detect_ctx ctx = part_ctx(p, p->ckpt);
    int64_t cpu0 = thread_cpu_us();

    ctx.seq = w->job_seq;
    ctx.pending_from = 0; /* everything pending */
    if (w->job_all)
        ctx.hold_trims = 0;
    part_end_batch(p, &ctx, p->ckpt);
    p->cpu_us += thread_cpu_us() - cpu0;
}

/* The part's trims and evictions once checkpoint w->job_seq is committed
 * (JOB_AFTER_COMMIT). */
static void part_after_commit(struct part *p)
{
    struct st_workers *w = p->w;
    struct st_detect_ctx ctx = part_ctx(p, NULL);
    int64_t cpu0 = thread_cpu_us();

    ctx.findings = NULL;
    ctx.seq = w->job_seq;
    ctx.dirty_seq = w->job_dirty_seq;
    ctx.final = w->job_final;
    for (int d = 0; st_detectors[d]; d++)
        if (is_mine(p, d) && st_detectors[d]->after_commit)
            st_detectors[d]->after_commit(p->det[d], &ctx);
    if (p->global)
        st_registry_after_commit(w->wc.registry, &ctx);
    st_runidx_committed(p->runidx, p->redis, w->job_seq);
    p->cpu_us += thread_cpu_us() - cpu0;
}

/* Forgets every state of the part (JOB_FORGET): each thread frees what it
 * made, in parallel (at the end of --drain, a revoke of every run). */
static void part_forget(struct part *p)
{
    struct st_detect_ctx ctx = part_ctx(p, NULL);
    ctx.findings = NULL;
    for (int d = 0; st_detectors[d]; d++)
        if (is_mine(p, d) && st_detectors[d]->forget)
            st_detectors[d]->forget(p->det[d], &ctx);
    if (p->global)
        st_registry_forget(p->w->wc.registry, &ctx);
    st_runidx_forget(p->runidx);
}

/* Parses the part's share of the messages (JOB_PARSE): worker i of K the
 * i-th of K equal runs of them, whatever their partitions (a batch often
 * holds a few long runs of one partition each, as Kafka's fetches bring
 * them: split by partition, one worker parsed most of it while the other
 * waited; docs/architecture.md, "Session 18"). Each out[i] is written by
 * one thread only; the caller reads them after the hand-off's answer. */
static void part_parse(struct part *p)
{
    struct st_workers *w = p->w;
    size_t k = (size_t)w->k, idx = (size_t)p->index;
    size_t from = w->npmsgs * idx / k, to = w->npmsgs * (idx + 1) / k;
    for (size_t i = from; i < to; i++) {
        const rd_kafka_message_t *m = w->pmsgs[i];
        struct st_parsed *o = &w->parsed[i];
        struct st_event ev;
        struct st_reject rej;
        o->rc = st_event_read(p->reader, &ev, m->payload, m->len, &rej);
        if (o->rc)
            o->u.rej = rej;
        else
            o->u.ev = ev;
    }
}

static void *worker_main(void *arg)
{
    struct part *p = arg;
    struct st_workers *w = p->w;
    uint64_t seen = 0;

    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (w->gen == seen)
            pthread_cond_wait(&w->go, &w->mu);
        seen = w->gen;
        enum job job = w->job;
        pthread_mutex_unlock(&w->mu);
        if (job == JOB_QUIT)
            return NULL;
        if (job == JOB_PREFETCH)
            part_prefetch(p);
        else if (job == JOB_FEED)
            part_feed(p);
        else if (job == JOB_PARSE)
            part_parse(p);
        else if (job == JOB_END_BATCH)
            part_flush(p);
        else if (job == JOB_AFTER_COMMIT)
            part_after_commit(p);
        else if (job == JOB_FORGET)
            part_forget(p);
        pthread_mutex_lock(&w->mu);
        w->ndone++;
        pthread_cond_signal(&w->done);
        pthread_mutex_unlock(&w->mu);
    }
}

/* Hands job to every worker thread. */
static void post(struct st_workers *w, enum job job)
{
    pthread_mutex_lock(&w->mu);
    w->job = job;
    w->gen++;
    w->ndone = 0;
    pthread_cond_broadcast(&w->go);
    pthread_mutex_unlock(&w->mu);
}

/* Waits until every worker thread answered the last post; the time the
 * main thread waited goes to *wait_us. */
static void await(struct st_workers *w, int64_t *wait_us)
{
    int64_t t0 = st_time_mono_us();
    pthread_mutex_lock(&w->mu);
    while (w->ndone < w->nthreads)
        pthread_cond_wait(&w->done, &w->mu);
    pthread_mutex_unlock(&w->mu);
    *wait_us += st_time_mono_us() - t0;
}

/* Runs job (not JOB_PARSE) on every part: workers 1 .. K-1 on their
 * threads, worker 0 and then the global part here meanwhile. */
static void run_job(struct st_workers *w, enum job job, int64_t *wait_us)
{
    void (*fn)(struct part *) = job == JOB_PREFETCH    ? part_prefetch
                                : job == JOB_FEED      ? part_feed
                                : job == JOB_END_BATCH ? part_flush
                                : job == JOB_FORGET    ? part_forget
                                                       : part_after_commit;
    if (w->nthreads)
        post(w, job);
    fn(&w->parts[0]);
    fn(&w->parts[w->k]);
    if (w->nthreads)
        await(w, wait_us);
}

struct st_workers *st_workers_new(const struct st_workers_conf *wc, char *errstr,
                                  size_t errsz)
{
    const struct st_analyzer_conf *conf = wc->conf;
    struct st_workers *w = st_calloc(1, sizeof(*w));
    char labels[64];

    w->wc = *wc;
    w->k = conf->detect_workers > 0 ? (int)conf->detect_workers : 1;
    if (w->k > MAX_WORKERS)
        w->k = MAX_WORKERS;
    w->nparts = w->k + 1;
    w->parts = st_calloc((size_t)w->nparts, sizeof(*w->parts));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->go, NULL);
    pthread_cond_init(&w->done, NULL);
    w->m_wait = st_metric_get(wc->metrics, ST_METRIC_HISTOGRAM,
                              "sandtrail_analyzer_detect_wait_seconds",
                              "time the main thread waited, per batch, for the other "
                              "detection workers once its own part (worker 0 and the "
                              "global detectors) was done",
                              "");
    w->m_trusted = st_metric_get(wc->metrics, ST_METRIC_GAUGE,
                                 "sandtrail_analyzer_run_index_trusted",
                                 "1 when the run index is known complete and a run it "
                                 "does not hold costs no Redis read; 0 while state "
                                 "written before it may remain (state.ttl_s after an "
                                 "upgrade, partitions added or a Redis restart)",
                                 "");
    /* one marker for every part: the prefix's (runidx.h) */
    int64_t since;
    if (st_runidx_marker(wc->redis, conf, &since, errstr, errsz))
        goto err;
    for (int i = 0; i <= w->k; i++) {
        struct part *p = &w->parts[i];
        p->w = w;
        p->index = i;
        p->global = i == w->k;
        p->ckpt = st_checkpoint_new();
        p->state = st_checkpoint_new();
        p->runhash = st_runhash_new(conf);
        p->runkeys = st_runkeys_new();
        p->reader = st_onepass_new(NULL);
        p->runidx = st_runidx_new(conf);
        st_runidx_set_since(p->runidx, since);
        /* its detectors' run windows, every one it has, enabled or not:
         * the fields its sweep deletes (runidx.h) */
        p->nsweep = 0;
        for (int d = 0; st_detectors[d]; d++)
            for (int j = 0; of_part(p, d) && st_detectors[d]->run_states &&
                            st_detectors[d]->run_states[j];
                 j++)
                if (p->nsweep < MAX_DETECTORS)
                    p->sweep[p->nsweep++] = st_detectors[d]->run_states[j];
        st_runidx_set_sweep(p->runidx, p->sweep, p->nsweep);
        st_findings_init(&p->findings);
        for (int d = 0; st_detectors[d]; d++) {
            if (d >= MAX_DETECTORS)
                st_fatal("more than %d detectors", MAX_DETECTORS);
            if (is_mine(p, d))
                p->det[d] = st_detectors[d]->create(conf);
        }
        if (p->global) {
            p->redis = wc->redis;
            snprintf(labels, sizeof(labels), "worker=\"global\"");
        } else {
            p->redis = st_rpipe_new(conf->redis_url, conf->redis_password_file, errstr,
                                    errsz);
            if (!p->redis)
                goto err;
            st_rpipe_set_round_trip_ms(p->redis, conf->redis_round_trip_ms);
            snprintf(labels, sizeof(labels), "worker=\"%d\"", i);
        }
        p->m_events = st_metric_get(wc->metrics, ST_METRIC_COUNTER,
                                    "sandtrail_analyzer_detect_events_total",
                                    "released events fed to the detectors, by worker "
                                    "(\"global\": the registry's detectors, every event)",
                                    labels);
    }
    w->trusted = st_runidx_trusted(w->parts[w->k].runidx);
    st_metric_set(w->m_trusted, w->trusted);
    /* worker 0 is the caller's thread */
    for (int i = 1; i < w->k; i++) {
        int rc = pthread_create(&w->parts[i].thread, NULL, worker_main, &w->parts[i]);
        if (rc) {
            snprintf(errstr, errsz, "could not start detection worker %d: %s", i,
                     strerror(rc));
            goto err; /* those started are stopped by destroy */
        }
        w->nthreads = i;
    }
    return w;
err:
    st_workers_destroy(w);
    return NULL;
}

static void quit_threads(struct st_workers *w)
{
    if (w->nthreads) {
        post(w, JOB_QUIT);
        for (int i = 1; i <= w->nthreads; i++)
            pthread_join(w->parts[i].thread, NULL);
        w->nthreads = 0;
    }
}

void st_workers_quit(struct st_workers *w)
{
    if (w)
        quit_threads(w);
}

void st_workers_destroy(struct st_workers *w)
{
    if (!w)
        return;
    quit_threads(w);
    /* after a failed start some parts are still zeroed: freeing those is
     * freeing NULLs */
    for (int i = 0; i < w->nparts; i++) {
        struct part *p = &w->parts[i];
        for (int d = 0; st_detectors[d]; d++)
            if (p->det[d])
                st_detectors[d]->destroy(p->det[d]);
        if (!p->global)
            st_rpipe_destroy(p->redis);
        st_checkpoint_destroy(p->ckpt);
        st_checkpoint_destroy(p->state);
        st_runhash_destroy(p->runhash);
        st_runkeys_destroy(p->runkeys);
        st_onepass_destroy(p->reader);
        st_runidx_destroy(p->runidx);
        st_findings_fini(&p->findings);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->go);
    pthread_cond_destroy(&w->done);
    free(w->parts);
    free(w);
}

void st_workers_parse(struct st_workers *w, rd_kafka_message_t *const *msgs, size_t n,
                      struct st_parsed *out)
{
    int64_t wait_us = 0;
    w->pmsgs = msgs;
    w->npmsgs = n;
    w->parsed = out;
    if (w->nthreads)
        post(w, JOB_PARSE);
    part_parse(&w->parts[0]);
    if (w->nthreads)
        await(w, &wait_us);
    w->pmsgs = NULL;
    w->npmsgs = 0;
    w->parsed = NULL;
}

void st_workers_reset(struct st_workers *w)
{
    for (int i = 0; i <= w->k; i++)
        for (int d = 0; st_detectors[d]; d++)
            if (is_mine(&w->parts[i], d))
                st_detectors[d]->reset_batch(w->parts[i].det[d]);
}

int st_workers_detect(struct st_workers *w, const struct st_reorder_item *rel, size_t nrel,
                      uint64_t seq, uint64_t pending_from, struct st_findings *findings,
                      struct st_checkpoint *ckpt, char *errstr, size_t errsz)
{
    int64_t wait_us = 0, t0 = st_time_mono_us();
    struct part *failed = NULL;

    st_workers_reset(w);
    w->rel = rel;
    w->nrel = nrel;
    w->seq = seq;
    w->pending_from = pending_from;
    w->write = ckpt != NULL;
    run_job(w, JOB_PREFETCH, &wait_us);
    for (int i = 0; i <= w->k; i++) {
        struct part *p = &w->parts[i];
        if (p->redis_us > 1)
            st_metric_observe(w->wc.redis_s, (double)p->redis_us / 1e6);
        if (p->rc) {
            st_metric_add(w->wc.redis_err, 1);
            if (!failed)
                failed = p;
        }
    }
    if (failed) {
        snprintf(errstr, errsz, "%s", failed->errstr);
        w->wait_us += wait_us;
        w->detect_us += st_time_mono_us() - t0;
        return -1;
    }
    run_job(w, JOB_FEED, &wait_us);
    /* fixed order, whatever the threads' timing: the batch's rows and
     * commands are the same from one run to the next */
    for (int i = 0; i <= w->k; i++) {
        struct part *p = &w->parts[i];
        st_findings_take(findings, &p->findings);
        if (ckpt)
            st_checkpoint_take(ckpt, p->ckpt);
    }
    if (w->nthreads)
        st_metric_observe(w->m_wait, (double)wait_us / 1e6);
    /* every part reads the same clock against the same marker: the
     * global part speaks for them */
    if (st_runidx_trusted(w->parts[w->k].runidx) != w->trusted) {
        w->trusted = !w->trusted;
        if (w->trusted)
            st_info("run index: trusted from now on, a run it does not hold is new");
    }
    st_metric_set(w->m_trusted, w->trusted);
    w->wait_us += wait_us;
    w->detect_us += st_time_mono_us() - t0;
    for (int i = 0; i <= w->k; i++) {
        struct part *p = &w->parts[i];
        st_metric_add(p->m_events, p->events - p->events_published);
        p->events_published = p->events;
    }
    return 0;
}

void st_workers_end_batch(struct st_workers *w, struct st_checkpoint *ckpt, uint64_t seq,
                          int all)
{
    int64_t wait_us = 0;
    w->job_seq = seq;
    w->job_all = all;
    run_job(w, JOB_END_BATCH, &wait_us);
    /* the order of st_workers_detect's join: the same commands whatever
     * the threads' timing */
    for (int i = 0; i <= w->k; i++)
        st_checkpoint_take(ckpt, w->parts[i].ckpt);
}

void st_workers_after_commit(struct st_workers *w, uint64_t seq, uint64_t dirty_seq,
                             const struct st_detect_offsets *final)
{
    int64_t wait_us = 0;
    w->job_seq = seq;
    w->job_dirty_seq = dirty_seq;
    w->job_final = final;
    run_job(w, JOB_AFTER_COMMIT, &wait_us);
    w->job_final = NULL;
    if (final)
        for (int i = 0; i < final->n; i++)
            if (final->offsets[i] >= 0) /* (-1: nothing committed for it) */
                st_workers_resumed(w, final->parts[i], final->offsets[i]);
}

void st_workers_resumed(struct st_workers *w, int32_t partition, int64_t offset)
{
    struct st_detect_offsets *r = &w->resumed;
    r->parts = w->resumed_parts;
    r->offsets = w->resumed_offsets;
    for (int i = 0; i < r->n; i++)
        if (w->resumed_parts[i] == partition) {
            w->resumed_offsets[i] = offset;
            return;
        }
    if (r->n < ST_WORKERS_MAX_RESUMED) {
        w->resumed_parts[r->n] = partition;
        w->resumed_offsets[r->n++] = offset;
    }
}

void st_workers_set_partitions(struct st_workers *w, int32_t n)
{
    for (int i = 0; i <= w->k; i++)
        st_runidx_set_partitions(w->parts[i].runidx, n);
}

void st_workers_forget(struct st_workers *w)
{
    int64_t wait_us = 0;
    run_job(w, JOB_FORGET, &wait_us);
}

void st_workers_stats(const struct st_workers *w, struct st_detect_stats *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (int i = 0; i <= w->k; i++) {
        const struct st_detect_stats *s = &w->parts[i].stats;
        sum->runs += s->runs;
        sum->entries += s->entries;
        sum->loads += s->loads;
        sum->evictions += s->evictions;
        sum->malformed += s->malformed;
    }
}

int st_workers_count(const struct st_workers *w)
{
    return w->k;
}

int64_t st_workers_events(const struct st_workers *w, int i)
{
    return w->parts[i].events;
}

int64_t st_workers_cpu_us(const struct st_workers *w, int i)
{
    return w->parts[i].cpu_us;
}

void st_workers_times(const struct st_workers *w, int64_t *detect_us, int64_t *wait_us)
{
    *detect_us = w->detect_us;
    *wait_us = w->wait_us;
}

unsigned long st_workers_redis_sent(const struct st_workers *w)
{
    unsigned long n = 0;
    for (int i = 0; i < w->k; i++)
        n += st_rpipe_sent(w->parts[i].redis);
    return n;
}
