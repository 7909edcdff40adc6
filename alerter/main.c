/* main.c: sandtrail-alerter.
 *
 *   notifications (written by the analyzer with the findings, and by
 *   sandtrail_triage) -> notification_queue, one row per receiver
 *   (queue.c) -> claimed FOR UPDATE SKIP LOCKED -> receivers/ (Alertmanager,
 *   signed webhooks) -> every attempt recorded in deliveries
 *
 * Woken by LISTEN sandtrail_alerts at each commit that adds notifications,
 * with a poll every alert.poll_ms as fallback. A claim's transaction stays
 * open while its notifications are sent, so an alerter killed mid-delivery
 * leaves them pending: they are sent again (same delivery id) by the next.
 * Several alerters can run side by side.
 *
 * Exit status: 0 stopped cleanly (or --drain: everything delivered or failed
 * for good); 1 runtime failure; 64 usage; 78 configuration. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alerter.h"
#include "conf.h"
#include "digest.h"
#include "log.h"
#include "metrics.h"
#include "pg.h"
#include "queue.h"
#include "throttle.h"
#include "timeutil.h"

#ifndef SANDTRAIL_SQL_DIR
#define SANDTRAIL_SQL_DIR "sql"
#endif

#define A(field) offsetof(struct st_alerter_conf, field)

static const struct st_conf_prop alerter_props[] = {
    {"pg.dsn", "SANDTRAIL_PG_DSN", ST_CONF_STR, A(pg_dsn), 0, 0,
     "host=127.0.0.1 port=15433 user=sandtrail dbname=sandtrail",
     "PostgreSQL holding findings and the notification outbox (libpq)"},
    {"redis.url", "SANDTRAIL_REDIS_URL", ST_CONF_STR, A(redis_url), 0, 0,
     "redis://127.0.0.1:16380/0", "Redis holding the throttle windows shared by all alerters"},
    {"redis.password_file", "SANDTRAIL_REDIS_PASSWORD_FILE", ST_CONF_STR,
     A(redis_password_file), 0, 0, NULL,
     "file holding the Redis password, read at start; takes precedence over the "
     "URL's (redis://[user[:password]@]host:port[/db], an ACL user)"},
    {"redis.prefix", "SANDTRAIL_REDIS_PREFIX", ST_CONF_STR, A(redis_prefix), 0, 0, "st:",
     "prefix of every Redis key the alerter writes"},
    {"metrics.listen", "SANDTRAIL_ALERTER_METRICS", ST_CONF_STR, A(metrics_listen), 0, 0,
     "", "host:port serving Prometheus metrics at /metrics (empty: off)"},
    {"sql.dir", "SANDTRAIL_SQL_DIR", ST_CONF_STR, A(sql_dir), 0, 0, NULL,
     "folder of the migrations this release knows: the alerter never migrates, and "
     "refuses to start against a schema that is not theirs (unset: the source "
     "tree's sql/, fixed at build time)"},
    {"log.level", "SANDTRAIL_LOG_LEVEL", ST_CONF_STR, A(log_level), 0, 0, "info",
     "least important log records written: debug, info, warn or error"},
    {"log.format", "SANDTRAIL_LOG_FORMAT", ST_CONF_STR, A(log_format), 0, 0, "text",
     "text (one line a record) or json (one object a line, for log shippers); "
     "never event content"},
    {"alert.alertmanager.url", "SANDTRAIL_ALERTMANAGER_URL", ST_CONF_STR, A(am_url), 0, 0,
     NULL, "Prometheus Alertmanager base URL (alerts go to /api/v2/alerts); unset: none"},
    {"alert.link_template", "SANDTRAIL_ALERT_LINK", ST_CONF_STR, A(link_template), 0, 0,
     NULL,
     "link in every alert (generatorURL, webhook \"link\"); {finding_id}, {task_id} and "
     "{run_id} are replaced, e.g. "
     "http://grafana:3000/d/sandtrail?var-run={run_id}&var-finding={finding_id}"},
    {"alert.repeat_s", NULL, ST_CONF_INT, A(repeat_s), 5, 86400, "60",
     "Alertmanager: findings still open are sent again this often, endsAt 3 periods ahead"},
    {"alert.quiet_s", NULL, ST_CONF_INT, A(quiet_s), 0, 30 * 86400, "21600",
     "Alertmanager: an open finding with no new evidence for this long ends (0: never)"},
    {"alert.poll_ms", NULL, ST_CONF_INT, A(poll_ms), 50, 600000, "2000",
     "longest wait between looks at the outbox when no NOTIFY arrives"},
    {"alert.batch", NULL, ST_CONF_INT, A(batch), 1, 10000, "50",
     "notifications claimed in one transaction"},
    {"alert.backfill_s", NULL, ST_CONF_INT, A(backfill_s), 60, 365 * 86400, "86400",
     "a receiver gets notifications up to this old that it has not had (a new receiver, "
     "an alerter that was down)"},
    {"alert.http.timeout_ms", NULL, ST_CONF_INT, A(timeout_ms), 100, 120000, "5000",
     "longest wait for a receiver's answer (an attempt that times out is retried)"},
    {"alert.retry.max_attempts", NULL, ST_CONF_INT, A(max_attempts), 1, 1000, "10",
     "attempts before a delivery is marked failed"},
    {"alert.retry.backoff_ms", NULL, ST_CONF_INT, A(backoff_ms), 10, 3600000, "1000",
     "first retry delay; doubled per attempt, with jitter, at least Retry-After"},
    {"alert.retry.max_backoff_ms", NULL, ST_CONF_INT, A(max_backoff_ms), 10, 86400000,
     "300000", "longest delay between attempts (Retry-After included)"},
    {"alert.throttle.max", NULL, ST_CONF_INT, A(throttle_max), 0, 1000000, "20",
     "webhooks: per receiver and task, notifications sent in one window; the rest go "
     "into one digest when it closes (critical findings and resolutions are never "
     "held; 0: no throttling)"},
    {"alert.throttle.window_s", NULL, ST_CONF_INT, A(throttle_window_s), 1, 86400, "300",
     "length of the throttle window (aligned on the wall clock, shared by all alerters "
     "through Redis)"},
    {"alert.webhook.url", "SANDTRAIL_ALERT_WEBHOOK_URL", ST_CONF_STR,
     A(webhooks[0].url), 0, 0, NULL,
     "a webhook receiving signed sandtrail.alert.v1 documents; more as "
     "alert.webhook.N.url, .secret_file, .min_severity (N = 1..9)"},
    {"alert.webhook.secret_file", "SANDTRAIL_ALERT_WEBHOOK_SECRET_FILE", ST_CONF_STR,
     A(webhooks[0].secret_file), 0, 0, NULL,
     "file holding the webhook's HMAC-SHA256 secret (unset: unsigned)"},
    {"alert.webhook.min_severity", NULL, ST_CONF_STR, A(webhooks[0].min_severity), 0, 0,
     "low", "least severity the webhook receives (low, medium, high, critical)"},
    {NULL},
};

/* alert.webhook.N.url, .secret_file, .min_severity for N = 1..9 */
static int webhook_extra(void *arg, const char *name, const char *value, char *errstr,
                         size_t errsz)
{
    struct st_alerter_conf *c = arg;
    static const char prefix[] = "alert.webhook.";
    if (strncmp(name, prefix, sizeof(prefix) - 1))
        return 1;
    const char *p = name + sizeof(prefix) - 1;
    if (p[0] < '1' || p[0] > '9' || p[1] != '.')
        return 1;
    struct st_webhook_conf *w = &c->webhooks[p[0] - '0'];
    char **field;
    if (!strcmp(p + 2, "url"))
        field = &w->url;
    else if (!strcmp(p + 2, "secret_file"))
        field = &w->secret_file;
    else if (!strcmp(p + 2, "min_severity"))
        field = &w->min_severity;
    else
        return 1;
    free(*field);
    *field = st_strdup(value);
    return 0;
}

