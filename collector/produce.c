/* produce.c: the collector's Kafka producer (see produce.h). */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "collector.h"
#include "dlq.h"
#include "kafka.h"
#include "log.h"
#include "metrics.h"
#include "produce.h"
#include "spool.h"
#include "timeutil.h"

/* A message Kafka refused for good, waiting to be dead-lettered (delivery
 * reports only note it: producing from inside one is not allowed). */
struct refusal {
    char *value;
    size_t len;
    int64_t seg;
    int dlq; /* it was a dead-letter record itself */
    const char *reason;
    rd_kafka_resp_err_t err;
    char topic[256];
};

/* a spool record's token (spool.h: segment and offset, 64 bits) travels
 * as the message's opaque */
_Static_assert(sizeof(intptr_t) >= sizeof(int64_t),
               "a spool token must fit in a message's opaque");

struct st_producer {
    rd_kafka_t *rk;
    const struct st_collector_conf *conf; /* not copied: it outlives the producer */
    const char *topic_events;
    const char *topic_dlq;
    /* handles of the two topics, made at their first message and destroyed
     * before rk: producing by name looks the topic up (a lock, a search by
     * name, a reference taken and dropped) for every message */
    rd_kafka_topic_t *rkt_events, *rkt_dlq;
    const char *input_name; /* in dead-letter records of refused messages */
    int64_t queued, delivered, failed, retried, refused, replayed;
    int64_t maybe_twice; /* of retried: possibly stored by the broker already */
    int64_t refused_queued; /* of refused: those refused after being queued */
    struct refusal *refusals;
    size_t nrefusals, refusals_cap;
    int draining;
    int topics_missing; /* creation failed or Kafka said unknown topic */
    int64_t topics_tried_ms;
    int64_t nospace_warned_ms;
    volatile sig_atomic_t *stop; /* ends a wait for room on the disk */
    int no_disk_wait;            /* a full disk fails the message at once */
    struct st_buf dlq_rec;
    int64_t timeout_ms;
    struct st_metric *m_latency, *m_errors, *m_delivered;
    struct st_spool *spool; /* NULL: no spool, produce blocks when Kafka lags */
    rd_kafka_resp_err_t last_err;
    int64_t last_err_ms;
    struct st_metric *m_spool_bytes, *m_spool_segments;
    /* the HTTP input's thread and the main thread both use the producer:
     * every public function holds this lock (delivery reports run inside
     * them, on the calling thread) */
    pthread_mutex_t lock;
    pthread_cond_t tracked_done; /* a tracked request's last report came */
};

/* Kafka's answers that concern this one message only: it can never be
 * produced as it is, every other message still can. Such a message is
 * dead-lettered with the reason, and the run goes on. Returns the reason
 * code, or NULL for an error that is not about the message (Kafka down,
 * a topic missing, the producer broken). */
static const char *refusal_reason(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
        return ST_REASON_TOO_LARGE;
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
    case RD_KAFKA_RESP_ERR__BAD_MSG:
        return ST_REASON_KAFKA_REFUSED;
    default:
        return NULL;
    }
}

static int topic_missing(rd_kafka_resp_err_t err)
{
    return err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
           err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
           err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION;
}

static void note_refusal(struct st_producer *p, const char *topic, int64_t seg,
                         rd_kafka_resp_err_t err, const char *reason, const void *value,
                         size_t len)
{
    if (p->nrefusals == p->refusals_cap) {
        p->refusals_cap = p->refusals_cap ? 2 * p->refusals_cap : 8;
        p->refusals = st_realloc(p->refusals, p->refusals_cap * sizeof(*p->refusals));
    }
    struct refusal *r = &p->refusals[p->nrefusals++];
    r->value = st_malloc(len + 1);
    memcpy(r->value, value, len);
    r->len = len;
    r->seg = seg;
    r->dlq = strcmp(topic, p->topic_dlq) == 0;
    r->reason = reason;
    r->err = err;
    snprintf(r->topic, sizeof(r->topic), "%s", topic);
}

