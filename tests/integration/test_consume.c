/* test_consume.c: the analyzer's consumer (analyzer/consume.c) against the
 * real Kafka broker: a batch never holds a message of a partition revoked
 * while it was being polled.
 *
 * Consumer A polls one long batch of a backlog in a 4-partition topic, with
 * small fetches; meanwhile consumer B joins the group, and the
 * cooperative-sticky assignment takes partitions from A inside A's poll.
 * Every message A's batch returns must be of a partition A still holds:
 * one of a revoked partition would be detected after the revoke handler
 * flushed, and its checkpoint would write over the new owner's state.
 * Also: a lost assignment stays reported lost; a committed offset held by
 * an open transaction is read once the transaction ends. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "analyzer.h"
#include "consume.h"
#include "kafka.h"
#include "timeutil.h"
#include "world.h"

#define NPARTS 4

static struct world w;
static atomic_int b_assigned;
static int revoked_a;

static void on_revoke_a(int32_t partition, int lost, void *arg)
{
    (void)partition;
    (void)lost;
    (void)arg;
    revoked_a++;
}

/* Writes n messages to each partition. */
static void produce_backlog(rd_kafka_t *rk, int n)
{
    char v[64];
    for (int i = 0; i < n; i++) {
        snprintf(v, sizeof(v), "m%d", i);
        for (int32_t p = 0; p < NPARTS; p++)
            while (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(w.topic), RD_KAFKA_V_PARTITION(p),
                                     RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                     RD_KAFKA_V_VALUE(v, strlen(v)), RD_KAFKA_V_END) ==
                   RD_KAFKA_RESP_ERR__QUEUE_FULL)
                rd_kafka_poll(rk, 10);
        rd_kafka_poll(rk, 0);
    }
    ck_assert_int_eq(rd_kafka_flush(rk, 60000), 0);
}

/* Makes the world's topic (NPARTS partitions) and writes n messages to
 * each partition; returns the producer, which the caller destroys. */
static rd_kafka_t *topic_with_backlog(int n)
{
    rd_kafka_t *prod = world_topic_producer(w.topic, NPARTS);
    produce_backlog(prod, n);
    return prod;
}

/* Small fetches, so that A reads its backlog for longer than a rebalance
 * takes (and its batch does not end at the partitions' end). */
static char *fetch_names[] = {"fetch.max.bytes", "max.partition.fetch.bytes",
                              "message.max.bytes", "queued.max.messages.kbytes"};
static char *fetch_values[] = {"4096", "1024", "4096", "16"};

static struct st_analyzer_conf conf_for(const char *group)
{
    struct st_analyzer_conf c = {0};
    c.brokers = getenv("SANDTRAIL_KAFKA_BROKERS");
    c.topic_events = w.topic;
    c.group = (char *)group;
    c.session_timeout_ms = 10000;
    c.kafka.names = fetch_names;
    c.kafka.values = fetch_values;
    c.kafka.n = 4;
    return c;
}

