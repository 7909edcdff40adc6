/* deadletter.c: the analyzer's dead-letter producer (see deadletter.h). */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "buf.h"
#include "deadletter.h"
#include "json.h"
#include "kafka.h"
#include "log.h"
#include "redact.h"
#include "timeutil.h"

/* How long a transaction may stay open before Kafka aborts it: one holds a
 * partition's records of one commit, produced and committed at once, so it
 * is open for milliseconds; a crashed owner's is aborted at the latest this
 * long after (sooner by the partition's next producer), and until then
 * holds back what read-committed readers of the topic see. */
#define TXN_TIMEOUT_MS "60000"
/* The largest record printed: under librdkafka's message.max.bytes and the
 * broker's max.message.bytes defaults (1,000,000 and 1,048,588), whatever
 * dlq.raw_bytes allows. */
#define RECORD_MAX (512 * 1024)
/* Longest wait for one transactional call (init, offsets, commit, abort). */
#define TXN_CALL_MS 10000
/* Tries of the offsets' send that failed retriably (a timeout: Kafka
 * unavailable) before the transaction is aborted and left to the caller's
 * retry. A commit or an abort is resumed for as long as Kafka is away
 * (their outcome decides what may be sent again), unless asked to stop. */
#define TXN_TRIES 4

/* One record until a transaction commits it (text and key owned). */
struct rec {
    char *text, *key;
    size_t keylen;
    int32_t partition; /* of the dead-lettered message */
    int64_t offset;
};

/* The transactional producer of one partition of the events topic. */
struct txp {
    int32_t partition;
    rd_kafka_t *rk;
    int ready; /* init_transactions done */
};

/* lock guards recs, n, cap and the redactor (it keeps scratch state):
 * the main thread queues records of invalid messages while the store
 * thread queues refused ones; it is never held across a call to Kafka.
 * It also guards the claims and closing. commit_lock guards txps and
 * txns, and is held through a commit and through the claimer's inits (a
 * revoke's forget waits for one in progress). Order: commit_lock, then
 * lock. */
struct st_deadletter {
    pthread_mutex_t lock, commit_lock;
    pthread_cond_t claimed; /* claims queued, or closing */
    pthread_t claimer; /* started at the first claim (claimer_on) */
    int claimer_on, closing;
    int32_t *claims; /* partitions assigned whose producers are not initialised yet */
    size_t nclaim, capclaim;
    struct st_consumer *consumer; /* the claims' (asked whether the assignment
                                   * was lost), until st_deadletter_detach */
    const struct st_analyzer_conf *conf; /* kept: brokers, group, kafka.* */
    rd_kafka_t *rk; /* creates the topic; produces nothing */
    char *topic;
    struct st_redactor *redactor;
    size_t raw_max;
    struct rec *recs;
    size_t n, cap;
    struct txp *txps;
    size_t ntxp;
    long txns; /* transactions begun, for fault.crash_in_dlq_commits */
    void (*round_made)(void *), (*round_done)(void *); /* test hooks */
    void *round_arg;
};

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    st_kafka_refused_exit(err, reason);
    st_warn("kafka dead-letter producer: %s: %s",
            rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* A producer of conf's brokers and kafka.* properties, with extra settings
 * (name, value pairs, NULL-terminated). */
static rd_kafka_t *producer_new(const struct st_analyzer_conf *conf, const char *const *set,
                                char *errstr, size_t errsz)
{
    char err[512];
    rd_kafka_conf_t *kc = st_kafka_conf_new(conf->brokers, errstr, errsz);
    if (!kc)
        return NULL;
    if (st_kafka_conf_producer(kc, &conf->kafka, errstr, errsz))
        goto fail;
    for (; *set; set += 2)
        if (st_kafka_conf_set(kc, set[0], set[1], errstr, errsz))
            goto fail;
    rd_kafka_conf_set_error_cb(kc, on_error);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof(err));
    if (!rk) {
        snprintf(errstr, errsz, "could not create the dead-letter producer: %s", err);
        goto fail;
    }
    return rk;
fail:
    rd_kafka_conf_destroy(kc);
    return NULL;
}

