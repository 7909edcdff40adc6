/* http_tls.h: HTTPS for the collector's listener (libmicrohttpd with
 * GnuTLS). With http.tls_cert_file and http.tls_key_file set, the listener
 * speaks TLS only: a plaintext request gets no answer. */
#ifndef ST_HTTP_TLS_H
#define ST_HTTP_TLS_H

#include <stddef.h>

#include <microhttpd.h>

#include "collector.h"

struct st_http_tls {
    char *cert;                     /* PEM, owned */
    char *key;                      /* PEM, owned, wiped when freed */
    unsigned int flags;             /* MHD_USE_TLS, or 0 */
    struct MHD_OptionItem opts[3];  /* for MHD_OPTION_ARRAY; ends with END */
};

/* Reads the certificate chain and key that conf names, both or neither.
 * Neither: t->flags is 0 and t->opts is empty (plain HTTP). Returns 0, or -1
 * with errstr naming the property or file (a half configuration, an
 * unreadable or empty file, a libmicrohttpd built without TLS). */
int st_http_tls_init(struct st_http_tls *t, const struct st_collector_conf *conf,
                     char *errstr, size_t errsz);

/* Frees what init read. Accepts a zeroed t. */
void st_http_tls_fini(struct st_http_tls *t);

#endif
