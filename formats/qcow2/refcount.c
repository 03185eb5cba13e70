/* formats/qcow2/refcount.c: refcounts.
 *
 * Refcounts are refcount_bits wide (1 to 64) in refcount blocks found
 * through the refcount table.  Increments happen at once (in the cache);
 * decrements wait in s->pending until the L2 entries that stopped pointing
 * at the clusters are durable, so a crash never leaves a cluster that is
 * referenced with a refcount of 0.  New refcount blocks and a bigger
 * refcount table are written and synced before anything points at them.
 *
 * Order (qcow2.h): above writeback.c; calls writeback, overlap, cache. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"
#include "refcount-math.h"

/* Deferred frees are applied through this (writeback.c). */
static int release_clusters_locked(struct qcow2_state *s, uint64_t offset, uint64_t bytes)
{
    return qcow2_update_refcount_locked(s, offset, bytes, -1);
}

int qcow2_load_reftable(struct qcow2_state *s)
{
    uint64_t bytes = (uint64_t)s->hdr.refcount_table_clusters * s->cluster_size;
    CLEANUP_FREE uint64_t *t = malloc(bytes);
    int r;

    if (!t) {
        return err_set(ENOMEM, "qcow2: refcount table of %" PRIu64 " bytes", bytes);
    }
    r = blk_pread(s->file, s->hdr.refcount_table_offset, t, bytes);
    if (r < 0) {
        return r;
    }
    s->reftable_entries = (uint32_t)(bytes / 8);
    for (uint32_t i = 0; i < s->reftable_entries; i++) {
        t[i] = be64toh(t[i]);
        if (t[i] & REFT_RESERVED_MASK) {
            return err_setx(EINVAL,
                            "qcow2: refcount table entry %" PRIu32
                            " has reserved bits set (0x%016" PRIx64 ")",
                            i, t[i]);
        }
        if (t[i] && ((t[i] & (s->cluster_size - 1)) || t[i] >= QCOW2_MAX_HOST_OFFSET)) {
            return err_setx(EINVAL,
                            "qcow2: refcount block %" PRIu32 " at 0x%" PRIx64
                            " is not a valid cluster offset",
                            i, t[i]);
        }
    }
    s->reftable = steal_ptr(&t);
    s->reftable_offset = s->hdr.refcount_table_offset;
    s->release_locked = release_clusters_locked;
    return 0;
}

/* The refcount table and blocks: an owner's part of the metadata map. */
int qcow2_add_refcount_metadata_locked(struct qcow2_state *s)
{
    uint64_t cs = s->cluster_size;
    int r = qcow2_add_metadata_locked(s, s->reftable_offset,
                                      ROUND_UP((uint64_t)s->reftable_entries * 8, cs),
                                      QCOW2_META_REFTABLE);

    for (uint32_t i = 0; r == 0 && i < s->reftable_entries; i++) {
        if (s->reftable[i]) {
            r = qcow2_add_metadata_locked(s, s->reftable[i], cs, QCOW2_META_REFBLOCK);
        }
    }
    return r;
}

int qcow2_get_refcount_locked(struct qcow2_state *s, uint64_t cluster, uint64_t *refcount)
{
    uint64_t rt = cluster >> s->refblock_bits;
    void *block;
    int r;

    *refcount = 0;
    if (rt >= s->reftable_entries || s->reftable[rt] == 0) {
        return 0; /* no refcount block: every refcount in its range is 0 */
    }
    r = qcow2_cache_get_locked(s->rb_cache, s->reftable[rt], true, &block);
    if (r < 0) {
        return r;
    }
    *refcount = qcow2_refblock_get(block, s->hdr.refcount_order,
                                   cluster & ((1ULL << s->refblock_bits) - 1));
    qcow2_cache_put_locked(s->rb_cache, block);
    return 0;
}

static int write_reftable_entry(struct qcow2_state *s, uint64_t rt)
{
    uint64_t be = htobe64(s->reftable[rt]);

    return blk_pwrite(s->file, s->reftable_offset + rt * 8, &be, 8, 0);
}