struct st_deadletter *st_deadletter_new(const struct st_analyzer_conf *conf,
                                        char *errstr, size_t errsz)
{
    struct st_deadletter *d = st_calloc(1, sizeof(*d));
    char err[512];
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->commit_lock, NULL);
    pthread_cond_init(&d->claimed, NULL);
    /* The analyzer holds no redaction key: messages in the events topic are
     * redacted already, and a forged one is redacted here under a key of
     * this process, so its fingerprints match nothing elsewhere. */
    unsigned char key[32];
    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
        st_fatal("could not read random bytes for the dead-letter redaction key");
    struct st_redact_conf rc = {.key = key, .keylen = sizeof(key)};
    if (!(d->redactor = st_redactor_new(&rc, errstr, errsz)))
        goto fail;
    d->topic = st_strdup(conf->topic_dlq);
    d->raw_max = (size_t)conf->dlq_raw_bytes;
    d->conf = conf;
    static const char *const plain[] = {NULL};
    if (!(d->rk = producer_new(conf, plain, errstr, errsz)))
        goto fail;
    /* Kafka may be down at start: the consumer waits for it, and so does
     * the first transaction (the collector creates the topic too) */
    const char *topics[1] = {d->topic};
    if (st_kafka_ensure_topics(d->rk, topics, 1, 1, 1, 10000, err, sizeof(err)))
        st_warn("%s", err);
    return d;
fail:
    st_deadletter_destroy(d);
    return NULL;
}

/* Frees and removes the records of partition p whose offset is below
 * below (all: every record). */
static void recs_drop_if(struct st_deadletter *d, int all, int32_t p, int64_t below)
{
    size_t o = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct rec *r = &d->recs[i];
        if (all || (r->partition == p && r->offset < below)) {
            free(r->text);
            free(r->key);
        } else {
            d->recs[o++] = *r;
        }
    }
    d->n = o;
}

void st_deadletter_destroy(struct st_deadletter *d)
{
    if (!d)
        return;
    if (d->claimer_on) {
        pthread_mutex_lock(&d->lock);
        d->closing = 1;
        pthread_cond_signal(&d->claimed);
        pthread_mutex_unlock(&d->lock);
        pthread_join(d->claimer, NULL);
    }
    free(d->claims);
    for (size_t i = 0; i < d->ntxp; i++)
        rd_kafka_destroy(d->txps[i].rk);
    free(d->txps);
    if (d->rk)
        rd_kafka_destroy(d->rk);
    recs_drop_if(d, 1, 0, 0);
    free(d->recs);
    st_redactor_destroy(d->redactor);
    free(d->topic);
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->commit_lock);
    pthread_cond_destroy(&d->claimed);
    free(d);
}

/* The record of msg printed, its raw message cut to raw_max bytes: a
 * string the caller frees. */
static char *record_print(const rd_kafka_message_t *msg, const char *reason,
                          const char *why, const char *red, size_t redlen, size_t raw_max)
{
    char now[40], created[40];
    int64_t created_ms = rd_kafka_message_timestamp(msg, NULL);
    char *quoted = st_utf8_sanitize(red, redlen, raw_max);
    cJSON *o = cJSON_CreateObject();
    st_time_format(st_time_now_us(), now, sizeof(now));
    cJSON_AddStringToObject(o, "schema", "sandtrail.dlq.v1");
    cJSON_AddStringToObject(o, "reason", reason);
    cJSON_AddStringToObject(o, "error", why);
    cJSON_AddStringToObject(o, "input", "analyzer");
    cJSON_AddStringToObject(o, "topic", rd_kafka_topic_name(msg->rkt));
    cJSON_AddNumberToObject(o, "partition", msg->partition);
    cJSON_AddNumberToObject(o, "offset", (double)msg->offset);
    if (created_ms >= 0) {
        st_time_format(created_ms * 1000, created, sizeof(created));
        cJSON_AddStringToObject(o, "produced_at", created);
    }
    cJSON_AddStringToObject(o, "rejected_at", now);
    cJSON_AddNumberToObject(o, "raw_bytes", (double)msg->len);
    cJSON_AddBoolToObject(o, "raw_truncated", redlen > raw_max);
    cJSON_AddStringToObject(o, "raw", quoted);
    free(quoted);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        st_fatal("out of memory printing a dead-letter record");
    return text;
}

