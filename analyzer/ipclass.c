/* ipclass.c: classifying a host as a destination (see ipclass.h).
 *
 * The text is split the way a proxy would have split it (brackets, port,
 * trailing dot), and the address itself is always parsed by the C library:
 * inet_aton(3) for IPv4, because it is what resolvers use and it accepts
 * the short, decimal, octal and hex forms; inet_pton(3) for IPv6. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ipclass.h"
#include "log.h"

const char *st_ipclass_name(enum st_ipclass c)
{
    static const char *const names[] = {
        [ST_IP_PUBLIC] = "public",
        [ST_IP_LOOPBACK] = "loopback",
        [ST_IP_UNSPECIFIED] = "unspecified",
        [ST_IP_PRIVATE] = "private",
        [ST_IP_CGNAT] = "cgnat",
        [ST_IP_LINK_LOCAL] = "link_local",
        [ST_IP_METADATA] = "metadata",
        [ST_IP_UNIQUE_LOCAL] = "unique_local",
    };
    if ((size_t)c >= sizeof(names) / sizeof(names[0]))
        return "public";
    return names[c];
}

static void put_norm(char *norm, size_t normsz, const char *s)
{
    if (normsz == 0)
        return;
    size_t n = strlen(s);
    if (n >= normsz)
        n = normsz - 1;
    memcpy(norm, s, n);
    norm[n] = '\0';
}

/* a is in host byte order */
static enum st_ipclass class_v4(uint32_t a)
{
    if (a >> 24 == 127)
        return ST_IP_LOOPBACK;
    if (a >> 24 == 0)
        return ST_IP_UNSPECIFIED; /* Linux sends 0.x.x.x to the local host */
    if (a >> 24 == 10 || (a & 0xfff00000u) == 0xac100000u || /* 172.16/12 */
        (a & 0xffff0000u) == 0xc0a80000u)                    /* 192.168/16 */
        return ST_IP_PRIVATE;
    /* 100.100.100.200: Alibaba Cloud's metadata service, inside CGNAT;
     * 168.63.129.16: Azure's host endpoint (WireServer), public space */
    if (a == 0x646464c8u || a == 0xa83f8110u)
        return ST_IP_METADATA;
    if ((a & 0xffc00000u) == 0x64400000u) /* 100.64/10 */
        return ST_IP_CGNAT;
    if (a == 0xa9fea9feu) /* 169.254.169.254 */
        return ST_IP_METADATA;
    if ((a & 0xffff0000u) == 0xa9fe0000u) /* 169.254/16 */
        return ST_IP_LINK_LOCAL;
    return ST_IP_PUBLIC;
}

static uint32_t load_v4(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* The IPv4 address an IPv6 address carries, by the translation schemes a
 * host on the way would apply: IPv4-mapped ::ffff:0:0/96, IPv4-translated
 * (SIIT, RFC 2765) ::ffff:0:0:0/96, IPv4-compatible ::/96, NAT64's
 * well-known 64:ff9b::/96 and local-use 64:ff9b:1::/48 (RFC 8215: the
 * address in the last 32 bits, or at the /48 position of RFC 6052 around
 * the u octet), and 6to4 2002::/16 (RFC 3056: bits 16-47). Returns 1 and
 * the address, or 0. */
static int embedded_v4(const unsigned char b[16], uint32_t *v4)
{
    static const unsigned char zero[12];
    static const unsigned char mapped[12] = {[10] = 0xff, [11] = 0xff};
    static const unsigned char siit[12] = {[8] = 0xff, [9] = 0xff};
    static const unsigned char nat64[12] = {0x00, 0x64, 0xff, 0x9b};
    static const unsigned char nat64_local[6] = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01};

    if (memcmp(b, mapped, 12) == 0 || memcmp(b, siit, 12) == 0 ||
        memcmp(b, nat64, 12) == 0) {
        *v4 = load_v4(b + 12);
        return 1;
    }
    if (memcmp(b, nat64_local, 6) == 0) {
        if (memcmp(b + 6, zero, 6) == 0) {
            *v4 = load_v4(b + 12);
        } else {
            const unsigned char a[4] = {b[6], b[7], b[9], b[10]};
            *v4 = load_v4(a);
        }
        return 1;
    }
    if (b[0] == 0x20 && b[1] == 0x02) {
        *v4 = load_v4(b + 2);
        return 1;
    }
    return 0;
}

