/* lineage.c: issued credentials shared between collectors (see lineage.h).
 *
 * Two librdkafka clients: a producer for the records this collector learns
 * (linger 0: a record is worth sending at once), and a consumer assigned
 * every partition of the topic from the beginning, without a group (no
 * offset is ever committed: each start reads the whole compacted topic).
 *
 * The window. A credential issued and written within the time another
 * collector takes to learn it is not redacted by that collector: the issue's
 * collector must accept the issue line, produce the record (linger 0), the
 * broker append it, and the reader's fetch return it. The fetch is a long
 * poll answered as soon as data arrives, at the latest after
 * fetch.wait.max.ms = lineage.poll_ms; so the window is the issue line's
 * own latency through its collector plus a few milliseconds, bounded by
 * lineage.poll_ms when the reader's fetch was just answered empty. In the
 * collector that saw the issue, the set has it as soon as the issue line is
 * accepted; only lines accepted at the same time by another worker of the
 * same batch can miss it. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "collector.h"
#include "credset.h"
#include "event.h"
#include "json.h"
#include "kafka.h"
#include "lineage.h"
#include "log.h"

struct st_lineage {
    const char *topic; /* conf's, which outlives us */
    int fp_chars;      /* redact.fingerprint_chars */
    int poll_ms;
    struct st_credset *set;
    rd_kafka_t *prod, *cons;
    pthread_t thread;
    int started; /* the thread runs */
    int assigned; /* the consumer has its partitions (thread only after start) */
    int nparts;
    int stop;     /* atomic */
    int warned_len; /* a record of another fingerprint length was seen */
    long records, refused;
    long unfollowable; /* atomic: issued credentials the search cannot find */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Assigns every partition of the topic from the beginning; -1 when Kafka
 * does not answer within timeout_ms. */
static int assign(struct st_lineage *l, int timeout_ms)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(l->cons, l->topic, NULL);
    rd_kafka_resp_err_t err = rd_kafka_metadata(l->cons, 0, rkt, &md, timeout_ms);
    rd_kafka_topic_destroy(rkt);
    if (err)
        return -1;
    int n = md->topic_cnt == 1 && !md->topics[0].err ? md->topics[0].partition_cnt : 0;
    rd_kafka_metadata_destroy(md);
    if (n <= 0)
        return -1;
    rd_kafka_topic_partition_list_t *pl = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(pl, l->topic, p)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    err = rd_kafka_assign(l->cons, pl);
    rd_kafka_topic_partition_list_destroy(pl);
    if (err)
        return -1;
    l->nparts = n;
    l->assigned = 1;
    return 0;
}

/* One record of the topic into the set. Records come from other programs:
 * each is checked, and one refused is counted, never trusted. */
static void take(struct st_lineage *l, const rd_kafka_message_t *m)
{
    cJSON *doc = m->payload ? cJSON_ParseWithLength(m->payload, m->len) : NULL;
    const char *fp = doc ? st_json_str(doc, "fp") : NULL;
    int64_t len = 0;
    l->records++;
    if (!fp || !st_json_int(doc, "len", &len) || len < 0 ||
        st_credset_add(l->set, fp, (size_t)len) < 0) {
        l->refused++;
    } else if (strlen(fp) != (size_t)l->fp_chars && !l->warned_len) {
        l->warned_len = 1;
        st_warn("lineage: topic \"%s\" holds %zu-char fingerprints, this collector makes "
                "%d (redact.fingerprint_chars and redact.key_file must be the same on "
                "every collector)",
                l->topic, strlen(fp), l->fp_chars);
    }
    cJSON_Delete(doc);
}

