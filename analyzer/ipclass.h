/* ipclass.h: what kind of destination a host names, as a resolver would
 * read it.
 *
 * An agent that wants to reach the proxy's own host, the cloud metadata
 * service or the internal network rarely writes "127.0.0.1": it writes
 * "127.1", "2130706433", "0x7f.1" or "::ffff:127.0.0.1", all of which the C
 * library (and so most proxies and HTTP clients) accepts. The classifier
 * therefore parses with inet_aton(3) and inet_pton(3), never by comparing
 * strings, and classifies the address the text denotes. */
#ifndef ST_IPCLASS_H
#define ST_IPCLASS_H

#include <stddef.h>

enum st_ipclass {
    ST_IP_PUBLIC = 0,   /* a public address, or not an address at all */
    ST_IP_LOOPBACK,     /* 127/8, ::1, "localhost", "*.localhost" */
    ST_IP_UNSPECIFIED,  /* 0.0.0.0/8, ::: reaches the local host on Linux */
    ST_IP_PRIVATE,      /* RFC 1918: 10/8, 172.16/12, 192.168/16 */
    ST_IP_CGNAT,        /* RFC 6598: 100.64/10 */
    ST_IP_LINK_LOCAL,   /* 169.254/16, fe80::/10 */
    ST_IP_METADATA,     /* 169.254.169.254, 100.100.100.200, 168.63.129.16,
                           fd00:ec2::254, fd20:ce::254, metadata names */
    ST_IP_UNIQUE_LOCAL, /* fc00::/7 */
};

/* Room for any text st_ipclass_classify writes into norm, with its NUL
 * (INET6_ADDRSTRLEN). */
#define ST_IPCLASS_NORM_MAX 46

/* "public", "loopback", "unspecified", "private", "cgnat", "link_local",
 * "metadata", "unique_local": a static string. */
const char *st_ipclass_name(enum st_ipclass c);

/* Classifies a host as a proxy logged it:
 *   - an IPv4 address in any spelling inet_aton(3) accepts: 1 to 4 parts,
 *     each decimal, octal (leading 0) or hex (0x), the last part filling
 *     the remaining bytes ("127.1", "2852039166", "0xA9FEA9FE"), with one
 *     optional trailing dot ("127.0.0.1.", which resolvers accept);
 *   - an IPv6 address, optionally in [brackets] and with a %zone; an
 *     IPv4-mapped (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96),
 *     IPv4-compatible (::/96), NAT64 (64:ff9b::/96, 64:ff9b:1::/48) or
 *     6to4 (2002::/16) address is classified by the IPv4 address it
 *     embeds;
 *   - the names "localhost" and "*.localhost" (RFC 6761), any case, as
 *     loopback, and the loopback names distributions put in /etc/hosts
 *     ("localhost.localdomain", "ip6-localhost", ...) and the clouds'
 *     metadata names ("metadata.google.internal", "instance-data", ...),
 *     written in lower case into norm.
 * An optional ":port" after an IPv4 address, a name or a bracketed IPv6
 * address is ignored. Anything else after the address (inet_aton itself
 * stops at whitespace: "127.0.0.1 junk") makes the text not an address.
 *
 * Writes the canonical text of the address (inet_ntop(3) of the address
 * parsed, or "localhost") into norm, cut to normsz - 1 bytes
 * (ST_IPCLASS_NORM_MAX always fits); "" when host is not an address. norm
 * may be NULL when normsz is 0. Returns ST_IP_PUBLIC for public addresses
 * and for names that are not addresses, and for a NULL host. Never fails;
 * host is only read. */
enum st_ipclass st_ipclass_classify(const char *host, char *norm, size_t normsz);

#endif
