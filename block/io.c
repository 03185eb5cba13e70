/* block/io.c: the generic I/O path of one node.
 *
 * This is the only place that checks requests (bounds, read-only), masks
 * flags down to what the driver declared, and emulates what it lacks:
 *   - FUA without native support, or longer than native_fua_max: write
 *     (or zero, or discard), then blk_flush() of this node;
 *   - unaligned requests on nodes that need alignment (O_DIRECT): a bounce
 *     buffer, and read-modify-write of the edge blocks for writes;
 *   - write zeroes the driver cannot do: zero buffers (unless NO_FALLBACK).
 * Compressed writes come through here too, so they are checked, traced
 * and counted like every other write.  Drivers never write their own
 * fallbacks, and nothing above this file calls a driver's data path. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "driver.h"
#include "esc-name.h"

#define STAT_INC(n, field, v)                                                                      \
    atomic_fetch_add_explicit(&(n)->stats.field, (v), memory_order_relaxed)

/* Largest zero buffer written at once by the write-zeroes fallback. */
#define ZERO_CHUNK (1u << 20)

/* What a request does, for the errno of a failed check: the NBD spec wants
 * ENOSPC for writes past the end, EINVAL for reads and discards. */
enum blk_req_kind { BLK_KIND_READ, BLK_KIND_WRITE, BLK_KIND_DISCARD };

/* A request past the end of a node that is not growable.  A write there
 * into a node whose length cannot change (an NBD export under a format,
 * which would have appended) is out of space, said so with the reason;
 * any other is a request that was wrong about the node's length. */
static int blk_past_end(const struct blk_node *n, uint64_t off, uint64_t len, int64_t size,
                        enum blk_req_kind kind)
{
    if (kind == BLK_KIND_WRITE && !blk_can_resize(n)) {
        return err_setx(ENOSPC,
                        "%s: no space left: writing %" PRIu64 "+%" PRIu64
                        " needs more than its %" PRId64 " bytes, and its length cannot change (%s)",
                        ESC_NAME(n), off, len, size, n->drv->name);
    }
    return err_setx(kind == BLK_KIND_WRITE ? ENOSPC : EINVAL,
                    "%s: request at %" PRIu64 "+%" PRIu64 " is beyond the end (%" PRId64 " bytes)",
                    ESC_NAME(n), off, len, size);
}

static int blk_check_request(struct blk_node *n, uint64_t off, uint64_t len, enum blk_req_kind kind)
{
    if (kind != BLK_KIND_READ && n->read_only) {
        return err_setx(EPERM, "%s is read-only", ESC_NAME(n));
    }
    if (off > INT64_MAX || len > INT64_MAX - off) {
        return err_setx(EINVAL, "%s: request at %" PRIu64 "+%" PRIu64 " overflows", ESC_NAME(n),
                        off, len);
    }
    if (!n->growable) {
        int64_t size = n->drv->get_length(n);
        if (size < 0) {
            return (int)size;
        }
        if (off > (uint64_t)size || len > (uint64_t)size - off) {
            return blk_past_end(n, off, len, size, kind);
        }
    }
    return 0;
}

static bool blk_range_aligned(const struct blk_node *n, uint64_t off, uint64_t len)
{
    return ((off | len) & (n->request_alignment - 1)) == 0;
}

static bool blk_mem_aligned(const struct blk_node *n, const struct iovec *iov, int iovcnt)
{
    uintptr_t bits = 0;

    if (n->mem_alignment <= 1) {
        return true;
    }
    for (int i = 0; i < iovcnt; i++) {
        bits |= (uintptr_t)iov[i].iov_base | iov[i].iov_len;
    }
    return (bits & (n->mem_alignment - 1)) == 0;
}

static void *blk_bounce_alloc(const struct blk_node *n, uint64_t len)
{
    size_t align = MAX(MAX(n->mem_alignment, n->request_alignment), sizeof(void *));
    void *p = NULL;

    if (posix_memalign(&p, align, ROUND_UP(len, align)) != 0) {
        return NULL;
    }
    return p;
}

