/* deadletter.c: the analyzer's dead-letter producer (see deadletter.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "buf.h"
#include "deadletter.h"
#include "json.h"
#include "kafka.h"
#include "log.h"
#include "redact.h"
#include "timeutil.h"

enum rec_state { REC_QUEUED, REC_SENT, REC_DONE, REC_FAILED };

/* One record until Kafka acknowledges it (text and key owned). */
struct rec {
    char *text, *key;
    size_t keylen;
    int32_t partition; /* of the dead-lettered message, for the log */
    int64_t offset;
    enum rec_state state;
};

/* lock guards recs, n, cap, last_err and the redactor (it keeps scratch
 * state): the main thread queues records of invalid messages while the
 * store thread queues refused ones and flushes. It is held through a flush
 * (delivery callbacks run inside it, in the flushing thread), so a send
 * waits for a flush in progress. */
struct st_deadletter {
    pthread_mutex_t lock;
    rd_kafka_t *rk;
    char *topic;
    struct st_redactor *redactor;
    size_t raw_max;
    struct rec *recs;
    size_t n, cap;
    char last_err[256];
};

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct st_deadletter *d = opaque;
    size_t i = (size_t)(uintptr_t)m->_private;
    if (i >= d->n)
        return;
    if (m->err) {
        d->recs[i].state = REC_FAILED;
        snprintf(d->last_err, sizeof(d->last_err), "%s", rd_kafka_err2str(m->err));
    } else {
        d->recs[i].state = REC_DONE;
    }
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    st_kafka_refused_exit(err, reason);
    st_warn("kafka dead-letter producer: %s: %s",
            rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
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

    rd_kafka_conf_t *kc = st_kafka_conf_new(conf->brokers, errstr, errsz);
    if (!kc)
        goto fail;
    if (st_kafka_props_apply(kc, &conf->kafka, errstr, errsz) ||
        st_kafka_conf_set(kc, "enable.idempotence", "true", errstr, errsz) ||
        st_kafka_conf_set(kc, "acks", "all", errstr, errsz) ||
        st_kafka_conf_set(kc, "linger.ms", "5", errstr, errsz)) {
        rd_kafka_conf_destroy(kc);
        goto fail;
    }
    rd_kafka_conf_set_dr_msg_cb(kc, on_delivery);
    rd_kafka_conf_set_error_cb(kc, on_error);
    rd_kafka_conf_set_opaque(kc, d);
    if (!(d->rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof(err)))) {
        snprintf(errstr, errsz, "could not create the dead-letter producer: %s", err);
        rd_kafka_conf_destroy(kc);
        goto fail;
    }
    /* Kafka may be down at start: the consumer waits for it, and so does
     * the first record (the collector creates the topic too) */
    const char *topics[1] = {d->topic};
    if (st_kafka_ensure_topics(d->rk, topics, 1, 1, 1, 10000, err, sizeof(err)))
        st_warn("%s", err);
    return d;
fail:
    st_deadletter_destroy(d);
    return NULL;
}

static void recs_clear(struct st_deadletter *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->recs[i].text);
        free(d->recs[i].key);
    }
    d->n = 0;
}

void st_deadletter_destroy(struct st_deadletter *d)
{
    if (!d)
        return;
    if (d->rk) {
        rd_kafka_flush(d->rk, 5000);
        rd_kafka_destroy(d->rk);
    }
    recs_clear(d);
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
    r->state = REC_QUEUED;
    pthread_mutex_unlock(&d->lock);
}

/* Produces every queued or failed record. */
static void produce_waiting(struct st_deadletter *d)
{
    for (size_t i = 0; i < d->n; i++) {
        struct rec *r = &d->recs[i];
        if (r->state != REC_QUEUED && r->state != REC_FAILED)
            continue;
        rd_kafka_resp_err_t e = rd_kafka_producev(
            d->rk, RD_KAFKA_V_TOPIC(d->topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(r->key, r->keylen), RD_KAFKA_V_VALUE(r->text, strlen(r->text)),
            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)i), RD_KAFKA_V_END);
        if (e) {
            snprintf(d->last_err, sizeof(d->last_err), "%s", rd_kafka_err2str(e));
            r->state = REC_FAILED;
        } else {
            r->state = REC_SENT;
        }
    }
}

static int flush_locked(struct st_deadletter *d, int timeout_ms, char *errstr,
                        size_t errsz)
{
    int64_t deadline = st_time_mono_ms() + timeout_ms;
    if (d->n == 0)
        return 0;
    for (;;) {
        produce_waiting(d);
        size_t left = 0, failed = 0;
        rd_kafka_flush(d->rk, 100);
        for (size_t i = 0; i < d->n; i++) {
            left += d->recs[i].state != REC_DONE;
            failed += d->recs[i].state == REC_FAILED;
        }
        if (left == 0) {
            recs_clear(d);
            return 0;
        }
        if (st_time_mono_ms() >= deadline) {
            snprintf(errstr, errsz,
                     "%zu dead-letter record(s) to \"%s\" not acknowledged (%zu failed%s%s)",
                     left, d->topic, failed, d->last_err[0] ? ": " : "", d->last_err);
            return -1;
        }
    }
}

int st_deadletter_flush(struct st_deadletter *d, int timeout_ms, char *errstr,
                        size_t errsz)
{
    pthread_mutex_lock(&d->lock);
    int rc = flush_locked(d, timeout_ms, errstr, errsz);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

size_t st_deadletter_pending(struct st_deadletter *d)
{
    pthread_mutex_lock(&d->lock);
    size_t n = d->n;
    pthread_mutex_unlock(&d->lock);
    return n;
}
