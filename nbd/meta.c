/* nbd/meta.c: the metadata context table (see meta.h).  We offer
 * "base:allocation" and, as qemu-nbd does, "qemu:allocation-depth" and
 * "qemu:dirty-bitmap:NAME" for each bitmap the export was given.  Which
 * contexts a client's query selects is option.c's business, the replies
 * handshake-meta.c's and transmission.c's. */
#include <stdio.h>

#include "block/bitmap.h"
#include "block/block.h"
#include "internal.h"
#include "meta.h"
#include "option.h"

/* The contexts every export offers, by index. */
static const char *const fixed_names[NBD_META_DIRTY_BITMAP] = {
    [NBD_META_BASE_ALLOCATION] = "base:allocation",
    [NBD_META_ALLOCATION_DEPTH] = "qemu:allocation-depth",
};

unsigned nbd_meta_count(const struct nbd_export *e)
{
    return NBD_META_DIRTY_BITMAP + e->n_bitmaps;
}

const char *nbd_meta_name(const struct nbd_export *e, unsigned m, char *buf, size_t size)
{
    if (nbd_meta_is_allocation(m)) {
        return fixed_names[m];
    }
    snprintf(buf, size, "%s%s", NBD_DIRTY_BITMAP_PREFIX, nbd_meta_bitmap(e, m)->name);
    return buf;
}

const struct blk_bitmap *nbd_meta_bitmap(const struct nbd_export *e, unsigned m)
{
    return e->bitmaps[m - NBD_META_DIRTY_BITMAP];
}

uint32_t nbd_meta_alloc_value(unsigned m, const struct blk_extent *ext)
{
    if (m == NBD_META_BASE_ALLOCATION) {
        return ((ext->flags & BLK_EXT_DATA) ? 0 : NBD_STATE_HOLE) |
               ((ext->flags & BLK_EXT_ZERO) ? NBD_STATE_ZERO : 0);
    }
    return ext->depth; /* NBD_META_ALLOCATION_DEPTH */
}