/* Polls once; returns 1 on a partition's end, 0 otherwise. */
static int poll_once(struct st_lineage *l, int timeout_ms)
{
    rd_kafka_message_t *m = rd_kafka_consumer_poll(l->cons, timeout_ms);
    int eof = 0;
    if (!m)
        return 0;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
        eof = 1;
    else if (!m->err)
        take(l, m);
    else if (m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        l->assigned = 0; /* deleted under us: look it up again */
    rd_kafka_message_destroy(m);
    return eof;
}

static void *follow(void *arg)
{
    struct st_lineage *l = arg;
    while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
        if (!l->assigned && assign(l, 1000)) {
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        poll_once(l, l->poll_ms);
        rd_kafka_poll(l->prod, 0); /* delivery reports, served here */
    }
    return NULL;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    if (m->err)
        st_warn("lineage: could not produce an issued credential's fingerprint: %s "
                "(other collectors will not redact it)",
                rd_kafka_err2str(m->err));
}

static rd_kafka_t *client(const struct st_collector_conf *conf, rd_kafka_type_t type,
                          char *errstr, size_t errsz)
{
    char num[32], err[512];
    rd_kafka_conf_t *kc = st_kafka_conf_new(conf->brokers, errstr, errsz);
    if (!kc)
        return NULL;
    snprintf(num, sizeof(num), "%" PRId64, conf->lineage_poll_ms);
    /* the operator's security settings (kafka.rdkafka.*) first, ours after;
     * a property or password file the operator's settings name that cannot
     * be applied stops the client (until session 23 the producer's
     * settings were applied instead: `a || b ? c : d` is `(a || b) ? c : d`) */
    int bad = st_kafka_props_apply(kc, &conf->kafka, errstr, errsz);
    if (!bad && type == RD_KAFKA_PRODUCER)
        bad = st_kafka_conf_set(kc, "linger.ms", "0", errstr, errsz) ||
              st_kafka_conf_set(kc, "acks", "all", errstr, errsz);
    else if (!bad)
        bad = st_kafka_conf_set(kc, "group.id", "sandtrail-lineage", errstr, errsz) ||
              st_kafka_conf_set(kc, "enable.auto.commit", "false", errstr, errsz) ||
              st_kafka_conf_set(kc, "enable.partition.eof", "true", errstr, errsz) ||
              st_kafka_conf_set(kc, "fetch.wait.max.ms", num, errstr, errsz);
    if (bad) {
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    if (type == RD_KAFKA_PRODUCER)
        rd_kafka_conf_set_dr_msg_cb(kc, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(type, kc, err, sizeof(err));
    if (!rk) {
        snprintf(errstr, errsz, "could not create the lineage's Kafka client: %s", err);
        rd_kafka_conf_destroy(kc);
    }
    return rk;
}

int st_lineage_start(const struct st_collector_conf *conf, struct st_lineage **out,
                     char *errstr, size_t errsz)
{
    *out = NULL;
    if (!conf->topic_credentials || !*conf->topic_credentials)
        return 0;
    struct st_lineage *l = st_calloc(1, sizeof(*l));
    l->topic = conf->topic_credentials;
    l->fp_chars = (int)conf->fp_chars;
    l->poll_ms = (int)conf->lineage_poll_ms;
    l->set = st_credset_new();
    if (!(l->prod = client(conf, RD_KAFKA_PRODUCER, errstr, errsz)) ||
        !(l->cons = client(conf, RD_KAFKA_CONSUMER, errstr, errsz))) {
        st_lineage_stop(l);
        return -1;
    }

    /* read what is known before the first line is accepted */
    char err[512];
    int64_t deadline = now_ms() + conf->lineage_catchup_ms;
    int tmo = conf->lineage_catchup_ms < 5000 ? (int)conf->lineage_catchup_ms : 5000;
    if (st_kafka_ensure_compacted(l->prod, l->topic, 1, (int)conf->topic_replication,
                                  tmo > 0 ? tmo : 1, err, sizeof(err)))
        st_warn("lineage: %s", err);
    int eofs = 0, left;
    while ((left = (int)(deadline - now_ms())) > 0 && (!l->assigned || eofs < l->nparts)) {
        if (!l->assigned)
            assign(l, left < 1000 ? left : 1000);
        else
            eofs += poll_once(l, left < 100 ? left : 100);
    }
    if (!l->assigned || eofs < l->nparts)
        st_warn("lineage: could not read topic \"%s\" to its end in %" PRId64
                " ms: credentials issued before this start may pass unredacted until "
                "it is read",
                l->topic, conf->lineage_catchup_ms);
    st_info("lineage: %zu issued credentials known from \"%s\" (%ld records, %ld refused)",
            st_credset_count(l->set), l->topic, l->records, l->refused);
    if (pthread_create(&l->thread, NULL, follow, l))
        st_fatal("could not start the lineage thread");
    l->started = 1;
    *out = l;
    return 0;
}

void st_lineage_stop(struct st_lineage *l)
{
    if (!l)
        return;
    if (l->started) {
        __atomic_store_n(&l->stop, 1, __ATOMIC_RELEASE);
        pthread_join(l->thread, NULL);
    }
    if (l->prod) {
        if (rd_kafka_flush(l->prod, 5000))
            st_warn("lineage: some issued credentials' fingerprints were not delivered");
        rd_kafka_destroy(l->prod);
    }
    if (l->cons) {
        rd_kafka_consumer_close(l->cons);
        rd_kafka_destroy(l->cons);
    }
    if (l->unfollowable)
        st_warn("lineage: %ld token_issue events handed over a credential that cannot "
                "be followed in text (shorter than %d bytes or fewer than %d distinct "
                "characters): only a shape rule, if one fits, redacts it elsewhere",
                l->unfollowable, ST_CREDSET_MIN_LEN, ST_CREDSET_MIN_DISTINCT);
    st_credset_destroy(l->set);
    free(l);
}

const struct st_credset *st_lineage_set(const struct st_lineage *l)
{
    return l ? l->set : NULL;
}

int st_lineage_learn(struct st_lineage *l, const char *fp, size_t credlen,
                     const char *credential_id, const char *expires, const char *source)
{
    int added = st_credset_add(l->set, fp, credlen);
    if (added != 1)
        return added;
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "fp", fp);
    cJSON_AddNumberToObject(rec, "len", (double)credlen);
    if (credential_id)
        cJSON_AddStringToObject(rec, "credential_id", credential_id);
    if (expires)
        cJSON_AddStringToObject(rec, "expires", expires);
    if (source)
        cJSON_AddStringToObject(rec, "source", source);
    char *v = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    if (!v)
        st_fatal("out of memory printing a lineage record");
    rd_kafka_resp_err_t err = rd_kafka_producev(
        l->prod, RD_KAFKA_V_TOPIC(l->topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(fp, strlen(fp)), RD_KAFKA_V_VALUE(v, strlen(v)), RD_KAFKA_V_END);
    if (err)
        st_warn("lineage: could not produce an issued credential's fingerprint: %s",
                rd_kafka_err2str(err));
    free(v);
    return 1;
}

void st_lineage_note(struct st_lineage *l, const struct st_event *ev, size_t credlen)
{
    if (!l || !credlen || ev->type != ST_TYPE_TOKEN_ISSUE ||
        ev->source_kind != ST_SOURCE_BROKER)
        return;
    /* only a fingerprint this collector made of identity.credential: one a
     * sender wrote as credential_fp is not of our key */
    const char *fp = st_json_str(ev->identity, "credential_fp");
    if (!fp)
        return;
    if (st_lineage_learn(l, fp, credlen, st_json_str(ev->identity, "credential_id"),
                         st_json_str(ev->attrs, "expires_at"), ev->source_name) < 0)
        __atomic_add_fetch(&l->unfollowable, 1, __ATOMIC_RELAXED);
}
