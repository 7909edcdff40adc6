/* retention.c: `sandtrail retention [--keep-days N] [--dry-run]`.
 *
 * Events are partitioned by UTC day of event time (sql/005_partitions.sql).
 * Retention drops every day partition older than the horizon (today minus
 * N days, at 00:00 UTC) whole, deletes the few stragglers of removed days
 * from the default partition, and records what it removed -- the horizon,
 * the partitions, the number of events and, per Kafka partition, their
 * offsets -- in retention_runs, and for the evidence store, per checkpoint,
 * the offsets and per-run counts it removed (evidence_pruned, so that
 * `sandtrail evidence audit` of what remains still passes), all in one
 * transaction. Findings are kept.
 * Runs as the migrations' owner (it drops tables). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pg.h"
#include "retention.h"

/* The partitions wholly before the horizon, with their events. */
static const char *sql_plan =
    "WITH h AS (SELECT (date_trunc('day', now() AT TIME ZONE 'UTC')"
    "                   - make_interval(days => $1::int)) AT TIME ZONE 'UTC' AS horizon),"
    " parts AS (SELECT c.relname FROM pg_inherits i"
    "   JOIN pg_class c ON c.oid = i.inhrelid"
    "   WHERE i.inhparent = 'events'::regclass AND c.relname ~ '^events_[0-9]{8}$'"
    "     AND (to_date(substr(c.relname, 8), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC')"
    "         + interval '1 day' <= (SELECT horizon FROM h))"
    " SELECT (SELECT horizon FROM h), coalesce(array_agg(relname ORDER BY relname), '{}')"
    " FROM parts";

/* Per Kafka partition, what is about to go: the day partitions named in $1
 * and the default partition's rows before the horizon $2. */
static const char *sql_offsets =
    "SELECT coalesce(jsonb_agg(jsonb_build_object('topic', kafka_topic,"
    "   'partition', kafka_partition, 'min', lo, 'max', hi, 'events', n)"
    "   ORDER BY kafka_topic, kafka_partition), '[]'), coalesce(sum(n), 0)"
    " FROM (SELECT kafka_topic, kafka_partition, min(kafka_offset) lo,"
    "   max(kafka_offset) hi, count(*) n FROM events"
    "   WHERE ts < $2::timestamptz"
    "     AND (tableoid::regclass::text = ANY ($1::text[])"
    "          OR tableoid = 'events_expired'::regclass)"
    "   GROUP BY 1, 2) s";

static const char *sql_record =
    "INSERT INTO retention_runs (keep_days, horizon, partitions, events, offsets)"
    " VALUES ($1, $2, $3, $4, $5) RETURNING run_id";

/* Before the rows go: per evidence checkpoint, the offsets removed and how
 * many of each run ($1 the retention run, $2 the horizon, $3 the day
 * partitions), so that audit still checks the checkpoint
 * (sql/007_retention_evidence.sql). */
static const char *sql_pruned =
    "WITH gone AS (SELECT e.kafka_topic, e.kafka_partition, e.kafka_offset, e.task_id,"
    "   e.run_id, c.seq FROM events e JOIN evidence_checkpoints c"
    "   ON c.kafka_topic = e.kafka_topic AND c.kafka_partition = e.kafka_partition"
    "  AND e.kafka_offset BETWEEN c.first_offset AND c.last_offset"
    "  WHERE e.ts < $2::timestamptz AND (e.tableoid::regclass::text = ANY ($3::text[])"
    "    OR e.tableoid = 'events_expired'::regclass)"
    /* a replayed straggler of an offset an earlier run recorded: once */
    "    AND NOT EXISTS (SELECT 1 FROM evidence_pruned p WHERE p.kafka_topic ="
    "      e.kafka_topic AND p.kafka_partition = e.kafka_partition AND p.seq = c.seq"
    "      AND e.kafka_offset = ANY (p.offsets))),"
    " per_run AS (SELECT kafka_topic, kafka_partition, seq,"
    "   jsonb_agg(jsonb_build_array(task_id, run_id, n) ORDER BY task_id, run_id) AS runs"
    "   FROM (SELECT kafka_topic, kafka_partition, seq, task_id, run_id, count(*) AS n"
    "         FROM gone GROUP BY 1, 2, 3, 4, 5) r GROUP BY 1, 2, 3),"
    " offs AS (SELECT kafka_topic, kafka_partition, seq,"
    "   array_agg(kafka_offset ORDER BY kafka_offset) AS offsets FROM gone GROUP BY 1, 2, 3)"
    " INSERT INTO evidence_pruned (retention_run, kafka_topic, kafka_partition, seq,"
    "   offsets, runs)"
    " SELECT $1, o.kafka_topic, o.kafka_partition, o.seq, o.offsets, p.runs"
    " FROM offs o JOIN per_run p USING (kafka_topic, kafka_partition, seq)";

static int fail(PGconn *pg, const char *what)
{
    st_error("retention: %s: %s", what, PQerrorMessage(pg));
    PQclear(PQexec(pg, "ROLLBACK"));
    PQfinish(pg);
    return 1;
}