/* Is this cluster free (refcount 0) and not known metadata? */
static int cluster_is_free(struct qcow2_state *s, uint64_t cluster, bool *free_)
{
    uint64_t rc;
    int r = qcow2_get_refcount_locked(s, cluster, &rc);

    if (r < 0) {
        return r;
    }
    /* A hostile image may give metadata a refcount of 0: never hand that
     * cluster out. */
    *free_ = rc == 0 && cluster != 0 &&
             !qcow2_overlaps_metadata_locked(s, cluster << s->cluster_bits, s->cluster_size);
    return 0;
}

/* First run of n free clusters at or after the hint. */
static int find_free_run(struct qcow2_state *s, uint64_t n, uint64_t *start)
{
    uint64_t c = MAX(s->free_hint, 1), run = 0;
    uint64_t limit = QCOW2_MAX_HOST_OFFSET >> s->cluster_bits;
    bool f;
    int r;

    while (run < n) {
        if (c + n - run >= limit) {
            return err_setx(ENOSPC, "qcow2: no room for %" PRIu64 " more clusters", n);
        }
        r = cluster_is_free(s, c + run, &f);
        if (r < 0) {
            return r;
        }
        if (f) {
            run++;
        } else {
            c += run + 1;
            run = 0;
        }
    }
    *start = c;
    return 0;
}

static int grow_reftable_locked(struct qcow2_state *s, uint64_t min_entries);

/* Create the refcount block for table index rt.  Returns -EAGAIN when it
 * had to create another block first: the caller searches again. */
static int alloc_refblock_locked(struct qcow2_state *s, uint64_t rt)
{
    uint64_t per_block = 1ULL << s->refblock_bits;
    uint64_t c, off;
    void *block;
    int r;

    if (rt >= s->reftable_entries) {
        r = grow_reftable_locked(s, rt + 1);
        return r < 0 ? r : -EAGAIN;
    }
    r = find_free_run(s, 1, &c);
    if (r < 0) {
        return r;
    }
    off = c << s->cluster_bits;
    if ((c >> s->refblock_bits) != rt) {
        /* The block's own cluster is counted by another block. */
        uint64_t other = c >> s->refblock_bits;
        if (other >= s->reftable_entries || s->reftable[other] == 0) {
            r = alloc_refblock_locked(s, other);
            return r < 0 ? r : -EAGAIN;
        }
        r = qcow2_update_refcount_locked(s, off, s->cluster_size, 1);
        if (r < 0) {
            return r;
        }
    }
    r = qcow2_cache_get_locked(s->rb_cache, off, false, &block);
    if (r < 0) {
        return r;
    }
    if ((c >> s->refblock_bits) == rt) {
        /* counts itself */
        qcow2_refblock_set(block, s->hdr.refcount_order, c & (per_block - 1), 1);
    }
    qcow2_cache_mark_dirty_locked(s->rb_cache, block);
    qcow2_cache_put_locked(s->rb_cache, block);
    r = qcow2_add_metadata_locked(s, off, s->cluster_size, QCOW2_META_REFBLOCK);
    /* The block (and its own refcount) is durable before the table
     * points at it. */
    if (r == 0) {
        r = qcow2_commit_refcounts_locked(s);
    }
    if (r < 0) {
        return r;
    }
    s->reftable[rt] = off;
    s->file_end = MAX(s->file_end, off + s->cluster_size);
    return write_reftable_entry(s, rt);
}

static int get_refblock_locked(struct qcow2_state *s, uint64_t rt, bool alloc, void **block)
{
    int r;

    while (rt >= s->reftable_entries || s->reftable[rt] == 0) {
        if (!alloc) {
            return qcow2_mark_corrupt_locked(s,
                                             "refcount of a used cluster is in a missing "
                                             "refcount block (%" PRIu64 ")",
                                             rt);
        }
        r = alloc_refblock_locked(s, rt);
        if (r < 0 && r != -EAGAIN) {
            return r;
        }
    }
    if (s->reftable[rt] >= s->file_end) {
        /* Reads there are zeroes, and writing it back would make a huge
         * sparse file: the table is wrong. */
        return qcow2_mark_corrupt_locked(
            s, "refcount block %" PRIu64 " at 0x%" PRIx64 " is past the end of the file", rt,
            s->reftable[rt]);
    }
    return qcow2_cache_get_locked(s->rb_cache, s->reftable[rt], true, block);
}

