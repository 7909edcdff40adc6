/* test_prefilter.c: redact.c's prefilter, the step that decides which
 * rules run on a string and whether its decoded forms are looked at. A
 * rule the prefilter leaves out never runs, so a prefilter that misses a
 * keyword lets a secret through: its answer must be exactly that of the
 * plain definitions, whatever shortcuts (a three-byte filter, two pairs a
 * load, SSE2 blocks, a padded last block) make it fast.
 *
 * The functions are static, so this file includes redact.c itself (its
 * symbols then come from here, and the library's copy is not linked in)
 * and compares them with reference versions written as plainly as
 * possible, on random strings drawn to hit keywords, base64 and hex runs,
 * the bytes that start a decoding, and every block length. */
#include "../../common/redact.c"

#include <check.h>

#include "corpus.h"
#include "quiet_marks.h"

static struct st_redactor *new_redactor(void)
{
    static const unsigned char key[] = "0123456789abcdef0123456789abcdef";
    static const char *const canaries[] = {"CANARY-abc123xyz"};
    char err[256];
    struct st_redact_conf conf = {0};
    conf.key = key;
    conf.keylen = sizeof(key) - 1;
    conf.canaries = canaries;
    conf.ncanaries = 1;
    struct st_redactor *r = st_redactor_new(&conf, err, sizeof(err));
    ck_assert_msg(r != NULL, "st_redactor_new: %s", err);
    return r;
}

/* Every keyword at every offset, compared byte by byte, and the starts. */
static uint64_t naive_mask(const struct st_redactor *r, const unsigned char *p, size_t len)
{
    uint64_t m = 0;
    for (size_t i = 0; i < len; i++)
        for (size_t k = 0; k < r->nkws; k++) {
            const struct keyword *w = &r->kws[k];
            size_t x = 0;
            if (w->len > len - i)
                continue;
            while (x < w->len &&
                   (w->icase ? ascii_lower(p[i + x]) == ascii_lower((unsigned char)w->s[x])
                             : p[i + x] == (unsigned char)w->s[x]))
                x++;
            if (x == w->len)
                m |= BIT(w->rule);
        }
    for (size_t k = 0; k < r->nstarts && len >= 2; k++)
        if (p[0] == (unsigned char)r->starts[k].s[0] && p[1] == (unsigned char)r->starts[k].s[1])
            m |= BIT(r->starts[k].rule);
    return m;
}

/* The decoding check as first written: a byte that starts a decoding, or
 * a run of base64 pairs ST_REDACT_B64_MIN long with a byte that is not
 * lowercase hex, pair by pair. */
static int naive_forms(const struct st_redactor *r, const unsigned char *p, size_t len)
{
    size_t run = 0;
    int nonhex = 0;
    for (size_t i = 0; i < len; i++)
        if (cls[p[i]] & C_TRIGGER)
            return 1;
    for (size_t i = 0; i + 1 < len; i += r->step) {
        int b = (cls[p[i]] & C_B64) && (cls[p[i + 1]] & C_B64);
        int nh = !(cls[p[i]] & C_HEX) || !(cls[p[i + 1]] & C_HEX);
        run = b ? run + r->step : 0;
        nonhex = b ? nonhex | nh : 0;
        if (run + 2 >= ST_REDACT_B64_MIN && nonhex)
            return 1;
    }
    return 0;
}

static const char alpha[] = "keytokenSECRETpwdghp_xoxsk-eyJBearer://[REDACTED:AKIAs.b."
                            "ABCXYZabcfgz0189+/-_=.: %\\\xc2\xe2\xef\x80" "abcdef0123456789";

static unsigned next(unsigned *x)
{
    *x = *x * 1103515245u + 12345u;
    return *x >> 8;
}

START_TEST(redact_prefilter_matches_the_plain_definitions)
{
    struct st_redactor *r = new_redactor();
    unsigned x = 42;
    unsigned char buf[200];
    for (int it = 0; it < 100000; it++) {
        size_t len = next(&x) % (it & 1 ? sizeof(buf) : 40);
        unsigned mode = next(&x) % 4;
        for (size_t i = 0; i < len; i++) {
            unsigned c;
            if (mode == 0)
                c = (unsigned char)alpha[next(&x) % (sizeof(alpha) - 1)];
            else if (mode == 1) /* hex runs, the odd other byte */
                c = next(&x) % 10 ? (unsigned char)"abcdef0123456789"[next(&x) % 16]
                                  : (unsigned char)alpha[next(&x) % (sizeof(alpha) - 1)];
            else if (mode == 2) /* base64 runs */
                c = next(&x) % 12 ? (unsigned char)"ABCabc019+/-_"[next(&x) % 13]
                                  : (unsigned char)" .:"[next(&x) % 3];
            else
                c = next(&x) % 256;
            buf[i] = (unsigned char)c;
        }
        int forms = -1;
        uint64_t m = prefilter(r, (const char *)buf, len, &forms);
        ck_assert_msg(m == naive_mask(r, buf, len), "rules of a %zu-byte string", len);
        ck_assert_msg(forms == naive_forms(r, buf, len), "forms of a %zu-byte string", len);
    }
    st_redactor_destroy(r);
}
END_TEST