static void webhooks_fini(struct st_alerter_conf *c)
{
    for (int i = 1; i < ST_ALERT_MAX_WEBHOOKS; i++) {
        free(c->webhooks[i].url);
        free(c->webhooks[i].secret_file);
        free(c->webhooks[i].min_severity);
    }
}

static volatile sig_atomic_t stop;

static volatile sig_atomic_t hup;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        hup = 1; /* run() reloads at its next turn */
    else
        stop = 1;
}

/* What start-up read the configuration from (set once by main, then read
 * by the main thread only), for a reload. */
static struct {
    const char *config_file;
    char **sets;
    int nsets;
} origin;

/* SIGHUP: the configuration read again as at start; log.level applies now,
 * every other property that changed is logged as needing a restart. A
 * reload that fails changes nothing. @locality the main loop */
static void reload(const struct st_alerter_conf *running)
{
    static const char *const live[] = {"log.level", NULL};
    struct st_alerter_conf fresh;
    char errstr[512];
    hup = 0;
    memset(&fresh, 0, sizeof(fresh));
    if (st_conf_load(alerter_props, &fresh, origin.config_file, origin.sets, origin.nsets,
                     webhook_extra, &fresh, errstr, sizeof(errstr)) ||
        st_log_configure(fresh.log_level, NULL, errstr, sizeof(errstr))) {
        st_error("reload: %s; keeping every setting as it was", errstr);
    } else {
        st_conf_report_fixed(alerter_props, running, &fresh, live);
        st_info("reload: done (log.level=%s)", fresh.log_level);
    }
    webhooks_fini(&fresh);
    st_conf_fini(alerter_props, &fresh);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: sandtrail-alerter [--drain] [-c CONFIG] [-X name=value]...\n"
                 "       sandtrail-alerter --config-doc\n"
                 "\n"
                 "Sends the notifications that the analyzer and triage write to\n"
                 "PostgreSQL to Alertmanager and signed webhooks, and records every\n"
                 "attempt. --drain stops once everything is delivered or failed.\n");
}

