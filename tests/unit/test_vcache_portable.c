/* test_vcache_portable.c: redact.c's value cache as built without SSE2
 * (aarch64 and any other target without __SSE2__): redact.c is compiled
 * here with the macro undefined (tests/CMakeLists.txt: -U__SSE2__), so its
 * portable comparisons run. A cached value must be found only for the
 * same bytes: a value of 16 to 63 bytes that differs from a cached one
 * outside its first, middle and last eight bytes (the hash's) must be
 * looked at, or a secret there would pass unredacted.
 *
 * The functions are static: this file includes redact.c itself, as
 * test_prefilter.c does. */
#include "../../common/redact.c"

#include <check.h>

#ifdef __SSE2__
#error "this test is built with -U__SSE2__"
#endif

static struct st_redactor *new_redactor(void)
{
    static const unsigned char key[] = "0123456789abcdef0123456789abcdef";
    char err[256];
    struct st_redact_conf conf = {0};
    conf.key = key;
    conf.keylen = sizeof(key) - 1;
    struct st_redactor *r = st_redactor_new(&conf, err, sizeof(err));
    ck_assert_msg(r != NULL, "st_redactor_new: %s", err);
    return r;
}

/* Two strings of each cacheable length that differ in one byte, at every
 * offset: never equal to the other's cache slot. */
START_TEST(vcache_equal_compares_every_byte)
{
    char a[VCACHE_LEN], b[VCACHE_LEN];
    for (size_t len = 2; len < VCACHE_LEN; len++)
        for (size_t at = 0; at < len; at++) {
            for (size_t i = 0; i < len; i++)
                a[i] = b[i] = (char)('a' + i % 26);
            b[at] = 'Z';
            struct vcache c = {0};
            c.len = len;
            memcpy(c.s, a, len);
            ck_assert_msg(vcache_equal(&c, a, len), "len %zu: not equal to itself", len);
            ck_assert_msg(!vcache_equal(&c, b, len), "len %zu: equal though byte %zu differs",
                          len, at);
        }
}
END_TEST

/* The same through st_redact_value: a clean value cached, then a value
 * with an AWS key id whose first, middle and last eight bytes are the
 * clean one's (same cache slots). */
START_TEST(vcache_does_not_hide_a_secret_in_unhashed_bytes)
{
    struct st_redactor *r = new_redactor();
    /* 40 bytes: the hash reads [0,8), [16,24), [32,40) */
    const char *clean = "runs in akiaIOSFODNN7EXAMPLE/tmp/abcdefg";
    const char *secret = "runs in AKIAIOSFODNN7EXAMPLE/tmp/abcdefg";
    size_t len = strlen(clean);
    ck_assert_uint_eq(len, 40);
    ck_assert_uint_eq(strlen(secret), len);
    ck_assert(vcache_slots(r, clean, len) == vcache_slots(r, secret, len));
    const char *out = NULL;
    size_t outlen = 0;
    ck_assert_uint_eq(st_redact_value(r, clean, len, NULL, 0, 0, &out, &outlen), 0);
    size_t k = st_redact_value(r, secret, len, NULL, 0, 0, &out, &outlen);
    ck_assert_msg(k == 1, "the AWS key id in \"%s\" was not redacted (the value cache "
                          "took it for \"%s\")",
                  secret, clean);
    ck_assert_ptr_null(memmem(out, outlen, "AKIA", 4));
    st_redactor_destroy(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vcache_portable");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, vcache_equal_compares_every_byte);
    tcase_add_test(tc, vcache_does_not_hide_a_secret_in_unhashed_bytes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
