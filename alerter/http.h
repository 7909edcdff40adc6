/* http.h: one JSON POST over libcurl, classified the way every receiver
 * treats its answer: 2xx delivered; 408, 429, 5xx and transport errors
 * retried (with the Retry-After the server asked for); any other status
 * failed for good. */
#ifndef ST_ALERT_HTTP_H
#define ST_ALERT_HTTP_H

#include <stddef.h>

#include "alerter.h"

struct st_http;

/* A client reusing its connections; timeout_ms bounds each request. */
struct st_http *st_http_new(long timeout_ms);
void st_http_destroy(struct st_http *h); /* accepts NULL */

/* POSTs body (application/json) to url with the extra header lines given
 * ("Name: value", NULL-terminated array, may be NULL) and fills r. The
 * answer's body is read and dropped. */
void st_http_post_json(struct st_http *h, const char *url, const char *const *headers,
                       const char *body, size_t len, struct st_send_result *r);

#endif