/* decode_view's search for the first place a decoding starts, sixteen
 * bytes a load, gives the plain byte-by-byte answer. */
START_TEST(redact_first_decodable_matches_the_plain_loop)
{
    struct st_redactor *r = new_redactor(); /* the byte classes */
    unsigned x = 99;
    char buf[200];
    /* every kind of start, whole or cut short, and near misses */
    static const char *const pieces[] = {
        "%2F", "%zz", "%4", "\\u0041", "\\u00", "\\/", "\\x", "\xc2\xad", "\xc2\xae",
        "\xe2\x80\x8b", "\xe2\x80\x8d", "\xe2\x80\x8e", "\xe2\x81\xa0", "\xe2\x81",
        "\xef\xbb\xbf", "\xef\xbb", "\xef\xbf\xbd"};
    size_t found = 0;
    for (int it = 0; it < 100000; it++) {
        size_t len = next(&x) % (it & 1 ? sizeof(buf) : 40);
        for (size_t i = 0; i < len; i++) {
            const char *pc = pieces[next(&x) % (sizeof(pieces) / sizeof(pieces[0]))];
            size_t pl = strlen(pc);
            if (next(&x) % 40 || pl > len - i) { /* filler that starts none */
                buf[i] = "abcXYZ019 -_./:\xc3\xa9"[next(&x) % 17];
                continue;
            }
            memcpy(buf + i, pc, pl);
            i += pl - 1;
        }
        size_t want = 0;
        while (want < len && !((cls[(unsigned char)buf[want]] & C_TRIGGER) &&
                               decodable_at(buf + want, len - want)))
            want++;
        ck_assert_uint_eq(first_decodable(buf, len), want);
        found += want < len && want >= 16;
    }
    ck_assert_msg(found > 1000, "only %zu found past the first block", found);
    st_redactor_destroy(r);
}
END_TEST

/* Each keyword, in any case where the rule ignores case, at any offset of
 * random text, selects its rule. */
START_TEST(redact_prefilter_finds_every_planted_keyword)
{
    struct st_redactor *r = new_redactor();
    unsigned x = 7;
    unsigned char buf[200];
    for (int it = 0; it < 100000; it++) {
        const struct keyword *w = &r->kws[next(&x) % r->nkws];
        size_t pre = next(&x) % 40, post = next(&x) % 40, len = pre + w->len + post;
        ck_assert_uint_le(len, sizeof(buf));
        for (size_t i = 0; i < len; i++)
            buf[i] = (unsigned char)alpha[next(&x) % (sizeof(alpha) - 1)];
        for (size_t k = 0; k < w->len; k++) {
            unsigned char c = (unsigned char)w->s[k];
            buf[pre + k] = w->icase ? (next(&x) & 1 ? ascii_upper(c) : ascii_lower(c)) : c;
        }
        ck_assert_msg(prefilter(r, (const char *)buf, len, NULL) & BIT(w->rule),
                      "keyword \"%s\" at %zu of %zu bytes", w->s, pre, len);
    }
    st_redactor_destroy(r);
}
END_TEST

/* A string shorter than the redactor's bound holds no match of any rule:
 * the bound is no longer than the shortest pattern's own minimum. */
START_TEST(redact_min_len_is_a_lower_bound)
{
    struct st_redactor *r = new_redactor();
    ck_assert_uint_gt(r->min_len, 0);
    ck_assert_uint_le(r->min_len, ST_REDACT_CANARY_MIN);
    for (unsigned i = 0; i < NRULES; i++) {
        uint32_t ml = 0;
        if (!r->rules[i].code)
            continue;
        ck_assert_int_eq(pcre2_pattern_info(r->rules[i].code, PCRE2_INFO_MINLENGTH, &ml), 0);
        ck_assert_uint_le(r->min_len, ml);
    }
    /* the shortest url_userinfo credential is still found */
    int count = 0;
    char *out = st_redact_text(r, "a://:b@", 7, &count);
    ck_assert_int_eq(count, 1);
    free(out);
    st_redactor_destroy(r);
}
END_TEST

