/* test_alerts.c: on-call alerts, against the real PostgreSQL, Redis and
 * Alertmanager (each test starts its own Alertmanager with the shipped
 * configuration, and webhook receivers, tests/integration/alert_receiver.py,
 * that check every signature and the schema).
 *
 * The outbox (analyzer/sinks/outbox.c) writes one notification per finding
 * created and per severity it rises to, in the batch transaction; triage
 * (sandtrail_triage through `sandtrail findings ...`) records who changed
 * a finding and queues the notification that ends its alert;
 * sandtrail-alerter delivers them: to Alertmanager within seconds of the
 * commit, to webhooks with retries, throttled into digests, at least once
 * across a SIGKILL and an Alertmanager outage, secrets only as markers. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "timeutil.h"
#include "world.h"

#define ALERTER BIN "/alerter/sandtrail-alerter"
#define FIXTURE SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson"
#define CLI BIN "/cli/sandtrail"
#define ANALYZER BIN "/analyzer/sandtrail-analyzer --drain"

static const char *q_notifications =
    "SELECT f.detector, n.kind, n.severity, n.task_id,"
    " n.delivery_id = n.finding_id || '.' || n.kind || '.' || n.severity"
    " FROM notifications n JOIN findings f USING (finding_id)"
    " ORDER BY n.kind <> 'created', f.detector, n.notification_id";

/* rows(dsn, sql), asked every 100 ms for up to 10 s until its text starts
 * with prefix: the alerter records a delivery a moment after the receiver
 * has taken it. The last answer; caller frees. */
static char *rows_awaited(const char *dsn, const char *sql, const char *prefix)
{
    char *r = rows(dsn, sql);
    for (int i = 0; i < 100 && strncmp(r, prefix, strlen(prefix)); i++) {
        free(r);
        usleep(100000);
        r = rows(dsn, sql);
    }
    return r;
}

/* The demo's events in w's topic, analyzed once with denial bursts kept at
 * medium severity. */
static void demo_world(struct world *w, const char *tag)
{
    world_init(w, tag);
    ck_assert_int_eq(run(w, w->name, w->name,
                         BIN "/collector/sandtrail-collector --input %s", FIXTURE),
                     1); /* 1: the fixture's one malformed line */
    ck_assert_int_eq(run(w, w->name, w->name,
                         ANALYZER " -X detect.denial_burst.high_targets=100"),
                     0);
}

START_TEST(alerts_outbox_once_per_finding_and_raised_severity)
{
    struct world w;
    char group[96];
    demo_world(&w, "outbox");
    char *n = rows(w.dsn, q_notifications);
    ck_assert_str_eq(n, "denial_burst|created|medium|T-100|t\n"
                        "retry_across_paths|created|medium|T-100|t\n");
    free(n);

    /* a replay from offset 0 (new group, fresh detector state) adds nothing */
    snprintf(group, sizeof(group), "%s_replay", w.name);
    ck_assert_int_eq(run(&w, group, group, ANALYZER " -X detect.denial_burst.high_targets=100"),
                     0);
    n = rows(w.dsn, q_notifications);
    ck_assert_str_eq(n, "denial_burst|created|medium|T-100|t\n"
                        "retry_across_paths|created|medium|T-100|t\n");
    free(n);

    /* the same evidence judged high: one severity_raised, once */
    for (int i = 0; i < 2; i++) {
        snprintf(group, sizeof(group), "%s_high%d", w.name, i);
        ck_assert_int_eq(run(&w, group, group, ANALYZER), 0);
    }
    n = rows(w.dsn, q_notifications);
    ck_assert_str_eq(n, "denial_burst|created|medium|T-100|t\n"
                        "retry_across_paths|created|medium|T-100|t\n"
                        "denial_burst|severity_raised|high|T-100|t\n");
    free(n);
    world_drop(&w);
}
END_TEST

