/* fuzz_ipclass.c: the destination classifier (analyzer/ipclass.c) on any
 * text: never a crash, and the canonical text it gives for an address is
 * itself classified the same way (so a finding's canonical destination
 * means what the spelling it came from meant). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipclass.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *host = malloc(size + 1);
    memcpy(host, data, size);
    host[size] = '\0';
    char norm[ST_IPCLASS_NORM_MAX], again[ST_IPCLASS_NORM_MAX];
    enum st_ipclass c = st_ipclass_classify(host, norm, sizeof(norm));
    if (strlen(norm) >= sizeof(norm))
        abort();
    if (*norm) {
        enum st_ipclass c2 = st_ipclass_classify(norm, again, sizeof(again));
        if (c2 != c || strcmp(norm, again) != 0)
            abort();
    }
    free(host);
    return 0;
}
