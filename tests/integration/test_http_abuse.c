/* test_http_abuse.c: hostile and unlucky HTTP clients against a running
 * collector (--listen), on 127.0.0.1 only, bounded in count and time:
 *   - a slow-loris from another loopback address (1,100 connections, one
 *     header byte a second) locks no authenticated client out, and every
 *     one of its connections is closed at the header deadline;
 *   - a heavy request (long lines, slow to redact) does not stall a small
 *     request of another client;
 *   - 8 MiB of "{}" lines, gzipped, get a bounded answer and a bounded
 *     number of dead-letter records, with counts by reason;
 *   - every gzip member is read, data after the gzip stream is refused,
 *     x-gzip is gzip;
 *   - after a message failed for good (Kafka down longer than
 *     kafka.delivery.timeout.ms), a later request is answered 200 once
 *     Kafka is back (tests/integration/http_recover.sh: a Kafka of its own). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

#define TOKENS SANDTRAIL_SOURCE_DIR "/tests/data/http/tokens.txt"
#define BODY SANDTRAIL_SOURCE_DIR "/tests/data/http/batch.ndjson"
#define AUTH "-H 'Authorization: Bearer sbx-a-token-0123456789' "

/* Starts the collector on 127.0.0.1:port with the extra settings; waits
 * until it answers. Its pid goes to pidf. */
static void start(const struct world *w, int port, const char *pidf, const char *extra)
{
    char cmd[512];
    run(w, w->name, w->name,
        BIN "/collector/sandtrail-collector --listen 127.0.0.1:%d"
            " -X http.tokens_file=" TOKENS " %s 2>/tmp/%s.log & echo \\$! > %s",
        port, extra, w->name, pidf);
    snprintf(cmd, sizeof(cmd),
             "for i in $(seq 1 100); do c=$(curl -s -o /dev/null -w '%%{http_code}' -X POST "
             "http://127.0.0.1:%d/v1/events); [ \"$c\" = 401 ] && echo ok && break; "
             "sleep 0.1; done",
             port);
    char *r = world_sh(cmd);
    ck_assert_msg(strstr(r, "ok") != NULL, "the collector did not start");
    free(r);
}

static void stop(const struct world *w, const char *pidf, int hard)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "kill %s $(cat %s) 2>/dev/null; sleep 0.5; rm -f %s /tmp/%s.log",
             hard ? "-9" : "", pidf, pidf, w->name);
    ck_assert_int_eq(system(cmd), 0);
}

/* The number after "key=" or "\"key\":" in text; -1 when absent. */
static long value(const char *text, const char *key)
{
    char pat[96];
    snprintf(pat, sizeof(pat), "%s=", key);
    const char *p = strstr(text, pat);
    if (!p) {
        snprintf(pat, sizeof(pat), "\"%s\":", key);
        p = strstr(text, pat);
    }
    return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* "CODE SECONDS" of one small authenticated request, at most 20 s. */
static char *small_request(int port)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -w '%%{http_code} %%{time_total}' --max-time 20 " AUTH
             "--data-binary @" BODY " http://127.0.0.1:%d/v1/events",
             port);
    return world_sh(cmd);
}

START_TEST(http_slowloris_locks_no_client_out_and_is_closed_at_the_header_deadline)
{
    struct world w;
    char pidf[128], ready[128], out[128], cmd[1024];
    snprintf(pidf, sizeof(pidf), "/tmp/st_abuse_sl_%d.pid", (int)getpid());
    snprintf(ready, sizeof(ready), "/tmp/st_abuse_sl_%d.ready", (int)getpid());
    snprintf(out, sizeof(out), "/tmp/st_abuse_sl_%d.out", (int)getpid());
    world_init(&w, "slowloris");
    int port = world_free_port();
    start(&w, port, pidf, "-X http.header_timeout_ms=3000");
    /* 1,100 connections from 127.0.0.2 for 10 s: past select()'s 1,024 */
    snprintf(cmd, sizeof(cmd),
             "rm -f %s; python3 " SANDTRAIL_SOURCE_DIR
             "/tests/integration/slowloris.py %d 1100 10 %s > %s &",
             ready, port, ready, out);
    ck_assert_int_eq(system(cmd), 0);
    for (int i = 0; i < 300 && access(ready, F_OK) != 0; i++)
        usleep(100000);
    ck_assert_int_eq(access(ready, F_OK), 0);
    sleep(1);

    /* the authenticated client is answered, and soon */
    char *r = small_request(port);
    fprintf(stderr, "during the slow-loris: %s\n", r);
    ck_assert_msg(strncmp(r, "200 ", 4) == 0, "answer: %s", r);
    ck_assert_double_lt(strtod(r + 4, NULL), 5.0);
    free(r);

    /* the slow-loris ends after 10 s; by then the server has closed every
     * one of its connections (3 s header deadline), however it trickled */
    char *o = NULL;
    for (int i = 0; i < 200; i++) {
        free(o);
        o = world_slurp(out);
        if (strstr(o, "still_open="))
            break;
        usleep(100000);
    }
    fprintf(stderr, "slow-loris: %s", o);
    ck_assert_int_eq(value(o, "connected") + value(o, "failed"), 1100);
    ck_assert_int_eq(value(o, "still_open"), 0);
    free(o);
    snprintf(cmd, sizeof(cmd), "rm -f %s %s", ready, out);
    ck_assert_int_eq(system(cmd), 0);
    stop(&w, pidf, 0);
    world_drop(&w);
}
END_TEST