START_TEST(alerts_triage_records_who_and_queues_the_resolution)
{
    struct world w;
    demo_world(&w, "triage");
    char *id = rows(w.dsn, "SELECT finding_id FROM findings WHERE detector = 'denial_burst'");
    id[strlen(id) - 1] = '\0';

    ck_assert_int_eq(run(&w, w.name, w.name, CLI " findings ack %s --by alice > /dev/null", id),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         CLI " findings resolve %s --by bob --note 'proxy rule fixed'"
                             " > /dev/null", id),
                     0);
    /* the same status again changes and queues nothing */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         CLI " findings resolve %s --by bob > /dev/null", id),
                     0);
    /* no name, no change; an unknown finding is an error */
    ck_assert_int_eq(run(&w, w.name, w.name, CLI " findings dismiss %s 2> /dev/null", id), 64);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         CLI " findings dismiss nosuch --by bob 2> /dev/null"),
                     1);

    char *f = rows(w.dsn, "SELECT status, status_changed_at IS NOT NULL FROM findings"
                          " WHERE detector = 'denial_burst'");
    ck_assert_str_eq(f, "resolved|t\n");
    free(f);
    char *h = rows(w.dsn, "SELECT changed_by, db_user = current_user, from_status,"
                          " to_status, note FROM finding_status_history ORDER BY change_id");
    ck_assert_str_eq(h, "alice|t|open|acknowledged|\n"
                        "bob|t|acknowledged|resolved|proxy rule fixed\n");
    free(h);
    char *n = rows(w.dsn, "SELECT n.kind, n.severity, h.to_status"
                          " FROM notifications n JOIN finding_status_history h"
                          " USING (change_id) ORDER BY n.notification_id");
    ck_assert_str_eq(n, "resolved|medium|resolved\n");
    free(n);

    /* what the CLI prints is escaped: no stored text moves the terminal */
    char *upd = rows(w.dsn, "UPDATE findings SET summary = E'evil\\x1b[2J\\nforged line'"
                            " WHERE detector = 'denial_burst' RETURNING 1");
    free(upd);
    ck_assert_int_eq(run(&w, w.name, w.name, CLI " findings > /tmp/st-alerts-%d-cli.txt",
                         (int)getpid()),
                     0);
    char cli[128];
    snprintf(cli, sizeof(cli), "/tmp/st-alerts-%d-cli.txt", (int)getpid());
    char *out = world_slurp(cli);
    ck_assert_msg(strstr(out, "evil\\x1b[2J\\x0aforged line\n") && !strchr(out, 0x1b), "%s",
                  out);
    free(out);
    unlink(cli);

    /* a dismissed finding raises nothing more, even when its severity rises */
    char *other = rows(w.dsn, "SELECT finding_id FROM findings"
                              " WHERE detector = 'retry_across_paths'");
    other[strlen(other) - 1] = '\0';
    ck_assert_int_eq(run(&w, w.name, w.name,
                         CLI " findings dismiss %s --by carol > /dev/null", other), 0);
    char group[96];
    snprintf(group, sizeof(group), "%s_again", w.name);
    ck_assert_int_eq(run(&w, group, group, ANALYZER), 0);
    n = rows(w.dsn, "SELECT f.detector, n.kind, n.severity FROM notifications n"
                    " JOIN findings f USING (finding_id)"
                    " ORDER BY n.kind <> 'created',"
                    " CASE WHEN n.kind = 'created' THEN f.detector END, n.notification_id");
    ck_assert_str_eq(n, "denial_burst|created|medium\n"
                        "retry_across_paths|created|medium\n"
                        "denial_burst|resolved|medium\n"
                        "retry_across_paths|dismissed|medium\n"
                        "denial_burst|severity_raised|high\n");
    free(n);
    free(other);
    free(id);
    world_drop(&w);
}
END_TEST

/* The text of Alertmanager's GET /api/v2/alerts with curl's extra
 * arguments args (a filter), asked up to 20 times over 2 s until it is a
 * JSON array: an Alertmanager that misses one request on a loaded machine
 * is not what these tests are about. */
static char *am_get(const struct world_am *a, const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "curl -fsS -m 5 -G 'http://127.0.0.1:%d/api/v2/alerts' %s 2> /dev/null", a->port,
             args);
    for (int i = 0;; i++) {
        char *out = world_sh(cmd);
        cJSON *arr = cJSON_Parse(out);
        int ok = cJSON_IsArray(arr);
        cJSON_Delete(arr);
        if (ok || i == 19)
            return out;
        free(out);
        usleep(100000);
    }
}

/* Alertmanager's alerts for one finding. */
static cJSON *am_alerts(const struct world_am *a, const char *finding_id)
{
    char args[128];
    snprintf(args, sizeof(args), "--data-urlencode 'filter=finding_id=\"%s\"'", finding_id);
    char *out = am_get(a, args);
    cJSON *arr = cJSON_Parse(out);
    free(out);
    ck_assert_msg(cJSON_IsArray(arr), "Alertmanager did not answer");
    return arr;
}

static const char *label(const cJSON *alert, const char *name)
{
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(alert, "labels"), name);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Starts an alerter in the background; its pid. */
static int alerter_start(const struct world *w, const char *dir, const char *opts)
{
    char path[256];
    ck_assert_int_eq(run(w, w->name, w->name,
                         "exec " ALERTER " %s > %s/alerter.log 2>&1 & echo \\$! > %s/alerter.pid",
                         opts, dir, dir),
                     0);
    snprintf(path, sizeof(path), "%s/alerter.pid", dir);
    int pid = world_read_int(path);
    ck_assert_int_gt(pid, 1);
    return pid;
}

static char *first_id(const struct world *w, const char *detector)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT finding_id FROM findings WHERE detector = '%s'",
             detector);
    char *id = rows(w->dsn, sql);
    ck_assert_int_eq((int)strlen(id), 33);
    id[32] = '\0';
    return id;
}

