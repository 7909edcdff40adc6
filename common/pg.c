/* pg.c: PostgreSQL connection and schema migrations. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "pg.h"

/* Whether a connection string that libpq could not parse may hold a
 * password: a "password" keyword, or a URI's user:password@. */
static int dsn_may_hold_password(const char *dsn)
{
    const char *uri = strstr(dsn, "://");
    if (strstr(dsn, "password"))
        return 1;
    if (!uri)
        return 0;
    size_t auth = strcspn(uri + 3, "@/?");
    return uri[3 + auth] == '@' && memchr(uri + 3, ':', auth);
}

/* libpq's message with every occurrence of the DSN's password replaced by
 * "***". libpq quotes parts of a connection string it cannot read (a bad
 * percent-escape in a URI's password, for one): when the string does not
 * parse and may hold a password, nothing of it is quoted. Caller frees. */
static char *pg_message(const char *dsn, const char *libpq_msg)
{
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(dsn, &perr);
    struct st_buf out;
    st_buf_init(&out);
    st_buf_adds(&out, "");
    if (!opts && dsn_may_hold_password(dsn)) {
        st_buf_adds(&out, "invalid connection string (not quoted: it may hold a password)");
    } else {
        const char *pw = NULL;
        for (PQconninfoOption *o = opts; o && o->keyword; o++)
            if (strcmp(o->keyword, "password") == 0 && o->val && *o->val)
                pw = o->val;
        size_t pwlen = pw ? strlen(pw) : 0;
        for (const char *m = libpq_msg; *m;) {
            const char *hit = pw ? strstr(m, pw) : NULL;
            size_t n = hit ? (size_t)(hit - m) : strlen(m);
            st_buf_add(&out, m, n);
            m += n;
            if (hit) {
                st_buf_adds(&out, "***");
                m += pwlen;
            }
        }
    }
    /* libpq ends its messages with a newline */
    while (out.len && (out.data[out.len - 1] == '\n' || out.data[out.len - 1] == ' '))
        out.data[--out.len] = '\0';
    PQconninfoFree(opts);
    PQfreemem(perr);
    return out.data;
}

PGconn *st_pg_connect(const char *dsn, char *errstr, size_t errsz)
{
    PGconn *pg = PQconnectdb(dsn);
    if (PQstatus(pg) != CONNECTION_OK) {
        const char *host = PQhost(pg), *port = PQport(pg);
        char *msg = pg_message(dsn, PQerrorMessage(pg));
        snprintf(errstr, errsz, "could not connect to PostgreSQL at \"%s:%s\": %s",
                 host ? host : "", port ? port : "", msg);
        free(msg);
        PQfinish(pg);
        return NULL;
    }
    /* event times are stored and compared in UTC */
    PQclear(PQexec(pg, "SET TIME ZONE 'UTC'"));
    return pg;
}

int st_pg_exec(PGconn *pg, const char *sql, char *errstr, size_t errsz)
{
    PGresult *res = PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(res);
    int rc = 0;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        snprintf(errstr, errsz, "%s", PQresultErrorMessage(res));
        size_t n = strlen(errstr);
        if (n && errstr[n - 1] == '\n')
            errstr[n - 1] = '\0';
        rc = -1;
    }
    PQclear(res);
    return rc;
}