struct alerter {
    struct st_alerter_conf conf;
    struct st_receiver rcv[ST_ALERT_MAX_WEBHOOKS + 1];
    size_t nrcv;
    struct st_queue *queue;
    struct st_throttle *throttle;
    struct st_metrics *metrics;
    struct st_metric *m_pending, *m_resend;
    int drain;
};

static const char *const severities[] = {"low", "medium", "high", "critical", NULL};

static int severity_ok(const char *s)
{
    for (int i = 0; severities[i]; i++)
        if (!strcmp(s, severities[i]))
            return 1;
    return 0;
}

static int receivers_init(struct alerter *al, char *errstr, size_t errsz)
{
    struct st_alerter_conf *c = &al->conf;
    if (c->am_url && *c->am_url) {
        struct st_receiver *r = &al->rcv[al->nrcv];
        snprintf(r->name, sizeof(r->name), "alertmanager");
        r->min_severity = "low";
        r->ops = &st_receiver_alertmanager;
        if (!(r->state = st_alertmanager_new(c, errstr, errsz)))
            return -1;
        al->nrcv++;
    }
    for (int i = 0; i < ST_ALERT_MAX_WEBHOOKS; i++) {
        struct st_webhook_conf *w = &c->webhooks[i];
        if (!w->url || !*w->url)
            continue;
        struct st_receiver *r = &al->rcv[al->nrcv];
        if (i == 0)
            snprintf(r->name, sizeof(r->name), "webhook");
        else
            snprintf(r->name, sizeof(r->name), "webhook.%d", i);
        r->min_severity = w->min_severity && *w->min_severity ? w->min_severity : "low";
        if (!severity_ok(r->min_severity)) {
            snprintf(errstr, errsz, "%s: min_severity \"%s\" is not one of low, medium, "
                     "high, critical", r->name, r->min_severity);
            return -1;
        }
        r->ops = &st_receiver_webhook;
        if (!(r->state = st_webhook_new(c, w, errstr, errsz))) {
            size_t n = strlen(errstr);
            snprintf(errstr + n, errsz - n, " (%s)", r->name);
            return -1;
        }
        al->nrcv++;
    }
    if (al->nrcv == 0) {
        snprintf(errstr, errsz, "no receiver configured: set alert.alertmanager.url or "
                                "alert.webhook.url");
        return -1;
    }
    return 0;
}

