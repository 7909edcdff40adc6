/* alerter.h: sandtrail-alerter's configuration (one table, in main.c), the
 * notification as the receivers see it, and the receiver interface.
 *
 * A receiver (receivers/alertmanager.c, receivers/webhook.c) is one file
 * behind `const struct st_receiver_ops`; main.c builds one instance per
 * configured destination and knows only the ops. */
#ifndef ST_ALERTER_H
#define ST_ALERTER_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define ST_ALERT_MAX_WEBHOOKS 10 /* alert.webhook.* and alert.webhook.1..9.* */

struct st_webhook_conf {
    char *url;
    char *secret_file;
    char *min_severity;
};

struct st_alerter_conf {
    char *pg_dsn;
    char *redis_url;
    char *redis_password_file;
    char *redis_prefix;
    char *metrics_listen;
    char *sql_dir;           /* sql.dir: the migrations this release knows */
    char *log_level;         /* log.level */
    char *log_format;        /* log.format */
    char *am_url;            /* alert.alertmanager.url; NULL or "": off */
    char *link_template;     /* alert.link_template */
    int64_t repeat_s;        /* alert.repeat_s */
    int64_t quiet_s;         /* alert.quiet_s (0: never quiet) */
    int64_t poll_ms;
    int64_t batch;
    int64_t backfill_s;
    int64_t timeout_ms;
    int64_t max_attempts;
    int64_t backoff_ms;
    int64_t max_backoff_ms;
    int64_t throttle_max;    /* alert.throttle.max (0: off) */
    int64_t throttle_window_s;
    struct st_webhook_conf webhooks[ST_ALERT_MAX_WEBHOOKS];
};

/* One finding as an alert: a claimed notification (or, for Alertmanager's
 * re-sends, the finding's current state). Strings belong to the PGresult
 * they were read from. */
struct st_alert {
    int64_t notification_id;   /* 0 for a re-send */
    const char *delivery_id;   /* X-Sandtrail-Delivery */
    const char *kind;          /* created, severity_raised, resolved, dismissed */
    const char *severity;
    const char *finding_id;
    const char *detector;
    const char *status;        /* the finding's, now */
    const char *task_id;
    const char *run_id;
    const char *summary;
    const char *first_seen;    /* RFC 3339 */
    const char *last_seen;
    const char *event_count;
    const char *targets;       /* JSON array text */
    const char *platform;      /* source platform, "" when unknown */
    const char *lower_severities; /* notified before the current one, "{...}" */
    int64_t ends_at_us;        /* when the alert ends (past: resolved) */
    int64_t notified_us;       /* the notification's commit time */
};

enum st_send_outcome { ST_SEND_DELIVERED, ST_SEND_RETRY, ST_SEND_FAILED };

struct st_send_result {
    enum st_send_outcome outcome;
    long http_status;          /* 0 when no answer came */
    int64_t retry_after_s;     /* from Retry-After, -1 when absent */
    char error[256];
};

/* One destination. @locality: the alerter's main thread. */
struct st_receiver_ops {
    const char *kind;
    /* Sends one notification. Never fails outright: the outcome says what
     * happened. */
    void (*send)(void *state, const struct st_alert *a, struct st_send_result *r);
    /* Sends n notifications in one request, one outcome for all; NULL when
     * the receiver takes one document per request. */
    void (*send_batch)(void *state, const struct st_alert *a, size_t n,
                       struct st_send_result *r);
    /* Sends n findings that are still firing again (Alertmanager forgets
     * alerts that are not re-sent); NULL when the receiver needs none.
     * Returns 0, or -1 with r set. */
    int (*resend)(void *state, const struct st_alert *a, size_t n, struct st_send_result *r);
    /* Sends a digest document (digest.c); NULL when the receiver is not
     * throttled (Alertmanager groups alerts itself and must hold each one
     * to resolve it). */
    void (*send_digest)(void *state, const char *delivery_id, const char *body,
                        struct st_send_result *r);
    void (*destroy)(void *state);
};

struct st_receiver {
    char name[32];             /* "alertmanager", "webhook", "webhook.3" */
    const char *min_severity;  /* low, medium, high or critical */
    const struct st_receiver_ops *ops;
    void *state;
};

extern const struct st_receiver_ops st_receiver_alertmanager;
extern const struct st_receiver_ops st_receiver_webhook;

/* Creates a receiver's state. Return NULL with errstr set. */
void *st_alertmanager_new(const struct st_alerter_conf *conf, char *errstr, size_t errsz);
void *st_webhook_new(const struct st_alerter_conf *conf, const struct st_webhook_conf *wh,
                     char *errstr, size_t errsz);

/* The sandtrail.alert.v1 object of one finding (schemas/alert.schema.json).
 * Caller owns the result. */
cJSON *st_alert_json(const struct st_alert *a, const char *link_template);

/* The link of a finding: link_template with {finding_id}, {task_id} and
 * {run_id} replaced by their URL-encoded values. Caller frees; NULL when
 * the template is unset or empty. */
char *st_alert_link(const char *link_template, const struct st_alert *a);

#endif
