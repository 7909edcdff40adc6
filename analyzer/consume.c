/* consume.c: the analyzer's Kafka consumer (see consume.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"
#include "consume.h"
#include "kafka.h"
#include "log.h"
#include "role.h"
#include "timeutil.h"

#define MAX_PARTS 1024
#define COMMITTED_TIMEOUT_MS 10000
/* Tries of the committed offsets' read that timed out: a read-committed
 * consumer's read waits while an open transaction holds a partition's
 * offset (a crashed transactional owner's, until its next producer
 * aborts it: deadletter.h's claim, or Kafka after transaction.timeout.ms,
 * 60 s, checked every 10 s), and while the group coordinator is away. */
#define COMMITTED_TRIES 7
#define ST_DRAIN_FETCH_WAIT_MS "10"
/* A fetch's answer waits for this many bytes, at most this long (a
 * consumer that is not draining). */
#define ST_FETCH_MIN_BYTES "65536"
#define ST_FETCH_WAIT_MS "100"
/* The pre-fetch queue's bounds. librdkafka 2.0 stops fetching once its
 * queue holds queued.min.messages (100,000) or queued.max.messages.kbytes
 * (64 MB) and fetches again only when its broker thread wakes for
 * something else, so a catch-up stalls 200-400 ms now and then. A role
 * that does not store events (detect) lifts them: the count out of the
 * way, 256 MB held at most while behind. A role that stores keeps
 * librdkafka's: with the bounds lifted a restarted all analyzer's batches
 * grew large while behind and its catch-up took 49-54 s instead of 30-31 s
 * in most runs, though it varied without them too (30-84 s: the cause is
 * open; docs/architecture.md, "A pre-fetch that does not stall").
 * kafka.rdkafka.queued.* win. */
/* A detecting role's fetches bring at most this much of each partition
 * (librdkafka's default is 1 MB, about 3,000 events of the denial
 * stream): a batch then holds shorter runs of each partition, so the
 * detection workers, split by partition, get about equal shares of it
 * (the main thread waited 0.5 s of a 1M-event drain for the other worker
 * with 1 MB, 0.1-0.16 s with 256 KB or 128 KB; docs/architecture.md,
 * "Session 18"). kafka.rdkafka.max.partition.fetch.bytes wins. */
#define ST_DETECT_PARTITION_FETCH_BYTES "262144"
#define ST_QUEUED_MIN_MESSAGES "1000000"
#define ST_QUEUED_MAX_KBYTES "262144"

struct part_state {
    char *topic;
    int32_t partition;
    int at_end;
    int64_t next; /* the offset after the last message polled; -1 none yet */
};

struct st_consumer {
    rd_kafka_t *rk;
    char *topic;
    st_consumer_revoke_cb revoke_cb;
    void *revoke_arg;
    st_consumer_assign_cb assign_cb;
    void *assign_arg;
    st_consumer_resume_cb resume_cb;
    void *resume_arg;
    const volatile sig_atomic_t *stop; /* NULL: none */
    struct part_state parts[MAX_PARTS];
    int nparts;
    int32_t topic_partitions; /* the topic's count at the last assignment; -1 */
    unsigned revokes;         /* revocations so far (on_rebalance) */
    /* an assignment was lost (on_rebalance), for good: librdkafka's own
     * flag is cleared by the unassign of that very revoke, before the
     * store's committer asks (st_consumer_assignment_lost) */
    atomic_int lost;
    /* the consumer queue (rd_kafka_poll_set_consumer's), from which
     * st_consumer_poll_batch takes what is already fetched in one call */
    rd_kafka_queue_t *q;
};

static struct part_state *part_find(struct st_consumer *c, const char *topic,
                                    int32_t partition)
{
    for (int i = 0; i < c->nparts; i++)
        if (c->parts[i].partition == partition && strcmp(c->parts[i].topic, topic) == 0)
            return &c->parts[i];
    return NULL;
}

