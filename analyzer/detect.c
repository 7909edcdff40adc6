/* detect.c: the detector registry and shared helpers. */
#include <stdio.h>
#include <string.h>
#include <time.h>

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

int st_detect_expire_due(int64_t *last_s, const struct st_analyzer_conf *conf)
{
    int64_t now = (int64_t)time(NULL), every = conf->state_ttl_s / 10;
    if (*last_s && now - *last_s < (every > 0 ? every : 1))
        return 0;
    *last_s = now;
    return 1;
}
