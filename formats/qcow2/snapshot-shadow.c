/* formats/qcow2/snapshot-shadow.c: a snapshot operation's new state,
 * written beside the old one and switched to at once.
 *
 * Crash safety by shadow update.  Every change goes to clusters the old
 * image does not use (its free holes, else past the end of the file): new
 * L1 tables, copies of the active L2 tables whose copied flags change, the
 * new snapshot table, and a whole new refcount structure counting the new
 * state (at the end).  They are synced; then one write of
 * the header's bytes 24..71 (virtual size, L1 table, refcount table,
 * snapshot table: one sector) switches to them, and a sync makes that
 * durable.  A crash before the switch leaves the old image as it was (the
 * new clusters are referenced by nothing and counted by nothing), a crash
 * after it the new one, consistent and without leaks.  qemu's in-place
 * order cannot promise that: an active copied flag must say "refcount is
 * 1", and a refcount block and an L2 table never change in one write.
 *
 * The active L2 tables get the copies.  After a snapshot is created the
 * active image and the snapshot share every cluster, so the active
 * entries must lose their copied flags: the snapshot keeps the tables as
 * they were (only the active image's flags mean anything) and the active
 * image gets copies with the flags right.  Apply and delete fix the flags
 * the same way, by copying the active tables whose flags change.
 *
 * Cost: the references are counted from scratch by walking every L1 and
 * L2 table, as check does, and the refcount structure is rewritten whole;
 * the old metadata becomes free space (holes in the file), reused by
 * later writes.
 *
 * Order (qcow2.h): above check.c, which counts the references; calls
 * check, open, snapshot, cluster, refcount-new, refcount-math, writeback,
 * cache, header. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"
#include "refcount-math.h"
#include "refcount-new.h"
#include "snapshot-shadow.h"
/* Is cluster k free in the old image (refcount 0, no metadata there:
 * nothing it uses can point at it) and unused by the new one so far? */
static int free_in_both(struct qcow2_shadow *x, uint64_t k, bool *free_)
{
    struct qcow2_state *s = x->s;
    uint64_t rc;
    int r = qcow2_get_refcount_locked(s, k, &rc);

    *free_ = r == 0 && rc == 0 && (k >= x->n_counts || x->counts[k] == 0) &&
             !qcow2_overlaps_metadata_locked(s, k << s->cluster_bits, s->cluster_size);
    return r;
}

/* Where n clusters of new metadata go: once the new state is counted
 * (the L2 copies, the bulk of it), the first free run inside the old file
 * (the holes earlier changes left), else the end.  Runs are taken in file
 * order, so none is taken twice.  Before the count, always the end: a
 * refused change (refcount overflow) then leaves the file as it was once
 * truncated back. */
static int take_clusters(struct qcow2_shadow *x, uint64_t n, uint64_t *offset)
{
    struct qcow2_state *s = x->s;
    uint64_t end = ROUND_UP(x->old_len, s->cluster_size) >> s->cluster_bits;
    uint64_t k = MAX(x->hole_hint, 1), run = 0;
    bool f;

    while (x->use_holes && run < n && k + n <= end) {
        int r = free_in_both(x, k + run, &f);
        if (r < 0) {
            return r;
        }
        if (f) {
            run++;
        } else {
            k += run + 1;
            run = 0;
        }
    }
    if (x->use_holes && run == n) {
        x->hole_hint = k + n;
        *offset = k << s->cluster_bits;
        return 0;
    }
    if (x->use_holes) {
        x->hole_hint = k; /* no run of n starts before k */
    }
    *offset = x->next;
    x->next += n << s->cluster_bits;
    return 0;
}

