/* ingest.c: input lines to Kafka (see ingest.h).
 *
 * Two batches take turns: the caller fills one while the executors accept
 * the other. A batch is cut into as many ranges as there are executors; a
 * range's outcomes go into its own buffer, so executors share nothing but
 * the batch's range counter. Ownership: the pool owns the batches, their
 * buffers and the st_accept of each executor; the caller's line is copied.
 *
 * Threading rules (checked by the ThreadSanitizer build, SANDTRAIL_TSAN):
 * pool->mu guards every batch's state, seq, nranges, next_range and
 * ranges_done, and pool->quit. A batch's lines, text and n are written by
 * the caller only while the batch is B_FREE, and read by executors only
 * after submit() published them under the lock; a range's outcomes and
 * out buffer are written by the one executor that claimed the range and
 * read by the caller after complete() saw ranges_done under the lock.
 * Notes on functions: @locality (which thread runs it) and @locks (what it
 * takes or must hold). One st_ingest has one caller thread at a time: the
 * HTTP input gives each concurrent request its own st_ingest. */
#include <fnmatch.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accept.h"
#include "buf.h"
#include "collector.h"
#include "credset.h"
#include "dlq.h"
#include "event.h"
#include "ingest.h"
#include "lineage.h"
#include "log.h"
#include "metrics.h"
#include "produce.h"
#include "redact.h"

#define BATCH_LINES 1024
#define BATCH_BYTES (512 * 1024)
#define MAX_WORKERS 16
/* ranges a batch is cut into per executor: small enough that whoever is
 * free takes the next one, so no executor waits while another works */
#define RANGES_PER_EXEC 4
#define MAX_RANGES (MAX_WORKERS * RANGES_PER_EXEC)

enum outcome_kind { OUT_BLANK, OUT_SKIP, OUT_EVENT, OUT_REJECT };

struct line {
    size_t off, len; /* in the batch's text */
    long lineno;
    int too_long;
};

/* What became of one line. off/len: the event (OUT_EVENT) or the
 * dead-letter record (OUT_REJECT) in its range's buffer; key (the task_id)
 * and msg (the redacted reason) are NUL-terminated there too. */
struct outcome {
    enum outcome_kind kind;
    const char *code;
    size_t off, len, key_off, msg_off;
    int in_text; /* an event that is its line as read: off is in the batch's
                  * text (not copied), else in its range's output */
};

enum batch_state { B_FREE, B_SUBMITTED };

struct batch {
    enum batch_state state;
    uint64_t seq;          /* submission order */
    struct st_buf text;    /* the lines, back to back */
    struct line *lines;    /* BATCH_LINES */
    struct outcome *out;   /* BATCH_LINES */
    size_t n;
    int nranges, next_range, ranges_done;
    struct st_buf range_out[MAX_RANGES];
};

struct st_ingest_pool {
    struct st_ingest *in;
    int nexec;                  /* executors: threads + the caller */
    struct st_accept **acc;     /* one per executor; the caller's is last */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int quit;
    struct batch b[2];
    int cur;                    /* the batch being filled */
    uint64_t seq;
    struct st_buf scratch[MAX_WORKERS]; /* per executor: a dead-letter record */
    uint64_t *absorbed; /* redactions of st_ingest_absorb'ed instances, per rule */
    uint64_t canaries_gen; /* of the canaries acc[] were built with */
};

/* The canaries in force (see ingest.h), one per collector, owned by the
 * first st_ingest and shared by the lanes. mu guards gen and text; a
 * reload replaces text and bumps gen; each st_ingest compares gen with its
 * pool's when it holds no batch and, when they differ, rebuilds its
 * executors' st_accept from a copy of text. */
struct st_ingest_canaries {
    pthread_mutex_t mu;
    uint64_t gen;
    char *text; /* the canaries file's content; NULL: none or as at start */
    /* the HMAC key read at start, set before any lane exists and then
     * only read: a reload never changes fingerprints */
    struct st_buf key;
};

/* A reload under way: the new configuration and the canaries it names. */
struct st_reload_txn {
    struct st_collector_conf *fresh;
    char *canaries;
};

/* --- accepting: any executor ------------------------------------------- */

