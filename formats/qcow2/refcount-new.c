/* formats/qcow2/refcount-new.c: a whole new refcount structure for
 * counted references (see refcount-new.h).  check.c's repair and
 * snapshot-write.c's shadow update both end with one: a table and blocks
 * past everything in use, counting the image and themselves, that the
 * header is then switched to.  The self-counting size is refcount-math's;
 * this file places and writes it.
 *
 * Order (qcow2.h): above refcount.c; calls refcount-math and the file. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "refcount-new.h"

/* Does refcount block b count any referenced cluster? */
static bool block_in_use(const struct qcow2_state *s, const struct qcow2_refcounts *c, uint64_t b)
{
    uint64_t per_block = 1ULL << s->refblock_bits;

    for (uint64_t k = b * per_block; k < MIN((b + 1) * per_block, c->n); k++) {
        if (c->count[k] != 0) {
            return true;
        }
    }
    return false;
}

/* c covers at least n clusters, the new ones counted 0. */
static int cover(struct qcow2_refcounts *c, uint64_t n, const char *what)
{
    if (n <= c->n) {
        return 0;
    }
    uint32_t *count = realloc(c->count, n * sizeof *count);
    if (!count) {
        return err_set(ENOMEM, "%s: reference counts of %" PRIu64 " clusters", what, n);
    }
    memset(count + c->n, 0, (n - c->n) * sizeof *count);
    c->count = count;
    c->n = n;
    return 0;
}

/* Write refcount block b (at offset) from the counts. */
static int write_block(struct qcow2_state *s, const struct qcow2_refcounts *c, uint64_t b,
                       uint64_t offset, uint8_t *block)
{
    uint64_t per_block = 1ULL << s->refblock_bits;

    memset(block, 0, s->cluster_size);
    for (uint64_t k = b * per_block; k < MIN((b + 1) * per_block, c->n); k++) {
        qcow2_refblock_set(block, s->hdr.refcount_order, k - b * per_block,
                           MIN((uint64_t)c->count[k], s->refcount_max));
    }
    return blk_pwrite(s->file, offset, block, s->cluster_size, 0);
}

int qcow2_write_new_refcounts_locked(struct qcow2_state *s, struct qcow2_refcounts *c,
                                     uint64_t start, const char *what, uint64_t **table_out,
                                     struct qcow2_refcount_area *area)
{
    uint64_t cs = s->cluster_size, per_block = 1ULL << s->refblock_bits, blocks_before = 0;
    int r;

    /* Every block is new, so the area also holds one for each used block
     * below it, and must count itself. */
    for (uint64_t b = 0; b < start / per_block; b++) {
        blocks_before += block_in_use(s, c, b);
    }
    struct qcow2_refcount_area_req req = {
        .cluster_bits = s->cluster_bits,
        .refcount_order = s->hdr.refcount_order,
        .start = start,
        .blocks_before = blocks_before,
    };
    qcow2_refcount_area_size(&req, area);
    if (area->table_clusters * cs > QCOW2_MAX_REFTABLE_BYTES) {
        return err_setx(EFBIG, "%s: the refcount table would exceed 8 MiB", what);
    }
    uint64_t nblocks = (area->end + per_block - 1) / per_block,
             entries = area->table_clusters * cs / 8;
    CLEANUP_FREE uint64_t *table = calloc(entries, 8);
    CLEANUP_FREE uint64_t *disk = malloc(entries * 8);
    CLEANUP_FREE uint8_t *block = malloc(cs);
    if (!table || !disk || !block) {
        return err_set(ENOMEM, "%s: refcount structure", what);
    }
    /* The table first, then the blocks, in the order of the table. */
    uint64_t next = start + area->table_clusters;
    for (uint64_t b = 0; b < nblocks; b++) {
        if (b >= start / per_block || block_in_use(s, c, b)) {
            table[b] = next++ << s->cluster_bits;
        }
    }
    r = cover(c, area->end, what);
    if (r < 0) {
        return r;
    }
    for (uint64_t k = start; k < area->end; k++) {
        c->count[k] = 1;
    }
    for (uint64_t b = 0; b < nblocks; b++) {
        if (table[b]) {
            r = write_block(s, c, b, table[b], block);
            if (r < 0) {
                return r;
            }
        }
    }
    for (uint64_t i = 0; i < entries; i++) {
        disk[i] = htobe64(table[i]);
    }
    r = blk_pwrite(s->file, start << s->cluster_bits, disk, entries * 8, 0);
    if (r == 0 && table_out) {
        *table_out = table;
        table = NULL;
    }
    return r;
}
