/* test_kafka.c: librdkafka properties passed through from our config
 * (kafka.rdkafka.<name>, kafka.sasl.password_file), without a broker; the
 * wait for a topic's leaders against librdkafka's mock cluster (brokers
 * in process, taken down and given partitions by the test). */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kafka.h" /* rdkafka.h, which rdkafka_mock.h needs first */
#include "timeutil.h"
#include <librdkafka/rdkafka_mock.h>

static const char *get(rd_kafka_conf_t *c, const char *name, char *buf, size_t n)
{
    size_t sz = n;
    if (rd_kafka_conf_get(c, name, buf, &sz) != RD_KAFKA_CONF_OK)
        return "(unset)";
    return buf;
}

START_TEST(kafka_passthrough_takes_its_prefix_and_refuses_unknown_names)
{
    struct st_kafka_props p = {0};
    char err[512];
    /* not ours: handed on to the next handler */
    ck_assert_int_eq(st_kafka_props_parse(&p, "override.task.x", "1", err, sizeof(err)), 1);
    ck_assert_int_eq(st_kafka_props_parse(&p, "kafka.brokers", "x", err, sizeof(err)), 1);
    /* librdkafka's own words for a misspelt name or a bad value */
    ck_assert_int_eq(
        st_kafka_props_parse(&p, "kafka.rdkafka.sasl.pasword", "x", err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "No such configuration property") != NULL, "%s", err);
    ck_assert_int_eq(st_kafka_props_parse(&p, "kafka.rdkafka.security.protocol", "TLS",
                                          err, sizeof(err)),
                     -1);
    ck_assert_msg(strstr(err, "kafka.rdkafka.security.protocol") != NULL, "%s", err);
    ck_assert_uint_eq(p.n, 0);
    /* accepted in order; the later of two wins when applied */
    ck_assert_int_eq(st_kafka_props_parse(&p, "kafka.rdkafka.security.protocol",
                                          "SASL_PLAINTEXT", err, sizeof(err)),
                     0);
    ck_assert_int_eq(st_kafka_props_parse(&p, "kafka.rdkafka.security.protocol",
                                          "SASL_SSL", err, sizeof(err)),
                     0);
    ck_assert_int_eq(st_kafka_props_parse(&p, "kafka.rdkafka.sasl.mechanisms",
                                          "SCRAM-SHA-512", err, sizeof(err)),
                     0);
    rd_kafka_conf_t *c = st_kafka_conf_new("127.0.0.1:1", err, sizeof(err));
    ck_assert_int_eq(st_kafka_props_apply(c, &p, err, sizeof(err)), 0);
    char buf[256];
    ck_assert_str_eq(get(c, "security.protocol", buf, sizeof(buf)), "sasl_ssl");
    ck_assert_str_eq(get(c, "sasl.mechanisms", buf, sizeof(buf)), "SCRAM-SHA-512");
    rd_kafka_conf_destroy(c);
    st_kafka_props_fini(&p);
    st_kafka_props_fini(&p); /* twice is harmless */
}
END_TEST

START_TEST(kafka_password_file_sets_sasl_password_without_its_newline)
{
    struct st_kafka_props p = {0};
    char err[512], buf[256], path[] = "/tmp/st_kafka_pw_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "s3cret-pass\n", 12), 12);
    close(fd);
    p.password_file = path;
    rd_kafka_conf_t *c = st_kafka_conf_new("127.0.0.1:1", err, sizeof(err));
    ck_assert_int_eq(st_kafka_props_apply(c, &p, err, sizeof(err)), 0);
    ck_assert_str_eq(get(c, "sasl.password", buf, sizeof(buf)), "s3cret-pass");
    rd_kafka_conf_destroy(c);

    /* an empty file or a missing one: refused, naming the file only */
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    c = st_kafka_conf_new("127.0.0.1:1", err, sizeof(err));
    ck_assert_int_eq(st_kafka_props_apply(c, &p, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "kafka.sasl.password_file") != NULL, "%s", err);
    unlink(path);
    ck_assert_int_eq(st_kafka_props_apply(c, &p, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "could not open kafka.sasl.password_file") != NULL, "%s", err);
    rd_kafka_conf_destroy(c);
}
END_TEST