static struct st_receiver *receiver(struct alerter *al, const char *name)
{
    for (size_t i = 0; i < al->nrcv; i++)
        if (!strcmp(al->rcv[i].name, name))
            return &al->rcv[i];
    return NULL;
}

/* Exponential backoff with jitter, at least what Retry-After asked for;
 * -1 when the attempts are exhausted. */
static int64_t retry_delay(const struct alerter *al, int attempt,
                           const struct st_send_result *r)
{
    if (attempt >= al->conf.max_attempts)
        return -1;
    int64_t d = al->conf.backoff_ms;
    for (int i = 1; i < attempt && d < al->conf.max_backoff_ms; i++)
        d *= 2;
    if (d > al->conf.max_backoff_ms)
        d = al->conf.max_backoff_ms;
    d = d / 2 + (int64_t)(random() % (d / 2 + 1));
    if (r->retry_after_s >= 0 && r->retry_after_s * 1000 > d)
        d = r->retry_after_s * 1000;
    return d > al->conf.max_backoff_ms ? al->conf.max_backoff_ms : d;
}

static void count(struct alerter *al, const char *rcv, const char *outcome, int64_t n)
{
    char labels[128];
    snprintf(labels, sizeof(labels), "receiver=\"%s\",outcome=\"%s\"", rcv, outcome);
    st_metric_add(st_metric_get(al->metrics, ST_METRIC_COUNTER,
                                "sandtrail_alerter_deliveries_total",
                                "delivery attempts, by receiver and outcome", labels),
                  n);
}

/* Records the attempt of claimed row a (to receiver name) with its outcome
 * r: metrics, logs, SQL. Returns 0, or -1 with errstr set when PostgreSQL
 * failed (the claim is rolled back). */
static int record(struct alerter *al, const struct st_alert *a, const char *name,
                  int attempts, const struct st_send_result *r, char *errstr, size_t errsz)
{
    int64_t delay = r->outcome == ST_SEND_RETRY ? retry_delay(al, attempts + 1, r) : 0;
    const char *state = st_queue_record(al->queue, a->notification_id, name, attempts + 1,
                                        r, delay, NULL, errstr, errsz);
    if (!state)
        return -1;
    count(al, name, r->outcome == ST_SEND_DELIVERED ? "delivered"
                    : !strcmp(state, "failed")     ? "failed"
                                                   : "retry", 1);
    if (r->outcome == ST_SEND_DELIVERED) {
        char labels[64];
        snprintf(labels, sizeof(labels), "receiver=\"%s\"", name);
        st_metric_observe(st_metric_get(al->metrics, ST_METRIC_HISTOGRAM,
                                        "sandtrail_alerter_notify_seconds",
                                        "from the notification's commit to its delivery",
                                        labels),
                          (double)(st_time_now_us() - a->notified_us) / 1e6);
    } else if (!strcmp(state, "failed")) {
        st_error("delivery of notification %" PRId64 " (%s, finding %s) to %s failed for "
                 "good after %d attempt(s): %s",
                 a->notification_id, a->kind, a->finding_id, name, attempts + 1, r->error);
    } else {
        st_warn("delivery of notification %" PRId64 " to %s failed (%s), retrying in %" PRId64
                " ms",
                a->notification_id, name, r->error, delay);
    }
    return 0;
}

/* Sends one claimed row (or holds it for a digest) and records the
 * attempt. Returns 0, or -1 with errstr set when PostgreSQL failed. */
