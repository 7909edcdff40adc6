/* test_redact.c: edge redaction. Every rule replaces a token-shaped value
 * embedded in a sentence by a marker that names the rule and carries the
 * keyed fingerprint, records where it was, and leaves near misses alone. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redact.h"

static const unsigned char KEY[] = "test-key-0123456789abcdef";
static const unsigned char OTHER_KEY[] = "another-key-0123456789abcdef";
#define CANARY "CANARY-7f3e9a21-do-not-use"

static const char *const canaries[] = {CANARY};

static struct st_redactor *new_redactor(const unsigned char *key, int fp_len)
{
    char err[256] = "";
    struct st_redact_conf conf = {.key = key,
                                  .keylen = strlen((const char *)key),
                                  .canaries = canaries,
                                  .ncanaries = 1,
                                  .fp_hex_len = fp_len};
    struct st_redactor *r = st_redactor_new(&conf, err, sizeof(err));
    ck_assert_msg(r != NULL, "st_redactor_new: %s", err);
    return r;
}

static char *fp_of(struct st_redactor *r, const char *v)
{
    static char fp[ST_REDACT_FP_MAX + 1];
    st_redact_fingerprint(r, v, strlen(v), fp, sizeof(fp));
    return fp;
}

/* What a private key's fingerprint is taken of: the base64 characters of
 * its body, past the BEGIN line, without escapes, up to the END line. */
static char *key_material(const char *pem)
{
    static char body[4096];
    size_t n = 0;
    const char *p = strstr(pem + 5, "-----") + 5;
    for (; *p && strncmp(p, "-----END", 8) != 0; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            continue;
        }
        if (strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", *p) &&
            n + 1 < sizeof(body))
            body[n++] = *p;
    }
    body[n] = '\0';
    return body;
}

static char *fp_of_rule(struct st_redactor *r, const char *rule, const char *v)
{
    return fp_of(r, strcmp(rule, "private_key") == 0 ? key_material(v) : v);
}

static char *marker(struct st_redactor *r, const char *rule, const char *v)
{
    static char m[128];
    snprintf(m, sizeof(m), "[REDACTED:%s:%s]", rule, fp_of_rule(r, rule, v));
    return m;
}

/* {"schema":...,"task_id":"T-1","attrs":{"note":<note>}} */
static cJSON *event_with_note(const char *note)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "schema", "sandtrail.event.v1");
    cJSON_AddStringToObject(doc, "event_id", "sbx-0001");
    cJSON_AddStringToObject(doc, "task_id", "T-1");
    cJSON_AddStringToObject(doc, "type", "exec");
    cJSON *attrs = cJSON_AddObjectToObject(doc, "attrs");
    cJSON_AddStringToObject(attrs, "note", note);
    return doc;
}

static cJSON *parse(const char *json)
{
    cJSON *doc = cJSON_Parse(json);
    ck_assert_msg(doc != NULL, "bad test JSON: %s", json);
    return doc;
}

/* Asserts that redactions[i] is {path, rule, fingerprint}. */
static void assert_entry(const cJSON *doc, int i, const char *path,
                         const char *rule, const char *fp)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(doc, "redactions");
    ck_assert_msg(cJSON_IsArray(arr), "no redactions array");
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    ck_assert_msg(e != NULL, "no redactions[%d]", i);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "path")->valuestring,
                     path);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "rule")->valuestring,
                     rule);
    ck_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(e, "fingerprint")->valuestring, fp);
}

static int nredactions(const cJSON *doc)
{
    return cJSON_GetArraySize(
        cJSON_GetObjectItemCaseSensitive(doc, "redactions"));
}

#define GITHUB_TOKEN "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngAbCdEf1234"
#define JWT                                                                    \
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZ" \
    "SI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36P" \
    "Ok6yJV_adQssw5c"
#define PEM_LINE "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
#define PEM_BODY                                                               \
    PEM_LINE "\n"                                                              \
             "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n" \
             "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ\n"

/* One token-shaped value per rule, in a sentence: prefix, secret, suffix.
 * probe is a part of the secret that must be gone too (the whole secret is
 * always checked). */
struct rule_case {
    const char *rule, *prefix, *secret, *suffix, *probe;
};

