/* formats/qcow2/snapshot-shadow.h: the new state of a snapshot
 * operation (create, apply, delete), written beside the old one and
 * switched to with one header write.  See snapshot-shadow.c. */
#ifndef DISKIMG_QCOW2_SNAPSHOT_SHADOW_H
#define DISKIMG_QCOW2_SNAPSHOT_SHADOW_H

#include <stdbool.h>
#include <stdint.h>

#include "qcow2.h"

/* The state being built, and where its new clusters go. */
struct qcow2_shadow {
    struct qcow2_state *s;
    uint64_t old_len;   /* file length before: truncated back to on failure */
    uint64_t next;      /* next free byte past everything the old image uses */
    uint64_t hole_hint; /* first cluster a free run may start at */
    bool use_holes;     /* counted: what may fail (overflow) has been seen */

    uint64_t *l1; /* the new active L1 table, host order */
    uint32_t l1_size;
    uint64_t l1_offset;
    uint64_t size; /* the new virtual size */

    struct qcow2_snapshot *snaps; /* the new list (shallow copies) */
    uint32_t n_snaps;
    uint64_t table_offset, table_bytes; /* the new snapshot table */

    bool own_snaps; /* snaps is ours to free (not s->snapshots) */
    bool switched;  /* the header write naming the new state was issued */

    uint32_t *counts; /* references per cluster in the new state */
    uint64_t n_counts;
    uint64_t reftable_offset;
    uint32_t reftable_clusters;
};

/* Place bytes of new metadata in whole clusters, zero-padded, where the
 * old image has nothing; *offset gets where.  Not synced. */
int qcow2_shadow_put(struct qcow2_shadow *x, const void *buf, uint64_t bytes, uint64_t *offset);

/* The same for an L1 table of n entries in host order. */
int qcow2_shadow_put_l1(struct qcow2_shadow *x, const uint64_t *l1, uint32_t n, uint64_t *offset);

/* Write the new state described by x (its L1 entries tentative), count
 * it, fix the active flags, write the refcounts, switch, and reload. */
int qcow2_shadow_commit_locked(struct qcow2_shadow *x);

/* A failure before the switch (x->switched false): the file goes back
 * to its old length, so the image is as it was. */
void qcow2_shadow_undo_locked(struct qcow2_shadow *x, int r);

#endif