/* The messages of one request (HTTP without a spool), so that its answer
 * depends on its own messages only, not on every message since the start
 * (one failure for good must not make every later request fail). Guarded
 * by the producer's lock: delivery reports run inside it. */
struct st_delivery {
    int64_t pending, failed;
    int orphaned; /* its waiter gave up: the last report frees it */
};

/* The request whose messages this thread is producing (st_producer_track). */
static __thread struct st_delivery *tracking;

/* One of a tracked request's messages is settled (delivered, failed, or
 * refused and so dead-lettered): the last one wakes its waiter, or frees
 * the tracker its waiter gave up on. Under the producer's lock. */
static void settle(struct st_producer *p, struct st_delivery *d, int failed)
{
    d->failed += failed;
    if (--d->pending == 0) {
        if (d->orphaned)
            free(d);
        else
            pthread_cond_broadcast(&p->tracked_done);
    }
}

/* Delivery reports run on the thread that polls, so plain counters do. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct st_producer *p = opaque;
    /* the opaque is the spool record's token, or without a spool the
     * tracked request's st_delivery (NULL when untracked) */
    int64_t seg = p->spool ? (int64_t)(intptr_t)m->_private : 0;
    struct st_delivery *d = p->spool ? NULL : m->_private;
    const char *reason = m->err ? refusal_reason(m->err) : NULL;
    if (reason) {
        /* its spool record is settled once it is dead-lettered; for its
         * request it is settled now (dead-lettered, not failed) */
        p->refused_queued++;
        note_refusal(p, rd_kafka_topic_name(m->rkt), seg, m->err, reason, m->payload,
                     m->len);
        if (d)
            settle(p, d, 0);
        return;
    }
    if (p->spool)
        st_spool_delivered(p->spool, seg, !m->err);
    else if (d)
        settle(p, d, m->err != 0);
    if (p->m_latency) {
        int64_t us = rd_kafka_message_latency(m);
        if (us >= 0)
            st_metric_observe(p->m_latency, (double)us / 1e6);
        st_metric_add(m->err ? p->m_errors : p->m_delivered, 1);
    }
    if (m->err) {
        /* one line per error and ten seconds, not one per message */
        int64_t now = st_time_mono_ms();
        if (topic_missing(m->err))
            p->topics_missing = 1;
        if (p->spool) {
            p->retried++; /* produced again from the spool: not lost */
            /* sent but not acknowledged (a timeout in flight): the broker
             * may have stored it, and the copy produced again from the
             * spool is then a second one in the topic (README's failure
             * model; the analyzer keeps one per source and event id) */
            if (rd_kafka_message_status(m) == RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED)
                p->maybe_twice++;
        } else {
            p->failed++;
        }
        if (m->err != p->last_err || now - p->last_err_ms > 10000) {
            st_error("could not deliver to \"%s\": %s (%" PRId64 " so far)%s",
                     rd_kafka_topic_name(m->rkt), rd_kafka_err2str(m->err),
                     p->spool ? p->retried : p->failed,
                     p->spool ? "; kept in the spool, produced again later" : "");
            p->last_err = m->err;
            p->last_err_ms = now;
        }
    } else {
        p->delivered++;
    }
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    st_kafka_refused_exit(err, reason);
    /* transient broker errors are retried by librdkafka; say so once each */
    st_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

