/* input_file.c: --input FILE|- and --follow FILE (see input.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "collector.h"
#include "ingest.h"
#include "input.h"
#include "linereader.h"
#include "log.h"
#include "produce.h"
#include "tail.h"

int st_input_file(FILE *f, struct st_ingest *in, volatile sig_atomic_t *stop)
{
    struct st_linereader *lr = st_linereader_new(f, (size_t)in->conf->max_line_bytes);
    const char *line;
    size_t len;
    int too_long, r = 0, rc = 0;

    for (;;) {
        /* a live pipe gone quiet: what was read is produced now, not when
         * a batch fills (a slow stream would wait for minutes) */
        if (st_linereader_would_block(lr) && st_ingest_drain(in) < 0) {
            rc = -1;
            break;
        }
        if (*stop || (r = st_linereader_next(lr, &line, &len, &too_long)) <= 0)
            break;
        /* SIGHUP: log.level now; the canaries when no batch is in flight (a
         * file read through without a pause keeps those it started with) */
        st_ingest_reload(in);
        if (st_ingest_add(in, line, len, too_long) < 0) {
            rc = -1;
            break;
        }
        /* a full spool (or its disk full): wait until Kafka takes some */
        while (!*stop && st_producer_full(in->prod)) {
            st_producer_poll(in->prod);
            usleep(100000);
        }
    }
    if (st_ingest_drain(in) < 0)
        rc = -1;
    if (r < 0) {
        st_error("could not read \"%s\": %s", in->input_name, strerror(errno));
        rc = -1;
    }
    st_linereader_destroy(lr);
    return rc;
}

/* After every input.checkpoint_lines lines, and whenever the file is idle,
 * wait for delivery and save the position: a restart re-reads at most the
 * lines since. */
int st_input_follow(const char *path, struct st_ingest *in, volatile sig_atomic_t *stop)
{
    const struct st_collector_conf *conf = in->conf;
    char errstr[512], ckpt[4096];
    const char *line;
    size_t len;
    int too_long, rc = 0;
    int64_t pending = 0;

    if (conf->checkpoint && *conf->checkpoint)
        snprintf(ckpt, sizeof(ckpt), "%s", conf->checkpoint);
    else
        snprintf(ckpt, sizeof(ckpt), "%s.sandtrail.pos", path);
    struct st_tail_opts topts = {
        .max_line = (size_t)conf->max_line_bytes,
        .rotated_glob = conf->rotated_pattern,
        .grace_ms = conf->rotate_grace_ms,
        .metrics = in->metrics,
    };
    struct st_tail *t = st_tail_open(path, ckpt, &topts, errstr, sizeof(errstr));
    if (!t) {
        st_error("%s", errstr);
        return -1;
    }
    st_info("following \"%s\" (checkpoint \"%s\")", path, ckpt);
    while (!*stop) {
        st_ingest_reload(in); /* SIGHUP: the canaries apply from the next batch */
        int r = st_tail_next(t, &line, &len, &too_long);
        if (r < 0) {
            st_error("could not read \"%s\": %s", path, strerror(errno));
            rc = -1;
            break;
        }
        if (r == 1) {
            if (st_ingest_add(in, line, len, too_long) < 0) {
                rc = -1;
                break;
            }
            pending++;
        }
        if (pending && (r == 0 || pending >= conf->checkpoint_lines)) {
            /* every line read so far produced, then delivered, then the
             * position saved */
            if (st_ingest_drain(in) < 0) {
                rc = -1;
                break;
            }
            if (st_producer_durable(in->prod, (int)conf->delivery_timeout_ms)) {
                st_error("could not deliver to Kafka: not advancing the checkpoint");
                rc = -1;
                break;
            }
            if (st_tail_checkpoint(t, errstr, sizeof(errstr))) {
                st_error("%s", errstr);
                rc = -1;
                break;
            }
            pending = 0;
            st_ingest_sync_metrics(in);
        }
        if (r == 0) {
            st_producer_poll(in->prod);
            usleep((useconds_t)conf->poll_ms * 1000);
        }
        /* a full spool: stop reading until Kafka takes some of it */
        while (!*stop && st_producer_full(in->prod)) {
            st_producer_poll(in->prod);
            usleep((useconds_t)conf->poll_ms * 1000);
        }
    }
    if (rc == 0 && pending && st_ingest_drain(in) == 0 &&
        st_producer_durable(in->prod, (int)conf->delivery_timeout_ms) == 0)
        rc = st_tail_checkpoint(t, errstr, sizeof(errstr));
    st_tail_close(t);
    return rc;
}
