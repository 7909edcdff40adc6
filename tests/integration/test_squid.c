/* test_squid.c: the real Squid from Debian, as an allowlist egress proxy with
 * collector/decoders/squid.conf, driven with curl (tests/integration/squid.sh),
 * its JSON access log read by sandtrail-collector -X input.format=squid.
 * Every request becomes one event, with the proxy's decision and reason,
 * the task, run and trace from the request headers; a line with a control
 * byte in a header is not lost; a token in a logged header is redacted. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

#define TOKEN "ghp_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7C"

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

START_TEST(squid_requests_become_events_with_decisions)
{
    struct world w;
    char dir[128];
    snprintf(dir, sizeof(dir), "/tmp/st_squid_%d", (int)getpid());
    world_init(&w, "squid");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         SANDTRAIL_SOURCE_DIR "/tests/integration/squid.sh %s " TOKEN, dir),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input %s/access.json"
                             " -X input.format=squid -X input.source_name=squid-egress"
                             " -X input.platform=squid 2>/dev/null",
                         dir),
                     0);
    int n;
    char *events = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, 7); /* the readiness probe and six requests, none lost */
    ck_assert_int_eq(count(events, "\"task_id\":\"T-SQ\""), 6);
    ck_assert_int_eq(count(events, "\"run_id\":\"run-sq\""), 6);
    ck_assert_int_eq(count(events, "\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\""), 6);
    ck_assert_int_eq(count(events, "\"decision\":\"deny\""), 3);
    ck_assert_int_eq(count(events, "\"reason\":\"blocklist\""), 1);
    ck_assert_int_eq(count(events, "\"reason\":\"not_in_allowlist\""), 2);
    ck_assert_int_eq(count(events, "\"host\":\"blocked.invalid\""), 1);
    ck_assert_int_eq(count(events, "\"status\":403"), 3);
    ck_assert_ptr_null(strstr(events, TOKEN));
    ck_assert_ptr_nonnull(strstr(events, "[REDACTED:github_token:"));
    /* found by the text pass over the Squid line, before decoding, and
     * recorded as such */
    ck_assert_int_eq(count(events, "{\"path\":\"(line)\",\"rule\":\"github_token\""), 1);
    free(events);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("squid");
    TCase *tc = tcase_create("real squid");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, squid_requests_become_events_with_decisions);
    suite_add_tcase(s, tc);
    return world_run(s);
}
