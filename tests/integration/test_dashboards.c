/* test_dashboards.c: every query of the Grafana dashboards in dashboards/,
 * run against the real PostgreSQL loaded with the demo and the scenario
 * data, as Grafana would run it.
 *
 * Grafana cannot be installed on our machines, so this test does what its
 * PostgreSQL data source does before sending a panel's SQL: it expands the
 * macros ($__timeFilter, $__timeGroupAlias, $__timeGroup, $__timeFrom,
 * $__timeTo, $__time) over a fixed range and the template variables ($task,
 * $run, ${task}). Every panel's query must then succeed, leave nothing
 * unexpanded, return a "time" column first when it is a time series, and
 * the headline panels must give the numbers the data holds. The PromQL side
 * (promtool, metric names read from live /metrics) is
 * tests/integration/dashboards.sh. */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "world.h"

#define DASHBOARDS SANDTRAIL_SOURCE_DIR "/dashboards/grafana"
#define RANGE_FROM "'2026-11-28T00:00:00Z'"
#define RANGE_TO "'2026-12-01T00:00:00Z'"

static struct world w;

/* The template variables' values while the queries run. */
static const char *var_task = "T-100", *var_run = "run-burst";

/* Returns the index just past the parenthesised argument list that starts
 * at s[i] == '(' (nesting and quotes respected), or 0 if unbalanced. */
static size_t args_end(const char *s, size_t i)
{
    int depth = 0, quote = 0;
    for (; s[i]; i++) {
        if (quote) {
            if (s[i] == '\'')
                quote = 0;
        } else if (s[i] == '\'') {
            quote = 1;
        } else if (s[i] == '(') {
            depth++;
        } else if (s[i] == ')' && --depth == 0) {
            return i + 1;
        }
    }
    return 0;
}

/* Splits "(a, b)" at its top-level comma into a and b (trimmed). */
static int split2(const char *s, size_t len, char *a, size_t asz, char *b, size_t bsz)
{
    int depth = 0;
    for (size_t i = 1; i + 1 < len; i++) {
        if (s[i] == '(')
            depth++;
        else if (s[i] == ')')
            depth--;
        else if (s[i] == ',' && depth == 0) {
            snprintf(a, asz, "%.*s", (int)(i - 1), s + 1);
            const char *t = s + i + 1;
            while (*t == ' ')
                t++;
            snprintf(b, bsz, "%.*s", (int)(len - 1 - (size_t)(t - s)), t);
            return 0;
        }
    }
    return -1;
}

/* '1h' -> 3600; -1 when it is not a Grafana interval. */
static long interval_s(const char *q)
{
    char unit = 0;
    long n = 0;
    if (sscanf(q, "'%ld%c'", &n, &unit) != 2)
        return -1;
    switch (unit) {
    case 's': return n;
    case 'm': return n * 60;
    case 'h': return n * 3600;
    case 'd': return n * 86400;
    default: return -1;
    }
}

/* Expands Grafana's PostgreSQL macros and the template variables into out.
 * Returns 0, or -1 with a reason in err for a macro it cannot expand. */
