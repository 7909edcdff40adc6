/* webhook.h: the webhook receiver's signing and posting, also used for
 * digests (see receivers/webhook.c). */
#ifndef ST_ALERT_WEBHOOK_H
#define ST_ALERT_WEBHOOK_H

#include <stddef.h>

#include "alerter.h"

/* Writes "sha256=<hex HMAC-SHA256(secret, timestamp "." body)>" into out. */
void st_webhook_sign(const char *secret, size_t secret_len, const char *timestamp,
                     const char *body, size_t len, char out[72]);

/* POSTs a document (body, not consumed) to the webhook whose state this is,
 * with the delivery, timestamp and signature headers. */
void st_webhook_post(void *state, const char *delivery_id, const char *body,
                     struct st_send_result *r);

#endif
