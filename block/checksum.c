/* block/checksum.c: reading an image for its content checksum (the
 * engine of "diskimg checksum"; the tree itself is hasher.c).
 *
 * Workers claim ranges in offset order, each homogeneous by block status
 * and aligned to the hash block: a range that reads as zeroes is given to
 * the hasher without reading it, a range with data is read and hashed by
 * the worker that read it, so hashing runs on every core.  Results arrive
 * out of order; the hasher puts them back in order.  Not for: copying
 * (copy.c feeds the same hasher from its own reads). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "block.h"
#include "hasher.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"

#define DEFAULT_BUFFER (4u << 20)
#define MIN_WORKERS 8
#define MAX_WORKERS 64

struct reader {
    struct blk_image *img;
    struct blk_hasher *h;
    const struct blk_checksum_opts *o;
    uint64_t end, buffer;
    pthread_mutex_t lock;
    uint64_t next; /* under lock */
    uint64_t done; /* under lock */
    uint64_t total;
    int err; /* first error, under lock */
    char msg[512];
};

struct rclaim {
    uint64_t start, len;
    bool zero;
};

/* The next range: zeroes up to the last whole block they cover, or data
 * up to the hash block after its extent (at most one buffer); a zero run
 * inside one block is read with its block.  Returns 1 at the end. */
static int claim_locked(struct reader *rd, struct rclaim *cl)
{
    const uint64_t bs = BLK_HASH_BLOCK;
    struct blk_extent ext;
    int r;

    if (rd->next >= rd->end) {
        return 1;
    }
    cl->start = rd->next;
    r = blk_image_block_status(rd->img, cl->start, rd->end - cl->start, &ext);
    if (r < 0) {
        return r;
    }
    uint64_t ext_end = cl->start + MIN(MAX(ext.length, 1), rd->end - cl->start);
    cl->zero = false;
    if (ext.flags & BLK_EXT_ZERO) {
        uint64_t zend = ext_end == rd->end ? ext_end : ROUND_DOWN(ext_end, bs);
        if (zend > cl->start) {
            cl->zero = true;
            cl->len = zend - cl->start;
            rd->next = zend;
            return 0;
        }
        ext_end = cl->start + bs;
    }
    uint64_t end = MIN(MIN(ROUND_UP(ext_end, bs), cl->start + rd->buffer), rd->end);
    cl->len = end - cl->start;
    rd->next = end;
    return 0;
}

static bool failed_locked(const struct reader *rd)
{
    return rd->err || (rd->o->cancel && *rd->o->cancel);
}

static void fail(struct reader *rd, int r)
{
    pthread_mutex_lock(&rd->lock);
    if (!rd->err) {
        rd->err = r;
        snprintf(rd->msg, sizeof rd->msg, "%s", err_msg_or(r));
    }
    pthread_mutex_unlock(&rd->lock);
}

static int process(struct reader *rd, const struct rclaim *cl, uint8_t *buf)
{
    int r;

    if (cl->zero) {
        return blk_hasher_zero(rd->h, cl->start, cl->len);
    }
    r = blk_image_pread(rd->img, cl->start, buf, cl->len);
    return r < 0 ? r : blk_hasher_data(rd->h, cl->start, buf, cl->len);
}

static void *reader_worker(void *arg)
{
    struct reader *rd = arg;
    void *buf = NULL;

    if (posix_memalign(&buf, 4096, rd->buffer) != 0) {
        fail(rd, err_set(ENOMEM, "checksum buffer"));
        return NULL;
    }
    for (;;) {
        struct rclaim cl;
        uint64_t done;
        int r;

        pthread_mutex_lock(&rd->lock);
        r = failed_locked(rd) ? 1 : claim_locked(rd, &cl);
        pthread_mutex_unlock(&rd->lock);
        if (r == 1) {
            break;
        }
        if (r == 0) {
            r = process(rd, &cl, buf);
        }
        if (r < 0) {
            fail(rd, r);
            break;
        }
        pthread_mutex_lock(&rd->lock);
        rd->done += cl.len;
        done = rd->done;
        pthread_mutex_unlock(&rd->lock);
        if (rd->o->progress) {
            rd->o->progress(rd->o->progress_opaque, done, rd->total);
        }
    }
    free(buf);
    return NULL;
}

static unsigned default_workers(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    return (unsigned)MIN(MAX(cores, (long)MIN_WORKERS), (long)MAX_WORKERS);
}

int blk_hasher_read(struct blk_hasher *h, struct blk_image *img, uint64_t start, uint64_t end,
                    const struct blk_checksum_opts *o)
{
    static const struct blk_checksum_opts defaults;
    struct reader rd = {.img = img, .h = h, .o = o ? o : &defaults, .end = end, .next = start};
    unsigned n = rd.o->workers ? MIN(rd.o->workers, (unsigned)MAX_WORKERS) : default_workers();
    pthread_t tid[MAX_WORKERS];
    unsigned started = 0;

    if (start % BLK_HASH_BLOCK || start > end || end > blk_image_size(img)) {
        return err_setx(EINVAL, "checksum: bad range to read");
    }
    rd.total = end - start;
    rd.buffer = rd.o->buffer_size ? rd.o->buffer_size : DEFAULT_BUFFER;
    rd.buffer = MAX(ROUND_DOWN(rd.buffer, BLK_HASH_BLOCK), (uint64_t)BLK_HASH_BLOCK);
    pthread_mutex_init(&rd.lock, NULL);
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&tid[i], NULL, reader_worker, &rd) != 0) {
            break;
        }
        started++;
    }
    if (started == 0) {
        fail(&rd, err_set(EAGAIN, "starting checksum workers"));
    }
    for (unsigned i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
    }
    pthread_mutex_destroy(&rd.lock);
    if (rd.err) {
        err_setx(-rd.err, "%s", rd.msg);
        return rd.err;
    }
    if (rd.o->cancel && *rd.o->cancel) {
        return err_setx(EINTR, "interrupted");
    }
    return 0;
}

int blk_image_checksum(struct blk_image *img, const struct blk_checksum_opts *o,
                       uint8_t out[BLK_CHECKSUM_LEN])
{
    struct blk_hasher *h = NULL;
    uint64_t size = blk_image_size(img), padded = o && o->size ? o->size : size;
    uint64_t tail = ROUND_UP(size, (uint64_t)BLK_HASH_BLOCK);
    int r;

    if (padded < size) {
        return err_setx(EINVAL, "checksum: %" PRIu64 " bytes asked of an image of %" PRIu64, padded,
                        size);
    }
    r = blk_hasher_new(padded, &h);
    if (r == 0) {
        r = blk_hasher_read(h, img, 0, size, o);
    }
    if (r == 0 && padded > tail) {
        r = blk_hasher_zero(h, tail, padded - tail); /* (a partial last block was padded) */
    }
    if (r == 0) {
        r = blk_hasher_final(h, out);
    }
    blk_hasher_free(h);
    return r;
}
