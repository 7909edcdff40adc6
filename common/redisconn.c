/* redisconn.c: Redis URL, password file and login (see redisconn.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "conf.h"
#include "log.h"
#include "redisconn.h"

/* Frees a secret after overwriting it. Accepts NULL. */
static void secret_free(char *secret)
{
    if (secret)
        explicit_bzero(secret, strlen(secret));
    free(secret);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes n bytes of s (a password may hold '@', ':' or '/'). */
static char *url_decode(const char *s, size_t n)
{
    char *out = st_malloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            *o++ = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

/* The URL as it may be logged: the password replaced by "***". */
static void url_shown(const char *url, char *out, size_t outsz)
{
    const char *at = strrchr(url, '@'), *s = url;
    if (strncmp(s, "redis://", 8) == 0)
        s += 8;
    const char *colon = at ? memchr(s, ':', (size_t)(at - s)) : NULL;
    if (colon)
        snprintf(out, outsz, "%.*s:***%s", (int)(colon - url), url, at);
    else
        snprintf(out, outsz, "%s", url);
}

int st_redis_target_parse(struct st_redis_target *t, const char *url,
                          const char *password_file, char *errstr, size_t errsz)
{
    char shown[512];
    const char *s = url;
    memset(t, 0, sizeof(*t));
    url_shown(url, shown, sizeof(shown));
    if (strncmp(s, "redis://", 8) == 0)
        s += 8;
    /* the last '@' ends the credentials (an unencoded '@' in a password is
     * then still read) */
    const char *at = strrchr(s, '@');
    if (at) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        size_t ulen = colon ? (size_t)(colon - s) : (size_t)(at - s);
        if (ulen)
            t->user = url_decode(s, ulen);
        if (colon)
            t->password = url_decode(colon + 1, (size_t)(at - colon - 1));
        s = at + 1;
    }
    const char *colon = strchr(s, ':'), *slash = strchr(s, '/');
    size_t hostlen = colon ? (size_t)(colon - s) : slash ? (size_t)(slash - s) : strlen(s);
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 6379;
    long db = slash ? strtol(slash + 1, NULL, 10) : 0;
    if (hostlen == 0) {
        snprintf(errstr, errsz,
                 "invalid Redis URL \"%s\": expected redis://[user:password@]host:port[/db]",
                 shown);
        st_redis_target_fini(t);
        return -1;
    }
    if ((colon && (end == colon + 1 || (*end && *end != '/'))) || port <= 0 ||
        port > 65535 || db < 0 || db > 1000000) {
        snprintf(errstr, errsz, "invalid Redis URL \"%s\": bad port or database", shown);
        st_redis_target_fini(t);
        return -1;
    }
    t->host = st_strndup(s, hostlen);
    t->port = (int)port;
    t->db = (int)db;
    if (password_file && *password_file) {
        char buf[1024];
        if (st_conf_read_secret("redis.password_file", password_file, buf, sizeof(buf),
                                errstr, errsz)) {
            st_redis_target_fini(t);
            return -1;
        }
        secret_free(t->password);
        t->password = st_strdup(buf);
        explicit_bzero(buf, sizeof(buf));
    }
    return 0;
}

void st_redis_target_fini(struct st_redis_target *t)
{
    free(t->host);
    free(t->user);
    secret_free(t->password);
    memset(t, 0, sizeof(*t));
}

/* AUTH (ACL user or the default user), or PING without a password. */
static int login(const struct st_redis_target *t, redisContext *rc, char *errstr,
                 size_t errsz)
{
    const char *argv[3] = {"AUTH", t->user ? t->user : t->password, t->password};
    int argc = t->user ? 3 : 2;
    char who[300];
    if (t->password)
        snprintf(who, sizeof(who), "could not log in to Redis at \"%s:%d\" as user \"%s\"",
                 t->host, t->port, t->user ? t->user : "default");
    else
        snprintf(who, sizeof(who), "could not use Redis at \"%s:%d\" without a login",
                 t->host, t->port);
    redisReply *r = t->password ? redisCommandArgv(rc, argc, argv, NULL)
                                : redisCommand(rc, "PING");
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (!ok)
        snprintf(errstr, errsz, "%s: %s", who,
                 r ? r->str : rc->err ? rc->errstr : "connection lost");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

redisContext *st_redis_connect(const struct st_redis_target *t, int timeout_ms,
                               int *refused, char *errstr, size_t errsz)
{
    int answered = 0;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *rc = redisConnectWithTimeout(t->host, t->port, tv);
    if (!rc || rc->err) {
        snprintf(errstr, errsz, "could not connect to Redis at \"%s:%d\": %s", t->host,
                 t->port, rc ? rc->errstr : "out of memory");
        goto fail;
    }
    redisSetTimeout(rc, tv);
    if (login(t, rc, errstr, errsz)) {
        answered = !rc->err;
        goto fail;
    }
    if (t->db) {
        redisReply *r = redisCommand(rc, "SELECT %d", t->db);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            snprintf(errstr, errsz, "could not select Redis database %d", t->db);
            answered = !rc->err;
            goto fail;
        }
    }
    return rc;
fail:
    if (refused)
        *refused = answered;
    if (rc)
        redisFree(rc);
    return NULL;
}
