/* fuzz_json.c: the strict JSON parser (common/json.c) on any bytes. It
 * must never crash, read out of bounds or leak, and a document it accepts
 * must be valid UTF-8 that cJSON prints and parses back to the same tree. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_reject rej;
    cJSON *doc = st_json_parse((const char *)data, size, &rej);
    if (!doc) {
        if (!rej.code || !*rej.code)
            abort(); /* a refusal always has a reason */
        return 0;
    }
    if (!st_utf8_valid((const char *)data, size))
        abort(); /* accepted bytes must be UTF-8 */
    char *text = cJSON_PrintUnformatted(doc);
    if (text) {
        cJSON *again = st_json_parse(text, strlen(text), &rej);
        if (!again || !cJSON_Compare(doc, again, 1))
            abort(); /* what we accept survives a round trip */
        cJSON_Delete(again);
        free(text);
    }
    cJSON_Delete(doc);
    return 0;
}