/* Read [off, off+len) through an aligned bounce buffer into iov. */
static int blk_read_bounced(struct blk_node *n, uint64_t off, uint64_t len, const struct iovec *iov,
                            int iovcnt)
{
    uint32_t a = n->request_alignment;
    uint64_t head = off % a;
    uint64_t alen = ROUND_UP(head + len, a);
    CLEANUP_FREE void *buf = blk_bounce_alloc(n, alen);
    int r;

    if (!buf) {
        return err_set(ENOMEM, "%s: bounce buffer of %" PRIu64 " bytes", ESC_NAME(n), alen);
    }
    r = n->drv->preadv(n, off - head, &(struct iovec){buf, alen}, 1);
    if (r == 0) {
        iov_from_buf(iov, iovcnt, 0, (char *)buf + head, len);
    }
    return r;
}

/* Write [off, off+len) from iov through an aligned bounce buffer, reading
 * the partial edge blocks first.  The caller holds rmw_lock exclusively
 * when the range is unaligned. */
static int blk_write_bounced(struct blk_node *n, uint64_t off, uint64_t len,
                             const struct iovec *iov, int iovcnt, unsigned flags)
{
    uint32_t a = n->request_alignment;
    uint64_t head = off % a;
    uint64_t aoff = off - head;
    uint64_t alen = ROUND_UP(head + len, a);
    CLEANUP_FREE void *buf = blk_bounce_alloc(n, alen);
    int r;

    if (!buf) {
        return err_set(ENOMEM, "%s: bounce buffer of %" PRIu64 " bytes", ESC_NAME(n), alen);
    }
    if (head) {
        r = n->drv->preadv(n, aoff, &(struct iovec){buf, a}, 1);
        if (r < 0) {
            return r;
        }
    }
    if ((head + len) % a && (alen > a || !head)) {
        r = n->drv->preadv(n, aoff + alen - a, &(struct iovec){(char *)buf + alen - a, a}, 1);
        if (r < 0) {
            return r;
        }
    }
    if (head || (head + len) % a) {
        STAT_INC(n, rmw, 1);
    }
    iov_to_buf(iov, iovcnt, 0, (char *)buf + head, len);
    return n->drv->pwritev(n, aoff, &(struct iovec){buf, alen}, 1, flags);
}

int blk_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    uint64_t len = iov_length(iov, iovcnt);
    int r = blk_check_request(n, off, len, BLK_KIND_READ);

    if (r < 0 || len == 0) {
        return r;
    }
    blk_trace(n, "preadv", off, len, 0);
    if (blk_range_aligned(n, off, len) && blk_mem_aligned(n, iov, iovcnt)) {
        r = n->drv->preadv(n, off, iov, iovcnt);
    } else {
        r = blk_read_bounced(n, off, len, iov, iovcnt);
    }
    if (r == 0) {
        STAT_INC(n, reads, 1);
        STAT_INC(n, bytes_read, len);
    }
    return r;
}

int blk_pread(struct blk_node *n, uint64_t off, void *buf, uint64_t len)
{
    return blk_preadv(n, off, &(struct iovec){buf, len}, 1);
}

/* One driver write with alignment handled; flags are already native. */
static int blk_write_aligned_or_rmw(struct blk_node *n, uint64_t off, uint64_t len,
                                    const struct iovec *iov, int iovcnt, unsigned flags)
{
    int r;

    if (n->request_alignment <= 1 && n->mem_alignment <= 1) {
        return n->drv->pwritev(n, off, iov, iovcnt, flags);
    }
    if (!blk_range_aligned(n, off, len)) {
        pthread_rwlock_wrlock(&n->rmw_lock);
        r = blk_write_bounced(n, off, len, iov, iovcnt, flags);
        pthread_rwlock_unlock(&n->rmw_lock);
        return r;
    }
    pthread_rwlock_rdlock(&n->rmw_lock);
    if (blk_mem_aligned(n, iov, iovcnt)) {
        r = n->drv->pwritev(n, off, iov, iovcnt, flags);
    } else {
        r = blk_write_bounced(n, off, len, iov, iovcnt, flags);
    }
    pthread_rwlock_unlock(&n->rmw_lock);
    return r;
}

/* The end of every request that can carry FUA: FUA the driver lacks is a
 * flush of the node, once the request is done; FUA it honoured is only
 * counted.  The one place where FUA is emulated. */