/* Consumer B: joins, then polls until it holds partitions and A is done. */
static int consumer_b(void *arg)
{
    struct st_consumer *b = arg;
    rd_kafka_message_t *msgs[256];
    int64_t until = st_time_mono_ms() + 30000;
    while (st_time_mono_ms() < until && atomic_load(&b_assigned) >= 0) {
        int n = st_consumer_poll_batch(b, msgs, 256, 0, 0, 100);
        for (int i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
        if (st_consumer_assigned(b) > 0 && atomic_load(&b_assigned) == 0)
            atomic_store(&b_assigned, 1);
    }
    return 0;
}

START_TEST(consume_batch_drops_messages_of_a_partition_revoked_during_its_poll)
{
    char err[512], group[128];
    world_init(&w, "consume");
    snprintf(group, sizeof(group), "%s.group", w.name);

    rd_kafka_t *prod = topic_with_backlog(50000);

    struct st_analyzer_conf ca = conf_for(group);
    struct st_consumer *a = st_consumer_new(&ca, err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    st_consumer_on_revoke(a, on_revoke_a, NULL);
    rd_kafka_message_t **msgs = calloc(1000000, sizeof(*msgs));
    ck_assert_ptr_nonnull(msgs);
    /* A takes every partition */
    int64_t until = st_time_mono_ms() + 30000;
    while (st_consumer_assigned(a) < NPARTS && st_time_mono_ms() < until) {
        int n = st_consumer_poll_batch(a, msgs, 1, 0, 0, 100);
        for (int i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
    }
    ck_assert_int_eq(st_consumer_assigned(a), NPARTS);

    /* B joins while A polls one long batch */
    struct st_analyzer_conf cb = conf_for(group);
    struct st_consumer *b = st_consumer_new(&cb, err, sizeof(err));
    ck_assert_msg(b != NULL, "%s", err);
    thrd_t bt;
    ck_assert_int_eq(thrd_create(&bt, consumer_b, b), thrd_success);
    int n = st_consumer_poll_batch(a, msgs, 1000000, 0, 0, 10000);
    int32_t held[NPARTS];
    int nheld = st_consumer_partitions(a, held, NPARTS);
    int foreign = 0, seen[NPARTS] = {0};
    for (int i = 0; i < n; i++) {
        int mine = 0;
        for (int k = 0; k < nheld; k++)
            mine |= held[k] == msgs[i]->partition;
        foreign += !mine;
        if (msgs[i]->partition >= 0 && msgs[i]->partition < NPARTS)
            seen[msgs[i]->partition]++;
        rd_kafka_message_destroy(msgs[i]);
    }
    fprintf(stderr, "A's batch: %d messages (per partition %d %d %d %d), %d partition(s) "
            "revoked, %d held after, %d of partitions not held\n",
            n, seen[0], seen[1], seen[2], seen[3], revoked_a, nheld, foreign);
    /* the rebalance happened inside the batch, which still read */
    ck_assert_int_gt(revoked_a, 0);
    ck_assert_int_lt(nheld, NPARTS);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(foreign, 0);

    atomic_store(&b_assigned, -1);
    thrd_join(bt, NULL);
    rd_kafka_destroy(prod);
    st_consumer_destroy(b);
    st_consumer_destroy(a);
    free(msgs);
    world_drop(&w);
}
END_TEST

static int lost_seen;

static void on_revoke_lost(int32_t partition, int lost, void *arg)
{
    (void)partition;
    (void)arg;
    lost_seen |= lost;
}

/* A consumer out of its group (here: no poll for max.poll.interval.ms)
 * loses its assignment. The revoke reports it lost, and the consumer keeps
 * saying so afterwards: the store's committer asks st_consumer_assignment_lost
 * before each checkpoint of the batches still in flight, which the main
 * thread finishes only after the revoke returned (librdkafka's own flag is
 * cleared by the unassign the revoke makes). */
START_TEST(consume_a_lost_assignment_stays_lost_after_its_revoke)
{
    char err[512], group[128];
    world_init(&w, "consumelost");
    snprintf(group, sizeof(group), "%s.group", w.name);

    rd_kafka_t *prod = topic_with_backlog(10);

    static char *names[] = {"max.poll.interval.ms"};
    static char *values[] = {"6000"};
    struct st_analyzer_conf ca = conf_for(group);
    ca.session_timeout_ms = 6000;
    ca.kafka.names = names;
    ca.kafka.values = values;
    ca.kafka.n = 1;
    struct st_consumer *a = st_consumer_new(&ca, err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    st_consumer_on_revoke(a, on_revoke_lost, NULL);
    rd_kafka_message_t *msgs[256];
    int64_t until = st_time_mono_ms() + 30000;
    while (st_consumer_assigned(a) < NPARTS && st_time_mono_ms() < until) {
        int n = st_consumer_poll_batch(a, msgs, 256, 0, 0, 100);
        for (int i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
    }
    ck_assert_int_eq(st_consumer_assigned(a), NPARTS);
    ck_assert_int_eq(st_consumer_assignment_lost(a), 0);

    sleep(9); /* past max.poll.interval.ms: librdkafka leaves the group */
    until = st_time_mono_ms() + 20000;
    while (!lost_seen && st_time_mono_ms() < until) {
        int n = st_consumer_poll_batch(a, msgs, 256, 0, 0, 100);
        for (int i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
    }
    fprintf(stderr, "revoke reported lost: %d; lost after the revoke: %d; assigned %d\n",
            lost_seen, st_consumer_assignment_lost(a), st_consumer_assigned(a));
    ck_assert_int_eq(lost_seen, 1);
    ck_assert_int_eq(st_consumer_assignment_lost(a), 1);

    rd_kafka_destroy(prod);
    st_consumer_destroy(a);
    world_drop(&w);
}
END_TEST

static atomic_int resumed;
static atomic_llong resumed_offset, resumed_clock;

static void on_resume_seen(int32_t partition, int64_t offset, int64_t clock, void *arg)
{
    (void)arg;
    if (partition != 0)
        return;
    atomic_store(&resumed_offset, offset);
    atomic_store(&resumed_clock, clock);
    atomic_store(&resumed, 1);
}

/* The consumer polled until stop_polling, in a thread of its own: its
 * assignment (inside a poll) waits for the committed offsets. */
static atomic_int stop_polling;

static int poller(void *arg)
{
    struct st_consumer *c = arg;
    rd_kafka_message_t *msgs[64];
    while (!atomic_load(&stop_polling)) {
        int n = st_consumer_poll_batch(c, msgs, 64, 0, 0, 100);
        for (int i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
    }
    return 0;
}

/* A restarted analyzer whose group's committed offset is held by a
 * transaction still open (a crashed owner's dead-letter transaction: the
 * offset and its clock were sent into it) reads the committed offsets
 * again while the read times out, and starts the partition with its clock
 * once the transaction ends: not without it after the first 10 s
 * (consume.c's tell_committed). The transaction here stays open 14 s. */
START_TEST(consume_committed_offset_held_by_an_open_transaction_is_read_when_it_ends)
{
    char err[512], group[128], txid[160];
    world_init(&w, "consumetxn");
    snprintf(group, sizeof(group), "%s.group", w.name);
    snprintf(txid, sizeof(txid), "%s.txn", w.name);
    rd_kafka_t *prod = topic_with_backlog(2);

    /* the open transaction: offset 1 of partition 0, with a clock */
    rd_kafka_conf_t *kc = st_kafka_conf_new(getenv("SANDTRAIL_KAFKA_BROKERS"), err,
                                            sizeof(err));
    ck_assert_ptr_nonnull(kc);
    ck_assert_int_eq(rd_kafka_conf_set(kc, "transactional.id", txid, err, sizeof(err)),
                     RD_KAFKA_CONF_OK);
    rd_kafka_t *tx = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof(err));
    ck_assert_msg(tx != NULL, "%s", err);
    rd_kafka_error_t *e = rd_kafka_init_transactions(tx, 30000);
    ck_assert_msg(!e, "%s", e ? rd_kafka_error_string(e) : "");
    ck_assert_ptr_null(rd_kafka_begin_transaction(tx));
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_list_add(l, w.topic, 0);
    tp->offset = 1;
    static const char clock[] = "clock=1795946400000000";
    tp->metadata = strdup(clock);
    tp->metadata_size = sizeof(clock) - 1;
    rd_kafka_consumer_group_metadata_t *md = rd_kafka_consumer_group_metadata_new(group);
    e = rd_kafka_send_offsets_to_transaction(tx, l, md, 30000);
    ck_assert_msg(!e, "%s", e ? rd_kafka_error_string(e) : "");
    rd_kafka_consumer_group_metadata_destroy(md);
    rd_kafka_topic_partition_list_destroy(l);

    struct st_analyzer_conf ca = {0};
    ca.brokers = getenv("SANDTRAIL_KAFKA_BROKERS");
    ca.topic_events = w.topic;
    ca.group = group;
    ca.session_timeout_ms = 30000;
    struct st_consumer *a = st_consumer_new(&ca, err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    st_consumer_on_resume(a, on_resume_seen, NULL);
    thrd_t pt;
    ck_assert_int_eq(thrd_create(&pt, poller, a), thrd_success);

    /* past the read's first timeout (10 s), the transaction still open */
    sleep(14);
    ck_assert_int_eq(atomic_load(&resumed), 0);
    ck_assert_ptr_null(rd_kafka_commit_transaction(tx, 30000));
    int64_t until = st_time_mono_ms() + 30000;
    while (!atomic_load(&resumed) && st_time_mono_ms() < until)
        usleep(50000);
    atomic_store(&stop_polling, 1);
    thrd_join(pt, NULL);
    ck_assert_msg(atomic_load(&resumed) == 1,
                  "the partition started without its committed offset's clock");
    ck_assert_int_eq(atomic_load(&resumed_offset), 1);
    ck_assert_int_eq(atomic_load(&resumed_clock), 1795946400000000LL);

    rd_kafka_destroy(tx);
    rd_kafka_destroy(prod);
    st_consumer_destroy(a);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("consume");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, consume_batch_drops_messages_of_a_partition_revoked_during_its_poll);
    tcase_add_test(tc, consume_a_lost_assignment_stays_lost_after_its_revoke);
    tcase_add_test(tc, consume_committed_offset_held_by_an_open_transaction_is_read_when_it_ends);
    suite_add_tcase(s, tc);
    return world_run(s);
}
