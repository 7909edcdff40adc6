/* test_outage.c: Kafka stopped for 30 seconds while 100,000 events are
 * posted over HTTP (tests/integration/outage.sh: a broker of the test's own
 * on free ports, the collector with a spool in front of it). Every
 * request is answered 200 -- during the outage from the spool -- and once
 * Kafka is back the topic holds each event exactly once, counted by
 * event_id. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

#define EVENTS 100000

/* The value of "key=" in the script's output; -1 when absent. */
static long value(const char *out, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "%s=", key);
    for (const char *p = strstr(out, pat); p; p = strstr(p + 1, pat))
        if (p == out || p[-1] == '\n')
            return strtol(p + strlen(pat), NULL, 10);
    return -1;
}

START_TEST(kafka_down_30s_under_http_load_loses_and_duplicates_nothing)
{
    char cmd[512];
    int ports[4]; /* its Kafka's, its controller's, HTTP, metrics */
    world_free_ports(ports, 4);
    snprintf(cmd, sizeof(cmd),
             "ST_KAFKA_PORT=%d ST_KAFKA_CONTROLLER_PORT=%d ST_HTTP_PORT=%d ST_METRICS_PORT=%d "
             SANDTRAIL_SOURCE_DIR "/tests/integration/outage.sh /tmp/st_outage_%d "
             BIN "/collector/sandtrail-collector %d 30",
             ports[0], ports[1], ports[2], ports[3], (int)getpid(), EVENTS);
    char *out = world_sh(cmd);
    fprintf(stderr, "%s", out);
    ck_assert_int_eq(value(out, "collector_status"), 0);
    /* the source was never refused nor had to resend: the spool took it */
    ck_assert_int_eq(value(out, "posted"), EVENTS);
    ck_assert_int_eq(value(out, "ok"), EVENTS / 1000);
    ck_assert_int_eq(value(out, "unavailable"), 0);
    ck_assert_int_eq(value(out, "conn_errors"), 0);
    ck_assert_int_eq(value(out, "rejected"), 0);
    /* the outage really happened under load, and the spool held the events */
    ck_assert_int_gt(value(out, "acked_during_outage"), EVENTS / 5);
    ck_assert_int_gt(value(out, "spool_bytes_during_outage"), 1000000);
    /* nothing lost, nothing twice */
    ck_assert_int_eq(value(out, "distinct"), EVENTS);
    ck_assert_int_eq(value(out, "missing"), 0);
    ck_assert_int_eq(value(out, "messages"), EVENTS);
    free(out);
    snprintf(cmd, sizeof(cmd), "rm -rf /tmp/st_outage_%d", (int)getpid());
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("outage");
    TCase *tc = tcase_create("kafka");
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, kafka_down_30s_under_http_load_loses_and_duplicates_nothing);
    suite_add_tcase(s, tc);
    return world_run(s);
}
