/* test_credset.c: issued-credential lineage without services. The set
 * keeps fingerprints and lengths; the search finds a credential of any
 * shape in text wherever separators delimit it, and only then; through the
 * redactor it becomes "[REDACTED:issued:<fp>]" with the fingerprint the
 * issue's identity.credential_fp has. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "credset.h"
#include "json.h"
#include "redact.h"

static const unsigned char KEY[] = "test-key-0123456789abcdef";
/* a credential of no known shape: 40 random characters */
#define CRED "zq8Xv3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uGi"

static struct st_redactor *new_redactor(const struct st_credset *cs)
{
    char err[256] = "";
    struct st_redact_conf conf = {.key = KEY,
                                  .keylen = strlen((const char *)KEY),
                                  .issued = cs};
    struct st_redactor *r = st_redactor_new(&conf, err, sizeof(err));
    ck_assert_msg(r != NULL, "st_redactor_new: %s", err);
    return r;
}

static const char *fp_of(struct st_redactor *r, const char *v)
{
    static char fp[ST_REDACT_FP_MAX + 1];
    st_redact_fingerprint(r, v, strlen(v), fp, sizeof(fp));
    return fp;
}

/* a fingerprint function for the search alone: the value's first 16
 * bytes as hex-ish text is enough to tell candidates apart */
struct seen {
    char cand[32][128];
    int ncand, nhit;
    char hit[8][128];
};

static void fake_fp(void *arg, const char *v, size_t len, char *fp)
{
    struct seen *s = arg;
    unsigned long h = 5381;
    if (s->ncand < 32)
        snprintf(s->cand[s->ncand++], 128, "%.*s", (int)len, v);
    for (size_t i = 0; i < len; i++)
        h = h * 33 + (unsigned char)v[i];
    snprintf(fp, ST_CREDSET_FP_MAX + 1, "%016lx", h);
}

