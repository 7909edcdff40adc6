/* private_destination.c: a proxy request to the local host, the internal
 * network or the cloud metadata service.
 *
 * Fires on every request event whose attrs.host or attrs.dst_ip names a
 * loopback, unspecified, private (RFC 1918), CGNAT, link-local, metadata or
 * unique-local IPv6 address, allowed or not: an agent has no business there,
 * and a denied attempt is still an attempt. Addresses are recognised in
 * every spelling the C library accepts (ipclass.c), so "2852039166",
 * "0xA9FEA9FE" and "169.254.169.254" are one destination.
 *
 * One finding per run and destination (class and canonical address).
 * Severity: the metadata address is critical when the request was allowed,
 * high otherwise; any other class is high when allowed, medium otherwise.
 * Severity only rises, so a run that was once let through stays at the
 * higher level; the summary describes the latest request.
 *
 * No state: each event decides alone, and the finding id depends only on
 * the run and the destination, so a retried or replayed batch updates the
 * same finding with the same evidence. */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "ipclass.h"
#include "json.h"
#include "log.h"

#define NAME "private_destination"
#define VERSION 1
#define HOST_MAX 64 /* bytes of the written host quoted in a summary */

/* How bad reaching a class is, to choose between attrs.host and dst_ip. */
static int badness(enum st_ipclass c)
{
    switch (c) {
    case ST_IP_METADATA: return 7;
    case ST_IP_LOOPBACK: return 6;
    case ST_IP_UNSPECIFIED: return 5;
    case ST_IP_LINK_LOCAL: return 4;
    case ST_IP_PRIVATE: return 3;
    case ST_IP_UNIQUE_LOCAL: return 2;
    case ST_IP_CGNAT: return 1;
    case ST_IP_PUBLIC: break;
    }
    return 0;
}

static enum st_severity severity(enum st_ipclass c, enum st_decision d)
{
    if (c == ST_IP_METADATA)
        return d == ST_DECISION_ALLOW ? ST_SEV_CRITICAL : ST_SEV_HIGH;
    return d == ST_DECISION_ALLOW ? ST_SEV_HIGH : ST_SEV_MEDIUM;
}

static const char *decision_word(enum st_decision d)
{
    switch (d) {
    case ST_DECISION_ALLOW: return "allowed";
    case ST_DECISION_DENY: return "denied";
    case ST_DECISION_ERROR: break;
    }
    return "failed";
}

/* The class as the summary names it. The metadata addresses are
 * 169.254.169.254 (in any IPv4 or IPv6 spelling), which is link-local, and
 * fd00:ec2::254, which is unique-local. */
static const char *class_words(enum st_ipclass c, const char *canon)
{
    if (c != ST_IP_METADATA)
        return st_ipclass_name(c);
    return strcmp(canon, "fd00:ec2::254") == 0 ? "unique_local metadata"
                                               : "link_local metadata";
}

/* The host as the agent wrote it, quoted into a summary: at most HOST_MAX
 * bytes, never a split UTF-8 character, with '"', '\' and control
 * characters escaped, "..." when cut. Only this text and the class reach the
 * summary: never a path or content. */
static void add_written(struct st_buf *b, const char *host)
{
    size_t len = strlen(host);
    char *cut = st_utf8_sanitize(host, len, HOST_MAX);

    st_buf_addc(b, '"');
    for (const unsigned char *p = (const unsigned char *)cut; *p; p++) {
        if (*p == '"' || *p == '\\') {
            st_buf_addc(b, '\\');
            st_buf_addc(b, (char)*p);
        } else if (*p < 0x20 || *p == 0x7f) {
            st_buf_printf(b, "\\x%02x", *p);
        } else {
            st_buf_addc(b, (char)*p);
        }
    }
    if (strlen(cut) < len)
        st_buf_adds(b, "...");
    st_buf_addc(b, '"');
    free(cut);
}

static void *pd_create(const struct st_analyzer_conf *conf)
{
    (void)conf;
    return NULL;
}

static void pd_destroy(void *state)
{
    (void)state;
}

static void pd_begin_batch(void *state, size_t nevents)
{
    (void)state;
    (void)nevents;
}

static void pd_feed(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    char hnorm[ST_IPCLASS_NORM_MAX], dnorm[ST_IPCLASS_NORM_MAX];

    (void)state;
    if (ev->type != ST_TYPE_REQUEST)
        return;
    const char *host = st_event_attr_str(ev, "host");
    const char *dst = st_event_attr_str(ev, "dst_ip");
    enum st_ipclass hc = st_ipclass_classify(host, hnorm, sizeof(hnorm));
    enum st_ipclass dc = st_ipclass_classify(dst, dnorm, sizeof(dnorm));
    /* the worse class wins (a public name that resolved to 169.254.169.254
     * is a metadata request); on a tie the address the proxy connected to
     * names the destination */
    enum st_ipclass c = hc;
    const char *canon = hnorm;
    if (badness(dc) >= badness(hc)) {
        c = dc;
        canon = dnorm;
    }
    if (c == ST_IP_PUBLIC)
        return;
    const char *written = host ? host : dst;

    struct st_buf key, summary;
    st_buf_init(&key);
    st_buf_init(&summary);
    st_buf_printf(&key, "%s:%s", st_ipclass_name(c), canon);
    st_buf_printf(&summary, "request to %s address %s", class_words(c, canon), canon);
    if (strcmp(written, canon) != 0) {
        st_buf_adds(&summary, " (written ");
        add_written(&summary, written);
        st_buf_addc(&summary, ')');
    }
    st_buf_printf(&summary, ", %s", decision_word(ev->decision));

    char id[33];
    st_finding_id(id, NAME, ev->task_id, ev->run_id, key.data);
    struct st_finding *f =
        st_findings_update(ctx->findings, id, NAME, VERSION, severity(c, ev->decision),
                           ev->task_id, ev->run_id, ev->ts_us, ev->ts_us, summary.data);
    st_finding_add_event(f, ev->source_name, ev->event_id, ctx->late);
    st_buf_fini(&key);
    st_buf_fini(&summary);
}

static void pd_end_batch(void *state, struct st_detect_ctx *ctx)
{
    (void)state;
    (void)ctx;
}

static void pd_reset_batch(void *state)
{
    (void)state;
}

const struct st_detector_ops st_private_destination_ops = {
    .name = NAME,
    .version = VERSION,
    /* no state: any worker may run it */
    .scope = ST_DETECT_PER_RUN,
    .create = pd_create,
    .destroy = pd_destroy,
    .begin_batch = pd_begin_batch,
    .feed = pd_feed,
    .end_batch = pd_end_batch,
    .reset_batch = pd_reset_batch,
};
