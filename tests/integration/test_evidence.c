/* test_evidence.c: the tamper-evident store and evidence bundles (issue 9),
 * against the real services that scripts/services starts. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdlib.h>

#include "buf.h"
#include "world.h"

#define FIXTURE SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson"
#define ANALYZER BIN "/analyzer/sandtrail-analyzer --drain -X batch.max_events=4 -X batch.behind_events=0" \
                     " -X evidence.checkpoint_events=7 2>/dev/null"


#define CLI BIN "/cli/sandtrail"

/* What a command prints (stdout and stderr) and its exit status. */
static char *sh_status(const char *cmd, int *status)
{
    char full[4096], rcfile[] = "/tmp/st-evidence-rc-XXXXXX";
    int fd = mkstemp(rcfile);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(full, sizeof(full), "( %s ) 2>&1; echo $? > %s", cmd, rcfile);
    char *out = world_sh(full);
    char *rc = world_slurp(rcfile);
    *status = atoi(rc);
    free(rc);
    unlink(rcfile);
    return out;
}

/* Runs `sandtrail evidence ...` against w's database. */
static char *evidence(const struct world *w, int *status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static char *evidence(const struct world *w, int *status, const char *fmt, ...)
{
    char args[2048], cmd[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "SANDTRAIL_PG_DSN='%s' " CLI " evidence %s", w->dsn, args);
    return sh_status(cmd, status);
}

static void expect(const char *out, int status, int want, const char *needle)
{
    ck_assert_msg(status == want, "exit %d, not %d: %s", status, want, out);
    ck_assert_msg(strstr(out, needle), "\"%s\" not in: %s", needle, out);
}

static void flip_byte(const char *path)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    ck_assert_int_gt(n, 0);
    fseek(f, n / 2, SEEK_SET);
    int c = fgetc(f);
    fseek(f, n / 2, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
}

static const char *q_checkpoints =
    "SELECT kafka_topic, kafka_partition, seq, first_offset, last_offset, first_index,"
    " tree_size, root, prev_hash, hash, key_id, body, signature,"
    " encode(frontier, 'hex'), encode(leaves, 'hex') FROM evidence_checkpoints"
    " ORDER BY 1, 2, 3";

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
    char env[800], crash[96], replay[96];
    snprintf(env, sizeof(env), "SANDTRAIL_PG_DSN='%s'", other.dsn);
    /* groups and Redis prefixes of the world's name: unique per run, and
     * the prefixes' keys go with world_drop(&w) */
    snprintf(crash, sizeof(crash), "%s_crash", w.name);
    snprintf(replay, sizeof(replay), "%s_replay", w.name);
    ck_assert_int_eq(run(&w, crash, crash,
                         "%s " ANALYZER " -X fault.crash_after_pg_commits=3", env),
                     3);
    ck_assert_int_eq(run(&w, crash, crash,
                         "%s " ANALYZER " -X fault.crash_after_pg_commits=2", env),
                     3);
    ck_assert_int_eq(run(&w, crash, crash, "%s " ANALYZER, env), 0);
    ck_assert_int_eq(run(&w, replay, replay, "%s " ANALYZER, env), 0);

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


static const char *const bundle_files[] = {
    "events.ndjson", "findings.json", "proofs.json", "checkpoints.json", "queries.sql",
    "report.html", "report.md", "manifest.json", "manifest.json.sig", "SHA256SUMS",
    "SHA256SUMS.sig", NULL};

/* The stock-tool recipe, exactly as the README gives it (between the
 * stock-verify markers), run on a bundle folder. */
static int stock_verify(const char *bundle)
{
    char *readme = world_slurp(SANDTRAIL_SOURCE_DIR "/README.md");
    char *a = strstr(readme, "<!-- stock-verify -->"), *code, *end;
    ck_assert_ptr_nonnull(a);
    code = strstr(a, "```sh\n");
    ck_assert_ptr_nonnull(code);
    code += 6;
    end = strstr(code, "```");
    ck_assert_ptr_nonnull(end);
    *end = '\0';
    char script[] = "/tmp/st-evidence-stock-XXXXXX";
    int fd = mkstemp(script);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "set -e\n", 7), 7);
    ck_assert_int_eq(write(fd, code, strlen(code)), (long)strlen(code));
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "BUNDLE='%s' PUBKEY='%s' sh %s", bundle,
             getenv("SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE"), script);
    int status;
    char *out = sh_status(cmd, &status);
    free(out);
    unlink(script);
    free(readme);
    return status;
}

