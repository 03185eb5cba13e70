/* block/commit.c: commit's data step, as qemu-img commit does it: what
 * the layers above the base hold (block status says which layer answers)
 * is read through the top image, which reads it from the layer that
 * holds it, and written into the base; ranges the base or the layers
 * below it hold are never read.  The base is grown to the top's size
 * first, as qemu grows it, and flushed at the end, before the caller
 * empties the top: a crash leaves the old guest view or the committed
 * one, never a mix.
 *
 * Not for: emptying the top layer (the driver's make_empty). */
#include <errno.h>

#include "chain-pool.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "driver.h"
#include "esc-name.h"

#define CHUNK (2u << 20)

struct commit {
    struct blk_image *img;
    struct blk_node *base;
    unsigned base_depth;
    unsigned flags; /* FUA when the cache mode writes through (-t) */
};

static int commit_range(struct commit *c, struct blk_chain_chunk *ch, uint64_t off, uint64_t len,
                        bool zero)
{
    int r = zero ? 0 : blk_image_pread(c->img, off, ch->a, len);

    if (r == 0) {
        r = blk_chain_turn(ch);
    }
    if (r < 0) {
        return r;
    }
    if (zero) {
        return blk_pwrite_zeroes(c->base, off, len, BLK_REQ_MAY_UNMAP | c->flags);
    }
    return blk_pwrite(c->base, off, ch->a, len, c->flags);
}

/* A layer above the base holds it.  depth is the holding layer + 1
 * (0: nothing holds it). */
static bool above_base(const struct commit *c, const struct blk_extent *e)
{
    return e->depth != 0 && e->depth <= c->base_depth;
}

static int64_t commit_idle(void *opaque, uint64_t off, const struct blk_extent *e)
{
    (void)off;
    return above_base(opaque, e) ? 0 : (int64_t)e->length;
}

/* Nothing to commit where the base or the layers below it hold the data,
 * or nothing does. */
static int64_t commit_skip(void *opaque, uint64_t off, uint64_t max)
{
    struct commit *c = opaque;

    return blk_chain_idle_stretch(c->img, off, max, commit_idle, c);
}

static int commit_chunk(void *opaque, struct blk_chain_chunk *ch)
{
    struct commit *c = opaque;

    for (uint64_t pos = ch->off, end = ch->off + ch->len; pos < end;) {
        struct blk_extent e;
        int r = blk_image_block_status(c->img, pos, end - pos, &e);
        if (r < 0) {
            return r;
        }
        if (above_base(c, &e)) {
            r = commit_range(c, ch, pos, e.length, e.flags & BLK_EXT_ZERO);
            if (r < 0) {
                return r;
            }
            ch->written += e.length;
        }
        pos += e.length;
    }
    return 0;
}

/* Grow the base from len to size.  Where a backing file of the base
 * reaches past len, the new range must read as zeroes, as it did through
 * the top (zeroes past the end of the base), not as that backing file:
 * zero it, as qemu's truncate does. */
static int grow_base(struct commit *c, uint64_t len, uint64_t size)
{
    int64_t below = c->base->backing ? blk_get_length(c->base->backing) : 0;
    int r = blk_truncate(c->base, size);

    if (r == 0 && below > (int64_t)len) {
        r = blk_pwrite_zeroes(c->base, len, MIN((uint64_t)below, size) - len, c->flags);
    }
    if (r < 0) {
        err_prefix("growing %s to %llu bytes", ESC_NAME(c->base), (unsigned long long)size);
    }
    return r;
}

int blk_commit_data(struct blk_image *img, unsigned base_depth, const struct blk_chain_opts *o)
{
    struct commit c = {.img = img, .base_depth = base_depth};

    /* The base is a node of img's stack, written below the image's
     * cache policy: apply its writethrough here. */
    if (blk_cache_mode_writethrough(blk_image_cache_mode(img))) {
        c.flags = BLK_REQ_FUA;
    }
    uint64_t size = blk_image_size(img);
    int64_t base_len;
    int r;

    c.base = blk_image_root(img);
    for (unsigned d = 0; c.base && d < base_depth; d++) {
        c.base = c.base->backing;
    }
    if (!base_depth || !c.base) {
        return err_setx(EINVAL, "no backing file at depth %u", base_depth);
    }
    if (c.base->read_only) {
        return err_setx(EPERM, "%s: the base is open read-only", ESC_NAME(c.base));
    }
    base_len = blk_get_length(c.base);
    if (base_len < 0) {
        return (int)base_len;
    }
    if ((uint64_t)base_len < size && (r = grow_base(&c, (uint64_t)base_len, size)) < 0) {
        return r;
    }
    r = blk_chain_run(size, CHUNK, commit_chunk, commit_skip, &c, o);
    return r < 0 ? r : blk_flush(c.base);
}