static int deliver(struct alerter *al, int i, char *errstr, size_t errsz)
{
    struct st_alert a;
    struct st_send_result r;
    const char *name;
    int attempts;
    st_queue_alert(al->queue, i, &a, &name, &attempts);
    struct st_receiver *rcv = receiver(al, name);
    if (!rcv)
        return 0; /* claimed only for our receivers */
    int64_t until = al->throttle && rcv->ops->send_digest
                        ? st_throttle_hold(al->throttle, name, &a)
                        : 0;
    if (until) {
        count(al, name, "held", 1);
        return st_queue_hold(al->queue, a.notification_id, name, attempts + 1, until, errstr,
                             errsz);
    }
    rcv->ops->send(rcv->state, &a, &r);
    return record(al, &a, name, attempts, &r, errstr, errsz);
}

/* Sends every claimed row of a receiver that takes batches in one request
 * and records each. Returns 0, or -1 with errstr set. */
static int deliver_batch(struct alerter *al, struct st_receiver *rcv, int n, char *errstr,
                         size_t errsz)
{
    struct st_alert *a = st_calloc((size_t)n, sizeof(*a));
    int *att = st_calloc((size_t)n, sizeof(*att));
    struct st_send_result r;
    const char *name;
    int k = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        st_queue_alert(al->queue, i, &a[k], &name, &att[k]);
        if (!strcmp(name, rcv->name))
            k++;
    }
    if (k > 0) {
        rcv->ops->send_batch(rcv->state, a, (size_t)k, &r);
        for (int i = 0; i < k && rc == 0; i++)
            rc = record(al, &a[i], rcv->name, att[i], &r, errstr, errsz);
    }
    free(att);
    free(a);
    return rc;
}

/* Claims and sends until nothing is due. Returns 0, or -1 with errstr. */
static int deliver_due(struct alerter *al, char *errstr, size_t errsz)
{
    int n = 0;
    while (!stop && (n = st_queue_claim(al->queue, (int)al->conf.batch, errstr, errsz)) > 0) {
        for (int i = 0; i < n; i++) {
            struct st_alert a;
            const char *name;
            int attempts;
            st_queue_alert(al->queue, i, &a, &name, &attempts);
            struct st_receiver *rcv = receiver(al, name);
            if (rcv && !rcv->ops->send_batch && deliver(al, i, errstr, errsz))
                return -1;
        }
        for (size_t j = 0; j < al->nrcv; j++)
            if (al->rcv[j].ops->send_batch &&
                deliver_batch(al, &al->rcv[j], n, errstr, errsz))
                return -1;
        if (st_queue_commit(al->queue, errstr, errsz))
            return -1;
    }
    return n < 0 ? -1 : 0;
}

/* Sends the digest of claimed held rows [i, j) (one receiver, one task)
 * and records the attempt for each. Returns 0, or -1 with errstr set. */
static int deliver_digest(struct alerter *al, int i, int j, char *errstr, size_t errsz)
{
    struct st_alert *items = st_calloc((size_t)(j - i), sizeof(*items));
    struct st_send_result r;
    const char *name;
    char id[96];
    int attempts = 0, rc = 0;
    for (int k = i; k < j; k++)
        st_queue_alert(al->queue, k, &items[k - i], &name, &attempts);
    struct st_receiver *rcv = receiver(al, name);
    st_digest_id(name, items[0].notification_id, id, sizeof(id));
    char *body = st_digest_body(id, al->conf.throttle_window_s,
                                st_queue_window_end(al->queue, i), items, (size_t)(j - i),
                                al->conf.link_template);
    rcv->ops->send_digest(rcv->state, id, body, &r);
    free(body);
    int64_t delay = r.outcome == ST_SEND_RETRY ? retry_delay(al, attempts + 1, &r) : 0;
    const char *state = NULL;
    for (int k = 0; k < j - i && rc == 0; k++) {
        st_queue_alert(al->queue, i + k, &items[k], &name, &attempts);
        if (!(state = st_queue_record(al->queue, items[k].notification_id, name, attempts + 1,
                                      &r, delay, id, errstr, errsz)))
            rc = -1;
    }
    if (rc == 0) {
        count(al, name, r.outcome == ST_SEND_DELIVERED ? "delivered"
                        : !strcmp(state, "failed")    ? "failed"
                                                      : "retry", j - i);
        if (!strcmp(state, "failed"))
            st_error("digest %s of %d notification(s) to %s failed for good: %s", id, j - i,
                     name, r.error);
        else if (r.outcome != ST_SEND_DELIVERED)
            st_warn("digest %s to %s failed (%s), retrying in %" PRId64 " ms", id, name,
                    r.error, delay);
    }
    free(items);
    return rc;
}

