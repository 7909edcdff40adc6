/* deadletter.c: the analyzer's dead-letter producer (see deadletter.h). */
#include <inttypes.h>
#include <pthread.h>
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
#define TXN_TIMEOUT_MS "10000"
/* Longest wait for one transactional call (init, offsets, commit). */
#define TXN_CALL_MS 10000

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

/* lock guards recs, n, cap, txps and the redactor (it keeps scratch
 * state): the main thread queues records of invalid messages while the
 * store thread queues refused ones and commits. It is held through a
 * commit, so a send waits for a commit in progress. */
struct st_deadletter {
    pthread_mutex_t lock;
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
    if (st_kafka_props_apply(kc, &conf->kafka, errstr, errsz))
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
    free(d);
}

void st_deadletter_send(struct st_deadletter *d, const rd_kafka_message_t *msg,
                        const char *reason, const char *error)
{
    char now[40], created[40];
    int64_t created_ms = rd_kafka_message_timestamp(msg, NULL);
    int nred = 0;
    size_t redlen;
    /* the redactor keeps scratch state: redaction is under the lock too */
    pthread_mutex_lock(&d->lock);
    char *red = st_redact_bytes(d->redactor, msg->payload ? msg->payload : "", msg->len,
                                &nred, &redlen);
    char *quoted = st_utf8_sanitize(red, redlen, d->raw_max);
    free(red);
    /* PostgreSQL's message may quote the row ("Failing row contains ...") */
    red = st_redact_text(d->redactor, error, strlen(error), &nred);
    char *why = st_utf8_sanitize(red, strlen(red), 1024);
    free(red);

    cJSON *o = cJSON_CreateObject();
    st_time_format(st_time_now_us(), now, sizeof(now));
    cJSON_AddStringToObject(o, "schema", "sandtrail.dlq.v1");
    cJSON_AddStringToObject(o, "reason", reason);
    cJSON_AddStringToObject(o, "error", why);
    free(why);
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
    cJSON_AddBoolToObject(o, "raw_truncated", redlen > d->raw_max);
    cJSON_AddStringToObject(o, "raw", quoted);
    free(quoted);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        st_fatal("out of memory printing a dead-letter record");

    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 16;
        d->recs = st_realloc(d->recs, d->cap * sizeof(*d->recs));
    }
    struct rec *r = &d->recs[d->n++];
    r->text = text;
    r->keylen = msg->key_len;
    r->key = msg->key_len ? st_strndup(msg->key, msg->key_len) : NULL;
    r->partition = msg->partition;
    r->offset = msg->offset;
    pthread_mutex_unlock(&d->lock);
}

/* The producer of partition p, made if missing. */
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
    if (!rk)
        return NULL;
    d->txps = st_realloc(d->txps, (d->ntxp + 1) * sizeof(*d->txps));
    d->txps[d->ntxp] = (struct txp){p, rk, 0};
    return &d->txps[d->ntxp++];
}

static void txp_close(struct st_deadletter *d, struct txp *t)
{
    rd_kafka_destroy(t->rk);
    *t = d->txps[--d->ntxp];
}

/* An error of a transactional call: fatal ends the process (Kafka fenced
 * this producer out: another analyzer owns the partition); any other
 * aborts the transaction (nothing of it is committed: its records stay
 * queued), and a producer that cannot abort is closed (a new one takes
 * over next time). errstr says what failed. Consumes e. */
static void txn_failed(struct st_deadletter *d, struct txp *t, rd_kafka_error_t *e,
                       const char *what, char *errstr, size_t errsz)
{
    snprintf(errstr, errsz, "dead-letter transaction of partition %" PRId32 " (%s): %s",
             t->partition, what, rd_kafka_error_string(e));
    int fatal = rd_kafka_error_is_fatal(e);
    rd_kafka_error_destroy(e);
    if (fatal)
        st_fatal("%s: this analyzer no longer owns the partition (fenced); stopping",
                 errstr);
    rd_kafka_error_t *ae = rd_kafka_abort_transaction(t->rk, TXN_CALL_MS);
    if (ae) {
        rd_kafka_error_destroy(ae);
        txp_close(d, t);
    }
}

/* One transaction on partition p's producer: its records below offset
 * (the offsets list l holds p's entry alone), then the offset. */
