/* test_reload.c: SIGHUP reloads a running collector (issue 15, item 3).
 *
 * --listen: while a client posts on keep-alive connections, the tokens
 * file loses one token and gains another, the canaries file gains a canary,
 * the log level and a setting that needs a restart change; SIGHUP. No
 * request fails but the removed token's after the reload, the new token
 * works after it, the connection is never dropped, every accepted event is
 * in Kafka exactly once and the new canary never. A reload that cannot
 * read its configuration keeps the old one. --follow: SIGHUPs while lines
 * are appended lose and duplicate none. On the old code SIGHUP's default
 * action kills the collector. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "world.h"

#define CANARY_OLD "canary-old-7f3e9a1c5b2d"
#define CANARY_NEW "canary-new-4d8b2f6a9e1c"

static char dir[128];

static void write_file(const char *name, const char *text)
{
    char path[256], tmp[272];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    ck_assert_int_eq(rename(tmp, path), 0); /* as an editor or deployment would */
}

static int read_pid(const char *pidf)
{
    int pid = world_read_int(pidf);
    ck_assert_int_gt(pid, 0);
    return pid;
}

static int alive(int pid)
{
    return kill(pid, 0) == 0;
}

/* Waits (up to 20 s) until the collector's log holds text; 1 when it does. */
static int log_has(const char *log, const char *text)
{
    for (int i = 0; i < 200; i++) {
        char *s = world_slurp(log);
        int found = strstr(s, text) != NULL;
        free(s);
        if (found)
            return 1;
        usleep(100000);
    }
    return 0;
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void stop_collector(int pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 150 && alive(pid); i++)
        usleep(100000);
    ck_assert_msg(!alive(pid), "the collector did not stop");
}

