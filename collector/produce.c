/* produce.c: the collector's Kafka producer (see produce.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector.h"
#include "kafka.h"
#include "log.h"
#include "metrics.h"
#include "produce.h"
#include "spool.h"
#include "timeutil.h"

struct st_producer {
    rd_kafka_t *rk;
    const char *topic_events; /* not copied: the conf outlives the producer */
    const char *topic_dlq;
    int64_t queued, delivered, failed;
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

/* Delivery reports run on the thread that polls, so plain counters do. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct st_producer *p = opaque;
    if (p->spool)
        st_spool_delivered(p->spool, (int64_t)(intptr_t)m->_private, !m->err);
    else if (m->_private) {
        struct st_delivery *d = m->_private;
        d->failed += m->err != 0;
        if (--d->pending == 0) {
            if (d->orphaned)
                free(d);
            else
                pthread_cond_broadcast(&p->tracked_done);
        }
    }
    if (p->m_latency) {
        int64_t us = rd_kafka_message_latency(m);
        if (us >= 0)
            st_metric_observe(p->m_latency, (double)us / 1e6);
        st_metric_add(m->err ? p->m_errors : p->m_delivered, 1);
    }
    if (m->err) {
        /* one line per error and ten seconds, not one per message */
        int64_t now = st_time_mono_ms();
        p->failed++;
        if (m->err != p->last_err || now - p->last_err_ms > 10000) {
            st_error("could not deliver to \"%s\": %s (%" PRId64 " failed so far)%s",
                     rd_kafka_topic_name(m->rkt), rd_kafka_err2str(m->err), p->failed,
                     p->spool ? "; kept in the spool" : "");
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
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->tracked_done, &ca);
    pthread_condattr_destroy(&ca);
    if (conf->spool_dir && *conf->spool_dir) {
        p->spool = st_spool_open(conf->spool_dir, conf->spool_max_bytes, errstr, errsz);
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
    if (st_kafka_props_apply(kc, &conf->kafka, errstr, errsz))
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
        /* Kafka may be down: the spool takes the events meanwhile */
        st_warn("%s; starting anyway, spooling to \"%s\"", errstr, conf->spool_dir);
    }
    return p;

fail_conf:
    rd_kafka_conf_destroy(kc);
fail:
    st_spool_close(p->spool);
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
        rd_kafka_destroy(p->rk);
    }
    /* what Kafka has not acknowledged stays in the spool for the next run */
    if (p->spool) {
        st_spool_sync(p->spool);
        st_spool_maintain(p->spool, NULL, NULL); /* deletes what was acknowledged */
        st_spool_close(p->spool);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->tracked_done);
    free(p);
}

/* Hands one message to librdkafka. With a spool, the message is already on
 * disk: a full local queue leaves it there for later instead of waiting.
 * Returns 0, 1 when it was left in the spool, -1 on a fatal error. */
static int hand_over(struct st_producer *p, int64_t seg, const char *topic,
                     const char *key, size_t keylen, const char *value, size_t len)
{
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
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
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            st_error("could not produce to \"%s\": %s", topic, rd_kafka_err2str(err));
            return -1;
        }
        if (p->spool) {
            st_spool_queued(p->spool, seg, 0);
            return 1;
        }
        /* back-pressure: wait for deliveries to make room, never drop */
        rd_kafka_poll(p->rk, 100);
    }
}

static int produce(struct st_producer *p, int dlq, const char *key, const char *value,
                   size_t len)
{
    size_t keylen = key ? strlen(key) : 0;
    const char *topic = dlq ? p->topic_dlq : p->topic_events;
    int64_t seg = 0;
    int rc;

    pthread_mutex_lock(&p->lock);
    if (p->spool &&
        (seg = st_spool_append(p->spool, dlq, topic, key, keylen, value, len)) < 0) {
        rc = -1;
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

static int replay_one(void *arg, int64_t seg, int dlq, const char *topic, const char *key,
                      size_t keylen, const char *value, size_t len)
{
    return hand_over(arg, seg, topic, key, keylen, value, len) != 0;
}

static void spool_maintain(struct st_producer *p)
{
    rd_kafka_poll(p->rk, 0);
    if (!p->spool)
        return;
    st_spool_maintain(p->spool, replay_one, p);
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
    int64_t deadline = st_time_mono_ms() + timeout_ms;
    pthread_mutex_lock(&p->lock);
    while (rd_kafka_outq_len(p->rk) > 0 && st_time_mono_ms() < deadline) {
        char err[256];
        if (rd_kafka_fatal_error(p->rk, err, sizeof(err))) {
            st_error("fatal Kafka producer error: %s", err);
            break;
        }
        rd_kafka_flush(p->rk, 500);
    }
    spool_maintain(p);
    int64_t left = p->queued - p->delivered;
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
}
