/* nbd/meta.h: the metadata contexts an export offers, as one table:
 * their index, name and id on the wire, and what each reports for a
 * range.  handshake-meta.c answers NBD_OPT_LIST_META_CONTEXT and
 * NBD_OPT_SET_META_CONTEXT with it, transmission.c NBD_CMD_BLOCK_STATUS.
 * Pure: no I/O, no locks; tests/unit/test-nbd-meta.c covers it. */
#ifndef DISKIMG_NBD_META_H
#define DISKIMG_NBD_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server.h"

struct blk_bitmap;
struct blk_extent;
struct nbd_export;

/* Contexts by index (ids on the wire are index + 1): the two every
 * export has, then one per exported bitmap. */
enum nbd_meta_context {
    NBD_META_BASE_ALLOCATION,  /* base:allocation: hole and zero flags */
    NBD_META_ALLOCATION_DEPTH, /* qemu:allocation-depth: backing chain layer */
    NBD_META_DIRTY_BITMAP,     /* qemu:dirty-bitmap:NAME, first of n_bitmaps */
};
#define NBD_META_MAX (NBD_META_DIRTY_BITMAP + NBD_MAX_BITMAPS)
#define NBD_META_NAME_MAX 1100 /* prefix + a qcow2 bitmap name (at most 1023) */

/* How many contexts export e offers. */
unsigned nbd_meta_count(const struct nbd_export *e);

/* The name of context m of export e; buf holds it when it is not a
 * constant. */
const char *nbd_meta_name(const struct nbd_export *e, unsigned m, char *buf, size_t size);

/* Context m's id on the wire (SET_META_CONTEXT replies, block status). */
static inline uint32_t nbd_meta_id(unsigned m)
{
    return m + 1;
}

/* Whether context m describes allocation (answered by the image's block
 * status) rather than a dirty bitmap. */
static inline bool nbd_meta_is_allocation(unsigned m)
{
    return m < NBD_META_DIRTY_BITMAP;
}

/* The bitmap dirty-bitmap context m of export e reports. */
const struct blk_bitmap *nbd_meta_bitmap(const struct nbd_export *e, unsigned m);

/* What allocation context m reports for an extent of the image:
 * NBD_STATE_HOLE and NBD_STATE_ZERO for base:allocation, the depth for
 * qemu:allocation-depth. */
uint32_t nbd_meta_alloc_value(unsigned m, const struct blk_extent *ext);

#endif