/* Sends the digests of every closed window. Returns 0, or -1 with errstr. */
static int deliver_digests(struct alerter *al, char *errstr, size_t errsz)
{
    int n = 0;
    while (!stop && (n = st_queue_claim_held(al->queue, 10000, errstr, errsz)) > 0) {
        struct st_alert a, b;
        const char *ra, *rb;
        int att;
        for (int i = 0, j; i < n; i = j) {
            st_queue_alert(al->queue, i, &a, &ra, &att);
            for (j = i + 1; j < n; j++) {
                st_queue_alert(al->queue, j, &b, &rb, &att);
                if (strcmp(ra, rb) || strcmp(a.task_id, b.task_id) ||
                    st_queue_window_end(al->queue, i) != st_queue_window_end(al->queue, j))
                    break;
            }
            if (receiver(al, ra)->ops->send_digest && deliver_digest(al, i, j, errstr, errsz))
                return -1;
        }
        if (st_queue_commit(al->queue, errstr, errsz))
            return -1;
    }
    return n < 0 ? -1 : 0;
}

/* Alertmanager forgets what is not sent again: every firing finding it
 * was told of, in requests of at most 200 alerts. */
static void resend_firing(struct alerter *al)
{
    struct st_receiver *am = receiver(al, "alertmanager");
    struct st_alert chunk[200];
    struct st_send_result r;
    char errstr[1024];
    const char *name;
    int attempts;
    int n = st_queue_firing(al->queue, errstr, sizeof(errstr));
    if (n < 0) {
        st_error("%s", errstr);
        return;
    }
    for (int i = 0; i < n; i += 200) {
        int k = n - i < 200 ? n - i : 200;
        for (int j = 0; j < k; j++)
            st_queue_alert(al->queue, i + j, &chunk[j], &name, &attempts);
        if (am->ops->resend(am->state, chunk, (size_t)k, &r))
            st_warn("could not re-send %d firing alert(s) to Alertmanager: %s", k, r.error);
        else
            st_metric_add(al->m_resend, k);
    }
}