struct st_producer *st_producer_new(const struct st_collector_conf *conf,
                                    struct st_metrics *metrics, char *errstr,
                                    size_t errsz)
{
    struct st_producer *p = st_calloc(1, sizeof(*p));
    pthread_mutex_init(&p->lock, NULL);
    st_buf_init(&p->dlq_rec);
    p->conf = conf;
    p->input_name = "kafka";
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->tracked_done, &ca);
    pthread_condattr_destroy(&ca);
    if (conf->spool_dir && *conf->spool_dir) {
        p->spool = st_spool_open(conf->spool_dir, conf->spool_max_bytes,
                                 conf->spool_min_free_bytes, errstr, errsz);
        if (!p->spool) {
            pthread_mutex_destroy(&p->lock);
            pthread_cond_destroy(&p->tracked_done);
            free(p);
            return NULL;
        }
    }
    if (metrics) {
        p->m_spool_bytes = st_metric_get(metrics, ST_METRIC_GAUGE,
                                         "sandtrail_collector_spool_bytes",
                                         "bytes in the spool, not yet acknowledged by Kafka", "");
        p->m_spool_segments = st_metric_get(metrics, ST_METRIC_GAUGE,
                                            "sandtrail_collector_spool_segments",
                                            "segments in the spool", "");
        p->m_latency = st_metric_get(metrics, ST_METRIC_HISTOGRAM,
                                     "sandtrail_collector_delivery_seconds",
                                     "time from produce to Kafka's acknowledgement", "");
        p->m_errors = st_metric_get(metrics, ST_METRIC_COUNTER,
                                    "sandtrail_collector_produce_errors_total",
                                    "messages Kafka did not acknowledge", "");
        p->m_delivered = st_metric_get(metrics, ST_METRIC_COUNTER,
                                       "sandtrail_collector_delivered_total",
                                       "messages Kafka acknowledged", "");
    }
    char num[32], err[512];
    rd_kafka_conf_t *kc = st_kafka_conf_new(conf->brokers, errstr, errsz);
    if (!kc)
        goto fail;
    if (st_kafka_conf_producer(kc, &conf->kafka, errstr, errsz))
        goto fail_conf;

    snprintf(num, sizeof(num), "%" PRId64, conf->delivery_timeout_ms);
    if (st_kafka_conf_set(kc, "enable.idempotence", "true", errstr, errsz) ||
        st_kafka_conf_set(kc, "acks", "all", errstr, errsz) ||
        st_kafka_conf_set(kc, "message.timeout.ms", num, errstr, errsz) ||
        st_kafka_conf_set(kc, "compression.codec", "lz4", errstr, errsz))
        goto fail_conf;
    snprintf(num, sizeof(num), "%" PRId64, conf->queue_max_messages);
    if (st_kafka_conf_set(kc, "queue.buffering.max.messages", num, errstr, errsz))
        goto fail_conf;
    snprintf(num, sizeof(num), "%" PRId64, conf->queue_max_kbytes);
    if (st_kafka_conf_set(kc, "queue.buffering.max.kbytes", num, errstr, errsz))
        goto fail_conf;
    snprintf(num, sizeof(num), "%" PRId64, conf->linger_ms);
    if (st_kafka_conf_set(kc, "linger.ms", num, errstr, errsz))
        goto fail_conf;
    /* kafka.message_max_bytes governs: a larger event is refused before it
     * gets here (too_large); the slack covers the key and the record's
     * framing, which librdkafka counts too */
    snprintf(num, sizeof(num), "%" PRId64, conf->message_max_bytes + 4096);
    if (st_kafka_conf_set(kc, "message.max.bytes", num, errstr, errsz))
        goto fail_conf;
    rd_kafka_conf_set_dr_msg_cb(kc, on_delivery);
    rd_kafka_conf_set_error_cb(kc, on_error);
    rd_kafka_conf_set_opaque(kc, p);

    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof(err));
    if (!p->rk) {
        snprintf(errstr, errsz, "could not create Kafka producer: %s", err);
        goto fail_conf;
    }
    p->topic_events = conf->topic_events;
    p->topic_dlq = conf->topic_dlq;
    p->timeout_ms = conf->delivery_timeout_ms;

    const char *topics[2] = {conf->topic_events, conf->topic_dlq};
    if (st_kafka_ensure_topics(p->rk, topics, 2, (int)conf->topic_partitions,
                               (int)conf->topic_replication, p->spool ? 5000 : 30000,
                               errstr, errsz)) {
        if (!p->spool) {
            st_producer_destroy(p);
            return NULL;
        }
        /* Kafka may be down: the spool takes the events meanwhile, and
         * the topics are created once it is back */
        st_warn("%s; starting anyway, spooling to \"%s\"", errstr, conf->spool_dir);
        p->topics_missing = 1;
        p->topics_tried_ms = st_time_mono_ms();
    }
    /* what an earlier run left in the spool goes before anything new */
    if (p->spool)
        st_producer_poll(p);
    return p;

