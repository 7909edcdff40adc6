/* test_evkey.c: Ed25519 keys, key ids and signatures (common/evkey.c), with
 * keys made by the openssl command as scripts/services makes them. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evkey.h"

static char dir[] = "/tmp/st-evkey-XXXXXX";

static void keys_make(void)
{
    char cmd[512];
    strcpy(dir, "/tmp/st-evkey-XXXXXX"); /* a fresh template each time */
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl genpkey -algorithm ed25519 -out a.key 2>/dev/null &&"
             " openssl pkey -in a.key -pubout -out a.pub &&"
             " openssl genpkey -algorithm ed25519 -out b.key 2>/dev/null &&"
             " openssl pkey -in b.key -pubout -out b.pub &&"
             " openssl genpkey -algorithm ec -pkeyopt ec_paramgen_curve:P-256"
             " -out ec.key 2>/dev/null",
             dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void keys_drop(void)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
}

START_TEST(evkey_signs_and_verifies_and_refuses_tampering)
{
    struct st_evkey a, apub, bpub;
    char p[256], err[512];
    uint8_t sig[ST_EVIDENCE_SIG];
    const char msg[] = "{\"type\":\"sandtrail.checkpoint.v1\"}";

    keys_make();
    path(p, sizeof(p), "a.key");
    ck_assert_int_eq(st_evkey_load(&a, p, 1, err, sizeof(err)), 0);
    path(p, sizeof(p), "a.pub");
    ck_assert_int_eq(st_evkey_load(&apub, p, 0, err, sizeof(err)), 0);
    path(p, sizeof(p), "b.pub");
    ck_assert_int_eq(st_evkey_load(&bpub, p, 0, err, sizeof(err)), 0);
    /* the private key and its public half have one id, another key another */
    ck_assert_str_eq(a.id, apub.id);
    ck_assert_str_ne(a.id, bpub.id);

    ck_assert_int_eq(st_evkey_sign(&a, msg, strlen(msg), sig), 0);
    ck_assert(st_evkey_verify(&apub, msg, strlen(msg), sig));
    ck_assert(!st_evkey_verify(&bpub, msg, strlen(msg), sig));
    ck_assert(!st_evkey_verify(&apub, msg, strlen(msg) - 1, sig));
    sig[5] ^= 0x10;
    ck_assert(!st_evkey_verify(&apub, msg, strlen(msg), sig));
    /* a public key cannot sign */
    ck_assert_int_eq(st_evkey_sign(&apub, msg, strlen(msg), sig), -1);
    st_evkey_fini(&a);
    st_evkey_fini(&apub);
    st_evkey_fini(&bpub);
    keys_drop();
}
END_TEST

/* The id is the first 16 hex digits of SHA-256 of the raw public key: the
 * last 32 bytes of the key's DER form, so stock tools can compute it. */
START_TEST(evkey_id_is_computable_with_stock_tools)
{
    struct st_evkey k;
    char p[256], err[512], cmd[512], want[64] = "";
    keys_make();
    path(p, sizeof(p), "a.pub");
    ck_assert_int_eq(st_evkey_load(&k, p, 0, err, sizeof(err)), 0);
    snprintf(cmd, sizeof(cmd),
             "openssl pkey -pubin -in %s -outform DER | tail -c 32 | sha256sum | cut -c1-16",
             p);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(want, sizeof(want), f));
    pclose(f);
    want[strcspn(want, "\n")] = '\0';
    ck_assert_str_eq(k.id, want);
    st_evkey_fini(&k);
    keys_drop();
}
END_TEST

START_TEST(evkey_refuses_what_is_not_an_ed25519_key)
{
    struct st_evkey k;
    char p[256], err[512];
    keys_make();
    path(p, sizeof(p), "ec.key");
    ck_assert_int_eq(st_evkey_load(&k, p, 1, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "not a PEM Ed25519 private key"));
    path(p, sizeof(p), "a.key");
    ck_assert_int_eq(st_evkey_load(&k, p, 0, err, sizeof(err)), -1); /* not public */
    path(p, sizeof(p), "missing.key");
    ck_assert_int_eq(st_evkey_load(&k, p, 1, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "could not open key file"));
    keys_drop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("evkey");
    TCase *tc = tcase_create("evkey");
    tcase_add_test(tc, evkey_signs_and_verifies_and_refuses_tampering);
    tcase_add_test(tc, evkey_id_is_computable_with_stock_tools);
    tcase_add_test(tc, evkey_refuses_what_is_not_an_ed25519_key);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
