/* test_canary.c: no secret survives the collector, whatever the format and
 * the input.
 *
 * tests/integration/canary.py puts the canary and each token shape of
 * tests/data/canary/secrets.txt into every string field, and as an object
 * key, of real-shaped lines of every format (native, squid, smokescreen,
 * srt, vault), and sends them through every input (--input, --follow,
 * --listen). Then the analyzer reads the topic into PostgreSQL. The raw
 * values must appear nowhere -- events and dead-letter topics, every table,
 * the collectors' and the analyzer's logs, the metrics pages, the HTTP
 * answers, the alerts in Alertmanager and the webhook bodies that
 * sandtrail-alerter sends -- and every format and input must show every
 * rule's marker, one
 * fingerprint per secret across all of them. A second run with one rule
 * deliberately broken (fault.redact_rule_off) proves the test sees a leak. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "world.h"

#define DRIVER SANDTRAIL_SOURCE_DIR "/tests/integration/canary.py"
#define NSINKS 11

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Sends every format through every input into w's topics; the driver's
 * output (one "format input lines" per run). */
static char *send_all(struct world *w, const char *dir, const char *extra)
{
    char path[256];
    ck_assert_int_eq(run(w, w->name, w->name,
                         "rm -rf %s && mkdir -p %s && python3 " DRIVER " run %s " BIN
                         "/collector/sandtrail-collector %s > %s/runs.txt",
                         dir, dir, dir, extra, dir),
                     0);
    snprintf(path, sizeof(path), "%s/runs.txt", dir);
    char *runs = world_slurp(path);
    ck_assert_int_eq(count(runs, "\n"), 15); /* 5 formats x 3 inputs */
    return runs;
}

/* The driver's check of the events topic (see canary.py). */
static char *check(const char *dir, const char *events)
{
    char path[256], cmd[512];
    snprintf(path, sizeof(path), "%s/events.txt", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(events, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "python3 " DRIVER " check %s", dir);
    return world_sh(cmd);
}

START_TEST(canary_every_format_every_input)
{
    struct world w;
    char dir[128], cmd[512];
    snprintf(dir, sizeof(dir), "/tmp/st_canary_%d", (int)getpid());
    world_init(&w, "canall");
    char *runs = send_all(&w, dir, "");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>%s/sinks/analyzer.log",
                         dir),
                     0);

    int nev, ndlq;
    char *sinks[NSINKS];
    const char *names[NSINKS] = {"events topic", "dead-letter topic", "events table",
                                 "findings table", "finding_context", "finding_events",
                                 "collector and analyzer logs", "metrics pages",
                                 "HTTP answers", "webhook bodies", "Alertmanager's alerts"};
    sinks[0] = topic_dump(w.topic, &nev);
    sinks[1] = topic_dump(w.dlq, &ndlq);
    sinks[2] = rows(w.dsn, "SELECT body::text, target, reason, task_id, run_id FROM events");
    sinks[3] = rows(w.dsn, "SELECT * FROM findings");
    sinks[4] = rows(w.dsn, "SELECT * FROM finding_context");
    sinks[5] = rows(w.dsn, "SELECT * FROM finding_events");
    snprintf(cmd, sizeof(cmd), "cat %s/sinks/*.log", dir);
    sinks[6] = world_sh(cmd);
    snprintf(cmd, sizeof(cmd), "cat %s/sinks/*.metrics", dir);
    sinks[7] = world_sh(cmd);
    snprintf(cmd, sizeof(cmd), "cat %s/sinks/*.answers", dir);
    sinks[8] = world_sh(cmd);
    /* the findings sent to on-call: a webhook and an Alertmanager, whose
     * own webhook posts to the same receiver (path /am) */
    struct world_receiver hook;
    struct world_am am;
    world_receiver_start(&hook, "canary", "");
    world_am_start(&am, hook.port);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/alerter/sandtrail-alerter --drain -X alert.throttle.max=0"
                             " -X alert.alertmanager.url=http://127.0.0.1:%d"
                             " -X alert.webhook.url=http://127.0.0.1:%d/hook"
                             " 2>> %s/sinks/alerter.log",
                         am.port, hook.port, dir),
                     0);
    snprintf(cmd, sizeof(cmd), "cat %s/requests.ndjson", hook.dir);
    sinks[9] = world_sh(cmd);
    snprintf(cmd, sizeof(cmd), "curl -fsS http://127.0.0.1:%d/api/v2/alerts", am.port);
    sinks[10] = world_sh(cmd);
    world_am_stop(&am);
    world_receiver_stop(&hook);
    /* the sinks hold something: a test of empty files proves nothing */
    ck_assert_int_gt(nev, 1000);
    ck_assert_int_gt(ndlq, 100);
    ck_assert_int_ge(count(sinks[6], "info: lines="), 15);
    ck_assert_int_gt(count(sinks[7], "sandtrail_collector_redactions_total"), 10);
    ck_assert_int_gt(count(sinks[8], "\"errors\":[{"), 0);
    ck_assert_int_gt(count(sinks[9], "sandtrail.alert.v1"), 0);
    /* one request per notification, one alert per finding */
    char *nn = rows(w.dsn, "SELECT (SELECT count(*) FROM notifications),"
                           " (SELECT count(*) FROM findings)");
    int nnotif = 0, nfind = 0;
    ck_assert_int_eq(sscanf(nn, "%d|%d", &nnotif, &nfind), 2);
    free(nn);
    ck_assert_int_gt(nfind, 0);
    ck_assert_int_eq(count(sinks[9], "\"path\": \"/hook\""), nnotif);
    ck_assert_int_eq(count(sinks[10], "\"alertname\":"), nfind);

    /* every line is accounted for: produced, dead-lettered or skipped */
    long lines = 0, in = 0, acc = 0, rej = 0, skip = 0;
    for (const char *p = strstr(sinks[6], "info: lines="); p; p = strstr(p + 1, "info: lines=")) {
        long l, a, r, s;
        ck_assert_int_eq(sscanf(p, "info: lines=%ld accepted=%ld rejected=%ld skipped=%ld",
                                &l, &a, &r, &s),
                         4);
        ck_assert_int_eq(a + r + s, l);
        lines += l, acc += a, rej += r, skip += s;
    }
    for (const char *p = runs; *p; p = strchr(p, '\n') + 1) {
        long n;
        ck_assert_int_eq(sscanf(p, "%*s %*s %ld", &n), 1);
        in += n;
    }
    ck_assert_int_eq(lines, in);
    ck_assert_int_eq(acc, nev);
    ck_assert_int_eq(rej, ndlq);

    /* no raw value anywhere */
    char path[256];
    snprintf(path, sizeof(path), "%s/forbidden.txt", dir);
    char *forbidden = world_slurp(path);
    int nforbidden = 0;
    for (char *line = strtok(forbidden, "\n"); line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        ck_assert_ptr_nonnull(tab);
        *tab = '\0';
        for (int i = 0; i < NSINKS; i++)
            ck_assert_msg(strstr(sinks[i], tab + 1) == NULL, "a %s value leaked into the %s",
                          line, names[i]);
        nforbidden++;
    }
    ck_assert_int_ge(nforbidden, 14);

    /* a marker with terminal escapes sent by a source reached no finding,
     * and `sandtrail findings` prints no raw control character */
    ck_assert_ptr_null(strchr(sinks[3], '\x1b'));
    char clicmd[1024];
    snprintf(clicmd, sizeof(clicmd), "SANDTRAIL_PG_DSN='%s' " BIN "/cli/sandtrail findings",
             w.dsn);
    char *cli = world_sh(clicmd);
    ck_assert_ptr_nonnull(strstr(cli, "token_write"));
    ck_assert_ptr_null(strchr(cli, '\x1b'));
    ck_assert_ptr_null(strchr(cli, '\x07'));
    free(cli);

    /* every format and input shows every rule's marker, and one secret
     * has one fingerprint everywhere */
    char *c = check(dir, sinks[0]);
    ck_assert_msg(strstr(c, "missing") == NULL, "%s", c);
    ck_assert_int_eq(count(c, "fingerprints "), 16);
    ck_assert_int_eq(count(c, " 1\n"), 16);

    free(c);
    free(forbidden);
    free(runs);
    for (int i = 0; i < NSINKS; i++)
        free(sinks[i]);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

