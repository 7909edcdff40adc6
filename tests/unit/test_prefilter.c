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
    for (int it = 0; it < 300000; it++) {
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

int main(void)
{
    Suite *s = suite_create("prefilter");
    TCase *tc = tcase_create("prefilter");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, redact_prefilter_matches_the_plain_definitions);
    tcase_add_test(tc, redact_prefilter_finds_every_planted_keyword);
    tcase_add_test(tc, redact_min_len_is_a_lower_bound);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
