/* formats/vpc/read.c: guest ranges mapped through the BAT and the sector
 * bitmaps, for reads and block status.  A fixed image is the file.  In a
 * dynamic image an unallocated block, or a sector whose bitmap bit is
 * clear, reads as zeroes (the spec; qemu reads the block's bytes whatever
 * the bitmap says, which is the same for every image qemu or diskimg
 * writes, since neither leaves other bytes there); in a differencing
 * image both read the parent.  Not for writes (write.c).
 *
 * Order (vpc.h): above parent.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "vpc.h"

#define IOV_LOCAL 64

enum vpc_run_kind {
    VPC_RUN_DATA,       /* in the file at host */
    VPC_RUN_ZERO,       /* unallocated block of a dynamic image */
    VPC_RUN_ZERO_ALLOC, /* allocated block, bitmap bit clear (dynamic) */
    VPC_RUN_PARENT,     /* differencing: the parent's bytes */
};

struct vpc_run {
    enum vpc_run_kind kind;
    uint64_t bytes;
    uint64_t host;
};

int vpc_read_bitmap_locked(struct vpc_state *s, uint32_t i, uint8_t *buf)
{
    return blk_pread(s->file, (uint64_t)s->bat[i] * VPC_SECTOR, buf, s->bitmap_size);
}

static bool bit_set(const uint8_t *bm, uint64_t sector)
{
    return bm[sector / 8] & (0x80u >> (sector % 8)); /* most significant bit first */
}

/* Are the bits of every sector of a block set? */
static bool bitmap_full(const struct vpc_state *s, const uint8_t *bm)
{
    uint64_t sectors = s->block_size / VPC_SECTOR;

    for (uint64_t k = 0; k < sectors / 8; k++) {
        if (bm[k] != 0xff) {
            return false;
        }
    }
    for (uint64_t k = sectors / 8 * 8; k < sectors; k++) {
        if (!bit_set(bm, k)) {
            return false;
        }
    }
    return true;
}

/* A block's bitmap, read once for all the runs of one request: a write
 * that sets bits meanwhile sets them outside the request's range, or the
 * two requests overlap and either answer is right. */
struct vpc_bm_cache {
    uint32_t block; /* whose bitmap bm holds; VPC_BAT_UNALLOCATED: none */
    uint8_t *bm;    /* small, or malloc'd for blocks over 2 MiB */
    uint8_t small[VPC_SECTOR];
};

static void cache_init(struct vpc_bm_cache *c)
{
    c->block = VPC_BAT_UNALLOCATED;
    c->bm = NULL;
}

static void cache_free(struct vpc_bm_cache *c)
{
    if (c->bm != c->small) {
        free(c->bm);
    }
}

/* With s->lock held: block i's bitmap, from the cache or the file. */
static int cached_bitmap_locked(struct vpc_state *s, uint32_t i, struct vpc_bm_cache *c)
{
    int r;

    if (c->block == i) {
        return 0;
    }
    if (!c->bm) {
        c->bm = s->bitmap_size <= sizeof c->small ? c->small : malloc(s->bitmap_size);
        if (!c->bm) {
            return err_set(ENOMEM, "vpc: block bitmap");
        }
    }
    c->block = VPC_BAT_UNALLOCATED;
    r = vpc_read_bitmap_locked(s, i, c->bm);
    if (r == 0) {
        c->block = i;
        s->bm_state[i] = bitmap_full(s, c->bm) ? VPC_BM_FULL : VPC_BM_PARTIAL;
    }
    return r;
}

/* The run of guest bytes from off (at most len, inside one block unless
 * the blocks are unallocated) that reads from one place. */
static int vpc_map(struct vpc_state *s, uint64_t off, uint64_t len, struct vpc_run *run,
                   struct vpc_bm_cache *c)
{
    uint32_t i = (uint32_t)(off >> s->block_bits);
    uint64_t in_block = off & (s->block_size - 1);
    uint64_t chunk = MIN(len, s->block_size - in_block);
    bool diff = s->type == VPC_DIFF;
    int r = 0;