static enum st_ipclass class_v6(const unsigned char b[16])
{
    static const unsigned char zero[12];
    /* fd00:ec2::254, the EC2 instance metadata service over IPv6, and
     * fd20:ce::254, Google Compute Engine's */
    static const unsigned char metadata[][16] = {
        {0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54},
        {0xfd, 0x20, 0x00, 0xce, [14] = 0x02, [15] = 0x54},
    };
    uint32_t v4;

    if (memcmp(b, zero, 12) == 0) {
        v4 = load_v4(b + 12);
        if (v4 == 0)
            return ST_IP_UNSPECIFIED; /* :: */
        if (v4 == 1)
            return ST_IP_LOOPBACK; /* ::1 */
        /* IPv4-compatible ::a.b.c.d; ::0.x.x.x (::2, ...) embeds no real
         * IPv4 address and is routed as IPv6 */
        return b[12] != 0 ? class_v4(v4) : ST_IP_PUBLIC;
    }
    if (embedded_v4(b, &v4))
        return class_v4(v4);
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return ST_IP_LINK_LOCAL;
    for (size_t i = 0; i < sizeof(metadata) / sizeof(metadata[0]); i++)
        if (memcmp(b, metadata[i], 16) == 0)
            return ST_IP_METADATA;
    if ((b[0] & 0xfe) == 0xfc)
        return ST_IP_UNIQUE_LOCAL;
    return ST_IP_PUBLIC;
}

/* [s, end) is empty or ':' and a port: at most 5 digits, up to 65535. An
 * empty port ("host:") is the default port, as in URLs. */
static int port_ok(const char *s, const char *end)
{
    unsigned v = 0;

    if (s == end)
        return 1;
    if (*s++ != ':' || end - s > 5)
        return 0;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        v = v * 10 + (unsigned)(*s - '0');
    }
    return v <= 65535;
}

static int is_alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Characters that can belong to an inet_aton number. */
static int is_v4char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
           c == 'x' || c == 'X' || c == '.';
}

/* "localhost" or "<labels>.localhost" (RFC 6761 reserves the whole
 * domain for loopback), any case; [s, s + n) has no trailing dot. */
static int is_localhost(const char *s, size_t n)
{
    static const char lh[] = "localhost";
    const size_t l = sizeof(lh) - 1;

    if (n < l || strncasecmp(s + n - l, lh, l) != 0)
        return 0;
    if (n == l)
        return 1;
    if (s[n - l - 1] != '.')
        return 0; /* "notlocalhost" */
    char prev = '.'; /* no empty label: "..localhost", ".localhost" */
    for (size_t i = 0; i < n - l; i++) {
        char c = s[i];
        if (c == '.' ? prev == '.' : !(is_alnum(c) || c == '-' || c == '_'))
            return 0;
        prev = c;
    }
    return 1;
}

/* Names that mean the local host or a cloud's metadata service wherever
 * they are resolved: /etc/hosts entries every distribution ships, and the
 * clouds' own metadata names. Compared whole, any case. */
static const struct {
    const char *name;
    enum st_ipclass cls;
} special_names[] = {
    {"localhost.localdomain", ST_IP_LOOPBACK},
    {"localhost4", ST_IP_LOOPBACK},
    {"localhost4.localdomain4", ST_IP_LOOPBACK},
    {"localhost6", ST_IP_LOOPBACK},
    {"localhost6.localdomain6", ST_IP_LOOPBACK},
    {"ip6-localhost", ST_IP_LOOPBACK},
    {"ip6-loopback", ST_IP_LOOPBACK},
    {"metadata.google.internal", ST_IP_METADATA}, /* GCE */
    {"metadata.goog", ST_IP_METADATA},            /* GCE */
    {"metadata", ST_IP_METADATA},                 /* GCE's search domain */
    {"instance-data", ST_IP_METADATA},            /* EC2 */
    {"instance-data.ec2.internal", ST_IP_METADATA},
    {"metadata.tencentyun.com", ST_IP_METADATA},  /* Tencent Cloud */
    {"metadata.platformequinix.com", ST_IP_METADATA},
};

/* The class of a special name [s, s + n), writing the name in lower case
 * into norm; -1 when it is none. */
