/* test_ipclass.c: destination classification in every spelling a resolver
 * accepts, and the private_destination detector built on it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detect.h"
#include "event.h"
#include "findings.h"
#include "ipclass.h"

struct want {
    const char *host;
    enum st_ipclass cls;
    const char *norm; /* "" when the text is not an address */
};

static void check_table(const struct want *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char norm[ST_IPCLASS_NORM_MAX];
        enum st_ipclass c = st_ipclass_classify(w[i].host, norm, sizeof(norm));
        ck_assert_msg(c == w[i].cls, "\"%s\": class %s, want %s", w[i].host,
                      st_ipclass_name(c), st_ipclass_name(w[i].cls));
        ck_assert_msg(strcmp(norm, w[i].norm) == 0, "\"%s\": norm \"%s\", want \"%s\"",
                      w[i].host, norm, w[i].norm);
    }
}

#define CHECK_TABLE(t) check_table(t, sizeof(t) / sizeof(t[0]))

START_TEST(ipclass_metadata_in_every_ipv4_spelling)
{
    static const struct want t[] = {
        {"169.254.169.254", ST_IP_METADATA, "169.254.169.254"},
        {"2852039166", ST_IP_METADATA, "169.254.169.254"},          /* one decimal */
        {"0xA9FEA9FE", ST_IP_METADATA, "169.254.169.254"},          /* one hex */
        {"0XA9FEA9FE", ST_IP_METADATA, "169.254.169.254"},
        {"0xa9fea9fe", ST_IP_METADATA, "169.254.169.254"},
        {"0251.0376.0251.0376", ST_IP_METADATA, "169.254.169.254"}, /* octal */
        {"169.254.43518", ST_IP_METADATA, "169.254.169.254"},       /* 3 parts */
        {"169.16689662", ST_IP_METADATA, "169.254.169.254"},        /* 2 parts */
        {"0xa9.0xfe.0xa9.0xfe", ST_IP_METADATA, "169.254.169.254"},
        {"169.254.169.254.", ST_IP_METADATA, "169.254.169.254"}, /* FQDN dot */
        {"169.254.169.254:80", ST_IP_METADATA, "169.254.169.254"},
        {"0xA9FEA9FE:80", ST_IP_METADATA, "169.254.169.254"},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_loopback_in_every_ipv4_spelling)
{
    static const struct want t[] = {
        {"127.0.0.1", ST_IP_LOOPBACK, "127.0.0.1"},
        {"127.1", ST_IP_LOOPBACK, "127.0.0.1"},
        {"0x7f.1", ST_IP_LOOPBACK, "127.0.0.1"},
        {"017700000001", ST_IP_LOOPBACK, "127.0.0.1"},
        {"2130706433", ST_IP_LOOPBACK, "127.0.0.1"},
        {"0177.0.0.1", ST_IP_LOOPBACK, "127.0.0.1"},
        {"127.0.0.1.", ST_IP_LOOPBACK, "127.0.0.1"},
        {"127.0.0.1:443", ST_IP_LOOPBACK, "127.0.0.1"},
        {"127.0.0.1:", ST_IP_LOOPBACK, "127.0.0.1"}, /* empty port: default */
        {"127.255.255.254", ST_IP_LOOPBACK, "127.255.255.254"},
        /* leading zeros are legal and unbounded: longer than any buffer */
        {"000000000000000000000000000000000000000000000000000000000000000000000177.1",
         ST_IP_LOOPBACK, "127.0.0.1"},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_ipv6_loopback_brackets_and_port)
{
    static const struct want t[] = {
        {"::1", ST_IP_LOOPBACK, "::1"},
        {"[::1]", ST_IP_LOOPBACK, "::1"},
        {"[::1]:8080", ST_IP_LOOPBACK, "::1"},
        {"0:0:0:0:0:0:0:1", ST_IP_LOOPBACK, "::1"},
        {"::0.0.0.1", ST_IP_LOOPBACK, "::1"},
        {"::", ST_IP_UNSPECIFIED, "::"},
        {"[::]:80", ST_IP_UNSPECIFIED, "::"},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_embedded_ipv4_is_classified_by_the_ipv4)
{
    static const struct want t[] = {
        {"::ffff:127.0.0.1", ST_IP_LOOPBACK, "::ffff:127.0.0.1"},
        {"::ffff:7f00:1", ST_IP_LOOPBACK, "::ffff:127.0.0.1"},
        {"[::ffff:127.0.0.1]:443", ST_IP_LOOPBACK, "::ffff:127.0.0.1"},
        {"::ffff:a9fe:a9fe", ST_IP_METADATA, "::ffff:169.254.169.254"},
        {"::FFFF:169.254.169.254", ST_IP_METADATA, "::ffff:169.254.169.254"},
        {"[::ffff:10.1.2.3]:8443", ST_IP_PRIVATE, "::ffff:10.1.2.3"},
        {"::ffff:0.0.0.0", ST_IP_UNSPECIFIED, "::ffff:0.0.0.0"},
        {"::ffff:8.8.8.8", ST_IP_PUBLIC, "::ffff:8.8.8.8"},
        {"64:ff9b::a9fe:a9fe", ST_IP_METADATA, "64:ff9b::a9fe:a9fe"}, /* NAT64 */
        {"64:ff9b::127.0.0.1", ST_IP_LOOPBACK, "64:ff9b::7f00:1"},
        {"64:ff9b::808:808", ST_IP_PUBLIC, "64:ff9b::808:808"},
        {"::127.0.0.1", ST_IP_LOOPBACK, "::127.0.0.1"}, /* IPv4-compatible */
        {"::7f00:1", ST_IP_LOOPBACK, "::127.0.0.1"},
        {"::a9fe:a9fe", ST_IP_METADATA, "::169.254.169.254"},
        /* ::0.x.x.x is no IPv4-compatible address: plain IPv6 */
        {"::2", ST_IP_PUBLIC, "::2"},
        /* IPv4-translated (SIIT) ::ffff:0:0:0/96 */
        {"::ffff:0:127.0.0.1", ST_IP_LOOPBACK, "::ffff:0:7f00:1"},
        {"::ffff:0:7f00:1", ST_IP_LOOPBACK, "::ffff:0:7f00:1"},
        {"::ffff:0:a9fe:a9fe", ST_IP_METADATA, "::ffff:0:a9fe:a9fe"},
        /* NAT64 local-use 64:ff9b:1::/48: last 32 bits, or RFC 6052's /48
         * position around the u octet */
        {"64:ff9b:1::7f00:1", ST_IP_LOOPBACK, "64:ff9b:1::7f00:1"},
        {"64:ff9b:1::a9fe:a9fe", ST_IP_METADATA, "64:ff9b:1::a9fe:a9fe"},
        {"64:ff9b:1:a9fe:a9:fe00::", ST_IP_METADATA, "64:ff9b:1:a9fe:a9:fe00::"},
        {"64:ff9b:1::808:808", ST_IP_PUBLIC, "64:ff9b:1::808:808"},
        /* 6to4 2002:AABB:CCDD::/48 */
        {"2002:7f00:1::", ST_IP_LOOPBACK, "2002:7f00:1::"},
        {"[2002:a9fe:a9fe::1]:80", ST_IP_METADATA, "2002:a9fe:a9fe::1"},
        {"2002:c0a8:101::1", ST_IP_PRIVATE, "2002:c0a8:101::1"},
        {"2002:808:808::1", ST_IP_PUBLIC, "2002:808:808::1"},
        /* near misses: no embedding */
        {"::1:ffff:7f00:1", ST_IP_PUBLIC, "::1:ffff:7f00:1"},
        {"64:ff9b:2::7f00:1", ST_IP_PUBLIC, "64:ff9b:2::7f00:1"},
        {"2003:7f00:1::", ST_IP_PUBLIC, "2003:7f00:1::"},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_ipv6_link_local_unique_local_and_zones)
{
    static const struct want t[] = {
        {"fe80::1%eth0", ST_IP_LINK_LOCAL, "fe80::1"},
        {"fe80::1", ST_IP_LINK_LOCAL, "fe80::1"},
        {"[fe80::1%25eth0]:80", ST_IP_LINK_LOCAL, "fe80::1"},
        {"[fe80::a:b%2]", ST_IP_LINK_LOCAL, "fe80::a:b"},
        {"febf:ffff::1", ST_IP_LINK_LOCAL, "febf:ffff::1"},
        {"fec0::1", ST_IP_PUBLIC, "fec0::1"}, /* just past fe80::/10 */
        {"fd12:3456::1", ST_IP_UNIQUE_LOCAL, "fd12:3456::1"},
        {"fc00::1", ST_IP_UNIQUE_LOCAL, "fc00::1"},
        {"fbff::1", ST_IP_PUBLIC, "fbff::1"},
        {"fe00::1", ST_IP_PUBLIC, "fe00::1"},
        {"fd00:ec2::254", ST_IP_METADATA, "fd00:ec2::254"},
        {"[FD00:0EC2:0:0:0:0:0:0254]:80", ST_IP_METADATA, "fd00:ec2::254"},
        {"fd00:ec2::253", ST_IP_UNIQUE_LOCAL, "fd00:ec2::253"},
        {"2606:4700::1111", ST_IP_PUBLIC, "2606:4700::1111"},
        {"[2606:4700::1111]:443", ST_IP_PUBLIC, "2606:4700::1111"},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_private_ranges_and_their_near_misses)
{
    static const struct want t[] = {
        {"10.0.0.1", ST_IP_PRIVATE, "10.0.0.1"},
        {"10.255.255.255", ST_IP_PRIVATE, "10.255.255.255"},
        {"012.1", ST_IP_PRIVATE, "10.0.0.1"}, /* octal 012 is 10 */
        {"11.0.0.1", ST_IP_PUBLIC, "11.0.0.1"},
        {"9.255.255.255", ST_IP_PUBLIC, "9.255.255.255"},
        {"172.16.5.4", ST_IP_PRIVATE, "172.16.5.4"},
        {"172.31.255.255", ST_IP_PRIVATE, "172.31.255.255"},
        {"172.32.0.1", ST_IP_PUBLIC, "172.32.0.1"},
        {"172.15.255.255", ST_IP_PUBLIC, "172.15.255.255"},
        {"192.168.1.1", ST_IP_PRIVATE, "192.168.1.1"},
        {"192.169.0.1", ST_IP_PUBLIC, "192.169.0.1"},
        {"192.167.255.255", ST_IP_PUBLIC, "192.167.255.255"},
        {"100.64.0.1", ST_IP_CGNAT, "100.64.0.1"},
        {"100.127.255.255", ST_IP_CGNAT, "100.127.255.255"},
        {"100.128.0.1", ST_IP_PUBLIC, "100.128.0.1"},
        {"100.63.255.255", ST_IP_PUBLIC, "100.63.255.255"},
        {"169.254.0.1", ST_IP_LINK_LOCAL, "169.254.0.1"},
        {"169.254.169.253", ST_IP_LINK_LOCAL, "169.254.169.253"},
        {"169.255.0.1", ST_IP_PUBLIC, "169.255.0.1"},
        {"169.253.255.255", ST_IP_PUBLIC, "169.253.255.255"},
        {"0.0.0.0", ST_IP_UNSPECIFIED, "0.0.0.0"},
        {"0", ST_IP_UNSPECIFIED, "0.0.0.0"},
        {"0.1.2.3", ST_IP_UNSPECIFIED, "0.1.2.3"},
        {"1.0.0.0", ST_IP_PUBLIC, "1.0.0.0"},
        {"128.0.0.1", ST_IP_PUBLIC, "128.0.0.1"},
        {"126.255.255.255", ST_IP_PUBLIC, "126.255.255.255"},
        {"8.8.8.8", ST_IP_PUBLIC, "8.8.8.8"},
        {"140.82.112.3", ST_IP_PUBLIC, "140.82.112.3"},
        {"134744072", ST_IP_PUBLIC, "8.8.8.8"},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_localhost_names_are_loopback)
{
    static const struct want t[] = {
        {"localhost", ST_IP_LOOPBACK, "localhost"},
        {"LocalHost", ST_IP_LOOPBACK, "localhost"},
        {"localhost.", ST_IP_LOOPBACK, "localhost"},
        {"localhost:8080", ST_IP_LOOPBACK, "localhost"},
        {"api.localhost", ST_IP_LOOPBACK, "localhost"},
        {"a-b.c_d.LOCALHOST.:80", ST_IP_LOOPBACK, "localhost"},
        {"localhost.localdomain", ST_IP_LOOPBACK, "localhost.localdomain"},
        {"LOCALHOST.LOCALDOMAIN.:8080", ST_IP_LOOPBACK, "localhost.localdomain"},
        {"ip6-localhost", ST_IP_LOOPBACK, "ip6-localhost"},
        {"ip6-loopback", ST_IP_LOOPBACK, "ip6-loopback"},
        {"localhost6.localdomain6", ST_IP_LOOPBACK, "localhost6.localdomain6"},
        {"localhost4", ST_IP_LOOPBACK, "localhost4"},
        {"notlocalhost", ST_IP_PUBLIC, ""},
        {"ip6-localhost.example.com", ST_IP_PUBLIC, ""},
        {"localhost.example.com", ST_IP_PUBLIC, ""},
        {".localhost", ST_IP_PUBLIC, ""},
        {"a..localhost", ST_IP_PUBLIC, ""},
        {"a b.localhost", ST_IP_PUBLIC, ""},
        {"localhost..", ST_IP_PUBLIC, ""},
        /* a name that public DNS resolves to 127.0.0.1: only the dst_ip
         * the proxy logs can tell */
        {"127.0.0.1.nip.io", ST_IP_PUBLIC, ""},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_cloud_metadata_names_and_addresses)
{
    static const struct want t[] = {
        {"metadata.google.internal", ST_IP_METADATA, "metadata.google.internal"},
        {"Metadata.Google.Internal.", ST_IP_METADATA, "metadata.google.internal"},
        {"metadata.google.internal:80", ST_IP_METADATA, "metadata.google.internal"},
        {"metadata.goog", ST_IP_METADATA, "metadata.goog"},
        {"metadata", ST_IP_METADATA, "metadata"},
        {"instance-data", ST_IP_METADATA, "instance-data"},
        {"instance-data.ec2.internal", ST_IP_METADATA, "instance-data.ec2.internal"},
        {"100.100.100.200", ST_IP_METADATA, "100.100.100.200"}, /* Alibaba */
        {"100.100.100.201", ST_IP_CGNAT, "100.100.100.201"},
        {"168.63.129.16", ST_IP_METADATA, "168.63.129.16"},     /* Azure */
        {"fd20:ce::254", ST_IP_METADATA, "fd20:ce::254"},       /* GCE IPv6 */
        {"fd20:ce::253", ST_IP_UNIQUE_LOCAL, "fd20:ce::253"},
        {"metadata.google.internal.example.com", ST_IP_PUBLIC, ""},
        {"xmetadata", ST_IP_PUBLIC, ""},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_names_and_malformed_text_are_not_addresses)
{
    static const struct want t[] = {
        {"example.com", ST_IP_PUBLIC, ""},
        {"pypi.org", ST_IP_PUBLIC, ""},
        {"dead.beef", ST_IP_PUBLIC, ""}, /* hex digits, but a name */
        {"", ST_IP_PUBLIC, ""},
        /* inet_aton returns 1 for these, ignoring what follows whitespace */
        {"127.0.0.1 junk", ST_IP_PUBLIC, ""},
        {"127.0.0.1\tx", ST_IP_PUBLIC, ""},
        {"127.0.0.1 ", ST_IP_PUBLIC, ""},
        {" 127.0.0.1", ST_IP_PUBLIC, ""},
        {"127.0.0.1junk", ST_IP_PUBLIC, ""},
        /* inet_aton rejects these */
        {"1.2.3.4.5", ST_IP_PUBLIC, ""},   /* five parts */
        {"256.1.1.1", ST_IP_PUBLIC, ""},   /* part over 255 */
        {"1.2.3.256", ST_IP_PUBLIC, ""},   /* last part over its byte */
        {"127.16777216", ST_IP_PUBLIC, ""}, /* the last of 2 parts: 24 bits */
        {"4294967296", ST_IP_PUBLIC, ""},  /* 2^32 */
        {"99999999999999999999", ST_IP_PUBLIC, ""},
        {"08", ST_IP_PUBLIC, ""},          /* 8 is no octal digit */
        {"0x", ST_IP_PUBLIC, ""},
        {"1..2", ST_IP_PUBLIC, ""},
        {"127.0.0.1..", ST_IP_PUBLIC, ""}, /* one trailing dot only */
        {".127.0.0.1", ST_IP_PUBLIC, ""},
        {"-1", ST_IP_PUBLIC, ""},
        {"127.0.0.1:99999", ST_IP_PUBLIC, ""},
        {"127.0.0.1:65536", ST_IP_PUBLIC, ""},
        {"127.0.0.1:http", ST_IP_PUBLIC, ""},
        {"127.0.0.1:443x", ST_IP_PUBLIC, ""},
        {"[127.0.0.1]", ST_IP_PUBLIC, ""},
        {"[::1", ST_IP_PUBLIC, ""},
        {"[::1]x", ST_IP_PUBLIC, ""},
        {"[::1]:", ST_IP_LOOPBACK, "::1"},
        {"fe80::1%", ST_IP_PUBLIC, ""},
        {"fe80::1%eth 0", ST_IP_PUBLIC, ""},
        {"::ffff:127.1", ST_IP_PUBLIC, ""}, /* inet_pton wants a dotted quad */
        {"::1 ", ST_IP_PUBLIC, ""},
        /* a bare IPv6 address has no port: this is ::0.1.0.128, which
         * glibc's inet_ntop prints as IPv4-compatible */
        {"::1:80", ST_IP_PUBLIC, "::0.1.0.128"},
        {"1:2:3:4:5:6:7:8:9", ST_IP_PUBLIC, ""},
    };
    CHECK_TABLE(t);
}
END_TEST

START_TEST(ipclass_norm_is_cut_to_its_buffer)
{
    char small[8];
    ck_assert_int_eq(st_ipclass_classify("::ffff:169.254.169.254", small, sizeof(small)),
                     ST_IP_METADATA);
    ck_assert_str_eq(small, "::ffff:");
    ck_assert_int_eq(st_ipclass_classify("127.1", NULL, 0), ST_IP_LOOPBACK);
    char norm[ST_IPCLASS_NORM_MAX] = "stale";
    ck_assert_int_eq(st_ipclass_classify(NULL, norm, sizeof(norm)), ST_IP_PUBLIC);
    ck_assert_str_eq(norm, "");
    /* the longest text fits */
    ck_assert_int_eq(st_ipclass_classify("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
                                         norm, sizeof(norm)),
                     ST_IP_PUBLIC);
    ck_assert_str_eq(norm, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
}
END_TEST

START_TEST(ipclass_names_of_classes)
{
    ck_assert_str_eq(st_ipclass_name(ST_IP_PUBLIC), "public");
    ck_assert_str_eq(st_ipclass_name(ST_IP_LOOPBACK), "loopback");
    ck_assert_str_eq(st_ipclass_name(ST_IP_UNSPECIFIED), "unspecified");
    ck_assert_str_eq(st_ipclass_name(ST_IP_PRIVATE), "private");
    ck_assert_str_eq(st_ipclass_name(ST_IP_CGNAT), "cgnat");
    ck_assert_str_eq(st_ipclass_name(ST_IP_LINK_LOCAL), "link_local");
    ck_assert_str_eq(st_ipclass_name(ST_IP_METADATA), "metadata");
    ck_assert_str_eq(st_ipclass_name(ST_IP_UNIQUE_LOCAL), "unique_local");
}
END_TEST

/* The detector, fed directly: it needs no Redis. */

struct world {
    struct st_findings fs;
    struct st_detect_ctx ctx;
    struct st_event ev[16];
    size_t nev;
};

static void world_init(struct world *w)
{
    memset(w, 0, sizeof(*w));
    st_findings_init(&w->fs);
    w->ctx.findings = &w->fs;
}

static void world_fini(struct world *w)
{
    for (size_t i = 0; i < w->nev; i++)
        st_event_fini(&w->ev[i]);
    st_findings_fini(&w->fs);
}

/* Feeds one event; attrs is the JSON text of its attrs members. */
static void feed(struct world *w, const char *type, const char *decision,
                 const char *attrs)
{
    char line[1024];
    const char *kind = strcmp(type, "request") == 0 ? "proxy" : "sandbox";
    snprintf(line, sizeof(line),
             "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e%zu\","
             "\"ts\":\"2026-11-29T08:00:%02zuZ\",\"source\":{\"kind\":\"%s\","
             "\"name\":\"squid\"},\"task_id\":\"T\",\"run_id\":\"R\",\"type\":\"%s\","
             "\"decision\":\"%s\",\"attrs\":{%s}}",
             w->nev, w->nev, kind, type, decision, attrs);
    struct st_reject rej;
    ck_assert_uint_lt(w->nev, 16);
    struct st_event *ev = &w->ev[w->nev++];
    ck_assert_msg(st_event_parse(ev, line, strlen(line), &rej) == 0, "%s: %s", line,
                  rej.msg);
    const struct st_detector_ops *ops = &st_private_destination_ops;
    void *st = ops->create(NULL);
    ops->begin_batch(st, 1);
    ops->feed(st, &w->ctx, ev);
    ops->end_batch(st, &w->ctx);
    ops->reset_batch(st);
    ops->destroy(st);
}

START_TEST(private_destination_one_finding_per_destination_whatever_the_spelling)
{
    struct world w;
    world_init(&w);
    feed(&w, "request", "allow", "\"host\":\"0xA9FEA9FE\",\"dst_ip\":\"169.254.169.254\"");
    feed(&w, "request", "allow", "\"host\":\"2852039166\"");
    ck_assert_uint_eq(w.fs.n, 1);
    struct st_finding *f = &w.fs.items[0];
    ck_assert_str_eq(f->detector, "private_destination");
    ck_assert_int_eq(f->severity, ST_SEV_CRITICAL);
    ck_assert_uint_eq(f->nevents, 2);
    ck_assert_str_eq(f->summary, "request to link_local metadata address 169.254.169.254 "
                                 "(written \"2852039166\"), allowed");
    char id[33];
    st_finding_id(id, "private_destination", "T", "R", "metadata:169.254.169.254");
    ck_assert_str_eq(f->id, id);
    ck_assert_int_eq(f->first_us, w.ev[0].ts_us);
    ck_assert_int_eq(f->last_us, w.ev[1].ts_us);
    world_fini(&w);
}
END_TEST

START_TEST(private_destination_severity_follows_class_and_decision)
{
    struct world w;
    world_init(&w);
    feed(&w, "request", "deny", "\"host\":\"127.1\"");
    feed(&w, "request", "allow", "\"host\":\"[::ffff:10.1.2.3]:8443\"");
    feed(&w, "request", "deny", "\"host\":\"[fd00:ec2::254]\"");
    feed(&w, "request", "error", "\"host\":\"100.64.0.1\"");
    ck_assert_uint_eq(w.fs.n, 4);
    ck_assert_int_eq(w.fs.items[0].severity, ST_SEV_MEDIUM);
    ck_assert_str_eq(w.fs.items[0].summary,
                     "request to loopback address 127.0.0.1 (written \"127.1\"), denied");
    ck_assert_int_eq(w.fs.items[1].severity, ST_SEV_HIGH);
    ck_assert_str_eq(w.fs.items[1].summary,
                     "request to private address ::ffff:10.1.2.3 "
                     "(written \"[::ffff:10.1.2.3]:8443\"), allowed");
    ck_assert_int_eq(w.fs.items[2].severity, ST_SEV_HIGH);
    ck_assert_str_eq(w.fs.items[2].summary,
                     "request to unique_local metadata address fd00:ec2::254 "
                     "(written \"[fd00:ec2::254]\"), denied");
    ck_assert_int_eq(w.fs.items[3].severity, ST_SEV_MEDIUM);
    ck_assert_str_eq(w.fs.items[3].summary, "request to cgnat address 100.64.0.1, failed");
    world_fini(&w);
}
END_TEST

START_TEST(private_destination_public_name_resolved_to_metadata_is_caught)
{
    struct world w;
    world_init(&w);
    feed(&w, "request", "allow",
         "\"host\":\"rebind.example.com\",\"dst_ip\":\"169.254.169.254\"");
    ck_assert_uint_eq(w.fs.n, 1);
    ck_assert_int_eq(w.fs.items[0].severity, ST_SEV_CRITICAL);
    ck_assert_str_eq(w.fs.items[0].summary,
                     "request to link_local metadata address 169.254.169.254 "
                     "(written \"rebind.example.com\"), allowed");
    /* the worse class wins whichever field holds it */
    feed(&w, "request", "allow", "\"host\":\"10.0.0.1\",\"dst_ip\":\"127.0.0.1\"");
    ck_assert_uint_eq(w.fs.n, 2);
    ck_assert_str_eq(w.fs.items[1].summary,
                     "request to loopback address 127.0.0.1 (written \"10.0.0.1\"), allowed");
    world_fini(&w);
}
END_TEST

START_TEST(private_destination_ignores_public_and_other_events)
{
    struct world w;
    world_init(&w);
    feed(&w, "request", "allow", "\"host\":\"pypi.org\",\"dst_ip\":\"151.101.0.223\"");
    feed(&w, "request", "deny", "\"host\":\"172.32.0.1\"");
    feed(&w, "request", "allow", "\"host\":\"100.128.0.1\",\"dst_ip\":\"\"");
    feed(&w, "exec", "allow", "\"command\":\"curl http://127.1/\"");
    ck_assert_uint_eq(w.fs.n, 0);
    world_fini(&w);
}
END_TEST

START_TEST(private_destination_quotes_at_most_64_bytes_of_the_host)
{
    struct world w;
    world_init(&w);
    char attrs[256], want[256];
    char label[71];
    memset(label, 'a', 70);
    label[70] = '\0';
    snprintf(attrs, sizeof(attrs), "\"host\":\"%s.localhost\"", label);
    feed(&w, "request", "allow", attrs);
    ck_assert_uint_eq(w.fs.n, 1);
    snprintf(want, sizeof(want),
             "request to loopback address localhost (written \"%.64s...\"), allowed", label);
    ck_assert_str_eq(w.fs.items[0].summary, want);
    /* quotes, backslashes and control characters cannot break the summary */
    feed(&w, "request", "allow", "\"host\":\"x\\\"y\\\\z\\n\",\"dst_ip\":\"127.0.0.1\"");
    ck_assert_uint_eq(w.fs.n, 2);
    ck_assert_str_eq(w.fs.items[1].summary, "request to loopback address 127.0.0.1 "
                                            "(written \"x\\\"y\\\\z\\x0a\"), allowed");
    world_fini(&w);
}
END_TEST

START_TEST(private_destination_marks_late_events_and_only_raises_severity)
{
    struct world w;
    world_init(&w);
    feed(&w, "request", "allow", "\"host\":\"169.254.169.254\"");
    w.ctx.late = 1;
    feed(&w, "request", "deny", "\"host\":\"0251.0376.0251.0376\"");
    ck_assert_uint_eq(w.fs.n, 1);
    struct st_finding *f = &w.fs.items[0];
    ck_assert_int_eq(f->severity, ST_SEV_CRITICAL); /* denied later: stays */
    ck_assert_uint_eq(f->nevents, 2);
    ck_assert_int_eq(f->events[0].late, 0);
    ck_assert_int_eq(f->events[1].late, 1);
    ck_assert_str_eq(f->events[1].event_id, "e1");
    ck_assert_str_eq(f->events[1].source_name, "squid");
    world_fini(&w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ipclass");
    TCase *tc = tcase_create("classify");
    tcase_add_test(tc, ipclass_metadata_in_every_ipv4_spelling);
    tcase_add_test(tc, ipclass_loopback_in_every_ipv4_spelling);
    tcase_add_test(tc, ipclass_ipv6_loopback_brackets_and_port);
    tcase_add_test(tc, ipclass_embedded_ipv4_is_classified_by_the_ipv4);
    tcase_add_test(tc, ipclass_ipv6_link_local_unique_local_and_zones);
    tcase_add_test(tc, ipclass_private_ranges_and_their_near_misses);
    tcase_add_test(tc, ipclass_localhost_names_are_loopback);
    tcase_add_test(tc, ipclass_cloud_metadata_names_and_addresses);
    tcase_add_test(tc, ipclass_names_and_malformed_text_are_not_addresses);
    tcase_add_test(tc, ipclass_norm_is_cut_to_its_buffer);
    tcase_add_test(tc, ipclass_names_of_classes);
    suite_add_tcase(s, tc);
    TCase *td = tcase_create("private_destination");
    tcase_add_test(td, private_destination_one_finding_per_destination_whatever_the_spelling);
    tcase_add_test(td, private_destination_severity_follows_class_and_decision);
    tcase_add_test(td, private_destination_public_name_resolved_to_metadata_is_caught);
    tcase_add_test(td, private_destination_ignores_public_and_other_events);
    tcase_add_test(td, private_destination_quotes_at_most_64_bytes_of_the_host);
    tcase_add_test(td, private_destination_marks_late_events_and_only_raises_severity);
    suite_add_tcase(s, td);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