static const struct rule_case rule_cases[] = {
    {"aws_access_key", "deploy with key ", "AKIAIOSFODNN7EXAMPLE",
     " in us-east-1", NULL},
    {"aws_secret_key", "export aws_secret_access_key=",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", " && ./deploy.sh", NULL},
    {"github_token", "the agent printed ", GITHUB_TOKEN, " to the log", NULL},
    {"github_pat", "GH_TOKEN=",
     "github_pat_11AJKLMNO0abcdefghijkl_"
     "Qw3rTy7uIoP9aSdFgHjKlZxCvBnM1q2w3e4r5t6y7u8i9o0pAsDfGhJkLzX",
     " was exported", NULL},
    {"gitlab_token", "PRIVATE-TOKEN: ", "glpat-Xy7zQ2mN4pL8kR1sT6vW",
     " sent to gitlab.com", NULL},
    {"slack_token", "posting with ",
     "xoxb-2048117652-4096236114-aBcDeFgHiJkLmNoPqRsTuVwX", " to #alerts",
     NULL},
    {"stripe_key", "charge with ", "sk_live_51HxYzAbCdEfGhIjKlMnOpQr", " now",
     NULL},
    {"anthropic_key", "ANTHROPIC_API_KEY=",
     "sk-ant-api03-Xk9mP2qR7tV4wY8zB3cD6fG1hJ5kL0nM-Q_aS2dF4gH6jK8lZ9xC7vB5n"
     "M3qW1eR4tY6uI8oP0aSdFgHjKlZxCvBnMqWeRtYuIoPAA",
     " in ~/.bashrc", NULL},
    {"openai_key", "OPENAI_API_KEY=",
     "sk-proj-Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG", " in .env", NULL},
    {"google_api_key", "maps key ", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
     " loaded", NULL},
    {"jwt", "Cookie: id_token=", JWT, "; path=/", NULL},
    {"private_key", "key follows:\n",
     "-----BEGIN RSA PRIVATE KEY-----\n" PEM_BODY
     "-----END RSA PRIVATE KEY-----",
     "\nend of file", PEM_LINE},
    {"private_key", "cat id_ed25519 -> ",
     "-----BEGIN OPENSSH PRIVATE KEY-----\\n"
     "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\\n"
     "QyNTUxOQAAACDk3Yq8wJx2Lh0qv1Y8XzKQ4G8mFv3H5r2J9yT6nB1cAwAAAJgxXyZxMV8m\\n"
     "-----END OPENSSH PRIVATE KEY-----",
     " (done)", "QyNTUxOQAAACDk3Yq8wJx2Lh0qv1Y8XzKQ4G8mFv3H5r2J9yT6nB1cAwAAAJgx"},
    {"bearer", "GET /v1/repos Authorization: Bearer ", "8f2Kq9ZrT4wX1mLp7sVb3nYc",
     " HTTP/1.1", NULL},
    {"bearer", "Authorization: Basic ", "YWdlbnQ6aHVudGVyMg==", "", NULL},
    {"url_userinfo", "connecting to postgres://app:", "S3cr3t-Passw0rd",
     "@db.internal:5432/app", NULL},
    {"canary", "found ", CANARY, " in the output", NULL},
    /* issue 14 item 2: the families gitleaks has and we lacked */
    {"vault_token", "vault login ",
     "hvs.CAESIB4vXk9mP2qR7tV4wY8zB3cD6fG1hJ5kL0nMGh4KHGh2cy5aWjE", " ok", NULL},
    {"vault_token", "batch token ",
     "hvb.AAAAAQJx7Yq3mK9pL2vR8tW4zN6bD1fH5jQ0sUaBcDeF", ", ttl 1h", NULL},
    {"vault_token", "recovery: ", "hvr.Xk9mP2qR7tV4wY8zB3cD6fG1hJ5k",
     " (generate-root)", NULL},
    {"vault_token", "X-Vault-Token: ", "s.Xk9mP2qR7tV4wY8zB3cD6fG1", "", NULL},
    {"vault_token", "batch token: ", "b.AAAAAQJx7Yq3mK9pL2vR8tW4", " used",
     NULL},
    {"npm_token", "//registry.npmjs.org/:_authToken=",
     "npm_Xk9mP2qR7tV4wY8zB3cD6fG1hJ5kL0nM4pQ2", "\n", NULL},
    {"pypi_token", "twine upload -p ",
     "pypi-AgEIcHlwaS5vcmcCJDQ3ZTJmYjQ1LWE3NzEtNGE0Ny1iYjRkLTFiMmQ3NzZhYjYy"
     "MwACKlsz", " dist/*", NULL},
    {"huggingface_token", "huggingface-cli login --token ",
     "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", " --add", NULL},
    {"docker_hub_token", "docker login -u bot -p ",
     "dckr_pat_Xk9mP2qR7tV4wY8zB3cD6fG1hJ5", " docker.io", NULL},
    {"azure_storage_key",
     "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=",
     "Xk9mP2qR7tV4wY8zB3cD6fG1hJ5kL0nM4pQ2rS6tU8vW0xY2zA4bC6dE8fG0hJ2kL4mN6pQ8r"
     "S0tU2vW4xY6zA==",
     ";EndpointSuffix=core.windows.net", NULL},
    {"azure_sas",
     "https://acct.blob.core.windows.net/c/b.tgz?sv=2022-11-02&se=2026-12-01"
     "&sr=b&sp=r&sig=",
     "Xk9mP2qR7tV4wY8zB3cD6fG1hJ5kL0nM4pQ2rS6tU8v=", " downloaded", NULL},
    {"gcp_service_account",
     "{\"type\": \"service_account\", \"private_key_id\": \"",
     "4bf92f3577b34da6a3ce929d0e0e4736aa55f2c1", "\"}", NULL},
    {"databricks_token", "DATABRICKS_HOST=x databricks --token ",
     "dapi0123456789abcdef0123456789abcdef", " jobs list", NULL},
    {"twilio_key", "twilio api key ", "SK0123456789abcdef0123456789abcdef",
     " created", NULL},
    {"twilio_key", "account ", "AC4bf92f3577b34da6a3ce929d0e0e4736", " billed",
     NULL},
    {"sendgrid_key", "sendgrid ",
     "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",
     " mail send", NULL},
    {"url_userinfo", "DATABASE_URL=postgresql://app:", "pg-S3cr3t",
     "@db:5432/app", NULL},
    {"url_userinfo", "mysql://root:", "my5ql-Pw", "@127.0.0.1/shop", NULL},
    {"url_userinfo", "mongodb+srv://agent:", "m0ngo-pw", "@c0.mongodb.net/db",
     NULL},
    {"url_userinfo", "mongodb://agent:", "m0ngo-pw2", "@db/x?tls=true", NULL},
    {"url_userinfo", "REDIS_URL=redis://:", "r3dis-pw", "@cache:6379/0", NULL},
    {"url_userinfo", "rediss://default:", "r3dis-tls", "@cache:6380", NULL},
    {"url_userinfo", "amqp://guest:", "amqp-Pw1", "@mq:5672/", NULL},
    {"url_userinfo", "amqps://svc:", "amqps-Pw2", "@mq:5671/vh", NULL},
    {"secret_assignment", "export STRIPE_WEBHOOK_SECRET=", "whk9Xq2mZt7Rb4Lp",
     " && ./run", NULL},
    {"secret_assignment", "{\"client_secret\": \"", "Qm9Lp2Xz7Rt4Wv8Kc1",
     "\", \"x\": 1}", NULL},
    {"secret_assignment", "db:\n  db_password: ", "T4r!x9Qm#2Lp", "\n", NULL},
    {"secret_assignment", "MY_SERVICE_KEY='", "a1b2c3d4e5f60718293a4b5c", "'",
     NULL},
    {"secret_assignment", "apiToken = ", "Zk29fXq1LmT8rWv3", ";", NULL},
};

#define NCASES (int)(sizeof(rule_cases) / sizeof(rule_cases[0]))

START_TEST(redact_every_rule_replaces_its_secret)
{
    const struct rule_case *c = &rule_cases[_i];
    struct st_redactor *r = new_redactor(KEY, 0);
    char note[1024], want[1024];

    snprintf(note, sizeof(note), "%s%s%s", c->prefix, c->secret, c->suffix);
    snprintf(want, sizeof(want), "%s%s%s", c->prefix,
             marker(r, c->rule, c->secret), c->suffix);
    cJSON *doc = event_with_note(note);

    ck_assert_int_eq(st_redact_event(r, doc), 1);
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(doc, "attrs");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(attrs, "note")->valuestring,
                     want);
    assert_entry(doc, 0, "attrs.note", c->rule, fp_of_rule(r, c->rule, c->secret));
    ck_assert_int_eq(nredactions(doc), 1);
    ck_assert_int_eq(strlen(fp_of(r, c->secret)), ST_REDACT_FP_DEFAULT);

    char *out = cJSON_PrintUnformatted(doc);
    ck_assert_msg(!strstr(out, c->secret), "%s: secret left in %s", c->rule,
                  out);
    if (c->probe)
        ck_assert_msg(!strstr(out, c->probe), "%s: part of the secret left",
                      c->rule);
    ck_assert_ptr_nonnull(strstr(out, "\"rule\":\"")); /* recorded */

    /* the same line as raw text gets the same marker */
    int count = -1;
    char *text = st_redact_text(r, note, strlen(note), &count);
    ck_assert_int_eq(count, 1);
    ck_assert_str_eq(text, want);

    /* and a marker is never redacted again */
    char *again = st_redact_text(r, out, strlen(out), &count);
    ck_assert_int_eq(count, 0);
    ck_assert_str_eq(again, out);

    free(again);
    free(text);
    free(out);
    cJSON_Delete(doc);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_fingerprint_is_truncated_hmac_sha256)
{
    /* RFC 4231, test case 1 */
    unsigned char key[21];
    memset(key, 0x0b, 20);
    key[20] = '\0';
    struct st_redactor *full = new_redactor(key, 64);
    struct st_redactor *dflt = new_redactor(key, 0);
    struct st_redactor *eight = new_redactor(key, 8);
    ck_assert_str_eq(
        fp_of(full, "Hi There"),
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    ck_assert_str_eq(fp_of(dflt, "Hi There"), "b0344c61d8db3853");
    ck_assert_str_eq(fp_of(eight, "Hi There"), "b0344c61");
    /* the context is re-keyed correctly call after call */
    ck_assert_str_eq(fp_of(dflt, "Hi There"), "b0344c61d8db3853");
    char small[5];
    st_redact_fingerprint(dflt, "Hi There", 8, small, sizeof(small));
    ck_assert_str_eq(small, "b034");
    st_redactor_destroy(full);
    st_redactor_destroy(dflt);
    st_redactor_destroy(eight);
}
END_TEST

START_TEST(redact_same_secret_same_fingerprint_across_events_and_instances)
{
    struct st_redactor *a = new_redactor(KEY, 0);
    struct st_redactor *b = new_redactor(KEY, 0);
    struct st_redactor *other = new_redactor(OTHER_KEY, 0);
    cJSON *e1 = event_with_note("first use of " GITHUB_TOKEN);
    cJSON *e2 = event_with_note(GITHUB_TOKEN " again, later");
    cJSON *e3 = event_with_note("token " GITHUB_TOKEN);
    cJSON *e4 = event_with_note("token " GITHUB_TOKEN);

    ck_assert_int_eq(st_redact_event(a, e1), 1);
    ck_assert_int_eq(st_redact_event(a, e2), 1);
    ck_assert_int_eq(st_redact_event(b, e3), 1);
    ck_assert_int_eq(st_redact_event(other, e4), 1);
    const char *fps[4];
    cJSON *docs[4] = {e1, e2, e3, e4};
    for (int i = 0; i < 4; i++)
        fps[i] = cJSON_GetObjectItemCaseSensitive(
                     cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                                            docs[i], "redactions"),
                                        0),
                     "fingerprint")
                     ->valuestring;
    ck_assert_str_eq(fps[0], fps[1]);
    ck_assert_str_eq(fps[0], fps[2]);
    ck_assert_str_ne(fps[0], fps[3]);
    ck_assert_str_eq(fps[0], fp_of(a, GITHUB_TOKEN));
    ck_assert_str_eq(fps[3], fp_of(other, GITHUB_TOKEN));
    /* a different secret, a different fingerprint */
    char gh[ST_REDACT_FP_MAX + 1];
    strcpy(gh, fp_of(a, GITHUB_TOKEN));
    ck_assert_str_ne(gh, fp_of(a, "AKIAIOSFODNN7EXAMPLE"));

    for (int i = 0; i < 4; i++)
        cJSON_Delete(docs[i]);
    st_redactor_destroy(a);
    st_redactor_destroy(b);
    st_redactor_destroy(other);
}
END_TEST

