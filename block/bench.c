/* block/bench.c: the bench engine, see bench.h.  One thread per request
 * in flight, each taking the next request number until count are handed
 * out or one fails; the first failure and its message are kept for the
 * caller, since messages are thread-local.  Nothing here prints;
 * cmd/bench.c does. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "block.h"
#include "common/error.h"
#include "common/util.h"

struct bench {
    struct blk_image *img;
    const struct blk_bench_opts *o;
    struct blk_bench_result *res;
    uint64_t span;           /* image size - offset */
    _Atomic uint64_t next;   /* requests handed out */
    _Atomic uint64_t writes; /* completed, for flush-interval */
    _Atomic int failed;      /* set once, by the first failure */
    pthread_mutex_t flush_lock;
    /* The first failure, written by the thread that set failed and read
     * after the threads are joined. */
    int err;
    enum blk_bench_failure step;
    char msg[1024];
};

/* Keeps the first failure (and this thread's message, if any) and tells
 * the other threads to stop. */
static void bench_fail(struct bench *b, enum blk_bench_failure step, int r)
{
    int expected = 0;

    if (atomic_compare_exchange_strong(&b->failed, &expected, 1)) {
        b->err = r;
        b->step = step;
        snprintf(b->msg, sizeof b->msg, "%s", err_msg());
    }
}

static uint64_t bench_offset(const struct bench *b, uint64_t i, uint64_t *rng)
{
    uint64_t slots = b->span / b->o->size;

    if (b->o->rand) {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        return b->o->offset + (*rng % slots) * b->o->size;
    }
    return b->o->offset + (i % slots) * b->o->size;
}

/* Every flush_interval completed writes, a flush; flushes are one at a
 * time, other threads' writes stay in flight meanwhile. */
static int bench_interval_flush(struct bench *b)
{
    const struct blk_bench_opts *o = b->o;

    if (!o->write || !o->flush_interval ||
        (atomic_fetch_add(&b->writes, 1) + 1) % o->flush_interval != 0) {
        return 0;
    }
    uint64_t f0 = clock_ns();
    pthread_mutex_lock(&b->flush_lock);
    int r = blk_image_flush(b->img);
    pthread_mutex_unlock(&b->flush_lock);
    hist_record(&b->res->flush_lat, clock_ns() - f0);
    return r;
}

static void *bench_worker(void *arg)
{
    struct bench *b = arg;
    const struct blk_bench_opts *o = b->o;
    void *buf = NULL;
    uint64_t rng = (uint64_t)(uintptr_t)&buf ^ clock_ns();

    if (posix_memalign(&buf, 4096, o->size) != 0) {
        bench_fail(b, BLK_BENCH_FAIL_START, -ENOMEM);
        return NULL;
    }
    /* Non-zero data, so nothing is turned into a hole on the way. */
    memset(buf, 0xa5, o->size);
    for (;;) {
        uint64_t i = atomic_fetch_add(&b->next, 1);
        if (i >= o->count || atomic_load(&b->failed)) {
            break;
        }
        uint64_t off = bench_offset(b, i, &rng), t0 = clock_ns();
        int r = o->write ? blk_image_pwrite(b->img, off, buf, o->size, o->fua ? BLK_REQ_FUA : 0)
                         : blk_image_pread(b->img, off, buf, o->size);
        hist_record(&b->res->lat, clock_ns() - t0);
        if (r >= 0) {
            r = bench_interval_flush(b);
        }
        if (r < 0) {
            bench_fail(b, BLK_BENCH_FAIL_REQUEST, r);
            break;
        }
    }
    free(buf);
    return NULL;
}

/* Starts depth workers (as many as can start) and waits for them;
 * returns how many started. */
static uint64_t bench_threads(struct bench *b)
{
    pthread_t *tid = calloc(b->o->depth, sizeof *tid);
    uint64_t started = 0, t0 = clock_ns();

    for (uint64_t i = 0; tid && i < b->o->depth; i++) {
        if (pthread_create(&tid[i], NULL, bench_worker, b) != 0) {
            break;
        }
        started++;
    }
    for (uint64_t i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
    }
    b->res->ns = clock_ns() - t0;
    free(tid);
    return started;
}

int blk_bench(struct blk_image *img, const struct blk_bench_opts *o, struct blk_bench_result *res)
{
    uint64_t size = blk_image_size(img);
    struct bench b = {.img = img, .o = o, .res = res};
    int r = 0;

    memset(res, 0, sizeof *res);
    if (o->size == 0 || o->depth == 0 || o->offset >= size || size - o->offset < o->size) {
        return err_setx(EINVAL, "bench: no room for %" PRIu64 "-byte requests at offset %" PRIu64,
                        o->size, o->offset);
    }
    b.span = size - o->offset;
    pthread_mutex_init(&b.flush_lock, NULL);
    uint64_t started = bench_threads(&b);
    if (!atomic_load(&b.failed) && o->write) {
        r = blk_image_flush(img);
    }
    pthread_mutex_destroy(&b.flush_lock);
    if (atomic_load(&b.failed)) {
        res->failed = b.step;
        if (b.msg[0]) {
            err_setx(-b.err, "%s", b.msg);
        } else {
            err_clear();
        }
        return b.err;
    }
    if (started == 0) {
        res->failed = BLK_BENCH_FAIL_START;
        return err_setx(EAGAIN, "bench: no thread could start");
    }
    if (r < 0) {
        res->failed = BLK_BENCH_FAIL_FLUSH;
    }
    return r;
}