void st_deadletter_send(struct st_deadletter *d, const rd_kafka_message_t *msg,
                        const char *reason, const char *error)
{
    int nred = 0;
    size_t redlen;
    /* the redactor keeps scratch state: redaction is under the lock too */
    pthread_mutex_lock(&d->lock);
    char *red = st_redact_bytes(d->redactor, msg->payload ? msg->payload : "", msg->len,
                                &nred, &redlen);
    /* PostgreSQL's message may quote the row ("Failing row contains ...") */
    char *rerr = st_redact_text(d->redactor, error, strlen(error), &nred);
    char *why = st_utf8_sanitize(rerr, strlen(rerr), 1024);
    free(rerr);
    /* a record Kafka would refuse could never be committed, and would hold
     * its partition's offsets for good: its raw message is cut further
     * (control bytes print as six) until it fits */
    size_t raw_max = d->raw_max;
    char *text = record_print(msg, reason, why, red, redlen, raw_max);
    while (strlen(text) > RECORD_MAX && raw_max > 0) {
        free(text);
        raw_max = raw_max > 64 ? raw_max / 2 : 0;
        text = record_print(msg, reason, why, red, redlen, raw_max);
    }
    free(red);
    free(why);

    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 16;
        d->recs = st_realloc(d->recs, d->cap * sizeof(*d->recs));
    }
    struct rec *r = &d->recs[d->n++];
    r->text = text;
    /* the key only places the record; a forged message's huge one is not
     * worth a refusal (RECORD_MAX) */
    r->keylen = msg->key_len <= 1024 ? msg->key_len : 0;
    r->key = r->keylen ? st_strndup(msg->key, r->keylen) : NULL;
    r->partition = msg->partition;
    r->offset = msg->offset;
    pthread_mutex_unlock(&d->lock);
}

/* The producer of partition p, made if missing (never NULL: a producer
 * that cannot be made stops the process). */
static struct txp *txp_of(struct st_deadletter *d, int32_t p, char *errstr, size_t errsz)
{
    for (size_t i = 0; i < d->ntxp; i++)
        if (d->txps[i].partition == p)
            return &d->txps[i];
    char id[512];
    snprintf(id, sizeof(id), "sandtrail-dlq.%s.%s.%" PRId32, d->conf->group,
             d->conf->topic_events, p);
    const char *const set[] = {"transactional.id", id, "transaction.timeout.ms",
                               TXN_TIMEOUT_MS, NULL};
    rd_kafka_t *rk = producer_new(d->conf, set, errstr, errsz);
    if (!rk) {
        /* kafka.rdkafka.* that a transactional producer refuses (acks,
         * enable.idempotence, message.timeout.ms): the same every time */
        st_error("%s: stopping (a kafka.rdkafka.* setting a transactional producer "
                 "refuses)", errstr);
        _exit(78);
    }
    d->txps = st_realloc(d->txps, (d->ntxp + 1) * sizeof(*d->txps));
    d->txps[d->ntxp] = (struct txp){p, rk, 0};
    return &d->txps[d->ntxp++];
}

static void txp_close(struct st_deadletter *d, struct txp *t)
{
    rd_kafka_destroy(t->rk);
    *t = d->txps[--d->ntxp];
}