static void parts_add(struct st_consumer *c, const rd_kafka_topic_partition_list_t *l)
{
    for (int i = 0; i < l->cnt; i++) {
        if (part_find(c, l->elems[i].topic, l->elems[i].partition))
            continue;
        if (c->nparts == MAX_PARTS)
            st_fatal("more than %d partitions assigned", MAX_PARTS);
        c->parts[c->nparts].topic = st_strdup(l->elems[i].topic);
        c->parts[c->nparts].partition = l->elems[i].partition;
        c->parts[c->nparts].at_end = 0;
        c->parts[c->nparts].next = -1;
        c->nparts++;
    }
}

static void parts_remove(struct st_consumer *c, const rd_kafka_topic_partition_list_t *l,
                         int lost)
{
    for (int i = 0; i < l->cnt; i++) {
        struct part_state *p = part_find(c, l->elems[i].topic, l->elems[i].partition);
        if (!p)
            continue;
        if (c->revoke_cb)
            c->revoke_cb(p->partition, lost, c->revoke_arg);
        free(p->topic);
        *p = c->parts[--c->nparts];
    }
}

/* The events topic's partition count, asked of Kafka's metadata at each
 * assignment (a topic given more partitions brings a rebalance). A failed
 * request keeps the count known before, raised past any partition assigned
 * (logged; unknown, -1, the run index compares nothing). */
static void refresh_topic_partitions(struct st_consumer *c, rd_kafka_t *rk,
                                     const rd_kafka_topic_partition_list_t *parts)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, c->topic, NULL);
    rd_kafka_resp_err_t e =
        rkt ? rd_kafka_metadata(rk, 0, rkt, &md, 5000) : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    if (!e && (md->topic_cnt != 1 || md->topics[0].err))
        e = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    if (!e)
        c->topic_partitions = md->topics[0].partition_cnt;
    else
        st_warn("could not read the partition count of \"%s\": %s", c->topic,
                rd_kafka_err2str(e));
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    /* a count known, and a partition beyond it assigned: it grew */
    for (int i = 0; i < parts->cnt && c->topic_partitions > 0; i++)
        if (parts->elems[i].partition >= c->topic_partitions)
            c->topic_partitions = parts->elems[i].partition + 1;
}

int32_t st_consumer_topic_partitions(const struct st_consumer *c)
{
    return c->topic_partitions;
}

/* A partition's clock in its committed offset's metadata: "clock=<us>"
 * (reorder.h). Anything else (another program's metadata, none) is no
 * clock. */
#define CLOCK_KEY "clock="

static int clock_parse(const void *md, size_t len, int64_t *clock)
{
    char buf[40], *end;
    size_t k = strlen(CLOCK_KEY);
    if (!md || len <= k || len >= sizeof(buf) || memcmp(md, CLOCK_KEY, k) != 0)
        return -1;
    memcpy(buf, md, len);
    buf[len] = '\0';
    errno = 0;
    long long v = strtoll(buf + k, &end, 10);
    if (errno || *end || end == buf + k)
        return -1;
    *clock = (int64_t)v;
    return 0;
}

/* Tells the resume callback each newly assigned partition's committed
 * offset and the clock it carries, before any of its messages is polled.
 * One round trip to the group coordinator per assignment, tried again
 * while it times out (COMMITTED_TRIES); if it fails, the partitions start
 * without a clock (logged: which events are late may then differ from a
 * run that never stopped).
 *
 * A partition read to have no committed offset is assigned from its
 * beginning explicitly, the start auto.offset.reset=earliest (set in
 * st_consumer_new, after the operator's properties) gives it anyway:
 * librdkafka 2.0, left to find no offset itself, asks for the partition's
 * beginning only after a fixed 100 ms back-off (rd_kafka_offset_reset's
 * "err ? 100 : 0"), a tenth of a second on every fresh group's start
 * (docs/architecture.md, "Session 25"). */