START_TEST(redact_paths_name_nested_members_and_array_elements)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    cJSON *doc = parse(
        "{\"schema\":\"sandtrail.event.v1\",\"attrs\":{\"headers\":["
        "\"Accept: */*\",\"Host: api.github.com\","
        "\"Authorization: Bearer 8f2Kq9ZrT4wX1mLp7sVb3nYc\"],"
        "\"steps\":[{\"env\":{\"TOKEN\":\"" GITHUB_TOKEN "\"}},"
        "[\"x\",\"AKIAIOSFODNN7EXAMPLE\"]],"
        "\"x.y\":\"glpat-Xy7zQ2mN4pL8kR1sT6vW\"},"
        "\"content\":\"" GITHUB_TOKEN " and AKIAIOSFODNN7EXAMPLE\"}");

    ck_assert_int_eq(st_redact_event(r, doc), 6);
    assert_entry(doc, 0, "attrs.headers[2]", "bearer",
                 fp_of(r, "8f2Kq9ZrT4wX1mLp7sVb3nYc"));
    assert_entry(doc, 1, "attrs.steps[0].env.TOKEN", "github_token",
                 fp_of(r, GITHUB_TOKEN));
    assert_entry(doc, 2, "attrs.steps[1][1]", "aws_access_key",
                 fp_of(r, "AKIAIOSFODNN7EXAMPLE"));
    assert_entry(doc, 3, "attrs[\"x.y\"]", "gitlab_token",
                 fp_of(r, "glpat-Xy7zQ2mN4pL8kR1sT6vW"));
    /* two secrets in one string: two records, same path, in order */
    assert_entry(doc, 4, "content", "github_token", fp_of(r, GITHUB_TOKEN));
    assert_entry(doc, 5, "content", "aws_access_key",
                 fp_of(r, "AKIAIOSFODNN7EXAMPLE"));
    ck_assert_int_eq(nredactions(doc), 6);
    /* untouched siblings stay as they were */
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(doc, "attrs"), "headers");
    ck_assert_str_eq(cJSON_GetArrayItem(h, 1)->valuestring,
                     "Host: api.github.com");
    cJSON_Delete(doc);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_object_key_holding_a_secret)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    cJSON *doc = parse("{\"attrs\":{\"tokens\":{\"" GITHUB_TOKEN
                       "\":{\"scope\":\"repo\",\"pw\":\"AKIAIOSFODNN7EXAMPLE\"}}}}");
    char *m = marker(r, "github_token", GITHUB_TOKEN);
    char path[256];

    ck_assert_int_eq(st_redact_event(r, doc), 2);
    char *out = cJSON_PrintUnformatted(doc);
    ck_assert_ptr_null(strstr(out, GITHUB_TOKEN));
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(doc, "attrs"), "tokens");
    ck_assert_str_eq(tokens->child->string, m);
    /* the paths use the redacted name, never the secret */
    snprintf(path, sizeof(path), "attrs.tokens[\"%s\"]", m);
    assert_entry(doc, 0, path, "github_token", fp_of(r, GITHUB_TOKEN));
    snprintf(path, sizeof(path), "attrs.tokens[\"%s\"].pw", m);
    assert_entry(doc, 1, path, "aws_access_key",
                 fp_of(r, "AKIAIOSFODNN7EXAMPLE"));
    free(out);
    cJSON_Delete(doc);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_aws_secret_found_by_member_name)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    const char *secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    cJSON *doc = parse("{\"attrs\":{\"env\":{\"AWS_SECRET_ACCESS_KEY\":"
                       "\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\","
                       "\"HOME\":\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"}}}");

    /* under its name it is a secret; the same 40 chars elsewhere are not
     * recognisable (and stay, which is the price of no false positives) */
    ck_assert_int_eq(st_redact_event(r, doc), 1);
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(doc, "attrs"), "env");
    ck_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(env, "AWS_SECRET_ACCESS_KEY")
            ->valuestring,
        marker(r, "aws_secret_key", secret));
    assert_entry(doc, 0, "attrs.env.AWS_SECRET_ACCESS_KEY", "aws_secret_key",
                 fp_of(r, secret));
    cJSON_Delete(doc);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_identity_credential_becomes_its_fingerprint)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    const char *cred = "hvs.CAESIJx7Yq3mK9pL2vR8tW4zN6bD1fH5jQ0sU";
    cJSON *doc = parse(
        "{\"type\":\"token_issue\",\"identity\":{\"subject\":\"agent:T-42\","
        "\"credential\":\"hvs.CAESIJx7Yq3mK9pL2vR8tW4zN6bD1fH5jQ0sU\","
        "\"credential_fp\":\"forged\",\"audience\":\"github.com\"},"
        "\"attrs\":{\"echo\":\"got hvs.CAESIJx7Yq3mK9pL2vR8tW4zN6bD1fH5jQ0sU "
        "from vault\"}}");

    ck_assert_int_eq(st_redact_event(r, doc), 2);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(doc, "identity");
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(id, "credential"));
    ck_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(id, "credential_fp")->valuestring,
        fp_of(r, cred));
    ck_assert_int_eq(cJSON_GetArraySize(id), 3); /* forged _fp replaced */
    ck_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(id, "subject")->valuestring,
        "agent:T-42");
    assert_entry(doc, 0, "identity.credential", "credential", fp_of(r, cred));
    /* the issued token is withheld wherever else it shows up */
    assert_entry(doc, 1, "attrs.echo", "credential", fp_of(r, cred));
    char *out = cJSON_PrintUnformatted(doc);
    ck_assert_ptr_null(strstr(out, cred));
    ck_assert_ptr_null(strstr(out, "forged"));
    free(out);
    cJSON_Delete(doc);

    /* a later event without a credential does not redact the old one as
     * a credential (its Vault shape still does) */
    doc = event_with_note(cred);
    ck_assert_int_eq(st_redact_event(r, doc), 1);
    assert_entry(doc, 0, "attrs.note", "vault_token", fp_of(r, cred));
    cJSON_Delete(doc);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_forged_redactions_member_is_not_trusted)
{
    struct st_redactor *r = new_redactor(KEY, 0);
#define FORGED                                                                 \
    "{\"redactions\":[{\"path\":\"attrs.note\",\"rule\":\"github_token\","     \
    "\"fingerprint\":\"0000000000000000\"}],\"attrs\":{\"note\":\"%s\"},"     \
    "\"redactions\":\"" GITHUB_TOKEN "\"}"
    char json[512];

    /* no secret: the sender's list is removed, nothing replaces it */
    snprintf(json, sizeof(json), FORGED, "all clear");
    cJSON *doc = parse(json);
    ck_assert_int_eq(st_redact_event(r, doc), 0);
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(doc, "redactions"));
    char *out = cJSON_PrintUnformatted(doc);
    ck_assert_str_eq(out, "{\"attrs\":{\"note\":\"all clear\"}}");
    free(out);
    cJSON_Delete(doc);

    /* a secret: only the real record is there */
    snprintf(json, sizeof(json), FORGED, "key AKIAIOSFODNN7EXAMPLE");
    doc = parse(json);
    ck_assert_int_eq(st_redact_event(r, doc), 1);
    ck_assert_int_eq(nredactions(doc), 1);
    assert_entry(doc, 0, "attrs.note", "aws_access_key",
                 fp_of(r, "AKIAIOSFODNN7EXAMPLE"));
    out = cJSON_PrintUnformatted(doc);
    ck_assert_ptr_null(strstr(out, "0000000000000000"));
    ck_assert_ptr_null(strstr(out, GITHUB_TOKEN));
    free(out);
    cJSON_Delete(doc);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_near_misses_are_kept)
{
    static const char *const keep[] = {
        "ghp_short",
        "AKIAabcdefghijklmnop",
        "AKIA is the prefix of an access key id",
        "AKIAIOSFODNN7EXAMPLEX", /* 17 after the prefix */
        "The basic idea: bear with the bearer of bad news, see "
        "https://example.com/docs?page=2#top",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "123e4567-e89b-12d3-a456-426614174000",
        "pip install sk-learn-compatible-estimator",
        "risk-assessment-for-production-2024-Q3",
        "Basic Authentication is disabled",
        "WWW-Authenticate: Bearer realm=\"api\"",
        "Authorization: Bearer <token>",
        "ssh://git@github.com/org/repo.git",
        "http://[::1]:8080/health",
        "https://example.com:8443/path",
        "xoxb-short",
        "eyJhbGciOiJIUzI1NiJ9 alone",
        "sk_live_short",
        "AIzaShort",
        "glpat-short",
        "github_pat_tooShort_abc",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n"
        "-----END PUBLIC KEY-----",
        "aws_secret_access_key=changeme-changeme-changeme-changeme-0000",
        "CANARY-7f3e9a21-do-not", /* a canary matches whole */
        "commit 4bf92f3577b34da6a3ce929d0e0e4736 by agent",
        /* issue 14 item 2: near misses of the new rules */
        "hvs.short",
        "this.someVeryLongIdentifier1",
        "return s.getPropertyNameValue1",
        "s.abcdefghijklmnopqrstuvwx lower only",
        "npm_config_cache=/tmp/npm npm_package_version=1.2.3",
        "pip install pypi-simple",
        "from huggingface_hub import hf_hub_download",
        "hf_abcdefghijklmnopqrstuvwxyzabcdefgh is lowercase",
        "dckr_pat_short",
        "AccountKey=tooShort==",
        "?sv=2022-11-02&se=2026-12-01&sig=short",
        "https://example.com/x?sig=Xk9mP2qR7tV4wY8zB3cD6fG1hJ5kL0nM4pQ2rS6tU8v=",
        "\"private_key_id\": \"abc\"",
        "dapi0123456789abcdef0123456789abcde",
        "SKU0123456789abcdef0123456789abcdef",
        "SK0123456789abcdef0123456789abcdeg",
        "SG.short.short",
        "postgres://app@db:5432/app",
        "redis://localhost:6379/0",
        "mongodb+srv://cluster0.mongodb.net/test",
        "DB_PASSWORD=changeme",
        "API_KEY=${API_KEY}",
        "API_TOKEN=<redacted>",
        "client_secret: ${{ secrets.CLIENT_SECRET }}",
        "SECRET_KEY=your-secret-key-here",
        "password=password",
        "token: xxxxxxxxxxxxxxxxxxxx",
        "public_key: Xk9mP2qR7tV4wY8zB3cD6fG1",
        "sort_key=Xk9mP2qR7tV4wY8z",
        "monkey=Xk9mP2qR7tV4wY8z",
        "the token was rotated; key: none",
        "\"client_token\":\"hmac-sha256:3f9638d0fdc1f4b9d3e8819cda2e58b862bd92\"",
        "GITHUB_TOKEN=[REDACTED:github_token:0123456789abcdef]",
    };
    struct st_redactor *r = new_redactor(KEY, 0);

    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        cJSON *doc = event_with_note(keep[i]);
        char *before = cJSON_PrintUnformatted(doc);
        ck_assert_msg(st_redact_event(r, doc) == 0, "redacted: %s", keep[i]);
        char *after = cJSON_PrintUnformatted(doc);
        ck_assert_str_eq(after, before);
        free(before);
        free(after);
        cJSON_Delete(doc);
    }
    for (size_t i = 0; i < st_redact_nrules(r); i++)
        ck_assert_msg(st_redact_rule_hits(r, i) == 0, "rule %s counted",
                      st_redact_rule_name(r, i));
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_text_of_an_invalid_json_line)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    const char line[] = "{\"event_id\":\"x\",\"attrs\":{\"headers\":"
                        "{\"Authorization\":\"token " GITHUB_TOKEN "\"},"
                        "\"key\":\"-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEEI"
                        "Lz8NkpX2vQ9f1yT\\nAoGCCqGSM49AwEHoUQDQgAE";
    int count = -1;
    char want[1024];

    /* cut mid-key, no END line: the body still goes */
    char *out = st_redact_text(r, line, strlen(line), &count);
    ck_assert_int_eq(count, 2);
    snprintf(want, sizeof(want),
             "{\"event_id\":\"x\",\"attrs\":{\"headers\":{\"Authorization\":"
             "\"token %s\"},\"key\":\"",
             marker(r, "github_token", GITHUB_TOKEN));
    ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "got %s", out);
    ck_assert_ptr_null(strstr(out, GITHUB_TOKEN));
    ck_assert_ptr_null(strstr(out, "MHcCAQEEI"));
    ck_assert_ptr_null(strstr(out, "AoGCCqGSM49"));
    ck_assert_ptr_nonnull(strstr(out, "[REDACTED:private_key:"));
    free(out);

    /* bytes that are not UTF-8 and a NUL do not stop it */
    const char raw[] = "\xff\xfe token=" GITHUB_TOKEN "\0 AKIAIOSFODNN7EXAMPLE";
    out = st_redact_text(r, raw, sizeof(raw) - 1, &count);
    ck_assert_int_eq(count, 2);
    snprintf(want, sizeof(want), "\xff\xfe token=%s",
             marker(r, "github_token", GITHUB_TOKEN));
    ck_assert_str_eq(out, want);
    ck_assert_ptr_nonnull(
        strstr(out + strlen(out) + 1, "[REDACTED:aws_access_key:"));

    /* nothing to redact: an exact copy */
    free(out);
    out = st_redact_text(r, "plain line", 10, &count);
    ck_assert_int_eq(count, 0);
    ck_assert_str_eq(out, "plain line");
    free(out);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_canary_literal_anywhere)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    cJSON *doc = parse("{\"attrs\":{\"" CANARY "\":[\"x" CANARY CANARY
                       "y\"]},\"content\":\"diff --git a/.env\\n+SECRET=" CANARY
                       "\\n\"}");
    const char *m = marker(r, "canary", CANARY);
    char want[300], path[160];

    ck_assert_int_eq(st_redact_event(r, doc), 4);
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(doc, "attrs");
    ck_assert_str_eq(attrs->child->string, m);
    snprintf(want, sizeof(want), "x%s%sy", m, m);
    ck_assert_str_eq(attrs->child->child->valuestring, want);
    snprintf(path, sizeof(path), "attrs[\"%s\"][0]", m);
    assert_entry(doc, 1, path, "canary", fp_of(r, CANARY));
    assert_entry(doc, 2, path, "canary", fp_of(r, CANARY));
    assert_entry(doc, 3, "content", "canary", fp_of(r, CANARY));
    char *out = cJSON_PrintUnformatted(doc);
    ck_assert_ptr_null(strstr(out, CANARY));
    free(out);
    cJSON_Delete(doc);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_overlaps_apply_left_to_right_with_the_specific_rule)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    struct {
        const char *in, *rule, *secret, *prefix, *suffix;
    } cases[] = {
        /* same span: the specific rule names it, not the generic one */
        {"Authorization: Bearer " GITHUB_TOKEN, "github_token", GITHUB_TOKEN,
         "Authorization: Bearer ", ""},
        {"https://x-access-token:" GITHUB_TOKEN "@github.com/o/r.git",
         "github_token", GITHUB_TOKEN, "https://x-access-token:",
         "@github.com/o/r.git"},
        {"Authorization: Bearer " JWT, "jwt", JWT, "Authorization: Bearer ",
         ""},
        /* an Anthropic key is also sk-..., the longer name wins the tie */
        {"k=sk-ant-api03-Xk9mP2qR7tV4wY8zB3cD6fG1hJ5kL0nM", "anthropic_key",
         "sk-ant-api03-Xk9mP2qR7tV4wY8zB3cD6fG1hJ5kL0nM", "k=", ""},
        /* at one start the longest match wins */
        {"Authorization: Bearer " GITHUB_TOKEN "~v2", "bearer",
         GITHUB_TOKEN "~v2", "Authorization: Bearer ", ""},
        /* a canary planted inside a longer token goes with the token */
        {"Bearer ab1" CANARY, "bearer", "ab1" CANARY, "Bearer ", ""},
    };
    char want[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int count;
        char *out = st_redact_text(r, cases[i].in, strlen(cases[i].in), &count);
        snprintf(want, sizeof(want), "%s%s%s", cases[i].prefix,
                 marker(r, cases[i].rule, cases[i].secret), cases[i].suffix);
        ck_assert_msg(count == 1, "%s: %d redactions", cases[i].in, count);
        ck_assert_str_eq(out, want);
        free(out);
    }
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_canary_that_a_marker_holds_is_not_matched_in_it)
{
    /* a canary may be a word that markers are made of */
    const char *const words[] = {"github_token", "REDACTED"};
    struct st_redact_conf conf = {.key = KEY,
                                  .keylen = sizeof(KEY) - 1,
                                  .canaries = words,
                                  .ncanaries = 2};
    char err[256];
    struct st_redactor *r = st_redactor_new(&conf, err, sizeof(err));
    int count;

    ck_assert_ptr_nonnull(r);
    char *once = st_redact_text(r, "push " GITHUB_TOKEN, 45, &count);
    ck_assert_int_eq(count, 1);
    char *twice = st_redact_text(r, once, strlen(once), &count);
    ck_assert_int_eq(count, 0);
    ck_assert_str_eq(twice, once);
    free(twice);
    /* outside a marker the canary is still found */
    twice = st_redact_text(r, "my github_token is REDACTED", 27, &count);
    ck_assert_int_eq(count, 2);
    free(twice);
    free(once);
    st_redactor_destroy(r);
}
END_TEST

