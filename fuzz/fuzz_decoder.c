/* fuzz_decoder.c: one decoder (FUZZ_DECODER, set by CMake) on any line.
 * Lines are untrusted: a decoder never crashes, and it either maps the line
 * to an object, skips it, or refuses it with a reason; what it maps goes on
 * through validation as in the collector. */
#include <stdint.h>
#include <stdlib.h>

#include "decoder.h"
#include "event.h"

#ifndef FUZZ_DECODER
#error "FUZZ_DECODER names the decoder under test"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct st_decode_ctx ctx = {"fuzz-source", NULL};
    struct st_reject rej = {0};
    cJSON *out = NULL;
    int rc = FUZZ_DECODER.decode((const char *)data, size, &ctx, &out, &rej);
    if (rc == 0) {
        if (!cJSON_IsObject(out))
            abort();
        struct st_event ev;
        if (st_event_from_doc(&ev, out, &rej) == 0) /* it owns out now */
            st_event_fini(&ev);
    } else if (out || (rc < 0 && (!rej.code || !*rej.code))) {
        abort();
    }
    return 0;
}
