/* formats/qcow2/refcount-math.c: sizing a refcount area that counts
 * itself (see refcount-math.h).  Pure arithmetic; where the area goes and
 * how it is written belongs to the callers. */
#include "refcount-math.h"

/* Block indices in [first, last] with no block in the existing table. */
static uint64_t missing_blocks(const struct qcow2_refcount_area_req *req, uint64_t first,
                               uint64_t last)
{
    uint64_t n = 0;

    for (uint64_t i = first; i <= last; i++) {
        if (i >= req->reftable_entries) {
            return n + (last - i + 1);
        }
        n += req->reftable[i] == 0;
    }
    return n;
}

void qcow2_refcount_area_size(const struct qcow2_refcount_area_req *req,
                              struct qcow2_refcount_area *area)
{
    uint32_t block_bits = req->cluster_bits + 3 - req->refcount_order; /* log2 entries/block */
    uint64_t entries_per_cluster = (1ULL << req->cluster_bits) / 8;
    uint64_t entries = req->min_entries, blocks = req->blocks_before;

    /* Both counts only grow, and each step needs at most what the
     * smallest self-counting area needs, so the loop stops at the
     * smallest one (the same any of the former three loops reached). */
    for (;;) {
        uint64_t table = (entries + entries_per_cluster - 1) / entries_per_cluster;
        if (table == 0) {
            table = 1;
        }
        uint64_t end = req->start + table + blocks + req->tail_clusters;
        uint64_t first = req->start >> block_bits, last = (end - 1) >> block_bits;
        uint64_t need_entries = last + 1 > entries ? last + 1 : entries;
        uint64_t need_blocks = req->blocks_before + missing_blocks(req, first, last);
        if (need_entries == entries && need_blocks == blocks) {
            area->table_clusters = table;
            area->blocks = blocks;
            area->end = end;
            return;
        }
        entries = need_entries;
        blocks = need_blocks;
    }
}
