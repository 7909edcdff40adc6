/* fuzz_redact.c: redaction (common/redact.c) on any bytes, as text (the
 * dead-letter path) and, when the bytes are JSON, as an event. The
 * properties a user relies on: no crash, and a canary planted anywhere in
 * the input never survives -- neither in the text nor in the event. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "redact.h"

#define CANARY "CANARY-fz-7f3a9b1c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct st_redactor *redactor(void)
{
    static struct st_redactor *r;
    if (!r) {
        static const unsigned char key[32] = "fuzzing key, not a secret......";
        const char *canaries[1] = {CANARY};
        struct st_redact_conf conf = {key, sizeof(key), canaries, 1, 0, NULL};
        char errstr[256];
        if (!(r = st_redactor_new(&conf, errstr, sizeof(errstr))))
            abort();
    }
    return r;
}

static int holds(const char *s, size_t n, const char *needle)
{
    return memmem(s, n, needle, strlen(needle)) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_redactor *r = redactor();
    const char *in = (const char *)data;
    int count = 0;
    size_t outlen = 0;

    /* the input as it is, and with the canary planted in its middle */
    char *text = st_redact_bytes(r, in, size, &count, &outlen);
    if (holds(text, outlen, CANARY))
        abort();
    free(text);
    size_t half = size / 2, n = size + strlen(CANARY);
    char *planted = malloc(n);
    memcpy(planted, in, half);
    memcpy(planted + half, CANARY, strlen(CANARY));
    memcpy(planted + half + strlen(CANARY), in + half, size - half);
    text = st_redact_bytes(r, planted, n, &count, &outlen);
    if (holds(text, outlen, CANARY) || count < 1)
        abort();
    free(text);
    free(planted);

    struct st_reject rej;
    cJSON *doc = st_json_parse(in, size, &rej);
    if (doc) {
        st_redact_event(r, doc);
        char *printed = cJSON_PrintUnformatted(doc);
        if (printed && holds(printed, strlen(printed), CANARY))
            abort();
        free(printed);
        cJSON_Delete(doc);
    }
    return 0;
}
