/* formats/qcow2/refcount-math.h: the refcount arithmetic that a crash or
 * a miscount would turn into a corrupt image, written once: reading and
 * writing one entry of a refcount block, and sizing a new refcount area
 * (table plus blocks) that has to count itself.
 *
 * Pure: no I/O, no locks, no struct qcow2_state, so unit tests link it
 * alone.  Not for policy (where an area goes, when it is written and
 * synced): that stays with create.c, refcount.c and check.c. */
#ifndef DISKIMG_QCOW2_REFCOUNT_MATH_H
#define DISKIMG_QCOW2_REFCOUNT_MATH_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "qcow2-format.h"

/* Entry 'index' of a refcount block whose entries are 2^refcount_order
 * bits wide (order 0..6).  qcow2.txt: 16, 32 and 64-bit entries are
 * big-endian; narrower entries are packed from the least significant bit
 * of each byte up, so entry 0 of a 1-bit block is bit 0 of byte 0. */
static inline uint64_t qcow2_refblock_get(const void *block, uint32_t refcount_order,
                                          uint64_t index)
{
    const uint8_t *b = block;

    switch (refcount_order) {
    case 0:
    case 1:
    case 2: {
        uint64_t bit = index << refcount_order;
        return (b[bit / 8] >> (bit % 8)) & ((1u << (1u << refcount_order)) - 1);
    }
    case 3:
        return b[index];
    case 4:
        return qcow2_rd16(b + index * 2);
    case 5:
        return qcow2_rd32(b + index * 4);
    default:
        return qcow2_rd64(b + index * 8);
    }
}

/* Set entry 'index' to 'value', leaving its neighbours (which share the
 * byte for widths below 8) untouched.  A value wider than the entry is
 * cut to the entry's width: callers check against the maximum first. */
static inline void qcow2_refblock_set(void *block, uint32_t refcount_order, uint64_t index,
                                      uint64_t value)
{
    uint8_t *b = block;

    switch (refcount_order) {
    case 0:
    case 1:
    case 2: {
        uint64_t bit = index << refcount_order;
        uint8_t mask = (uint8_t)(((1u << (1u << refcount_order)) - 1) << (bit % 8));
        b[bit / 8] = (uint8_t)((b[bit / 8] & ~mask) | ((value << (bit % 8)) & mask));
        break;
    }
    case 3:
        b[index] = (uint8_t)value;
        break;
    case 4: {
        uint16_t v = htobe16((uint16_t)value);
        memcpy(b + index * 2, &v, 2);
        break;
    }
    case 5:
        qcow2_wr32(b + index * 4, (uint32_t)value);
        break;
    default:
        qcow2_wr64(b + index * 8, value);
        break;
    }
}

/* A new refcount area: 'table_clusters' of refcount table at cluster
 * 'start', the new refcount blocks right after it, then 'tail_clusters' of
 * other metadata.  The blocks must count every cluster of the area,
 * themselves included, and the table must list every block up to the
 * area's end; each extra block or table cluster moves the end, hence a
 * fixed point.  The three users:
 *   create:  start 1 after the header, tail = the L1 table, nothing exists;
 *   growth:  start at the end of the file, blocks listed in the old table
 *            are reused, the table keeps at least min_entries;
 *   repair:  start after the last used cluster, every block is new, so
 *            blocks_before counts those for used clusters below the area. */
struct qcow2_refcount_area_req {
    uint32_t cluster_bits;     /* 9..21 */
    uint32_t refcount_order;   /* 0..6 */
    uint64_t start;            /* first cluster of the area, >= 1 */
    uint64_t tail_clusters;    /* in use after the blocks, counted too */
    uint64_t min_entries;      /* the table has at least this many entries */
    uint64_t blocks_before;    /* new blocks for clusters below start's block */
    const uint64_t *reftable;  /* existing table: a non-zero entry needs */
    uint64_t reftable_entries; /* no new block (NULL, 0: nothing exists) */
};

struct qcow2_refcount_area {
    uint64_t table_clusters; /* >= 1 */
    uint64_t blocks;         /* new blocks, blocks_before included */
    uint64_t end;            /* start + table_clusters + blocks + tail_clusters */
};

/* The smallest area that counts itself.  Inputs come from real files and
 * qcow2 limits (offsets below 2^56), so nothing here overflows; callers
 * still cap the table (QCOW2_MAX_REFTABLE_BYTES) afterwards. */
void qcow2_refcount_area_size(const struct qcow2_refcount_area_req *req,
                              struct qcow2_refcount_area *area);

#endif
