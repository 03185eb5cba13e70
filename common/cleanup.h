/* common/cleanup.h: scope-bound cleanup, for "free this whatever happens".
 * Multi-step undo with an order keeps using goto.  Always initialise a
 * CLEANUP_ variable; steal_ptr() what must outlive the scope. */
#ifndef DISKIMG_COMMON_CLEANUP_H
#define DISKIMG_COMMON_CLEANUP_H

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cleanup_free(void *p)
{
    free(*(void **)p);
}

static inline void cleanup_close(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
    }
}

static inline void cleanup_unlock(pthread_mutex_t **m)
{
    if (*m) {
        pthread_mutex_unlock(*m);
    }
}

static inline void *steal_ptr_(void **pp)
{
    void *p = *pp;

    *pp = NULL;
    return p;
}

#define CLEANUP_FREE __attribute__((cleanup(cleanup_free)))
#define CLEANUP_CLOSE __attribute__((cleanup(cleanup_close)))
#define steal_ptr(pp) steal_ptr_((void **)(pp))

#define GLUE_(a, b) a##b
#define GLUE(a, b) GLUE_(a, b)
#define UNIQUE_NAME(base) GLUE(base, __COUNTER__)

/* Lock m until the end of the enclosing scope. */
#define LOCK_GUARD(m) LOCK_GUARD_(m, UNIQUE_NAME(lock_guard_))
#define LOCK_GUARD_(m, name)                                                                       \
    pthread_mutex_t *name __attribute__((cleanup(cleanup_unlock))) = (m);                          \
    pthread_mutex_lock(name)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ROUND_UP(x, a) ((((x) + (a)-1) / (a)) * (a))
#define ROUND_DOWN(x, a) (((x) / (a)) * (a))
#define IS_POW2(x) ((x) != 0 && ((x) & ((x)-1)) == 0)

#endif
