/* test_lineage.c: a credential a broker issued is redacted wherever it
 * appears later, whatever its shape, by any collector.
 *
 * Vault (audit device with raw tokens) issues zq8Xv3..., 40 random
 * characters that no rule knows. One collector reads the audit log; others,
 * reading a sandbox's native events, see the agent write the token into a
 * file and a commit message. One of them was started before the issue (it
 * learns the fingerprint live, from the credentials topic), one after (it
 * reads the topic at start-up). The raw value must be nowhere -- events and
 * dead-letter topics, the events and findings tables, the logs -- its marker
 * must carry the issue's identity.credential_fp, and the analyzer must give
 * token_write critical. With lineage off (kafka.topic.credentials empty,
 * which is what the code did before) the same run leaks: the test sees it. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

#define DATA SANDTRAIL_SOURCE_DIR "/tests/data/lineage"
#define CRED "zq8Xv3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uGi"
#define COLLECTOR BIN "/collector/sandtrail-collector"
#define BENIGN                                                                          \
    "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"lin-b1\","                       \
    "\"ts\":\"2026-11-29T08:59:59.000Z\",\"source\":{\"kind\":\"sandbox\","             \
    "\"name\":\"sbx-lin\"},\"task_id\":\"T-LIN\",\"run_id\":\"run-lin\","               \
    "\"type\":\"exec\",\"attrs\":{\"command\":\"ls\"}}"

static char dir[128];

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Waits until the events topic holds want messages; returns the dump. */
static char *wait_for(struct world *w, int want)
{
    char *dump = NULL;
    int n = 0;
    for (int i = 0; i < 100; i++) {
        free(dump);
        dump = topic_dump(w->topic, &n);
        if (n >= want)
            break;
        usleep(200000);
    }
    ck_assert_int_ge(n, want);
    return dump;
}

/* The whole run: a follower started before the issue, the Vault collector,
 * a write while the follower runs, a collector started after, the
 * analyzer. extra: more collector arguments for the sandbox collectors. */
