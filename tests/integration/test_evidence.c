/* test_evidence.c: the tamper-evident store and evidence bundles (issue 9),
 * against the real services that scripts/services starts. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "world.h"

#define FIXTURE SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson"
#define ANALYZER BIN "/analyzer/sandtrail-analyzer --drain -X batch.max_events=4" \
                     " -X evidence.checkpoint_events=7 2>/dev/null"

static const char *q_checkpoints =
    "SELECT kafka_topic, kafka_partition, seq, first_offset, last_offset, first_index,"
    " tree_size, root, prev_hash, hash, key_id, body, signature,"
    " encode(frontier, 'hex') FROM evidence_checkpoints ORDER BY 1, 2, 3";

/* A world whose topic holds the demo run, drained once into its database. */
static void stored(struct world *w, const char *tag)
{
    world_init(w, tag);
    ck_assert_int_eq(run(w, w->name, w->name,
                         BIN "/collector/sandtrail-collector --input %s 2>/dev/null",
                         FIXTURE),
                     1); /* one malformed line */
    ck_assert_int_eq(run(w, w->name, w->name, ANALYZER), 0);
}

/* The same topic drained into a second database by an analyzer that
 * crashes twice after a PostgreSQL commit (before the Kafka commit), and
 * then replayed from offset 0 by a new consumer group: the checkpoints are
 * those of the clean run, byte for byte, signatures included. */
START_TEST(evidence_checkpoints_survive_crash_and_replay)
{
    struct world w, other;
    stored(&w, "evcrash");
    world_init(&other, "evcrash2");
    char env[800];
    snprintf(env, sizeof(env), "SANDTRAIL_PG_DSN='%s'", other.dsn);
    ck_assert_int_eq(run(&w, "g-crash", "p-crash",
                         "%s " ANALYZER " -X fault.crash_after_pg_commits=3", env),
                     3);
    ck_assert_int_eq(run(&w, "g-crash", "p-crash",
                         "%s " ANALYZER " -X fault.crash_after_pg_commits=2", env),
                     3);
    ck_assert_int_eq(run(&w, "g-crash", "p-crash", "%s " ANALYZER, env), 0);
    ck_assert_int_eq(run(&w, "g-replay", "p-replay", "%s " ANALYZER, env), 0);

    char *a = rows(w.dsn, q_checkpoints), *b = rows(other.dsn, q_checkpoints);
    ck_assert_msg(strlen(a) > 0, "no checkpoints were written");
    ck_assert_str_eq(a, b);
    /* 40 events and the seal at the end of the drain: every offset covered */
    char *n = rows(w.dsn, "SELECT sum(tree_size - first_index), count(*) > 5"
                          " FROM evidence_checkpoints");
    ck_assert_str_eq(n, "40|t\n");
    free(n);
    free(a);
    free(b);
    world_drop(&w);
    world_drop(&other);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("evidence");
    TCase *tc = tcase_create("evidence");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, evidence_checkpoints_survive_crash_and_replay);
    suite_add_tcase(s, tc);
    return world_run(s);
}
