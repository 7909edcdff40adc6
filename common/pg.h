/* pg.h: PostgreSQL connection and schema migrations, shared by the analyzer
 * and the CLI. */
#ifndef ST_PG_H
#define ST_PG_H

#include <stddef.h>

#include <libpq-fe.h>

/* Connects to dsn. Returns the connection, or NULL with errstr set (the
 * message names the DSN's host and port, never its password). */
PGconn *st_pg_connect(const char *dsn, char *errstr, size_t errsz);

/* Applies, in file-name order, every sql_dir/NNN_*.sql not yet recorded in
 * the schema_migrations table, each in its own transaction, under an
 * advisory lock so that concurrent analyzers do not race. Sets *applied to
 * the number applied. Returns 0, or -1 with errstr naming the file. */
int st_pg_migrate(PGconn *pg, const char *sql_dir, int *applied, char *errstr,
                  size_t errsz);
/* (st_pg_migrate also refuses, applying nothing, a database that holds a
 * migration sql_dir does not have: a newer release migrated it.) */

/* For a program started with --no-migrate: returns 0 when the database's
 * schema is exactly the one sql_dir describes; -1 with errstr saying what
 * to do when it is older (migrations pending), newer (a migration this
 * program does not know) or absent. Only reads. */
int st_pg_schema_check(PGconn *pg, const char *sql_dir, char *errstr, size_t errsz);

/* Runs a statement without parameters that returns no rows (BEGIN, COMMIT,
 * ...). Returns 0, or -1 with errstr set. */
int st_pg_exec(PGconn *pg, const char *sql, char *errstr, size_t errsz);

/* Appends s to buf as one element of a PostgreSQL array literal, quoted and
 * escaped, so that arrays of event data travel as a single bound parameter. */
struct st_buf;
void st_pg_array_add(struct st_buf *buf, const char *s);

/* Closes the literal begun by st_pg_array_add ("{}" when nothing was added). */
void st_pg_array_end(struct st_buf *buf);

#endif
