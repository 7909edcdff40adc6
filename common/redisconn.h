/* redisconn.h: where a Redis server is and how to log in to it, shared by
 * every program that talks to Redis (the analyzer's pipeline, the
 * alerter's throttle), so that one URL form and one login rule hold.
 *
 * URL: redis://[user[:password]@]host[:port][/db], user and password
 * percent-encoded. A password file, when given, takes precedence over the
 * URL's password. Every connection sends AUTH (ACL user, or the default
 * user) when there is a password, PING otherwise, then SELECT db: a refused
 * login stops at connect time, not at the first command. No error message
 * ever holds the password. */
#ifndef ST_REDISCONN_H
#define ST_REDISCONN_H

#include <stddef.h>

#include <hiredis/hiredis.h>

struct st_redis_target {
    char *host;
    int port;
    int db;
    char *user;     /* ACL user, or NULL for the default user */
    char *password; /* NULL: no AUTH; wiped when freed */
};

/* Fills t from url and password_file (NULL or "": none). Returns 0, or -1
 * with errstr set (the URL shown with its password as "***"). */
int st_redis_target_parse(struct st_redis_target *t, const char *url,
                          const char *password_file, char *errstr, size_t errsz);

void st_redis_target_fini(struct st_redis_target *t);

/* Connects, logs in and selects the database, with timeout_ms for the
 * connection and for every later command. Returns the context, or NULL
 * with errstr set and, when refused is not NULL, *refused = 1 if the server
 * answered but refused the login or the database (a configuration error,
 * not an outage), 0 otherwise. */
redisContext *st_redis_connect(const struct st_redis_target *t, int timeout_ms,
                               int *refused, char *errstr, size_t errsz);

#endif
