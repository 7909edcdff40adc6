/* produce.c: the collector's Kafka producer (see produce.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector.h"
#include "kafka.h"
#include "log.h"
#include "metrics.h"
#include "produce.h"
#include "timeutil.h"

struct st_producer {
    rd_kafka_t *rk;
    const char *topic_events; /* not copied: the conf outlives the producer */
    const char *topic_dlq;
    int64_t queued, delivered, failed;
    int64_t timeout_ms;
    struct st_metric *m_latency, *m_errors, *m_delivered;
};

/* Delivery reports run on the thread that polls, so plain counters do. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct st_producer *p = opaque;
    if (p->m_latency) {
        int64_t us = rd_kafka_message_latency(m);
        if (us >= 0)
            st_metric_observe(p->m_latency, (double)us / 1e6);
        st_metric_add(m->err ? p->m_errors : p->m_delivered, 1);
    }
    if (m->err) {
        p->failed++;
        st_error("could not deliver to \"%s\": %s", rd_kafka_topic_name(m->rkt),
                 rd_kafka_err2str(m->err));
    } else {
        p->delivered++;
    }
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    /* transient broker errors are retried by librdkafka; say so once each */
    st_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

struct st_producer *st_producer_new(const struct st_collector_conf *conf,
                                    struct st_metrics *metrics, char *errstr,
                                    size_t errsz)
{
    struct st_producer *p = st_calloc(1, sizeof(*p));
    if (metrics) {
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

    snprintf(num, sizeof(num), "%" PRId64, conf->delivery_timeout_ms);
    if (st_kafka_conf_set(kc, "enable.idempotence", "true", errstr, errsz) ||
        st_kafka_conf_set(kc, "acks", "all", errstr, errsz) ||
        st_kafka_conf_set(kc, "message.timeout.ms", num, errstr, errsz) ||
        st_kafka_conf_set(kc, "compression.codec", "lz4", errstr, errsz))
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
                               (int)conf->topic_replication, 30000, errstr, errsz)) {
        st_producer_destroy(p);
        return NULL;
    }
    return p;

fail_conf:
    rd_kafka_conf_destroy(kc);
fail:
    free(p);
    return NULL;
}

void st_producer_destroy(struct st_producer *p)
{
    if (!p)
        return;
    if (p->rk) {
        rd_kafka_flush(p->rk, 5000);
        rd_kafka_destroy(p->rk);
    }
    free(p);
}

static int produce(struct st_producer *p, const char *topic, const char *key,
                   const char *reason, const char *value, size_t len)
{
    for (;;) {
        rd_kafka_resp_err_t err;
        if (reason)
            err = rd_kafka_producev(
                p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_VALUE((void *)value, len),
                RD_KAFKA_V_HEADER("reason", reason, -1), RD_KAFKA_V_END);
        else
            err = rd_kafka_producev(
                p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_KEY((void *)key, strlen(key)),
                RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_END);
        if (!err) {
            p->queued++;
            rd_kafka_poll(p->rk, 0);
            return 0;
        }
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            st_error("could not produce to \"%s\": %s", topic, rd_kafka_err2str(err));
            return -1;
        }
        /* back-pressure: wait for deliveries to make room, never drop */
        rd_kafka_poll(p->rk, 100);
    }
}

int st_producer_event(struct st_producer *p, const char *key, const char *value,
                      size_t len)
{
    return produce(p, p->topic_events, key, NULL, value, len);
}

int st_producer_dlq(struct st_producer *p, const char *reason,
                    const char *value, size_t len)
{
    return produce(p, p->topic_dlq, NULL, reason, value, len);
}

int64_t st_producer_flush(struct st_producer *p, int timeout_ms)
{
    int64_t deadline = st_time_mono_ms() + timeout_ms;
    while (rd_kafka_outq_len(p->rk) > 0 && st_time_mono_ms() < deadline) {
        char err[256];
        if (rd_kafka_fatal_error(p->rk, err, sizeof(err))) {
            st_error("fatal Kafka producer error: %s", err);
            break;
        }
        rd_kafka_flush(p->rk, 500);
    }
    rd_kafka_poll(p->rk, 0);
    return p->queued - p->delivered;
}

void st_producer_stats(const struct st_producer *p, struct st_producer_stats *s)
{
    s->queued = p->queued;
    s->delivered = p->delivered;
    s->failed = p->failed;
}