START_TEST(redact_markers_never_match_at_any_fingerprint_length)
{
    /* 40 hex chars after "aws_secret_key:" is the one length a careless
     * pattern would take for an AWS secret */
    const int lens[] = {1, 16, 39, 40, 41, 64};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        struct st_redactor *r = new_redactor(KEY, lens[l]);
        struct text {
            char s[16384];
            size_t n;
        } *all = calloc(1, sizeof(*all));
        for (int i = 0; i < NCASES; i++)
            all->n += (size_t)snprintf(all->s + all->n, sizeof(all->s) - all->n,
                                       "%s%s%s | ", rule_cases[i].prefix,
                                       rule_cases[i].secret,
                                       rule_cases[i].suffix);
        int count;
        char *once = st_redact_text(r, all->s, all->n, &count);
        ck_assert_int_eq(count, NCASES);
        char *twice = st_redact_text(r, once, strlen(once), &count);
        ck_assert_msg(count == 0, "fp length %d: a marker matched", lens[l]);
        ck_assert_str_eq(twice, once);
        free(once);
        free(twice);
        free(all);
        st_redactor_destroy(r);
    }
}
END_TEST

START_TEST(redact_counts_hits_per_rule)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    size_t gh = (size_t)-1, aws = (size_t)-1;
    int count;

    for (size_t i = 0; i < st_redact_nrules(r); i++) {
        if (strcmp(st_redact_rule_name(r, i), "github_token") == 0)
            gh = i;
        if (strcmp(st_redact_rule_name(r, i), "aws_access_key") == 0)
            aws = i;
    }
    ck_assert_uint_ne(gh, (size_t)-1);
    ck_assert_uint_ne(aws, (size_t)-1);
    ck_assert_ptr_null(st_redact_rule_name(r, st_redact_nrules(r)));
    cJSON *doc = event_with_note(GITHUB_TOKEN " " GITHUB_TOKEN);
    ck_assert_int_eq(st_redact_event(r, doc), 2);
    free(st_redact_text(r, "AKIAIOSFODNN7EXAMPLE", 20, &count));
    ck_assert_uint_eq(st_redact_rule_hits(r, gh), 2);
    ck_assert_uint_eq(st_redact_rule_hits(r, aws), 1);
    cJSON_Delete(doc);
    st_redactor_destroy(r);
}
END_TEST

