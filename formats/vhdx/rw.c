/* formats/vhdx/rw.c: guest I/O on a VHDX image.  A guest range is cut at
 * block boundaries; each piece goes to its payload block when the block
 * is FULLY_PRESENT, and otherwise reads as zeroes (NOT_PRESENT,
 * UNDEFINED, ZERO, UNMAPPED and the reserved states, as qemu reads them).
 *
 * A write to a block that is not present allocates it under meta_lock: a
 * new block at the end of the file (rounded to 1 MiB; the file grows by
 * truncation, so the rest of the block reads as zeroes), the data, a
 * flush, then the BAT entry through the log (bat.c).  Block status
 * reports those states as zeroes, which qemu does not (it reports all
 * data), so convert and map skip them.
 *
 * Order (vhdx.h): above bat.c. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "vhdx.h"

#define IOV_LOCAL 64

/* Payload block b's BAT entry (under the BAT lock). */
static uint64_t block_entry(struct vhdx_state *s, uint64_t b)
{
    pthread_mutex_lock(&s->lock);
    uint64_t e = s->bat[vhdx_bat_index(s, b)];
    pthread_mutex_unlock(&s->lock);
    return e;
}

static bool present(uint64_t e)
{
    return VHDX_BAT_STATE(e) == VHDX_BLOCK_FULLY_PRESENT;
}

int vhdx_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct vhdx_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), pos = 0;
    int r = 0;

    while (r == 0 && pos < len) {
        uint64_t g = off + pos, b = g / s->p.block_size, in = g % s->p.block_size;
        uint64_t piece = MIN(len - pos, s->p.block_size - in);
        uint64_t e = block_entry(s, b);
        struct iovec sub[IOV_LOCAL];
        int k = iov_slice(iov, iovcnt, pos, piece, sub, IOV_LOCAL);

        if (k < 0) {
            return err_setx(EINVAL, "vhdx: read with too many iovec elements");
        }
        if (present(e)) {
            r = blk_preadv(s->file, VHDX_BAT_OFFSET(e) + in, sub, k);
        } else if (VHDX_BAT_STATE(e) == VHDX_BLOCK_PARTIALLY_PRESENT) {
            r = err_setx(EIO, "%s: vhdx: block %" PRIu64 " is PARTIALLY_PRESENT", s->name, b);
        } else {
            iov_memset(sub, k, 0, 0, piece);
        }
        pos += piece;
    }
    return r;
}

/* Before the first change of this open: the headers get new write GUIDs
 * (the spec's rule, so other readers know the file changed). */
static int start_session_locked(struct vhdx_state *s)
{
    return s->session_started ? 0 : vhdx_update_headers_locked(s, NULL);
}

static int start_session(struct vhdx_state *s)
{
    int r = 0;

    if (!s->session_started) {
        pthread_mutex_lock(&s->meta_lock);
        r = start_session_locked(s);
        pthread_mutex_unlock(&s->meta_lock);
    }
    return r;
}

/* Allocate block b and write [in, in+len) of it from sub, under
 * meta_lock.  Another writer may have allocated it meanwhile: then it is
 * an overwrite. */
static int write_new_block(struct vhdx_state *s, uint64_t b, uint64_t in, const struct iovec *sub,
                           int k)
{
    int r;

    pthread_mutex_lock(&s->meta_lock);
    uint64_t e = block_entry(s, b);
    if (present(e)) {
        pthread_mutex_unlock(&s->meta_lock);
        return blk_pwritev(s->file, VHDX_BAT_OFFSET(e) + in, sub, k, 0);
    }
    if (VHDX_BAT_STATE(e) == VHDX_BLOCK_PARTIALLY_PRESENT) {
        pthread_mutex_unlock(&s->meta_lock);
        return err_setx(EIO, "%s: vhdx: block %" PRIu64 " is PARTIALLY_PRESENT", s->name, b);
    }
    r = start_session_locked(s);
    int64_t flen = r == 0 ? blk_get_length(s->file) : 0;
    if (flen < 0) {
        r = (int)flen;
    }
    uint64_t host = ROUND_UP(MAX(s->file_end, (uint64_t)flen), (uint64_t)VHDX_ALIGN);
    /* A file whose length cannot change (an NBD export) is not extended:
     * the write below, past its end, fails in the generic layer, out of
     * space, before the BAT points at the block. */
    if (r == 0 && blk_can_resize(s->file)) {
        r = blk_truncate(s->file, host + s->p.block_size);
    }
    if (r == 0) {
        r = blk_pwritev(s->file, host + in, sub, k, 0);
    }
    if (r == 0) {
        r = vhdx_bat_set_locked(s, b, host | VHDX_BLOCK_FULLY_PRESENT);
    }
    if (r == 0) {
        s->file_end = host + s->p.block_size;
    }
    pthread_mutex_unlock(&s->meta_lock);
    return r;
}

