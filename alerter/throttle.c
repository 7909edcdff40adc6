/* throttle.c: the shared per-window count in Redis (see throttle.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "log.h"
#include "redisconn.h"
#include "throttle.h"
#include "timeutil.h"

struct st_throttle {
    struct st_redis_target target; /* where, and the login (redisconn.h) */
    char *prefix;
    int64_t max, window_s;
    redisContext *rc;
    int warned; /* Redis down: said once per outage */
};

struct st_throttle *st_throttle_new(const struct st_alerter_conf *conf, char *errstr,
                                    size_t errsz)
{
    struct st_throttle *t = st_calloc(1, sizeof(*t));
    if (st_redis_target_parse(&t->target, conf->redis_url, conf->redis_password_file,
                              errstr, errsz)) {
        free(t);
        return NULL;
    }
    /* a refused login is a configuration error and stops start-up; a
     * Redis that is down only means no throttling until it is back */
    int refused = 0;
    t->rc = st_redis_connect(&t->target, 2000, &refused, errstr, errsz);
    if (!t->rc && refused) {
        st_redis_target_fini(&t->target);
        free(t);
        return NULL;
    }
    if (!t->rc) {
        st_warn("%s: not throttling until it is back", errstr);
        t->warned = 1;
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
    st_redis_target_fini(&t->target);
    free(t->prefix);
    free(t);
}

static redisContext *connected(struct st_throttle *t)
{
    if (t->rc && !t->rc->err)
        return t->rc;
    if (t->rc)
        redisFree(t->rc);
    char errstr[512];
    t->rc = st_redis_connect(&t->target, 2000, NULL, errstr, sizeof(errstr));
    if (t->rc)
        return t->rc;
    if (!t->warned)
        st_warn("%s: not throttling until it is back", errstr);
    t->warned = 1;
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
