/* detect.c: the detector registry and shared helpers. */
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "detect.h"

const struct st_detector_ops *const st_detectors[] = {
    &st_denial_burst_ops,
    &st_retry_across_paths_ops,
    &st_scope_drift_ops,
    &st_token_write_ops,
    &st_volume_anomaly_ops,
    &st_private_destination_ops,
    NULL,
};

char *st_detect_key(const struct st_analyzer_conf *conf, const char *detector,
                    const char *kind, const char *task_id, const char *run_id)
{
    struct st_buf b;
    st_buf_init(&b);
    st_buf_printf(&b, "%s%s:%s:%zu:%s:%zu:%s", conf->redis_prefix, detector, kind,
                  strlen(task_id), task_id, strlen(run_id), run_id);
    return b.data;
}