int vhdx_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                 unsigned flags)
{
    struct vhdx_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), pos = 0;
    int r = 0;

    (void)flags; /* no native FUA: the generic layer flushes */
    r = start_session(s);
    while (r == 0 && pos < len) {
        uint64_t g = off + pos, b = g / s->p.block_size, in = g % s->p.block_size;
        uint64_t piece = MIN(len - pos, s->p.block_size - in);
        uint64_t e = block_entry(s, b);
        struct iovec sub[IOV_LOCAL];
        int k = iov_slice(iov, iovcnt, pos, piece, sub, IOV_LOCAL);

        if (k < 0) {
            return err_setx(EINVAL, "vhdx: write with too many iovec elements");
        }
        if (present(e)) {
            r = blk_pwritev(s->file, VHDX_BAT_OFFSET(e) + in, sub, k, 0);
        } else {
            r = write_new_block(s, b, in, sub, k);
        }
        pos += piece;
    }
    return r;
}

/* Blocks that are not present read as zeroes already; present ones get
 * the file's zeroes (fallocate where it can) at their place. */
int vhdx_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct vhdx_state *s = n->opaque;
    uint64_t pos = 0;
    int r = 0;

    if (s->p.leave_allocated) {
        flags &= ~(unsigned)BLK_REQ_MAY_UNMAP; /* a fixed image stays allocated */
    }
    r = start_session(s);
    while (r == 0 && pos < len) {
        uint64_t g = off + pos, b = g / s->p.block_size, in = g % s->p.block_size;
        uint64_t piece = MIN(len - pos, s->p.block_size - in);
        uint64_t e = block_entry(s, b);

        if (present(e)) {
            r = blk_pwrite_zeroes(s->file, VHDX_BAT_OFFSET(e) + in, piece, flags);
        }
        pos += piece;
    }
    return r;
}

/* One run of blocks of one kind: present blocks contiguous in the file,
 * zero-state blocks, or blocks that hold nothing. */
enum run_kind { RUN_DATA, RUN_ZERO_STATE, RUN_EMPTY };

static enum run_kind kind_of(uint64_t e)
{
    if (present(e)) {
        return RUN_DATA;
    }
    return VHDX_BAT_STATE(e) == VHDX_BLOCK_ZERO ? RUN_ZERO_STATE : RUN_EMPTY;
}

/* A present block may still be a hole in the file (qemu writes only what
 * the guest wrote; a fixed image is allocated but never written): ask
 * the file, as qcow2 does for preallocated clusters, so that convert and
 * map see those zeroes too. */
static void file_holes(struct vhdx_state *s, struct blk_extent *ext)
{
    struct blk_extent fext;

    if (blk_block_status(s->file, ext->offset, ext->length, &fext) == 0 && fext.length) {
        ext->length = MIN(ext->length, fext.length);
        if (!(fext.flags & BLK_EXT_DATA)) {
            ext->flags |= BLK_EXT_ZERO;
        }
    }
    err_clear();
}

int vhdx_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    struct vhdx_state *s = n->opaque;
    uint64_t bs = s->p.block_size, b = off / bs, in = off % bs;
    uint64_t done = MIN(len, bs - in);

    pthread_mutex_lock(&s->lock);
    uint64_t e = s->bat[vhdx_bat_index(s, b)];
    enum run_kind kind = kind_of(e);
    uint64_t next_host = VHDX_BAT_OFFSET(e) + bs;
    while (done < len) {
        uint64_t f = s->bat[vhdx_bat_index(s, ++b)];
        if (kind_of(f) != kind || (kind == RUN_DATA && VHDX_BAT_OFFSET(f) != next_host)) {
            break;
        }
        next_host += bs;
        done += MIN(len - done, bs);
    }
    pthread_mutex_unlock(&s->lock);

    memset(ext, 0, sizeof *ext);
    ext->length = done;
    switch (kind) {
    case RUN_DATA:
        ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
        ext->offset = VHDX_BAT_OFFSET(e) + in;
        ext->filename = s->file->filename;
        ext->depth = 1;
        file_holes(s, ext);
        break;
    case RUN_ZERO_STATE:
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED;
        ext->depth = 1;
        break;
    case RUN_EMPTY:
        ext->flags = BLK_EXT_ZERO;
        break;
    }
    return 0;
}

/* As qemu-img map shows a VHDX: qemu's driver has no block status, so
 * the whole disk is data at no known offset. */
int vhdx_map_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    (void)n;
    (void)off;
    *ext =
        (struct blk_extent){.length = len, .flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED, .depth = 1};
    return 0;
}