static int expand(const char *sql, struct st_buf *out, char *err, size_t errsz)
{
    static const char *const macros[] = {"$__timeGroupAlias", "$__timeGroup",
                                         "$__timeFilter", "$__timeFrom",
                                         "$__timeTo", "$__time"};
    st_buf_reset(out);
    for (size_t i = 0; sql[i];) {
        if (sql[i] != '$') {
            st_buf_addc(out, sql[i++]);
            continue;
        }
        const char *m = NULL;
        for (size_t k = 0; k < sizeof(macros) / sizeof(macros[0]); k++) {
            size_t ml = strlen(macros[k]);
            if (strncmp(sql + i, macros[k], ml) == 0 && sql[i + ml] == '(') {
                m = macros[k];
                break;
            }
        }
        if (m) {
            size_t a = i + strlen(m), e = args_end(sql, a);
            char x[256], y[64];
            if (!e) {
                snprintf(err, errsz, "unbalanced %s", m);
                return -1;
            }
            const char *args = sql + a;
            size_t alen = e - a;
            if (strcmp(m, "$__timeFilter") == 0) {
                st_buf_printf(out, "%.*s BETWEEN " RANGE_FROM " AND " RANGE_TO,
                              (int)(alen - 2), args + 1);
            } else if (strcmp(m, "$__timeFrom") == 0) {
                st_buf_adds(out, RANGE_FROM "::timestamptz");
            } else if (strcmp(m, "$__timeTo") == 0) {
                st_buf_adds(out, RANGE_TO "::timestamptz");
            } else if (strcmp(m, "$__time") == 0) {
                st_buf_printf(out, "%.*s AS \"time\"", (int)(alen - 2), args + 1);
            } else {
                long s;
                if (split2(args, alen, x, sizeof(x), y, sizeof(y)) ||
                    (s = interval_s(y)) <= 0) {
                    snprintf(err, errsz, "%s needs (column, 'interval')", m);
                    return -1;
                }
                st_buf_printf(out, "floor(extract(epoch from %s)/%ld)*%ld", x, s, s);
                if (strcmp(m, "$__timeGroupAlias") == 0)
                    st_buf_adds(out, " AS \"time\"");
            }
            i = e;
        } else if (strncmp(sql + i, "${task}", 7) == 0 ||
                   (strncmp(sql + i, "$task", 5) == 0 && sql[i + 5] != '_')) {
            st_buf_adds(out, var_task);
            i += sql[i + 1] == '{' ? 7 : 5;
        } else if (strncmp(sql + i, "${run}", 6) == 0 ||
                   (strncmp(sql + i, "$run", 4) == 0 && sql[i + 4] != '_')) {
            st_buf_adds(out, var_run);
            i += sql[i + 1] == '{' ? 6 : 4;
        } else {
            st_buf_addc(out, sql[i++]); /* left for the '$' check */
        }
    }
    return 0;
}

/* One panel's outcome. */
struct outcome {
    int ok;
    char err[512];
    char *first_row; /* '|'-joined, NULL when no row */
    int nrows;
};

/* Expands and runs one query, checking what Grafana would need. */
static void run_query(PGconn *pg, const char *sql, int time_series, struct outcome *o)
{
    struct st_buf q;
    st_buf_init(&q);
    memset(o, 0, sizeof(*o));
    if (expand(sql, &q, o->err, sizeof(o->err)))
        goto out;
    if (strchr(q.data, '$')) {
        snprintf(o->err, sizeof(o->err), "left unexpanded: %s", strchr(q.data, '$'));
        goto out;
    }
    PGresult *r = PQexec(pg, q.data);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(o->err, sizeof(o->err), "%s", PQresultErrorMessage(r));
        PQclear(r);
        goto out;
    }
    if (time_series && (PQnfields(r) < 2 || strcmp(PQfname(r, 0), "time") != 0)) {
        snprintf(o->err, sizeof(o->err), "a time series needs a first column \"time\"");
        PQclear(r);
        goto out;
    }
    o->nrows = PQntuples(r);
    if (o->nrows > 0) {
        struct st_buf row;
        st_buf_init(&row);
        for (int c = 0; c < PQnfields(r); c++)
            st_buf_printf(&row, "%s%s", c ? "|" : "", PQgetvalue(r, 0, c));
        o->first_row = row.data;
    }
    PQclear(r);
    o->ok = 1;
out:
    st_buf_fini(&q);
}

/* Every SQL query of every dashboard: panels (rows included) and template
 * variables. Calls fn for each with the panel's title. */
typedef void (*query_fn)(const char *file, const char *title, const char *sql,
                         int time_series, void *arg);

static void each_panel(const cJSON *panels, const char *file, query_fn fn, void *arg)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, panels)
    {
        const char *title = cJSON_GetStringValue(cJSON_GetObjectItem(p, "title"));
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(p, "targets"))
        {
            const char *sql = cJSON_GetStringValue(cJSON_GetObjectItem(t, "rawSql"));
            const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItem(t, "format"));
            if (sql)
                fn(file, title ? title : "?", sql, fmt && !strcmp(fmt, "time_series"),
                   arg);
        }
        each_panel(cJSON_GetObjectItem(p, "panels"), file, fn, arg);
    }
}

