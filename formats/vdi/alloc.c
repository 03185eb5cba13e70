/* formats/vdi/alloc.c: guest writes and zero writes.
 *
 * A write into an allocated block goes straight to its place in the file,
 * without a lock.  A write into an unallocated (or "zero") block allocates
 * one under s->alloc_lock, as the next block of the data area (index =
 * the header's count of allocated blocks):
 *
 *   1. the request's bytes are written into the new block (the rest of
 *      the block is a hole of the file: it reads as zeroes, as qemu's
 *      zero-filled block does, without writing a whole MiB);
 *   2. the header's count and the map entry are written.  While the entry
 *      shares the file's first page with the header (the first 896 blocks
 *      of an image laid out as qemu does), both go in one write of that
 *      page, which a kill -9 cannot split: the image is consistent before
 *      and after it, and qemu-img check finds nothing.  Further out, the
 *      header goes first, then the map sector: a kill -9 between the two
 *      leaves one leaked block (qemu-img check reports the count mismatch;
 *      the data is safe and the image still opens for writing).  Never the
 *      other order, which would let the next allocation reuse the block;
 *   3. the entry is published in memory, for reads and other writers.
 *
 * Nothing is cached: a flush has only the file to flush (the generic
 * layer does that).  Writes are not made durable one by one (qemu does
 * not either); a flush makes every earlier write durable.
 *
 * Order (vdi.h): above header.c. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/uuid.h"
#include "common/util.h"
#include "vdi.h"

#define IOV_LOCAL 64

/* Write the new count (idx + 1) and block b's entry (idx) to the file.
 * s->hdr.allocated follows the count on disk, even when the map write
 * after it fails (the block is then leaked, never reused). */
static int commit_locked(struct vdi_state *s, uint32_t b, uint32_t idx)
{
    uint64_t entry_pos = s->hdr.off_map + (uint64_t)b * 4;
    uint8_t old[8];
    int r;

    memcpy(old, s->page0 + VDI_OFF_ALLOCATED, 4);
    put_le32(s->page0 + VDI_OFF_ALLOCATED, idx + 1);
    if (entry_pos + 4 <= s->page0_len) {
        memcpy(old + 4, s->page0 + entry_pos, 4);
        put_le32(s->page0 + entry_pos, idx);
        r = blk_pwrite(s->file, 0, s->page0, ROUND_UP(entry_pos + 4, VDI_SECTOR), 0);
        if (r < 0) {
            memcpy(s->page0 + VDI_OFF_ALLOCATED, old, 4);
            memcpy(s->page0 + entry_pos, old + 4, 4);
            return r;
        }
        s->hdr.allocated = idx + 1;
        return 0;
    }
    r = blk_pwrite(s->file, 0, s->page0, VDI_SECTOR, 0);
    if (r < 0) {
        memcpy(s->page0 + VDI_OFF_ALLOCATED, old, 4);
        return r;
    }
    s->hdr.allocated = idx + 1;

    /* The sector of the map holding b; bytes past the last entry (up to
     * the data area) are written as zeroes. */
    uint8_t sec[VDI_SECTOR] = {0};
    uint32_t per_sector = VDI_SECTOR / 4;
    uint32_t first = b - b % per_sector;
    uint32_t count = MIN(per_sector, s->hdr.blocks - first);
    vdi_encode_entries(s, first, count, sec);
    put_le32(sec + 4 * (b - first), idx);
    return blk_pwrite(s->file, s->hdr.off_map + (uint64_t)first * 4, sec, VDI_SECTOR, 0);
}

/* Allocate a block for guest block b and write iov at offset 'in' of
 * it. */
static int allocate_locked(struct vdi_state *s, uint32_t b, uint64_t in, const struct iovec *iov,
                           int iovcnt)
{
    uint32_t idx = s->hdr.allocated;
    int r;

    if (idx >= s->hdr.blocks) {
        return err_setx(ENOSPC,
                        "%s: vdi: no block left to allocate (the header counts %" PRIu32
                        " of %" PRIu32 " allocated)",
                        ESC_NAME(s->node), idx, s->hdr.blocks);
    }
    uint64_t start = s->hdr.off_data + (uint64_t)idx * s->stride;
    uint64_t end = start + s->stride;
    /* Bytes an allocation cut short by a crash left there: the new block
     * reads as zeroes around what is written now.  A file whose length
     * cannot change (an NBD export) is not extended below: zeroing the
     * whole block first refuses one that does not fit (out of space, in
     * the generic layer) before anything is written. */
    uint64_t zero_end = blk_can_resize(s->file) ? MIN(end, s->file_end) : end;
    if (start < zero_end) {
        r = blk_pwrite_zeroes(s->file, start, zero_end - start, 0);
        if (r < 0) {
            return r;
        }
    }
    r = blk_pwritev(s->file, vdi_block_host(s, idx) + in, iov, iovcnt, 0);
    if (r == 0 && end > s->file_end) {
        r = blk_truncate(s->file, end); /* the whole block, sparse, as qemu's file ends */
    }
    if (r < 0) {
        /* A failed write may still have extended the file: the next
         * allocation of this block must zero what it left. */
        int64_t len = blk_get_length(s->file);
        s->file_end = len > 0 ? MAX(s->file_end, (uint64_t)len) : s->file_end;
        return r;
    }
    s->file_end = MAX(s->file_end, end);
    r = commit_locked(s, b, idx);
    if (r == 0) {
        __atomic_store_n(&s->map[b], idx, __ATOMIC_RELEASE);
    }
    return r;
}

