/* queue.h: the alerter's side of the outbox in PostgreSQL (see
 * sql/003_alerts.sql).
 *
 * notifications -> notification_queue (one row per receiver, added by
 * st_queue_fanout) -> claimed with FOR UPDATE SKIP LOCKED inside a
 * transaction that stays open while they are sent, so a killed alerter's
 * claims return to the queue -> each attempt recorded in deliveries. */
#ifndef ST_ALERT_QUEUE_H
#define ST_ALERT_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "alerter.h"

struct st_queue;

/* Connects twice (work and LISTEN). Returns NULL with errstr set. */
struct st_queue *st_queue_new(const struct st_alerter_conf *conf,
                              const struct st_receiver *rcv, size_t nrcv, char *errstr,
                              size_t errsz);
void st_queue_destroy(struct st_queue *q);

/* Adds a queue row per receiver for every recent notification at or above
 * its minimum severity that has none. Returns rows added, or -1 with
 * errstr set. */
long st_queue_fanout(struct st_queue *q, char *errstr, size_t errsz);

/* Opens a transaction and claims up to limit due rows. Returns how many,
 * or -1 with errstr set (no transaction left open). st_queue_alert reads
 * one claimed row. */
int st_queue_claim(struct st_queue *q, int limit, char *errstr, size_t errsz);

/* As st_queue_claim, for held rows whose window has closed, ordered by
 * receiver and task so that each digest's rows are consecutive. */
int st_queue_claim_held(struct st_queue *q, int limit, char *errstr, size_t errsz);

/* The end of row i's throttle window (Unix seconds), after
 * st_queue_claim_held. */
int64_t st_queue_window_end(const struct st_queue *q, int i);

/* Records that a claimed row is held for the digest sent at until_s.
 * Returns 0, or -1 with errstr set. */
int st_queue_hold(struct st_queue *q, int64_t notification_id, const char *receiver,
                  int attempt, int64_t until_s, char *errstr, size_t errsz);

/* Row i of the last claim or st_queue_firing: its alert, its receiver and
 * its attempts so far. Strings live until the next claim or firing. */
void st_queue_alert(const struct st_queue *q, int i, struct st_alert *a,
                    const char **receiver, int *attempts);

/* Records one attempt of a claimed row: delivered, failed for good, or
 * retried after retry_ms (-1: attempts exhausted, failed). digest_id (may
 * be NULL) names the digest that carried it; a digest's rows stay held
 * until it is retried. Returns the row's state ("delivered", "pending",
 * "held", "failed"), or NULL with errstr set. */
const char *st_queue_record(struct st_queue *q, int64_t notification_id,
                            const char *receiver, int attempt,
                            const struct st_send_result *r, int64_t retry_ms,
                            const char *digest_id, char *errstr, size_t errsz);

/* Commits the claim transaction. Returns 0, or -1 with errstr set. */
int st_queue_commit(struct st_queue *q, char *errstr, size_t errsz);

/* Rows still pending or held for our receivers, and the milliseconds until the
 * next is due (0 when one is due now). -1 with errstr set on error. */
long st_queue_pending(struct st_queue *q, int64_t *due_ms, char *errstr, size_t errsz);

/* Findings still firing that Alertmanager has been told of. Returns their
 * number (read them with st_queue_alert), or -1 with errstr set. */
int st_queue_firing(struct st_queue *q, char *errstr, size_t errsz);

/* Waits up to timeout_ms for a NOTIFY on sandtrail_alerts. Returns 1 when
 * woken, 0 on timeout, -1 when the LISTEN connection was lost (it is
 * reopened on the next call). */
int st_queue_wait(struct st_queue *q, int64_t timeout_ms);

#endif
