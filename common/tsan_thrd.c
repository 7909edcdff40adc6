/* tsan_thrd.c: C11 threads for the ThreadSanitizer build only
 * (SANDTRAIL_TSAN).
 *
 * librdkafka starts its threads with C11 thrd_create, which glibc
 * implements by an internal call that ThreadSanitizer does not intercept:
 * such a thread has no sanitizer state and crashes in its first malloc.
 * Linked into an executable, this definition takes the place of glibc's
 * for the libraries it loads, and goes through pthread_create, which the
 * sanitizer does intercept. glibc's thrd_t is a pthread_t and its
 * thrd_join reads the thread's result as pthread_join's; thrd_join and
 * thrd_detach go through pthread_join and pthread_detach here too, so that
 * the sanitizer sees the threads end. Its mtx_* and cnd_* calls are made
 * the same way (glibc's mtx_t and cnd_t are a pthread_mutex_t and a
 * pthread_cond_t), so the sanitizer sees librdkafka's locks as well. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

int thrd_create(thrd_t *thr, thrd_start_t func, void *arg);
int thrd_join(thrd_t thr, int *res);
int thrd_detach(thrd_t thr);
int mtx_init(mtx_t *m, int type);
int mtx_lock(mtx_t *m);
int mtx_trylock(mtx_t *m);
int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts);
int mtx_unlock(mtx_t *m);
void mtx_destroy(mtx_t *m);
int cnd_init(cnd_t *c);
int cnd_signal(cnd_t *c);
int cnd_broadcast(cnd_t *c);
int cnd_wait(cnd_t *c, mtx_t *m);
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts);
void cnd_destroy(cnd_t *c);

static int err_map(int err)
{
    switch (err) {
    case 0: return thrd_success;
    case ENOMEM: return thrd_nomem;
    case ETIMEDOUT: return thrd_timedout;
    case EBUSY: return thrd_busy;
    default: return thrd_error;
    }
}

struct start {
    thrd_start_t func;
    void *arg;
};

static void *trampoline(void *p)
{
    struct start s = *(struct start *)p;
    free(p);
    return (void *)(intptr_t)s.func(s.arg);
}

int thrd_create(thrd_t *thr, thrd_start_t func, void *arg)
{
    struct start *s = malloc(sizeof(*s));
    if (!s)
        return thrd_nomem;
    s->func = func;
    s->arg = arg;
    int rc = pthread_create((pthread_t *)thr, NULL, trampoline, s);
    if (rc) {
        free(s);
        return thrd_error;
    }
    return thrd_success;
}

int thrd_join(thrd_t thr, int *res)
{
    void *r;
    if (pthread_join((pthread_t)thr, &r))
        return thrd_error;
    if (res)
        *res = (int)(intptr_t)r;
    return thrd_success;
}

int thrd_detach(thrd_t thr)
{
    return pthread_detach((pthread_t)thr) ? thrd_error : thrd_success;
}

int mtx_init(mtx_t *m, int type)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, type & mtx_recursive ? PTHREAD_MUTEX_RECURSIVE
                                                        : PTHREAD_MUTEX_DEFAULT);
    int rc = pthread_mutex_init((pthread_mutex_t *)m, &a);
    pthread_mutexattr_destroy(&a);
    return err_map(rc);
}

int mtx_lock(mtx_t *m)
{
    return err_map(pthread_mutex_lock((pthread_mutex_t *)m));
}

int mtx_trylock(mtx_t *m)
{
    return err_map(pthread_mutex_trylock((pthread_mutex_t *)m));
}

int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts)
{
    return err_map(pthread_mutex_timedlock((pthread_mutex_t *)m, ts));
}

int mtx_unlock(mtx_t *m)
{
    return err_map(pthread_mutex_unlock((pthread_mutex_t *)m));
}

void mtx_destroy(mtx_t *m)
{
    pthread_mutex_destroy((pthread_mutex_t *)m);
}

int cnd_init(cnd_t *c)
{
    return err_map(pthread_cond_init((pthread_cond_t *)c, NULL));
}

int cnd_signal(cnd_t *c)
{
    return err_map(pthread_cond_signal((pthread_cond_t *)c));
}

int cnd_broadcast(cnd_t *c)
{
    return err_map(pthread_cond_broadcast((pthread_cond_t *)c));
}

int cnd_wait(cnd_t *c, mtx_t *m)
{
    return err_map(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}

int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts)
{
    return err_map(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}

void cnd_destroy(cnd_t *c)
{
    pthread_cond_destroy((pthread_cond_t *)c);
}