static void on_hit(void *arg, size_t off, size_t len, const char *fp)
{
    struct seen *s = arg;
    if (s->nhit < 8)
        s->nhit++;
    (void)off, (void)len, (void)fp;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

START_TEST(credset_adds_and_finds_fingerprints)
{
    struct st_credset *cs = st_credset_new();
    char fp[32];
    ck_assert_uint_eq(st_credset_count(cs), 0);
    /* enough to make the table grow several times */
    for (int i = 0; i < 5000; i++) {
        snprintf(fp, sizeof(fp), "%016x", (unsigned)i * 2654435761u);
        ck_assert_int_eq(st_credset_add(cs, fp, 40), 1);
    }
    ck_assert_uint_eq(st_credset_count(cs), 5000);
    for (int i = 0; i < 5000; i++) {
        snprintf(fp, sizeof(fp), "%016x", (unsigned)i * 2654435761u);
        ck_assert_int_eq(st_credset_has(cs, fp), 1);
        ck_assert_int_eq(st_credset_add(cs, fp, 40), 0); /* known already */
    }
    ck_assert_uint_eq(st_credset_count(cs), 5000);
    ck_assert_int_eq(st_credset_has(cs, "0123456789abcdef"), 0);
    /* the length of the hex is part of the fingerprint */
    ck_assert_int_eq(st_credset_add(cs, "00ab", 40), 1);
    ck_assert_int_eq(st_credset_has(cs, "ab"), 0);
    ck_assert_int_eq(st_credset_has(cs, "00ab"), 1);
    st_credset_destroy(cs);
}
END_TEST

START_TEST(credset_refuses_what_it_cannot_follow)
{
    struct st_credset *cs = st_credset_new();
    char big[ST_CREDSET_FP_MAX + 2];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert_int_eq(st_credset_add(cs, "", 40), -1);
    ck_assert_int_eq(st_credset_add(cs, "ABCDEF", 40), -1);    /* not lowercase */
    ck_assert_int_eq(st_credset_add(cs, "0123xyz", 40), -1);   /* not hex */
    ck_assert_int_eq(st_credset_add(cs, big, 40), -1);         /* too long */
    ck_assert_int_eq(st_credset_add(cs, "0123456789abcdef", 0), -1);
    ck_assert_int_eq(st_credset_add(cs, "0123456789abcdef", ST_CREDSET_MIN_LEN - 1), -1);
    ck_assert_int_eq(st_credset_add(cs, "0123456789abcdef", ST_CREDSET_MAX_LEN + 1), -1);
    ck_assert_uint_eq(st_credset_count(cs), 0);
    /* the entropy test: generated values pass, repetitive ones do not */
    ck_assert(st_credset_followable(CRED, strlen(CRED)));
    ck_assert(!st_credset_followable("aaaaaaaaaaaaaaaaaaaa", 20));
    ck_assert(!st_credset_followable("abababababababababab", 20));
    ck_assert(!st_credset_followable("zq8Xv3Lr7Tg", 11)); /* too short */
    st_credset_destroy(cs);
}
END_TEST

START_TEST(credset_search_is_skipped_while_the_set_is_empty)
{
    struct st_credset *cs = st_credset_new();
    struct seen s = {0};
    ck_assert_uint_eq(st_credset_find(cs, "token=" CRED, strlen("token=" CRED), fake_fp,
                                      on_hit, &s),
                      0);
    ck_assert_int_eq(s.ncand, 0);
    st_credset_destroy(cs);
}
END_TEST

/* Each of these texts holds CRED delimited by separators: the search must
 * fingerprint CRED itself among its candidates. */
static const char *const delimited[] = {
    CRED,
    "token=" CRED,
    "Authorization: Bearer " CRED,
    "hvs." CRED,
    "echo " CRED " > /tmp/x",
    "/home/agent/.cache/" CRED ".txt",
    "\"api_key\":\"" CRED "\"",
    "url?x=1&t=" CRED "&y=2",
    "prefix_" CRED "_suffix",
    "key:" CRED ".",
    "line one\n" CRED "\tline two",
};
#define NDELIMITED (int)(sizeof(delimited) / sizeof(delimited[0]))

START_TEST(credset_search_finds_a_delimited_credential)
{
    struct st_credset *cs = st_credset_new();
    struct seen s = {0};
    char fp[ST_CREDSET_FP_MAX + 1];
    fake_fp(&s, CRED, strlen(CRED), fp);
    memset(&s, 0, sizeof(s));
    ck_assert_int_eq(st_credset_add(cs, fp, strlen(CRED)), 1);
    const char *t = delimited[_i];
    st_credset_find(cs, t, strlen(t), fake_fp, on_hit, &s);
    ck_assert_msg(s.nhit == 1, "%s: %d hits", t, s.nhit);
    /* only candidates of the known length are fingerprinted */
    for (int i = 0; i < s.ncand; i++)
        ck_assert_uint_eq(strlen(s.cand[i]), strlen(CRED));
    st_credset_destroy(cs);
}
END_TEST

/* The same with credentials of 30 lengths known, which the search tries by
 * end rather than by length: the same hits, and only known lengths. */
START_TEST(credset_search_finds_it_among_many_lengths)
{
    struct st_credset *cs = st_credset_new();
    struct seen s = {0};
    char fp[ST_CREDSET_FP_MAX + 1];
    for (int i = 0; i < 30; i++) {
        snprintf(fp, sizeof(fp), "%016x", 0xabc00 + i);
        st_credset_add(cs, fp, (size_t)(16 + 3 * i)); /* 16, 19, ... 40 ... 103 */
    }
    fake_fp(&s, CRED, strlen(CRED), fp);
    memset(&s, 0, sizeof(s));
    st_credset_add(cs, fp, strlen(CRED));
    const char *t = delimited[_i];
    st_credset_find(cs, t, strlen(t), fake_fp, on_hit, &s);
    ck_assert_msg(s.nhit == 1, "%s: %d hits", t, s.nhit);
    for (int i = 0; i < s.ncand && i < 32; i++)
        ck_assert_int_eq((int)(strlen(s.cand[i]) - 16) % 3, 0);
    st_credset_destroy(cs);
}
END_TEST

/* A credential glued to letters or digits is not delimited: a part of a
 * longer word is not a candidate, and lengths not in the set are never
 * tried. */
START_TEST(credset_search_needs_boundaries_and_known_lengths)
{
    struct st_credset *cs = st_credset_new();
    struct seen s = {0};
    char fp[ST_CREDSET_FP_MAX + 1];
    fake_fp(&s, CRED, strlen(CRED), fp);
    memset(&s, 0, sizeof(s));
    st_credset_add(cs, fp, strlen(CRED));
    const char *glued = "x" CRED "y";
    ck_assert_uint_eq(st_credset_find(cs, glued, strlen(glued), fake_fp, on_hit, &s), 0);
    ck_assert_int_eq(s.nhit, 0);
    /* a 39-char candidate is never looked at */
    const char *shorter = "token=zq8Xv3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uG";
    ck_assert_uint_eq(st_credset_find(cs, shorter, strlen(shorter), fake_fp, on_hit, &s), 0);
    /* prose of short words holds no candidate */
    const char *prose = "the agent wrote a file and then it read it back again";
    ck_assert_uint_eq(st_credset_find(cs, prose, strlen(prose), fake_fp, on_hit, &s), 0);
    st_credset_destroy(cs);
}
END_TEST

/* Through the redactor: the marker's fingerprint is the credential's, as
 * identity.credential_fp of the issue has it, and it is recorded. */
START_TEST(credset_redactor_marks_an_issued_credential)
{
    struct st_credset *cs = st_credset_new();
    struct st_redactor *r = new_redactor(cs);
    char fp[ST_REDACT_FP_MAX + 1], marker[96];

    /* the issue: the redactor fingerprints identity.credential */
    cJSON *issue = cJSON_Parse("{\"type\":\"token_issue\",\"identity\":{\"credential\":\"" CRED
                               "\"}}");
    st_redact_event(r, issue);
    snprintf(fp, sizeof(fp), "%s",
             st_json_str(st_json_get(issue, "identity"), "credential_fp"));
    ck_assert_str_eq(fp, fp_of(r, CRED));
    cJSON_Delete(issue);

    /* before the set knows it, an unknown shape passes */
    cJSON *w = cJSON_Parse("{\"type\":\"file_write\",\"attrs\":{\"content\":"
                           "\"vault login " CRED "\\nvault read secret/x\"}}");
    ck_assert_int_eq(st_redact_event(r, w), 0);
    cJSON_Delete(w);

    ck_assert_int_eq(st_credset_add(cs, fp, strlen(CRED)), 1);
    w = cJSON_Parse("{\"type\":\"file_write\",\"attrs\":{\"content\":"
                    "\"vault login " CRED "\\nvault read secret/x\","
                    "\"path\":\"/tmp/" CRED ".txt\"}}");
    ck_assert_int_eq(st_redact_event(r, w), 2);
    char *out = cJSON_PrintUnformatted(w);
    snprintf(marker, sizeof(marker), "[REDACTED:issued:%s]", fp);
    ck_assert_ptr_null(strstr(out, CRED));
    ck_assert_int_eq(count(out, marker), 2);
    ck_assert_ptr_nonnull(strstr(out, "\"rule\":\"issued\""));
    ck_assert_ptr_nonnull(strstr(out, "\"path\":\"attrs.content\""));
    /* redacting again changes nothing */
    ck_assert_int_eq(st_redact_event(r, w), 0);
    free(out);
    cJSON_Delete(w);

    /* raw text (a dead-letter record) too */
    int n = 0;
    char *t = st_redact_text(r, "not json: " CRED, strlen("not json: " CRED), &n);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(strstr(t, marker));
    free(t);
    st_redactor_destroy(r);
    st_credset_destroy(cs);
}
END_TEST

/* A rule that catches the same span names it (the fingerprint is the
 * same): an issued GitHub token stays "github_token"; one that catches a
 * part of an issued credential names that part. */
START_TEST(credset_a_shape_rule_names_the_same_span)
{
    const char *gh = "ghp_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7C";
    struct st_credset *cs = st_credset_new();
    struct st_redactor *r = new_redactor(cs);
    char marker[160];
    st_credset_add(cs, fp_of(r, gh), strlen(gh));
    snprintf(marker, sizeof(marker), "[REDACTED:github_token:%s]", fp_of(r, gh));
    int n = 0;
    char *t = st_redact_text(r, gh, strlen(gh), &n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(t, marker);
    free(t);

    /* an issued URL with a password: the rule names the password, the
     * rest (user, host) is left as it is */
    const char *url = "https://agent:" CRED "@git.example.com/repo.git";
    st_credset_add(cs, fp_of(r, url), strlen(url));
    const char *line = "git clone https://agent:" CRED "@git.example.com/repo.git now";
    t = st_redact_text(r, line, strlen(line), &n);
    ck_assert_int_eq(n, 1);
    snprintf(marker, sizeof(marker), "https://agent:[REDACTED:url_userinfo:%s]@git", fp_of(r, CRED));
    ck_assert_ptr_nonnull(strstr(t, marker));
    ck_assert_ptr_null(strstr(t, "issued"));
    free(t);
    st_redactor_destroy(r);
    st_credset_destroy(cs);
}
END_TEST

/* The search runs on every form the redactor decodes: a percent-encoded
 * or \u-escaped copy, or one inside a base64 run, is found too; the marker
 * replaces the encoded bytes and carries the credential's fingerprint (the
 * issue's credential_fp). While the set does not know it, all pass. */
START_TEST(credset_redactor_finds_encoded_forms)
{
    static const char *const forms[] = {
        /* 'z' and 'X' percent-encoded */
        "curl https://ci.example/cb?code=%7Aq8%58v3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uGi&x=1",
        /* JSON escapes left in a string ('\' ends a candidate as sent) */
        "echo \\u007aq8Xv3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uGi\\/x",
        /* base64 of "vault login <CRED>\n" */
        "printf dmF1bHQgbG9naW4genE4WHYzTHI3VGdXMm1LcDlZYk40Y0hkNkpmUTFzVmE1UnRFMHVHaQo= | "
        "base64 -d | sh",
    };
    static const char *const encoded[] = {
        "%7Aq8%58v3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uGi",
        "\\u007aq8Xv3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uGi",
        "dmF1bHQgbG9naW4genE4WHYzTHI3VGdXMm1LcDlZYk40Y0hkNkpmUTFzVmE1UnRFMHVHaQo=",
    };
    struct st_credset *cs = st_credset_new();
    struct st_redactor *r = new_redactor(cs);
    char marker[160];
    int n = 0;

    snprintf(marker, sizeof(marker), "[REDACTED:issued:%s]", fp_of(r, CRED));
    for (int i = 0; i < 3; i++) {
        char *t = st_redact_text(r, forms[i], strlen(forms[i]), &n);
        ck_assert_msg(n == 0, "redacted before the issue: %s", t);
        free(t);
    }
    ck_assert_int_eq(st_credset_add(cs, fp_of(r, CRED), strlen(CRED)), 1);
    for (int i = 0; i < 3; i++) {
        char *t = st_redact_text(r, forms[i], strlen(forms[i]), &n);
        ck_assert_msg(n == 1, "form %d: %d redactions: %s", i, n, t);
        ck_assert_msg(strstr(t, marker) != NULL, "form %d: %s", i, t);
        ck_assert_msg(strstr(t, encoded[i]) == NULL, "form %d kept: %s", i, t);
        ck_assert_ptr_null(strstr(t, "q8Xv3Lr7"));
        free(t);
    }
    st_redactor_destroy(r);
    st_credset_destroy(cs);
}
END_TEST

/* A rule that matches the same text names it in every form: an issued
 * value assigned to a *_TOKEN name is secret_assignment's, as sent (with
 * the same fingerprint: the analyzer still finds the issue by it) or
 * percent-encoded (the issued match found in the decoded form yields to
 * the rule's over the encoded bytes). */
START_TEST(credset_rule_wins_over_issued_in_every_form)
{
    static const char *const lines[] = {
        "export VAULT_TOKEN=" CRED,
        "export VAULT_TOKEN=%7Aq8Xv3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uGi",
    };
    struct st_credset *cs = st_credset_new();
    struct st_redactor *r = new_redactor(cs);
    char marker[160];
    int n = 0;

    st_credset_add(cs, fp_of(r, CRED), strlen(CRED));
    snprintf(marker, sizeof(marker), "export VAULT_TOKEN=[REDACTED:secret_assignment:%s]",
             fp_of(r, CRED));
    for (int i = 0; i < 2; i++) {
        char *t = st_redact_text(r, lines[i], strlen(lines[i]), &n);
        ck_assert_int_eq(n, 1);
        if (i == 0)
            ck_assert_str_eq(t, marker);
        ck_assert_msg(!strncmp(t, marker, strlen("export VAULT_TOKEN=[REDACTED:secret_assignment:")),
                      "%s", t);
        ck_assert_ptr_null(strstr(t, "q8Xv3Lr7"));
        free(t);
    }
    st_redactor_destroy(r);
    st_credset_destroy(cs);
}
END_TEST

/* An issued credential in the fingerprint of a marker-like text (a source's
 * "[REDACTED:canary:<credential>]") takes the whole marker, as a canary
 * does: no marker of ours is left holding another inside it. */
START_TEST(credset_issued_in_a_marker_takes_the_marker)
{
    const char *hexcred = "0f1e2d3c4b5a6978"; /* 16 lowercase hex: marker-shaped */
    struct st_credset *cs = st_credset_new();
    struct st_redactor *r = new_redactor(cs);
    char line[160], want[160];
    int n = 0;

    ck_assert_int_eq(st_credset_add(cs, fp_of(r, hexcred), strlen(hexcred)), 1);
    snprintf(line, sizeof(line), "[REDACTED:canary:%s]", hexcred);
    snprintf(want, sizeof(want), "[REDACTED:issued:%s]", fp_of(r, hexcred));
    char *t = st_redact_text(r, line, strlen(line), &n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(t, want);
    free(t);
    st_redactor_destroy(r);
    st_credset_destroy(cs);
}
END_TEST

struct adder {
    struct st_credset *cs;
    int base;
};

static void *add_many(void *arg)
{
    struct adder *a = arg;
    char fp[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(fp, sizeof(fp), "%08x%08x", (unsigned)a->base, (unsigned)i);
        st_credset_add(a->cs, fp, 16 + (size_t)(i % 8));
    }
    return NULL;
}

/* One thread adds (the lineage consumer) while another searches (a
 * worker): every addition is kept, the search stays consistent. */
START_TEST(credset_is_shared_between_threads)
{
    struct st_credset *cs = st_credset_new();
    struct st_redactor *r = new_redactor(cs);
    pthread_t t[2];
    struct adder a[2] = {{cs, 1}, {cs, 2}};
    st_credset_add(cs, fp_of(r, CRED), strlen(CRED));
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(pthread_create(&t[k], NULL, add_many, &a[k]), 0);
    const char *text = "cat <<EOF > creds\n" CRED "\nEOF";
    for (int i = 0; i < 200; i++) {
        int n = 0;
        free(st_redact_text(r, text, strlen(text), &n));
        ck_assert_int_eq(n, 1);
    }
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    ck_assert_uint_eq(st_credset_count(cs), 4001);
    st_redactor_destroy(r);
    st_credset_destroy(cs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("credset");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, credset_adds_and_finds_fingerprints);
    tcase_add_test(tc, credset_refuses_what_it_cannot_follow);
    tcase_add_test(tc, credset_search_is_skipped_while_the_set_is_empty);
    tcase_add_loop_test(tc, credset_search_finds_a_delimited_credential, 0, NDELIMITED);
    tcase_add_loop_test(tc, credset_search_finds_it_among_many_lengths, 0, NDELIMITED);
    tcase_add_test(tc, credset_search_needs_boundaries_and_known_lengths);
    tcase_add_test(tc, credset_redactor_marks_an_issued_credential);
    tcase_add_test(tc, credset_a_shape_rule_names_the_same_span);
    tcase_add_test(tc, credset_redactor_finds_encoded_forms);
    tcase_add_test(tc, credset_rule_wins_over_issued_in_every_form);
    tcase_add_test(tc, credset_issued_in_a_marker_takes_the_marker);
    tcase_add_test(tc, credset_is_shared_between_threads);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
