/* main.c: the sandtrail command-line tool.
 *
 *   sandtrail migrate                 apply sql/ migrations
 *   sandtrail findings [--run RUN] [--detector NAME] [--json]
 *   sandtrail validate FILE|-         check NDJSON events offline
 *   sandtrail evidence audit|export|verify   tamper-evident store and
 *                                     signed evidence bundles (evidence.h)
 *
 * Settings come from the environment (SANDTRAIL_PG_DSN, SANDTRAIL_SQL_DIR),
 * as printed by scripts/services env. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "evidence.h"
#include "log.h"
#include "pg.h"

#ifndef SANDTRAIL_SQL_DIR
#define SANDTRAIL_SQL_DIR "sql"
#endif

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

static const char *pg_dsn(void)
{
    return env_or("SANDTRAIL_PG_DSN",
                  "host=127.0.0.1 port=15433 user=sandtrail dbname=sandtrail");
}

static void usage(FILE *out)
{
    fprintf(out, "usage: sandtrail migrate\n"
                 "       sandtrail findings [--run RUN] [--detector NAME] [--json]\n"
                 "       sandtrail validate FILE|-\n"
                 "       sandtrail evidence audit|export|verify ...\n");
}

static int cmd_migrate(void)
{
    char errstr[1024];
    int applied = 0;
    PGconn *pg = st_pg_connect(pg_dsn(), errstr, sizeof(errstr));
    if (!pg || st_pg_migrate(pg, env_or("SANDTRAIL_SQL_DIR", SANDTRAIL_SQL_DIR),
                             &applied, errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        PQfinish(pg);
        return 1;
    }
    printf("%d migration(s) applied\n", applied);
    PQfinish(pg);
    return 0;
}

static int cmd_findings(int argc, char **argv)
{
    static const struct option opts[] = {
        {"run", required_argument, NULL, 'r'},
        {"detector", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    const char *run = NULL, *detector = NULL;
    int json = 0, c;
    char errstr[1024];

    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'r': run = optarg; break;
        case 'd': detector = optarg; break;
        case 'j': json = 1; break;
        default: usage(stderr); return 64;
        }
    }
    PGconn *pg = st_pg_connect(pg_dsn(), errstr, sizeof(errstr));
    if (!pg) {
        st_error("%s", errstr);
        return 1;
    }
    const char *params[2] = {run, detector};
    PGresult *res = PQexecParams(
        pg,
        json ? "SELECT row_to_json(f)::text FROM (SELECT finding_id, detector,"
               " severity, task_id, run_id, first_seen, last_seen, event_count,"
               " evidence, summary FROM findings"
               " WHERE ($1::text IS NULL OR run_id = $1)"
               " AND ($2::text IS NULL OR detector = $2)"
               " ORDER BY first_seen, finding_id) f"
             : "SELECT detector, severity, task_id, run_id,"
               " to_char(first_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
               " event_count, summary FROM findings"
               " WHERE ($1::text IS NULL OR run_id = $1)"
               " AND ($2::text IS NULL OR detector = $2)"
               " ORDER BY first_seen, finding_id",
        2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        st_error("could not read findings: %s", PQresultErrorMessage(res));
        PQclear(res);
        PQfinish(pg);
        return 1;
    }
    int rows = PQntuples(res);
    if (json) {
        for (int i = 0; i < rows; i++)
            printf("%s\n", PQgetvalue(res, i, 0));
    } else {
        printf("%-19s %-8s %-12s %-12s %-20s %6s  %s\n", "DETECTOR", "SEVERITY", "TASK",
               "RUN", "FIRST SEEN", "EVENTS", "SUMMARY");
        for (int i = 0; i < rows; i++)
            printf("%-19s %-8s %-12s %-12s %-20s %6s  %s\n", PQgetvalue(res, i, 0),
                   PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3),
                   PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), PQgetvalue(res, i, 6));
        printf("(%d finding%s)\n", rows, rows == 1 ? "" : "s");
    }
    PQclear(res);
    PQfinish(pg);
    return 0;
}

static int cmd_validate(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, bad = 0, good = 0;

    if (!f) {
        st_error("could not open \"%s\"", path);
        return 66;
    }
    while ((len = getline(&line, &cap, f)) >= 0) {
        struct st_event ev;
        struct st_reject rej;
        lineno++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len == 0)
            continue;
        if (st_event_parse(&ev, line, (size_t)len, &rej)) {
            printf("%s:%ld: %s: %s\n", path, lineno, rej.code, rej.msg);
            bad++;
        } else {
            st_event_fini(&ev);
            good++;
        }
    }
    free(line);
    if (f != stdin)
        fclose(f);
    printf("%ld valid, %ld invalid\n", good, bad);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    st_log_init("sandtrail", ST_LOG_INFO);
    if (argc < 2) {
        usage(stderr);
        return 64;
    }
    if (!strcmp(argv[1], "migrate"))
        return cmd_migrate();
    if (!strcmp(argv[1], "findings"))
        return cmd_findings(argc - 1, argv + 1);
    if (!strcmp(argv[1], "evidence"))
        return st_cli_evidence(argc - 1, argv + 1, pg_dsn());
    if (!strcmp(argv[1], "validate") && argc == 3)
        return cmd_validate(argv[2]);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 64;
}