/* Place bytes of new metadata in whole clusters, zero-padded. */
int qcow2_shadow_put(struct qcow2_shadow *x, const void *buf, uint64_t bytes, uint64_t *offset)
{
    uint64_t cs = x->s->cluster_size, len = ROUND_UP(bytes ? bytes : 1, cs);
    CLEANUP_FREE uint8_t *pad = calloc(1, len);
    int r;

    if (!pad) {
        return err_set(ENOMEM, "qcow2: %" PRIu64 " bytes of metadata", len);
    }
    memcpy(pad, buf, bytes);
    r = take_clusters(x, len / cs, offset);
    return r < 0 ? r : blk_pwrite(x->s->file, *offset, pad, len, 0);
}

static int write_l1(struct qcow2_shadow *x, const uint64_t *l1, uint32_t n, uint64_t offset)
{
    CLEANUP_FREE uint64_t *be = calloc(n ? n : 1, 8);

    if (!be) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", n);
    }
    for (uint32_t i = 0; i < n; i++) {
        be[i] = htobe64(l1[i]);
    }
    return blk_pwrite(x->s->file, offset, be, (uint64_t)n * 8, 0);
}

int qcow2_shadow_put_l1(struct qcow2_shadow *x, const uint64_t *l1, uint32_t n, uint64_t *offset)
{
    uint64_t bytes = ROUND_UP((uint64_t)(n ? n : 1) * 8, x->s->cluster_size);
    CLEANUP_FREE uint8_t *zero = calloc(1, bytes);
    int r;

    if (!zero) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", n);
    }
    r = qcow2_shadow_put(x, zero, bytes, offset);
    return r < 0 ? r : write_l1(x, l1, n, *offset);
}

/* ---- counting the new state ---- */

static int grow_counts(struct qcow2_shadow *x, uint64_t n)
{
    if (n <= x->n_counts) {
        return 0;
    }
    uint32_t *c = realloc(x->counts, n * sizeof *c);
    if (!c) {
        return err_set(ENOMEM, "qcow2: reference counts of %" PRIu64 " clusters", n);
    }
    memset(c + x->n_counts, 0, (n - x->n_counts) * sizeof *c);
    x->counts = c;
    x->n_counts = n;
    return 0;
}

static uint32_t count_of(const struct qcow2_shadow *x, uint64_t offset)
{
    uint64_t k = offset >> x->s->cluster_bits;

    return k < x->n_counts ? x->counts[k] : 0;
}

/* Count the references of the new state with check's walk, the state
 * described to it through s for the time of the walk. */
static int count_new_state(struct qcow2_shadow *x)
{
    struct qcow2_state *s = x->s;
    struct qcow2_header saved = s->hdr;
    struct qcow2_snapshot *saved_snaps = s->snapshots;
    uint32_t saved_n = s->n_snapshots;
    uint64_t saved_bytes = s->snapshots_bytes, problems = 0;
    int r;

    s->hdr.l1_table_offset = x->l1_offset;
    s->hdr.l1_size = x->l1_size;
    s->hdr.nb_snapshots = x->n_snaps;
    s->hdr.snapshots_offset = x->table_offset;
    s->snapshots = x->snaps;
    s->n_snapshots = x->n_snaps;
    s->snapshots_bytes = x->table_bytes;
    r = qcow2_count_references_locked(s, x->next >> s->cluster_bits, &x->counts, &problems);
    s->hdr = saved;
    s->snapshots = saved_snaps;
    s->n_snapshots = saved_n;
    s->snapshots_bytes = saved_bytes;
    if (r < 0) {
        return r;
    }
    x->n_counts = x->next >> s->cluster_bits;
    if (problems) {
        return err_setx(EUCLEAN,
                        "qcow2: %s has inconsistent metadata (see 'diskimg check'); not "
                        "changing its snapshots",
                        ESC_NAME(s->node));
    }
    for (uint64_t k = 0; k < x->n_counts; k++) {
        if (x->counts[k] > s->refcount_max) {
            return err_setx(ERANGE,
                            "qcow2: cluster 0x%" PRIx64 " would be used %" PRIu32
                            " times, more than refcount_bits=%" PRIu32 " can count",
                            k << s->cluster_bits, x->counts[k], s->refcount_bits);
        }
    }
    return 0;
}

/* ---- the copied flags of the active image ---- */

