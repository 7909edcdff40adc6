/* throttle.c: the shared per-window count in Redis (see throttle.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "log.h"
#include "throttle.h"
#include "timeutil.h"

struct st_throttle {
    char host[256];
    int port, db;
    char *prefix;
    int64_t max, window_s;
    redisContext *rc;
    int warned; /* Redis down: said once per outage */
};

struct st_throttle *st_throttle_new(const struct st_alerter_conf *conf, char *errstr,
                                    size_t errsz)
{
    struct st_throttle *t = st_calloc(1, sizeof(*t));
    const char *u = conf->redis_url;
    int n = 0;
    t->port = 6379;
    if (strncmp(u, "redis://", 8) == 0)
        u += 8;
    if (sscanf(u, "%255[^:/@]%n", t->host, &n) != 1 ||
        (u[n] == ':' && sscanf(u + n, ":%d", &t->port) != 1) ||
        (strchr(u, '/') && sscanf(strchr(u, '/'), "/%d", &t->db) != 1) ||
        t->port <= 0 || t->port > 65535) {
        snprintf(errstr, errsz, "invalid Redis URL \"%s\": expected redis://host:port[/db]",
                 conf->redis_url);
        free(t);
        return NULL;
    }
    t->prefix = st_strdup(conf->redis_prefix);
    t->max = conf->throttle_max;
    t->window_s = conf->throttle_window_s;
    return t;
}

void st_throttle_destroy(struct st_throttle *t)
{
    if (!t)
        return;
    if (t->rc)
        redisFree(t->rc);
    free(t->prefix);
    free(t);
}

static redisContext *connected(struct st_throttle *t)
{
    if (t->rc && !t->rc->err)
        return t->rc;
    if (t->rc)
        redisFree(t->rc);
    struct timeval tv = {2, 0};
    t->rc = redisConnectWithTimeout(t->host, t->port, tv);
    if (t->rc && !t->rc->err) {
        redisSetTimeout(t->rc, tv);
        redisReply *r = t->db ? redisCommand(t->rc, "SELECT %d", t->db) : NULL;
        int ok = !t->db || (r && r->type != REDIS_REPLY_ERROR);
        if (r)
            freeReplyObject(r);
        if (ok)
            return t->rc;
    }
    if (!t->warned)
        st_warn("could not reach Redis at \"%s:%d\": not throttling until it is back",
                t->host, t->port);
    t->warned = 1;
    if (t->rc)
        redisFree(t->rc);
    t->rc = NULL;
    return NULL;
}

int64_t st_throttle_hold(struct st_throttle *t, const char *receiver,
                         const struct st_alert *a)
{
    if (!strcmp(a->severity, "critical") ||
        (strcmp(a->kind, "created") && strcmp(a->kind, "severity_raised")))
        return 0;
    redisContext *rc = connected(t);
    if (!rc)
        return 0;
    int64_t start = st_time_now_us() / 1000000 / t->window_s * t->window_s;
    char key[512];
    snprintf(key, sizeof(key), "%salert:throttle:%s:%" PRId64 ":%s", t->prefix, receiver,
             start, a->task_id);
    redisReply *r = redisCommand(rc, "INCR %s", key);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        if (r)
            freeReplyObject(r);
        else if (!t->warned)
            st_warn("Redis INCR failed: not throttling this notification");
        return 0;
    }
    t->warned = 0;
    long long count = r->integer;
    freeReplyObject(r);
    if (count == 1) {
        r = redisCommand(rc, "EXPIRE %s %lld", key, (long long)t->window_s * 2);
        if (r)
            freeReplyObject(r);
    }
    return count > t->max ? start + t->window_s : 0;
}