static void tell_committed(struct st_consumer *c, rd_kafka_t *rk,
                           rd_kafka_topic_partition_list_t *parts)
{
    if (!c->resume_cb || parts->cnt == 0)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_copy(parts);
    rd_kafka_resp_err_t e;
    for (int tries = 1; (e = rd_kafka_committed(rk, l, COMMITTED_TIMEOUT_MS)) ==
                            RD_KAFKA_RESP_ERR__TIMED_OUT &&
                        tries < COMMITTED_TRIES && !(c->stop && *c->stop);
         tries++)
        st_warn("the committed offsets of the %d partition(s) assigned not read within %d ms "
                "(a transaction still open holds one, or the group coordinator is away); "
                "trying again",
                parts->cnt, COMMITTED_TIMEOUT_MS);
    if (e) {
        st_warn("could not read the committed offsets of the %d partition(s) assigned: %s; "
                "their watermarks start again from the events read",
                parts->cnt, rd_kafka_err2str(e));
    } else {
        for (int i = 0; i < l->cnt; i++) {
            const rd_kafka_topic_partition_t *tp = &l->elems[i];
            int64_t clock;
            /* l is a copy of parts: the same partitions, in order */
            if (!tp->err && tp->offset == RD_KAFKA_OFFSET_INVALID &&
                parts->elems[i].offset == RD_KAFKA_OFFSET_INVALID)
                parts->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
            if (tp->err || tp->offset < 0 ||
                clock_parse(tp->metadata, tp->metadata_size, &clock))
                continue;
            c->resume_cb(tp->partition, tp->offset, clock, c->resume_arg);
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    struct st_consumer *c = opaque;
    int cooperative = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        st_info("assigned %d partition(s)", parts->cnt);
        parts_add(c, parts);
        refresh_topic_partitions(c, rk, parts);
        if (c->assign_cb && parts->cnt > 0) {
            int32_t *ps = st_calloc((size_t)parts->cnt, sizeof(*ps));
            for (int i = 0; i < parts->cnt; i++)
                ps[i] = parts->elems[i].partition;
            c->assign_cb(ps, parts->cnt, c->assign_arg);
            free(ps);
        }
        tell_committed(c, rk, parts);
        if (cooperative)
            rd_kafka_error_destroy(rd_kafka_incremental_assign(rk, parts));
        else
            rd_kafka_assign(rk, parts);
    } else {
        /* Messages of a revoked partition already in the batch being
         * polled are dropped by st_consumer_poll_batch (revokes counts). */
        int lost = rd_kafka_assignment_lost(rk);
        if (lost) {
            atomic_store(&c->lost, 1);
            st_error("lost %d partition(s): out of the group longer than "
                     "kafka.session.timeout.ms, another analyzer may own them",
                     parts->cnt);
        } else {
            st_info("revoked %d partition(s)", parts->cnt);
        }
        parts_remove(c, parts, lost);
        c->revokes++;
        if (cooperative)
            rd_kafka_error_destroy(rd_kafka_incremental_unassign(rk, parts));
        else
            rd_kafka_assign(rk, NULL);
    }
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    st_kafka_refused_exit(err, reason);
    st_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

struct st_consumer *st_consumer_new(const struct st_analyzer_conf *conf,
                                    char *errstr, size_t errsz)
{
    struct st_consumer *c = st_calloc(1, sizeof(*c));
    char err[512];
    rd_kafka_conf_t *kc = st_kafka_conf_new(conf->brokers, errstr, errsz);
    if (!kc) {
        free(c);
        return NULL;
    }
    /* --drain ends on each partition's end-of-partition event, which
     * comes with the answer to a fetch at the partition's end: the broker
     * holds that fetch fetch.wait.max.ms (500 ms by default) for data that
     * never comes. Draining, it answers after 10 ms: the drain's end comes
     * that much sooner, for more empty fetches while some partition is at
     * its end and another is not (docs/architecture.md, "The end of
     * --drain"). A kafka.rdkafka.fetch.wait.max.ms still wins. */
    /* A caught-up consumer's fetch is answered as soon as any record
     * arrives: at 30,000 events/s two analyzers' fetches cost the broker
     * about a tenth of a core. Waiting for 64 KB (at most
     * ST_FETCH_WAIT_MS) answers about five times fewer fetches, for at
     * most that much more latency when the stream is slow
     * (docs/architecture.md, "Fewer fetches"). kafka.rdkafka.* wins. */
    int lift = !st_role_stores((enum st_role)conf->role);
    int detects = st_role_detects((enum st_role)conf->role);
    if (st_kafka_conf_set(kc, "fetch.min.bytes", ST_FETCH_MIN_BYTES, errstr, errsz) ||
        (detects && st_kafka_conf_set(kc, "max.partition.fetch.bytes",
                                      ST_DETECT_PARTITION_FETCH_BYTES, errstr, errsz)) ||
        (lift && (st_kafka_conf_set(kc, "queued.min.messages", ST_QUEUED_MIN_MESSAGES, errstr,
                                    errsz) ||
                  st_kafka_conf_set(kc, "queued.max.messages.kbytes", ST_QUEUED_MAX_KBYTES,
                                    errstr, errsz))) ||
        st_kafka_conf_set(kc, "fetch.wait.max.ms",
                          conf->drain ? ST_DRAIN_FETCH_WAIT_MS : ST_FETCH_WAIT_MS, errstr,
                          errsz) ||
        st_kafka_props_apply(kc, &conf->kafka, errstr, errsz) ||
        st_kafka_conf_set(kc, "group.id", conf->group, errstr, errsz) ||
        st_kafka_conf_set(kc, "enable.auto.commit", "false", errstr, errsz) ||
        st_kafka_conf_set(kc, "auto.offset.reset", "earliest", errstr, errsz) ||
        st_kafka_conf_set(kc, "enable.partition.eof", "true", errstr, errsz) ||
        st_kafka_conf_set(kc, "partition.assignment.strategy", "cooperative-sticky",
                          errstr, errsz) ||
        st_kafka_conf_set(kc, "isolation.level", "read_committed", errstr, errsz) ||
        (conf->group_instance_id &&
         st_kafka_conf_set(kc, "group.instance.id", conf->group_instance_id, errstr,
                           errsz))) {
        rd_kafka_conf_destroy(kc);
        free(c);
        return NULL;
    }
    char num[24];
    snprintf(num, sizeof(num), "%" PRId64, conf->session_timeout_ms);
    if (st_kafka_conf_set(kc, "session.timeout.ms", num, errstr, errsz)) {
        rd_kafka_conf_destroy(kc);
        free(c);
        return NULL;
    }
    rd_kafka_conf_set_rebalance_cb(kc, on_rebalance);
    rd_kafka_conf_set_error_cb(kc, on_error);
    rd_kafka_conf_set_opaque(kc, c);

    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof(err));
    if (!c->rk) {
        snprintf(errstr, errsz, "could not create Kafka consumer: %s", err);
        rd_kafka_conf_destroy(kc);
        free(c);
        return NULL;
    }
    rd_kafka_poll_set_consumer(c->rk);
    c->q = rd_kafka_queue_get_consumer(c->rk);
    c->topic = st_strdup(conf->topic_events);
    c->topic_partitions = -1;

    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, conf->topic_events, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(c->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (e) {
        snprintf(errstr, errsz, "could not subscribe to \"%s\": %s", conf->topic_events,
                 rd_kafka_err2str(e));
        st_consumer_destroy(c);
        return NULL;
    }
    return c;
}

void st_consumer_destroy(struct st_consumer *c)
{
    if (!c)
        return;
    if (c->rk) {
        if (c->q)
            rd_kafka_queue_destroy(c->q);
        rd_kafka_consumer_close(c->rk);
        rd_kafka_destroy(c->rk);
    }
    for (int i = 0; i < c->nparts; i++)
        free(c->parts[i].topic);
    free(c->topic);
    free(c);
}

int st_consumer_assignment_lost(struct st_consumer *c)
{
    return atomic_load(&c->lost) || rd_kafka_assignment_lost(c->rk);
}

void st_consumer_on_stop(struct st_consumer *c, const volatile sig_atomic_t *stop)
{
    c->stop = stop;
}

void st_consumer_on_resume(struct st_consumer *c, st_consumer_resume_cb cb, void *arg)
{
    c->resume_cb = cb;
    c->resume_arg = arg;
}

void st_consumer_on_revoke(struct st_consumer *c, st_consumer_revoke_cb cb, void *arg)
{
    c->revoke_cb = cb;
    c->revoke_arg = arg;
}

void st_consumer_on_assign(struct st_consumer *c, st_consumer_assign_cb cb, void *arg)
{
    c->assign_cb = cb;
    c->assign_arg = arg;
}

int st_consumer_partitions(const struct st_consumer *c, int32_t *out, int max)
{
    int n = 0;
    for (int i = 0; i < c->nparts && n < max; i++)
        out[n++] = c->parts[i].partition;
    return n;
}

/* Whether m was written to Kafka at least behind_ms ago (or carries no
 * timestamp). */
static int old_enough(const rd_kafka_message_t *m, int64_t behind_ms)
{
    rd_kafka_timestamp_type_t type;
    int64_t ts = rd_kafka_message_timestamp(m, &type);
    return behind_ms <= 0 || ts < 0 || st_time_now_us() / 1000 - ts >= behind_ms;
}

/* Drops msgs[0..n) of partitions no longer assigned; returns the count
 * kept, in order. */
static int drop_revoked(struct st_consumer *c, rd_kafka_message_t **msgs, int n)
{
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (part_find(c, rd_kafka_topic_name(msgs[i]->rkt), msgs[i]->partition))
            msgs[kept++] = msgs[i];
        else
            rd_kafka_message_destroy(msgs[i]);
    }
    return kept;
}

/* Messages taken from the queue per call once one has come: what
 * librdkafka already fetched, without a wait (one call and one lock of its
 * queue instead of one per message: docs/architecture.md, "Session 18"). */
#define POLL_CHUNK 256

/* A partition revoked while a batch is polled (its callback runs inside
 * rd_kafka_consumer_poll, or rd_kafka_consume_batch_queue) loses the
 * messages of it already polled: the revoke handler has flushed and
 * committed what this analyzer held of it, and its new owner reads them
 * again from the committed offset. Kept, they would be detected here after
 * the revoke, and the next checkpoint would write absolute values over
 * state the new owner writes. (A chunk's messages of it are dropped as
 * they are looked at: their partition is not found.) */
int st_consumer_poll_batch(struct st_consumer *c, rd_kafka_message_t **msgs,
                           int max, int behind_max, int64_t behind_ms, int timeout_ms)
{
    int64_t deadline = st_time_mono_ms() + timeout_ms;
    int n = 0, done = 0;
    unsigned revokes = c->revokes;
    rd_kafka_message_t *chunk[POLL_CHUNK];
    /* the partition of the last message (one subscribed topic: its
     * handle and number name it) */
    struct part_state *last = NULL;
    const rd_kafka_topic_t *last_rkt = NULL;

    while (!done) {
        /* full: behind (another full batch already waits in Kafka, and its
         * last message is old), it grows once, up to behind_max */
        if (n >= max && (behind_max <= max || st_consumer_backlog(c) < max ||
                         !old_enough(msgs[n - 1], behind_ms)))
            break;
        if (n >= max)
            max = behind_max;
        int64_t left = deadline - st_time_mono_ms();
        if (left < 0)
            left = 0;
        /* the first message waits up to the deadline; the rest of the
         * chunk is what is already there */
        int got = 0;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, (int)left);
        if (m) {
            chunk[got++] = m;
            int room = max - n - 1 < POLL_CHUNK - 1 ? max - n - 1 : POLL_CHUNK - 1;
            if (room > 0) {
                ssize_t k = rd_kafka_consume_batch_queue(c->q, 0, chunk + 1, (size_t)room);
                if (k > 0)
                    got += (int)k;
            }
        }
        if (c->revokes != revokes) {
            revokes = c->revokes;
            n = drop_revoked(c, msgs, n);
            last = NULL;
        }
        if (!got) {
            if (left == 0)
                break;
            continue;
        }
        for (int i = 0; i < got; i++) {
            m = chunk[i];
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                struct part_state *p =
                    part_find(c, rd_kafka_topic_name(m->rkt), m->partition);
                if (p)
                    p->at_end = 1;
                rd_kafka_message_destroy(m);
                /* a caught-up consumer returns what it has instead of
                 * waiting (the rest of the chunk first) */
                if (st_consumer_drained(c))
                    done = 1;
                continue;
            }
            if (m->err) {
                int fatal = m->err == RD_KAFKA_RESP_ERR__FATAL;
                st_warn("kafka consumer: %s", rd_kafka_message_errstr(m));
                rd_kafka_message_destroy(m);
                if (fatal) {
                    while (++i < got)
                        rd_kafka_message_destroy(chunk[i]);
                    return -1;
                }
                continue;
            }
            struct part_state *p =
                last && last_rkt == m->rkt && last->partition == m->partition
                    ? last
                    : part_find(c, rd_kafka_topic_name(m->rkt), m->partition);
            if (!p) { /* fetched before its partition was revoked */
                rd_kafka_message_destroy(m);
                continue;
            }
            last = p;
            last_rkt = m->rkt;
            p->at_end = 0;
            p->next = m->offset + 1;
            msgs[n++] = m;
        }
    }
    return n;
}

