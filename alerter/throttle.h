/* throttle.h: per receiver and task, at most alert.throttle.max
 * notifications per alert.throttle.window_s, counted in Redis so that every
 * alerter shares the count. Windows are aligned on the wall clock
 * (floor(now / window)), so all alerters agree on them. A notification over
 * the limit is held (notification_queue.state = 'held' until the window
 * ends) and goes out in the window's digest (digest.c). Critical findings
 * and the end of an alert are never held. When Redis cannot be reached the
 * throttle lets everything through: too many notifications, never a lost
 * one. */
#ifndef ST_ALERT_THROTTLE_H
#define ST_ALERT_THROTTLE_H

#include <stddef.h>
#include <stdint.h>

#include "alerter.h"

struct st_throttle;

/* Returns NULL with errstr set on a malformed redis.url (a Redis that is
 * down is not an error: it is tried again at each use). */
struct st_throttle *st_throttle_new(const struct st_alerter_conf *conf, char *errstr,
                                    size_t errsz);
void st_throttle_destroy(struct st_throttle *t); /* accepts NULL */

/* Counts a in its receiver's and task's window. Returns 0 to send it now,
 * or the end of its window (Unix seconds) when it is to be held. */
int64_t st_throttle_hold(struct st_throttle *t, const char *receiver,
                         const struct st_alert *a);

#endif
