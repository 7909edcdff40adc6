/* digest.h: the sandtrail.alert.v1 digest of the findings a throttle window
 * held for one receiver and task (see throttle.h). */
#ifndef ST_ALERT_DIGEST_H
#define ST_ALERT_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "alerter.h"

/* The digest's delivery id: stable for the same held rows, so a retried
 * digest carries the same X-Sandtrail-Delivery. Writes into out. */
void st_digest_id(const char *receiver, int64_t first_notification_id, char *out,
                  size_t size);

/* The digest document of the n alerts (n >= 1, one task, one window
 * ending at window_end_s). Caller frees. */
char *st_digest_body(const char *delivery_id, int64_t window_s, int64_t window_end_s,
                     const struct st_alert *a, size_t n, const char *link_template);

#endif