START_TEST(alerts_alertmanager_holds_the_finding_and_routes_it)
{
    struct world w;
    struct world_receiver r;
    struct world_am a;
    char opts[512];

    world_receiver_start(&r, "am", "");
    world_am_start(&a, r.port);
    world_init(&w, "am");
    ck_assert_int_eq(run(&w, w.name, w.name, CLI " migrate > /dev/null"), 0);
    /* the alerter waits first, as in production */
    snprintf(opts, sizeof(opts),
             "-X alert.alertmanager.url=http://127.0.0.1:%d -X alert.webhook.url="
             " -X alert.poll_ms=600000 -X alert.repeat_s=5",
             a.port);
    int pid = alerter_start(&w, r.dir, opts);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input %s", FIXTURE),
                     1);
    ck_assert_int_eq(run(&w, w.name, w.name, ANALYZER), 0);
    int64_t committed = st_time_mono_ms();
    char *id = first_id(&w, "denial_burst");

    /* woken by NOTIFY (the poll is ten minutes): there within seconds (15 s
     * of margin for a loaded CI machine, still 40 times under the poll) */
    cJSON *alerts = NULL;
    while (st_time_mono_ms() - committed < 15000) {
        cJSON_Delete(alerts);
        alerts = am_alerts(&a, id);
        if (cJSON_GetArraySize(alerts) > 0)
            break;
        usleep(50000);
    }
    ck_assert_int_eq(cJSON_GetArraySize(alerts), 1);
    cJSON *al = cJSON_GetArrayItem(alerts, 0);
    ck_assert_str_eq(label(al, "alertname"), "sandtrail_denial_burst");
    ck_assert_str_eq(label(al, "severity"), "high");
    ck_assert_str_eq(label(al, "detector"), "denial_burst");
    ck_assert_str_eq(label(al, "task_id"), "T-100");
    ck_assert_str_eq(label(al, "run_id"), "run-burst");
    ck_assert_str_eq(label(al, "finding_id"), id);
    const cJSON *ann = cJSON_GetObjectItem(al, "annotations");
    ck_assert_str_eq(cJSON_GetObjectItem(ann, "summary")->valuestring,
                     "12 denied events within 60 s to 6 distinct target(s)");
    ck_assert_str_eq(cJSON_GetObjectItem(ann, "event_count")->valuestring, "12");
    cJSON_Delete(alerts);

    /* the shipped route: Alertmanager's own webhook, grouped by task */
    int routed = 0;
    for (int i = 0; i < 300 && !routed; i++) {
        cJSON *reqs = world_receiver_requests(&r);
        const cJSON *q;
        cJSON_ArrayForEach(q, reqs)
        {
            const char *b = cJSON_GetObjectItem(q, "body")->valuestring;
            routed |= strstr(b, id) && strstr(b, "\"groupLabels\":{") &&
                      strstr(b, "\"task_id\":\"T-100\"");
        }
        cJSON_Delete(reqs);
        if (!routed)
            usleep(100000);
    }
    ck_assert_msg(routed, "Alertmanager did not route the alert to its webhook");

    /* resolving the finding ends its alert */
    ck_assert_int_eq(run(&w, w.name, w.name, CLI " findings resolve %s --by oncall > /dev/null",
                         id),
                     0);
    int ended = 0;
    for (int i = 0; i < 300 && !ended; i++) {
        alerts = am_alerts(&a, id);
        ended = cJSON_GetArraySize(alerts) == 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, alerts)
        {
            const cJSON *st = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "status"), "state");
            ended |= cJSON_IsString(st) && !strcmp(st->valuestring, "resolved");
        }
        cJSON_Delete(alerts);
        if (!ended)
            usleep(100000);
    }
    ck_assert_msg(ended, "the resolved finding still fires in Alertmanager");
    /* on record once the alerter has its answer: it commits the delivery
     * after Alertmanager took the alert, so a loaded machine may show the
     * alert ended a moment before (a failure seen under ctest -j 8) */
    const char *want = "created|delivered\nresolved|delivered\n";
    char *n = rows_awaited(w.dsn, "SELECT n.kind, q.state FROM notification_queue q"
                                  " JOIN notifications n USING (notification_id)"
                                  " JOIN findings f USING (finding_id)"
                                  " WHERE f.detector = 'denial_burst'"
                                  " ORDER BY n.notification_id",
                           want);
    ck_assert_str_eq(n, want);
    free(n);

    kill(pid, SIGTERM);
    free(id);
    world_am_stop(&a);
    world_receiver_stop(&r);
    world_drop(&w);
}
END_TEST

#define SCHEMA SANDTRAIL_SOURCE_DIR "/schemas/alert.v1.schema.json"

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static int cmp_line(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* delivery id -> requests, "id:n" per line in id order; also checks that
 * every request was signed correctly and matches the schema. */
static char *per_delivery(const struct world_receiver *r, int signed_, int *total)
{
    cJSON *reqs = world_receiver_requests(r);
    const cJSON *q;
    char line[256];
    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    *total = cJSON_GetArraySize(reqs);
    cJSON_ArrayForEach(q, reqs)
    {
        ck_assert_msg(!signed_ || cJSON_IsTrue(cJSON_GetObjectItem(q, "verified")),
                      "a signature did not verify: %s",
                      cJSON_GetObjectItem(q, "body")->valuestring);
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(q, "schema_errors")), 0);
        const char *id = cJSON_GetObjectItem(q, "delivery")->valuestring;
        cJSON *body = cJSON_Parse(cJSON_GetObjectItem(q, "body")->valuestring);
        ck_assert_str_eq(cJSON_GetObjectItem(body, "delivery_id")->valuestring, id);
        cJSON_Delete(body);
        /* the last request of each id says how many there were */
        snprintf(line, sizeof(line), "%s:", id);
        char *at = strstr(b.data, line);
        if (at) {
            char *end = strchr(at, '\n');
            memmove(at, end + 1, strlen(end + 1) + 1);
            b.len = strlen(b.data);
        }
        snprintf(line, sizeof(line), "%s:%d\n", id,
                 (int)cJSON_GetObjectItem(q, "n")->valuedouble);
        st_buf_adds(&b, line);
    }
    cJSON_Delete(reqs);
    /* in id order */
    char *lines[1024];
    int n = 0;
    for (char *l = strtok(b.data, "\n"); l && n < 1024; l = strtok(NULL, "\n"))
        lines[n++] = l;
    qsort(lines, (size_t)n, sizeof(*lines), cmp_line);
    struct st_buf sorted;
    st_buf_init(&sorted);
    st_buf_adds(&sorted, "");
    for (int i = 0; i < n; i++)
        st_buf_printf(&sorted, "%s\n", lines[i]);
    st_buf_fini(&b);
    return sorted.data;
}