/* A transaction whose outcome this process cannot know or settle: it stops
 * (status 1, as after a lost assignment) rather than guess, and the redo
 * starts from what Kafka committed: if the transaction committed, its
 * offset passed the records' messages; if not, their messages are redone
 * and dead-lettered again. */
static void __attribute__((noreturn)) txn_die(int32_t p, const char *what, const char *why)
{
    st_error("dead-letter transaction of partition %" PRId32 ": %s: %s; stopping (a "
             "fenced producer means another analyzer owns the partition; the redo starts "
             "from what Kafka committed)",
             p, what, why);
    _exit(1);
}

/* Initialises t once (st_deadletter_claim at the assignment, else its
 * first commit): aborts what a crashed owner left open, fences an older
 * one. 0, or -1 with errstr when Kafka's absence held it up (tried again
 * later); a fatal refusal (a refused transactional id, an unsupported
 * broker) stops the process. Under commit_lock. */
static int txp_init(struct txp *t, char *errstr, size_t errsz)
{
    if (t->ready)
        return 0;
    rd_kafka_error_t *e = rd_kafka_init_transactions(t->rk, TXN_CALL_MS);
    if (!e) {
        t->ready = 1;
        return 0;
    }
    snprintf(errstr, errsz, "dead-letter producer of partition %" PRId32 ": %s",
             t->partition, rd_kafka_error_string(e));
    int fatal = rd_kafka_error_is_fatal(e);
    rd_kafka_error_destroy(e);
    if (fatal)
        txn_die(t->partition, "init", errstr);
    return -1;
}

/* Aborts t's open transaction: nothing of it is committed, its records
 * stay queued. Resumed while Kafka is unavailable; an abort that cannot be
 * made, or one still waiting when asked to stop, stops the process. */
static void txn_abort(struct txp *t, const volatile sig_atomic_t *stop)
{
    for (;;) {
        rd_kafka_error_t *e = rd_kafka_abort_transaction(t->rk, TXN_CALL_MS);
        if (!e)
            return;
        char why[512];
        snprintf(why, sizeof(why), "%s", rd_kafka_error_string(e));
        int again = rd_kafka_error_is_retriable(e) && !*stop;
        rd_kafka_error_destroy(e);
        if (!again)
            txn_die(t->partition, "abort", why);
        st_warn("dead-letter transaction of partition %" PRId32 ": abort: %s; resuming",
                t->partition, why);
    }
}

/* An error of begin or of the offsets' send (consumed): fatal stops the
 * process; one that asks for it aborts the transaction (nothing
 * committed); errstr says what failed. Returns -1. */
static int txn_failed(struct txp *t, rd_kafka_error_t *e, const char *what, int open,
                      const volatile sig_atomic_t *stop, char *errstr, size_t errsz)
{
    snprintf(errstr, errsz, "dead-letter transaction of partition %" PRId32 " (%s): %s",
             t->partition, what, rd_kafka_error_string(e));
    int fatal = rd_kafka_error_is_fatal(e);
    rd_kafka_error_destroy(e);
    if (fatal)
        txn_die(t->partition, what, errstr);
    if (open)
        txn_abort(t, stop);
    return -1;
}

/* One transaction on partition p's producer: the records rs[0..nr) (the
 * queue's records of p below its offset, copies of their entries), then
 * the offset (l: p's entry alone). Returns 0 once committed, -1 with
 * errstr when nothing of it was (the records stay queued). A commit whose
 * outcome stays unknown stops the process (txn_die): keeping the records
 * for a later transaction could send them twice. */
