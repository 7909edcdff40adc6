/* rpipe.c: pipelined Redis commands with per-reply callbacks (see rpipe.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "conf.h"
#include "log.h"
#include "rpipe.h"

/* Frees a secret after overwriting it. Accepts NULL. */
static void secret_free(char *secret)
{
    if (secret)
        explicit_bzero(secret, strlen(secret));
    free(secret);
}

struct pending {
    st_rpipe_cb cb;
    void *arg;
};

struct script {
    const char *body; /* not copied */
    char sha[41];
};

struct st_rpipe {
    redisContext *rc;
    struct script scripts[16];
    int nscripts;
    char *host;
    char *user;     /* ACL user, or NULL for the default user */
    char *password; /* NULL: no AUTH sent; wiped when freed */
    int port;
    int db;
    /* Commands are formatted when queued and written at exec time. */
    char **cmds;
    size_t *cmdlens;
    struct pending *pend;
    size_t n, cap;
    unsigned long sent; /* commands sent, ever (tests: no command per event) */
};

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

static int parse_url(struct st_rpipe *p, const char *url, char *errstr, size_t errsz)
{
    char shown[512];
    const char *s = url;
    url_shown(url, shown, sizeof(shown));
    if (strncmp(s, "redis://", 8) == 0)
        s += 8;
    /* redis://[user[:password]@]host[:port][/db]; the last '@' ends the
     * credentials (an unencoded '@' in a password is then still read) */
    const char *at = strrchr(s, '@');
    if (at) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        size_t ulen = colon ? (size_t)(colon - s) : (size_t)(at - s);
        if (ulen)
            p->user = url_decode(s, ulen);
        if (colon)
            p->password = url_decode(colon + 1, (size_t)(at - colon - 1));
        s = at + 1;
    }
    const char *colon = strchr(s, ':'), *slash = strchr(s, '/');
    size_t hostlen = colon ? (size_t)(colon - s) : slash ? (size_t)(slash - s) : strlen(s);
    if (hostlen == 0) {
        snprintf(errstr, errsz,
                 "invalid Redis URL \"%s\": expected redis://[user:password@]host:port[/db]",
                 shown);
        return -1;
    }
    p->host = st_strndup(s, hostlen);
    p->port = colon ? atoi(colon + 1) : 6379;
    p->db = slash ? atoi(slash + 1) : 0;
    if (p->port <= 0 || p->port > 65535) {
        snprintf(errstr, errsz, "invalid Redis URL \"%s\": bad port", shown);
        return -1;
    }
    return 0;
}

/* Reads the password of redis.password_file: one line, its newline dropped. */
static int read_password(struct st_rpipe *p, const char *path, char *errstr, size_t errsz)
{
    char buf[1024];
    if (st_conf_read_secret("redis.password_file", path, buf, sizeof(buf), errstr, errsz))
        return -1;
    secret_free(p->password);
    p->password = st_strdup(buf);
    explicit_bzero(buf, sizeof(buf));
    return 0;
}

/* AUTH (ACL user or the default user), or PING without a password: a
 * refused login, or a server that wants one, stops here and not at the
 * first batch. */
static int rpipe_auth(struct st_rpipe *p, char *errstr, size_t errsz)
{
    const char *argv[3] = {"AUTH", p->user ? p->user : p->password, p->password};
    int argc = p->user ? 3 : 2;
    char who[300];
    if (p->password)
        snprintf(who, sizeof(who), "could not log in to Redis at \"%s:%d\" as user \"%s\"",
                 p->host, p->port, p->user ? p->user : "default");
    else
        snprintf(who, sizeof(who), "could not use Redis at \"%s:%d\" without a login",
                 p->host, p->port);
    redisReply *r = p->password ? redisCommandArgv(p->rc, argc, argv, NULL)
                                : redisCommand(p->rc, "PING");
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (!ok)
        snprintf(errstr, errsz, "%s: %s", who,
                 r ? r->str : p->rc->err ? p->rc->errstr : "connection lost");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static int rpipe_connect(struct st_rpipe *p, char *errstr, size_t errsz)
{
    struct timeval tv = {5, 0};
    if (p->rc)
        redisFree(p->rc);
    p->rc = redisConnectWithTimeout(p->host, p->port, tv);
    if (!p->rc || p->rc->err) {
        snprintf(errstr, errsz, "could not connect to Redis at \"%s:%d\": %s", p->host,
                 p->port, p->rc ? p->rc->errstr : "out of memory");
        goto fail;
    }
    redisSetTimeout(p->rc, tv);
    if (rpipe_auth(p, errstr, errsz))
        goto fail;
    /* a restarted Redis has forgotten them: load before any EVALSHA */
    for (int i = 0; i < p->nscripts; i++) {
        redisReply *r = redisCommand(p->rc, "SCRIPT LOAD %s", p->scripts[i].body);
        int ok = r && r->type == REDIS_REPLY_STRING;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            snprintf(errstr, errsz, "could not load a script into Redis at \"%s:%d\"",
                     p->host, p->port);
            goto fail;
        }
    }
    if (p->db) {
        redisReply *r = redisCommand(p->rc, "SELECT %d", p->db);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            snprintf(errstr, errsz, "could not select Redis database %d", p->db);
            goto fail;
        }
    }
    return 0;
fail:
    if (p->rc)
        redisFree(p->rc);
    p->rc = NULL;
    return -1;
}