static void write_secret(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("s3cret-for-the-test\n", f);
    fclose(f);
}

START_TEST(alerts_webhook_retries_503_signs_and_fails_4xx_loudly)
{
    struct world w;
    struct world_receiver ok, refusing, high;
    char opts[1400], group[96];
    int total;

    demo_world(&w, "webhook");
    world_receiver_start(&refusing, "refusing", "--status 400");
    world_receiver_start(&high, "high", "");
    char okopts[512];
    snprintf(okopts, sizeof(okopts), "--fail-first 2 --secret-file /tmp/st-alerts-%d-secret"
             " --schema " SCHEMA, (int)getpid());
    char spath[128];
    snprintf(spath, sizeof(spath), "/tmp/st-alerts-%d-secret", (int)getpid());
    write_secret(spath);
    world_receiver_start(&ok, "ok", okopts);
    snprintf(opts, sizeof(opts),
             "--drain -X alert.alertmanager.url= -X alert.retry.backoff_ms=50"
             " -X alert.webhook.url=http://127.0.0.1:%d/hook -X alert.webhook.secret_file=%s"
             " -X alert.webhook.2.url=http://127.0.0.1:%d/refuse"
             " -X alert.webhook.3.url=http://127.0.0.1:%d/high"
             " -X alert.webhook.3.min_severity=high",
             ok.port, spath, refusing.port, high.port);
    ck_assert_int_eq(run(&w, w.name, w.name, ALERTER " %s 2> /dev/null", opts), 0);

    /* twice 503, then 200: three requests per notification, one id each */
    char *ids = per_delivery(&ok, 1, &total);
    char *want = rows(w.dsn, "SELECT delivery_id || ':3' FROM notifications"
                             " ORDER BY delivery_id COLLATE \"C\"");
    ck_assert_str_eq(ids, want);
    ck_assert_int_eq(total, 6);
    free(want);
    free(ids);
    char *d = rows(w.dsn, "SELECT n.kind, string_agg(d.outcome || ' ' ||"
                          " coalesce(d.http_status::text, '-'), ', ' ORDER BY d.attempt)"
                          " FROM deliveries d JOIN notifications n USING (notification_id)"
                          " WHERE d.receiver = 'webhook' GROUP BY n.notification_id, n.kind"
                          " ORDER BY n.notification_id");
    ck_assert_str_eq(d, "created|retry 503, retry 503, delivered 200\n"
                        "created|retry 503, retry 503, delivered 200\n");
    free(d);
    /* a refusing 4xx fails at once, on record; below min_severity: nothing */
    char *q = rows(w.dsn, "SELECT receiver, state, attempts, count(*) FROM notification_queue"
                          " GROUP BY 1, 2, 3 ORDER BY 1");
    ck_assert_str_eq(q, "webhook|delivered|3|2\nwebhook.2|failed|1|2\n");
    free(q);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         CLI " alerts --failed > %s/failed.txt", ok.dir), 0);
    char path[256];
    snprintf(path, sizeof(path), "%s/failed.txt", ok.dir);
    char *listed = world_slurp(path);
    ck_assert_msg(strstr(listed, "(2 deliveries)") && strstr(listed, "HTTP status 400"),
                  "%s", listed);
    free(listed);

    /* sent again on request: one more attempt, refused again */
    char *first = rows(w.dsn, "SELECT min(notification_id) FROM notifications");
    first[strlen(first) - 1] = '\0';
    ck_assert_int_eq(run(&w, w.name, w.name,
                         CLI " alerts retry %s --receiver webhook.2 > /dev/null", first), 0);
    ck_assert_int_eq(run(&w, w.name, w.name, ALERTER " %s 2> /dev/null", opts), 0);
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM deliveries WHERE receiver = 'webhook.2'"
                               " AND notification_id = %s", first);
    char *again = rows(w.dsn, sql);
    ck_assert_str_eq(again, "2\n");
    free(again);
    free(first);

    /* a replay from offset 0 sends nothing new */
    snprintf(group, sizeof(group), "%s_replay", w.name);
    ck_assert_int_eq(run(&w, group, group, ANALYZER " -X detect.denial_burst.high_targets=100"),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name, ALERTER " %s 2> /dev/null", opts), 0);
    ids = per_delivery(&ok, 1, &total);
    ck_assert_int_eq(total, 6);
    free(ids);
    cJSON *none = world_receiver_requests(&high);
    ck_assert_int_eq(cJSON_GetArraySize(none), 0);
    cJSON_Delete(none);

    unlink(spath);
    world_receiver_stop(&ok);
    world_receiver_stop(&refusing);
    world_receiver_stop(&high);
    world_drop(&w);
}
END_TEST

