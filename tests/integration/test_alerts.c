/* test_alerts.c: on-call alerts, against the real PostgreSQL (and, for the
 * alerter, the real Alertmanager that scripts/services starts).
 *
 * The outbox (analyzer/sinks/outbox.c) writes one notification per finding
 * created and per severity it rises to, in the batch transaction; triage
 * (sandtrail_triage through `sandtrail findings ...`) records who changed
 * a finding and queues the notification that ends its alert. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "world.h"

#define FIXTURE SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson"
#define CLI BIN "/cli/sandtrail"
#define ANALYZER BIN "/analyzer/sandtrail-analyzer --drain"

static const char *q_notifications =
    "SELECT f.detector, n.kind, n.severity, n.task_id,"
    " n.delivery_id = n.finding_id || '.' || n.kind || '.' || n.severity"
    " FROM notifications n JOIN findings f USING (finding_id)"
    " ORDER BY n.kind <> 'created', f.detector, n.notification_id";

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

int main(void)
{
    if (world_setup())
        return 77;
    Suite *s = suite_create("alerts");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, alerts_outbox_once_per_finding_and_raised_severity);
    tcase_add_test(tc, alerts_triage_records_who_and_queues_the_resolution);
    suite_add_tcase(s, tc);
    return world_run(s);
}