static int txn_commit(struct st_deadletter *d, struct st_consumer *c, int32_t p,
                      rd_kafka_topic_partition_list_t *l, const struct rec *rs, size_t nr,
                      const volatile sig_atomic_t *stop, char *errstr, size_t errsz)
{
    struct txp *t = txp_of(d, p, errstr, errsz);
    rd_kafka_error_t *e;
    if (txp_init(t, errstr, errsz))
        return -1;
    if ((e = rd_kafka_begin_transaction(t->rk)))
        return txn_failed(t, e, "begin", 0, stop, errstr, errsz);
    for (size_t i = 0; i < nr; i++) {
        rd_kafka_resp_err_t pe;
        for (int waits = 0;; waits++) {
            pe = rd_kafka_producev(t->rk, RD_KAFKA_V_TOPIC(d->topic),
                                   RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                   RD_KAFKA_V_KEY(rs[i].key, rs[i].keylen),
                                   RD_KAFKA_V_VALUE(rs[i].text, strlen(rs[i].text)),
                                   RD_KAFKA_V_END);
            if (pe != RD_KAFKA_RESP_ERR__QUEUE_FULL || waits == 600)
                break;
            rd_kafka_poll(t->rk, 100); /* room as Kafka takes what is queued */
        }
        if (pe) {
            snprintf(errstr, errsz, "dead-letter transaction of partition %" PRId32
                     " (produce): %s", p, rd_kafka_err2str(pe));
            txn_abort(t, stop);
            return -1;
        }
    }
    rd_kafka_consumer_group_metadata_t *md = st_consumer_group_metadata(c);
    for (int tries = 1;; tries++) {
        e = rd_kafka_send_offsets_to_transaction(t->rk, l, md, TXN_CALL_MS);
        if (!e || !rd_kafka_error_is_retriable(e) || tries == TXN_TRIES)
            break;
        rd_kafka_error_destroy(e);
    }
    rd_kafka_consumer_group_metadata_destroy(md);
    if (e)
        return txn_failed(t, e, "offsets", 1, stop, errstr, errsz);
    if (d->conf->crash_in_dlq_commits && ++d->txns >= d->conf->crash_in_dlq_commits) {
        /* fault injection: the records in the log and the offset sent,
         * neither committed */
        rd_kafka_flush(t->rk, TXN_CALL_MS);
        st_warn("fault injection: exiting inside dead-letter transaction %ld, its records "
                "and offset sent, before their commit",
                d->txns);
        _exit(3);
    }
    for (;;) {
        if (!(e = rd_kafka_commit_transaction(t->rk, TXN_CALL_MS)))
            return 0;
        snprintf(errstr, errsz, "%s", rd_kafka_error_string(e));
        /* retriable: the outcome is not known yet, the same call resumes
         * (Kafka away: for as long as it is) */
        int retry = rd_kafka_error_is_retriable(e) && !*stop;
        int abort = rd_kafka_error_txn_requires_abort(e);
        rd_kafka_error_destroy(e);
        if (retry) {
            st_warn("dead-letter transaction of partition %" PRId32 ": commit: %s; resuming",
                    p, errstr);
            continue;
        }
        if (!abort)
            txn_die(p, "commit", errstr);
        /* it failed for sure: nothing of it is committed */
        txn_abort(t, stop);
        char why[512];
        snprintf(why, sizeof(why), "%s", errstr);
        snprintf(errstr, errsz, "dead-letter transaction of partition %" PRId32
                 " (commit): %s", p, why);
        return -1;
    }
}

/* Removes from the queue the records rs[0..nr) named (copies of their
 * entries: by their text, owned by the queue) and frees them. */
static void recs_remove(struct st_deadletter *d, const struct rec *rs, size_t nr)
{
    pthread_mutex_lock(&d->lock);
    size_t o = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct rec *r = &d->recs[i];
        int gone = 0;
        for (size_t j = 0; j < nr && !gone; j++)
            gone = rs[j].text == r->text;
        if (gone) {
            free(r->text);
            free(r->key);
        } else {
            d->recs[o++] = *r;
        }
    }
    d->n = o;
    pthread_mutex_unlock(&d->lock);
}