START_TEST(alerts_sigkill_mid_delivery_redelivers_with_the_same_id)
{
    struct world w;
    struct world_receiver slow;
    char opts[512];
    int total;

    demo_world(&w, "kill");
    /* the first request of each delivery is answered only after 3 s */
    world_receiver_start(&slow, "slow", "--delay-first 3");
    snprintf(opts, sizeof(opts), "-X alert.alertmanager.url= -X alert.batch=10"
             " -X alert.webhook.url=http://127.0.0.1:%d/hook", slow.port);
    int pid = alerter_start(&w, slow.dir, opts);
    cJSON *reqs = NULL;
    for (int i = 0; i < 300; i++) {
        cJSON_Delete(reqs);
        reqs = world_receiver_requests(&slow);
        if (cJSON_GetArraySize(reqs) > 0)
            break;
        usleep(100000);
    }
    ck_assert_int_eq(cJSON_GetArraySize(reqs), 1);
    cJSON_Delete(reqs);
    kill(pid, SIGKILL);
    char *state = rows(w.dsn, "SELECT count(*) FROM deliveries");
    ck_assert_str_eq(state, "0\n"); /* nothing recorded: the claim rolled back */
    free(state);

    snprintf(opts, sizeof(opts), "--drain -X alert.alertmanager.url= -X alert.batch=10"
             " -X alert.webhook.url=http://127.0.0.1:%d/hook", slow.port);
    ck_assert_int_eq(run(&w, w.name, w.name, ALERTER " %s 2> /dev/null", opts), 0);
    /* every notification delivered; the one in flight twice, same id */
    char *ids = per_delivery(&slow, 0, &total);
    char *want = rows(w.dsn, "SELECT delivery_id || ':' ||"
                             " CASE WHEN rank() OVER (ORDER BY notification_id) = 1"
                             " THEN 2 ELSE 1 END FROM notifications ORDER BY delivery_id COLLATE \"C\"");
    ck_assert_str_eq(ids, want);
    ck_assert_int_eq(total, 3);
    free(want);
    free(ids);
    state = rows(w.dsn, "SELECT state, count(*) FROM notification_queue GROUP BY 1");
    ck_assert_str_eq(state, "delivered|2\n");
    free(state);
    world_receiver_stop(&slow);
    world_drop(&w);
}
END_TEST