/* Export then verify; every kind of tampering is caught and named, by
 * `sandtrail evidence verify` and by the README's stock commands. */
START_TEST(evidence_bundle_verifies_and_tampering_is_named)
{
    struct world w;
    char dir[128], copy[300], path[400], cmd[4096];
    int st;
    stored(&w, "evbundle");
    snprintf(dir, sizeof(dir), "/tmp/%s.bundle", w.name);
    char *out = evidence(&w, &st, "export --task T-100 --run run-burst --out %s", dir);
    expect(out, st, 0, "exported 14 event(s)");
    free(out);
    out = evidence(&w, &st, "verify %s", dir);
    expect(out, st, 0, "valid: 14 event(s)");
    free(out);
    ck_assert_int_eq(stock_verify(dir), 0);

    /* a byte flipped in any file */
    for (int i = 0; bundle_files[i]; i++) {
        snprintf(copy, sizeof(copy), "%s.t%d", dir, i);
        snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r %s %s", copy, dir, copy);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(path, sizeof(path), "%s/%s", copy, bundle_files[i]);
        flip_byte(path);
        out = evidence(&w, &st, "verify %s", copy);
        const char *named = !strcmp(bundle_files[i], "manifest.json.sig") ? "manifest.json"
                            : !strcmp(bundle_files[i], "SHA256SUMS.sig") ? "SHA256SUMS"
                                                                          : bundle_files[i];
        expect(out, st, 1, named);
        ck_assert_msg(strstr(out, "INVALID"), "%s", out);
        free(out);
        /* the stock route does not read manifest.json.sig (SHA256SUMS.sig
         * signs the same hashes, the manifest's own included) */
        if (strcmp(bundle_files[i], "manifest.json.sig") != 0)
            ck_assert_int_ne(stock_verify(copy), 0);
    }
    /* an event line dropped */
    snprintf(cmd, sizeof(cmd), "rm -rf %s.drop && cp -r %s %s.drop && sed -i 3d %s.drop/events.ndjson",
             dir, dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(copy, sizeof(copy), "%s.drop", dir);
    out = evidence(&w, &st, "verify %s", copy);
    expect(out, st, 1, "events.ndjson");
    free(out);
    ck_assert_int_ne(stock_verify(copy), 0);
    /* an event of another run swapped in */
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s.swap && cp -r %s %s.swap && other=$(grep -v run-burst %s | head -1)"
             " && awk -v o=\"$other\" 'NR==2{print o; next} {print}' %s/events.ndjson"
             " > %s.swap/events.ndjson",
             dir, dir, dir, FIXTURE, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(copy, sizeof(copy), "%s.swap", dir);
    out = evidence(&w, &st, "verify %s", copy);
    expect(out, st, 1, "events.ndjson");
    free(out);
    ck_assert_int_ne(stock_verify(copy), 0);
    /* a wrong public key */
    snprintf(cmd, sizeof(cmd),
             "openssl genpkey -algorithm ed25519 -out %s.other.key 2>/dev/null &&"
             " openssl pkey -in %s.other.key -pubout -out %s.other.pub",
             dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    out = evidence(&w, &st, "verify %s --pubkey %s.other.pub", dir, dir);
    expect(out, st, 1, "not a trusted key");
    free(out);
    /* several trusted keys, matched by id */
    out = evidence(&w, &st, "verify %s --pubkey %s.other.pub:%s", dir, dir,
                   getenv("SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE"));
    expect(out, st, 0, "valid");
    free(out);
    /* the archive form */
    out = evidence(&w, &st, "export --task T-100 --run run-burst --archive %s.tar.gz", dir);
    expect(out, st, 0, "exported");
    free(out);
    out = evidence(&w, &st, "verify %s.tar.gz", dir);
    expect(out, st, 0, "valid: 14 event(s)");
    free(out);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s.* ", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

/* The deeper checks, for a bundle whose files and manifest were rewritten
 * and re-signed with the real key (an exporter that lies): a dropped
 * event breaks completeness, another run's event is out of scope, a
 * changed proof step or checkpoint body fails its check. */
START_TEST(evidence_verify_checks_proofs_and_completeness)
{
    struct world w;
    char dir[128], cmd[4096];
    int st;
    stored(&w, "evdeep");
    snprintf(dir, sizeof(dir), "/tmp/%s.bundle", w.name);
    char *out = evidence(&w, &st, "export --task T-100 --run run-burst --out %s", dir);
    expect(out, st, 0, "exported");
    free(out);
    const char *resign = SANDTRAIL_SOURCE_DIR "/tests/integration/evidence_resign.py";
    /* drop the last event and its proof */
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s.d && cp -r %s %s.d && python3 %s drop %s.d %s", dir, dir, dir, resign,
             dir, getenv("SANDTRAIL_EVIDENCE_KEY_FILE"));
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s.d", dir);
    out = evidence(&w, &st, "verify %s", cmd);
    expect(out, st, 1, "event(s) of the bundle's runs, the bundle holds");
    free(out);
    /* another run's event in place of one of ours */
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s.s && cp -r %s %s.s && python3 %s swap %s.s %s %s", dir, dir, dir,
             resign, dir, getenv("SANDTRAIL_EVIDENCE_KEY_FILE"), FIXTURE);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s.s", dir);
    out = evidence(&w, &st, "verify %s", cmd);
    expect(out, st, 1, "not an event of the bundle's task and runs");
    free(out);
    /* a proof path step changed */
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s.p && cp -r %s %s.p && python3 %s proof %s.p %s", dir, dir, dir,
             resign, dir, getenv("SANDTRAIL_EVIDENCE_KEY_FILE"));
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s.p", dir);
    out = evidence(&w, &st, "verify %s", cmd);
    expect(out, st, 1, "inclusion proof");
    free(out);
    /* a checkpoint's signed body changed */
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s.c && cp -r %s %s.c && python3 %s checkpoint %s.c %s", dir, dir, dir,
             resign, dir, getenv("SANDTRAIL_EVIDENCE_KEY_FILE"));
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s.c", dir);
    out = evidence(&w, &st, "verify %s", cmd);
    expect(out, st, 1, "its signature does not verify");
    ck_assert_msg(strstr(out, "checkpoint "), "%s", out);
    free(out);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s.*", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