START_TEST(reload_http_tokens_canaries_and_log_level_without_dropping_a_request)
{
    struct world w;
    char log[192], pidf[192], cmd[1400];
    int port = world_free_port();
    world_init(&w, "reload");
    snprintf(dir, sizeof(dir), "/tmp/st_reload_%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(log, sizeof(log), "%s/collector.log", dir);
    snprintf(pidf, sizeof(pidf), "%s/pid", dir);

    write_file("tokens", "keep-token-0123456789 sandbox sbx-keep\n"
                         "gone-token-0123456789 sandbox sbx-gone\n");
    write_file("canaries", CANARY_OLD "\n");
    char conf[512];
    snprintf(conf, sizeof(conf),
             "log.level = warn\nhttp.concurrency = 2\nhttp.tokens_file = %s/tokens\n"
             "redact.canaries_file = %s/canaries\n",
             dir, dir);
    write_file("collector.conf", conf);
    run(&w, w.name, w.name,
        BIN "/collector/sandtrail-collector --listen 127.0.0.1:%d -c %s/collector.conf"
            " -X input.workers=2 2>%s & echo \\$! > %s",
        port, dir, log, pidf);
    int pid = read_pid(pidf);
    char *ready = NULL;
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -w '%%{http_code}' -X POST http://127.0.0.1:%d/v1/events",
             port);
    for (int i = 0; i < 100; i++) {
        free(ready);
        ready = world_sh(cmd);
        if (!strcmp(ready, "401"))
            break;
        usleep(100000);
    }
    ck_assert_str_eq(ready, "401");
    free(ready);
    /* log.level=warn: the start-up's info records are not written */
    char *s = world_slurp(log);
    ck_assert_ptr_null(strstr(s, "listening on"));
    free(s);

    /* the client posts 200 rounds of 3 requests in the background */
    snprintf(cmd, sizeof(cmd),
             "python3 " SANDTRAIL_SOURCE_DIR "/tests/integration/reload_client.py"
             " 127.0.0.1 %d 200 %s %s > %s/client.json 2>%s/client.err &",
             port, dir, CANARY_NEW, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    char progress[192];
    snprintf(progress, sizeof(progress), "%s/progress", dir);
    for (int i = 0; i < 300 && world_read_int(progress) < 50; i++)
        usleep(100000);
    ck_assert_int_ge(world_read_int(progress), 50);

    /* the reload: a token out, one in, a canary more, log.level info, and
     * http.concurrency, which needs a restart */
    write_file("tokens", "keep-token-0123456789 sandbox sbx-keep\n"
                         "new-token-0123456789ab sandbox sbx-new\n");
    write_file("canaries", CANARY_OLD "\n" CANARY_NEW "\n");
    snprintf(conf, sizeof(conf),
             "log.level = info\nhttp.concurrency = 3\nhttp.tokens_file = %s/tokens\n"
             "redact.canaries_file = %s/canaries\n",
             dir, dir);
    write_file("collector.conf", conf);
    write_file("hup-sent", "");
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    ck_assert_msg(log_has(log, "reload: 2 source token(s) for new requests"),
                  "no reload in the log");
    write_file("reloaded", "");
    ck_assert(alive(pid));
    s = world_slurp(log);
    ck_assert_ptr_nonnull(
        strstr(s, "cannot change while running: http.concurrency (restart to apply)"));
    ck_assert_ptr_nonnull(strstr(s, "reload: done (log.level=info"));
    ck_assert_ptr_null(strstr(s, "cannot change while running: http.tokens_file"));
    free(s);

    /* a reload that fails (a configuration line it cannot read) keeps
     * everything: the process runs on with the new tokens */
    for (int i = 0; i < 300 && world_read_int(progress) < 120; i++)
        usleep(100000);
    write_file("collector.conf", "this is not a property\n");
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    ck_assert(log_has(log, "reload failed: keeping every setting as it was"));
    ck_assert(alive(pid));

    /* the client's end */
    for (int i = 0; i < 600 && world_read_int(progress) < 200; i++)
        usleep(100000);
    ck_assert_int_eq(world_read_int(progress), 200);
    snprintf(cmd, sizeof(cmd), "%s/client.json", dir);
    char *client = NULL;
    for (int i = 0; i < 50; i++) {
        free(client);
        client = world_slurp(cmd);
        if (strchr(client, '}'))
            break;
        usleep(100000);
    }
    fprintf(stderr, "reload client: %s\n", client);
    cJSON *st = cJSON_Parse(client);
    ck_assert_msg(st != NULL, "client: %s", client);
    cJSON *viol = cJSON_GetObjectItem(st, "violations");
    ck_assert_msg(cJSON_GetArraySize(viol) == 0, "client: %s", client);
    ck_assert_msg(cJSON_GetObjectItem(st, "conn_errors")->valueint == 0, "client: %s",
                  client);
    /* each token was used in each phase */
    ck_assert_msg(cJSON_GetObjectItem(st, "gone_before_200") &&
                      cJSON_GetObjectItem(st, "gone_after_401") &&
                      cJSON_GetObjectItem(st, "new_before_401") &&
                      cJSON_GetObjectItem(st, "new_after_200") &&
                      cJSON_GetObjectItem(st, "keep_after_200"),
                  "client: %s", client);
    int new_after = cJSON_GetObjectItem(st, "new_after_200")->valueint +
                    cJSON_GetObjectItem(st, "keep_after_200")->valueint;
    cJSON_Delete(st);
    free(client);
    ck_assert(alive(pid));

    /* every accepted event in Kafka exactly once, nothing else */
    snprintf(cmd, sizeof(cmd), "%s/accepted", dir);
    char *acc = world_slurp(cmd);
    int naccepted = count_of(acc, "\n"), n;
    char *dump = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, naccepted);
    for (char *line = strtok(acc, "\n"); line; line = strtok(NULL, "\n")) {
        char id[96];
        snprintf(id, sizeof(id), "\"event_id\":\"%s\"", line);
        ck_assert_msg(count_of(dump, id) == 1, "%s is in Kafka %d times", line,
                      count_of(dump, id));
    }
    free(acc);
    /* the new canary, in every event sent after the reload, never raw */
    ck_assert_ptr_null(strstr(dump, CANARY_NEW));
    ck_assert_int_ge(count_of(dump, "[REDACTED:canary:"), new_after);
    free(dump);
    int ndlq;
    char *dlq = topic_dump(w.dlq, &ndlq);
    ck_assert_int_eq(ndlq, 0);
    free(dlq);

    stop_collector(pid);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

static void append(const char *file, int from, int to)
{
    FILE *f = fopen(file, "a");
    ck_assert_ptr_nonnull(f);
    for (int i = from; i < to; i++)
        fprintf(f,
                "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"f-%05d\","
                "\"ts\":\"2026-11-29T14:00:00Z\",\"source\":{\"kind\":\"proxy\","
                "\"name\":\"squid\"},\"task_id\":\"T-RLF\",\"run_id\":\"run-rlf\","
                "\"type\":\"request\",\"attrs\":{\"host\":\"h%d.example\"}}\n",
                i, i % 7);
    fclose(f);
}

START_TEST(reload_follow_loses_and_duplicates_no_line)
{
    struct world w;
    char log[192], pidf[192], path[192], cmd[1024];
    world_init(&w, "reloadf");
    snprintf(dir, sizeof(dir), "/tmp/st_reloadf_%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(log, sizeof(log), "%s/collector.log", dir);
    snprintf(pidf, sizeof(pidf), "%s/pid", dir);
    snprintf(path, sizeof(path), "%s/events.log", dir);
    append(path, 0, 100);
    run(&w, w.name, w.name,
        BIN "/collector/sandtrail-collector --follow %s -X input.poll_ms=20"
            " -X input.checkpoint_lines=30 2>%s & echo \\$! > %s",
        path, log, pidf);
    int pid = read_pid(pidf);
    ck_assert(log_has(log, "following"));
    /* SIGHUPs while lines come in, in small bursts */
    for (int k = 1; k < 10; k++) {
        append(path, k * 100, k * 100 + 50);
        ck_assert_int_eq(kill(pid, SIGHUP), 0);
        usleep(30000);
        append(path, k * 100 + 50, k * 100 + 100);
        usleep(30000);
    }
    ck_assert(alive(pid));
    int n = 0;
    char *dump = NULL;
    for (int i = 0; i < 150 && n < 1000; i++) {
        free(dump);
        dump = topic_dump(w.topic, &n);
        if (n < 1000)
            usleep(200000);
    }
    ck_assert_int_eq(n, 1000);
    for (int i = 0; i < 1000; i++) {
        char id[48];
        snprintf(id, sizeof(id), "\"event_id\":\"f-%05d\"", i);
        ck_assert_msg(count_of(dump, id) == 1, "line %d is in Kafka %d times", i,
                      count_of(dump, id));
    }
    free(dump);
    ck_assert(alive(pid));
    ck_assert(log_has(log, "reload: done"));
    stop_collector(pid);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

/* Starts prog (analyzer or alerter) with a configuration file and
 * metrics.listen, reloads it with log.level=debug and fixed_prop changed:
 * it runs on, applies the one and says the other needs a restart. */
static void reload_daemon(struct world *w, const char *prog, const char *fixed_prop)
{
    char log[192], pidf[192], conf[512], cmd[1024];
    int port = world_free_port();
    snprintf(log, sizeof(log), "%s/%s.log", dir, prog);
    snprintf(pidf, sizeof(pidf), "%s/%s.pid", dir, prog);
    snprintf(conf, sizeof(conf), "log.level = info\nmetrics.listen = 127.0.0.1:%d\n", port);
    write_file("daemon.conf", conf);
    run(w, w->name, w->name,
        BIN "/%s/sandtrail-%s %s -c %s/daemon.conf 2>%s & echo \\$! > %s", prog, prog,
        strcmp(prog, "analyzer") ? "" : "--no-migrate", dir, log, pidf);
    int pid = read_pid(pidf);
    char *ok = NULL;
    snprintf(cmd, sizeof(cmd), "curl -s http://127.0.0.1:%d/healthz", port);
    for (int i = 0; i < 300; i++) { /* generous: sanitizer builds start slowly */
        free(ok);
        ok = world_sh(cmd);
        if (strstr(ok, "ok"))
            break;
        usleep(100000);
    }
    ck_assert_msg(strstr(ok, "ok") != NULL, "%s: %s", prog, ok);
    free(ok);
    snprintf(conf, sizeof(conf), "log.level = debug\nmetrics.listen = 127.0.0.1:%d\n%s\n",
             port, fixed_prop);
    write_file("daemon.conf", conf);
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    ck_assert_msg(log_has(log, "reload: done (log.level=debug)"), "%s", prog);
    char expect[160];
    snprintf(expect, sizeof(expect), "cannot change while running: %.*s (restart to apply)",
             (int)strcspn(fixed_prop, " ="), fixed_prop);
    ck_assert_msg(log_has(log, expect), "%s: %s", prog, expect);
    ck_assert(alive(pid));
    stop_collector(pid);
}

START_TEST(reload_analyzer_and_alerter_apply_log_level)
{
    struct world w;
    char cmd[400];
    world_init(&w, "reloada");
    snprintf(dir, sizeof(dir), "/tmp/st_reloada_%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/cli/sandtrail migrate >/dev/null"), 0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input /dev/null 2>/dev/null"),
                     0);
    reload_daemon(&w, "analyzer", "detect.lateness_s = 7");
    reload_daemon(&w, "alerter", "alert.poll_ms = 777");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("reload");
    TCase *tc = tcase_create("reload");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, reload_http_tokens_canaries_and_log_level_without_dropping_a_request);
    tcase_add_test(tc, reload_follow_loses_and_duplicates_no_line);
    tcase_add_test(tc, reload_analyzer_and_alerter_apply_log_level);
    suite_add_tcase(s, tc);
    return world_run(s);
}