START_TEST(alerts_throttle_folds_a_flood_into_digests_naming_every_finding)
{
    struct world w;
    struct world_receiver r;
    char opts[1024], spath[128];
    int total;

    world_init(&w, "flood");
    ck_assert_int_eq(run(&w, w.name, w.name, CLI " migrate > /dev/null"), 0);
    /* 200 findings for T-FLOOD (one critical), 2 for T-OTHER, as the
     * analyzer's outbox would have written them */
    char *ok = rows(w.dsn,
        "WITH f AS (INSERT INTO findings (finding_id, detector, detector_version,"
        "  config_hash, severity, task_id, run_id, first_seen, last_seen, event_count,"
        "  evidence, summary)"
        " SELECT md5(t || i), CASE WHEN i % 3 = 0 THEN 'retry_across_paths'"
        "  ELSE 'denial_burst' END, 1, 'h',"
        "  (CASE WHEN t = 'T-FLOOD' AND i = 7 THEN 'critical' ELSE 'medium' END)::severity,"
        "  t, 'run-' || i, now(), now(), 1, '{\"targets\": []}', 'finding ' || i"
        " FROM generate_series(0, 199) i, unnest(ARRAY['T-FLOOD', 'T-OTHER']) t"
        " WHERE t = 'T-FLOOD' OR i < 2 RETURNING *)"
        " SELECT count(*) FROM f");
    ck_assert_str_eq(ok, "202\n");
    free(ok);
    ok = rows(w.dsn, "WITH n AS (INSERT INTO notifications (delivery_id, finding_id, kind,"
                     " severity, task_id) SELECT finding_id || '.created.' || severity,"
                     " finding_id, 'created', severity, task_id FROM findings"
                     " ORDER BY finding_id RETURNING 1) SELECT count(*) FROM n");
    ck_assert_str_eq(ok, "202\n");
    free(ok);

    snprintf(spath, sizeof(spath), "/tmp/st-alerts-%d-secret", (int)getpid());
    write_secret(spath);
    snprintf(opts, sizeof(opts), "--secret-file %s --schema " SCHEMA, spath);
    world_receiver_start(&r, "flood", opts);
    /* start early in a 10 s window, so that the flood falls in one; on a
     * loaded machine it may still run into the next: first_window.. are
     * the windows it can have counted in (throttle.c: by the clock at the
     * claim, which is before the request arrives) */
    while (time(NULL) % 10 > 2)
        usleep(100000);
    long first_window = (long)(time(NULL) / 10), last_window = first_window;
    snprintf(opts, sizeof(opts),
             "--drain -X alert.alertmanager.url= -X alert.throttle.max=5"
             " -X alert.throttle.window_s=10 -X alert.batch=20"
             " -X alert.webhook.url=http://127.0.0.1:%d/hook -X alert.webhook.secret_file=%s",
             r.port, spath);
    /* two alerters share the count through Redis */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         ALERTER " %s 2> /dev/null & " ALERTER " %s 2> /dev/null; wait",
                         opts, opts),
                     0);

    char *ids = per_delivery(&r, 1, &total);
    free(ids);
    cJSON *reqs = world_receiver_requests(&r);
    const cJSON *q;
    int singles = 0, critical = 0, other = 0, digests = 0, named = 0;
    struct st_buf seen;
    st_buf_init(&seen);
    st_buf_adds(&seen, "");
    cJSON_ArrayForEach(q, reqs)
    {
        cJSON *body = cJSON_Parse(cJSON_GetObjectItem(q, "body")->valuestring);
        const char *type = cJSON_GetObjectItem(body, "type")->valuestring;
        const char *task = cJSON_GetObjectItem(body, "task_id")->valuestring;
        long received = (long)(cJSON_GetObjectItem(q, "received")->valuedouble / 10);
        if (strcmp(type, "digest") && received > last_window)
            last_window = received;
        if (!strcmp(type, "digest")) {
            digests++;
            ck_assert_str_eq(task, "T-FLOOD");
            const char *sum = cJSON_GetObjectItem(body, "summary")->valuestring;
            char want[64];
            snprintf(want, sizeof(want), "and %d more findings for task T-FLOOD: ",
                     cJSON_GetArraySize(cJSON_GetObjectItem(body, "findings")));
            ck_assert_msg(strstr(sum, want) == sum &&
                              strstr(sum, " denial_burst") && strstr(sum, " retry_across_paths"),
                          "%s", sum);
            const cJSON *f;
            cJSON_ArrayForEach(f, cJSON_GetObjectItem(body, "findings"))
            {
                ck_assert_str_eq(cJSON_GetObjectItem(f, "severity")->valuestring, "medium");
                st_buf_printf(&seen, "%s\n", cJSON_GetObjectItem(f, "finding_id")->valuestring);
                named++;
            }
        } else if (!strcmp(task, "T-OTHER")) {
            other++;
        } else {
            if (!strcmp(cJSON_GetObjectItem(body, "severity")->valuestring, "critical"))
                critical++;
            else
                singles++;
            st_buf_printf(&seen, "%s\n", cJSON_GetObjectItem(body, "finding_id")->valuestring);
            named++;
        }
        cJSON_Delete(body);
    }
    cJSON_Delete(reqs);
    /* five alone, the critical one never held, the other task untouched,
     * the 194 others in one digest; if the flood ran into a second window
     * (a loaded machine), at most five alone and one digest per window */
    long windows = last_window - first_window + 1;
    ck_assert_msg(windows == 1 || windows == 2, "the flood took %ld windows", windows);
    if (windows == 1) {
        ck_assert_int_eq(singles, 5);
        ck_assert_int_eq(digests, 1);
    } else {
        ck_assert_msg(singles >= 5 && singles <= 10 && digests >= 1 && digests <= 2,
                      "%d alone, %d digests over two windows", singles, digests);
    }
    ck_assert_int_eq(critical, 1);
    ck_assert_int_eq(other, 2);
    ck_assert_int_eq(named, 200);
    /* every T-FLOOD finding named exactly once */
    char path[256];
    snprintf(path, sizeof(path), "%s/named.txt", r.dir);
    FILE *fp = fopen(path, "w");
    fputs(seen.data, fp);
    fclose(fp);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "sort -u %s | wc -l", path);
    char *uniq = world_sh(cmd);
    ck_assert_int_eq(atoi(uniq), 200);
    free(uniq);
    st_buf_fini(&seen);
    /* and on record: every notification delivered, alone or in the digest */
    char *rec = rows(w.dsn, "SELECT digest_id IS NOT NULL, count(*) FROM finding_notices"
                            " WHERE delivered_at IS NOT NULL GROUP BY 1 ORDER BY 1");
    char want[64];
    snprintf(want, sizeof(want), "f|%d\nt|%d\n", singles + 3, 199 - singles);
    ck_assert_str_eq(rec, want);
    free(rec);

    unlink(spath);
    world_receiver_stop(&r);
    world_drop(&w);
}
END_TEST

/* The canary and a token, as tests/data/canary/secrets.txt holds them. */
#define CANARY "CANARY-7f3a9c1e2b44d0"
#define TOKEN "ghp_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7C"