struct st_rpipe *st_rpipe_new(const char *url, const char *password_file, char *errstr,
                              size_t errsz)
{
    struct st_rpipe *p = st_calloc(1, sizeof(*p));
    if (parse_url(p, url, errstr, errsz) ||
        (password_file && *password_file &&
         read_password(p, password_file, errstr, errsz)) ||
        rpipe_connect(p, errstr, errsz)) {
        st_rpipe_destroy(p);
        return NULL;
    }
    return p;
}

void st_rpipe_destroy(struct st_rpipe *p)
{
    if (!p)
        return;
    st_rpipe_discard(p);
    if (p->rc)
        redisFree(p->rc);
    free(p->cmds);
    free(p->cmdlens);
    free(p->pend);
    free(p->host);
    free(p->user);
    secret_free(p->password);
    free(p);
}

static void queue(struct st_rpipe *p, st_rpipe_cb cb, void *arg, char *cmd, size_t n)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 256;
        p->cmds = st_realloc(p->cmds, p->cap * sizeof(*p->cmds));
        p->cmdlens = st_realloc(p->cmdlens, p->cap * sizeof(*p->cmdlens));
        p->pend = st_realloc(p->pend, p->cap * sizeof(*p->pend));
    }
    p->cmds[p->n] = cmd;
    p->cmdlens[p->n] = n;
    p->pend[p->n].cb = cb;
    p->pend[p->n].arg = arg;
    p->n++;
}

void st_rpipe_cmd(struct st_rpipe *p, st_rpipe_cb cb, void *arg, int argc,
                  const char **argv)
{
    size_t small[32] = {0};
    int heap = argc > 32;
    size_t *lens = heap ? st_malloc((size_t)argc * sizeof(*lens)) : small;
    char *cmd;

    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (heap)
        free(lens);
    if (n < 0)
        st_fatal("out of memory formatting a Redis command");
    queue(p, cb, arg, cmd, (size_t)n);
}

void st_rpipe_formatted(struct st_rpipe *p, const char *cmd, size_t len)
{
    char *copy = st_malloc(len + 1);
    memcpy(copy, cmd, len);
    copy[len] = '\0';
    queue(p, NULL, NULL, copy, len);
}

unsigned long st_rpipe_sent(const struct st_rpipe *p)
{
    return p->sent;
}

void st_rpipe_script(struct st_rpipe *p, st_rpipe_cb cb, void *arg, const char *body,
                     int numkeys, int argc, const char **argv)
{
    struct script *sc = NULL;
    for (int i = 0; i < p->nscripts && !sc; i++)
        if (p->scripts[i].body == body)
            sc = &p->scripts[i];
    if (!sc) {
        unsigned char md[SHA_DIGEST_LENGTH];
        if (p->nscripts == 16)
            st_fatal("more than 16 Redis scripts");
        sc = &p->scripts[p->nscripts++];
        sc->body = body;
        SHA1((const unsigned char *)body, strlen(body), md);
        for (int i = 0; i < SHA_DIGEST_LENGTH; i++)
            snprintf(sc->sha + 2 * i, 3, "%02x", md[i]);
        /* loaded now on this connection, and on every reconnect */
        if (p->rc) {
            redisReply *r = redisCommand(p->rc, "SCRIPT LOAD %s", body);
            if (r)
                freeReplyObject(r);
        }
    }
    const char *full[32];
    char nk[8];
    if (argc + 3 > 32)
        st_fatal("redis script with %d arguments", argc);
    snprintf(nk, sizeof(nk), "%d", numkeys);
    full[0] = "EVALSHA";
    full[1] = sc->sha;
    full[2] = nk;
    for (int i = 0; i < argc; i++)
        full[3 + i] = argv[i];
    st_rpipe_cmd(p, cb, arg, argc + 3, full);
}

void st_rpipe_discard(struct st_rpipe *p)
{
    for (size_t i = 0; i < p->n; i++)
        redisFreeCommand(p->cmds[i]);
    p->n = 0;
}

int st_rpipe_exec(struct st_rpipe *p, char *errstr, size_t errsz)
{
    size_t i;
    int rc = -1;

    if (p->n == 0)
        return 0;
    if (!p->rc && rpipe_connect(p, errstr, errsz))
        goto out;
    p->sent += p->n;
    for (i = 0; i < p->n; i++)
        if (redisAppendFormattedCommand(p->rc, p->cmds[i], p->cmdlens[i]) != REDIS_OK)
            goto conn_error;
    for (i = 0; i < p->n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(p->rc, (void **)&r) != REDIS_OK || !r)
            goto conn_error;
        if (r->type == REDIS_REPLY_ERROR) {
            snprintf(errstr, errsz, "Redis refused a command: %s", r->str);
            freeReplyObject(r);
            /* the stream of replies is still in step, but the batch is not
             * whole: drop the connection so nothing half-read remains */
            redisFree(p->rc);
            p->rc = NULL;
            goto out;
        }
        int cbrc = p->pend[i].cb ? p->pend[i].cb(r, p->pend[i].arg) : 0;
        freeReplyObject(r);
        if (cbrc) {
            snprintf(errstr, errsz, "unexpected Redis reply");
            redisFree(p->rc);
            p->rc = NULL;
            goto out;
        }
    }
    rc = 0;
    goto out;
conn_error:
    snprintf(errstr, errsz, "Redis at \"%s:%d\": %s", p->host, p->port,
             p->rc && p->rc->err ? p->rc->errstr : "connection lost");
    redisFree(p->rc);
    p->rc = NULL;
out:
    st_rpipe_discard(p);
    return rc;
}