static int special_name(const char *s, size_t n, char *norm, size_t normsz)
{
    for (size_t i = 0; i < sizeof(special_names) / sizeof(special_names[0]); i++) {
        const char *name = special_names[i].name;
        if (strlen(name) == n && strncasecmp(s, name, n) == 0) {
            put_norm(norm, normsz, name);
            return (int)special_names[i].cls;
        }
    }
    return -1;
}

/* Parses [s, s + n) as a whole with inet_aton. Returns 1 and the address in
 * host byte order, or 0. */
static int parse_v4(const char *s, size_t n, uint32_t *out)
{
    char buf[64];
    struct in_addr a;

    if (n == 0)
        return 0;
    /* inet_aton stops at the first whitespace and ignores what follows
     * ("127.0.0.1 junk" is 127.0.0.1 to it): let it see only characters
     * that can be part of a number, so that success means it read all */
    for (size_t i = 0; i < n; i++)
        if (!is_v4char(s[i]))
            return 0;
    /* leading zeros are legal, so the text has no length bound */
    char *p = n < sizeof(buf) ? buf : st_malloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    int ok = inet_aton(p, &a);
    if (p != buf)
        free(p);
    if (!ok)
        return 0;
    *out = ntohl(a.s_addr);
    return 1;
}

/* Parses [s, s + n) as an IPv6 address with an optional %zone. */
static int parse_v6(const char *s, size_t n, unsigned char out[16])
{
    char buf[INET6_ADDRSTRLEN];
    const char *pct = memchr(s, '%', n);

    if (pct) {
        /* interface name or number; "%25eth0" is the URL spelling */
        const char *z = pct + 1, *end = s + n;
        if (z == end)
            return 0;
        for (; z < end; z++)
            if (!(is_alnum(*z) || *z == '.' || *z == '_' || *z == '-'))
                return 0;
        n = (size_t)(pct - s);
    }
    if (n == 0 || n >= sizeof(buf)) /* the longest address text is 45 */
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return inet_pton(AF_INET6, buf, out) == 1;
}

static enum st_ipclass v6_result(const unsigned char b[16], char *norm, size_t normsz)
{
    char text[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, b, text, sizeof(text)))
        st_fatal("inet_ntop failed on a parsed IPv6 address");
    put_norm(norm, normsz, text);
    return class_v6(b);
}

enum st_ipclass st_ipclass_classify(const char *host, char *norm, size_t normsz)
{
    unsigned char b6[16];
    uint32_t v4;

    put_norm(norm, normsz, "");
    if (!host)
        return ST_IP_PUBLIC;
    size_t n = strlen(host);
    const char *end = host + n;

    if (n > 0 && host[0] == '[') {
        const char *close = memchr(host, ']', n);
        if (!close || !port_ok(close + 1, end) ||
            !parse_v6(host + 1, (size_t)(close - host - 1), b6))
            return ST_IP_PUBLIC;
        return v6_result(b6, norm, normsz);
    }
    const char *colon = memchr(host, ':', n);
    if (colon && memchr(colon + 1, ':', (size_t)(end - colon - 1))) {
        /* two colons or more: a bare IPv6 address, which has no port
         * ("::1:80" is the address ::1:80) */
        if (!parse_v6(host, n, b6))
            return ST_IP_PUBLIC;
        return v6_result(b6, norm, normsz);
    }
    if (colon) {
        if (!port_ok(colon, end))
            return ST_IP_PUBLIC;
        n = (size_t)(colon - host);
    }
    /* a fully qualified spelling: "127.0.0.1." and "localhost." resolve */
    if (n > 0 && host[n - 1] == '.')
        n--;
    if (is_localhost(host, n)) {
        put_norm(norm, normsz, "localhost");
        return ST_IP_LOOPBACK;
    }
    int special = special_name(host, n, norm, normsz);
    if (special >= 0)
        return (enum st_ipclass)special;
    if (!parse_v4(host, n, &v4))
        return ST_IP_PUBLIC;
    char text[INET_ADDRSTRLEN];
    struct in_addr a = {htonl(v4)};
    if (!inet_ntop(AF_INET, &a, text, sizeof(text)))
        st_fatal("inet_ntop failed on a parsed IPv4 address");
    put_norm(norm, normsz, text);
    return class_v4(v4);
}
