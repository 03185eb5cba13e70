/* block/copy-aux.c: convert's rate limit and salvaging reads (see
 * copy-aux.h); copy offloading is in copy-range.c. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "copy-aux.h"
#include "common/error.h"
#include "common/cleanup.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void blk_rate_init(struct blk_rate *r, uint64_t bytes_per_s)
{
    r->bytes_per_s = bytes_per_s;
    r->next = 0;
    pthread_mutex_init(&r->lock, NULL);
}

void blk_rate_destroy(struct blk_rate *r)
{
    pthread_mutex_destroy(&r->lock);
}

void blk_rate_wait(struct blk_rate *r, uint64_t len, volatile sig_atomic_t *cancel)
{
    double start;

    if (!r->bytes_per_s || !len) {
        return;
    }
    pthread_mutex_lock(&r->lock);
    start = MAX(now_s(), r->next);
    r->next = start + (double)len / (double)r->bytes_per_s;
    pthread_mutex_unlock(&r->lock);
    /* Sleep in slices, so that a signal stops a slow copy soon. */
    for (double left; (left = start - now_s()) > 0 && !(cancel && *cancel);) {
        double slice = MIN(left, 0.1);
        struct timespec ts = {.tv_sec = (time_t)slice,
                              .tv_nsec = (long)((slice - (double)(time_t)slice) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

int blk_pread_salvage(struct blk_image *img, uint64_t off, void *buf, uint64_t len,
                      blk_salvage_fn bad, void *opaque)
{
    int r = blk_image_pread(img, off, buf, len);

    if (r == 0) {
        return 0;
    }
    err_clear();
    if (len <= BLK_SALVAGE_SECTOR) {
        memset(buf, 0, len);
        if (bad) {
            bad(opaque, off, false, -r);
        }
        return 0;
    }
    /* Halves on sector boundaries (counted from off): each is shorter
     * than len, so this ends, after about log2(len / 512) reads per bad
     * sector instead of one read per sector. */
    uint64_t half = ROUND_UP(len / 2, (uint64_t)BLK_SALVAGE_SECTOR);
    blk_pread_salvage(img, off, buf, half, bad, opaque);
    return blk_pread_salvage(img, off + half, (uint8_t *)buf + half, len - half, bad, opaque);
}