/* One key, one fingerprint, however a source wrapped its lines. */
START_TEST(redact_private_key_fingerprint_is_of_the_key_material)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    static const char *forms[] = {
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAuZ3Rk8fJq7+QvYt9\nQ1w2E3r4==\n"
        "-----END RSA PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\r\nMIIEowIBAAKCAQEAuZ3Rk8fJq7+QvYt9\r\nQ1w2E3r4==\r\n"
        "-----END RSA PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\\nMIIEowIBAAKCAQEAuZ3Rk8fJq7+QvYt9\\nQ1w2E3r4==\\n"
        "-----END RSA PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\xEF\xBF\xBDMIIEowIBAAKCAQEAuZ3Rk8fJq7+QvYt9"
        "\xEF\xBF\xBDQ1w2E3r4==\xEF\xBF\xBD-----END RSA PRIVATE KEY-----",
    };
    char first[128] = "";
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        int count = -1;
        char *text = st_redact_text(r, forms[i], strlen(forms[i]), &count);
        ck_assert_int_eq(count, 1);
        ck_assert_ptr_null(strstr(text, "MIIE"));
        if (i == 0)
            snprintf(first, sizeof(first), "%s", text);
        ck_assert_str_eq(text, first);
        free(text);
    }
    ck_assert_str_eq(first, marker(r, "private_key", forms[0]));
    /* another key, another fingerprint */
    const char *other = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAuZ3Rk8fJq7+QvYt8\n"
                        "-----END RSA PRIVATE KEY-----";
    char *text = st_redact_text(r, other, strlen(other), NULL);
    ck_assert_str_ne(text, first);
    free(text);
    st_redactor_destroy(r);
}
END_TEST