/* ---- check_assignment's parts -------------------------------------------- */

/* As first written: each word looked for at every offset, and the entropy
 * summed over all 256 byte values. */
static int plain_holds_word(const char *v, size_t n, const char *w)
{
    size_t wl = strlen(w);
    for (size_t i = 0; i + wl <= n; i++) {
        size_t k = 0;
        while (k < wl && ascii_lower((unsigned char)v[i + k]) == (unsigned char)w[k])
            k++;
        if (k == wl)
            return 1;
    }
    return 0;
}

static double plain_entropy(const char *v, size_t n)
{
    size_t counts[256] = {0};
    double h = 0;
    for (size_t i = 0; i < n; i++)
        counts[(unsigned char)v[i]]++;
    for (int c = 0; c < 256; c++)
        if (counts[c]) {
            double q = (double)counts[c] / (double)n;
            h -= q * log2(q);
        }
    return h;
}

START_TEST(redact_assignment_checks_match_the_plain_loops)
{
    static const char *const words[] = {
        "changeme", "change_me", "change-me", "example", "placeholder",
        "redacted", "dummy", "your_", "your-", "xxxxx", "*****", "sample"};
    unsigned x = 5;
    char buf[120];
    size_t held = 0;
    for (int it = 0; it < 80000; it++) {
        size_t len = next(&x) % sizeof(buf);
        for (size_t i = 0; i < len; i++)
            buf[i] = next(&x) % 8 ? (char)alpha[next(&x) % (sizeof(alpha) - 1)]
                                  : (char)(next(&x) % 256);
        if (len && next(&x) % 2) { /* a word, whole or cut, in random case */
            const char *w = words[next(&x) % 12];
            size_t at = next(&x) % len, wl = strlen(w) - (next(&x) % 4 == 0);
            for (size_t k = 0; k < wl && at + k < len; k++)
                buf[at + k] = next(&x) % 2 ? (char)ascii_upper((unsigned char)w[k]) : w[k];
        }
        int want = 0;
        for (size_t k = 0; k < 12 && !want; k++)
            want = plain_holds_word(buf, len, words[k]);
        ck_assert_int_eq(holds_placeholder(buf, len), want);
        held += want;
        double e = st_redact_entropy(buf, len), pe = plain_entropy(buf, len);
        ck_assert_msg(memcmp(&e, &pe, sizeof(e)) == 0, "entropy %.17g, plainly %.17g", e, pe);
    }
    ck_assert_msg(held > 20000, "only %zu strings held a word", held);
}
END_TEST

/* ---- st_redact_value's cache of short values ---------------------------- */

/* st_redact_value as it was before the cache: the plain path. */
static size_t plain_value(struct st_redactor *r, const char *s, size_t len,
                          const char *name, size_t namelen, uint64_t kmask,
                          const char **out, size_t *outlen)
{
    int forms = 0;
    r->nm = 0;
    if (too_short(r, len, name, kmask))
        return 0;
    uint64_t mask = prefilter(r, s, len, &forms);
    if (nothing_to_run(r, mask, forms, name ? kmask : 0))
        return 0;
    size_t k = redact_string(r, s, len, mask, forms, name, namelen, kmask);
    if (k) {
        *out = r->out.data;
        *outlen = r->out.len;
    }
    return k;
}

struct vpair {
    struct st_redactor *cached, *plain;
    size_t calls, hits, redacted, redacted_short;
};

/* Names: none, plain ones, and keyed ones (secret_assignment, aws_secret_key
 * run over "<name>=<value>"), so that one value is met under each. */
static const char *const vnames[] = {NULL, "command", "password", "api_key",
                                     "aws_secret_access_key"};

