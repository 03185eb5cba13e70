/* formats/qcow2/refcount-new.h: a whole new refcount structure, written
 * for references counted from scratch (check -r all rebuilding it, a
 * snapshot change's new state), before the header is switched to it.
 * See refcount-new.c. */
#ifndef DISKIMG_QCOW2_REFCOUNT_NEW_H
#define DISKIMG_QCOW2_REFCOUNT_NEW_H

#include <stdint.h>

#include "qcow2.h"
#include "refcount-math.h"

/* References per host cluster, as check counts them. */
struct qcow2_refcounts {
    uint32_t *count;
    uint64_t n; /* clusters covered */
};

/* Lay out a refcount table and blocks at cluster start, where the file
 * is free from start on, for the counts in c; count the area's own
 * clusters in c (growing it to cover them, never shrinking it); write the
 * blocks, then the table (no sync: the caller syncs before it switches).
 * *table gets the table in host order (area->table_clusters clusters,
 * the caller frees it; may be NULL when the caller needs none).  Counts
 * above the refcount width are stored as its maximum.  what prefixes
 * messages ("qcow2", "qcow2 repair"). */
int qcow2_write_new_refcounts_locked(struct qcow2_state *s, struct qcow2_refcounts *c,
                                     uint64_t start, const char *what, uint64_t **table,
                                     struct qcow2_refcount_area *area);

#endif
