/* main.c: the sandtrail command-line tool.
 *
 *   sandtrail migrate                 apply sql/ migrations
 *   sandtrail findings [--run RUN] [--detector NAME] [--json]
 *   sandtrail findings ack|resolve|dismiss ID --by NAME [--note TEXT]
 *   sandtrail alerts [--failed] [--finding ID]   deliveries of notifications
 *   sandtrail alerts retry ID                    send a failed one again
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

#include "buf.h"
#include "escape.h"
#include "event.h"
#include "evidence.h"
#include "log.h"
#include "pg.h"
#include "retention.h"

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

/* Everything printed that came from data (findings, events, error texts)
 * goes through here: its control characters are written as escapes, so a
 * summary holding ESC sequences cannot drive the terminal. The result is
 * valid until the next call with the same slot (0..7). */
static const char *safe(int slot, const char *s, int json)
{
    static struct st_buf bufs[8];
    struct st_buf *b = &bufs[slot];

    st_buf_reset(b);
    st_escape_ctl(b, s, strlen(s), json);
    st_buf_addc(b, '\0');
    return b->data;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: sandtrail migrate\n"
                 "       sandtrail findings [--run RUN] [--detector NAME] [--json]\n"
                 "       sandtrail findings ack|resolve|dismiss ID --by NAME [--note TEXT]\n"
                 "       sandtrail alerts [--failed] [--finding ID]\n"
                 "       sandtrail alerts retry NOTIFICATION_ID [--receiver NAME]\n"
                 "       sandtrail retention [--keep-days N] [--dry-run]\n"
                 "       sandtrail evidence audit|export|verify ...\n"
                 "       sandtrail validate FILE|-\n");
}

static int cmd_migrate(void)
{
    char errstr[1024];
    int applied = 0;
    PGconn *pg = st_pg_connect(pg_dsn(), errstr, sizeof(errstr));
    if (!pg || st_pg_migrate(pg, env_or("SANDTRAIL_SQL_DIR", SANDTRAIL_SQL_DIR),
                             &applied, errstr, sizeof(errstr))) {
        st_error("%s", safe(0, errstr, 0));
        PQfinish(pg);
        return 1;
    }
    printf("%d migration(s) applied\n", applied);
    PQfinish(pg);
    return 0;
}

/* Writes s with control characters (and backslashes) escaped, so that
 * nothing stored can move the terminal's cursor or forge a line. */
/* Writes s escaped (st_escape_ctl: C0, DEL, C1 and invalid UTF-8). */
static void put_safe(const char *s, FILE *out)
{
    fputs(safe(7, s, 0), out);
}

/* Writes row i of res, column j padded to |w[j]| (negative: left-aligned,
 * 0: not padded), escaped by put_safe, with sep between columns. */
static void put_row(PGresult *res, int i, const int *w, int n, const char *sep)
{
    for (int j = 0; j < n; j++) {
        const char *v = PQgetvalue(res, i, j);
        int pad = abs(w[j]) - (int)strlen(v);
        for (int k = 0; w[j] > 0 && k < pad; k++)
            putchar(' ');
        put_safe(v, stdout);
        for (int k = 0; w[j] < 0 && k < pad; k++)
            putchar(' ');
        if (j < n - 1)
            fputs(sep, stdout);
    }
    putchar('\n');
}

/* sandtrail findings ack|resolve|dismiss ID --by NAME [--note TEXT]:
 * through sandtrail_triage(), which records the change and queues the
 * notification that ends the alert. */
static int cmd_triage(const char *verb, int argc, char **argv)
{
    static const struct option opts[] = {
        {"by", required_argument, NULL, 'b'},
        {"note", required_argument, NULL, 'n'},
        {NULL, 0, NULL, 0},
    };
    const char *by = NULL, *note = "", *status;
    char errstr[1024];
    int c;

    if (!strcmp(verb, "ack"))
        status = "acknowledged";
    else if (!strcmp(verb, "resolve"))
        status = "resolved";
    else
        status = "false_positive";
    optind = 2;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'b': by = optarg; break;
        case 'n': note = optarg; break;
        default: usage(stderr); return 64;
        }
    }
    if (optind != argc - 1 || !by) {
        usage(stderr);
        return 64;
    }
    const char *id = argv[optind];
    PGconn *pg = st_pg_connect(pg_dsn(), errstr, sizeof(errstr));
    if (!pg) {
        st_error("%s", errstr);
        return 1;
    }
    const char *params[4] = {id, status, by, note};
    PGresult *res = PQexecParams(pg, "SELECT sandtrail_triage($1, $2, $3, $4)", 4, NULL,
                                 params, NULL, NULL, 0);
    int rc = 0;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        st_error("could not change finding: %s", PQresultErrorMessage(res));
        rc = 1;
    } else {
        put_safe(id, stdout);
        printf(PQgetisnull(res, 0, 0) ? ": already %s\n" : ": %s\n", status);
    }
    PQclear(res);
    PQfinish(pg);
    return rc;
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

    if (argc > 1 && (!strcmp(argv[1], "ack") || !strcmp(argv[1], "resolve") ||
                     !strcmp(argv[1], "dismiss")))
        return cmd_triage(argv[1], argc, argv);
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
        st_error("%s", safe(0, errstr, 0));
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
        st_error("could not read findings: %s", safe(0, PQresultErrorMessage(res), 0));
        PQclear(res);
        PQfinish(pg);
        return 1;
    }
    int rows = PQntuples(res);
    if (json) {
        for (int i = 0; i < rows; i++)
            printf("%s\n", safe(0, PQgetvalue(res, i, 0), 1));
    } else {
        printf("%-19s %-8s %-12s %-12s %-20s %7s %s\n", "DETECTOR", "SEVERITY", "TASK",
               "RUN", "FIRST SEEN", "EVENTS", "SUMMARY");
        static const int w[] = {-19, -8, -12, -12, -20, 7, 0};
        for (int i = 0; i < rows; i++)
            put_row(res, i, w, 7, " ");
        printf("(%d finding%s)\n", rows, rows == 1 ? "" : "s");
    }
    PQclear(res);
    PQfinish(pg);
    return 0;
}

