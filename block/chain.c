/* block/chain.c: what rebase and commit share: finding an image in a
 * backing chain, the drivers' change_backing and make_empty ops, and the
 * worker pool that runs their data steps (block/rebase.c,
 * block/commit.c).  Not for: deciding what to copy (the engines). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "chain-pool.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/turns.h"
#include "common/util.h"
#include "driver.h"
#include "esc-name.h"

#define DEFAULT_WORKERS 8
#define MAX_WORKERS 64

static struct blk_node *chain_node(struct blk_image *img, unsigned depth)
{
    struct blk_node *n = blk_image_root(img);

    while (n && depth--) {
        n = n->backing;
    }
    return n;
}

const char *blk_image_chain_name(struct blk_image *img, unsigned depth)
{
    struct blk_node *n = chain_node(img, depth);

    return n ? blk_node_filename(n) : NULL;
}

const char *blk_image_chain_format(struct blk_image *img, unsigned depth)
{
    struct blk_node *n = chain_node(img, depth);

    return n ? blk_node_driver_name(n) : NULL;
}

static bool same_file(const struct stat *a, const char *path)
{
    struct stat b;

    return path && stat(path, &b) == 0 && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

/* path taken relative to the directory of 'image' (as a backing file
 * name recorded in it would be). */
static bool same_file_from(const struct stat *a, const char *image, const char *path)
{
    const char *slash = strrchr(image, '/');
    CLEANUP_FREE char *full = NULL;

    if (path[0] == '/' || !slash) {
        return false;
    }
    if (asprintf(&full, "%.*s/%s", (int)(slash - image), image, path) < 0) {
        return false;
    }
    return same_file(a, full);
}

unsigned blk_image_chain_find(struct blk_image *img, const char *path)
{
    struct blk_node *up = blk_image_root(img);
    unsigned depth = 1;

    for (struct blk_node *n = up->backing; n; up = n, n = n->backing, depth++) {
        struct stat st;
        const char *name = blk_node_filename(n);
        if (strcmp(name, path) == 0) {
            return depth;
        }
        if (stat(name, &st) != 0) {
            continue;
        }
        if (same_file(&st, path) || same_file_from(&st, blk_node_filename(up), path)) {
            return depth;
        }
    }
    return 0;
}

bool blk_image_can_change_backing(const struct blk_image *img)
{
    return blk_image_root(img)->drv->change_backing != NULL;
}

int blk_image_change_backing(struct blk_image *img, const char *file, const char *format)
{
    struct blk_node *n = blk_image_root(img);

    if (!n->drv->change_backing) {
        return err_setx(ENOTSUP, "%s: the %s format cannot record a backing file", ESC_NAME(n),
                        n->drv->name);
    }
    if (n->read_only) {
        return err_setx(EPERM, "%s is read-only", ESC_NAME(n));
    }
    return n->drv->change_backing(n, file, format);
}

int blk_image_make_empty(struct blk_image *img)
{
    struct blk_node *n = blk_image_root(img);

    if (!n->drv->make_empty) {
        return err_setx(ENOTSUP, "%s: the %s format cannot drop its clusters", ESC_NAME(n),
                        n->drv->name);
    }
    if (n->read_only) {
        return err_setx(EPERM, "%s is read-only", ESC_NAME(n));
    }
    return n->drv->make_empty(n);
}

/* ---- the worker pool ---- */

int64_t blk_chain_idle_stretch(struct blk_image *img, uint64_t off, uint64_t max,
                               blk_chain_idle_fn idle, void *opaque)
{
    uint64_t n = 0;

    while (n < max) {
        struct blk_extent e;
        int r = blk_image_block_status(img, off + n, max - n, &e);
        if (r < 0) {
            return r;
        }
        int64_t quiet = idle(opaque, off + n, &e);
        if (quiet < 0) {
            return quiet;
        }
        n += MIN((uint64_t)quiet, e.length);
        if ((uint64_t)quiet < e.length) {
            break;
        }
    }
    return (int64_t)n;
}

struct pool {
    uint64_t size, chunk;
    blk_chain_fn fn;
    blk_chain_skip_fn skip;
    void *opaque;
    const struct blk_chain_opts *o;
    pthread_mutex_t lock;
    uint64_t next;      /* under lock: the next chunk to claim */
    uint64_t done;      /* under lock */
    uint64_t written;   /* under lock: for the rate limit */
    uint64_t turn;      /* under lock: where the chunk that may write starts */
    uint64_t seq;       /* under lock: the number of the next chunk claimed */
    struct turns turns; /* by chunk number */
    uint64_t start_ns;
    int err; /* under lock: the first error */
    char msg[512];
};

static bool pool_stopped_locked(const struct pool *p)
{
    return p->err || (p->o->cancel && *p->o->cancel);
}

static void pool_fail(struct pool *p, int r)
{
    pthread_mutex_lock(&p->lock);
    if (!p->err) {
        p->err = r;
        snprintf(p->msg, sizeof p->msg, "%s", err_msg_or(r));
    }
    turns_wake_all(&p->turns);
    pthread_mutex_unlock(&p->lock);
}

