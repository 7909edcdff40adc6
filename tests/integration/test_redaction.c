/* test_redaction.c: no secret survives the collector.
 *
 * tests/data/canary/ puts a canary and a value of every token shape into
 * every kind of field (content, command, reason, path, headers, nested
 * unknown members, object keys, a broker's identity.credential), through
 * the native and the squid format, and into lines that are rejected. After
 * collector -> Kafka -> analyzer -> PostgreSQL, the raw values must appear
 * nowhere: not in the events or dead-letter topics, not in any row, not in
 * the programs' logs; their markers and fingerprints must. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "world.h"

#define DATA SANDTRAIL_SOURCE_DIR "/tests/data/canary"


START_TEST(redaction_no_secret_survives_the_collector)
{
    struct world w;
    char clog[128], alog[128];
    snprintf(clog, sizeof(clog), "/tmp/st_can_collector_%d.log", (int)getpid());
    snprintf(alog, sizeof(alog), "/tmp/st_can_analyzer_%d.log", (int)getpid());
    world_init(&w, "canary");

    /* 2: two lines are rejected on purpose */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input " DATA "/events.ndjson"
                             " -X redact.canaries_file=" DATA "/canaries.txt 2>%s",
                         clog),
                     1);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input " DATA "/squid.json"
                             " -X input.format=squid -X input.source_name=squid-egress"
                             " -X redact.canaries_file=" DATA "/canaries.txt 2>>%s",
                         clog),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>%s", alog),
                     0);

    int nev, ndlq;
    char *sinks[8];
    sinks[0] = topic_dump(w.topic, &nev);
    sinks[1] = topic_dump(w.dlq, &ndlq);
    sinks[2] = rows(w.dsn, "SELECT body::text, target, reason FROM events");
    sinks[3] = rows(w.dsn, "SELECT * FROM findings");
    sinks[4] = rows(w.dsn, "SELECT * FROM finding_context");
    sinks[5] = world_slurp(clog);
    sinks[6] = world_slurp(alog);
    sinks[7] = rows(w.dsn, "SELECT * FROM finding_events");
    const char *names[] = {"events topic", "dead-letter topic", "events table",
                           "findings table", "finding_context", "collector log",
                           "analyzer log", "finding_events"};
    ck_assert_int_eq(nev, 45);
    ck_assert_int_eq(ndlq, 2);

    char *secrets = world_slurp(DATA "/secrets.txt");
    int nsecrets = 0;
    for (char *line = strtok(secrets, "\n"); line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        ck_assert_ptr_nonnull(tab);
        *tab = '\0';
        const char *rule = line, *value = tab + 1;
        for (int i = 0; i < 8; i++)
            ck_assert_msg(strstr(sinks[i], value) == NULL, "%s value leaked into the %s",
                          rule, names[i]);
        /* and its marker is there instead */
        char marker[96];
        snprintf(marker, sizeof(marker), "[REDACTED:%s:", rule);
        ck_assert_msg(strstr(sinks[0], marker) != NULL, "no %s marker in the events topic",
                      marker);
        nsecrets++;
    }
    ck_assert_int_ge(nsecrets, 14);

    /* the rejected lines reached the dead-letter topic, with reasons, redacted */
    ck_assert_ptr_nonnull(strstr(sinks[1], "\"reason\":\"invalid_json\""));
    ck_assert_ptr_nonnull(strstr(sinks[1], "\"reason\":\"duplicate_key\""));
    ck_assert_ptr_nonnull(strstr(sinks[1], "[REDACTED:canary:"));
    /* the broker's token became a fingerprint, and writing that token -- in
     * the commit, the .env file and the request -- is a critical token_write */
    ck_assert_ptr_nonnull(strstr(sinks[0], "\"credential_fp\":\""));
    ck_assert_ptr_null(strstr(sinks[0], "\"credential\":"));
    char *tw = rows(w.dsn, "SELECT severity, event_count FROM findings"
                           " WHERE detector = 'token_write' AND summary LIKE"
                           " '%a broker issued' AND run_id = 'run-can'");
    ck_assert_str_eq(tw, "critical|3\n");
    free(tw);

    for (int i = 0; i < 8; i++)
        free(sinks[i]);
    free(secrets);
    unlink(clog);
    unlink(alog);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("redaction");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, redaction_no_secret_survives_the_collector);
    suite_add_tcase(s, tc);
    return world_run(s);
}
