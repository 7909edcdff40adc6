/* test_srt.c: the real sandbox runtime from npm (@anthropic-ai/sandbox-runtime,
 * bubblewrap, socat and the runtime's seccomp write observer), driven through
 * the adapter in collector/adapters/srt by tests/integration/srt.sh, its
 * NDJSON read by sandtrail-collector -X input.format=srt.
 *
 * Five commands of task T-SRT in two runs: an allowed request to a loopback
 * upstream, a refused plain-HTTP request (a token in its URL), a refused
 * write outside the writable tree, a refused write into a denyWrite folder
 * (a token in its path) and a refused HTTPS CONNECT. The runtime records the
 * four refusals, and only those, in its violation store; each becomes one
 * deny event with the task and run of its command id, and each command one
 * exec event with its exit code. The token reaches Kafka only redacted. */
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

/* The one line of text that contains both a and b (a copy, caller frees);
 * fails the test unless there is exactly one. */
static char *line_with(const char *text, const char *a, const char *b)
{
    char *found = NULL;
    int n = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char *line = strndup(p, len);
        if (strstr(line, a) && strstr(line, b)) {
            n++;
            free(found);
            found = line;
        } else {
            free(line);
        }
        p += len + (nl ? 1 : 0);
    }
    ck_assert_msg(n == 1, "%d events with %s and %s", n, a, b);
    return found;
}

/* Asserts what the event of one command id and one kind says. */
static void expect(const char *events, const char *tool, const char *kind,
                   const char *want1, const char *want2)
{
    char *ev = line_with(events, tool, kind);
    ck_assert_msg(strstr(ev, want1), "%s: no %s in %s", tool, want1, ev);
    if (want2)
        ck_assert_msg(strstr(ev, want2), "%s: no %s in %s", tool, want2, ev);
    free(ev);
}

START_TEST(srt_violations_become_deny_events_of_their_task_and_run)
{
    struct world w;
    char dir[128], path[256], needle[320];
    snprintf(dir, sizeof(dir), "/tmp/st_srt_%d", (int)getpid());
    world_init(&w, "srt");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         SANDTRAIL_SOURCE_DIR "/tests/integration/srt.sh %s " TOKEN, dir),
                     0);

    /* the sandbox decided as the policy says, whatever the log claims */
    snprintf(path, sizeof(path), "%s/ws/index.html", dir);
    char *fetched = world_slurp(path);
    ck_assert_str_eq(fetched, "hello from loopback\n");
    free(fetched);
    snprintf(path, sizeof(path), "%s/upstream.log", dir);
    char *upstream = world_slurp(path);
    ck_assert_int_eq(count(upstream, "\"GET /index.html "), 1);
    ck_assert_int_eq(count(upstream, "/upload"), 0);
    free(upstream);
    snprintf(path, sizeof(path), "%s/outside.txt", dir);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/ws/protected/" TOKEN ".txt", dir);
    ck_assert_int_ne(access(path, F_OK), 0);

    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input %s/violations.ndjson"
                             " -X input.format=srt -X input.source_name=srt-sandbox"
                             " -X input.platform=srt 2>/dev/null",
                         dir),
                     0);
    int n;
    char *events = topic_dump(w.topic, &n);
    /* four violations and five command exits, nothing else */
    ck_assert_int_eq(n, 9);
    ck_assert_int_eq(count(events, "\"decision\":\"deny\""), 4);
    ck_assert_int_eq(count(events, "\"exit_code\":"), 5);
    ck_assert_int_eq(count(events, "\"kind\":\"sandbox\",\"name\":\"srt-sandbox\","
                                   "\"platform\":\"srt\""),
                     9);
    ck_assert_int_eq(count(events, "\"task_id\":\"T-SRT\""), 9);
    ck_assert_int_eq(count(events, "\"run_id\":\"run-a\""), 3);
    ck_assert_int_eq(count(events, "\"run_id\":\"run-b\""), 6);
    ck_assert_int_eq(count(events, "\"type\":\"file_write\""), 2);
    ck_assert_int_eq(count(events, "\"violation\":\"network-outbound\""), 2);

    /* the allowed request: an exit, no violation */
    expect(events, "\"command_id\":\"T-SRT/run-a/tool-1\"", "\"exit_code\":",
           "\"exit_code\":0,", "\"run_id\":\"run-a\"");
    ck_assert_int_eq(count(events, "\"command_id\":\"T-SRT/run-a/tool-1\""), 1);
    /* refused plain HTTP: the proxy's 403, curl -f exits 22 */
    expect(events, "\"command_id\":\"T-SRT/run-a/tool-2\"", "\"decision\":\"deny\"",
           "\"target\":\"exfil.invalid:80\"", "\"run_id\":\"run-a\"");
    expect(events, "\"command_id\":\"T-SRT/run-a/tool-2\"", "\"exit_code\":",
           "\"exit_code\":22,", NULL);
    /* refused write outside the writable tree */
    snprintf(needle, sizeof(needle), "\"path\":\"%s/outside.txt\"", dir);
    expect(events, "\"command_id\":\"T-SRT/run-b/tool-3\"", "\"decision\":\"deny\"",
           "\"type\":\"file_write\"", needle);
    expect(events, "\"command_id\":\"T-SRT/run-b/tool-3\"", "\"decision\":\"deny\"",
           "\"violation\":\"openat\"", "\"run_id\":\"run-b\"");
    expect(events, "\"command_id\":\"T-SRT/run-b/tool-3\"", "\"exit_code\":",
           "\"exit_code\":1,", NULL);
    /* refused write into the denyWrite folder, a token in the file name */
    snprintf(needle, sizeof(needle),
             "\"path\":\"%s/ws/protected/[REDACTED:github_token:", dir);
    expect(events, "\"command_id\":\"T-SRT/run-b/tool-4\"", "\"decision\":\"deny\"",
           "\"type\":\"file_write\"", needle);
    /* refused HTTPS: the CONNECT is refused, curl exits 56 */
    expect(events, "\"command_id\":\"T-SRT/run-b/tool-5\"", "\"decision\":\"deny\"",
           "\"target\":\"evil.invalid:443\"", "\"type\":\"exec\"");
    expect(events, "\"command_id\":\"T-SRT/run-b/tool-5\"", "\"exit_code\":",
           "\"exit_code\":56,", NULL);

    /* the token: in a URL, a command line, a path and a violation line */
    ck_assert_ptr_null(strstr(events, TOKEN));
    ck_assert_ptr_null(strstr(events, "ghp_"));
    /* tool-2: its command in the deny and the exit event; tool-4: the reason,
     * the path and the command (twice) of the deny event, and the command of
     * the exit event */
    ck_assert_int_eq(count(events, "[REDACTED:github_token:"), 8);
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
    Suite *s = suite_create("srt");
    TCase *tc = tcase_create("real sandbox runtime");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, srt_violations_become_deny_events_of_their_task_and_run);
    suite_add_tcase(s, tc);
    return world_run(s);
}
