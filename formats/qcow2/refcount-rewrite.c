/* formats/qcow2/refcount-rewrite.c: changing the width of the refcount
 * entries (amend -o refcount_bits=N).
 *
 * The new refcount table and blocks are built whole in clusters past the
 * end of the file, written and synced; then one header write switches
 * refcount_order and the table's offset together.  They count every
 * cluster in use but the old table and blocks, which the switch leaves
 * free.  A crash before the header write leaves the old structures in
 * charge (the new ones lie past everything they count, unreferenced); a
 * crash after it, the new ones: qemu-img check is clean either way.
 *
 * Order (qcow2.h): above create.c; calls refcount-math, refcount,
 * writeback, cache and open (the metadata map). */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "qcow2.h"
#include "refcount-math.h"

/* Every cluster the old refcount blocks describe, from the file's start:
 * the file's clusters, and all those of the last block in use.  Blocks
 * lie inside the file and describe clusters near it; a table that says
 * otherwise is refused rather than walked (a hostile one could name
 * 2^35 clusters). */
static int counted_clusters(const struct qcow2_state *s, uint64_t *out)
{
    uint64_t n = s->file_end >> s->cluster_bits;
    uint64_t slack = 4ULL << s->refblock_bits;

    *out = n;
    for (uint32_t i = 0; i < s->reftable_entries; i++) {
        if (!s->reftable[i]) {
            continue;
        }
        if (s->reftable[i] >= s->file_end || ((uint64_t)i << s->refblock_bits) > n + slack) {
            return err_setx(EINVAL,
                            "qcow2: refcount block %" PRIu32 " at 0x%" PRIx64
                            " lies or counts past the end of the file (run 'diskimg check -r "
                            "all')",
                            i, s->reftable[i]);
        }
        *out = MAX(*out, (uint64_t)(i + 1) << s->refblock_bits);
    }
    return 0;
}

/* The refcount of every cluster, read through the cache (flushed). */
static int read_refcounts_locked(struct qcow2_state *s, uint64_t n, uint64_t **out)
{
    uint64_t *counts = calloc(n ? n : 1, sizeof *counts);
    int r = 0;

    if (!counts) {
        return err_set(ENOMEM, "qcow2: refcounts of %" PRIu64 " clusters", n);
    }
    for (uint64_t k = 0; r == 0 && k < n; k++) {
        r = qcow2_get_refcount_locked(s, k, &counts[k]);
    }
    if (r < 0) {
        free(counts);
        return r;
    }
    *out = counts;
    return 0;
}

static int check_width(const struct qcow2_state *s, const uint64_t *counts, uint64_t n,
                       uint32_t order)
{
    uint64_t max = order == 6 ? UINT64_MAX : (1ULL << (1u << order)) - 1;

    for (uint64_t k = 0; k < n; k++) {
        if (counts[k] > max) {
            return err_setx(ENOTSUP,
                            "Cannot decrease refcount entry width to %u bits: Cluster at offset "
                            "0x%" PRIx64 " has a refcount of %" PRIu64,
                            1u << order, k << s->cluster_bits, counts[k]);
        }
    }
    return 0;
}

int qcow2_check_refcount_width_locked(struct qcow2_state *s, uint32_t order)
{
    CLEANUP_FREE uint64_t *counts = NULL;
    uint64_t n;
    int r = counted_clusters(s, &n);

    if (r < 0 || order >= s->hdr.refcount_order) {
        return r; /* every refcount fits a wider entry */
    }
    r = read_refcounts_locked(s, n, &counts);
    return r < 0 ? r : check_width(s, counts, n, order);
}

/* The new structure: where its table starts, its size, each block. */
struct new_refs {
    uint32_t order, block_bits;
    uint64_t start, table_clusters, end;
    uint64_t *table; /* host order, table_clusters * cs / 8 entries */
    uint64_t *counts;
    uint64_t n; /* entries of counts */
};

static bool block_in_use(const struct new_refs *nr, uint64_t b)
{
    for (uint64_t k = b << nr->block_bits; k < MIN((b + 1) << nr->block_bits, nr->n); k++) {
        if (nr->counts[k]) {
            return true;
        }
    }
    return false;
}

/* Size and place the new table and blocks past everything in use, and
 * count them. */
static int plan_new_refs(struct qcow2_state *s, struct new_refs *nr)
{
    uint64_t cs = s->cluster_size, used_end = 0, blocks_before = 0;
    struct qcow2_refcount_area area;

    for (uint64_t k = 0; k < nr->n; k++) {
        if (nr->counts[k]) {
            used_end = k + 1;
        }
    }
    /* Past the file too: the old structures live until the switch. */
    nr->start = MAX(used_end, s->file_end >> s->cluster_bits);
    for (uint64_t b = 0; b < nr->start >> nr->block_bits; b++) {
        blocks_before += block_in_use(nr, b);
    }
    struct qcow2_refcount_area_req req = {
        .cluster_bits = s->cluster_bits,
        .refcount_order = nr->order,
        .start = nr->start,
        .blocks_before = blocks_before,
    };
    qcow2_refcount_area_size(&req, &area);
    if (area.table_clusters * cs > QCOW2_MAX_REFTABLE_BYTES) {
        return err_setx(EFBIG, "qcow2: the new refcount table would exceed 8 MiB");
    }
    nr->table_clusters = area.table_clusters;
    nr->end = area.end;
    nr->table = calloc(area.table_clusters * cs / 8, 8);
    uint64_t *counts = realloc(nr->counts, MAX(nr->end, nr->n) * sizeof *counts);
    if (!nr->table || !counts) {
        if (counts) {
            nr->counts = counts;
        }
        return err_set(ENOMEM, "qcow2: new refcount structure");
    }
    memset(counts + nr->n, 0, (nr->end > nr->n ? nr->end - nr->n : 0) * sizeof *counts);
    nr->counts = counts;
    nr->n = MAX(nr->n, nr->end);
    uint64_t next = nr->start + nr->table_clusters;
    uint64_t nblocks = (nr->end + (1ULL << nr->block_bits) - 1) >> nr->block_bits;
    for (uint64_t b = 0; b < nblocks; b++) {
        if (b >= nr->start >> nr->block_bits || block_in_use(nr, b)) {
            nr->table[b] = next++ << s->cluster_bits;
        }
    }
    for (uint64_t k = nr->start; k < nr->end; k++) {
        nr->counts[k] = 1;
    }
    return 0;
}