fail_conf:
    rd_kafka_conf_destroy(kc);
fail:
    st_spool_close(p->spool);
    st_buf_fini(&p->dlq_rec);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->tracked_done);
    free(p);
    return NULL;
}

void st_producer_destroy(struct st_producer *p)
{
    if (!p)
        return;
    if (p->rk) {
        /* with a spool, what is still queued is on disk already */
        rd_kafka_flush(p->rk, p->spool ? 500 : 5000);
        if (p->spool)
            rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        if (p->rkt_events)
            rd_kafka_topic_destroy(p->rkt_events);
        if (p->rkt_dlq)
            rd_kafka_topic_destroy(p->rkt_dlq);
        rd_kafka_destroy(p->rk);
    }
    /* what Kafka has not acknowledged stays in the spool for the next run */
    if (p->spool) {
        st_spool_sync(p->spool);
        st_spool_maintain(p->spool, NULL, NULL); /* deletes what was acknowledged */
        st_spool_close(p->spool);
    }
    for (size_t i = 0; i < p->nrefusals; i++)
        free(p->refusals[i].value);
    free(p->refusals);
    st_buf_fini(&p->dlq_rec);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->tracked_done);
    free(p);
}

void st_producer_set_input(struct st_producer *p, const char *name)
{
    p->input_name = name;
}

void st_producer_set_stop(struct st_producer *p, volatile sig_atomic_t *stop)
{
    p->stop = stop;
}

void st_producer_set_disk_wait(struct st_producer *p, int wait)
{
    p->no_disk_wait = !wait;
}

static void spool_maintain(struct st_producer *p);
static void create_topics(struct st_producer *p);

/* Hands one message to librdkafka. With a spool, the message is already on
 * disk: a full local queue leaves it there for later instead of waiting.
 * A message librdkafka refuses as it is (too large, ...) is noted for the
 * dead-letter topic. Returns 0, 1 when it was left in the spool, -1 on a
 * fatal error. */
/* The handle of topic when it is one of the producer's two (made at its
 * first use, kept until st_producer_destroy), NULL for another name (a
 * spool written under another configuration). Under p->lock. */
static rd_kafka_topic_t *topic_handle(struct st_producer *p, const char *topic)
{
    rd_kafka_topic_t **h;

    if (topic == p->topic_events || strcmp(topic, p->topic_events) == 0)
        h = &p->rkt_events;
    else if (topic == p->topic_dlq || strcmp(topic, p->topic_dlq) == 0)
        h = &p->rkt_dlq;
    else
        return NULL;
    /* NULL on failure (never with a valid name): then by name, as before */
    if (!*h)
        *h = rd_kafka_topic_new(p->rk, topic, NULL);
    return *h;
}