START_TEST(alerts_carry_redaction_markers_never_the_secret)
{
    struct world w;
    struct world_receiver r, amr;
    struct world_am a;
    char path[256], opts[1024];

    world_init(&w, "redact");
    world_receiver_start(&r, "redact", "--schema " SCHEMA);
    world_receiver_start(&amr, "redact-am", "");
    world_am_start(&a, amr.port);
    /* twelve refused connections to hosts that carry the secrets */
    snprintf(path, sizeof(path), "%s/events.ndjson", r.dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 12; i++)
        fprintf(f,
                "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"sec-%d\","
                "\"ts\":\"2026-11-29T08:00:%02d.000Z\",\"source\":{\"kind\":\"proxy\","
                "\"name\":\"squid\"},\"task_id\":\"T-SECRET\",\"run_id\":\"run-secret\","
                "\"type\":\"request\",\"decision\":\"deny\",\"reason\":\"not_in_allowlist\","
                "\"attrs\":{\"method\":\"CONNECT\",\"host\":\"%s%d.example.net\","
                "\"port\":443,\"status\":403}}\n",
                i, i * 2, i % 2 ? TOKEN ".paste" : "up-" CANARY "-", i);
    fclose(f);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input %s -X redact.canaries_file="
                             SANDTRAIL_SOURCE_DIR "/tests/data/canary/canaries.txt 2> /dev/null",
                         path),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name, ANALYZER " 2> /dev/null"), 0);
    snprintf(opts, sizeof(opts),
             "--drain -X alert.alertmanager.url=http://127.0.0.1:%d"
             " -X alert.webhook.url=http://127.0.0.1:%d/hook",
             a.port, r.port);
    ck_assert_int_eq(run(&w, w.name, w.name, ALERTER " %s 2> /dev/null", opts), 0);

    snprintf(path, sizeof(path), "%s/requests.ndjson", r.dir);
    char *hooks = world_slurp(path);
    char *am = am_get(&a, "");
    char *both[2] = {hooks, am};
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(!strstr(both[i], CANARY) && !strstr(both[i], TOKEN),
                      "a secret reached on-call: %s", both[i]);
        ck_assert_msg(strstr(both[i], "[REDACTED:canary:") &&
                          strstr(both[i], "[REDACTED:github_token:"),
                      "no marker: %s", both[i]);
    }
    ck_assert_ptr_null(strstr(hooks, "schema_errors\": [\""));
    /* four findings, each in Alertmanager and at the webhook */
    ck_assert_int_eq(count_of(am, "\"finding_id\":"), 4);
    ck_assert_int_eq(count_of(hooks, "\"delivery\": "), 4);
    free(am);
    free(hooks);
    world_am_stop(&a);
    world_receiver_stop(&amr);
    world_receiver_stop(&r);
    world_drop(&w);
}
END_TEST

/* Findings first..last of task, with their notifications, as the
 * analyzer's outbox writes them, each in its own transaction. */
static void insert_findings(const struct world *w, const char *task, int first, int last)
{
    char sql[1400];
    for (int i = first; i <= last; i++) {
        snprintf(sql, sizeof(sql),
                 "WITH f AS (INSERT INTO findings (finding_id, detector, detector_version,"
                 "  config_hash, severity, task_id, run_id, first_seen, last_seen,"
                 "  event_count, evidence, summary)"
                 " VALUES (md5('%s' || %d), 'denial_burst', 1, 'h', 'high', '%s', 'run-%d',"
                 "  now(), now(), 1, '{}', 'finding %d') RETURNING *),"
                 " n AS (INSERT INTO notifications (delivery_id, finding_id, kind, severity,"
                 "  task_id) SELECT finding_id || '.created.high', finding_id, 'created',"
                 "  'high', task_id FROM f RETURNING 1)"
                 " SELECT count(*) FROM n",
                 task, i, task, i, i);
        char *r = rows(w->dsn, sql);
        ck_assert_str_eq(r, "1\n");
        free(r);
    }
}

static int am_count(const struct world_am *a)
{
    char *out = am_get(a, "--data active=true");
    cJSON *arr = cJSON_Parse(out);
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
    cJSON_Delete(arr);
    free(out);
    return n;
}

START_TEST(alerts_alertmanager_down_30s_then_every_alert_arrives_once)
{
    struct world w;
    struct world_receiver r;
    struct world_am a;
    char opts[512];

    world_receiver_start(&r, "outage", "");
    world_am_start(&a, r.port);
    world_init(&w, "outage");
    ck_assert_int_eq(run(&w, w.name, w.name, CLI " migrate > /dev/null"), 0);
    snprintf(opts, sizeof(opts),
             "-X alert.alertmanager.url=http://127.0.0.1:%d -X alert.webhook.url="
             " -X alert.repeat_s=5 -X alert.retry.backoff_ms=200"
             " -X alert.retry.max_backoff_ms=2000 -X alert.retry.max_attempts=1000",
             a.port);
    int pid = alerter_start(&w, r.dir, opts);
    insert_findings(&w, "T-OUT", 1, 5);
    for (int i = 0; i < 300 && am_count(&a) < 5; i++)
        usleep(100000);
    ck_assert_int_eq(am_count(&a), 5);

    /* down for 30 s while a finding a second keeps coming */
    ck_assert_int_eq(world_am_services(&a, r.port, "stop"), 0);
    for (int i = 6; i <= 35; i++) {
        insert_findings(&w, "T-OUT", i, i);
        sleep(1);
    }
    ck_assert_int_eq(world_am_services(&a, r.port, "start"), 0);
    /* the 30 new ones retried until taken; the 5 it forgot sent again */
    for (int i = 0; i < 600 && am_count(&a) < 35; i++)
        usleep(100000);
    ck_assert_int_eq(am_count(&a), 35);
    /* 35 notifications, each delivered once; those of the outage after
     * retries. On record once the alerter commits what Alertmanager took
     * (a moment after it shows the alert): asked again for up to 10 s
     * while fewer than 35 are delivered, never past a second delivery. */
    char *d = rows_awaited(w.dsn, "SELECT count(*), count(*) FILTER (WHERE delivered = 1),"
                                  " count(*) FILTER (WHERE retries > 0)"
                                  " FROM (SELECT n.notification_id,"
                                  "  count(*) FILTER (WHERE d.outcome = 'delivered') AS delivered,"
                                  "  count(*) FILTER (WHERE d.outcome = 'retry') AS retries"
                                  "  FROM notifications n LEFT JOIN deliveries d"
                                  "  USING (notification_id) GROUP BY 1) s",
                           "35|35|");
    ck_assert_msg(!strncmp(d, "35|35|", 6) && atoi(d + 6) >= 25, "%s", d);
    free(d);

    kill(pid, SIGTERM);
    world_am_stop(&a);
    world_receiver_stop(&r);
    world_drop(&w);
}
END_TEST