/* An HTTP caller may send only as the source its token names: a
 * compromised sandbox cannot forge proxy or broker events. */
/* @locality any executor @locks none (reads the caller's allow_* fields,
 * which stay fixed until st_ingest_drain returns) */
static int source_allowed(const struct st_ingest *in, struct st_accept *acc,
                          struct st_reject *rej)
{
    const struct st_event *ev = st_accept_event(acc);
    if (!in->allow_kind)
        return 1;
    rej->code = ST_REASON_SOURCE;
    if (strcmp(st_source_kind_name(ev->source_kind), in->allow_kind) ||
        strcmp(ev->source_name, in->allow_name)) {
        snprintf(rej->msg, sizeof(rej->msg),
                 "this token may send only as source %.16s/%.64s", in->allow_kind,
                 in->allow_name);
        return 0;
    }
    if (in->allow_task &&
        (!ev->task_id || fnmatch(in->allow_task, ev->task_id, 0) != 0)) {
        snprintf(rej->msg, sizeof(rej->msg),
                 "this token may send only for tasks matching %.64s", in->allow_task);
        return 0;
    }
    return 1;
}

/* @locality the executor that claimed the range holding line i
 * @locks none: writes only b->out[i], out and its own scratch */
static void accept_one(struct st_ingest_pool *pool, int exec, struct batch *b, size_t i,
                       struct st_buf *out)
{
    const struct st_ingest *in = pool->in;
    struct st_accept *acc = pool->acc[exec];
    const struct line *l = &b->lines[i];
    const char *line = b->text.data + l->off;
    struct outcome *o = &b->out[i];
    struct st_reject rej;
    const char *ev, *key;
    size_t evlen;

    if (l->too_long) {
        rej.code = ST_REASON_TOO_LONG;
        snprintf(rej.msg, sizeof(rej.msg), "line longer than %" PRId64 " bytes",
                 in->conf->max_line_bytes);
    } else if (l->len == 0 || strspn(line, " \t") == l->len) {
        o->kind = OUT_BLANK; /* blank lines separate nothing in NDJSON */
        return;
    } else {
        int a = st_accept_line(acc, line, l->len, &ev, &evlen, &key, &rej);
        if (a == 1) {
            o->kind = OUT_SKIP;
            return;
        }
        if (a == 0 && evlen + strlen(key) > (size_t)in->conf->message_max_bytes) {
            /* Kafka would refuse it: dead-lettered (quoted in part) here,
             * where its line number is known */
            rej.code = ST_REASON_TOO_LARGE;
            snprintf(rej.msg, sizeof(rej.msg),
                     "event of %zu bytes is larger than kafka.message_max_bytes (%" PRId64
                     ")",
                     evlen + strlen(key), in->conf->message_max_bytes);
        } else if (a == 0 && source_allowed(in, acc, &rej)) {
            st_lineage_note(in->lineage, st_accept_event(acc), st_accept_issued_len(acc));
            o->kind = OUT_EVENT;
            o->key_off = out->len;
            st_buf_add(out, key, strlen(key) + 1);
            o->len = evlen;
            /* most events are their line, which stays in b->text until
             * emit: not copied again */
            o->in_text = ev == line;
            if (o->in_text) {
                o->off = l->off;
            } else {
                o->off = out->len;
                st_buf_add(out, ev, evlen);
            }
            return;
        }
    }
    /* the reason is redacted by accept.c; the line is redacted here, before
     * it is cut to dlq.raw_bytes */
    o->kind = OUT_REJECT;
    o->code = rej.code;
    o->msg_off = out->len;
    st_buf_add(out, rej.msg, strlen(rej.msg) + 1);
    size_t rlen;
    char *raw = st_accept_redact_raw(acc, line, l->len, &rlen);
    struct st_buf *rec = &pool->scratch[exec];
    st_dlq_record(rec, &rej, in->input_name, l->lineno, raw, rlen,
                  (size_t)in->conf->dlq_raw_bytes);
    free(raw);
    o->off = out->len;
    o->len = rec->len;
    st_buf_add(out, rec->data, rec->len);
}

/* Lines per range of b (the last range may hold fewer).
 * @locality any @locks none: n and nranges are fixed while b is submitted */