/* Write the blocks and the table, and sync: nothing points at them yet. */
static int write_new_refs(struct qcow2_state *s, const struct new_refs *nr,
                          struct amend_progress *p)
{
    uint64_t cs = s->cluster_size, per_block = 1ULL << nr->block_bits;
    uint64_t entries = nr->table_clusters * cs / 8;
    CLEANUP_FREE uint8_t *block = malloc(cs);
    CLEANUP_FREE uint64_t *disk = malloc(nr->table_clusters * cs);
    int r = 0;

    uint64_t nblocks = 0, done = 0;

    if (!block || !disk) {
        return err_set(ENOMEM, "qcow2: new refcount structure");
    }
    for (uint64_t b = 0; b < entries; b++) {
        nblocks += nr->table[b] != 0;
    }
    for (uint64_t b = 0; r == 0 && b < entries; b++) {
        if (!nr->table[b]) {
            continue;
        }
        memset(block, 0, cs);
        for (uint64_t k = b * per_block; k < MIN((b + 1) * per_block, nr->n); k++) {
            qcow2_refblock_set(block, nr->order, k - b * per_block, nr->counts[k]);
        }
        r = blk_pwrite(s->file, nr->table[b], block, cs, 0);
        amend_progress(p, ++done, nblocks + 1);
    }
    for (uint64_t i = 0; i < entries; i++) {
        disk[i] = htobe64(nr->table[i]);
    }
    if (r == 0) {
        r = blk_pwrite(s->file, nr->start << s->cluster_bits, disk, nr->table_clusters * cs, 0);
    }
    return r == 0 ? blk_flush(s->file) : r;
}

/* After the header switch: the in-memory state follows. */
static int use_new_refs_locked(struct qcow2_state *s, struct new_refs *nr)
{
    for (uint32_t i = 0; i < s->reftable_entries; i++) {
        if (s->reftable[i]) {
            qcow2_cache_discard_locked(s->rb_cache, s->reftable[i], s->cluster_size);
        }
    }
    free(s->reftable);
    s->reftable = steal_ptr(&nr->table);
    s->reftable_entries = (uint32_t)(nr->table_clusters * s->cluster_size / 8);
    s->reftable_offset = nr->start << s->cluster_bits;
    s->refcount_bits = 1u << nr->order;
    s->refblock_bits = nr->block_bits;
    s->refcount_max = s->refcount_bits == 64 ? UINT64_MAX : (1ULL << s->refcount_bits) - 1;
    s->file_end = MAX(s->file_end, nr->end << s->cluster_bits);
    s->free_hint = 1;
    return qcow2_build_metadata_map_locked(s);
}

int qcow2_change_refcount_order_locked(struct qcow2_state *s, uint32_t order,
                                       struct amend_progress *p)
{
    struct new_refs nr = {.order = order, .block_bits = s->cluster_bits + 3 - order};
    struct qcow2_header old = s->hdr;
    int64_t old_len = blk_get_length(s->file);
    int r = qcow2_flush_caches_locked(s);

    if (r == 0) {
        r = counted_clusters(s, &nr.n);
    }
    if (r == 0) {
        r = read_refcounts_locked(s, nr.n, &nr.counts);
    }
    if (r == 0) {
        r = check_width(s, nr.counts, nr.n, order);
    }
    if (r == 0) {
        /* The old table and blocks are free once the header switches. */
        uint64_t rt = s->reftable_offset >> s->cluster_bits;
        for (uint64_t k = rt; k < rt + s->hdr.refcount_table_clusters && k < nr.n; k++) {
            nr.counts[k] = 0;
        }
        for (uint32_t i = 0; i < s->reftable_entries; i++) {
            if (s->reftable[i] && (s->reftable[i] >> s->cluster_bits) < nr.n) {
                nr.counts[s->reftable[i] >> s->cluster_bits] = 0;
            }
        }
        r = plan_new_refs(s, &nr);
    }
    if (r == 0) {
        r = write_new_refs(s, &nr, p);
    }
    if (r == 0) {
        old_len = -1; /* from here on the header may point at the new structure */
        s->hdr.refcount_order = order;
        s->hdr.refcount_table_offset = nr.start << s->cluster_bits;
        s->hdr.refcount_table_clusters = (uint32_t)nr.table_clusters;
        r = qcow2_commit_header_locked(s);
        if (r < 0) {
            s->hdr.refcount_order = old.refcount_order;
            s->hdr.refcount_table_offset = old.refcount_table_offset;
            s->hdr.refcount_table_clusters = old.refcount_table_clusters;
        } else {
            r = use_new_refs_locked(s, &nr);
        }
    }
    if (r < 0 && old_len >= 0) {
        /* Not switched: drop what was written past the old end. */
        (void)blk_truncate(s->file, (uint64_t)old_len);
    }
    free(nr.table);
    free(nr.counts);
    return r;
}