START_TEST(alerts_429_waits_as_long_as_retry_after_asks)
{
    struct world w;
    struct world_receiver r;
    char opts[512];

    demo_world(&w, "retryafter");
    /* each first answer a second late: the claim's second row is sent a
     * second after the claim began, and its retry must still wait 2 s
     * from its own 429, not from the claim */
    world_receiver_start(&r, "retryafter",
                         "--fail-first 1 --fail-status 429 --retry-after 2 --delay-first 1");
    snprintf(opts, sizeof(opts),
             "--drain -X alert.alertmanager.url= -X alert.retry.backoff_ms=10"
             " -X alert.webhook.url=http://127.0.0.1:%d/hook", r.port);
    ck_assert_int_eq(run(&w, w.name, w.name, ALERTER " %s 2> /dev/null", opts), 0);
    /* backoff alone would retry after 10 ms; the receiver asked for 2 s */
    char *d = rows(w.dsn, "SELECT string_agg(outcome || ' ' || http_status, ', '"
                          "  ORDER BY attempt),"
                          " max(attempted_at) - min(attempted_at) >= interval '1900 ms'"
                          " FROM deliveries GROUP BY notification_id");
    ck_assert_str_eq(d, "retry 429, delivered 200|t\nretry 429, delivered 200|t\n");
    free(d);
    world_receiver_stop(&r);
    world_drop(&w);
}
END_TEST

START_TEST(alerts_quiet_finding_ends_in_alertmanager)
{
    struct world w;
    struct world_receiver r;
    struct world_am a;
    char opts[512];

    world_receiver_start(&r, "quiet", "");
    world_am_start(&a, r.port);
    world_init(&w, "quiet");
    ck_assert_int_eq(run(&w, w.name, w.name, CLI " migrate > /dev/null"), 0);
    insert_findings(&w, "T-QUIET", 1, 1);
    /* no new evidence for 10 s: the alert's endsAt is its last update +
     * 10 s (long enough that the drain's start on a loaded machine is
     * well within it) */
    int64_t inserted = st_time_mono_ms();
    snprintf(opts, sizeof(opts),
             "--drain -X alert.alertmanager.url=http://127.0.0.1:%d -X alert.webhook.url="
             " -X alert.quiet_s=10", a.port);
    ck_assert_int_eq(run(&w, w.name, w.name, ALERTER " %s 2> /dev/null", opts), 0);
    int64_t drained = st_time_mono_ms() - inserted;
    ck_assert_msg(am_count(&a) == 1, "not firing %lld ms after the finding",
                  (long long)drained);
    int ended = 0;
    for (int i = 0; i < 300 && !ended; i++) {
        ended = am_count(&a) == 0;
        if (!ended)
            usleep(100000);
    }
    ck_assert_msg(ended, "the quiet finding still fires");
    world_am_stop(&a);
    world_receiver_stop(&r);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return 77;
    Suite *s = suite_create("alerts");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, alerts_outbox_once_per_finding_and_raised_severity);
    tcase_add_test(tc, alerts_triage_records_who_and_queues_the_resolution);
    tcase_add_test(tc, alerts_alertmanager_holds_the_finding_and_routes_it);
    tcase_add_test(tc, alerts_webhook_retries_503_signs_and_fails_4xx_loudly);
    tcase_add_test(tc, alerts_sigkill_mid_delivery_redelivers_with_the_same_id);
    tcase_add_test(tc, alerts_throttle_folds_a_flood_into_digests_naming_every_finding);
    tcase_add_test(tc, alerts_carry_redaction_markers_never_the_secret);
    tcase_add_test(tc, alerts_alertmanager_down_30s_then_every_alert_arrives_once);
    tcase_add_test(tc, alerts_429_waits_as_long_as_retry_after_asks);
    tcase_add_test(tc, alerts_quiet_finding_ends_in_alertmanager);
    suite_add_tcase(s, tc);
    return world_run(s);
}