static int hand_over(struct st_producer *p, int64_t seg, const char *topic,
                     const char *key, size_t keylen, const char *value, size_t len)
{
    rd_kafka_topic_t *rkt = topic_handle(p, topic);

    for (;;) {
        rd_kafka_resp_err_t err =
            rkt ? rd_kafka_producev(
                      p->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                      RD_KAFKA_V_KEY(keylen ? (void *)key : NULL, keylen),
                      RD_KAFKA_V_VALUE((void *)value, len),
                      RD_KAFKA_V_OPAQUE((void *)(intptr_t)seg), RD_KAFKA_V_END)
                : rd_kafka_producev(
            p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(keylen ? (void *)key : NULL, keylen),
            RD_KAFKA_V_VALUE((void *)value, len),
            RD_KAFKA_V_OPAQUE((void *)(intptr_t)seg), RD_KAFKA_V_END);
        if (!err) {
            p->queued++;
            if (p->spool)
                st_spool_queued(p->spool, seg, 1);
            /* delivery reports are served in bulk: a poll per message
             * costs more than the produce */
            if ((p->queued & 255) == 0)
                rd_kafka_poll(p->rk, 0);
            return 0;
        }
        const char *reason = refusal_reason(err);
        if (reason) {
            if (p->spool)
                st_spool_queued(p->spool, seg, 1); /* settled when dead-lettered */
            else if (seg)
                settle(p, (struct st_delivery *)(intptr_t)seg, 0); /* no report comes */
            note_refusal(p, topic, p->spool ? seg : 0, err, reason, value, len);
            return 0;
        }
        if (topic_missing(err))
            p->topics_missing = 1;
        else if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            st_error("could not produce to \"%s\": %s", topic, rd_kafka_err2str(err));
            return -1;
        }
        if (p->spool) {
            st_spool_queued(p->spool, seg, 0);
            return 1;
        }
        /* back-pressure: wait for deliveries to make room (or for the
         * topic), never drop */
        create_topics(p);
        rd_kafka_poll(p->rk, 100);
    }
}

/* Appends to the spool; a full disk is pushed back on like a full spool:
 * wait (the lock released meanwhile, so that the inputs see it and answer
 * 503), producing what the spool holds, until there is room. Returns the
 * segment, or -1 on another I/O error. */
static int64_t spool_append(struct st_producer *p, int dlq, const char *topic,
                            const char *key, size_t keylen, const char *value, size_t len)
{
    for (;;) {
        int64_t seg = st_spool_append(p->spool, dlq, topic, key, keylen, value, len);
        if (seg != -2)
            return seg;
        if (p->no_disk_wait || (p->stop && *p->stop)) {
            /* not spooled, so not acknowledged to the input: HTTP answers
             * 503, the tail keeps its checkpoint, --input exits 2 */
            if (!p->no_disk_wait)
                st_error("stopped while the spool's disk was full");
            st_spool_sync(p->spool); /* deletable once Kafka has it */
            return -1;
        }
        /* the open segment is closed, so that once Kafka has it all it can
         * be deleted and make room */
        st_spool_sync(p->spool);
        int64_t now = st_time_mono_ms();
        if (now - p->nospace_warned_ms > 10000) {
            st_warn("spool: the disk is full; waiting for Kafka to take some of the "
                    "spool, or for room on the disk");
            p->nospace_warned_ms = now;
        }
        spool_maintain(p);
        pthread_mutex_unlock(&p->lock);
        usleep(100000);
        pthread_mutex_lock(&p->lock);
    }
}

/* Dead-letters what Kafka refused (noted by hand_over and on_delivery),
 * then settles its spool record. A refused dead-letter record is not
 * dead-lettered again: it is logged and counted as failed. */