/* The same test with the github_token rule broken must see the leak, in
 * every format and input, and only that one. */
START_TEST(canary_sees_a_broken_rule)
{
    struct world w;
    char dir[128], cmd[256];
    snprintf(dir, sizeof(dir), "/tmp/st_canbroken_%d", (int)getpid());
    world_init(&w, "canbroken");
    free(send_all(&w, dir, "-X fault.redact_rule_off=github_token"));
    int nev;
    char *events = topic_dump(w.topic, &nev);
    ck_assert_ptr_nonnull(strstr(events, "ghp_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7C"));
    ck_assert_ptr_null(strstr(events, "AKIAQWERTYUIOPASDFGH"));
    ck_assert_ptr_null(strstr(events, "CANARY-7f3a9c1e2b44d0"));
    char *c = check(dir, events);
    ck_assert_int_eq(count(c, "missing "), 15);
    ck_assert_int_eq(count(c, " github_token\n"), 15);
    free(c);
    free(events);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

/* The analyzer reads only markers of the collector's form: an event that
 * reaches the topic some other way, with a marker whose rule holds terminal
 * escapes or spaces, gives no finding from it and nothing raw in a summary;
 * the well-formed marker beside them does give one. */
START_TEST(canary_analyzer_reads_only_well_formed_markers)
{
    struct world w;
    char path[128];
    snprintf(path, sizeof(path), "/tmp/st_canmark_%d.ndjson", (int)getpid());
    world_init(&w, "canmark");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"m-1\","
          "\"ts\":\"2026-11-29T12:00:01.000Z\",\"source\":{\"kind\":\"sandbox\","
          "\"name\":\"sbx\"},\"task_id\":\"T-MARK\",\"run_id\":\"run-mark\","
          "\"type\":\"file_write\",\"attrs\":{\"path\":\"/work/x\"},\"content\":"
          "\"a [REDACTED:\\u001b]52;c;ZXZpbA==\\u0007:0123456789abcdef] "
          "b [REDACTED:GitHub Token:fedcba9876543210] "
          "c [REDACTED:github_token:00112233445566aa]\"}\n",
          f);
    fclose(f);
    /* the collector makes the topics; the event goes round it */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input /dev/null 2>/dev/null"),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "kcat -P -b \"$SANDTRAIL_KAFKA_BROKERS\" -t %s -k T-MARK %s",
                         w.topic, path),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"),
                     0);
    char *found = rows(w.dsn, "SELECT detector, summary FROM findings");
    ck_assert_int_eq(count(found, "token_write|"), 1);
    ck_assert_ptr_nonnull(strstr(found, "00112233445566aa"));
    ck_assert_ptr_null(strstr(found, "0123456789abcdef"));
    ck_assert_ptr_null(strstr(found, "fedcba9876543210"));
    ck_assert_ptr_null(strchr(found, '\x1b'));
    free(found);
    unlink(path);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("canary");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, canary_every_format_every_input);
    tcase_add_test(tc, canary_sees_a_broken_rule);
    tcase_add_test(tc, canary_analyzer_reads_only_well_formed_markers);
    suite_add_tcase(s, tc);
    return world_run(s);
}
