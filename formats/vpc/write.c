/* formats/vpc/write.c: guest writes.  A fixed image writes the file.  A
 * dynamic image allocates a block where the trailing footer is: under
 * s->lock, it first writes the footer at the new end of the file, past
 * the block, then the block's bitmap and the guest data over the old
 * footer, and sets the BAT entry in memory; the BAT sectors that changed
 * are written at the next flush, after the file is flushed, so no BAT
 * entry on disk ever points at data that is not.
 *
 * The footer goes first because it is the write that reaches furthest:
 * in a file whose length cannot change (an NBD export) the block does not
 * fit (it starts at the trailing footer, or past the end when that is
 * missing), and its footer is refused, out of space, before anything is
 * written; with the bitmap first, an image that fills its export exactly
 * lost its trailing footer to it.  After a kill -9 the trailing footer is
 * the old one, intact, or the new one; after a power loss the writes may
 * have landed in any order, and an image whose old footer was overwritten
 * and whose new one is missing still opens through the copy at offset 0,
 * which the VHD spec keeps for this (qemu reads only that one; our open
 * then puts new blocks past everything).  Either way a block that no BAT
 * entry on disk points at is only lost space.
 *
 * Bitmaps: a new block gets the bits of the sectors written (all ones
 * when the write covers the block, as qemu's), later writes set theirs.
 * The rest of a new block lies past the old end of the file, so it reads
 * as zeroes for qemu (which ignores bitmaps) as well as for us.
 *
 * Order (vpc.h): above read.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/uuid.h"
#include "common/util.h"
#include "vpc.h"

#define IOV_LOCAL 64

static void set_bits(uint8_t *bm, uint64_t first, uint64_t end)
{
    for (uint64_t k = first; k < end; k++) {
        bm[k / 8] |= (uint8_t)(0x80u >> (k % 8));
    }
}

static bool bits_all_set(const struct vpc_state *s, const uint8_t *bm)
{
    uint64_t sectors = s->block_size / VPC_SECTOR;

    for (uint64_t k = 0; k < sectors; k++) {
        if (!(bm[k / 8] & (0x80u >> (k % 8)))) {
            return false;
        }
    }
    return true;
}

/* With s->lock held: set the bits of sectors [first, end) of block i
 * on disk (the bitmap sectors that change only). */
static int mark_written_locked(struct vpc_state *s, uint32_t i, uint64_t first, uint64_t end)
{
    CLEANUP_FREE uint8_t *bm = malloc(s->bitmap_size);
    CLEANUP_FREE uint8_t *old = malloc(s->bitmap_size);
    int r;

    if (!bm || !old) {
        return err_set(ENOMEM, "vpc: block bitmap");
    }
    r = vpc_read_bitmap_locked(s, i, bm);
    if (r < 0) {
        return r;
    }
    memcpy(old, bm, s->bitmap_size);
    set_bits(bm, first, end);
    uint64_t lo = first / 8 / VPC_SECTOR * VPC_SECTOR;
    uint64_t hi = ROUND_UP((end + 7) / 8, VPC_SECTOR);
    if (memcmp(old + lo, bm + lo, hi - lo) != 0) {
        r = blk_pwrite(s->file, (uint64_t)s->bat[i] * VPC_SECTOR + lo, bm + lo, hi - lo, 0);
        if (r < 0) {
            return r;
        }
    }
    s->bm_state[i] = bits_all_set(s, bm) ? VPC_BM_FULL : VPC_BM_PARTIAL;
    return 0;
}

/* With s->lock held: the bitmap and len guest bytes at in_block of a new
 * block at host offset block, bm its bitmap. */
static int write_new_block_locked(struct vpc_state *s, uint64_t block, const uint8_t *bm,
                                  uint64_t in_block, const struct iovec *iov, int iovcnt,
                                  uint64_t len)
{
    int r;

    if (in_block == 0) {
        struct iovec all[IOV_LOCAL + 1] = {{(void *)bm, s->bitmap_size}};
        int k = iov_slice(iov, iovcnt, 0, len, all + 1, IOV_LOCAL);
        if (k < 0) {
            return err_setx(EINVAL, "vpc: write with too many iovec elements");
        }
        return blk_pwritev(s->file, block, all, k + 1, 0);
    }
    r = blk_pwrite(s->file, block, bm, s->bitmap_size, 0);
    if (r == 0) {
        r = blk_pwritev(s->file, block + s->bitmap_size + in_block, iov, iovcnt, 0);
    }
    return r;
}

/* With s->lock held: give block i a place at the end of the file and
 * write len guest bytes at in_block into it (see the top comment). */