static int blk_complete_fua(struct blk_node *n, bool native_fua, bool emulate_fua)
{
    if (emulate_fua) {
        STAT_INC(n, fua_emulated, 1);
        return blk_flush(n);
    }
    if (native_fua) {
        STAT_INC(n, fua_native, 1);
    }
    return 0;
}

int blk_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                unsigned flags)
{
    uint64_t len = iov_length(iov, iovcnt);
    unsigned supported = atomic_load_explicit(&n->supported_write_flags, memory_order_relaxed);
    if (n->native_fua_max && len > n->native_fua_max) {
        supported &= ~(unsigned)BLK_REQ_FUA;
    }
    unsigned native = flags & supported;
    unsigned emulated = flags & ~supported;
    int r;

    assert(!(flags & ~BLK_REQ_WRITE_MASK));
    r = blk_check_request(n, off, len, BLK_KIND_WRITE);
    if (r < 0 || len == 0) {
        return r;
    }
    blk_trace(n, "pwritev", off, len, native);
    r = blk_write_aligned_or_rmw(n, off, len, iov, iovcnt, native);
    if (r == -EOPNOTSUPP && (native & BLK_REQ_FUA)) {
        /* The kernel refused native FUA (RWF_DSYNC) at run time: stop
         * declaring it and emulate from now on. */
        atomic_fetch_and_explicit(&n->supported_write_flags, ~(unsigned)BLK_REQ_FUA,
                                  memory_order_relaxed);
        atomic_fetch_and_explicit(&n->supported_zero_flags, ~(unsigned)BLK_REQ_FUA,
                                  memory_order_relaxed);
        native &= ~BLK_REQ_FUA;
        emulated |= BLK_REQ_FUA;
        err_clear();
        r = blk_write_aligned_or_rmw(n, off, len, iov, iovcnt, native);
    }
    atomic_fetch_add_explicit(&n->write_gen, 1, memory_order_release);
    if (r < 0) {
        return r;
    }
    STAT_INC(n, writes, 1);
    STAT_INC(n, bytes_written, len);
    return blk_complete_fua(n, native & BLK_REQ_FUA, emulated & BLK_REQ_FUA);
}

int blk_pwrite(struct blk_node *n, uint64_t off, const void *buf, uint64_t len, unsigned flags)
{
    return blk_pwritev(n, off, &(struct iovec){(void *)buf, len}, 1, flags);
}

static int blk_check_compression(struct blk_node *n)
{
    if (!n->drv->compress || !n->drv->pwrite_compressed) {
        return err_setx(ENOTSUP, "%s: compression is not supported by the %s format", ESC_NAME(n),
                        n->drv->name);
    }
    return 0;
}

int blk_compress(struct blk_node *n, const void *in, uint64_t len, void *out, size_t cap,
                 size_t *out_len)
{
    int r = blk_check_compression(n);

    return r < 0 ? r : n->drv->compress(n, in, len, out, cap, out_len);
}

/* A compressed write has no flags: nothing to mask or emulate, but the
 * same checks, trace, counters and write generation as any write. */
int blk_pwrite_compressed(struct blk_node *n, uint64_t off, uint64_t len, const void *data,
                          size_t clen)
{
    int r = blk_check_compression(n);

    if (r == 0) {
        r = blk_check_request(n, off, len, BLK_KIND_WRITE);
    }
    if (r == 0 && len == 0) {
        r = err_setx(EINVAL, "%s: a compressed write covers at least one byte", ESC_NAME(n));
    }
    if (r < 0) {
        return r;
    }
    blk_trace(n, "pwrite_compressed", off, len, 0);
    r = n->drv->pwrite_compressed(n, off, data, clen);
    atomic_fetch_add_explicit(&n->write_gen, 1, memory_order_release);
    if (r == 0) {
        STAT_INC(n, writes, 1);
        STAT_INC(n, bytes_written, len);
    }
    return r;
}

