/* test_http.c: POST /v1/events on a running collector (--listen), with curl:
 * authentication per source, per-line errors in the answer, events in Kafka
 * before the answer, gzip bodies, and 401/413/404 where they belong. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "world.h"

#define TOKENS SANDTRAIL_SOURCE_DIR "/tests/data/http/tokens.txt"
#define BODY SANDTRAIL_SOURCE_DIR "/tests/data/http/batch.ndjson"


START_TEST(http_ingest_authenticates_answers_per_line_and_is_durable)
{
    struct world w;
    char pidf[128], cmd[1024], url[64];
    int port = world_free_port();
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/events", port);
    snprintf(pidf, sizeof(pidf), "/tmp/st_http_%d.pid", (int)getpid());
    world_init(&w, "http");
    run(&w, w.name, w.name,
        BIN "/collector/sandtrail-collector --listen 127.0.0.1:%d"
            " -X http.tokens_file=" TOKENS " -X http.max_body_bytes=4096"
            " 2>/dev/null & echo \\$! > %s",
        port, pidf);
    char *ready = NULL;
    for (int i = 0; i < 50; i++) {
        free(ready);
        ready = world_shf("curl -s -o /dev/null -w '%%{http_code}' -X POST %s", url);
        if (!strcmp(ready, "401"))
            break;
        usleep(200000);
    }
    ck_assert_str_eq(ready, "401"); /* no token */
    free(ready);

    char *r = world_shf("curl -s -w ' %%{http_code}' -H 'Authorization: Bearer wrong-token' "
                        "--data-binary @" BODY " %s", url);
    ck_assert_ptr_nonnull(strstr(r, " 401"));
    free(r);

    /* the sandbox's token: its two events go in; a line claiming to be the
     * proxy and a malformed line are refused, each with its line number */
    r = world_shf("curl -s -w ' %%{http_code}' -H 'Authorization: Bearer "
                  "sbx-a-token-0123456789' --data-binary @" BODY " %s", url);
    ck_assert_msg(strstr(r, " 200") != NULL, "%s", r);
    ck_assert_ptr_nonnull(strstr(r, "\"accepted\":2"));
    ck_assert_ptr_nonnull(strstr(r, "\"rejected\":2"));
    ck_assert_ptr_nonnull(strstr(r, "{\"line\":2,\"reason\":\"source_not_allowed\""));
    ck_assert_ptr_nonnull(strstr(r, "{\"line\":4,\"reason\":\"invalid_json\""));
    free(r);
    /* answered only once durable: the events are already in Kafka */
    int n;
    char *events = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, 2);
    ck_assert_ptr_nonnull(strstr(events, "\"event_id\":\"h-1\""));
    ck_assert_ptr_nonnull(strstr(events, "\"event_id\":\"h-3\""));
    free(events);
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 2);
    free(dlq);

    /* the same body, gzip-compressed, by the proxy's token: now line 2 is
     * the proxy's and the sandbox lines are refused */
    r = world_shf("gzip -c " BODY " | curl -s -w ' %%{http_code}' -H "
                  "'Content-Encoding: gzip' -H 'Authorization: Bearer squid-token-abcdefghij' "
                  "--data-binary @- %s", url);
    ck_assert_msg(strstr(r, " 200") != NULL, "%s", r);
    ck_assert_ptr_nonnull(strstr(r, "\"accepted\":1"));
    ck_assert_ptr_nonnull(strstr(r, "\"rejected\":3"));
    free(r);

    /* over http.max_body_bytes */
    r = world_shf("head -c 5000 /dev/zero | tr '\\0' 'x' | curl -s -w ' %%{http_code}' "
                  "-H 'Authorization: Bearer sbx-a-token-0123456789' --data-binary @- %s", url);
    ck_assert_ptr_nonnull(strstr(r, " 413"));
    free(r);
    r = world_shf("curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/elsewhere",
                  port);
    ck_assert_str_eq(r, "404");
    free(r);

    snprintf(cmd, sizeof(cmd), "kill $(cat %s); rm -f %s", pidf, pidf);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("ingest");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, http_ingest_authenticates_answers_per_line_and_is_durable);
    suite_add_tcase(s, tc);
    return world_run(s);
}