static int allocate_locked(struct vpc_state *s, uint32_t i, uint64_t in_block,
                           const struct iovec *iov, int iovcnt, uint64_t len)
{
    uint64_t block = s->free_off;
    uint64_t end = block + s->bitmap_size + s->block_size;
    uint64_t first = in_block / VPC_SECTOR, last = (in_block + len) / VPC_SECTOR;
    bool whole = in_block == 0 && len == s->block_size;
    CLEANUP_FREE uint8_t *bm = calloc(1, s->bitmap_size);
    int r;

    if (!bm) {
        return err_set(ENOMEM, "vpc: block bitmap");
    }
    if (block / VPC_SECTOR >= VPC_BAT_UNALLOCATED) {
        return err_setx(EFBIG,
                        "%s: vpc: the file has reached 2 TiB, beyond which a BAT entry "
                        "cannot point",
                        ESC_NAME(s->node));
    }
    if (whole) {
        memset(bm, 0xff, s->bitmap_size);
    } else {
        set_bits(bm, first, last);
    }
    r = blk_pwrite(s->file, end, s->footer_buf, VPC_FOOTER_SIZE, 0);
    if (r < 0) {
        return r; /* nothing written: the footer and free_off stay */
    }
    /* The footer has moved: the space is used, whatever fails now. */
    s->free_off = end;
    r = write_new_block_locked(s, block, bm, in_block, iov, iovcnt, len);
    if (r < 0) {
        return r;
    }
    s->bat[i] = (uint32_t)(block / VPC_SECTOR);
    s->bm_state[i] = whole ? VPC_BM_FULL : VPC_BM_PARTIAL;
    s->bat_dirty[(uint64_t)i * 4 / VPC_SECTOR] = 1;
    s->any_dirty = true;
    return 0;
}

/* Write [off, off+len) that lies inside one block. */
static int write_in_block(struct vpc_state *s, uint64_t off, const struct iovec *iov, int iovcnt,
                          uint64_t len)
{
    uint32_t i = (uint32_t)(off >> s->block_bits);
    uint64_t in_block = off & (s->block_size - 1);
    int r;

    pthread_mutex_lock(&s->lock);
    uint32_t entry = s->bat[i];
    uint8_t state = s->bm_state[i];
    if (entry == VPC_BAT_UNALLOCATED) {
        r = allocate_locked(s, i, in_block, iov, iovcnt, len);
        pthread_mutex_unlock(&s->lock);
        return r;
    }
    pthread_mutex_unlock(&s->lock);
    uint64_t host = (uint64_t)entry * VPC_SECTOR + s->bitmap_size + in_block;
    r = blk_pwritev(s->file, host, iov, iovcnt, 0);
    if (r == 0 && state != VPC_BM_FULL) {
        pthread_mutex_lock(&s->lock);
        r = mark_written_locked(s, i, in_block / VPC_SECTOR, (in_block + len) / VPC_SECTOR);
        pthread_mutex_unlock(&s->lock);
    }
    return r;
}

int vpc_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                unsigned flags)
{
    struct vpc_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), pos = 0;
    int r = 0;

    if (s->type == VPC_FIXED) {
        return blk_pwritev(s->file, off, iov, iovcnt, flags);
    }
    while (r == 0 && pos < len) {
        uint64_t at = off + pos;
        uint64_t chunk = MIN(len - pos, s->block_size - (at & (s->block_size - 1)));
        struct iovec sub[IOV_LOCAL];
        int k = iov_slice(iov, iovcnt, pos, chunk, sub, IOV_LOCAL);
        if (k < 0) {
            return err_setx(EINVAL, "vpc: write with too many iovec elements");
        }
        r = write_in_block(s, at, sub, k, chunk);
        pos += chunk;
    }
    return r;
}

/* Unallocated blocks of a dynamic image read as zeroes already; in an
 * allocated one the data itself is zeroed (qemu reads the bytes whatever
 * the bitmap says), punched out of the file when unmapping is allowed. */
int vpc_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct vpc_state *s = n->opaque;
    uint64_t pos = 0;
    int r = 0;

    if (s->type == VPC_FIXED) {
        return blk_pwrite_zeroes(s->file, off, len, flags);
    }
    while (r == 0 && pos < len) {
        uint64_t at = off + pos, in_block = at & (s->block_size - 1);
        uint64_t chunk = MIN(len - pos, s->block_size - in_block);
        uint32_t i = (uint32_t)(at >> s->block_bits);
        pthread_mutex_lock(&s->lock);
        uint32_t entry = s->bat[i];
        pthread_mutex_unlock(&s->lock);
        if (entry != VPC_BAT_UNALLOCATED) {
            uint64_t host = (uint64_t)entry * VPC_SECTOR + s->bitmap_size + in_block;
            r = blk_pwrite_zeroes(s->file, host, chunk,
                                  flags & (BLK_REQ_NO_FALLBACK | BLK_REQ_MAY_UNMAP));
        }
        pos += chunk;
    }
    return r;
}