static void run_all(struct world *w, const char *extra)
{
    char path[256], cmd[1024], pidf[256];
    int pid = 0;

    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof(path), "%s/sandbox.ndjson", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(BENIGN "\n", f);
    fclose(f);

    /* 1. the sandbox's collector, following its file */
    snprintf(pidf, sizeof(pidf), "%s/pid", dir);
    run(w, w->name, w->name,
        COLLECTOR " --follow %s -X input.poll_ms=50 %s 2>>%s/collectors.log & echo \\$! > %s",
        path, extra, dir, pidf);
    f = fopen(pidf, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    free(wait_for(w, 1)); /* it runs, and has read the credentials topic */

    /* 2. Vault issues the token; its collector learns the fingerprint */
    ck_assert_int_eq(run(w, w->name, w->name,
                         COLLECTOR " --input " DATA "/vault-issue.jsonl -X input.format=vault"
                                   " -X input.source_name=vault 2>>%s/collectors.log",
                         dir),
                     0);

    /* 3. the agent writes it: the follower learnt it meanwhile (within
     * lineage.poll_ms, 100 ms; a second is generous) */
    sleep(1);
    snprintf(cmd, sizeof(cmd), "cat " DATA "/sandbox.ndjson >> %s", path);
    ck_assert_int_eq(system(cmd), 0);
    free(wait_for(w, 3));
    kill(pid, SIGTERM);
    for (int i = 0; i < 100 && kill(pid, 0) == 0; i++)
        usleep(100000);
    ck_assert_int_ne(kill(pid, 0), 0);

    /* 4. a collector started after the issue reads the topic at start-up */
    ck_assert_int_eq(run(w, w->name, w->name,
                         COLLECTOR " --input " DATA "/sandbox-later.ndjson %s"
                                   " 2>>%s/collectors.log",
                         extra, dir),
                     0);
    ck_assert_int_eq(run(w, w->name, w->name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>%s/analyzer.log", dir),
                     0);
}

/* The issue's identity.credential_fp, from the events topic. */
static void issue_fp(const char *events, char *fp, size_t size)
{
    const char *p = strstr(events, "\"credential_fp\":\"");
    ck_assert_ptr_nonnull(p);
    p += strlen("\"credential_fp\":\"");
    size_t n = strcspn(p, "\"");
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_lt(n, size);
    snprintf(fp, size, "%.*s", (int)n, p);
}

START_TEST(lineage_issued_credential_of_unknown_shape_is_redacted_everywhere)
{
    struct world w;
    char fp[80], marker[128], cmd[256];
    world_init(&w, "lineage");
    run_all(&w, "");

    int nev, ndlq;
    char *sinks[7];
    const char *names[] = {"events topic", "dead-letter topic", "events table",
                           "findings table", "finding_context", "collector logs",
                           "analyzer log"};
    sinks[0] = topic_dump(w.topic, &nev);
    sinks[1] = topic_dump(w.dlq, &ndlq);
    sinks[2] = rows(w.dsn, "SELECT body::text, target, reason FROM events");
    sinks[3] = rows(w.dsn, "SELECT * FROM findings");
    sinks[4] = rows(w.dsn, "SELECT * FROM finding_context");
    snprintf(cmd, sizeof(cmd), "%s/collectors.log", dir);
    sinks[5] = world_slurp(cmd);
    snprintf(cmd, sizeof(cmd), "%s/analyzer.log", dir);
    sinks[6] = world_slurp(cmd);
    ck_assert_int_eq(nev, 4); /* exec, token_issue, file_write, commit */
    for (int i = 0; i < 7; i++)
        ck_assert_msg(strstr(sinks[i], CRED) == NULL, "the issued credential leaked into the %s",
                      names[i]);

    /* its marker, with the issue's fingerprint, where it was written: twice
     * in the file (live follower), once in the commit (later collector) */
    issue_fp(sinks[0], fp, sizeof(fp));
    snprintf(marker, sizeof(marker), "[REDACTED:issued:%s]", fp);
    ck_assert_int_eq(count(sinks[0], marker), 3);
    ck_assert_int_eq(count(sinks[0], "\"rule\":\"issued\""), 3);
    /* the follower learnt it live, the later collector at start-up */
    ck_assert_int_ge(count(sinks[5], "lineage: 1 issued credentials known"), 1);

    /* and the analyzer calls the write critical: a broker issued it */
    char *tw = rows(w.dsn, "SELECT severity, event_count FROM findings"
                           " WHERE detector = 'token_write' AND run_id = 'run-lin'");
    ck_assert_str_eq(tw, "critical|2\n");
    free(tw);

    for (int i = 0; i < 7; i++)
        free(sinks[i]);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

/* Lineage off, as before it existed: the same run leaks the token and the
 * write is not seen as a credential's. */
START_TEST(lineage_off_lets_the_unknown_shape_through)
{
    struct world w;
    char cmd[256];
    world_init(&w, "lineageoff");
    run_all(&w, "-X kafka.topic.credentials=");
    int nev;
    char *events = topic_dump(w.topic, &nev);
    ck_assert_int_eq(nev, 4);
    ck_assert_int_eq(count(events, CRED), 3);
    ck_assert_ptr_null(strstr(events, "[REDACTED:issued:"));
    char *tw = rows(w.dsn, "SELECT severity FROM findings WHERE detector = 'token_write'");
    ck_assert_str_eq(tw, "");
    free(tw);
    free(events);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    snprintf(dir, sizeof(dir), "/tmp/st_lineage_%d", (int)getpid());
    Suite *s = suite_create("lineage");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, lineage_issued_credential_of_unknown_shape_is_redacted_everywhere);
    tcase_add_test(tc, lineage_off_lets_the_unknown_shape_through);
    suite_add_tcase(s, tc);
    return world_run(s);
}