static size_t range_lines(const struct batch *b)
{
    return b->nranges ? (b->n + (size_t)b->nranges - 1) / (size_t)b->nranges : 1;
}

/* @locality the executor that claimed range r @locks none */
static void accept_range(struct st_ingest_pool *pool, int exec, struct batch *b, int r)
{
    size_t per = range_lines(b);
    size_t from = (size_t)r * per, to = from + per < b->n ? from + per : b->n;
    struct st_buf *out = &b->range_out[r];
    st_buf_reset(out);
    for (size_t i = from; i < to; i++)
        accept_one(pool, exec, b, i, out);
}

/* The oldest submitted batch with a range nobody took; NULL when none.
 * @locality worker threads @locks pool->mu held */
static struct batch *claimable(struct st_ingest_pool *pool)
{
    struct batch *best = NULL;
    for (int k = 0; k < 2; k++) {
        struct batch *b = &pool->b[k];
        if (b->state == B_SUBMITTED && b->next_range < b->nranges &&
            (!best || b->seq < best->seq))
            best = b;
    }
    return best;
}

/* @locality a worker thread @locks takes pool->mu, released while a range
 * is accepted */
static void *worker(void *arg)
{
    struct st_ingest_pool *pool = arg;
    pthread_mutex_lock(&pool->mu);
    int exec = -1;
    for (int k = 0; k < pool->nexec - 1; k++)
        if (pthread_equal(pool->threads[k], pthread_self()))
            exec = k;
    for (;;) {
        struct batch *b;
        while (!pool->quit && !(b = claimable(pool)))
            pthread_cond_wait(&pool->work, &pool->mu);
        if (pool->quit)
            break;
        int r = b->next_range++;
        pthread_mutex_unlock(&pool->mu);
        accept_range(pool, exec, b, r);
        pthread_mutex_lock(&pool->mu);
        if (++b->ranges_done == b->nranges)
            pthread_cond_broadcast(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

/* --- the caller's side -------------------------------------------------- */

/* @locality the caller @locks takes pool->mu */
static void submit(struct st_ingest_pool *pool, struct batch *b)
{
    pthread_mutex_lock(&pool->mu);
    int want = pool->nexec * RANGES_PER_EXEC;
    b->nranges = b->n < (size_t)want ? (int)b->n : want;
    b->next_range = b->ranges_done = 0;
    b->seq = pool->seq++;
    b->state = B_SUBMITTED;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->mu);
}

/* Waits until b is accepted, taking its ranges nobody has taken yet.
 * @locality the caller @locks takes pool->mu, released while it accepts */
static void complete(struct st_ingest_pool *pool, struct batch *b)
{
    int exec = pool->nexec - 1;
    pthread_mutex_lock(&pool->mu);
    while (b->next_range < b->nranges) {
        int r = b->next_range++;
        pthread_mutex_unlock(&pool->mu);
        accept_range(pool, exec, b, r);
        pthread_mutex_lock(&pool->mu);
        b->ranges_done++;
    }
    while (b->ranges_done < b->nranges)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}

/* @locality the caller @locks the metrics' own */
static void metric_rejected(struct st_ingest *in, const char *reason)
{
    char labels[96];
    snprintf(labels, sizeof(labels), "reason=\"%s\"", reason);
    st_metric_add(st_metric_get(in->metrics, ST_METRIC_COUNTER,
                                "sandtrail_collector_rejected_total",
                                "lines rejected, by reason (each in the dead-letter topic)",
                                labels),
                  1);
}

/* Produces b's outcomes in input order and frees b for filling.
 * @locality the caller @locks the producer's (inside st_producer_*); takes
 * pool->mu to hand b back, since workers read b->state under it */
static int emit(struct st_ingest *in, struct batch *b)
{
    int rc = 0;
    size_t per = range_lines(b);
    for (size_t i = 0; i < b->n && rc == 0; i++) {
        const struct outcome *o = &b->out[i];
        const char *base = b->range_out[i / per].data;
        in->stats.lines++;
        st_metric_add(in->m_lines, 1);
        switch (o->kind) {
        case OUT_BLANK:
            break;
        case OUT_SKIP:
            in->stats.skipped++;
            st_metric_add(in->m_skipped, 1);
            break;
        case OUT_EVENT:
            if (st_producer_event(in->prod, base + o->key_off,
                                  (o->in_text ? b->text.data : base) + o->off, o->len)) {
                rc = -1;
                break;
            }
            in->stats.accepted++;
            st_metric_add(in->m_accepted, 1);
            break;
        case OUT_REJECT: {
            struct st_reject rej;
            rej.code = o->code;
            snprintf(rej.msg, sizeof(rej.msg), "%s", base + o->msg_off);
            in->stats.rejected++;
            metric_rejected(in, o->code);
            /* past the caller's cap the line is only counted (and given to
             * on_reject): one hostile request must not flood the
             * dead-letter topic and stderr */
            if (in->dlq_max && in->dlq_count >= in->dlq_max) {
                if (in->on_reject)
                    in->on_reject(in->on_reject_arg, b->lines[i].lineno, &rej);
                break;
            }
            in->dlq_count++;
            fprintf(stderr, "%s:%ld: rejected: %s: %s\n", in->input_name,
                    b->lines[i].lineno, o->code, rej.msg);
            if (st_producer_dlq(in->prod, o->code, base + o->off, o->len)) {
                rc = -1;
                break;
            }
            if (in->on_reject)
                in->on_reject(in->on_reject_arg, b->lines[i].lineno, &rej);
            break;
        }
        }
    }
    b->n = 0;
    st_buf_reset(&b->text);
    pthread_mutex_lock(&in->pool->mu);
    b->state = B_FREE;
    pthread_mutex_unlock(&in->pool->mu);
    return rc;
}

/* Submits the batch being filled; completes and produces the older one,
 * which becomes the batch to fill. @locality the caller */
static int dispatch(struct st_ingest *in)
{
    struct st_ingest_pool *pool = in->pool;
    struct batch *cur = &pool->b[pool->cur], *older = &pool->b[pool->cur ^ 1];
    submit(pool, cur);
    int rc = 0;
    if (older->state == B_SUBMITTED) {
        complete(pool, older);
        rc = emit(in, older);
    }
    pool->cur ^= 1;
    return rc;
}

/* Adds the redactions counted by acc to pool->absorbed (acc is about to
 * be replaced). @locality the caller, no batch submitted */
static void absorb_hits(struct st_ingest_pool *pool, struct st_accept *acc)
{
    struct st_redactor *r = st_accept_redactor(acc);
    size_t n = st_redact_nrules(r);
    if (!pool->absorbed)
        pool->absorbed = st_calloc(n + 1, sizeof(*pool->absorbed));
    for (size_t i = 0; i < n; i++)
        pool->absorbed[i] += st_redact_rule_hits(r, i);
}

/* Rebuilds the executors' st_accept when a reload published new canaries.
 * Called only when in holds no batch: no executor is accepting, and the
 * workers read acc[] only after claiming a range under pool->mu, so the
 * swap under pool->mu is seen whole. The redaction counts of the old
 * redactors are kept (absorbed). @locality the caller @locks takes the
 * canaries' mu, then pool->mu (never both) */
static void refresh_canaries(struct st_ingest *in)
{
    struct st_ingest_pool *pool = in->pool;
    struct st_ingest_canaries *c = in->canaries;
    char errstr[512];
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    uint64_t gen = c->gen;
    char *text = gen != pool->canaries_gen && c->text ? st_strdup(c->text) : NULL;
    pthread_mutex_unlock(&c->mu);
    if (gen == pool->canaries_gen)
        return;
    pool->canaries_gen = gen;
    struct st_accept **fresh = st_calloc((size_t)pool->nexec, sizeof(*fresh));
    for (int k = 0; k < pool->nexec; k++)
        if (!(fresh[k] = st_accept_new_canaries(in->conf, st_lineage_set(in->lineage),
                                                &c->key, text, errstr, sizeof(errstr)))) {
            /* checked by the reload: cannot fail but for memory */
            st_error("reload: %s: keeping the canaries in force", errstr);
            for (int j = 0; j < k; j++)
                st_accept_destroy(fresh[j]);
            free(fresh);
            free(text);
            return;
        }
    free(text);
    pthread_mutex_lock(&pool->mu);
    for (int k = 0; k < pool->nexec; k++) {
        struct st_accept *old = pool->acc[k];
        pool->acc[k] = fresh[k];
        fresh[k] = old;
    }
    pthread_mutex_unlock(&pool->mu);
    for (int k = 0; k < pool->nexec; k++) {
        absorb_hits(pool, fresh[k]);
        st_accept_destroy(fresh[k]);
    }
    free(fresh);
}

/* @locality the caller @locks none: the batch being filled is B_FREE,
 * which no executor touches */
int st_ingest_add(struct st_ingest *in, const char *line, size_t len, int too_long)
{
    struct batch *b = &in->pool->b[in->pool->cur];
    /* holding no batch (the other one is free too: only the caller
     * submits and frees batches): new canaries may be taken */
    if (b->n == 0 && in->pool->b[in->pool->cur ^ 1].state == B_FREE)
        refresh_canaries(in);
    struct line *l = &b->lines[b->n++];
    l->off = b->text.len;
    l->len = len;
    l->lineno = ++in->lineno;
    l->too_long = too_long;
    st_buf_add(&b->text, line, len);
    st_buf_addc(&b->text, '\0');
    if (b->n == BATCH_LINES || b->text.len >= BATCH_BYTES)
        return dispatch(in);
    return 0;
}

/* @locality the caller @locks pool->mu via submit/complete/emit */
int st_ingest_drain(struct st_ingest *in)
{
    struct st_ingest_pool *pool = in->pool;
    struct batch *cur = &pool->b[pool->cur], *older = &pool->b[pool->cur ^ 1];
    int rc = 0;
    if (cur->n)
        submit(pool, cur);
    if (older->state == B_SUBMITTED) {
        complete(pool, older);
        rc = emit(in, older);
    }
    if (cur->state == B_SUBMITTED) {
        complete(pool, cur);
        if (emit(in, cur))
            rc = -1;
    }
    return rc;
}

/* --- set-up ------------------------------------------------------------- */

/* The first st_ingest owns the canaries (lanes share its lineage_owned
 * rule: a lane's lineage and canaries are the first's). */
static void canaries_release(struct st_ingest *in)
{
    if (in->lineage_owned && in->canaries) {
        pthread_mutex_destroy(&in->canaries->mu);
        if (in->canaries->key.data)
            memset(in->canaries->key.data, 0, in->canaries->key.len);
        st_buf_fini(&in->canaries->key);
        free(in->canaries->text);
        free(in->canaries);
    }
    in->canaries = NULL;
}

/* first: the first lane, whose lineage and canaries are shared, or NULL to
 * start them (owned) */
static int ingest_init(struct st_ingest *in, const struct st_collector_conf *conf,
                       struct st_producer *prod, struct st_metrics *metrics,
                       const char *input_name, const struct st_ingest *first,
                       char *errstr, size_t errsz)
{
    struct st_lineage *shared = first ? first->lineage : NULL;
    memset(in, 0, sizeof(*in));
    in->conf = conf;
    in->prod = prod;
    in->metrics = metrics;
    in->input_name = input_name;
    in->m_lines = st_metric_get(metrics, ST_METRIC_COUNTER, "sandtrail_collector_lines_total",
                                "input lines read", "");
    in->m_accepted = st_metric_get(metrics, ST_METRIC_COUNTER,
                                   "sandtrail_collector_accepted_total",
                                   "events accepted and produced", "");
    in->m_skipped = st_metric_get(metrics, ST_METRIC_COUNTER,
                                  "sandtrail_collector_skipped_total",
                                  "lines that carry no event in their format", "");

    long n = conf->workers;
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > MAX_WORKERS)
        n = MAX_WORKERS;
    /* the credentials issued so far are known before the first line */
    if (shared)
        in->lineage = shared;
    else if (st_lineage_start(conf, &in->lineage, errstr, errsz))
        return -1;
    in->lineage_owned = !shared;
    if (first)
        in->canaries = first->canaries;
    else {
        in->canaries = st_calloc(1, sizeof(*in->canaries));
        pthread_mutex_init(&in->canaries->mu, NULL);
        st_buf_init(&in->canaries->key);
        /* a missing key is reported by st_accept_new below */
        if (st_accept_load_key(conf, &in->canaries->key, errstr, errsz))
            st_buf_reset(&in->canaries->key);
    }
    struct st_ingest_pool *pool = st_calloc(1, sizeof(*pool));
    pool->in = in;
    pool->nexec = (int)n;
    pool->acc = st_calloc((size_t)n, sizeof(*pool->acc));
    for (int k = 0; k < pool->nexec; k++)
        if (!(pool->acc[k] = st_accept_new(conf, st_lineage_set(in->lineage), errstr,
                                           errsz))) {
            for (int j = 0; j < k; j++)
                st_accept_destroy(pool->acc[j]);
            if (in->lineage_owned)
                st_lineage_stop(in->lineage);
            in->lineage = NULL;
            canaries_release(in);
            free(pool->acc);
            free(pool);
            return -1;
        }
    for (int k = 0; k < 2; k++) {
        struct batch *b = &pool->b[k];
        st_buf_init(&b->text);
        b->lines = st_calloc(BATCH_LINES, sizeof(*b->lines));
        b->out = st_calloc(BATCH_LINES, sizeof(*b->out));
        for (int r = 0; r < MAX_RANGES; r++)
            st_buf_init(&b->range_out[r]);
    }
    for (int r = 0; r < MAX_WORKERS; r++)
        st_buf_init(&pool->scratch[r]);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->done, NULL);
    in->pool = pool;
    pool->threads = st_calloc((size_t)n, sizeof(*pool->threads));
    /* the workers look themselves up in threads[]: hold them until it is
     * complete */
    pthread_mutex_lock(&pool->mu);
    for (int k = 0; k < pool->nexec - 1; k++)
        if (pthread_create(&pool->threads[k], NULL, worker, pool))
            st_fatal("could not start an accept worker");
    pthread_mutex_unlock(&pool->mu);
    return 0;
}