START_TEST(http_heavy_request_does_not_stall_another)
{
    struct world w;
    char pidf[128], heavy[128], cmd[1024];
    snprintf(pidf, sizeof(pidf), "/tmp/st_abuse_hv_%d.pid", (int)getpid());
    snprintf(heavy, sizeof(heavy), "/tmp/st_abuse_hv_%d.body", (int)getpid());
    world_init(&w, "heavy");
    int port = world_free_port();
    start(&w, port, pidf, "");
    /* two lines of 800 KB that the PEM rule takes long to redact (each is
     * rejected, and its dead-letter record redacted) */
    snprintf(cmd, sizeof(cmd),
             "python3 -c \"import sys; l = '-----BEGIN PRIVATE KEY-----!' * 28000; "
             "sys.stdout.write(l + '\\n' + l + '\\n')\" > %s && "
             "(curl -s -o /dev/null --max-time 300 " AUTH
             "--data-binary @%s http://127.0.0.1:%d/v1/events &)",
             heavy, heavy, port);
    ck_assert_int_eq(system(cmd), 0);
    sleep(2); /* its body is in; it is being redacted */

    char *r = small_request(port);
    fprintf(stderr, "beside a heavy request: %s\n", r);
    ck_assert_msg(strncmp(r, "200 ", 4) == 0, "answer: %s", r);
    ck_assert_double_lt(strtod(r + 4, NULL), 5.0);
    free(r);
    /* the heavy request's work is thrown away with the collector */
    stop(&w, pidf, 1);
    snprintf(cmd, sizeof(cmd), "rm -f %s", heavy);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

START_TEST(http_gzip_bomb_of_rejected_lines_gets_a_bounded_answer)
{
    struct world w;
    char pidf[128], cmd[1024], ans[128];
    snprintf(pidf, sizeof(pidf), "/tmp/st_abuse_gz_%d.pid", (int)getpid());
    snprintf(ans, sizeof(ans), "/tmp/st_abuse_gz_%d.answer", (int)getpid());
    world_init(&w, "gzbomb");
    int port = world_free_port();
    start(&w, port, pidf, "-X http.max_errors=50 -X http.max_dlq_records=200");
    /* 8 MiB of "{}" lines, 2,796,202 of them, gzipped to a few KB */
    snprintf(cmd, sizeof(cmd),
             "python3 -c \"import sys; sys.stdout.write('{}\\n' * 2796202)\" | gzip -c | "
             "curl -s -o %s -w '%%{http_code} %%{size_download}' --max-time 300 " AUTH
             "-H 'Content-Encoding: gzip' --data-binary @- http://127.0.0.1:%d/v1/events",
             ans, port);
    char *r = world_sh(cmd);
    fprintf(stderr, "8 MiB of {} lines: %s\n", r);
    ck_assert_msg(strncmp(r, "200 ", 4) == 0, "%s", r);
    ck_assert_int_lt(strtol(r + 4, NULL, 10), 64 * 1024); /* bytes of the answer */
    free(r);
    char *a = world_slurp(ans);
    ck_assert_int_eq(value(a, "accepted"), 0);
    ck_assert_int_eq(value(a, "rejected"), 2796202);
    ck_assert_int_eq(value(a, "errors_truncated"), 2796202 - 50);
    ck_assert_int_eq(value(a, "dead_lettered"), 200);
    /* every line counted by its reason */
    char *by = strstr(a, "\"rejected_by_reason\":{");
    ck_assert_ptr_nonnull(by);
    long sum = 0;
    for (const char *p = strchr(by, '{'); p && *p != '}'; p = strchr(p + 1, ',')) {
        const char *colon = strstr(p, "\":");
        if (!colon)
            break;
        sum += strtol(colon + 2, NULL, 10);
        if (!strchr(colon, ',') || strchr(colon, '}') < strchr(colon, ','))
            break;
    }
    ck_assert_int_eq(sum, 2796202);
    free(a);
    int n;
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 200);
    free(dlq);
    snprintf(cmd, sizeof(cmd), "rm -f %s", ans);
    ck_assert_int_eq(system(cmd), 0);
    stop(&w, pidf, 0);
    world_drop(&w);
}
END_TEST

