/* fuzz_event.c: event validation (common/event.c) on any bytes: never a
 * crash, and an event it accepts has the fields every later stage relies
 * on. */
#include <stdint.h>
#include <stdlib.h>

#include "event.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_event ev;
    struct st_reject rej;
    if (st_event_parse(&ev, (const char *)data, size, &rej) == 0) {
        if (!ev.event_id || !ev.task_id || !ev.run_id || !ev.source_name ||
            !st_event_target(&ev))
            abort();
        st_event_fini(&ev);
    } else if (!rej.code || !*rej.code) {
        abort();
    }
    return 0;
}