int st_ingest_init(struct st_ingest *in, const struct st_collector_conf *conf,
                   struct st_producer *prod, struct st_metrics *metrics,
                   const char *input_name, char *errstr, size_t errsz)
{
    return ingest_init(in, conf, prod, metrics, input_name, NULL, errstr, errsz);
}

int st_ingest_init_lane(struct st_ingest *in, const struct st_ingest *first,
                        const char *input_name, char *errstr, size_t errsz)
{
    return ingest_init(in, first->conf, first->prod, first->metrics, input_name,
                       first, errstr, errsz);
}

void st_ingest_fini(struct st_ingest *in)
{
    struct st_ingest_pool *pool = in->pool;
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->quit = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->mu);
    for (int k = 0; k < pool->nexec - 1; k++)
        pthread_join(pool->threads[k], NULL);
    for (int k = 0; k < pool->nexec; k++)
        st_accept_destroy(pool->acc[k]);
    if (in->lineage_owned)
        st_lineage_stop(in->lineage);
    in->lineage = NULL;
    canaries_release(in);
    for (int k = 0; k < 2; k++) {
        struct batch *b = &pool->b[k];
        st_buf_fini(&b->text);
        free(b->lines);
        free(b->out);
        for (int r = 0; r < MAX_RANGES; r++)
            st_buf_fini(&b->range_out[r]);
    }
    for (int r = 0; r < MAX_WORKERS; r++)
        st_buf_fini(&pool->scratch[r]);
    free(pool->absorbed);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->work);
    pthread_cond_destroy(&pool->done);
    free(pool->threads);
    free(pool->acc);
    free(pool);
    in->pool = NULL;
}