static int txn_commit(struct st_deadletter *d, struct st_consumer *c, int32_t p,
                      rd_kafka_topic_partition_list_t *l, int64_t offset, char *errstr,
                      size_t errsz)
{
    struct txp *t = txp_of(d, p, errstr, errsz);
    rd_kafka_error_t *e;
    if (!t)
        return -1;
    if (!t->ready) {
        /* aborts what a crashed owner left open, fences an older one */
        if ((e = rd_kafka_init_transactions(t->rk, TXN_CALL_MS))) {
            snprintf(errstr, errsz, "dead-letter producer of partition %" PRId32 ": %s", p,
                     rd_kafka_error_string(e));
            int fatal = rd_kafka_error_is_fatal(e);
            rd_kafka_error_destroy(e);
            if (fatal)
                txp_close(d, t); /* a new one next time */
            return -1;
        }
        t->ready = 1;
    }
    if ((e = rd_kafka_begin_transaction(t->rk))) {
        txn_failed(d, t, e, "begin", errstr, errsz);
        return -1;
    }
    for (size_t i = 0; i < d->n; i++) {
        struct rec *r = &d->recs[i];
        if (r->partition != p || r->offset >= offset)
            continue;
        rd_kafka_resp_err_t pe = rd_kafka_producev(
            t->rk, RD_KAFKA_V_TOPIC(d->topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(r->key, r->keylen), RD_KAFKA_V_VALUE(r->text, strlen(r->text)),
            RD_KAFKA_V_END);
        if (pe) {
            txn_failed(d, t, rd_kafka_error_new(pe, "%s", rd_kafka_err2str(pe)), "produce",
                       errstr, errsz);
            return -1;
        }
    }
    if (d->conf->crash_in_dlq_commits && ++d->txns >= d->conf->crash_in_dlq_commits) {
        /* fault injection: the records in the log, uncommitted */
        rd_kafka_flush(t->rk, TXN_CALL_MS);
        st_warn("fault injection: exiting inside dead-letter transaction %ld, its records "
                "written, before their commit",
                d->txns);
        _exit(3);
    }
    rd_kafka_consumer_group_metadata_t *md = st_consumer_group_metadata(c);
    e = rd_kafka_send_offsets_to_transaction(t->rk, l, md, TXN_CALL_MS);
    rd_kafka_consumer_group_metadata_destroy(md);
    if (e) {
        txn_failed(d, t, e, "offsets", errstr, errsz);
        return -1;
    }
    /* a retriable failure (a timeout) may be retried as it is */
    for (int tries = 0;; tries++) {
        if (!(e = rd_kafka_commit_transaction(t->rk, TXN_CALL_MS)))
            break;
        if (!rd_kafka_error_is_retriable(e) || tries == 2) {
            txn_failed(d, t, e, "commit", errstr, errsz);
            return -1;
        }
        rd_kafka_error_destroy(e);
    }
    recs_drop_if(d, 0, p, offset);
    return 0;
}

int st_deadletter_commit(struct st_deadletter *d, struct st_consumer *c,
                         const int32_t *partitions, const int64_t *offsets,
                         const int64_t *clocks, int n, char *errstr, size_t errsz)
{
    int rc = 0;
    int32_t *plain_p = st_malloc((size_t)(n ? n : 1) * sizeof(*plain_p));
    int64_t *plain_o = st_malloc((size_t)(n ? n : 1) * sizeof(*plain_o));
    int64_t *plain_c = st_malloc((size_t)(n ? n : 1) * sizeof(*plain_c));
    int nplain = 0;

    pthread_mutex_lock(&d->lock);
    for (int i = 0; i < n; i++) {
        int has = 0;
        for (size_t j = 0; j < d->n && !has && offsets[i] >= 0; j++)
            has = d->recs[j].partition == partitions[i] && d->recs[j].offset < offsets[i];
        if (!has) {
            plain_p[nplain] = partitions[i];
            plain_o[nplain] = offsets[i];
            plain_c[nplain++] = clocks ? clocks[i] : INT64_MIN;
            continue;
        }
        rd_kafka_topic_partition_list_t *l =
            st_consumer_offsets(c, &partitions[i], &offsets[i], clocks ? &clocks[i] : NULL, 1);
        if (txn_commit(d, c, partitions[i], l, offsets[i], errstr, errsz))
            rc = -1;
        rd_kafka_topic_partition_list_destroy(l);
    }
    pthread_mutex_unlock(&d->lock);
    if (st_consumer_commit(c, plain_p, plain_o, plain_c, nplain) && !rc) {
        snprintf(errstr, errsz, "could not commit offsets");
        rc = -1;
    }
    free(plain_p);
    free(plain_o);
    free(plain_c);
    return rc;
}

void st_deadletter_forget(struct st_deadletter *d, int32_t partition)
{
    pthread_mutex_lock(&d->lock);
    recs_drop_if(d, 0, partition, INT64_MAX);
    for (size_t i = 0; i < d->ntxp; i++)
        if (d->txps[i].partition == partition) {
            txp_close(d, &d->txps[i]);
            break;
        }
    pthread_mutex_unlock(&d->lock);
}

size_t st_deadletter_queued(struct st_deadletter *d)
{
    pthread_mutex_lock(&d->lock);
    size_t n = d->n;
    pthread_mutex_unlock(&d->lock);
    return n;
}