/* A dynamic image keeps its blocks (VHD cannot free one without moving
 * the blocks after it), but gives their discarded parts back to the file
 * system: they read as zeroes after, as they do in qcow2.  A fixed image
 * passes the request to its file. */
int vpc_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct vpc_state *s = n->opaque;

    if (s->type == VPC_FIXED) {
        return blk_discard(s->file, off, len, flags);
    }
    return vpc_pwrite_zeroes(n, off, len, BLK_REQ_MAY_UNMAP);
}

/* Put the BAT sectors in buf and their numbers in secs (n of them). */
static void copy_dirty_locked(struct vpc_state *s, uint8_t *buf, uint64_t *secs, size_t *n)
{
    uint64_t bat_bytes = (uint64_t)s->n_blocks * 4;

    *n = 0;
    for (uint64_t sec = 0; sec * VPC_SECTOR < bat_bytes; sec++) {
        if (!s->bat_dirty[sec]) {
            continue;
        }
        uint64_t from = sec * VPC_SECTOR, to = MIN(from + VPC_SECTOR, bat_bytes);
        for (uint64_t e = from / 4; e < to / 4; e++) {
            put_be32(buf + *n * VPC_SECTOR + (e * 4 - from), s->bat[e]);
        }
        secs[(*n)++] = sec;
        s->bat_dirty[sec] = 0;
    }
    s->any_dirty = false;
}

int vpc_write_back_bat(struct vpc_state *s)
{
    uint64_t bat_bytes = (uint64_t)s->n_blocks * 4;
    size_t n = 0;
    int r = 0;

    pthread_mutex_lock(&s->flush_lock);
    pthread_mutex_lock(&s->lock);
    if (!s->any_dirty) {
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_unlock(&s->flush_lock);
        return 0;
    }
    size_t max = ROUND_UP(bat_bytes, VPC_SECTOR) / VPC_SECTOR;
    CLEANUP_FREE uint8_t *buf = malloc(max * VPC_SECTOR);
    CLEANUP_FREE uint64_t *secs = malloc(max * sizeof *secs);
    if (!buf || !secs) {
        r = err_set(ENOMEM, "vpc: BAT write-back");
    } else {
        copy_dirty_locked(s, buf, secs, &n);
    }
    pthread_mutex_unlock(&s->lock);
    /* The data the new entries point at first, then the entries. */
    if (r == 0) {
        r = blk_flush(s->file);
    }
    for (size_t k = 0; r == 0 && k < n; k++) {
        uint64_t from = secs[k] * VPC_SECTOR;
        r = blk_pwrite(s->file, s->bat_offset + from, buf + k * VPC_SECTOR,
                       MIN((uint64_t)VPC_SECTOR, bat_bytes - from), 0);
    }
    if (r < 0 && n) {
        pthread_mutex_lock(&s->lock); /* written again at the next flush */
        for (size_t k = 0; k < n; k++) {
            s->bat_dirty[secs[k]] = 1;
        }
        s->any_dirty = true;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&s->flush_lock);
    return r;
}

int vpc_flush(struct blk_node *n)
{
    struct vpc_state *s = n->opaque;

    if (s->read_only || s->type == VPC_FIXED) {
        return 0;
    }
    return vpc_write_back_bat(s);
}

/* The footer at offset 0 (dynamic) and the one at the end carry the same
 * UUID; new blocks copy footer_buf to the new end, so it changes too. */
int vpc_set_identity(struct blk_node *n, const uint8_t seed[BLK_SEED_LEN])
{
    struct vpc_state *s = n->opaque;
    uint8_t u[UUID_LEN];
    int r = uuid_derive(seed, VPC_ID_UUID, u);

    if (r < 0) {
        return r;
    }
    pthread_mutex_lock(&s->lock);
    memcpy(s->footer.uuid, u, sizeof u);
    memcpy(s->footer_buf + 68, u, sizeof u);
    put_be32(s->footer_buf + 64, vpc_checksum(s->footer_buf, VPC_FOOTER_SIZE, 64));
    if (s->type == VPC_FIXED) {
        int64_t flen = blk_get_length(s->file); /* the footer is the last sector */
        r = flen < 0 ? (int)flen
                     : blk_pwrite(s->file, (uint64_t)flen - VPC_FOOTER_SIZE, s->footer_buf,
                                  VPC_FOOTER_SIZE, 0);
    } else {
        r = blk_pwrite(s->file, 0, s->footer_buf, VPC_FOOTER_SIZE, 0);
        if (r == 0) {
            r = blk_pwrite(s->file, s->free_off, s->footer_buf, VPC_FOOTER_SIZE, 0);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}