int st_deadletter_commit(struct st_deadletter *d, struct st_consumer *c,
                         const int32_t *partitions, const int64_t *offsets,
                         const int64_t *clocks, int n, const volatile sig_atomic_t *stop,
                         char *errstr, size_t errsz)
{
    if (st_consumer_assignment_lost(c)) {
        /* as a refused commit: the partitions' next owner redoes their
         * messages, dead-letter records included, and this analyzer stops
         * at its next poll (waiting here would keep that poll from coming) */
        snprintf(errstr, errsz, "the assignment was lost: no offset committed");
        return 1;
    }
    int rc = 0;
    size_t sz = (size_t)(n ? n : 1);
    int32_t *plain_p = st_malloc(sz * sizeof(*plain_p));
    int64_t *plain_o = st_malloc(sz * sizeof(*plain_o));
    int64_t *plain_c = st_malloc(sz * sizeof(*plain_c));
    int nplain = 0;
    struct rec *rs = NULL;
    size_t caprs = 0;

    pthread_mutex_lock(&d->commit_lock);
    for (int i = 0; i < n; i++) {
        /* the partition's records its offset passes, copied (their strings
         * stay the queue's: only this thread removes them) */
        size_t nr = 0;
        pthread_mutex_lock(&d->lock);
        for (size_t j = 0; j < d->n && offsets[i] >= 0; j++) {
            if (d->recs[j].partition != partitions[i] || d->recs[j].offset >= offsets[i])
                continue;
            if (nr == caprs) {
                caprs = caprs ? 2 * caprs : 16;
                rs = st_realloc(rs, caprs * sizeof(*rs));
            }
            rs[nr++] = d->recs[j];
        }
        pthread_mutex_unlock(&d->lock);
        if (nr == 0) {
            plain_p[nplain] = partitions[i];
            plain_o[nplain] = offsets[i];
            plain_c[nplain++] = clocks ? clocks[i] : INT64_MIN;
            continue;
        }
        rd_kafka_topic_partition_list_t *l =
            st_consumer_offsets(c, &partitions[i], &offsets[i], clocks ? &clocks[i] : NULL, 1);
        if (txn_commit(d, c, partitions[i], l, rs, nr, stop, errstr, errsz) == 0)
            recs_remove(d, rs, nr);
        else
            rc = -1;
        rd_kafka_topic_partition_list_destroy(l);
    }
    pthread_mutex_unlock(&d->commit_lock);
    free(rs);
    if (st_consumer_commit(c, plain_p, plain_o, plain_c, nplain) && rc == 0) {
        snprintf(errstr, errsz, "could not commit offsets");
        rc = 1;
    }
    free(plain_p);
    free(plain_o);
    free(plain_c);
    return rc;
}

/* Takes p out of the claims; whether it was there. Under lock. */
static int claim_take(struct st_deadletter *d, int32_t p)
{
    for (size_t i = 0; i < d->nclaim; i++)
        if (d->claims[i] == p) {
            d->claims[i] = d->claims[--d->nclaim];
            return 1;
        }
    return 0;
}

/* The claimer thread: the producers of the partitions claimed, all made
 * first (each connects on its own threads while the first init waits for
 * its answer, so that the inits after it find their connections up), then
 * initialised one at a time, each under commit_lock and only while its
 * partition is still claimed and the assignment not lost: a revoke's
 * forget comes before or after an init, never during, and waits for one
 * init at most; a producer initialised after its partition was taken away
 * would fence the partition's next owner. Once initialised, a producer no
 * commit used yet is closed. Ends when closing. */
