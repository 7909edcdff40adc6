/* test_alerter.c: the alerter's pure parts, without services: the webhook
 * signature (against Python's hmac, the documented algorithm), the link
 * template, the digest document and the finding document. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "alerter.h"
#include "digest.h"
#include "webhook.h"

static struct st_alert sample(const char *id, const char *detector)
{
    struct st_alert a = {
        .notification_id = 7,
        .delivery_id = "d-1",
        .kind = "created",
        .severity = "high",
        .finding_id = id,
        .detector = detector,
        .status = "open",
        .task_id = "T-9",
        .run_id = "run 1&x=2",
        .summary = "12 denied events",
        .first_seen = "2026-11-29T07:00:02.000000Z",
        .last_seen = "2026-11-29T07:00:35.000000Z",
        .event_count = "12",
        .targets = "[\"[REDACTED:canary:6d4ac21c051adb71].example.net\"]",
        .platform = "",
    };
    return a;
}

START_TEST(alerter_signature_is_hmac_sha256_over_timestamp_dot_body)
{
    char sig[72];
    const char *body = "{\"a\":1}";
    st_webhook_sign("s3cret", 6, "1764567000", body, strlen(body), sig);
    /* python3: hmac.new(b"s3cret", b'1764567000.{"a":1}', hashlib.sha256) */
    ck_assert_str_eq(sig, "sha256=4b197577ff767914af9b73075152e33e1b4046b2a789269c7831a7e54f58c232");
    st_webhook_sign("s3cret", 6, "1764567001", body, strlen(body), sig);
    ck_assert_str_ne(sig, "sha256=4b197577ff767914af9b73075152e33e1b4046b2a789269c7831a7e54f58c232");
}
END_TEST

START_TEST(alerter_link_encodes_what_it_substitutes)
{
    struct st_alert a = sample("0123456789abcdef0123456789abcdef", "denial_burst");
    char *l = st_alert_link("http://g/d?run={run_id}&f={finding_id}&t={task_id}{x}", &a);
    ck_assert_str_eq(l, "http://g/d?run=run%201%26x%3D2&f=0123456789abcdef0123456789abcdef"
                        "&t=T-9{x}");
    free(l);
    ck_assert_ptr_null(st_alert_link("", &a));
    ck_assert_ptr_null(st_alert_link(NULL, &a));
}
END_TEST

START_TEST(alerter_finding_document_has_the_schema_fields)
{
    struct st_alert a = sample("0123456789abcdef0123456789abcdef", "denial_burst");
    cJSON *o = st_alert_json(&a, NULL);
    static const char *fields[] = {"schema", "type", "delivery_id", "kind", "finding_id",
                                   "detector", "severity", "status", "task_id", "run_id",
                                   "summary", "first_seen", "last_seen", "event_count",
                                   "targets", "link", NULL};
    for (int i = 0; fields[i]; i++)
        ck_assert_msg(cJSON_GetObjectItem(o, fields[i]), "no %s", fields[i]);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "schema")->valuestring, "sandtrail.alert.v1");
    ck_assert_int_eq(cJSON_GetObjectItem(o, "event_count")->valueint, 12);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "link")));
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "source_platform"));
    ck_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "targets"), 0)->valuestring,
                     "[REDACTED:canary:6d4ac21c051adb71].example.net");
    cJSON_Delete(o);
}
END_TEST

START_TEST(alerter_digest_names_every_finding_and_counts_by_detector)
{
    struct st_alert a[5];
    const char *det[5] = {"retry_across_paths", "denial_burst", "denial_burst",
                          "scope_drift", "denial_burst"};
    char ids[5][33];
    for (int i = 0; i < 5; i++) {
        snprintf(ids[i], sizeof(ids[i]), "%032d", i);
        a[i] = sample(ids[i], det[i]);
    }
    char id[96];
    st_digest_id("webhook.2", 41, id, sizeof(id));
    ck_assert_str_eq(id, "digest.webhook.2.41");
    char *body = st_digest_body(id, 300, 1796103300, a, 5, NULL);
    cJSON *o = cJSON_Parse(body);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "type")->valuestring, "digest");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "summary")->valuestring,
                     "and 5 more findings for task T-9: 3 denial_burst, 1 retry_across_paths, "
                     "1 scope_drift");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "window_start")->valuestring,
                     "2026-12-01T05:30:00.000000Z");
    const cJSON *fs = cJSON_GetObjectItem(o, "findings");
    ck_assert_int_eq(cJSON_GetArraySize(fs), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(
            cJSON_GetObjectItem(cJSON_GetArrayItem(fs, i), "finding_id")->valuestring, ids[i]);
    cJSON_Delete(o);
    free(body);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("alerter");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, alerter_signature_is_hmac_sha256_over_timestamp_dot_body);
    tcase_add_test(tc, alerter_link_encodes_what_it_substitutes);
    tcase_add_test(tc, alerter_finding_document_has_the_schema_fields);
    tcase_add_test(tc, alerter_digest_names_every_finding_and_counts_by_detector);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