rd_kafka_topic_partition_list_t *st_consumer_offsets(const struct st_consumer *c,
                                                     const int32_t *partitions,
                                                     const int64_t *offsets,
                                                     const int64_t *clocks, int n)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n ? n : 1);
    for (int i = 0; i < n; i++) {
        if (offsets[i] < 0)
            continue;
        rd_kafka_topic_partition_t *tp =
            rd_kafka_topic_partition_list_add(l, c->topic, partitions[i]);
        tp->offset = offsets[i];
        if (clocks && clocks[i] != INT64_MIN) {
            char md[40];
            int len = snprintf(md, sizeof(md), CLOCK_KEY "%" PRId64, clocks[i]);
            /* the list owns (and frees) its metadata */
            tp->metadata = st_malloc((size_t)len);
            memcpy(tp->metadata, md, (size_t)len);
            tp->metadata_size = (size_t)len;
        }
    }
    return l;
}

int st_consumer_commit(struct st_consumer *c, const int32_t *partitions,
                       const int64_t *offsets, const int64_t *clocks, int n)
{
    rd_kafka_topic_partition_list_t *l = st_consumer_offsets(c, partitions, offsets, clocks, n);
    if (l->cnt == 0) {
        rd_kafka_topic_partition_list_destroy(l);
        return 0;
    }
    rd_kafka_resp_err_t e = rd_kafka_commit(c->rk, l, 0);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
        st_warn("could not commit offsets: %s", rd_kafka_err2str(e));
        return -1;
    }
    return 0;
}