static int each_query(query_fn fn, void *arg)
{
    DIR *d = opendir(DASHBOARDS);
    struct dirent *de;
    int files = 0;
    ck_assert_msg(d != NULL, "no %s", DASHBOARDS);
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", DASHBOARDS, de->d_name);
        char *text = world_slurp(path);
        cJSON *doc = cJSON_Parse(text);
        ck_assert_msg(doc != NULL, "%s is not JSON", path);
        each_panel(cJSON_GetObjectItem(doc, "panels"), de->d_name, fn, arg);
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "templating"),
                                                  "list"))
        {
            const char *q = cJSON_GetStringValue(cJSON_GetObjectItem(v, "query"));
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(v, "name"));
            if (q)
                fn(de->d_name, name ? name : "?", q, 0, arg);
        }
        cJSON_Delete(doc);
        free(text);
        files++;
    }
    closedir(d);
    return files;
}

/* What the suite learnt: the first row of each panel, by title. */
struct seen {
    PGconn *pg;
    int queries, failed;
    struct st_buf report;
    struct st_buf firsts; /* "file/title=first_row\n" */
};

static void check_one(const char *file, const char *title, const char *sql,
                      int time_series, void *arg)
{
    struct seen *s = arg;
    struct outcome o;
    run_query(s->pg, sql, time_series, &o);
    s->queries++;
    if (!o.ok) {
        s->failed++;
        st_buf_printf(&s->report, "%s: \"%s\": %s\n", file, title, o.err);
    }
    st_buf_printf(&s->firsts, "%s/%s=%s\n", file, title,
                  o.first_row ? o.first_row : "(no row)");
    free(o.first_row);
}

static void load(void)
{
    world_init(&w, "dash");
    char *const inputs[] = {
        SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson",
        SANDTRAIL_SOURCE_DIR "/tests/data/scenarios/denial_burst.ndjson",
        SANDTRAIL_SOURCE_DIR "/tests/data/scenarios/scope_drift.ndjson",
        SANDTRAIL_SOURCE_DIR "/tests/data/scenarios/retry_across_paths.ndjson",
        SANDTRAIL_SOURCE_DIR "/tests/data/scenarios/private_destination.ndjson",
    };
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++)
        /* demo.ndjson holds one malformed line on purpose: exit 1 */
        ck_assert_int_le(run(&w, w.name, w.name,
                             BIN "/collector/sandtrail-collector --input %s 2>/dev/null",
                             inputs[i]),
                         1);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"),
                     0);
}

static struct seen seen;

static void setup(void)
{
    load();
    memset(&seen, 0, sizeof(seen));
    seen.pg = PQconnectdb(w.dsn);
    ck_assert_msg(PQstatus(seen.pg) == CONNECTION_OK, "%s", PQerrorMessage(seen.pg));
    st_buf_init(&seen.report);
    st_buf_init(&seen.firsts);
    ck_assert_int_eq(each_query(check_one, &seen), 3);
}

static void teardown(void)
{
    PQfinish(seen.pg);
    st_buf_fini(&seen.report);
    st_buf_fini(&seen.firsts);
    world_drop(&w);
}

static const char *first_of(const char *key)
{
    static char val[512];
    const char *p = seen.firsts.data ? strstr(seen.firsts.data, key) : NULL;
    ck_assert_msg(p != NULL, "no panel %s in:\n%s", key, seen.firsts.data);
    p += strlen(key);
    ck_assert_msg(*p == '=', "no panel %s", key);
    size_t n = strcspn(p + 1, "\n");
    snprintf(val, sizeof(val), "%.*s", (int)n, p + 1);
    return val;
}

START_TEST(dashboards_every_query_runs)
{
    ck_assert_msg(seen.failed == 0, "%d of %d dashboard queries fail:\n%s", seen.failed,
                  seen.queries, seen.report.data);
    ck_assert_int_ge(seen.queries, 20);
}
END_TEST

/* The headline numbers are the ones the loaded data holds: the demo's
 * burst run (denial_burst + retry_across_paths) plus the scenarios'. */