START_TEST(http_gzip_every_member_trailing_data_refused_x_gzip_read)
{
    struct world w;
    char pidf[128];
    snprintf(pidf, sizeof(pidf), "/tmp/st_abuse_gm_%d.pid", (int)getpid());
    world_init(&w, "gzmembers");
    int port = world_free_port();
    start(&w, port, pidf, "");
    /* two members: both read (the batch has 2 events of this token and 2
     * lines it refuses) */
    char *r = world_shf("(gzip -c " BODY "; gzip -c " BODY ") | curl -s -w ' %%{http_code}' " AUTH
                       "-H 'Content-Encoding: gzip' --data-binary @- "
                       "http://127.0.0.1:%d/v1/events", port);
    fprintf(stderr, "two members: %s\n", r);
    ck_assert_msg(strstr(r, " 200") != NULL, "%s", r);
    ck_assert_int_eq(value(r, "accepted"), 4);
    ck_assert_int_eq(value(r, "rejected"), 4);
    free(r);
    /* data after the stream: refused, with a reason */
    r = world_shf("(gzip -c " BODY "; printf 'garbage') | curl -s -w ' %%{http_code}' " AUTH
                 "-H 'Content-Encoding: gzip' --data-binary @- "
                 "http://127.0.0.1:%d/v1/events", port);
    fprintf(stderr, "trailing data: %s\n", r);
    ck_assert_msg(strstr(r, " 400") != NULL, "%s", r);
    ck_assert_ptr_nonnull(strstr(r, "gzip_trailing_data"));
    free(r);
    /* x-gzip is gzip */
    r = world_shf("gzip -c " BODY " | curl -s -w ' %%{http_code}' " AUTH
                 "-H 'Content-Encoding: x-gzip' --data-binary @- "
                 "http://127.0.0.1:%d/v1/events", port);
    fprintf(stderr, "x-gzip: %s\n", r);
    ck_assert_msg(strstr(r, " 200") != NULL, "%s", r);
    ck_assert_int_eq(value(r, "accepted"), 2);
    ck_assert_int_eq(value(r, "rejected"), 2);
    free(r);
    int n;
    char *events = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, 6);
    free(events);
    stop(&w, pidf, 0);
    world_drop(&w);
}
END_TEST

START_TEST(http_request_after_a_failure_for_good_is_answered_200)
{
    char cmd[512];
    int ports[3];
    world_free_ports(ports, 3); /* its Kafka's, its controller's, its collector's */
    snprintf(cmd, sizeof(cmd),
             "ST_KAFKA_PORT=%d ST_KAFKA_CONTROLLER_PORT=%d ST_HTTP_PORT=%d "
             SANDTRAIL_SOURCE_DIR "/tests/integration/http_recover.sh /tmp/st_recover_%d " BIN
                                  "/collector/sandtrail-collector",
             ports[0], ports[1], ports[2], (int)getpid());
    char *out = world_sh(cmd);
    fprintf(stderr, "%s", out);
    ck_assert_int_eq(value(out, "before"), 200);
    ck_assert_int_eq(value(out, "during"), 503); /* its message failed for good */
    ck_assert_int_eq(value(out, "after"), 200);  /* not 503 for ever */
    ck_assert_int_eq(value(out, "in_topic"), 1);
    free(out);
    snprintf(cmd, sizeof(cmd), "rm -rf /tmp/st_recover_%d", (int)getpid());
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("http_abuse");
    TCase *tc = tcase_create("abuse");
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, http_slowloris_locks_no_client_out_and_is_closed_at_the_header_deadline);
    tcase_add_test(tc, http_heavy_request_does_not_stall_another);
    tcase_add_test(tc, http_gzip_bomb_of_rejected_lines_gets_a_bounded_answer);
    tcase_add_test(tc, http_gzip_every_member_trailing_data_refused_x_gzip_read);
    tcase_add_test(tc, http_request_after_a_failure_for_good_is_answered_200);
    suite_add_tcase(s, tc);
    return world_run(s);
}