int st_cli_retention(const char *dsn, int argc, char **argv)
{
    static const struct option opts[] = {
        {"keep-days", required_argument, NULL, 'k'},
        {"dry-run", no_argument, NULL, 'n'},
        {NULL, 0, NULL, 0},
    };
    const char *env = getenv("SANDTRAIL_RETENTION_KEEP_DAYS");
    long keep = env && *env ? strtol(env, NULL, 10) : 90;
    int dry = 0, c;
    char errstr[1024], keep_s[24];

    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'k': keep = strtol(optarg, NULL, 10); break;
        case 'n': dry = 1; break;
        default: return 64;
        }
    }
    if (keep < 1 || keep > 36500) {
        st_error("retention: --keep-days must be between 1 and 36500");
        return 64;
    }
    PGconn *pg = st_pg_connect(dsn, errstr, sizeof(errstr));
    if (!pg) {
        st_error("%s", errstr);
        return 1;
    }
    snprintf(keep_s, sizeof(keep_s), "%ld", keep);
    PGresult *r = PQexec(pg, "BEGIN");
    PQclear(r);
    /* one retention at a time; the analyzer's inserts wait only while a
     * partition is detached */
    PQclear(PQexec(pg, "SELECT pg_advisory_xact_lock(hashtext('sandtrail_retention'))"));
    const char *p1[1] = {keep_s};
    r = PQexecParams(pg, sql_plan, 1, NULL, p1, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        return fail(pg, "could not plan");
    }
    char *horizon = st_strdup(PQgetvalue(r, 0, 0));
    char *parts = st_strdup(PQgetvalue(r, 0, 1));
    PQclear(r);
    const char *p2[2] = {parts, horizon};
    r = PQexecParams(pg, sql_offsets, 2, NULL, p2, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        free(horizon);
        free(parts);
        return fail(pg, "could not count the events to remove");
    }
    char *offsets = st_strdup(PQgetvalue(r, 0, 0));
    char *count = st_strdup(PQgetvalue(r, 0, 1));
    PQclear(r);

    int status = 0;
    if (!dry) {
        /* the record first: the evidence rows name it */
        const char *p4[5] = {keep_s, horizon, parts, count, offsets};
        char run_id[24] = "";
        r = PQexecParams(pg, sql_record, 5, NULL, p4, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            st_error("retention: could not record the run: %s", PQresultErrorMessage(r));
            status = 1;
        } else {
            snprintf(run_id, sizeof(run_id), "%s", PQgetvalue(r, 0, 0));
        }
        PQclear(r);
        if (!status) {
            r = PQexec(pg, "SELECT to_regclass('evidence_pruned') IS NOT NULL");
            int evidence = PQresultStatus(r) == PGRES_TUPLES_OK &&
                           strcmp(PQgetvalue(r, 0, 0), "t") == 0;
            PQclear(r);
            const char *p5[3] = {run_id, horizon, parts};
            if (evidence) {
                r = PQexecParams(pg, sql_pruned, 3, NULL, p5, NULL, NULL, 0);
                if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                    st_error("retention: could not record the evidence it removes: %s",
                             PQresultErrorMessage(r));
                    status = 1;
                }
                PQclear(r);
            }
        }
        /* drop each whole day: no row is deleted one by one */
        PGresult *pr = PQexecParams(pg, "SELECT unnest($1::text[])", 1, NULL,
                                    (const char *[]){parts}, NULL, NULL, 0);
        for (int i = 0; !status && PQresultStatus(pr) == PGRES_TUPLES_OK &&
                        i < PQntuples(pr);
             i++) {
            char *ident = PQescapeIdentifier(pg, PQgetvalue(pr, i, 0),
                                             strlen(PQgetvalue(pr, i, 0)));
            char sql[256];
            snprintf(sql, sizeof(sql), "DROP TABLE %s", ident);
            PQfreemem(ident);
            if (st_pg_exec(pg, sql, errstr, sizeof(errstr))) {
                st_error("retention: could not drop a partition: %s", errstr);
                status = 1;
            }
        }
        PQclear(pr);
        const char *p3[1] = {horizon};
        if (!status) {
            r = PQexecParams(pg, "DELETE FROM events_expired WHERE ts < $1", 1, NULL, p3,
                             NULL, NULL, 0);
            if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                st_error("retention: %s", PQresultErrorMessage(r));
                status = 1;
            }
            PQclear(r);
        }
    }
    if (status || st_pg_exec(pg, dry ? "ROLLBACK" : "COMMIT", errstr, sizeof(errstr))) {
        if (!status)
            st_error("retention: could not commit: %s", errstr);
        PQclear(PQexec(pg, "ROLLBACK"));
        status = 1;
    } else {
        printf("retention: keep %ld days, horizon %s\n", keep, horizon);
        printf("%s %s event(s) in %s partition(s) %s\n", dry ? "would remove" : "removed",
               count, strcmp(parts, "{}") ? "day" : "no day", parts);
        printf("by Kafka partition: %s\n", offsets);
    }
    free(horizon);
    free(parts);
    free(offsets);
    free(count);
    PQfinish(pg);
    return status;
}