/* sandtrail alerts retry ID [--receiver NAME]: failed deliveries of one
 * notification become pending again, from their first attempt. */
static int alerts_retry(PGconn *pg, const char *id, const char *receiver)
{
    const char *params[2] = {id, receiver};
    PGresult *res = PQexecParams(
        pg,
        "UPDATE notification_queue SET state = 'pending', attempts = 0,"
        " next_attempt_at = now(), done_at = NULL"
        " WHERE notification_id = $1::bigint AND state = 'failed'"
        " AND ($2::text IS NULL OR receiver = $2)",
        2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        st_error("could not retry notification: %s", PQresultErrorMessage(res));
        PQclear(res);
        return 1;
    }
    int n = atoi(PQcmdTuples(res));
    PQclear(res);
    if (n == 0) {
        st_error("no failed delivery of notification %s", id);
        return 1;
    }
    /* wakes the alerters at once */
    PQclear(PQexec(pg, "NOTIFY sandtrail_alerts"));
    printf("%d deliver%s queued again\n", n, n == 1 ? "y" : "ies");
    return 0;
}

/* sandtrail alerts [--failed] [--finding ID]: one line per notification
 * and receiver, with the last attempt's outcome. */
static int cmd_alerts(int argc, char **argv)
{
    static const struct option opts[] = {
        {"failed", no_argument, NULL, 'f'},
        {"finding", required_argument, NULL, 'F'},
        {"receiver", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    const char *finding = NULL, *receiver = NULL;
    int failed = 0, c, rc = 0;
    char errstr[1024];

    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'f': failed = 1; break;
        case 'F': finding = optarg; break;
        case 'r': receiver = optarg; break;
        default: usage(stderr); return 64;
        }
    }
    int retry = optind < argc && !strcmp(argv[optind], "retry");
    if (retry ? optind + 2 != argc : optind != argc) {
        usage(stderr);
        return 64;
    }
    PGconn *pg = st_pg_connect(pg_dsn(), errstr, sizeof(errstr));
    if (!pg) {
        st_error("%s", errstr);
        return 1;
    }
    if (retry) {
        rc = alerts_retry(pg, argv[optind + 1], receiver);
        PQfinish(pg);
        return rc;
    }
    const char *params[3] = {failed ? "failed" : NULL, finding, receiver};
    PGresult *res = PQexecParams(
        pg,
        "SELECT n.notification_id, q.receiver, q.state, n.kind, n.severity,"
        " n.finding_id, q.attempts,"
        " coalesce(to_char(d.attempted_at AT TIME ZONE 'UTC',"
        "  'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '-'),"
        " coalesce(d.http_status::text, '-'), coalesce(d.error, '')"
        " FROM notification_queue q JOIN notifications n USING (notification_id)"
        " LEFT JOIN LATERAL (SELECT * FROM deliveries d"
        "  WHERE d.notification_id = q.notification_id AND d.receiver = q.receiver"
        "  ORDER BY d.attempted_at DESC, d.attempt_id DESC LIMIT 1) d ON true"
        " WHERE ($1::text IS NULL OR q.state = $1)"
        " AND ($2::text IS NULL OR n.finding_id = $2)"
        " AND ($3::text IS NULL OR q.receiver = $3)"
        " ORDER BY n.notification_id, q.receiver",
        3, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        st_error("could not read deliveries: %s", PQresultErrorMessage(res));
        PQclear(res);
        PQfinish(pg);
        return 1;
    }
    int rows = PQntuples(res);
    printf("%-8s %-14s %-9s %-15s %-8s %-32s %4s %-20s %5s %s\n", "ID", "RECEIVER",
           "STATE", "KIND", "SEVERITY", "FINDING", "TRY", "LAST ATTEMPT", "HTTP", "ERROR");
    static const int w[] = {-8, -14, -9, -15, -8, -32, 4, -20, 5, 0};
    for (int i = 0; i < rows; i++)
        put_row(res, i, w, 10, " ");
    printf("(%d deliver%s)\n", rows, rows == 1 ? "y" : "ies");
    PQclear(res);
    PQfinish(pg);
    return rc;
}

static int cmd_validate(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, bad = 0, good = 0;

    if (!f) {
        st_error("could not open \"%s\"", safe(0, path, 0));
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
            printf("%s:%ld: %s: %s\n", safe(0, path, 0), lineno, safe(1, rej.code, 0),
                   safe(2, rej.msg, 0));
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
    if (!strcmp(argv[1], "retention"))
        return st_cli_retention(pg_dsn(), argc - 1, argv + 1);
    if (!strcmp(argv[1], "alerts"))
        return cmd_alerts(argc - 1, argv + 1);
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