/* UPDATE and DELETE of stored events are named by the audit, and export
 * refuses the run unless --force, which the report's first line says. */
START_TEST(evidence_audit_names_altered_and_deleted_rows)
{
    struct world w;
    char dir[128];
    int st;
    stored(&w, "evaudit");
    /* the same events delivered again: duplicates, not gaps */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input %s 2>/dev/null", FIXTURE),
                     1);
    ck_assert_int_eq(run(&w, w.name, w.name, ANALYZER), 0);
    char *out = evidence(&w, &st, "audit");
    expect(out, st, 0, "intact");
    free(out);
    char *n = rows(w.dsn, "SELECT count(*) FROM evidence_skips WHERE reason = 'duplicate'");
    ck_assert_str_eq(n, "40\n");
    free(n);

    free(rows(w.dsn, "UPDATE events SET body = jsonb_set(body, '{attrs,host}',"
                     " '\"innocent.example\"') WHERE event_id = 'sq-103' RETURNING 1"));
    out = evidence(&w, &st, "audit");
    expect(out, st, 1, "altered: event \"sq-103\"");
    ck_assert_msg(strstr(out, "body does not match"), "%s", out);
    free(out);
    free(rows(w.dsn, "UPDATE events SET target = 'innocent.example'"
                     " WHERE event_id = 'sq-104' RETURNING 1"));
    free(rows(w.dsn, "DELETE FROM events WHERE event_id = 'sq-106' RETURNING 1"));
    out = evidence(&w, &st, "audit");
    expect(out, st, 1, "altered: event \"sq-104\"");
    ck_assert_msg(strstr(out, "target does not match"), "%s", out);
    ck_assert_msg(strstr(out, "gap: "), "%s", out);
    free(out);
    /* the stored bytes, the jsonb and the columns changed together */
    free(rows(w.dsn, "UPDATE events SET raw = replace(raw, 'pastebin.', 'pastebim.'),"
                     " body = replace(raw, 'pastebin.', 'pastebim.')::jsonb,"
                     " target = replace(target, 'pastebin.', 'pastebim.')"
                     " WHERE event_id = 'sq-105' RETURNING 1"));
    out = evidence(&w, &st, "audit");
    expect(out, st, 1, "altered: event \"sq-105\"");
    ck_assert_msg(strstr(out, "are not those signed"), "%s", out);
    free(out);
    free(rows(w.dsn, "INSERT INTO events (source_name, event_id, source_kind,"
                     " source_platform, ts, task_id, run_id, trace_id, type, decision,"
                     " reason, target, body, kafka_topic, kafka_partition, kafka_offset,"
                     " ingested_at, raw) SELECT source_name, 'sq-999', source_kind,"
                     " source_platform, ts, task_id, run_id, trace_id, type, decision,"
                     " reason, target, body, kafka_topic, kafka_partition, 1000,"
                     " ingested_at, raw FROM events WHERE event_id = 'sq-107' RETURNING 1"));
    out = evidence(&w, &st, "audit");
    expect(out, st, 1, "added after the fact: event \"sq-999\"");
    free(out);
    /* a mark of rows stored ahead of their evidence (sql/010) covers only
     * the offsets below it, and only so far past the evidence */
    free(rows(w.dsn, "INSERT INTO events_ahead SELECT kafka_topic, kafka_partition, 1000"
                     " FROM events WHERE event_id = 'sq-107' RETURNING 1"));
    out = evidence(&w, &st, "audit");
    expect(out, st, 1, "added after the fact: event \"sq-999\"");
    ck_assert_msg(!strstr(out, "stored ahead"), "%s", out);
    free(out);
    free(rows(w.dsn, "UPDATE events_ahead SET below = 1001 RETURNING 1"));
    out = evidence(&w, &st, "audit");
    expect(out, st, 1, "stored ahead of their evidence: 1 row(s)");
    ck_assert_msg(!strstr(out, "added after the fact: event \"sq-999\""), "%s", out);
    free(out);
    free(rows(w.dsn, "UPDATE events_ahead SET below = 100000000 RETURNING 1"));
    out = evidence(&w, &st, "audit");
    expect(out, st, 1, "added after the fact: event \"sq-999\"");
    ck_assert_msg(strstr(out, "no batch stores that far ahead"), "%s", out);
    free(out);
    free(rows(w.dsn, "DELETE FROM events_ahead RETURNING 1"));

    snprintf(dir, sizeof(dir), "/tmp/%s.bundle", w.name);
    out = evidence(&w, &st, "export --task T-100 --run run-burst --out %s", dir);
    expect(out, st, 1, "refusing to export");
    free(out);
    out = evidence(&w, &st, "export --task T-100 --run run-burst --out %s --force", dir);
    expect(out, st, 0, "FORCED");
    free(out);
    char path[300];
    snprintf(path, sizeof(path), "%s/report.md", dir);
    char *md = world_slurp(path);
    ck_assert_msg(!strncmp(md, "**FORCED EXPORT", 15), "%.200s", md);
    free(md);
    snprintf(path, sizeof(path), "rm -rf %s", dir);
    ck_assert_int_eq(system(path), 0);
    world_drop(&w);
}
END_TEST

