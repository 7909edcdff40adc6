/* pgside.c: a connection and a thread for one job at a time (see
 * pgside.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pg.h"
#include "sink.h"
#include "sinks/pgside.h"

/* Under lock: job (handed over, not yet taken), running, done and the
 * result. The connection is the side thread's own. */
struct st_pgside {
    char *dsn;
    st_pgside_job prepare;
    void *prepare_arg;
    PGconn *pg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    st_pgside_job job;
    void *arg;
    int busy; /* a job started and not yet waited for */
    int done;
    int quit;
    int rc;
    char err[1024];
};

/* Opens the side's connection as the sink opens its own (sink.c): no JIT,
 * then prepare. */
static int side_connect(struct st_pgside *s, char *errstr, size_t errsz)
{
    PQfinish(s->pg);
    s->pg = st_pg_connect(s->dsn, errstr, errsz);
    if (!s->pg)
        return ST_SINK_RETRY;
    if (st_pg_exec(s->pg, "SET jit = off", errstr, errsz) ||
        (s->prepare && s->prepare(s->prepare_arg, s->pg, errstr, errsz))) {
        PQfinish(s->pg);
        s->pg = NULL;
        return ST_SINK_RETRY;
    }
    return ST_SINK_OK;
}

static void *side_main(void *arg)
{
    struct st_pgside *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->quit && !s->job)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->quit)
            break;
        st_pgside_job job = s->job;
        void *jarg = s->arg;
        s->job = NULL;
        pthread_mutex_unlock(&s->lock);

        char err[sizeof(s->err)] = "";
        int rc = ST_SINK_OK;
        if (!s->pg || PQstatus(s->pg) != CONNECTION_OK)
            rc = side_connect(s, err, sizeof(err));
        if (rc == ST_SINK_OK)
            rc = job(jarg, s->pg, err, sizeof(err));
        /* a job that failed leaves the connection idle, or it goes */
        if (s->pg && (PQstatus(s->pg) != CONNECTION_OK ||
                      (rc && PQtransactionStatus(s->pg) != PQTRANS_IDLE))) {
            PQfinish(s->pg);
            s->pg = NULL;
            rc = ST_SINK_RETRY;
        }

        pthread_mutex_lock(&s->lock);
        s->rc = rc;
        memcpy(s->err, err, sizeof(err));
        s->done = 1;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

struct st_pgside *st_pgside_new(const char *dsn, st_pgside_job prepare, void *prepare_arg,
                                char *errstr, size_t errsz)
{
    struct st_pgside *s = st_calloc(1, sizeof(*s));
    s->dsn = st_strdup(dsn);
    s->prepare = prepare;
    s->prepare_arg = prepare_arg;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    int e = pthread_create(&s->thread, NULL, side_main, s);
    if (e) {
        snprintf(errstr, errsz, "could not start a PostgreSQL side thread: %s", strerror(e));
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s->dsn);
        free(s);
        return NULL;
    }
    return s;
}

void st_pgside_start(struct st_pgside *s, st_pgside_job job, void *arg)
{
    pthread_mutex_lock(&s->lock);
    if (s->busy)
        st_fatal("a PostgreSQL side job started while one runs");
    s->job = job;
    s->arg = arg;
    s->busy = 1;
    s->done = 0;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int st_pgside_wait(struct st_pgside *s, char *errstr, size_t errsz)
{
    pthread_mutex_lock(&s->lock);
    while (s->busy && !s->done)
        pthread_cond_wait(&s->cond, &s->lock);
    int rc = s->busy ? s->rc : ST_SINK_OK;
    if (rc)
        snprintf(errstr, errsz, "%s", s->err);
    s->busy = 0;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void st_pgside_destroy(struct st_pgside *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->quit = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    PQfinish(s->pg);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s->dsn);
    free(s);
}
