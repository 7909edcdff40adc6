/* test_kafka.c: librdkafka properties passed through from our config
 * (kafka.rdkafka.<name>, kafka.sasl.password_file), without a broker. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kafka.h"

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
    ck_assert_str_eq(get(c, "max.in.flight.requests.per.connection", buf, sizeof(buf)), "1");
    rd_kafka_conf_destroy(c);
    ck_assert_int_eq(st_kafka_props_parse(&p, "kafka.rdkafka.max.in.flight.requests.per.connection",
                                          "5", err, sizeof(err)),
                     0);
    c = st_kafka_conf_new("127.0.0.1:1", err, sizeof(err));
    ck_assert_int_eq(st_kafka_conf_producer(c, &p, err, sizeof(err)), 0);
    ck_assert_str_eq(get(c, "max.in.flight.requests.per.connection", buf, sizeof(buf)), "5");
    rd_kafka_conf_destroy(c);
    st_kafka_props_fini(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kafka");
    TCase *tc = tcase_create("props");
    tcase_add_test(tc, kafka_passthrough_takes_its_prefix_and_refuses_unknown_names);
    tcase_add_test(tc, kafka_password_file_sets_sasl_password_without_its_newline);
    tcase_add_test(tc, kafka_producer_one_in_flight_unless_the_operator_says);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