static int is_migration(const char *name)
{
    size_t n = strlen(name);
    return n > 8 && name[0] >= '0' && name[0] <= '9' && name[1] >= '0' &&
           name[1] <= '9' && name[2] >= '0' && name[2] <= '9' && name[3] == '_' &&
           strcmp(name + n - 4, ".sql") == 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_file(const char *path, struct st_buf *out)
{
    char chunk[8192];
    size_t n;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st_buf_add(out, chunk, n);
    int err = ferror(f);
    fclose(f);
    return err ? -1 : 0;
}

static int migrate_one(PGconn *pg, const char *dir, const char *name,
                       int *applied, char *errstr, size_t errsz)
{
    const char *params[1] = {name};
    char path[4096], err[512];
    struct st_buf sql;
    int rc = -1;

    PGresult *res = PQexecParams(pg,
                                 "SELECT 1 FROM schema_migrations WHERE version = $1",
                                 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(errstr, errsz, "could not read schema_migrations: %s",
                 PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    int done = PQntuples(res) > 0;
    PQclear(res);
    if (done)
        return 0;

    st_buf_init(&sql);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (read_file(path, &sql)) {
        snprintf(errstr, errsz, "could not read migration \"%s\": %s", path,
                 strerror(errno));
        goto out;
    }
    if (st_pg_exec(pg, "BEGIN", err, sizeof(err)) ||
        st_pg_exec(pg, sql.data ? sql.data : "", err, sizeof(err))) {
        snprintf(errstr, errsz, "migration \"%s\" failed: %s", name, err);
        st_pg_exec(pg, "ROLLBACK", err, sizeof(err));
        goto out;
    }
    res = PQexecParams(pg, "INSERT INTO schema_migrations (version) VALUES ($1)", 1,
                       NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok || st_pg_exec(pg, "COMMIT", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not record migration \"%s\"", name);
        st_pg_exec(pg, "ROLLBACK", err, sizeof(err));
        goto out;
    }
    st_info("applied migration %s", name);
    (*applied)++;
    rc = 0;
out:
    st_buf_fini(&sql);
    return rc;
}

/* The migrations in sql_dir, sorted by name. Returns their number, or -1
 * with errstr set. The caller frees each name and *names. */
static long list_migrations(const char *sql_dir, char ***names, char *errstr,
                            size_t errsz)
{
    size_t n = 0, cap = 0;
    struct dirent *de;

    *names = NULL;
    DIR *d = opendir(sql_dir);
    if (!d) {
        snprintf(errstr, errsz, "could not open migrations folder \"%s\": %s",
                 sql_dir, strerror(errno));
        return -1;
    }
    while ((de = readdir(d))) {
        if (!is_migration(de->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            *names = st_realloc(*names, cap * sizeof(**names));
        }
        (*names)[n++] = st_strdup(de->d_name);
    }
    closedir(d);
    qsort(*names, n, sizeof(**names), cmp_name);
    return (long)n;
}

static void free_names(char **names, long n)
{
    for (long i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Compares the migrations recorded in the database with those known here.
 * Returns 0 when every recorded one is known, with *pending the number of
 * known ones not yet applied; -1 with errstr set when the database holds a
 * migration this program does not know (a newer release migrated it) or
 * cannot be read. */
static int compare_schema(PGconn *pg, char **names, long n, long *pending, char *errstr,
                          size_t errsz)
{
    PGresult *res = PQexec(pg, "SELECT version FROM schema_migrations ORDER BY version");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(errstr, errsz, "could not read schema_migrations: %s",
                 PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    long known = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        const char *v = PQgetvalue(res, i, 0);
        int found = 0;
        for (long k = 0; k < n && !found; k++)
            found = strcmp(names[k], v) == 0;
        if (!found) {
            snprintf(errstr, errsz,
                     "the database schema is newer than this program: it has migration "
                     "\"%s\", which this release does not know (its latest is \"%s\"); "
                     "upgrade sandtrail before running it against this database",
                     v, n ? names[n - 1] : "none");
            PQclear(res);
            return -1;
        }
        known++;
    }
    PQclear(res);
    *pending = n - known;
    return 0;
}

int st_pg_migrate(PGconn *pg, const char *sql_dir, int *applied, char *errstr,
                  size_t errsz)
{
    char err[512];
    char **names = NULL;
    long n, pending;
    int rc = -1;

    *applied = 0;
    if ((n = list_migrations(sql_dir, &names, errstr, errsz)) < 0)
        return -1;

    /* one migrator at a time; the lock is released at the end of the session
     * or by the unlock below */
    if (st_pg_exec(pg, "SELECT pg_advisory_lock(74657301)", err, sizeof(err)) ||
        st_pg_exec(pg,
                   "CREATE TABLE IF NOT EXISTS schema_migrations ("
                   " version text PRIMARY KEY,"
                   " applied_at timestamptz NOT NULL DEFAULT now())",
                   err, sizeof(err))) {
        snprintf(errstr, errsz, "could not prepare migrations: %s", err);
        goto out;
    }
    /* never run against, or migrate, a schema a newer release made */
    if (compare_schema(pg, names, n, &pending, errstr, errsz))
        goto out;
    for (long i = 0; i < n; i++)
        if (migrate_one(pg, sql_dir, names[i], applied, errstr, errsz))
            goto out;
    rc = 0;
out:
    st_pg_exec(pg, "SELECT pg_advisory_unlock(74657301)", err, sizeof(err));
    free_names(names, n);
    return rc;
}

int st_pg_schema_check(PGconn *pg, const char *sql_dir, char *errstr, size_t errsz)
{
    char **names = NULL;
    long n, pending = 0;
    int rc = -1;

    if ((n = list_migrations(sql_dir, &names, errstr, errsz)) < 0)
        return -1;
    PGresult *res = PQexec(pg, "SELECT to_regclass('schema_migrations') IS NOT NULL");
    int exists = PQresultStatus(res) == PGRES_TUPLES_OK &&
                 strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!exists) {
        snprintf(errstr, errsz,
                 "the database has no sandtrail schema: run `sandtrail migrate` (or start "
                 "without --no-migrate)");
        goto out;
    }
    if (compare_schema(pg, names, n, &pending, errstr, errsz))
        goto out;
    if (pending) {
        snprintf(errstr, errsz,
                 "the database schema is older than this program: %ld migration(s) up to "
                 "\"%s\" not applied; run `sandtrail migrate` (or start without "
                 "--no-migrate)",
                 pending, names[n - 1]);
        goto out;
    }
    rc = 0;
out:
    free_names(names, n);
    return rc;
}

void st_pg_array_add(struct st_buf *buf, const char *s)
{
    if (buf->len == 0)
        st_buf_addc(buf, '{');
    else
        st_buf_addc(buf, ',');
    st_buf_addc(buf, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            st_buf_addc(buf, '\\');
        st_buf_addc(buf, *s);
    }
    st_buf_addc(buf, '"');
}

void st_pg_array_end(struct st_buf *buf)
{
    st_buf_adds(buf, buf->len == 0 ? "{}" : "}");
}