/* --- reload (SIGHUP) ------------------------------------------------------ */

/* @locality the input's main loop */
struct st_reload_txn *st_ingest_reload_begin(struct st_ingest *in,
                                             const struct st_collector_conf **fresh)
{
    char errstr[512];
    if (!in->reload || !*in->reload->hup)
        return NULL;
    *in->reload->hup = 0;
    st_info("reload: reading the configuration again (SIGHUP)");
    struct st_reload_txn *t = st_calloc(1, sizeof(*t));
    if (!(t->fresh = in->reload->load(in->conf)))
        goto fail;
    /* the canaries must make redactors before any executor is told */
    if (st_accept_read_canaries(t->fresh->canaries_file, &t->canaries, errstr,
                                sizeof(errstr))) {
        st_error("reload: %s", errstr);
        goto fail;
    }
    struct st_accept *probe = st_accept_new_canaries(in->conf, NULL, &in->canaries->key,
                                                     t->canaries, errstr, sizeof(errstr));
    if (!probe) {
        st_error("reload: %s", errstr);
        goto fail;
    }
    st_accept_destroy(probe);
    *fresh = t->fresh;
    return t;
fail:
    st_error("reload failed: keeping every setting as it was");
    if (t->fresh)
        in->reload->release(t->fresh);
    free(t->canaries);
    free(t);
    return NULL;
}

