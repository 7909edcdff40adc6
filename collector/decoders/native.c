/* native.c: lines that already are sandtrail.event.v1 events.
 *
 * The line is parsed strictly (st_json_parse: UTF-8, NUL bytes, depth,
 * duplicate keys) and the object is passed through unchanged; the caller's
 * st_event_parse then validates it against the schema. */
#include "decoder.h"

static int native_decode(const char *line, size_t len, const struct st_decode_ctx *ctx,
                         cJSON **out, struct st_reject *rej)
{
    *out = NULL;
    if (st_decode_check_line(line, len, rej))
        return -1;
    *out = st_decode_parse_object(line, len, rej);
    return *out ? 0 : -1;
}

const struct st_decoder_ops st_native_decoder = {
    .name = "native",
    .decode = native_decode,
};