/* The prefilter looks at every other pair of bytes: a secret is found at
 * an odd offset as at an even one, at the very start and at the very end. */
START_TEST(redact_finds_a_secret_at_any_offset)
{
    const struct rule_case *c = &rule_cases[_i];
    struct st_redactor *r = new_redactor(KEY, 0);
    for (int pad = 0; pad < 4; pad++) {
        char text[1024];
        snprintf(text, sizeof(text), "%.*s%s%s%s", pad, "....", c->prefix, c->secret,
                 c->suffix);
        int count = -1;
        char *out = st_redact_text(r, text, strlen(text), &count);
        ck_assert_msg(count == 1 && !strstr(out, c->secret), "%s at offset %d: %s", c->rule,
                      pad, out);
        free(out);
        /* the secret alone, nothing around it */
        if (!strcmp(c->rule, "github_token") || !strcmp(c->rule, "aws_access_key") ||
            !strcmp(c->rule, "jwt") || !strcmp(c->rule, "canary")) {
            snprintf(text, sizeof(text), "%.*s%s", pad, "    ", c->secret);
            out = st_redact_text(r, text, strlen(text), &count);
            ck_assert_msg(count == 1, "%s alone at offset %d: %s", c->rule, pad, out);
            free(out);
        }
    }
    st_redactor_destroy(r);
}
END_TEST

/* The fault knob the canary test uses to prove it would see a leak. */
START_TEST(redact_fault_rule_off_lets_that_shape_through)
{
    char err[256] = "";
    struct st_redact_conf conf = {.key = KEY, .keylen = strlen((const char *)KEY),
                                  .fault_rule_off = "github_token"};
    struct st_redactor *r = st_redactor_new(&conf, err, sizeof(err));
    ck_assert_msg(r != NULL, "%s", err);
    int count = -1;
    char *text = st_redact_text(r, "t=" GITHUB_TOKEN " k=AKIAIOSFODNN7EXAMPLE",
                                strlen("t=" GITHUB_TOKEN " k=AKIAIOSFODNN7EXAMPLE"), &count);
    ck_assert_ptr_nonnull(strstr(text, GITHUB_TOKEN));
    ck_assert_ptr_null(strstr(text, "AKIAIOSFODNN7EXAMPLE"));
    ck_assert_int_eq(count, 1);
    free(text);
    st_redactor_destroy(r);
    conf.fault_rule_off = "no_such_rule";
    ck_assert_ptr_null(st_redactor_new(&conf, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "no_such_rule"));
}
END_TEST

START_TEST(redact_refuses_a_weak_configuration)
{
    char err[256];
    const char *shortc[] = {"abc"};
    const char *nullc[] = {NULL};
    struct st_redact_conf conf = {.key = KEY, .keylen = 8};

    ck_assert_ptr_null(st_redactor_new(&conf, err, sizeof(err)));
    ck_assert_str_eq(err, "redaction key is 8 bytes, at least 16 are needed");
    conf.keylen = sizeof(KEY) - 1;
    conf.fp_hex_len = 65;
    ck_assert_ptr_null(st_redactor_new(&conf, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "fingerprint length 65"));
    conf.fp_hex_len = 0;
    conf.canaries = shortc;
    conf.ncanaries = 1;
    ck_assert_ptr_null(st_redactor_new(&conf, err, sizeof(err)));
    ck_assert_str_eq(err, "canary 1 is 3 bytes, at least 8 are needed");
    conf.canaries = nullc;
    ck_assert_ptr_null(st_redactor_new(&conf, err, sizeof(err)));
    conf.ncanaries = 0;
    struct st_redactor *r = st_redactor_new(&conf, err, sizeof(err));
    ck_assert_ptr_nonnull(r);
    st_redactor_destroy(r);
    st_redactor_destroy(NULL);
}
END_TEST

