/* kafka.c: librdkafka set-up shared by every program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "kafka.h"
#include "log.h"
#include "timeutil.h"

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

int st_kafka_props_parse(void *arg, const char *name, const char *value,
                         char *errstr, size_t errsz)
{
    struct st_kafka_props *p = arg;
    size_t plen = strlen(ST_KAFKA_PREFIX);
    char err[256];

    if (strncmp(name, ST_KAFKA_PREFIX, plen) != 0)
        return 1;
    /* a scratch configuration: librdkafka judges the name and the value */
    rd_kafka_conf_t *scratch = rd_kafka_conf_new();
    rd_kafka_conf_res_t res =
        rd_kafka_conf_set(scratch, name + plen, value, err, sizeof(err));
    rd_kafka_conf_destroy(scratch);
    if (res != RD_KAFKA_CONF_OK) {
        snprintf(errstr, errsz, "invalid value for \"%s\": %s", name, err);
        return -1;
    }
    p->names = st_realloc(p->names, (p->n + 1) * sizeof(*p->names));
    p->values = st_realloc(p->values, (p->n + 1) * sizeof(*p->values));
    p->names[p->n] = st_strdup(name + plen);
    p->values[p->n] = st_strdup(value);
    p->n++;
    return 0;
}

int st_kafka_props_apply(rd_kafka_conf_t *conf, const struct st_kafka_props *p,
                         char *errstr, size_t errsz)
{
    char buf[1024];
    for (size_t i = 0; i < p->n; i++)
        if (st_kafka_conf_set(conf, p->names[i], p->values[i], errstr, errsz))
            return -1;
    if (!p->password_file || !*p->password_file)
        return 0;
    if (st_conf_read_secret("kafka.sasl.password_file", p->password_file, buf,
                            sizeof(buf), errstr, errsz))
        return -1;
    int rc = st_kafka_conf_set(conf, "sasl.password", buf, errstr, errsz);
    explicit_bzero(buf, sizeof(buf));
    return rc;
}

void st_kafka_props_fini(struct st_kafka_props *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        free(p->names[i]);
        free(p->values[i]);
    }
    free(p->names);
    free(p->values);
    p->names = p->values = NULL;
    p->n = 0;
}

void st_kafka_refused_exit(int err, const char *reason)
{
    if (err != RD_KAFKA_RESP_ERR__AUTHENTICATION && err != RD_KAFKA_RESP_ERR__SSL)
        return;
    st_error("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
    st_error("kafka refused the connection's authentication or TLS: stopping (never "
             "retried without them; check kafka.rdkafka.* and kafka.sasl.password_file)");
    _exit(78);
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

/* Waits until every partition of topic answers a ListOffsets on its
 * leader (rd_kafka_offsets_for_times for the latest offset), at most until
 * deadline (ms, st_time_mono_ms): 0, or -1 with errstr. Not
 * rd_kafka_query_watermark_offsets: in librdkafka before 2.3 (Debian 12
 * has 2.0) it ignores its timeout and waits for as long as the leader it
 * first asked stays down (librdkafka issue 2588), even once another
 * broker leads the partition: a collector that started while a broker was
 * killed waited there for good (scripts/check-leader-moves,
 * STOP_SIGNAL=KILL; docs/architecture.md, "Session 23").
 * rd_kafka_offsets_for_times keeps its timeout and finds the leaders anew
 * at each call. A topic just created is in the
 * cluster's metadata, with its leaders, a few tens of ms before each
 * leader has made the partition: a produce then gets NOT_LEADER, and
 * librdkafka 2.0's idempotent producer, once a later batch to the same
 * partition was taken (the broker, knowing no producer state for a new
 * partition, accepts any first sequence), counts the earlier failed
 * batches as delivered ("implicitly acked") although they are not in the
 * log: the first events sent to a topic the collector had just made were
 * lost, now and then (docs/architecture.md, "Session 22"). */
/* What is left until deadline, within [100, most] ms: one call's timeout. */
static int left_ms(int64_t deadline, int most)
{
    int64_t left = deadline - st_time_mono_ms();
    return left < 100 ? 100 : left > most ? most : (int)left;
}

static int wait_ready(rd_kafka_t *rk, const char *topic, int64_t deadline, char *errstr,
                      size_t errsz)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    int nparts = 0, p = 0, stale = 1;
    /* the topic's metadata (its partition count, their leaders: read
     * again after a partition did not answer, whose leader may have
     * moved), then each partition: retried (not there yet, a leader down,
     * or a transient error) until the deadline */
    for (;;) {
        if (rd_kafka_type(rk) == RD_KAFKA_PRODUCER)
            rd_kafka_poll(rk, 0);
        if (stale) {
            e = rd_kafka_metadata(rk, 0, rkt, &md, left_ms(deadline, 5000));
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
                if (md->topic_cnt != 1)
                    e = RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
                else if (md->topics[0].err)
                    e = md->topics[0].err;
                else if ((nparts = md->topics[0].partition_cnt) <= 0)
                    e = RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION;
                rd_kafka_metadata_destroy(md);
            }
            stale = e != RD_KAFKA_RESP_ERR_NO_ERROR;
        } else {
            /* a live leader answers in milliseconds: a short wait, then
             * the metadata again */
            rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
            rd_kafka_topic_partition_list_add(l, topic, p)->offset = RD_KAFKA_OFFSET_END;
            e = rd_kafka_offsets_for_times(rk, l, left_ms(deadline, 2000));
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
                e = l->elems[0].err;
            rd_kafka_topic_partition_list_destroy(l);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR && ++p == nparts)
                break;
            stale = e != RD_KAFKA_RESP_ERR_NO_ERROR;
        }
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (st_time_mono_ms() >= deadline)
                break;
            usleep(20000);
        }
    }
    rd_kafka_topic_destroy(rkt);
    if (p < nparts || !nparts) {
        snprintf(errstr, errsz, "topic \"%s\": partition %d not ready: %s", topic, p,
                 e ? rd_kafka_err2str(e) : "no partitions in the metadata");
        return -1;
    }
    return 0;
}

int st_kafka_wait_ready(rd_kafka_t *rk, const char *topic, int timeout_ms, char *errstr,
                        size_t errsz)
{
    return wait_ready(rk, topic, st_time_mono_ms() + timeout_ms, errstr, errsz);
}

int st_kafka_conf_producer(rd_kafka_conf_t *conf, const struct st_kafka_props *p,
                           char *errstr, size_t errsz)
{
    return st_kafka_conf_set(conf, "max.in.flight.requests.per.connection", "1", errstr,
                             errsz) ||
                   st_kafka_props_apply(conf, p, errstr, errsz)
               ? -1
               : 0;
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
    /* a producer's error callback runs from rd_kafka_poll: serve it while
     * waiting, so that a refused login or certificate stops start-up at
     * once (st_kafka_refused_exit) rather than after the timeout */
    for (int waited = 0; waited <= timeout_ms + 2000 && !rkev; waited += 100) {
        if (rd_kafka_type(rk) == RD_KAFKA_PRODUCER)
            rd_kafka_poll(rk, 0);
        rkev = rd_kafka_queue_poll(q, 100);
    }
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
    /* every topic, made now or before (by another process a moment ago,
     * say): its partitions ready before anything is produced to them */
    int64_t deadline = st_time_mono_ms() + timeout_ms;
    for (i = 0; i < n; i++)
        if (wait_ready(rk, topics[i], deadline, errstr, errsz))
            goto out;
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