/* A write inside guest block b, which was not allocated when looked up:
 * allocate it, unless another writer did meanwhile. */
static int write_new_block(struct vdi_state *s, uint64_t off, const struct iovec *iov, int iovcnt)
{
    uint32_t b = (uint32_t)(off / VDI_BLOCK_SIZE);
    uint64_t in = off % VDI_BLOCK_SIZE;
    uint32_t e;
    int r;

    pthread_mutex_lock(&s->alloc_lock);
    e = vdi_entry(s, b);
    if (vdi_allocated(e)) {
        pthread_mutex_unlock(&s->alloc_lock);
        return blk_pwritev(s->file, vdi_block_host(s, e) + in, iov, iovcnt, 0);
    }
    r = allocate_locked(s, b, in, iov, iovcnt);
    pthread_mutex_unlock(&s->alloc_lock);
    return r;
}

int vdi_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                unsigned flags)
{
    struct vdi_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), pos = 0;
    int r = 0;

    (void)flags; /* FUA is emulated by the generic layer */
    while (r == 0 && pos < len) {
        struct vdi_run run;
        struct iovec sub[IOV_LOCAL];

        vdi_map(s, off + pos, len - pos, &run);
        if (run.kind == VDI_HOLE) {
            /* One block at a time: each is allocated on its own. */
            run.bytes = MIN(run.bytes, VDI_BLOCK_SIZE - (off + pos) % VDI_BLOCK_SIZE);
        }
        int k = iov_slice(iov, iovcnt, pos, run.bytes, sub, IOV_LOCAL);
        if (k < 0) {
            return err_setx(EINVAL, "vdi: write with too many iovec elements");
        }
        if (run.kind == VDI_DATA) {
            r = blk_pwritev(s->file, run.host, sub, k, 0);
        } else {
            r = write_new_block(s, off + pos, sub, k);
        }
        pos += run.bytes;
    }
    return r;
}

/* Unallocated and "zero" blocks read as zeroes already; allocated ones
 * are zeroed in the file (a hole punched with MAY_UNMAP).  Nothing is
 * deallocated: the map has no way to free a block that qemu-img check
 * accepts. */
int vdi_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct vdi_state *s = n->opaque;
    uint64_t pos = 0;
    int r = 0;

    while (r == 0 && pos < len) {
        struct vdi_run run;

        vdi_map(s, off + pos, len - pos, &run);
        if (run.kind == VDI_DATA) {
            r = blk_pwrite_zeroes(s->file, run.host, run.bytes,
                                  flags & (BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK));
        }
        pos += run.bytes;
    }
    return r;
}

/* The header sector is written as page0 holds it, under the lock that
 * allocation writes it with. */
int vdi_set_identity(struct blk_node *n, const uint8_t seed[BLK_SEED_LEN])
{
    struct vdi_state *s = n->opaque;
    uint8_t image[UUID_LEN], modify[UUID_LEN];
    int r = uuid_derive(seed, VDI_ID_IMAGE, image);

    if (r == 0) {
        r = uuid_derive(seed, VDI_ID_MODIFY, modify);
    }
    if (r < 0) {
        return r;
    }
    uuid_to_guid(image);
    uuid_to_guid(modify);
    pthread_mutex_lock(&s->alloc_lock);
    memcpy(s->page0 + VDI_OFF_UUID_CREATE, image, UUID_LEN);
    memcpy(s->page0 + VDI_OFF_UUID_MODIFY, modify, UUID_LEN);
    r = blk_pwrite(s->file, 0, s->page0, VDI_SECTOR, 0);
    pthread_mutex_unlock(&s->alloc_lock);
    return r;
}
