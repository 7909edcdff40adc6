/* test_detectors.c: every detector against the real Kafka, Redis and
 * PostgreSQL, one scenario file each.
 *
 * tests/data/scenarios/NAME.ndjson holds a scenario -- runs that must fire
 * and benign runs that come close -- and NAME.expected the findings it must
 * give, as `detector|severity|task|run|event_count|summary` lines. Each
 * scenario is also replayed shuffled within the allowed lateness, and must
 * then give the identical findings table, ids and evidence included
 * (scenarios named agg_*, aggregates across tasks and so across
 * partitions, only the same findings). */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "event.h"
#include "world.h"

#define SCENARIOS SANDTRAIL_SOURCE_DIR "/tests/data/scenarios"
#define LATENESS_US (30LL * 1000000)

static const char *q_expected =
    "SELECT detector, severity, task_id, run_id, event_count, summary"
    " FROM findings ORDER BY detector, run_id, summary";
static const char *q_full =
    "SELECT finding_id, detector, detector_version, config_hash, severity, task_id,"
    " run_id, first_seen, last_seen, event_count, late_event_count, evidence::text,"
    " summary FROM findings ORDER BY finding_id";


struct line {
    char *text;
    int64_t key;
};

static int cmp_key(const void *a, const void *b)
{
    const struct line *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Writes the scenario to path shuffled: each event moves by a random
 * delay below half the lateness, so none arrives after the watermark has
 * passed it. */
static void shuffle_within_lateness(const char *src, const char *path, unsigned seed)
{
    char *data = world_slurp(src);
    struct line *l = NULL;
    size_t n = 0;
    srand(seed);
    for (char *s = strtok(data, "\n"); s; s = strtok(NULL, "\n")) {
        struct st_event ev;
        struct st_reject rej;
        ck_assert_msg(st_event_parse(&ev, s, strlen(s), &rej) == 0, "%s: %s", src,
                      rej.msg);
        l = realloc(l, (n + 1) * sizeof(*l));
        l[n].text = s;
        l[n].key = ev.ts_us + (int64_t)((double)rand() / RAND_MAX * (LATENESS_US / 2 - 1));
        st_event_fini(&ev);
        n++;
    }
    qsort(l, n, sizeof(*l), cmp_key);
    FILE *f = fopen(path, "w");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s\n", l[i].text);
    fclose(f);
    free(l);
    free(data);
}

static char *feed_and_drain(struct world *w, const char *input)
{
    ck_assert_int_eq(run(w, w->name, w->name,
                         BIN "/collector/sandtrail-collector --input %s", input),
                     0);
    ck_assert_int_eq(run(w, w->name, w->name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=16 -X batch.behind_events=0"),
                     0);
    return rows(w->dsn, q_full);
}

static int scenario_count;
static char scenario_names[32][64];

static void find_scenarios(void)
{
    DIR *d = opendir(SCENARIOS);
    struct dirent *de;
    if (!d)
        return;
    while ((de = readdir(d)) && scenario_count < 32) {
        size_t len = strlen(de->d_name);
        if (len > 9 && strcmp(de->d_name + len - 9, ".expected") == 0)
            snprintf(scenario_names[scenario_count++], 64, "%.*s", (int)(len - 9),
                     de->d_name);
    }
    closedir(d);
}

START_TEST(detector_scenario_gives_expected_findings_in_any_order)
{
    const char *name = scenario_names[_i];
    char input[512], expected_path[512], shuffled[512];
    struct world inorder, mixed;

    snprintf(input, sizeof(input), "%s/%s.ndjson", SCENARIOS, name);
    snprintf(expected_path, sizeof(expected_path), "%s/%s.expected", SCENARIOS, name);
    world_init(&inorder, "sc");
    char *full_inorder = feed_and_drain(&inorder, input);
    char *got = rows(inorder.dsn, q_expected);
    char *want = world_slurp(expected_path);
    ck_assert_msg(strcmp(got, want) == 0, "scenario %s\n--- want\n%s--- got\n%s", name,
                  want, got);

    snprintf(shuffled, sizeof(shuffled), "/tmp/st_%s_%d.ndjson", name, (int)getpid());
    shuffle_within_lateness(input, shuffled, 42u + (unsigned)_i);
    world_init(&mixed, "mx");
    char *full_mixed = feed_and_drain(&mixed, shuffled);
    if (strncmp(name, "agg_", 4) == 0) {
        /* aggregates across tasks span partitions, whose relative order no
         * one fixes: the findings must agree, their evidence may differ */
        free(full_inorder);
        free(full_mixed);
        full_inorder = rows(inorder.dsn, q_expected);
        full_mixed = rows(mixed.dsn, q_expected);
    }
    ck_assert_msg(strcmp(full_inorder, full_mixed) == 0,
                  "scenario %s shuffled within the lateness differs\n--- in order\n%s"
                  "--- shuffled\n%s",
                  name, full_inorder, full_mixed);
    unlink(shuffled);
    free(full_inorder);
    free(full_mixed);
    free(got);
    free(want);
    world_drop(&inorder);
    world_drop(&mixed);
}
END_TEST

/* The lines of an expected file whose detector is det. */
static char *expected_of(const char *name, const char *det)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s.expected", SCENARIOS, name);
    char *all = world_slurp(path);
    struct st_buf out;
    st_buf_init(&out);
    st_buf_adds(&out, "");
    size_t dl = strlen(det);
    for (char *l = all; *l;) {
        char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) + 1 : strlen(l);
        if (!strncmp(l, det, dl) && l[dl] == '|')
            st_buf_add(&out, l, len);
        l += len;
    }
    free(all);
    return out.data;
}