/* No canary and no token-shaped value of the test secrets in any file of
 * a bundle of the canary run; the redactions show by rule and fingerprint. */
START_TEST(evidence_bundle_holds_no_secret)
{
    struct world w;
    char dir[128], cmd[4096];
    int st;
    world_init(&w, "evcanary");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input " SANDTRAIL_SOURCE_DIR
                             "/tests/data/canary/events.ndjson -X redact.canaries_file="
                             SANDTRAIL_SOURCE_DIR "/tests/data/canary/canaries.txt"
                             " 2>/dev/null"),
                     1); /* some lines are refused, and dead-lettered */
    ck_assert_int_eq(run(&w, w.name, w.name, ANALYZER), 0);
    snprintf(dir, sizeof(dir), "/tmp/%s.bundle", w.name);
    char *out = evidence(&w, &st, "export --task T-CAN --run run-can --out %s", dir);
    expect(out, st, 0, "exported");
    free(out);
    /* every secret value (second column of secrets.txt) */
    snprintf(cmd, sizeof(cmd),
             "cut -f2 " SANDTRAIL_SOURCE_DIR "/tests/data/canary/secrets.txt | grep -v '^#'"
             " | grep . > %s.needles && grep -c . %s.needles && grep -rlF -f %s.needles %s;"
             " true",
             dir, dir, dir, dir);
    out = world_sh(cmd);
    ck_assert_msg(atoi(out) >= 10, "%s", out);
    ck_assert_msg(strchr(out, '/') == NULL, "a secret in the bundle: %s", out);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s/report.md", dir);
    char *md = world_slurp(cmd);
    ck_assert_msg(strstr(md, "## Redactions") && strstr(md, "canary"), "%s", md);
    free(md);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s.needles", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