/* Write zeroes as buffers; used when the driver cannot zero cheaply. */
static int blk_write_zero_buffers(struct blk_node *n, uint64_t off, uint64_t len)
{
    uint64_t chunk = MIN(len, (uint64_t)ZERO_CHUNK);
    CLEANUP_FREE void *zeroes = blk_bounce_alloc(n, chunk);
    int r = 0;

    if (!zeroes) {
        return err_set(ENOMEM, "%s: zero buffer", ESC_NAME(n));
    }
    memset(zeroes, 0, ROUND_UP(chunk, MAX(n->request_alignment, 1u)));
    STAT_INC(n, zero_fallback, 1);
    while (len > 0 && r == 0) {
        uint64_t this = MIN(len, chunk);
        r = blk_write_aligned_or_rmw(n, off, this, &(struct iovec){zeroes, this}, 1, 0);
        off += this;
        len -= this;
    }
    return r;
}

/* Split [off, off+len) at zero_alignment into at most three parts. */
static int blk_zero_parts(const struct blk_node *n, uint64_t off, uint64_t len, uint64_t start[3],
                          uint64_t plen[3])
{
    uint64_t za = n->zero_alignment, end = off + len;
    int k = 0;

    if (za <= 1) {
        start[0] = off;
        plen[0] = len;
        return 1;
    }
    uint64_t head_end = MIN(ROUND_UP(off, za), end);
    uint64_t tail_start = MAX(ROUND_DOWN(end, za), head_end);
    uint64_t cut[4] = {off, head_end, tail_start, end};
    for (int i = 0; i < 3; i++) {
        if (cut[i + 1] > cut[i]) {
            start[k] = cut[i];
            plen[k++] = cut[i + 1] - cut[i];
        }
    }
    return k;
}

int blk_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    unsigned supported = atomic_load_explicit(&n->supported_zero_flags, memory_order_relaxed);
    unsigned native = flags & supported;
    bool emulate_fua = (flags & BLK_REQ_FUA) && !(native & BLK_REQ_FUA);
    uint64_t start[3], plen[3];
    bool fallback[3] = {false, false, false};
    int r, nparts;

    assert(!(flags & ~BLK_REQ_ZERO_MASK));
    r = blk_check_request(n, off, len, BLK_KIND_WRITE);
    if (r < 0 || len == 0) {
        return r;
    }
    if ((flags & BLK_REQ_NO_FALLBACK) && !(supported & BLK_REQ_NO_FALLBACK)) {
        return err_setx(ENOTSUP, "%s: fast zeroing is not supported", ESC_NAME(n));
    }
    blk_trace(n, "pwrite_zeroes", off, len, native);
    nparts = blk_zero_parts(n, off, len, start, plen);
    /* Shared rmw_lock: an unaligned read-modify-write of the same block
     * must not write back stale bytes over these zeroes. */
    if (n->request_alignment > 1) {
        pthread_rwlock_rdlock(&n->rmw_lock);
    }
    for (int i = 0; i < nparts && r == 0; i++) {
        r = n->drv->pwrite_zeroes ? n->drv->pwrite_zeroes(n, start[i], plen[i], native) : -ENOTSUP;
        if (r == -ENOTSUP && !(flags & BLK_REQ_NO_FALLBACK)) {
            fallback[i] = true;
            r = 0;
            err_clear();
        }
    }
    if (n->request_alignment > 1) {
        pthread_rwlock_unlock(&n->rmw_lock);
    }
    for (int i = 0; i < nparts && r == 0; i++) {
        if (fallback[i]) {
            r = blk_write_zero_buffers(n, start[i], plen[i]);
            emulate_fua = flags & BLK_REQ_FUA;
        }
    }
    atomic_fetch_add_explicit(&n->write_gen, 1, memory_order_release);
    if (r < 0) {
        return r;
    }
    STAT_INC(n, zeroes, 1);
    return blk_complete_fua(n, native & BLK_REQ_FUA, emulate_fua);
}

int blk_discard_check(struct blk_node *n, uint64_t off, uint64_t len)
{
    return blk_check_request(n, off, len, BLK_KIND_DISCARD);
}

/* One driver discard, flags already native. */
static int blk_discard_native(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    int r;

    blk_trace(n, "discard", off, len, flags);
    if (n->request_alignment > 1) {
        pthread_rwlock_rdlock(&n->rmw_lock);
    }
    r = n->drv->discard(n, off, len, flags);
    if (n->request_alignment > 1) {
        pthread_rwlock_unlock(&n->rmw_lock);
    }
    atomic_fetch_add_explicit(&n->write_gen, 1, memory_order_release);
    if (r == 0) {
        STAT_INC(n, discards, 1);
    }
    return r;
}