START_TEST(dashboards_headline_counts)
{
    char *want_open = rows(w.dsn, "SELECT count(*) FROM findings"
                                  " WHERE status IN ('open', 'acknowledged')");
    want_open[strcspn(want_open, "\n")] = '\0';
    /* nothing is triaged yet: every finding is open */
    char *all = rows(w.dsn, "SELECT count(*) FROM findings");
    all[strcspn(all, "\n")] = '\0';
    ck_assert_str_eq(want_open, all);
    ck_assert_int_gt(atoi(all), 5);
    ck_assert_str_eq(first_of("findings-overview.json/Open findings"), want_open);
    ck_assert_str_eq(first_of("findings-overview.json/Findings in range"), all);

    /* the demo's burst run, as the drill-down shows it: 14 events, one
     * command that failed, 12 denied requests at 6 hosts, one credential,
     * two findings (denial_burst high, retry_across_paths) */
    const char *sum = first_of("run-drilldown.json/Run summary");
    char first[64], last[64];
    long ev, cmd, cmdf, fw, ra, rd, dd, ci, fi;
    char sev[32];
    ck_assert_int_eq(sscanf(sum, "%63[^|]|%63[^|]|%ld|%ld|%ld|%ld|%ld|%ld|%ld|%ld|%ld|%31[^|]",
                            first, last, &ev, &cmd, &cmdf, &fw, &ra, &rd, &dd, &ci, &fi,
                            sev),
                     12);
    ck_assert_int_eq(ev, 14);
    ck_assert_int_eq(cmd, 1);
    ck_assert_int_eq(cmdf, 1);
    ck_assert_int_eq(rd, 12);
    ck_assert_int_eq(dd, 6);
    ck_assert_int_eq(ci, 1);
    ck_assert_int_eq(fi, 2);
    ck_assert_str_eq(sev, "high");
    /* the destinations panel puts the most denied host first */
    ck_assert_ptr_nonnull(strstr(first_of("run-drilldown.json/Destinations"), "|0|"));
    free(want_open);
    free(all);
}
END_TEST

/* The check can fail: a panel whose query names a column that does not
 * exist, one with a macro this expander (like Grafana) cannot take, and a
 * time series without its time column are each reported. */
START_TEST(dashboards_broken_panel_is_reported)
{
    struct outcome o;
    run_query(seen.pg, "SELECT count(*) FROM findings WHERE $__timeFilter(no_such_column)",
              0, &o);
    ck_assert_int_eq(o.ok, 0);
    ck_assert_ptr_nonnull(strstr(o.err, "no_such_column"));
    run_query(seen.pg, "SELECT $__unknownMacro(ts) FROM events", 0, &o);
    ck_assert_int_eq(o.ok, 0);
    ck_assert_ptr_nonnull(strstr(o.err, "unexpanded"));
    run_query(seen.pg, "SELECT severity, count(*) FROM findings GROUP BY 1", 1, &o);
    ck_assert_int_eq(o.ok, 0);
    ck_assert_ptr_nonnull(strstr(o.err, "time"));
    run_query(seen.pg,
              "SELECT $__timeGroupAlias(first_seen, '1h'), count(*) FROM findings"
              " WHERE $__timeFilter(first_seen) GROUP BY 1",
              1, &o);
    ck_assert_msg(o.ok, "%s", o.err);
    free(o.first_row);
}
END_TEST

/* Every PromQL expression of the dashboards and rules parses (promtool),
 * names only metrics the programs export (live /metrics), and the alert
 * rules pass their unit tests; a broken rule fails them. */
START_TEST(dashboards_promql_and_rules)
{
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "%s/tests/integration/dashboards.sh %s",
                         SANDTRAIL_SOURCE_DIR, BIN),
                     0);
}
END_TEST

int main(void)
{
    if (world_setup())
        return 77;
    Suite *s = suite_create("dashboards");
    TCase *tc = tcase_create("dashboards");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, dashboards_every_query_runs);
    tcase_add_test(tc, dashboards_headline_counts);
    tcase_add_test(tc, dashboards_broken_panel_is_reported);
    tcase_add_test(tc, dashboards_promql_and_rules);
    suite_add_tcase(s, tc);
    return world_run(s);
}