int qcow2_update_refcount_locked(struct qcow2_state *s, uint64_t offset, uint64_t bytes, int delta)
{
    uint64_t first = offset >> s->cluster_bits;
    uint64_t last = (offset + bytes - 1) >> s->cluster_bits;
    uint64_t per_block = 1ULL << s->refblock_bits;

    if (bytes == 0) {
        return 0;
    }
    for (uint64_t c = first; c <= last; c++) {
        void *block;
        int r = get_refblock_locked(s, c >> s->refblock_bits, delta > 0, &block);
        if (r < 0) {
            return r;
        }
        uint64_t v = qcow2_refblock_get(block, s->hdr.refcount_order, c & (per_block - 1));
        if ((delta > 0 && v >= s->refcount_max) || (delta < 0 && v == 0)) {
            qcow2_cache_put_locked(s->rb_cache, block);
            if (delta > 0) {
                return err_setx(ERANGE,
                                "qcow2: refcount of cluster 0x%" PRIx64 " would exceed %" PRIu64,
                                c << s->cluster_bits, s->refcount_max);
            }
            return qcow2_mark_corrupt_locked(
                s, "refcount of cluster 0x%" PRIx64 " would drop below 0", c << s->cluster_bits);
        }
        qcow2_refblock_set(block, s->hdr.refcount_order, c & (per_block - 1),
                           delta > 0 ? v + 1 : v - 1);
        qcow2_cache_mark_dirty_locked(s->rb_cache, block);
        qcow2_cache_put_locked(s->rb_cache, block);
        if (delta < 0 && v == 1) {
            /* Free now: forget cached tables that lived there. */
            uint64_t off = c << s->cluster_bits;
            qcow2_cache_discard_locked(s->l2_cache, off, s->cluster_size);
            qcow2_remove_metadata_locked(s, off, s->cluster_size);
            s->free_hint = MIN(s->free_hint, c);
            if (s->compressed_next && (s->compressed_next >> s->cluster_bits) == c) {
                s->compressed_next = 0; /* never append to a freed cluster */
            }
        }
    }
    return 0;
}

int qcow2_alloc_clusters_locked(struct qcow2_state *s, uint64_t n, uint64_t *offset)
{
    uint64_t c;
    int r;

    for (;;) {
        r = find_free_run(s, n, &c);
        if (r < 0) {
            return r;
        }
        /* Make sure every block that counts the run exists; creating one
         * may take a cluster of the run, so search again. */
        bool again = false;
        for (uint64_t rt = c >> s->refblock_bits; rt <= (c + n - 1) >> s->refblock_bits; rt++) {
            if (rt >= s->reftable_entries || s->reftable[rt] == 0) {
                r = alloc_refblock_locked(s, rt);
                if (r < 0 && r != -EAGAIN) {
                    return r;
                }
                again = true;
                break;
            }
        }
        if (!again) {
            break;
        }
    }
    r = qcow2_update_refcount_locked(s, c << s->cluster_bits, n << s->cluster_bits, 1);
    if (r < 0) {
        return r;
    }
    s->free_hint = c + n;
    *offset = c << s->cluster_bits;
    s->file_end = MAX(s->file_end, *offset + (n << s->cluster_bits));
    return 0;
}

/* Refcount table growth: a new, larger table and the refcount blocks that
 * count the new area are placed together at the end of the file, counted
 * by themselves, written and synced; then the header switches to them. */