rd_kafka_consumer_group_metadata_t *st_consumer_group_metadata(const struct st_consumer *c)
{
    return rd_kafka_consumer_group_metadata(c->rk);
}

int st_consumer_drained(const struct st_consumer *c)
{
    if (c->nparts == 0)
        return 0;
    for (int i = 0; i < c->nparts; i++)
        if (!c->parts[i].at_end)
            return 0;
    return 1;
}

int64_t st_consumer_backlog(const struct st_consumer *c)
{
    int64_t total = 0, lo, hi;
    for (int i = 0; i < c->nparts; i++) {
        const struct part_state *p = &c->parts[i];
        /* the high watermark as of the last fetch response (no request) */
        if (p->next < 0 ||
            rd_kafka_get_watermark_offsets(c->rk, p->topic, p->partition, &lo, &hi) ||
            hi <= p->next)
            continue;
        total += hi - p->next;
    }
    return total;
}

int st_consumer_assigned(const struct st_consumer *c)
{
    return c->nparts;
}

int64_t st_consumer_lag(const struct st_consumer *c, int32_t partition, int64_t offset)
{
    int64_t lo, hi;
    if (offset < 0 ||
        rd_kafka_get_watermark_offsets(c->rk, c->topic, partition, &lo, &hi) ||
        hi < 0)
        return -1;
    return hi > offset ? hi - offset : 0;
}