static int run(struct alerter *al)
{
    char errstr[1024];
    int64_t backoff = 100, next_resend = 0;
    int has_am = receiver(al, "alertmanager") != NULL;

    while (!stop) {
        int64_t due_ms = -1;
        if (hup)
            reload(&al->conf);
        long pending;
        if (st_queue_fanout(al->queue, errstr, sizeof(errstr)) < 0 ||
            deliver_due(al, errstr, sizeof(errstr)) ||
            deliver_digests(al, errstr, sizeof(errstr)) ||
            (pending = st_queue_pending(al->queue, &due_ms, errstr, sizeof(errstr))) < 0) {
            st_error("%s (retrying in %" PRId64 " ms)", errstr, backoff);
            usleep((useconds_t)backoff * 1000);
            backoff = backoff * 2 > 30000 ? 30000 : backoff * 2;
            continue;
        }
        backoff = 100;
        st_metric_set(al->m_pending, pending);
        int64_t wait = al->conf.poll_ms;
        if (al->drain && pending == 0)
            return 0;
        if (has_am && !al->drain && st_time_mono_ms() >= next_resend) {
            resend_firing(al);
            next_resend = st_time_mono_ms() + al->conf.repeat_s * 1000;
        }
        if (due_ms >= 0 && due_ms < wait)
            wait = due_ms;
        if (wait > 0)
            st_queue_wait(al->queue, wait);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"drain", no_argument, NULL, 'd'},
        {"config", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, 'X'},
        {"config-doc", no_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct alerter al;
    char errstr[1024];
    const char *config_file = NULL;
    char **sets = st_calloc((size_t)argc, sizeof(*sets));
    int nsets = 0, c, status = 1;

    memset(&al, 0, sizeof(al));
    st_log_init("sandtrail-alerter", ST_LOG_INFO);
    while ((c = getopt_long(argc, argv, "c:X:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': al.drain = 1; break;
        case 'c': config_file = optarg; break;
        case 'X': sets[nsets++] = optarg; break;
        case 'D': st_conf_print_doc(alerter_props, stdout); free(sets); return 0;
        case 'h': usage(stdout); free(sets); return 0;
        default: usage(stderr); free(sets); return 64;
        }
    }
    if (optind != argc) {
        usage(stderr);
        free(sets);
        return 64;
    }
    int bad = st_conf_load(alerter_props, &al.conf, config_file, sets, nsets, webhook_extra,
                           &al.conf, errstr, sizeof(errstr)) ||
              receivers_init(&al, errstr, sizeof(errstr));
    origin.config_file = config_file;
    origin.sets = sets; /* freed at exit: a reload reads them again */
    origin.nsets = nsets;
    if (!bad)
        bad = st_log_configure(al.conf.log_level, al.conf.log_format, errstr,
                               sizeof(errstr));
    if (bad) {
        st_error("%s", errstr);
        status = 78;
        goto out;
    }
    {
        /* the analyzer or `sandtrail migrate` migrates; the alerter only makes
         * sure the schema is the one this release knows */
        PGconn *pg = st_pg_connect(al.conf.pg_dsn, errstr, sizeof(errstr));
        if (!pg || st_pg_schema_check(pg, al.conf.sql_dir ? al.conf.sql_dir
                                                          : SANDTRAIL_SQL_DIR,
                                      errstr, sizeof(errstr))) {
            st_error("%s", errstr);
            PQfinish(pg);
            goto out;
        }
        PQfinish(pg);
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    srandom((unsigned)(st_time_now_us() ^ getpid()));

    al.metrics = st_metrics_new();
    al.m_pending = st_metric_get(al.metrics, ST_METRIC_GAUGE, "sandtrail_alerter_pending",
                                 "notifications waiting to be sent, all receivers", "");
    al.m_resend = st_metric_get(al.metrics, ST_METRIC_COUNTER,
                                "sandtrail_alerter_resent_total",
                                "firing alerts sent to Alertmanager again", "");
    if (st_metrics_serve(al.metrics, al.conf.metrics_listen, errstr, sizeof(errstr)) ||
        !(al.queue = st_queue_new(&al.conf, al.rcv, al.nrcv, errstr, sizeof(errstr))) ||
        (al.conf.throttle_max > 0 &&
         !(al.throttle = st_throttle_new(&al.conf, errstr, sizeof(errstr))))) {
        st_error("%s", errstr);
        goto out;
    }
    st_metrics_set_ready(al.metrics, NULL);
    for (size_t i = 0; i < al.nrcv; i++)
        st_info("receiver %s (%s, from severity %s)", al.rcv[i].name, al.rcv[i].ops->kind,
                al.rcv[i].min_severity);
    status = run(&al) ? 1 : 0;
out:
    st_throttle_destroy(al.throttle);
    st_queue_destroy(al.queue);
    for (size_t i = 0; i < al.nrcv; i++)
        al.rcv[i].ops->destroy(al.rcv[i].state);
    st_metrics_destroy(al.metrics);
    webhooks_fini(&al.conf);
    st_conf_fini(alerter_props, &al.conf);
    free(sets);
    return status;
}
