/* kafka.c: librdkafka set-up shared by every program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kafka.h"
#include "log.h"

int st_kafka_conf_set(rd_kafka_conf_t *conf, const char *name,
                      const char *value, char *errstr, size_t errsz)
{
    char err[256];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        snprintf(errstr, errsz, "could not set Kafka property \"%s\": %s", name, err);
        return -1;
    }
    return 0;
}

rd_kafka_conf_t *st_kafka_conf_new(const char *brokers, char *errstr,
                                   size_t errsz)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (st_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, errsz) ||
        st_kafka_conf_set(conf, "client.id", "sandtrail", errstr, errsz)) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    return conf;
}

static int ensure(rd_kafka_t *rk, const char *const *topics, int n, int partitions,
                  int replication, int compact, int timeout_ms, char *errstr,
                  size_t errsz)
{
    rd_kafka_NewTopic_t **nt = st_calloc((size_t)n, sizeof(*nt));
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_event_t *rkev = NULL;
    char err[256];
    int rc = -1, i;

    rd_kafka_AdminOptions_set_operation_timeout(opts, timeout_ms, err, sizeof(err));
    rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, err, sizeof(err));
    for (i = 0; i < n; i++) {
        nt[i] = rd_kafka_NewTopic_new(topics[i], partitions, replication, err,
                                      sizeof(err));
        if (!nt[i]) {
            snprintf(errstr, errsz, "invalid topic \"%s\": %s", topics[i], err);
            goto out;
        }
        if (compact &&
            rd_kafka_NewTopic_set_config(nt[i], "cleanup.policy", "compact")) {
            snprintf(errstr, errsz, "could not make topic \"%s\" compacted", topics[i]);
            goto out;
        }
    }
    rd_kafka_CreateTopics(rk, nt, (size_t)n, opts, q);
    rkev = rd_kafka_queue_poll(q, timeout_ms + 2000);
    if (!rkev) {
        snprintf(errstr, errsz, "could not create topics: no answer from Kafka in %d ms",
                 timeout_ms);
        goto out;
    }
    if (rd_kafka_event_error(rkev)) {
        snprintf(errstr, errsz, "could not create topics: %s",
                 rd_kafka_event_error_string(rkev));
        goto out;
    }
    const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(rkev);
    size_t cnt;
    const rd_kafka_topic_result_t **tr = rd_kafka_CreateTopics_result_topics(res, &cnt);
    for (size_t j = 0; j < cnt; j++) {
        rd_kafka_resp_err_t e = rd_kafka_topic_result_error(tr[j]);
        if (e && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            snprintf(errstr, errsz, "could not create topic \"%s\": %s",
                     rd_kafka_topic_result_name(tr[j]),
                     rd_kafka_topic_result_error_string(tr[j]));
            goto out;
        }
    }
    rc = 0;
out:
    if (rkev)
        rd_kafka_event_destroy(rkev);
    for (i = 0; i < n; i++)
        if (nt[i])
            rd_kafka_NewTopic_destroy(nt[i]);
    free(nt);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    return rc;
}

int st_kafka_ensure_topics(rd_kafka_t *rk, const char *const *topics, int n,
                           int partitions, int replication, int timeout_ms,
                           char *errstr, size_t errsz)
{
    return ensure(rk, topics, n, partitions, replication, 0, timeout_ms, errstr, errsz);
}

int st_kafka_ensure_compacted(rd_kafka_t *rk, const char *topic, int partitions,
                              int replication, int timeout_ms, char *errstr,
                              size_t errsz)
{
    return ensure(rk, &topic, 1, partitions, replication, 1, timeout_ms, errstr, errsz);
}