    if (s->type == VPC_FIXED) {
        *run = (struct vpc_run){VPC_RUN_DATA, len, off};
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    uint32_t entry = s->bat[i];
    uint64_t host = (uint64_t)entry * VPC_SECTOR + s->bitmap_size + in_block;
    if (entry == VPC_BAT_UNALLOCATED) {
        /* The blocks after it that are unallocated too, in one run: a
         * map of a large empty image is then one extent, not one per
         * block. */
        uint64_t bytes = chunk;
        for (uint32_t j = i + 1; bytes < len && j < s->n_blocks && s->bat[j] == VPC_BAT_UNALLOCATED;
             j++) {
            bytes += MIN((uint64_t)s->block_size, len - bytes);
        }
        *run = (struct vpc_run){diff ? VPC_RUN_PARENT : VPC_RUN_ZERO, bytes, 0};
    } else if (s->bm_state[i] == VPC_BM_FULL) {
        *run = (struct vpc_run){VPC_RUN_DATA, chunk, host};
    } else if ((r = cached_bitmap_locked(s, i, c)) == 0) {
        uint64_t first = in_block / VPC_SECTOR;
        uint64_t end = (in_block + chunk + VPC_SECTOR - 1) / VPC_SECTOR;
        bool set = bit_set(c->bm, first);
        uint64_t k = first + 1;
        while (k < end && bit_set(c->bm, k) == set) {
            k++;
        }
        uint64_t bytes = MIN(chunk, k * VPC_SECTOR - in_block);
        if (set) {
            *run = (struct vpc_run){VPC_RUN_DATA, bytes, host};
        } else {
            *run = (struct vpc_run){diff ? VPC_RUN_PARENT : VPC_RUN_ZERO_ALLOC, bytes, 0};
        }
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* The parent's bytes, zeroes past its end or when it was not opened. */
static int read_parent(struct vpc_state *s, uint64_t off, const struct iovec *iov, int iovcnt,
                       uint64_t len)
{
    int64_t plen = s->parent ? blk_get_length(s->parent) : 0;
    uint64_t from_parent = 0;

    if (plen < 0) {
        return (int)plen;
    }
    if ((int64_t)off < plen) {
        struct iovec sub[IOV_LOCAL];
        from_parent = MIN(len, (uint64_t)plen - off);
        int k = iov_slice(iov, iovcnt, 0, from_parent, sub, IOV_LOCAL);
        if (k < 0) {
            return err_setx(EINVAL, "vpc: read with too many iovec elements");
        }
        int r = blk_preadv(s->parent, off, sub, k);
        if (r < 0) {
            return r;
        }
    }
    iov_memset(iov, iovcnt, from_parent, 0, len - from_parent);
    return 0;
}

int vpc_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct vpc_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), pos = 0;
    struct vpc_bm_cache cache;
    int r = 0;

    cache_init(&cache);
    while (r == 0 && pos < len) {
        struct vpc_run run = {0}; /* (gcc -O3 cannot tell vpc_map sets it) */
        struct iovec sub[IOV_LOCAL];

        r = vpc_map(s, off + pos, len - pos, &run, &cache);
        if (r < 0) {
            break;
        }
        int k = iov_slice(iov, iovcnt, pos, run.bytes, sub, IOV_LOCAL);
        if (k < 0) {
            r = err_setx(EINVAL, "vpc: read with too many iovec elements");
            break;
        }
        switch (run.kind) {
        case VPC_RUN_DATA:
            r = blk_preadv(s->file, run.host, sub, k);
            break;
        case VPC_RUN_PARENT:
            r = read_parent(s, off + pos, sub, k, run.bytes);
            break;
        default:
            iov_memset(sub, k, 0, 0, run.bytes);
        }
        pos += run.bytes;
    }
    cache_free(&cache);
    return r;
}

/* A fixed image: the file's own status (its holes read as zeroes). */
static int fixed_block_status(struct vpc_state *s, uint64_t off, uint64_t len,
                              struct blk_extent *ext)
{
    struct blk_extent fext;
    int r = blk_block_status(s->file, off, len, &fext);

    memset(ext, 0, sizeof *ext);
    ext->length = len;
    ext->flags = BLK_EXT_DATA;
    if (r == 0) {
        ext->length = MIN(fext.length, len);
        ext->flags = fext.flags & (BLK_EXT_DATA | BLK_EXT_ZERO);
    }
    err_clear();
    ext->flags |= BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
    ext->offset = off;
    ext->depth = 1;
    ext->filename = s->file->filename;
    return 0;
}

int vpc_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    struct vpc_state *s = n->opaque;
    struct vpc_bm_cache cache;
    struct vpc_run run = {0};
    int r;

    if (s->type == VPC_FIXED) {
        return fixed_block_status(s, off, len, ext);
    }
    cache_init(&cache);
    r = vpc_map(s, off, len, &run, &cache);
    cache_free(&cache);
    if (r < 0) {
        return r;
    }
    memset(ext, 0, sizeof *ext);
    ext->length = run.bytes;
    ext->depth = 1;
    ext->filename = s->file->filename;
    switch (run.kind) {
    case VPC_RUN_DATA:
        ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
        ext->offset = run.host;
        break;
    case VPC_RUN_ZERO_ALLOC:
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED;
        break;
    case VPC_RUN_ZERO:
        /* Held by this image, as zeroes: qemu-img map says "present" for
         * a dynamic VHD's unallocated blocks (the format has no backing
         * file to defer to). */
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED;
        ext->filename = NULL;
        break;
    case VPC_RUN_PARENT:
        return blk_block_status_below(s->parent, off, run.bytes, ext);
    }
    return 0;
}

/* As qemu-img map shows a VHD: qemu's driver reads an allocated block
 * whole, whatever its bitmap says, so reports it as data, one block at a
 * time; a fixed image is data throughout, with its file's holes as zeroes
 * that are data too. */
int vpc_map_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    struct vpc_state *s = n->opaque;

    if (s->type == VPC_FIXED) {
        int r = fixed_block_status(s, off, len, ext);
        ext->flags |= BLK_EXT_DATA;
        return r;
    }
    if (s->type == VPC_DIFF) {
        return vpc_block_status(n, off, len, ext);
    }
    uint32_t i = (uint32_t)(off >> s->block_bits);
    uint64_t in_block = off & (s->block_size - 1);

    pthread_mutex_lock(&s->lock);
    uint32_t entry = s->bat[i];
    pthread_mutex_unlock(&s->lock);
    if (entry == VPC_BAT_UNALLOCATED) {
        return vpc_block_status(n, off, len, ext);
    }
    memset(ext, 0, sizeof *ext);
    ext->length = MIN(len, s->block_size - in_block);
    ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
    ext->offset = (uint64_t)entry * VPC_SECTOR + s->bitmap_size + in_block;
    ext->depth = 1;
    ext->filename = s->file->filename;
    return 0;
}