/* detect.enabled: the denial_burst scenario, whose events also make a
 * retry_across_paths finding, drained with one detector at a time gives
 * that detector's findings of the scenario and no other, and Redis holds
 * the state of that detector only; a name no detector has, or none, is
 * refused at start (78) with the names there are. */
START_TEST(detect_enabled_runs_only_the_detectors_named)
{
    static const char *const dets[] = {"denial_burst", "retry_across_paths"};
    char input[512];
    snprintf(input, sizeof(input), "%s/denial_burst.ndjson", SCENARIOS);
    for (int i = 0; i < 2; i++) {
        struct world w;
        world_init(&w, i ? "enb" : "ena");
        ck_assert_int_eq(run(&w, w.name, w.name,
                             BIN "/collector/sandtrail-collector --input %s", input),
                         0);
        ck_assert_int_eq(run(&w, w.name, w.name,
                             BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                                 " -X batch.max_events=16 -X batch.behind_events=0"
                                 " -X 'detect.enabled= %s '",
                             dets[i]),
                         0);
        char *got = rows(w.dsn, q_expected), *want = expected_of("denial_burst", dets[i]);
        ck_assert_msg(strlen(want) > 0, "no %s line in denial_burst.expected", dets[i]);
        ck_assert_msg(!strcmp(got, want), "detect.enabled=%s\n--- want\n%s--- got\n%s",
                      dets[i], want, got);
        /* every detector's field of a run ends in its name */
        char *fields = world_shf(
            "u=\"$SANDTRAIL_REDIS_URL\"; for k in $(redis-cli -u \"$u\" --scan --pattern "
            "'%s:run:b:*'); do redis-cli -u \"$u\" hkeys \"$k\"; done | sed 's/.*://' | "
            "sort -u",
            w.name);
        char want_fields[64];
        snprintf(want_fields, sizeof(want_fields), "%s\n", dets[i]);
        ck_assert_str_eq(fields, want_fields);
        free(fields);
        free(got);
        free(want);
        world_drop(&w);
    }
    char *out = world_sh(BIN "/analyzer/sandtrail-analyzer -X detect.enabled=denial_burst,nope"
                             " 2>&1; echo $?");
    ck_assert_msg(strstr(out, "no detector is named \"nope\"") &&
                      strstr(out, "private_destination") && strstr(out, "\n78\n"),
                  "%s", out);
    free(out);
    out = world_sh(BIN "/analyzer/sandtrail-analyzer -X detect.enabled=, 2>&1; echo $?");
    ck_assert_msg(strstr(out, "names no detector") && strstr(out, "\n78\n"), "%s", out);
    free(out);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    find_scenarios();
    if (scenario_count == 0) {
        fprintf(stderr, "no scenarios in %s\n", SCENARIOS);
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("detectors");
    TCase *tc = tcase_create("scenarios");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, detector_scenario_gives_expected_findings_in_any_order, 0,
                        scenario_count);
    suite_add_tcase(s, tc);
    TCase *en = tcase_create("enabled");
    tcase_set_timeout(en, 120);
    tcase_add_test(en, detect_enabled_runs_only_the_detectors_named);
    suite_add_tcase(s, en);
    return world_run(s);
}