/* ---- issue 14 item 3: encoded forms ------------------------------------- */

#define AWS_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

/* Each input hides a secret in an encoded form; the output must be exactly
 * the input with the encoded span replaced by the marker of the decoded
 * secret (same fingerprint as the plain secret). */
START_TEST(redact_encoded_forms_are_decoded_before_matching)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    struct {
        const char *prefix, *encoded, *suffix, *rule, *secret;
    } cases[] = {
        /* a percent-encoded AWS secret in a logged URL query */
        {"GET /upload?aws_secret_access_key=",
         "wJalrXUtnFEMI%2FK7MDENG%2FbPxRfiCYEXAMPLEKEY", "&x=1 HTTP/1.1",
         "aws_secret_key", AWS_SECRET},
        /* a URL-encoded bearer token */
        {"redirect=https%3A%2F%2Fapi%3Fh%3DAuthorization%3A%20Bearer%20",
         "8f2Kq9ZrT4wX1mLp7sVb3nYc%2B%2Fx", "&y=2", "bearer",
         "8f2Kq9ZrT4wX1mLp7sVb3nYc+/x"},
        /* base64 of a GitHub token */
        {"echo ", "Z2hwX1I0bmQwbVQwazNuVjRsdTNGMHJUM3N0MW5nQWJDZEVmMTIzNA==",
         " | base64 -d", "github_token", GITHUB_TOKEN},
        /* the same, URL-safe and unpadded */
        {"t=", "Z2hwX1I0bmQwbVQwazNuVjRsdTNGMHJUM3N0MW5nQWJDZEVmMTIzNA",
         "&z", "github_token", GITHUB_TOKEN},
        /* zero-width characters inside a token: U+200B, U+200C, U+200D,
         * U+2060, U+FEFF, U+00AD */
        {"pushed with ",
         "ghp_R4nd0m\xe2\x80\x8bT0k3n\xe2\x80\x8cV4lu3\xe2\x80\x8d"
         "F0rT3st\xe2\x81\xa0" "1ngAb\xef\xbb\xbf" "CdEf\xc2\xad" "1234",
         " today", "github_token", GITHUB_TOKEN},
        /* JSON escapes in a raw (rejected) line: \u and \/ inside tokens */
        {"{\"k\":\"", "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngAb\\u0043dEf1234",
         "\",", "github_token", GITHUB_TOKEN},
        {"{\"aws_secret_access_key\":\"",
         "wJalrXUtnFEMI\\/K7MDENG\\/bPxRfiCYEXAMPLEKEY", "\"", "aws_secret_key",
         AWS_SECRET},
        /* a zero-width character written as a JSON escape */
        {"{\"k\":\"", "ghp_R4nd0mT0k3nV4lu3F0rT3\\u200bst1ngAbCdEf1234", "\"",
         "github_token", GITHUB_TOKEN},
        /* a canary, percent-encoded */
        {"q=", "CANARY-7f3e9a21%2Ddo%2Dnot%2Duse", "&", "canary", CANARY},
    };
    char in[512], want[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int count = -1;
        snprintf(in, sizeof(in), "%s%s%s", cases[i].prefix, cases[i].encoded,
                 cases[i].suffix);
        snprintf(want, sizeof(want), "%s%s%s", cases[i].prefix,
                 marker(r, cases[i].rule, cases[i].secret), cases[i].suffix);
        char *out = st_redact_text(r, in, strlen(in), &count);
        ck_assert_msg(count == 1, "case %zu: %d redactions in %s", i, count,
                      out);
        ck_assert_str_eq(out, want);
        /* redacting the result again changes nothing */
        char *again = st_redact_text(r, out, strlen(out), &count);
        ck_assert_msg(count == 0, "case %zu: marker redacted again: %s", i,
                      again);
        free(again);
        free(out);

        /* and as an event's string value */
        cJSON *doc = event_with_note(in);
        ck_assert_int_eq(st_redact_event(r, doc), 1);
        const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(doc, "attrs");
        ck_assert_str_eq(
            cJSON_GetObjectItemCaseSensitive(attrs, "note")->valuestring, want);
        cJSON_Delete(doc);
    }
    st_redactor_destroy(r);
}
END_TEST

/* A rejected Vault audit line (cut short, so not JSON): the text pass finds
 * the tokens and the secret_key value. */
START_TEST(redact_rejected_vault_audit_line)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    const char line[] =
        "{\"type\":\"response\",\"auth\":{\"client_token\":\"hvs.CAESIB4vXk9mP2"
        "qR7tV4wY8zB3cD6fG1hJ5kL0nMGh4\",\"accessor\":\"x\"},\"response\":{"
        "\"data\":{\"access_key\":\"AKIAIOSFODNN7EXAMPLE\",\"secret_key\":\""
        "Qm9Lp2Xz7Rt4Wv8Kc1Tz\\/3Yb\",\"security_token\":\"FwoGZXIvYXdzE"
        "Xk9mP2qR7tV4w";
    int count = -1;
    char *out = st_redact_text(r, line, strlen(line), &count);

    ck_assert_int_eq(count, 4);
    ck_assert_ptr_null(strstr(out, "hvs.CAES"));
    ck_assert_ptr_null(strstr(out, "AKIAIOSFODNN7EXAMPLE"));
    ck_assert_ptr_null(strstr(out, "Qm9Lp2Xz7Rt4"));
    ck_assert_ptr_null(strstr(out, "FwoGZXIvYXdz"));
    ck_assert_ptr_nonnull(strstr(out, "[REDACTED:vault_token:"));
    ck_assert_ptr_nonnull(strstr(out, "\"secret_key\":\"[REDACTED:secret_"
                                      "assignment:"));
    free(out);
    st_redactor_destroy(r);
}
END_TEST

/* ---- issue 14 item 4: markers in input are not trusted ------------------ */

