/* common/bufpool.c: see bufpool.h.  The stash is small (at most
 * BUFPOOL_IDLE_MAX / BUFPOOL_GRAIN entries), so a list under one mutex
 * is enough; it is taken once per large request, never per 4k one. */
#include <pthread.h>
#include <stdlib.h>

#include "bufpool.h"
#include "cleanup.h"

/* Sizes are rounded up to this, so requests of similar size share buffers. */
#define BUFPOOL_GRAIN (1u << 20)

struct idle_buf {
    struct idle_buf *next;
    size_t cap;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct idle_buf *pool_head; /* under pool_lock */
static size_t pool_bytes;          /* under pool_lock */

void *bufpool_get(size_t len, size_t *cap)
{
    size_t want = ROUND_UP(MAX(len, (size_t)1), (size_t)BUFPOOL_GRAIN);
    struct idle_buf **pp, **hitp = NULL, *hit = NULL;
    void *p = NULL;

    pthread_mutex_lock(&pool_lock);
    /* The smallest idle buffer that fits, but not one more than twice the
     * size: a 32 MiB buffer is not tied up by a 1 MiB request. */
    for (pp = &pool_head; *pp; pp = &(*pp)->next) {
        if ((*pp)->cap >= want && (*pp)->cap <= 2 * want && (!hitp || (*pp)->cap < (*hitp)->cap)) {
            hitp = pp;
        }
    }
    if (hitp) {
        hit = *hitp;
        *hitp = hit->next;
        pool_bytes -= hit->cap;
    }
    pthread_mutex_unlock(&pool_lock);
    if (hit) {
        *cap = hit->cap;
        return hit;
    }
    if (posix_memalign(&p, 4096, want) != 0) {
        return NULL;
    }
    *cap = want;
    return p;
}

void bufpool_put(void *buf, size_t cap)
{
    struct idle_buf *b = buf;

    if (!buf) {
        return;
    }
    pthread_mutex_lock(&pool_lock);
    if (pool_bytes + cap <= BUFPOOL_IDLE_MAX) {
        b->cap = cap;
        b->next = pool_head;
        pool_head = b;
        pool_bytes += cap;
        b = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    free(b); /* the stash is full */
}

size_t bufpool_idle_bytes(void)
{
    size_t n;

    pthread_mutex_lock(&pool_lock);
    n = pool_bytes;
    pthread_mutex_unlock(&pool_lock);
    return n;
}