/* @locality the input's main loop @locks the canaries' mu */
int st_ingest_reload_end(struct st_ingest *in, struct st_reload_txn *t, int commit)
{
    char errstr[512];
    int rc = -1;
    if (!commit) {
        st_error("reload failed: keeping every setting as it was");
    } else if (st_log_configure(t->fresh->log_level, NULL, errstr, sizeof(errstr))) {
        st_error("reload: %s; reload failed: keeping every setting as it was", errstr);
    } else {
        pthread_mutex_lock(&in->canaries->mu);
        free(in->canaries->text);
        in->canaries->text = t->canaries;
        t->canaries = NULL;
        in->canaries->gen++;
        pthread_mutex_unlock(&in->canaries->mu);
        st_info("reload: done (log.level=%s, canaries from \"%s\")", t->fresh->log_level,
                t->fresh->canaries_file ? t->fresh->canaries_file : "");
        rc = 0;
    }
    in->reload->release(t->fresh);
    free(t->canaries);
    free(t);
    return rc;
}

void st_ingest_reload(struct st_ingest *in)
{
    const struct st_collector_conf *fresh;
    struct st_reload_txn *t = st_ingest_reload_begin(in, &fresh);
    if (t)
        st_ingest_reload_end(in, t, 1);
}

/* --- redaction counters, summed over the executors ---------------------- */