/* FUA the driver lacks is a flush of this node afterwards, also when the
 * driver is not called at all (an empty range, no discard): the caller
 * asked for everything before it to be durable. */
int blk_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    bool call = len > 0 && n->drv->discard;
    unsigned supported = atomic_load_explicit(&n->supported_discard_flags, memory_order_relaxed);
    unsigned native = call ? flags & supported : 0;
    unsigned emulated = flags & ~native;
    int r;

    assert(!(flags & ~BLK_REQ_DISCARD_MASK));
    r = blk_check_request(n, off, len, BLK_KIND_DISCARD);
    if (r == 0 && call) {
        r = blk_discard_native(n, off, len, native);
    }
    if (r < 0) {
        return r;
    }
    return blk_complete_fua(n, native & BLK_REQ_FUA, emulated & BLK_REQ_FUA);
}

int blk_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    int r = blk_check_request(n, off, len, BLK_KIND_READ);

    if (r < 0) {
        return r;
    }
    if (len == 0) {
        return err_setx(EINVAL, "%s: block status of an empty range", ESC_NAME(n));
    }
    if (!n->drv->block_status) {
        *ext = (struct blk_extent){
            .length = len, .flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED, .depth = 1};
        if (!n->drv->is_format) {
            /* a protocol's bytes are where they are, as qemu reports
             * them (an http image's map shows offsets) */
            ext->flags |= BLK_EXT_OFFSET;
            ext->offset = off;
            ext->filename = n->filename;
        }
        return 0;
    }
    r = n->drv->block_status(n, off, len, ext);
    if (r == 0 && (ext->length == 0 || ext->length > len)) {
        ext->length = len; /* never trust a driver to stay in range */
    }
    return r;
}

int blk_block_status_below(struct blk_node *backing, uint64_t off, uint64_t len,
                           struct blk_extent *ext)
{
    int64_t blen = backing ? blk_get_length(backing) : 0;

    if (blen < 0) {
        return (int)blen;
    }
    if (backing && off < (uint64_t)blen) {
        int r = blk_block_status(backing, off, MIN(len, (uint64_t)blen - off), ext);
        if (r < 0) {
            return r;
        }
        ext->layer++;
        ext->depth = ext->depth ? ext->depth + 1 : 0;
        return 0;
    }
    *ext = (struct blk_extent){.length = len, .flags = BLK_EXT_ZERO, .depth = backing ? 2 : 0};
    return 0;
}

int blk_prefetch(struct blk_node *n, uint64_t off, uint64_t len)
{
    int r = blk_check_request(n, off, len, BLK_KIND_READ);

    if (r < 0 || len == 0 || !n->drv->prefetch) {
        return r;
    }
    return n->drv->prefetch(n, off, len);
}

int64_t blk_get_length(struct blk_node *n)
{
    return n->drv->get_length(n);
}

int blk_truncate(struct blk_node *n, uint64_t len)
{
    if (n->read_only) {
        return err_setx(EPERM, "%s is read-only", ESC_NAME(n));
    }
    if (!n->drv->truncate) {
        /* Resizing to the size it has is no resize (qemu-img resize +0). */
        int64_t cur = n->drv->get_length(n);
        if (cur >= 0 && (uint64_t)cur == len) {
            return 0;
        }
        if (!n->drv->is_format) {
            return err_setx(ENOTSUP, "%s: the %s driver cannot resize", ESC_NAME(n), n->drv->name);
        }
        /* Only formats qemu-img 7.2 cannot resize either lack truncate. */
        return err_setx(ENOTSUP,
                        "%s: %s images cannot be resized (nor can qemu-img 7.2 resize them)",
                        ESC_NAME(n), n->drv->name);
    }
    int r = n->drv->truncate(n, len);
    /* A resize changes the file as a write does: the next flush is not
     * covered by one before it (qcow2 shrinks a file, then flushes).  Also
     * on failure, as for writes: part of it may have happened. */
    atomic_fetch_add_explicit(&n->write_gen, 1, memory_order_release);
    return r;
}

bool blk_can_resize(const struct blk_node *n)
{
    if (n->read_only || !n->drv->truncate) {
        return false;
    }
    return !n->file || blk_can_resize(n->file);
}