/* report.html renders in Debian's headless Chromium (no network needed). */
START_TEST(evidence_report_renders_in_chromium)
{
    struct world w;
    char dir[128], cmd[4096];
    int st;
    stored(&w, "evchrome");
    snprintf(dir, sizeof(dir), "/tmp/%s.bundle", w.name);
    char *out = evidence(&w, &st, "export --task T-100 --run run-burst --out %s", dir);
    expect(out, st, 0, "exported");
    free(out);
    snprintf(cmd, sizeof(cmd),
             "timeout 120 chromium --headless --no-sandbox --disable-gpu"
             " --user-data-dir=%s/chromium"
             " --no-first-run --disable-extensions --dump-dom file://%s/report.html"
             " 2>/dev/null",
             dir, dir);
    out = world_sh(cmd);
    ck_assert_msg(strstr(out, "<h1>Evidence: task T-100</h1>") &&
                      strstr(out, "paste.example.net:443"),
                  "chromium did not render the report: %.300s", out);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "cd %s && timeout 120 chromium --headless --no-sandbox --disable-gpu"
             " --user-data-dir=%s/chromium"
             " --no-first-run --window-size=1200,1400 --screenshot=%s/shot.png"
             " file://%s/report.html >/dev/null 2>&1; test -s %s/shot.png",
             dir, dir, dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
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
    tcase_add_test(tc, evidence_bundle_verifies_and_tampering_is_named);
    tcase_add_test(tc, evidence_verify_checks_proofs_and_completeness);
    tcase_add_test(tc, evidence_audit_names_altered_and_deleted_rows);
    tcase_add_test(tc, evidence_bundle_holds_no_secret);
    tcase_add_test(tc, evidence_report_renders_in_chromium);
    suite_add_tcase(s, tc);
    return world_run(s);
}