size_t st_ingest_nrules(const struct st_ingest *in)
{
    return st_redact_nrules(st_accept_redactor(in->pool->acc[0]));
}

const char *st_ingest_rule_name(const struct st_ingest *in, size_t i)
{
    return st_redact_rule_name(st_accept_redactor(in->pool->acc[0]), i);
}

uint64_t st_ingest_rule_hits(const struct st_ingest *in, size_t i)
{
    uint64_t hits = in->pool->absorbed ? in->pool->absorbed[i] : 0;
    for (int k = 0; k < in->pool->nexec; k++)
        hits += st_redact_rule_hits(st_accept_redactor(in->pool->acc[k]), i);
    return hits;
}

void st_ingest_absorb(struct st_ingest *in, const struct st_ingest *other)
{
    size_t n = st_ingest_nrules(in);
    if (!in->pool->absorbed)
        in->pool->absorbed = st_calloc(n + 1, sizeof(*in->pool->absorbed));
    for (size_t i = 0; i < n; i++)
        in->pool->absorbed[i] += st_ingest_rule_hits(other, i);
    in->stats.lines += other->stats.lines;
    in->stats.accepted += other->stats.accepted;
    in->stats.rejected += other->stats.rejected;
    in->stats.skipped += other->stats.skipped;
}

void st_ingest_sync_metrics(struct st_ingest *in)
{
    char labels[96];
    if (in->lineage)
        st_metric_set(st_metric_get(in->metrics, ST_METRIC_GAUGE,
                                    "sandtrail_collector_issued_credentials",
                                    "fingerprints of issued credentials searched for", ""),
                      (int64_t)st_credset_count(st_lineage_set(in->lineage)));
    for (size_t i = 0; i < st_ingest_nrules(in); i++) {
        uint64_t hits = st_ingest_rule_hits(in, i);
        if (!hits)
            continue;
        snprintf(labels, sizeof(labels), "rule=\"%s\"", st_ingest_rule_name(in, i));
        st_metric_set(st_metric_get(in->metrics, ST_METRIC_COUNTER,
                                    "sandtrail_collector_redactions_total",
                                    "values redacted, by rule", labels),
                      (int64_t)hits);
    }
}
