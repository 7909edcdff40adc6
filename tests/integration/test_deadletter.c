/* test_deadletter.c: the analyzer's dead-letter claim (analyzer/deadletter.c)
 * against the real Kafka broker.
 *
 * st_deadletter_claim initialises each assigned partition's transactional
 * producer on a thread of its own, after the assignment. A partition taken
 * away before its init must not be initialised: the init would take the
 * partition's transactional id from its next owner, whose next dead-letter
 * transaction would then fail as fenced and stop that analyzer. The test
 * hook st_deadletter_on_claim_round puts the revoke (or the analyzer's
 * stop, which detaches its consumer) and the next owner's first
 * transaction exactly in that window. */
#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "analyzer.h"
#include "consume.h"
#include "deadletter.h"
#include "kafka.h"
#include "timeutil.h"
#include "world.h"

static struct world w;
static volatile sig_atomic_t stop;

/* One partition, two messages. */
static void topic_with_two(void)
{
    rd_kafka_t *prod = world_topic_producer(w.topic, 1);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(rd_kafka_producev(prod, RD_KAFKA_V_TOPIC(w.topic),
                                           RD_KAFKA_V_PARTITION(0),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                           RD_KAFKA_V_VALUE("not an event", 12), RD_KAFKA_V_END),
                         0);
    ck_assert_int_eq(rd_kafka_flush(prod, 30000), 0);
    rd_kafka_destroy(prod);
}

/* What the claimer's round meets: A's claim, then (hook) the revoke and
 * the next owner B's first transaction. */
struct claim_round {
    struct st_deadletter *a, *b;
    struct st_consumer *c;
    rd_kafka_message_t *m0;
    int detach;  /* A detached from its consumer (its exit) instead of the revoke */
    int b_first; /* B's first commit's result */
    atomic_int made, done;
    char err[512];
};

/* B commits m's record and the offset past it. */
static int b_commits(struct st_deadletter *b, struct st_consumer *c,
                     const rd_kafka_message_t *m, char *err, size_t errsz)
{
    int32_t p = m->partition;
    int64_t off = m->offset + 1;
    st_deadletter_send(b, m, "invalid_json", "a record of the claim's test");
    return st_deadletter_commit(b, c, &p, &off, NULL, 1, &stop, err, errsz);
}

/* A's producer of partition 0 is made, not initialised: the partition is
 * taken from A (its revoke forgets it; or A stops: its consumer is
 * detached before it is destroyed), and B, its next owner, commits a
 * dead-letter transaction on the same transactional id. */
static void round_made(void *arg)
{
    struct claim_round *r = arg;
    if (r->detach)
        st_deadletter_detach(r->a);
    else
        st_deadletter_forget(r->a, 0);
    r->b_first = b_commits(r->b, r->c, r->m0, r->err, sizeof(r->err));
    atomic_store(&r->made, 1);
}

static void round_done(void *arg)
{
    atomic_store(&((struct claim_round *)arg)->done, 1);
}

/* detach 0: the partition revoked (st_deadletter_forget); 1: A stopping
 * (st_deadletter_detach) */
static void claim_then_next_owner(int detach)
{
    char err[512], group[128];
    world_init(&w, detach ? "dlqdetach" : "dlqclaim");
    snprintf(group, sizeof(group), "%s.group", w.name);
    topic_with_two();

    struct st_analyzer_conf conf = {0};
    conf.brokers = getenv("SANDTRAIL_KAFKA_BROKERS");
    conf.topic_events = w.topic;
    conf.topic_dlq = w.dlq;
    conf.group = group;
    conf.session_timeout_ms = 10000;
    conf.dlq_raw_bytes = 1024;

    struct st_consumer *c = st_consumer_new(&conf, err, sizeof(err));
    ck_assert_msg(c != NULL, "%s", err);
    /* assigned, and both messages in hand */
    rd_kafka_message_t *got[2] = {NULL, NULL}, *msgs[16];
    int ngot = 0;
    int64_t until = st_time_mono_ms() + 30000;
    while (ngot < 2 && st_time_mono_ms() < until) {
        int n = st_consumer_poll_batch(c, msgs, 16, 0, 0, 100);
        for (int i = 0; i < n; i++) {
            if (ngot < 2 && !msgs[i]->err && msgs[i]->partition == 0)
                got[ngot++] = msgs[i];
            else
                rd_kafka_message_destroy(msgs[i]);
        }
    }
    ck_assert_int_eq(ngot, 2);
    ck_assert_int_eq(st_consumer_assignment_lost(c), 0);

    struct claim_round r = {.c = c, .m0 = got[0], .detach = detach, .b_first = -2};
    r.a = st_deadletter_new(&conf, err, sizeof(err));
    ck_assert_msg(r.a != NULL, "%s", err);
    r.b = st_deadletter_new(&conf, err, sizeof(err));
    ck_assert_msg(r.b != NULL, "%s", err);
    st_deadletter_on_claim_round(r.a, round_made, round_done, &r);

    int32_t p0 = 0;
    st_deadletter_claim(r.a, c, &p0, 1);
    until = st_time_mono_ms() + 60000;
    while (!atomic_load(&r.done) && st_time_mono_ms() < until)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&r.made), 1);
    ck_assert_int_eq(atomic_load(&r.done), 1);
    ck_assert_msg(r.b_first == 0, "B's first dead-letter commit: %d: %s", r.b_first, r.err);

    /* B's next transaction: had A initialised the partition's producer
     * after B's, B's producer would be fenced, and the commit would stop
     * this process (status 1) */
    int rc = b_commits(r.b, c, got[1], err, sizeof(err));
    ck_assert_msg(rc == 0, "B's second dead-letter commit: %d: %s", rc, err);
    ck_assert_int_eq(st_deadletter_queued(r.b), 0);

    int count = 0;
    free(topic_dump(w.dlq, &count));
    ck_assert_int_eq(count, 2);

    st_deadletter_detach(r.a);
    st_deadletter_destroy(r.a);
    st_deadletter_destroy(r.b);
    rd_kafka_message_destroy(got[0]);
    rd_kafka_message_destroy(got[1]);
    st_consumer_destroy(c);
    world_drop(&w);
}

START_TEST(deadletter_partition_forgotten_before_its_init_does_not_fence_its_next_owner)
{
    claim_then_next_owner(0);
}
END_TEST

START_TEST(deadletter_detached_before_its_init_does_not_fence_the_next_owner)
{
    claim_then_next_owner(1);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("deadletter");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc,
                   deadletter_partition_forgotten_before_its_init_does_not_fence_its_next_owner);
    tcase_add_test(tc, deadletter_detached_before_its_init_does_not_fence_the_next_owner);
    suite_add_tcase(s, tc);
    return world_run(s);
}