static int grow_reftable_locked(struct qcow2_state *s, uint64_t min_entries)
{
    uint64_t cs = s->cluster_size, entries_per_cluster = cs / 8;
    uint64_t start = ROUND_UP(s->file_end, cs) >> s->cluster_bits;
    struct qcow2_refcount_area area;
    int r;

    if (start == 0) {
        start = 1;
    }
    /* The area holds the table and the blocks counting it. */
    struct qcow2_refcount_area_req req = {
        .cluster_bits = s->cluster_bits,
        .refcount_order = s->hdr.refcount_order,
        .start = start,
        .min_entries = MAX(min_entries, (uint64_t)s->reftable_entries * 2),
        .reftable = s->reftable,
        .reftable_entries = s->reftable_entries,
    };
    qcow2_refcount_area_size(&req, &area);
    uint64_t table_clusters = area.table_clusters, end = area.end;
    if (table_clusters * cs > QCOW2_MAX_REFTABLE_BYTES) {
        return err_setx(EFBIG, "qcow2: the refcount table would exceed 8 MiB");
    }
    CLEANUP_FREE uint64_t *table = calloc(table_clusters * entries_per_cluster, 8);
    if (!table) {
        return err_set(ENOMEM, "qcow2: refcount table");
    }
    memcpy(table, s->reftable, (size_t)s->reftable_entries * 8);

    /* Place new blocks after the table and count the whole area. */
    uint64_t next_block = start + table_clusters;
    for (uint64_t rt = start >> s->refblock_bits; rt <= (end - 1) >> s->refblock_bits; rt++) {
        if (!table[rt]) {
            table[rt] = next_block++ << s->cluster_bits;
            void *block;
            r = qcow2_cache_get_locked(s->rb_cache, table[rt], false, &block);
            if (r < 0) {
                return r;
            }
            qcow2_cache_mark_dirty_locked(s->rb_cache, block);
            qcow2_cache_put_locked(s->rb_cache, block);
            r = qcow2_add_metadata_locked(s, table[rt], cs, QCOW2_META_REFBLOCK);
            if (r < 0) {
                return r;
            }
        }
    }
    /* Switch the in-memory table first so refcount updates of the area
     * find the new blocks; on failure below the image is marked corrupt
     * rather than left half-switched in memory. */
    uint64_t *old_table = s->reftable;
    uint32_t old_entries = s->reftable_entries;
    uint64_t old_offset = s->reftable_offset;
    s->reftable = steal_ptr(&table);
    s->reftable_entries = (uint32_t)(table_clusters * entries_per_cluster);
    s->reftable_offset = start << s->cluster_bits;
    s->file_end = MAX(s->file_end, end << s->cluster_bits);
    r = qcow2_update_refcount_locked(s, start << s->cluster_bits, (end - start) << s->cluster_bits,
                                     1);
    if (r == 0) {
        r = qcow2_add_metadata_locked(s, s->reftable_offset, table_clusters * cs,
                                      QCOW2_META_REFTABLE);
    }
    if (r == 0) {
        r = qcow2_cache_flush_locked(s->rb_cache); /* the new blocks, then the table */
    }
    if (r == 0) {
        CLEANUP_FREE uint64_t *be = malloc(table_clusters * cs);
        if (!be) {
            r = err_set(ENOMEM, "qcow2: refcount table");
        } else {
            for (uint64_t i = 0; i < s->reftable_entries; i++) {
                be[i] = htobe64(s->reftable[i]);
            }
            r = qcow2_write_metadata_locked(s, s->reftable_offset, be, table_clusters * cs);
        }
    }
    if (r == 0) {
        s->hdr.refcount_table_offset = s->reftable_offset;
        s->hdr.refcount_table_clusters = (uint32_t)table_clusters;
        r = qcow2_commit_header_locked(s);
    }
    if (r < 0) {
        free(old_table);
        return qcow2_mark_corrupt_locked(s, "growing the refcount table failed: %s", err_msg_or(r));
    }
    free(old_table);
    qcow2_remove_metadata_locked(s, old_offset, ROUND_UP((uint64_t)old_entries * 8, cs));
    return qcow2_free_later_locked(s, old_offset, ROUND_UP((uint64_t)old_entries * 8, cs));
}