/* The copied flag an L2 entry must have: set exactly when its cluster
 * is used once (never for compressed clusters). */
static uint64_t entry_with_flag(const struct qcow2_shadow *x, uint64_t e)
{
    uint64_t host = e & L2E_OFFSET_MASK;

    if (e & QCOW_OFLAG_COMPRESSED) {
        return e & ~QCOW_OFLAG_COPIED;
    }
    if (!host) {
        return e; /* no cluster: qemu-img check does not look */
    }
    e &= ~QCOW_OFLAG_COPIED;
    return count_of(x, host) == 1 ? e | QCOW_OFLAG_COPIED : e;
}

/* Make entry i of the new active L1 point at an L2 table whose flags are
 * right: the table itself when they are, else a corrected copy (the
 * table is in use by the old image, or by a snapshot).  The copy uses
 * the same clusters, so only the two tables' counts change. */
static int fix_l2_flags(struct qcow2_shadow *x, uint32_t i)
{
    struct qcow2_state *s = x->s;
    uint64_t cs = s->cluster_size, l2 = x->l1[i] & L1E_OFFSET_MASK, copy = 0;
    unsigned entries = 1u << s->l2_bits;
    CLEANUP_FREE uint64_t *t = malloc(cs);
    bool changed = false;
    int r;

    if (!t) {
        return err_set(ENOMEM, "qcow2: L2 table");
    }
    r = blk_pread(s->file, l2, t, cs);
    if (r < 0) {
        return r;
    }
    for (unsigned j = 0; j < entries; j++) {
        uint64_t bitmap, e = qcow2_l2_get(s, t, j, &bitmap), want = entry_with_flag(x, e);
        if (want != e) {
            qcow2_l2_set(s, t, j, want, bitmap);
            changed = true;
        }
    }
    if (changed) {
        r = qcow2_shadow_put(x, t, cs, &copy);
        if (r == 0) {
            r = grow_counts(x, x->next >> s->cluster_bits);
        }
        if (r < 0) {
            return r;
        }
        x->counts[l2 >> s->cluster_bits]--;
        x->counts[copy >> s->cluster_bits] = 1;
        l2 = copy;
    }
    x->l1[i] = l2 | (count_of(x, l2) == 1 ? QCOW_OFLAG_COPIED : 0);
    return 0;
}

static int fix_active_flags(struct qcow2_shadow *x)
{
    int r = 0;

    for (uint32_t i = 0; r == 0 && i < x->l1_size; i++) {
        if (x->l1[i] & L1E_OFFSET_MASK) {
            r = fix_l2_flags(x, i);
        }
    }
    /* The final entries, over the tentative ones (a cluster of ours). */
    return r < 0 ? r : write_l1(x, x->l1, x->l1_size, x->l1_offset);
}

/* ---- the refcount structure ---- */

/* A refcount table and blocks at the end, counting the new state and
 * themselves (refcount-new.c). */
static int put_refcounts(struct qcow2_shadow *x)
{
    struct qcow2_state *s = x->s;
    struct qcow2_refcounts counts = {.count = x->counts, .n = x->n_counts};
    struct qcow2_refcount_area area;
    uint64_t start = x->next >> s->cluster_bits;
    int r = qcow2_write_new_refcounts_locked(s, &counts, start, "qcow2", NULL, &area);

    x->counts = counts.count; /* grown, maybe moved, even on failure */
    x->n_counts = counts.n;
    if (r < 0) {
        return r;
    }
    x->reftable_offset = start << s->cluster_bits;
    x->reftable_clusters = (uint32_t)area.table_clusters;
    x->next = area.end << s->cluster_bits;
    return 0;
}

/* ---- the switch ---- */

/* Bytes 24..71 of the header (size, L1, refcount and snapshot tables), in
 * one write: the moment the new state replaces the old.  x->switched once
 * that write is issued, also if it fails. */