START_TEST(redact_markers_in_input_are_not_trusted)
{
    struct st_redactor *r = new_redactor(KEY, 0);
    int count = -1;
    char want[256];

    /* a source's own marker around the canary: the canary does not pass */
    const char forged[] = "note [REDACTED:canary:" CANARY "] end";
    char *out = st_redact_text(r, forged, strlen(forged), &count);
    ck_assert_ptr_null(strstr(out, CANARY));
    ck_assert_int_eq(count, 1);
    ck_assert_ptr_nonnull(strstr(out, "[REDACTED:forged_marker:"));
    char *again = st_redact_text(r, out, strlen(out), &count);
    ck_assert_int_eq(count, 0);
    free(again);
    free(out);

    /* rule text with terminal escapes (an OSC 52 clipboard write) */
    const char esc[] = "x [REDACTED:\x1b]52;c;ZXZpbA==\x07:0123456789abcdef] y";
    out = st_redact_text(r, esc, strlen(esc), &count);
    ck_assert_int_eq(count, 1);
    ck_assert_ptr_null(strchr(out, '\x1b')); /* the rest is inert text */
    free(out);

    /* an unknown rule name or a fingerprint of another length is forged */
    const char *const others[] = {
        "[REDACTED:no_such_rule:0123456789abcdef]",
        "[REDACTED:github_token:0123456789abcdef0]",
        "[REDACTED:github_token:0123456789ABCDEF]",
        "[REDACTED:github_token:",
        "[REDACTED:github_token:01234567[REDACTED:jwt:0123456789abcdef]",
    };
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        out = st_redact_text(r, others[i], strlen(others[i]), &count);
        ck_assert_msg(count == 1, "%s: %d", others[i], count);
        ck_assert_msg(strncmp(out, "[REDACTED:forged_marker:", 24) == 0,
                      "%s -> %s", others[i], out);
        free(out);
    }

    /* one of exactly our form passes as it is: it can carry no secret */
    const char ours[] = "[REDACTED:github_token:0123456789abcdef]";
    out = st_redact_text(r, ours, strlen(ours), &count);
    ck_assert_int_eq(count, 0);
    ck_assert_str_eq(out, ours);
    free(out);

    /* in an event, too (a native line is sent as is when nothing changed) */
    cJSON *doc = event_with_note(forged);
    ck_assert_int_eq(st_redact_event(r, doc), 1);
    char *json = cJSON_PrintUnformatted(doc);
    ck_assert_ptr_null(strstr(json, CANARY));
    free(json);
    cJSON_Delete(doc);
    st_redactor_destroy(r);

    /* a canary of exactly a fingerprint's shape sent inside a marker of our
     * form: the whole marker is the canary's */
    static const char *const hexcanary[] = {"0123456789abcdef"};
    struct st_redact_conf conf = {.key = KEY,
                                  .keylen = sizeof(KEY) - 1,
                                  .canaries = hexcanary,
                                  .ncanaries = 1};
    char err[256];
    r = st_redactor_new(&conf, err, sizeof(err));
    ck_assert_ptr_nonnull(r);
    out = st_redact_text(r, ours, strlen(ours), &count);
    ck_assert_int_eq(count, 1);
    snprintf(want, sizeof(want), "%s", marker(r, "canary", hexcanary[0]));
    ck_assert_str_eq(out, want);
    again = st_redact_text(r, out, strlen(out), &count);
    ck_assert_int_eq(count, 0);
    free(again);
    free(out);
    st_redactor_destroy(r);
}
END_TEST

/* ---- issue 12 item 6: every rule linear in its input --------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The time of a plain pass over s: what any scan must at least cost. */
static double plain_scan(const char *s, size_t n)
{
    volatile size_t sink = 0;
    double t0 = now_s();
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    sink = k + strlen(s);
    (void)sink;
    return now_s() - t0;
}

/* 1 MB of repeated prefixes that each rule starts on and then fails: a rule
 * that rescans the rest of the input from each start (as the PEM regex did:
 * 1 MB in 34 s) is quadratic and fails the bound. The bound is generous (a
 * behaviour, not a benchmark): 200x a plain scan plus 2 s. */
START_TEST(redact_every_rule_is_linear_in_its_input)
{
    static const char *const units[] = {
        "-----BEGIN PRIVATE KEY-----!",
        "-----BEGIN PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\n-----END PRIVATE KEY",
        "AKIA", "AKIAIOSFODNN7EXAMPL!", "aws_secret_access_key=", "secret",
        "github_pat_", "ghp_", "glpat-", "xoxb-", "sk_live_", "sk-ant-", "sk-",
        "AIza", "hvs.", " s.Ab", "npm_", "pypi-AgEIcHlwaS5vcmc", "hf_",
        "dckr_pat_", "AccountKey=", "&sig=", "?se=1&sig=",
        "\"private_key_id\": \"", "dapi", "SK0", "AC0", "SG.", "eyJ",
        "eyJhbGciOiJIUzI1NiJ9.", "Bearer ", "Basic a", "://a:", "a://a:b",
        "x_TOKEN=", "API_KEY: a", "a_key=", "passwordpassword=",
        "[REDACTED:", "[REDACTED:canary:", "%41", "%", "\\u0041", "\\",
        "\\/", "\xe2\x80\x8b", "AAAA", "A", "Z2hw", "+/", "a-_",
        CANARY "x", "CANARY-7f3e9a21-do-not-",
    };
    const size_t n = 1 << 20;
    struct st_redactor *r = new_redactor(KEY, 0);
    char *s = malloc(n + 1);

    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        size_t ul = strlen(units[u]);
        for (size_t i = 0; i < n; i++)
            s[i] = units[u][i % ul];
        s[n] = '\0';
        double plain = plain_scan(s, n);
        int count;
        double t0 = now_s();
        char *out = st_redact_text(r, s, n, &count);
        double took = now_s() - t0;
        free(out);
        if (getenv("REDACT_TIMES"))
            fprintf(stderr, "%-40.40s %8.4f s (plain %.5f s)\n", units[u],
                    took, plain);
        ck_assert_msg(took < 200 * plain + 2.0,
                      "1 MB of \"%s\" took %.2f s to redact (a plain scan "
                      "%.4f s): super-linear",
                      units[u], took, plain);
    }
    free(s);
    st_redactor_destroy(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("redact");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, redact_every_rule_replaces_its_secret, 0, NCASES);
    tcase_add_test(tc, redact_fingerprint_is_truncated_hmac_sha256);
    tcase_add_test(tc,
                   redact_same_secret_same_fingerprint_across_events_and_instances);
    tcase_add_test(tc, redact_paths_name_nested_members_and_array_elements);
    tcase_add_test(tc, redact_object_key_holding_a_secret);
    tcase_add_test(tc, redact_aws_secret_found_by_member_name);
    tcase_add_test(tc, redact_identity_credential_becomes_its_fingerprint);
    tcase_add_test(tc, redact_forged_redactions_member_is_not_trusted);
    tcase_add_test(tc, redact_near_misses_are_kept);
    tcase_add_test(tc, redact_text_of_an_invalid_json_line);
    tcase_add_test(tc, redact_canary_literal_anywhere);
    tcase_add_test(tc, redact_overlaps_apply_left_to_right_with_the_specific_rule);
    tcase_add_test(tc, redact_canary_that_a_marker_holds_is_not_matched_in_it);
    tcase_add_test(tc, redact_markers_never_match_at_any_fingerprint_length);
    tcase_add_test(tc, redact_counts_hits_per_rule);
    tcase_add_test(tc, redact_private_key_fingerprint_is_of_the_key_material);
    tcase_add_test(tc, redact_fault_rule_off_lets_that_shape_through);
    tcase_add_loop_test(tc, redact_finds_a_secret_at_any_offset, 0, NCASES);
    tcase_add_test(tc, redact_refuses_a_weak_configuration);
    tcase_add_test(tc, redact_encoded_forms_are_decoded_before_matching);
    tcase_add_test(tc, redact_rejected_vault_audit_line);
    tcase_add_test(tc, redact_markers_in_input_are_not_trusted);
    tcase_add_test(tc, redact_every_rule_is_linear_in_its_input);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
