/* block/compare.c: the compare engine, see compare.h.  Block status
 * drives it: a range that reads as zeroes in both images is never read,
 * so large holes cost nothing, and a range is read in chunks of at most
 * CMP_CHUNK, on every core (blk_pread_many: inflating a compressed image
 * is the cost).  Nothing here prints; cmd/compare.c does. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "compare.h"
#include "pread-many.h"

#define CMP_CHUNK (4u << 20)

/* What strict mode compares: qemu-img compare -s compares the whole block
 * status, so a hole differs from written zeroes, a zero cluster from an
 * unallocated one, and a preallocated cluster from both. */
#define STRICT_FLAGS (BLK_EXT_DATA | BLK_EXT_ZERO | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET)

struct cmp {
    struct blk_image *a, *b;
    const struct blk_compare_opts *o;
    uint8_t *ba, *bb;
    uint64_t total;
    struct blk_compare_result *res;
};

static void cmp_progress(const struct cmp *c, uint64_t off)
{
    if (c->o->progress) {
        c->o->progress(c->o->progress_opaque, off, c->total);
    }
}

static int cmp_failed(struct cmp *c, enum blk_compare_failure step, uint64_t off, int r)
{
    c->res->failed = step;
    c->res->offset = off;
    return r;
}

static void cmp_differs(struct cmp *c, enum blk_compare_verdict verdict, uint64_t off)
{
    c->res->verdict = verdict;
    c->res->offset = off;
}

/* Index of the first byte where pa and pb differ (NULL reads as zeroes),
 * or n if none does. */
static uint64_t first_difference(const uint8_t *pa, const uint8_t *pb, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint8_t va = pa ? pa[i] : 0, vb = pb ? pb[i] : 0;
        if (va != vb) {
            return i;
        }
    }
    return n;
}

/* Outside strict mode, extend [off, off+*n) over the extents after it
 * that need reading (not zero in both), up to a chunk: a compressed image
 * answers block status one cluster at a time, and a cluster is too small
 * to read on every core. */
static int extend_window(struct cmp *c, uint64_t off, uint64_t len, uint64_t *n, bool *za, bool *zb)
{
    uint64_t max = MIN(len, (uint64_t)CMP_CHUNK);

    while (!c->o->strict && *n < max) {
        struct blk_extent ea, eb;
        uint64_t at = off + *n;
        int r;
        if ((r = blk_image_block_status(c->a, at, len - *n, &ea)) < 0 ||
            (r = blk_image_block_status(c->b, at, len - *n, &eb)) < 0) {
            return cmp_failed(c, BLK_CMP_FAIL_STATUS, at, r);
        }
        bool na = ea.flags & BLK_EXT_ZERO, nb = eb.flags & BLK_EXT_ZERO;
        if (na && nb) {
            break;
        }
        *za &= na;
        *zb &= nb;
        *n += MIN(ea.length, eb.length);
    }
    *n = MIN(*n, max);
    return 0;
}

/* Read what is not known to be zero of [off, off+n) of both images. */
static int read_both(struct cmp *c, uint64_t off, uint64_t n, bool za, bool zb)
{
    struct blk_pread_job jobs[2];
    unsigned k = 0;

    if (!za) {
        jobs[k++] = (struct blk_pread_job){c->a, off, c->ba, n};
    }
    if (!zb) {
        jobs[k++] = (struct blk_pread_job){c->b, off, c->bb, n};
    }
    return blk_pread_many(jobs, k, 0);
}

/* [off, off+len) of both images, until the first difference. */
static int cmp_range(struct cmp *c, uint64_t off, uint64_t len)
{
    struct blk_extent ea, eb;
    int r;

    while (len > 0) {
        if ((r = blk_image_block_status(c->a, off, len, &ea)) < 0 ||
            (r = blk_image_block_status(c->b, off, len, &eb)) < 0) {
            return cmp_failed(c, BLK_CMP_FAIL_STATUS, off, r);
        }
        uint64_t n = MIN(MIN(ea.length, eb.length), (uint64_t)CMP_CHUNK);
        bool za = ea.flags & BLK_EXT_ZERO, zb = eb.flags & BLK_EXT_ZERO;
        cmp_progress(c, off);
        if (c->o->strict && (ea.flags & STRICT_FLAGS) != (eb.flags & STRICT_FLAGS)) {
            cmp_differs(c, BLK_CMP_STATUS_DIFFERS, off);
            return 0;
        }
        if (!(za && zb)) {
            if ((r = extend_window(c, off, len, &n, &za, &zb)) < 0) {
                return r;
            }
            if ((r = read_both(c, off, n, za, zb)) < 0) {
                return cmp_failed(c, BLK_CMP_FAIL_READ, off, r);
            }
            uint64_t i = first_difference(za ? NULL : c->ba, zb ? NULL : c->bb, n);
            if (i < n) {
                cmp_differs(c, BLK_CMP_DATA_DIFFERS, off + i);
                return 0;
            }
        }
        off += n;
        len -= n;
    }
    return 0;
}

/* [off, end) of the larger image must read as zeroes. */
static int cmp_tail(struct cmp *c, struct blk_image *img, uint64_t off, uint64_t end)
{
    int r;

    while (off < end) {
        struct blk_extent e;
        cmp_progress(c, off);
        if ((r = blk_image_block_status(img, off, end - off, &e)) < 0) {
            return cmp_failed(c, BLK_CMP_FAIL_STATUS, off, r);
        }
        uint64_t n = MIN(e.length, (uint64_t)CMP_CHUNK);
        if (!(e.flags & BLK_EXT_ZERO)) {
            struct blk_pread_job job = {img, off, c->ba, n};
            if ((r = blk_pread_many(&job, 1, 0)) < 0) {
                return cmp_failed(c, BLK_CMP_FAIL_READ, off, r);
            }
            uint64_t i = first_difference(c->ba, NULL, n);
            if (i < n) {
                cmp_differs(c, BLK_CMP_DATA_DIFFERS, off + i);
                return 0;
            }
        }
        off += n;
    }
    return 0;
}

int blk_compare(struct blk_image *a, struct blk_image *b, const struct blk_compare_opts *o,
                struct blk_compare_result *res)
{
    uint64_t sa = blk_image_size(a), sb = blk_image_size(b);
    struct cmp c = {.a = a, .b = b, .o = o, .total = MAX(sa, sb), .res = res};
    int r = 0;

    memset(res, 0, sizeof *res);
    /* page-aligned for cache=none (O_DIRECT) */
    c.ba = aligned_alloc(4096, CMP_CHUNK);
    c.bb = aligned_alloc(4096, CMP_CHUNK);
    if (!c.ba || !c.bb) {
        r = err_set(ENOMEM, "compare: two buffers of %u bytes", CMP_CHUNK);
    } else if (o->strict && sa != sb) {
        res->verdict = BLK_CMP_SIZE_DIFFERS;
    } else {
        r = cmp_range(&c, 0, MIN(sa, sb));
        if (r == 0 && res->verdict == BLK_CMP_IDENTICAL && sa != sb) {
            res->tail_compared = true;
            r = cmp_tail(&c, sa > sb ? a : b, MIN(sa, sb), MAX(sa, sb));
        }
    }
    free(c.ba);
    free(c.bb);
    return r;
}