static int switch_header(struct qcow2_shadow *x)
{
    struct qcow2_state *s = x->s;
    struct qcow2_header h = s->hdr;

    h.size = x->size;
    h.l1_size = x->l1_size;
    h.l1_table_offset = x->l1_offset;
    h.refcount_table_offset = x->reftable_offset;
    h.refcount_table_clusters = x->reftable_clusters;
    h.nb_snapshots = x->n_snaps;
    h.snapshots_offset = x->table_offset;
    return qcow2_switch_header_locked(s, &h, 24, 48, &x->switched);
}

/* What the old image used and the new one does not is free space now:
 * give it back to the file system, as qemu discards a deleted
 * snapshot's clusters.  Advisory: a failure changes nothing. */
static void punch_freed(struct qcow2_shadow *x)
{
    struct qcow2_state *s = x->s;
    uint64_t end = MIN(ROUND_UP(x->old_len, s->cluster_size) >> s->cluster_bits, x->n_counts);

    for (uint64_t k = 1; k < end;) {
        uint64_t run = 0;
        while (k + run < end && x->counts[k + run] == 0) {
            run++;
        }
        if (run) {
            (void)blk_discard(s->file, k << s->cluster_bits, run << s->cluster_bits, 0);
        }
        k += run + 1;
    }
    err_clear();
}

/* The in-memory state follows the file: reload what moved. */
static int reload_locked(struct qcow2_shadow *x, const uint64_t *old_l1, uint32_t old_l1_size)
{
    struct qcow2_state *s = x->s;
    int r;

    qcow2_forget_tables_locked(s, old_l1, old_l1_size);
    s->hdr.size = x->size;
    s->hdr.l1_size = x->l1_size;
    s->hdr.l1_table_offset = x->l1_offset;
    s->hdr.refcount_table_offset = x->reftable_offset;
    s->hdr.refcount_table_clusters = x->reftable_clusters;
    s->hdr.nb_snapshots = x->n_snaps;
    s->hdr.snapshots_offset = x->table_offset;
    s->l1_offset = x->l1_offset;
    s->l1_size = x->l1_size;
    free(s->reftable);
    s->reftable = NULL;
    qcow2_free_snapshots(s);
    s->file_end = MAX(s->file_end, x->next);
    s->free_hint = 1;
    s->compressed_next = 0;
    r = qcow2_load_l1(s);
    if (r == 0) {
        r = qcow2_load_reftable(s);
    }
    if (r == 0) {
        r = qcow2_read_snapshots(s);
    }
    return r < 0 ? r : qcow2_build_metadata_map_locked(s);
}

/* Write the new state described by x (its L1 entries tentative), count
 * it, fix the active flags, write the refcounts, switch. */
int qcow2_shadow_commit_locked(struct qcow2_shadow *x)
{
    struct qcow2_state *s = x->s;
    int r = qcow2_shadow_put_l1(x, x->l1, x->l1_size, &x->l1_offset);

    if (r == 0) {
        r = count_new_state(x);
    }
    if (r == 0) {
        x->use_holes = true;
        r = fix_active_flags(x);
    }
    if (r == 0) {
        r = put_refcounts(x);
    }
    if (r < 0) {
        return r;
    }
    r = switch_header(x);
    if (r < 0 && !x->switched) {
        return r; /* the header is untouched: undo as before a switch */
    }
    if (r < 0) {
        /* The header may or may not name the new state now. */
        return qcow2_mark_corrupt_locked(s, "switching to the new snapshot state failed: %s",
                                         err_msg_or(r));
    }
    punch_freed(x);
    CLEANUP_FREE uint64_t *old_l1 = s->l1;
    uint32_t old_l1_size = s->l1_size;
    s->l1 = NULL;
    return reload_locked(x, old_l1, old_l1_size);
}

/* A failure before the switch: nothing points at what was written, so
 * the file goes back to its length (the image is as it was). */
void qcow2_shadow_undo_locked(struct qcow2_shadow *x, int r)
{
    qcow2_truncate_back_locked(x->s, x->old_len, r);
}

/* ---- the snapshot table ---- */