int blk_chain_turn(struct blk_chain_chunk *c)
{
    struct pool *p = c->pool;
    int r = 0;

    if (c->has_turn) {
        return 0;
    }
    pthread_mutex_lock(&p->lock);
    while (p->turn != c->off && !pool_stopped_locked(p)) {
        turns_wait(&p->turns, c->seq, &p->lock);
    }
    if (p->turn != c->off) {
        r = err_setx(ECANCELED, "stopped");
    }
    pthread_mutex_unlock(&p->lock);
    c->has_turn = r == 0;
    return r;
}

/* A chunk is done: the next one may write. */
static int pool_pass_turn(struct pool *p, struct blk_chain_chunk *c)
{
    int r = blk_chain_turn(c);

    if (r == 0) {
        pthread_mutex_lock(&p->lock);
        p->turn = c->off + c->len;
        turns_pass(&p->turns, c->seq);
        pthread_mutex_unlock(&p->lock);
    }
    return r;
}

/* -r: sleep until the bytes written so far are within the rate. */
static void pool_throttle(struct pool *p, uint64_t written)
{
    uint64_t due;

    if (!p->o->rate_limit || !written) {
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->written += written;
    due = p->start_ns + (uint64_t)((double)p->written * 1e9 / (double)p->o->rate_limit);
    pthread_mutex_unlock(&p->lock);
    uint64_t now = clock_ns();
    if (due > now) {
        struct timespec ts = {.tv_sec = (time_t)((due - now) / 1000000000u),
                              .tv_nsec = (long)((due - now) % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

/* Claim the next chunk (caller holds the lock): a stretch of whole
 * chunks fn would skip, or one chunk for fn.  1: c is to be skipped. */
static int pool_claim_locked(struct pool *p, struct blk_chain_chunk *c)
{
    uint64_t left = p->size - p->next;
    int64_t skip = p->skip ? p->skip(p->opaque, p->next, left) : 0;

    if (skip < 0) {
        return (int)skip;
    }
    /* Claims stay on the chunk grid, except for the image's end. */
    uint64_t stretch = (uint64_t)skip == left ? left : ROUND_DOWN((uint64_t)skip, p->chunk);
    c->off = p->next;
    c->seq = p->seq++;
    c->len = stretch ? stretch : MIN(p->chunk, left);
    p->next += c->len;
    return stretch ? 1 : 0;
}

static void *pool_worker(void *arg)
{
    struct pool *p = arg;
    CLEANUP_FREE uint8_t *a = NULL;
    CLEANUP_FREE uint8_t *b = NULL;

    if (posix_memalign((void **)&a, 4096, p->chunk) != 0 ||
        posix_memalign((void **)&b, 4096, p->chunk) != 0) {
        pool_fail(p, err_set(ENOMEM, "buffers of %llu bytes", (unsigned long long)p->chunk));
        return NULL;
    }
    for (;;) {
        struct blk_chain_chunk c = {.a = a, .b = b, .pool = p};
        pthread_mutex_lock(&p->lock);
        if (pool_stopped_locked(p) || p->next >= p->size) {
            pthread_mutex_unlock(&p->lock);
            break;
        }
        int r = pool_claim_locked(p, &c);
        pthread_mutex_unlock(&p->lock);

        if (r == 0) {
            r = p->fn(p->opaque, &c);
        } else if (r == 1) {
            r = 0;
        }
        if (r == 0) {
            r = pool_pass_turn(p, &c);
        }
        if (r < 0) {
            pool_fail(p, r);
            break;
        }
        pthread_mutex_lock(&p->lock);
        p->done += c.len;
        uint64_t done = p->done;
        pthread_mutex_unlock(&p->lock);
        if (p->o->progress) {
            p->o->progress(p->o->progress_opaque, done, p->size);
        }
        pool_throttle(p, c.written);
    }
    return NULL;
}

int blk_chain_run(uint64_t size, uint64_t chunk, blk_chain_fn fn, blk_chain_skip_fn skip,
                  void *opaque, const struct blk_chain_opts *o)
{
    static const struct blk_chain_opts none = {0};
    struct pool p = {
        .size = size, .chunk = chunk, .fn = fn, .skip = skip, .opaque = opaque, .o = o ? o : &none};
    unsigned n = p.o->workers ? MIN(p.o->workers, MAX_WORKERS) : DEFAULT_WORKERS;
    pthread_t threads[MAX_WORKERS];
    unsigned started = 0;

    if (size / chunk + 1 < n) {
        n = (unsigned)(size / chunk + 1); /* no idle threads for a small image */
    }
    pthread_mutex_init(&p.lock, NULL);
    turns_init(&p.turns, n);
    p.start_ns = clock_ns();
    for (; started < n - 1; started++) {
        if (pthread_create(&threads[started], NULL, pool_worker, &p) != 0) {
            break; /* fewer threads: the caller's still runs */
        }
    }
    pool_worker(&p);
    for (unsigned i = 0; i < started; i++) {
        pthread_join(threads[i], NULL);
    }
    pthread_mutex_destroy(&p.lock);
    turns_destroy(&p.turns);
    if (p.o->cancel && *p.o->cancel) {
        return err_setx(EINTR, "interrupted");
    }
    if (p.err) {
        return err_setx(-p.err, "%s", p.msg);
    }
    return 0;
}