static void drain_refusals(struct st_producer *p)
{
    if (p->draining)
        return;
    p->draining = 1;
    while (p->nrefusals) {
        struct refusal r = p->refusals[0];
        memmove(p->refusals, p->refusals + 1, --p->nrefusals * sizeof(*p->refusals));
        int ok = 1;
        if (r.dlq) {
            st_error("Kafka refused a dead-letter record for \"%s\" (%s): dropped",
                     r.topic, rd_kafka_err2str(r.err));
            p->failed++;
        } else {
            struct st_reject rej;
            rej.code = r.reason;
            snprintf(rej.msg, sizeof(rej.msg), "Kafka refused the message for \"%.64s\": %s",
                     r.topic, rd_kafka_err2str(r.err));
            st_error("%s (%zu bytes): sent to the dead-letter topic", rej.msg, r.len);
            p->refused++;
            if (p->m_errors)
                st_metric_add(p->m_errors, 1);
            st_dlq_record(&p->dlq_rec, &rej, p->input_name, 0, r.value, r.len,
                          (size_t)p->conf->dlq_raw_bytes);
            int64_t seg = 0;
            if (p->spool) {
                /* durable before the refused record's segment may go */
                seg = st_spool_append(p->spool, 1, p->topic_dlq, NULL, 0, p->dlq_rec.data,
                                      p->dlq_rec.len);
                if (seg < 0 || st_spool_sync(p->spool) < 0)
                    ok = 0; /* the record stays; refused again, tried again */
            }
            if (ok && hand_over(p, seg, p->topic_dlq, NULL, 0, p->dlq_rec.data,
                                p->dlq_rec.len) < 0)
                ok = 0;
        }
        if (p->spool)
            st_spool_delivered(p->spool, r.seg, ok);
        free(r.value);
    }
    p->draining = 0;
}