static void vcompare(struct vpair *v, const char *s, size_t len)
{
    for (size_t i = 0; i < sizeof(vnames) / sizeof(vnames[0]); i++) {
        const char *name = vnames[i];
        size_t namelen = name ? strlen(name) : 0;
        uint64_t km = name ? prefilter(v->cached, name, namelen, NULL) : 0;
        const char *o1 = NULL, *o2 = NULL;
        size_t l1 = 0, l2 = 0;
        if (len > 1 && len < VCACHE_LEN) {
            struct vcache *c = vcache_slots(v->cached, s, len);
            v->hits += vcache_equal(&c[0], s, len) || vcache_equal(&c[1], s, len);
        }
        size_t k1 = st_redact_value(v->cached, s, len, name, namelen, km, &o1, &l1);
        size_t k2 = plain_value(v->plain, s, len, name, namelen, km, &o2, &l2);
        v->calls++;
        ck_assert_msg(k1 == k2, "%zu redactions of \"%.*s\" under %s, plainly %zu", k1,
                      (int)len, s, name ? name : "no name", k2);
        if (k1) {
            ck_assert_msg(l1 == l2 && memcmp(o1, o2, l1) == 0, "\"%.*s\" redacted as %.*s",
                          (int)len, s, (int)l1, o1);
            v->redacted++;
            v->redacted_short += len < VCACHE_LEN;
        }
    }
}

/* Every JSON string of a line (between unescaped quotes), whole and its
 * first and last bytes at a few lengths under 16, each under every name. A
 * whole file (with newlines) is skipped: its lines come one by one. */
static void vcompare_line(const char *text, size_t len, void *arg)
{
    static const size_t cuts[] = {2, 8, 15};
    struct vpair *v = arg;
    if (memchr(text, '\n', len))
        return;
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '"')
            continue;
        size_t j = i + 1;
        while (j < len && text[j] != '"')
            j += text[j] == '\\' ? 2 : 1;
        if (j > len)
            j = len;
        const char *s = text + i + 1;
        size_t n = j - i - 1;
        vcompare(v, s, n);
        for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]) && cuts[c] < n; c++) {
            vcompare(v, s, cuts[c]);
            vcompare(v, s + n - cuts[c], cuts[c]);
        }
        i = j;
    }
}

static struct st_redactor *new_short_canary_redactor(void)
{
    static const unsigned char key[] = "0123456789abcdef0123456789abcdef";
    static const char *const canaries[] = {"CANARY-1", "CANARY-abc123xyz"};
    char err[256];
    struct st_redact_conf conf = {0};
    conf.key = key;
    conf.keylen = sizeof(key) - 1;
    conf.canaries = canaries;
    conf.ncanaries = 2;
    struct st_redactor *r = st_redactor_new(&conf, err, sizeof(err));
    ck_assert_msg(r != NULL, "st_redactor_new: %s", err);
    return r;
}

/* The cache gives what the plain path gives, on the shared corpus and the
 * benchmark's input, for every value met again under a keyed name, and for
 * short secrets (a canary of 8 bytes, keyed assignments). */
START_TEST(redact_value_cache_same_as_plain_path)
{
    struct vpair v = {new_short_canary_redactor(), new_short_canary_redactor(), 0, 0, 0, 0};
    static const char *const planted[] = {
        "xCANARY-1", "CANARY-1", "aZ9kQ2mXpL", "Zq8wLm3Rt7", "hunter2!xK",
        "AKIA0123456789ABCDEF", "ghp_0123456789", "a://:b@", "a://u:pw@h"};
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof(planted) / sizeof(planted[0]); i++)
            vcompare(&v, planted[i], strlen(planted[i]));
    size_t files = corpus_tree(SANDTRAIL_SOURCE_DIR "/tests/data", vcompare_line, &v);
    ck_assert_msg(files > 20, "only %zu files under tests/data", files);
    corpus_generated("python3 " SANDTRAIL_SOURCE_DIR "/scripts/bench/gen_mixed.py 500 ",
                     " 7 2>/dev/null", vcompare_line, &v);
    printf("value cache: %zu calls, %zu hits, %zu redacted (%zu of a cacheable length)\n",
           v.calls, v.hits, v.redacted, v.redacted_short);
    ck_assert_msg(v.hits > v.calls / 5, "only %zu hits in %zu calls", v.hits, v.calls);
    ck_assert_msg(v.redacted_short > 20, "only %zu values of a cacheable length redacted",
                  v.redacted_short);
    st_redactor_destroy(v.cached);
    st_redactor_destroy(v.plain);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("prefilter");
    TCase *tc = tcase_create("prefilter");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, redact_prefilter_matches_the_plain_definitions);
    tcase_add_test(tc, redact_prefilter_finds_every_planted_keyword);
    tcase_add_test(tc, redact_min_len_is_a_lower_bound);
    tcase_add_test(tc, redact_first_decodable_matches_the_plain_loop);
    tcase_add_test(tc, redact_value_cache_same_as_plain_path);
    tcase_add_test(tc, redact_assignment_checks_match_the_plain_loops);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
