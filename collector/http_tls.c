/* http_tls.c: HTTPS for the collector's listener (see http_tls.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "http_tls.h"
#include "log.h"

/* A whole PEM file, or NULL with errstr naming the property and file. */
static char *read_pem(const char *prop, const char *path, char *errstr, size_t errsz)
{
    char chunk[4096];
    size_t n;
    struct st_buf b;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(errstr, errsz, "could not open %s \"%s\": %s", prop, path, strerror(errno));
        return NULL;
    }
    st_buf_init(&b);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len < 1024 * 1024)
        st_buf_add(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    explicit_bzero(chunk, sizeof(chunk));
    if (bad || !b.data || !strstr(b.data, "-----BEGIN ")) {
        snprintf(errstr, errsz, "%s \"%s\" is not a PEM file", prop, path);
        if (b.data)
            explicit_bzero(b.data, b.len);
        st_buf_fini(&b);
        return NULL;
    }
    return b.data;
}

int st_http_tls_init(struct st_http_tls *t, const struct st_collector_conf *conf,
                     char *errstr, size_t errsz)
{
    const char *cert = conf->http_tls_cert, *key = conf->http_tls_key;
    int has_cert = cert && *cert, has_key = key && *key;

    memset(t, 0, sizeof(*t));
    t->opts[0].option = MHD_OPTION_END;
    if (!has_cert && !has_key)
        return 0;
    if (!has_cert || !has_key) {
        snprintf(errstr, errsz, "http.tls_cert_file and http.tls_key_file go together: "
                                "set both for HTTPS, neither for plain HTTP");
        return -1;
    }
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(errstr, errsz, "HTTPS asked for (http.tls_cert_file) but libmicrohttpd "
                                "was built without TLS");
        return -1;
    }
    if (!(t->cert = read_pem("http.tls_cert_file", cert, errstr, errsz)) ||
        !(t->key = read_pem("http.tls_key_file", key, errstr, errsz))) {
        st_http_tls_fini(t);
        return -1;
    }
    t->flags = MHD_USE_TLS;
    t->opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, t->cert};
    t->opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, t->key};
    t->opts[2] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return 0;
}

void st_http_tls_fini(struct st_http_tls *t)
{
    if (t->key)
        explicit_bzero(t->key, strlen(t->key));
    free(t->key);
    free(t->cert);
    memset(t, 0, sizeof(*t));
    t->opts[0].option = MHD_OPTION_END;
}
