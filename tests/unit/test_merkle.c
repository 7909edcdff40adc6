/* test_merkle.c: RFC 6962 tree hashes, frontier, proofs (common/merkle.c). */
#include <check.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "merkle.h"

/* RFC 6962's recursive definition, the reference the fast forms must meet */
static void mth(const uint8_t (*leaves)[ST_MERKLE_HASH], uint64_t n, uint8_t out[32])
{
    if (n == 1) {
        memcpy(out, leaves[0], 32);
        return;
    }
    uint64_t k = 1;
    while (k * 2 < n)
        k *= 2;
    uint8_t l[32], r[32];
    mth(leaves, k, l);
    mth(leaves + k, n - k, r);
    st_merkle_node_hash(l, r, out);
}

/* the inputs of Certificate Transparency's reference test vectors */
static const struct {
    const char *data;
    size_t len;
} ct_inputs[] = {
    {"", 0},
    {"\x00", 1},
    {"\x10", 1},
    {"\x20\x21", 2},
    {"\x30\x31", 2},
    {"\x40\x41\x42\x43", 4},
    {"\x50\x51\x52\x53\x54\x55\x56\x57", 8},
    {"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f", 16},
};

static const char *ct_roots[] = {
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
};

START_TEST(merkle_matches_the_rfc6962_test_vectors)
{
    struct st_merkle_frontier f;
    uint8_t leaf[32], root[32];
    char hex[65];

    st_merkle_frontier_init(&f);
    st_merkle_frontier_root(&f, root);
    st_hex(root, 32, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    for (int i = 0; i < 8; i++) {
        st_merkle_leaf_hash(ct_inputs[i].data, ct_inputs[i].len, leaf);
        st_merkle_frontier_add(&f, leaf);
        st_merkle_frontier_root(&f, root);
        st_hex(root, 32, hex);
        ck_assert_str_eq(hex, ct_roots[i]);
    }
}
END_TEST

static uint8_t (*make_leaves(uint64_t n))[ST_MERKLE_HASH]
{
    uint8_t(*leaves)[ST_MERKLE_HASH] = malloc((n + 1) * ST_MERKLE_HASH);
    for (uint64_t i = 0; i < n; i++) {
        char data[32];
        int len = snprintf(data, sizeof(data), "{\"event\":%llu}", (unsigned long long)i);
        st_merkle_leaf_hash(data, (size_t)len, leaves[i]);
    }
    return leaves;
}

START_TEST(merkle_frontier_and_levels_agree_with_the_definition)
{
    uint8_t(*leaves)[ST_MERKLE_HASH] = make_leaves(130);
    struct st_merkle_frontier f;
    st_merkle_frontier_init(&f);
    for (uint64_t n = 1; n <= 130; n++) {
        uint8_t want[32], got[32], lv[32];
        st_merkle_frontier_add(&f, leaves[n - 1]);
        mth(leaves, n, want);
        st_merkle_frontier_root(&f, got);
        ck_assert_mem_eq(got, want, 32);
        struct st_merkle_levels *t = st_merkle_levels_new(leaves, n);
        st_merkle_levels_root(t, lv);
        ck_assert_mem_eq(lv, want, 32);
        st_merkle_levels_destroy(t);
    }
    free(leaves);
}
END_TEST

START_TEST(merkle_frontier_survives_save_and_load)
{
    uint8_t(*leaves)[ST_MERKLE_HASH] = make_leaves(77);
    struct st_merkle_frontier a, b;
    uint8_t buf[8 + 64 * 32], ra[32], rb[32];

    st_merkle_frontier_init(&a);
    for (int i = 0; i < 45; i++)
        st_merkle_frontier_add(&a, leaves[i]);
    size_t len = st_merkle_frontier_save(&a, buf);
    ck_assert_int_eq(len, 8 + 4 * 32); /* 45 = 101101b */
    ck_assert_int_eq(st_merkle_frontier_load(&b, buf, len), 0);
    ck_assert_int_eq(st_merkle_frontier_load(&b, buf, len - 1), -1);
    ck_assert_int_eq(st_merkle_frontier_load(&b, buf, len), 0);
    /* appending after the reload gives the tree of one uninterrupted run */
    for (int i = 45; i < 77; i++) {
        st_merkle_frontier_add(&a, leaves[i]);
        st_merkle_frontier_add(&b, leaves[i]);
    }
    st_merkle_frontier_root(&a, ra);
    st_merkle_frontier_root(&b, rb);
    ck_assert_mem_eq(ra, rb, 32);
    free(leaves);
}
END_TEST

START_TEST(merkle_proofs_verify_and_tampering_fails)
{
    uint8_t(*leaves)[ST_MERKLE_HASH] = make_leaves(70);
    uint8_t path[ST_MERKLE_MAX_DEPTH][ST_MERKLE_HASH];
    for (uint64_t n = 1; n <= 70; n++) {
        struct st_merkle_levels *t = st_merkle_levels_new(leaves, n);
        uint8_t root[32];
        st_merkle_levels_root(t, root);
        for (uint64_t i = 0; i < n; i++) {
            int len = st_merkle_levels_proof(t, i, path);
            ck_assert(st_merkle_verify(leaves[i], i, n, path, len, root));
            /* another leaf, another index, an index past the size, a changed step */
            ck_assert(!st_merkle_verify(leaves[(i + 1) % n], i, n, path, len, root) || n == 1);
            if (n > 1)
                ck_assert(!st_merkle_verify(leaves[i], (i + 1) % n, n, path, len, root));
            ck_assert(!st_merkle_verify(leaves[i], n, n, path, len, root));
            if (len > 0) {
                path[len - 1][7] ^= 1;
                ck_assert(!st_merkle_verify(leaves[i], i, n, path, len, root));
            }
        }
        st_merkle_levels_destroy(t);
    }
    free(leaves);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("merkle");
    TCase *tc = tcase_create("merkle");
    tcase_add_test(tc, merkle_matches_the_rfc6962_test_vectors);
    tcase_add_test(tc, merkle_frontier_and_levels_agree_with_the_definition);
    tcase_add_test(tc, merkle_frontier_survives_save_and_load);
    tcase_add_test(tc, merkle_proofs_verify_and_tampering_fails);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