static void *claimer_main(void *arg)
{
    struct st_deadletter *d = arg;
    char errstr[512];
    for (;;) {
        pthread_mutex_lock(&d->lock);
        while (!d->nclaim && !d->closing)
            pthread_cond_wait(&d->claimed, &d->lock);
        int closing = d->closing;
        pthread_mutex_unlock(&d->lock);
        if (closing)
            break;
        pthread_mutex_lock(&d->commit_lock);
        pthread_mutex_lock(&d->lock);
        size_t n = d->nclaim;
        if (!n) { /* forgotten meanwhile */
            pthread_mutex_unlock(&d->lock);
            pthread_mutex_unlock(&d->commit_lock);
            continue;
        }
        int32_t *parts = st_malloc(n * sizeof(*parts));
        memcpy(parts, d->claims, n * sizeof(*parts));
        pthread_mutex_unlock(&d->lock);
        for (size_t i = 0; i < n; i++) /* made, not initialised: fences nobody */
            txp_of(d, parts[i], errstr, sizeof(errstr));
        pthread_mutex_unlock(&d->commit_lock);
        if (d->round_made)
            d->round_made(d->round_arg);
        for (size_t i = 0; i < n; i++) {
            pthread_mutex_lock(&d->commit_lock);
            pthread_mutex_lock(&d->lock);
            int go = !d->closing && claim_take(d, parts[i]);
            struct st_consumer *c = d->consumer; /* NULL: detached */
            pthread_mutex_unlock(&d->lock);
            /* not go: forgotten (and closed) meanwhile, or closing; lost:
             * left made, not initialised (it fences nobody), for the lost
             * revoke's forget to close */
            if (go && c && !st_consumer_assignment_lost(c)) {
                struct txp *t = txp_of(d, parts[i], errstr, sizeof(errstr));
                int used = t->ready; /* by a commit already: kept */
                if (txp_init(t, errstr, sizeof(errstr)))
                    st_warn("%s (tried again at its first commit)", errstr);
                else if (!used)
                    /* its work done: the first commit makes it again (most
                     * partitions never dead-letter, and a producer is four
                     * threads and two connections) */
                    txp_close(d, t);
            }
            pthread_mutex_unlock(&d->commit_lock);
        }
        free(parts);
        if (d->round_done)
            d->round_done(d->round_arg);
    }
    return NULL;
}

void st_deadletter_on_claim_round(struct st_deadletter *d, void (*made)(void *arg),
                                  void (*done)(void *arg), void *arg)
{
    d->round_made = made;
    d->round_done = done;
    d->round_arg = arg;
}

void st_deadletter_claim(struct st_deadletter *d, struct st_consumer *c,
                         const int32_t *partitions, int n)
{
    pthread_mutex_lock(&d->lock);
    d->consumer = c;
    if (!d->claimer_on) {
        if (pthread_create(&d->claimer, NULL, claimer_main, d))
            st_fatal("could not start the dead-letter claimer thread");
        d->claimer_on = 1;
    }
    for (int i = 0; i < n; i++) {
        if (d->nclaim == d->capclaim) {
            d->capclaim = d->capclaim ? 2 * d->capclaim : 16;
            d->claims = st_realloc(d->claims, d->capclaim * sizeof(*d->claims));
        }
        d->claims[d->nclaim++] = partitions[i];
    }
    pthread_cond_signal(&d->claimed);
    pthread_mutex_unlock(&d->lock);
}

void st_deadletter_detach(struct st_deadletter *d)
{
    if (!d)
        return;
    /* the claimer uses its consumer only under both locks */
    pthread_mutex_lock(&d->commit_lock);
    pthread_mutex_lock(&d->lock);
    d->consumer = NULL;
    d->nclaim = 0;
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_unlock(&d->commit_lock);
}

void st_deadletter_forget(struct st_deadletter *d, int32_t partition)
{
    pthread_mutex_lock(&d->commit_lock);
    pthread_mutex_lock(&d->lock);
    recs_drop_if(d, 0, partition, INT64_MAX);
    while (claim_take(d, partition)) /* not initialised yet: no longer to be */
        ;
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < d->ntxp; i++)
        if (d->txps[i].partition == partition) {
            txp_close(d, &d->txps[i]);
            break;
        }
    pthread_mutex_unlock(&d->commit_lock);
}

size_t st_deadletter_queued(struct st_deadletter *d)
{
    pthread_mutex_lock(&d->lock);
    size_t n = d->n;
    pthread_mutex_unlock(&d->lock);
    return n;
}
