/* block/rebase.c: safe rebase's data step, as qemu-img rebase does it.
 * Wherever the image's top layer holds nothing, the guest reads its
 * current backing chain; once another backing file is recorded it will
 * read that one.  So for those ranges both are compared and, where they
 * differ, what the guest reads now is written into the top layer.  Block
 * status keeps most ranges from being read at all: both zero, or the new
 * backing file inside the old chain below the layers that hold the range.
 * Writes are whole clusters of the top layer where possible, so the
 * format does no copy-on-write for them.
 *
 * Not for: recording the new backing file (the driver's change_backing,
 * after this has flushed). */
#include <errno.h>
#include <string.h>

#include "chain-pool.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "driver.h"
#include "esc-name.h"

#define CHUNK (1u << 20)
#define DEFAULT_UNIT (64u << 10) /* compare unit of a format without clusters */

struct rebase {
    struct blk_image *img;
    struct blk_image *newb; /* NULL: none */
    unsigned new_depth;     /* newb's depth in img's chain, 0: not in it */
    uint64_t new_size;
    uint64_t unit; /* compare and write unit: the top layer's cluster */
};

/* Does unit [p, p+len) differ between what the guest reads now (old,
 * NULL: zeroes) and the new backing file (new, NULL: zeroes)? */
static bool unit_differs(const uint8_t *old, const uint8_t *new, uint64_t len)
{
    if (!old) {
        return !buffer_is_zero(new, len);
    }
    if (!new) {
        return !buffer_is_zero(old, len);
    }
    return memcmp(old, new, len) != 0;
}

/* Keep what the guest reads in [off, off+len): write old (zeroes when
 * NULL) into the top layer. */
static int keep_old(struct rebase *rb, struct blk_chain_chunk *c, uint64_t off, uint64_t len,
                    const uint8_t *old)
{
    int r = blk_chain_turn(c);

    if (r == 0) {
        r = old ? blk_image_pwrite(rb->img, off, old, len, 0)
                : blk_image_pwrite_zeroes(rb->img, off, len, 0);
    }
    if (r == 0) {
        c->written += len;
    }
    return r;
}

/* Write the units of [off, off+len) where old and new differ, runs of
 * them at once.  old and new: the range's bytes, NULL for zeroes. */
static int write_differences(struct rebase *rb, struct blk_chain_chunk *c, uint64_t off,
                             uint64_t len, const uint8_t *old, const uint8_t *new)
{
    uint64_t run = 0, run_len = 0;

    for (uint64_t p = off; p < off + len;) {
        uint64_t next = MIN(ROUND_DOWN(p, rb->unit) + rb->unit, off + len);
        uint64_t skip = p - off;
        bool differs = unit_differs(old ? old + skip : NULL, new ? new + skip : NULL, next - p);
        if (differs && !run_len) {
            run = p;
        }
        if (differs) {
            run_len += next - p;
        }
        if (run_len && (!differs || next == off + len)) {
            int r = keep_old(rb, c, run, run_len, old ? old + (run - off) : NULL);
            if (r < 0) {
                return r;
            }
            run_len = 0;
        }
        p = next;
    }
    return 0;
}

/* [off, off+*len) is not held by the top layer and reads as zeroes now
 * when old_zero.  Shortens *len to a range of one kind in the new
 * backing file and makes the top layer read the same there. */
static int rebase_range(struct rebase *rb, struct blk_chain_chunk *c, uint64_t off, uint64_t *len,
                        bool old_zero)
{
    uint8_t *old = c->a, *new = c->b;
    bool new_zero = true;
    int r;

    if (rb->newb && off < rb->new_size) {
        struct blk_extent ne;
        *len = MIN(*len, rb->new_size - off);
        r = blk_image_block_status(rb->newb, off, *len, &ne);
        if (r < 0) {
            return r;
        }
        *len = MIN(*len, ne.length);
        new_zero = ne.flags & BLK_EXT_ZERO;
    }
    if (old_zero && new_zero) {
        return 0;
    }
    if (!old_zero && (r = blk_image_pread(rb->img, off, old, *len)) < 0) {
        return r;
    }
    if (!new_zero && (r = blk_image_pread(rb->newb, off, new, *len)) < 0) {
        return r;
    }
    return write_differences(rb, c, off, *len, old_zero ? NULL : old, new_zero ? NULL : new);
}

/* Held by the top layer (depth 1), or the same in both chains: nothing
 * holds it, or only the new backing file and below. */
static bool reads_the_same(const struct rebase *rb, const struct blk_extent *e)
{
    return e->depth == 1 || (rb->new_depth && (e->depth == 0 || e->depth > rb->new_depth));
}

/* What reads as zeroes in the old chain and in the new backing file
 * alike needs no comparing either. */
static int64_t rebase_idle(void *opaque, uint64_t off, const struct blk_extent *e)
{
    struct rebase *rb = opaque;
    struct blk_extent ne;

    if (reads_the_same(rb, e)) {
        return (int64_t)e->length;
    }
    if (!(e->flags & BLK_EXT_ZERO)) {
        return 0;
    }
    if (!rb->newb || off >= rb->new_size) {
        return (int64_t)e->length; /* the new chain reads zeroes there */
    }
    int r = blk_image_block_status(rb->newb, off, MIN(e->length, rb->new_size - off), &ne);
    if (r < 0) {
        return r;
    }
    return (ne.flags & BLK_EXT_ZERO) ? (int64_t)ne.length : 0;
}

static int64_t rebase_skip(void *opaque, uint64_t off, uint64_t max)
{
    struct rebase *rb = opaque;

    return blk_chain_idle_stretch(rb->img, off, max, rebase_idle, rb);
}

static int rebase_chunk(void *opaque, struct blk_chain_chunk *c)
{
    struct rebase *rb = opaque;

    for (uint64_t pos = c->off, end = c->off + c->len; pos < end;) {
        struct blk_extent e;
        int r = blk_image_block_status(rb->img, pos, end - pos, &e);
        if (r < 0) {
            return r;
        }
        uint64_t n = e.length;
        if (!reads_the_same(rb, &e)) {
            r = rebase_range(rb, c, pos, &n, e.flags & BLK_EXT_ZERO);
            if (r < 0) {
                return r;
            }
        }
        pos += n;
    }
    return 0;
}

int blk_rebase_data(struct blk_image *img, struct blk_image *new_backing, unsigned new_depth,
                    const struct blk_chain_opts *o)
{
    uint64_t cluster = blk_image_cluster_size(img);
    struct rebase rb = {
        .img = img,
        .newb = new_backing,
        .new_depth = new_depth,
        .new_size = new_backing ? blk_image_size(new_backing) : 0,
        .unit = cluster ? cluster : DEFAULT_UNIT,
    };
    int r;

    if (blk_image_read_only(img)) {
        return err_setx(EPERM, "%s is read-only", ESC_NAME(blk_image_root(img)));
    }
    r = blk_chain_run(blk_image_size(img), MAX(CHUNK, rb.unit), rebase_chunk, rebase_skip, &rb, o);
    return r < 0 ? r : blk_image_flush(img);
}