/* A producer gets one request in flight per connection (kafka.h: the
 * loss librdkafka 2.0 gives otherwise), and the operator's
 * kafka.rdkafka.max.in.flight.requests.per.connection still wins. */
START_TEST(kafka_producer_one_in_flight_unless_the_operator_says)
{
    struct st_kafka_props p = {0};
    char err[512], buf[64];
    rd_kafka_conf_t *c = st_kafka_conf_new("127.0.0.1:1", err, sizeof(err));
    ck_assert_int_eq(st_kafka_conf_producer(c, &p, err, sizeof(err)), 0);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(get(c, "max.in.flight.requests.per.connection", buf, sizeof(buf)),
                     "1");
    rd_kafka_conf_destroy(c);
    ck_assert_int_eq(st_kafka_props_parse(&p,
                                          "kafka.rdkafka.max.in.flight.requests.per.connection",
                                          "5", err, sizeof(err)),
                     0);
    c = st_kafka_conf_new("127.0.0.1:1", err, sizeof(err));
    ck_assert_int_eq(st_kafka_conf_producer(c, &p, err, sizeof(err)), 0);
    ck_assert_str_eq(get(c, "max.in.flight.requests.per.connection", buf, sizeof(buf)),
                     "5");
    rd_kafka_conf_destroy(c);
    st_kafka_props_fini(&p);
}
END_TEST

/* A partition whose leader goes down after the client learned it: the
 * wait gives up on that broker in time, reads the metadata again and asks
 * the new leader; with no leader reachable at all it fails by its
 * timeout, naming the partition. librdkafka 2.0's
 * rd_kafka_query_watermark_offsets, which it used until session 23,
 * waited for the dead leader for good: a collector started while a broker
 * was down never started (kafka.c, wait_ready). */
START_TEST(kafka_wait_ready_follows_a_moved_leader_and_keeps_its_timeout)
{
    char err[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    ck_assert_int_eq(rd_kafka_conf_set(c, "test.mock.num.brokers", "3", err, sizeof(err)),
                     RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
    ck_assert_msg(rk != NULL, "%s", err);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(rk);
    ck_assert_ptr_nonnull(mc);
    ck_assert_int_eq(rd_kafka_mock_topic_create(mc, "moved", 2, 3), 0);
    ck_assert_int_eq(rd_kafka_mock_partition_set_leader(mc, "moved", 0, 1), 0);
    ck_assert_int_eq(rd_kafka_mock_partition_set_leader(mc, "moved", 1, 2), 0);
    ck_assert_msg(st_kafka_wait_ready(rk, "moved", 10000, err, sizeof(err)) == 0, "%s", err);

    /* broker 1 down, its partition now broker 3's */
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(mc, 1), 0);
    ck_assert_int_eq(rd_kafka_mock_partition_set_leader(mc, "moved", 0, 3), 0);
    int64_t t0 = st_time_mono_ms();
    ck_assert_msg(st_kafka_wait_ready(rk, "moved", 15000, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_lt(st_time_mono_ms() - t0, 15000);

    /* broker 3 down too, still leading partition 0: refused in time */
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(mc, 3), 0);
    t0 = st_time_mono_ms();
    ck_assert_int_eq(st_kafka_wait_ready(rk, "moved", 1000, err, sizeof(err)), -1);
    int64_t took = st_time_mono_ms() - t0;
    ck_assert_msg(took < 1000 + 2500, "the wait took %lld ms for a 1000 ms timeout",
                  (long long)took);
    ck_assert_msg(strstr(err, "partition 0") != NULL, "%s", err);
    rd_kafka_destroy(rk);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kafka");
    TCase *tc = tcase_create("props");
    tcase_add_test(tc, kafka_passthrough_takes_its_prefix_and_refuses_unknown_names);
    tcase_add_test(tc, kafka_password_file_sets_sasl_password_without_its_newline);
    tcase_add_test(tc, kafka_producer_one_in_flight_unless_the_operator_says);
    tcase_add_test(tc, kafka_wait_ready_follows_a_moved_leader_and_keeps_its_timeout);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