static int produce(struct st_producer *p, int dlq, const char *key, const char *value,
                   size_t len)
{
    size_t keylen = key ? strlen(key) : 0;
    const char *topic = dlq ? p->topic_dlq : p->topic_events;
    int64_t seg = 0;
    int rc;

    pthread_mutex_lock(&p->lock);
    if (p->spool && (seg = spool_append(p, dlq, topic, key, keylen, value, len)) < 0) {
        rc = -1;
    } else if (p->spool && st_spool_unsent(p->spool, seg)) {
        rc = 0; /* behind a record a full queue left: the replay sends both */
    } else if (!p->spool && tracking) {
        /* counted before: its report may come inside hand_over's poll */
        tracking->pending++;
        rc = hand_over(p, (int64_t)(intptr_t)tracking, topic, key, keylen, value, len) < 0
                 ? -1
                 : 0;
        if (rc)
            tracking->pending--;
    } else {
        rc = hand_over(p, seg, topic, key, keylen, value, len) < 0 ? -1 : 0;
    }
    if (p->nrefusals)
        drain_refusals(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int st_producer_event(struct st_producer *p, const char *key, const char *value,
                      size_t len)
{
    return produce(p, 0, key, value, len);
}

int st_producer_dlq(struct st_producer *p, const char *reason,
                    const char *value, size_t len)
{
    (void)reason; /* the record itself names its reason */
    return produce(p, 1, NULL, value, len);
}

static int replay_one(void *arg, int64_t tok, int dlq, const char *topic, const char *key,
                      size_t keylen, const char *value, size_t len)
{
    struct st_producer *p = arg;
    int rc = hand_over(p, tok, topic, key, keylen, value, len);
    if (rc == 0)
        p->replayed++;
    return rc != 0;
}

/* Topics missing (Kafka was down at start, or one was deleted): created
 * again once Kafka answers, tried every few seconds. */
static void create_topics(struct st_producer *p)
{
    int64_t now = st_time_mono_ms();
    char errstr[512];
    if (!p->topics_missing || now - p->topics_tried_ms < 3000)
        return;
    p->topics_tried_ms = now;
    const char *topics[2] = {p->topic_events, p->topic_dlq};
    if (st_kafka_ensure_topics(p->rk, topics, 2, (int)p->conf->topic_partitions,
                               (int)p->conf->topic_replication, 2000, errstr,
                               sizeof(errstr)) == 0) {
        st_info("topics \"%s\" and \"%s\" are there", p->topic_events, p->topic_dlq);
        p->topics_missing = 0;
    }
}

static void spool_maintain(struct st_producer *p)
{
    rd_kafka_poll(p->rk, 0);
    create_topics(p);
    drain_refusals(p);
    if (!p->spool)
        return;
    st_spool_maintain(p->spool, replay_one, p);
    drain_refusals(p);
    if (p->m_spool_bytes) {
        st_metric_set(p->m_spool_bytes, st_spool_bytes(p->spool));
        st_metric_set(p->m_spool_segments, st_spool_segments(p->spool));
    }
}

void st_producer_poll(struct st_producer *p)
{
    pthread_mutex_lock(&p->lock);
    spool_maintain(p);
    pthread_mutex_unlock(&p->lock);
}

int st_producer_full(struct st_producer *p)
{
    pthread_mutex_lock(&p->lock);
    int full = p->spool && st_spool_full(p->spool);
    pthread_mutex_unlock(&p->lock);
    return full;
}

int64_t st_producer_durable(struct st_producer *p, int timeout_ms)
{
    if (!p->spool)
        return st_producer_flush(p, timeout_ms);
    pthread_mutex_lock(&p->lock);
    int rc = st_spool_sync(p->spool);
    spool_maintain(p);
    pthread_mutex_unlock(&p->lock);
    return rc ? 1 : 0;
}

int64_t st_producer_flush(struct st_producer *p, int timeout_ms)
{
    int64_t deadline = st_time_mono_ms() + timeout_ms, left;
    pthread_mutex_lock(&p->lock);
    /* with a spool, what a full queue left on disk counts too: everything
     * must be acknowledged and its segment deleted */
    if (p->spool)
        st_spool_sync(p->spool);
    for (;;) {
        char err[256];
        if (rd_kafka_fatal_error(p->rk, err, sizeof(err))) {
            st_error("fatal Kafka producer error: %s", err);
            break;
        }
        if (rd_kafka_outq_len(p->rk) > 0)
            rd_kafka_flush(p->rk, 500);
        spool_maintain(p);
        if (p->spool ? st_spool_segments(p->spool) == 0 && rd_kafka_outq_len(p->rk) == 0
                     : rd_kafka_outq_len(p->rk) == 0)
            break;
        if (st_time_mono_ms() >= deadline)
            break;
        if (p->spool && rd_kafka_outq_len(p->rk) == 0) {
            /* segments wait for their replay: give Kafka a moment */
            pthread_mutex_unlock(&p->lock);
            usleep(100000);
            pthread_mutex_lock(&p->lock);
        }
    }
    if (p->spool)
        left = st_spool_segments(p->spool) ? st_spool_bytes(p->spool) : 0;
    else
        left = p->queued - p->delivered - p->refused_queued;
    pthread_mutex_unlock(&p->lock);
    return left;
}

struct st_delivery *st_producer_track(struct st_producer *p)
{
    if (p->spool)
        return NULL;
    tracking = st_calloc(1, sizeof(*tracking));
    return tracking;
}

int64_t st_producer_track_wait(struct st_producer *p, struct st_delivery *d,
                               int timeout_ms)
{
    tracking = NULL;
    if (!d)
        return 0;
    struct timespec until;
    int64_t deadline = st_time_mono_ms() + timeout_ms;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        char err[256];
        rd_kafka_poll(p->rk, 0);
        if (d->pending == 0 || st_time_mono_ms() >= deadline)
            break;
        if (rd_kafka_fatal_error(p->rk, err, sizeof(err))) {
            st_error("fatal Kafka producer error: %s", err);
            break;
        }
        /* the lock is free while we wait: other requests produce; a 50 ms
         * tick serves the reports when no other thread polls */
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 50 * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->tracked_done, &p->lock, &until);
    }
    int64_t left = d->pending + d->failed;
    if (d->pending)
        d->orphaned = 1;
    else
        free(d);
    pthread_mutex_unlock(&p->lock);
    return left;
}

void st_producer_stats(const struct st_producer *p, struct st_producer_stats *s)
{
    s->queued = p->queued;
    s->delivered = p->delivered;
    s->failed = p->failed;
    s->retried = p->retried;
    s->maybe_twice = p->maybe_twice;
    s->refused = p->refused;
    s->replayed = p->replayed;
    s->spool_bytes = p->spool ? st_spool_bytes(p->spool) : 0;
}
