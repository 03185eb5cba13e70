/* formats/qcow2/snapshot-write.c: creating, applying and deleting internal
 * snapshots (qemu-img snapshot -c, -a, -d).  The table is read at open by
 * snapshot.c; this file changes it.
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
 * check, open, snapshot, cluster, refcount-new, refcount-math, writeback, cache,
 * header. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"
#include "refcount-math.h"
#include "refcount-new.h"

#define SN_FIXED 40
#define SN_EXTRA 24     /* vm_state_size_large, disk_size, icount: what qemu writes */
#define SN_MAX_NAME 255 /* qemu-img keeps the first 255 bytes of a name */

/* The state being built, and where its new clusters go. */
struct sn_ctx {
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
    bool switched;  /* the header points at the new state */

    uint32_t *counts; /* references per cluster in the new state */
    uint64_t n_counts;
    uint64_t reftable_offset;
    uint32_t reftable_clusters;
};

/* ---- writing new clusters ---- */

/* Is cluster k free in the old image (refcount 0, no metadata there:
 * nothing it uses can point at it) and unused by the new one so far? */
static int free_in_both(struct sn_ctx *x, uint64_t k, bool *free_)
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
static int take_clusters(struct sn_ctx *x, uint64_t n, uint64_t *offset)
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
static int put_new(struct sn_ctx *x, const void *buf, uint64_t bytes, uint64_t *offset)
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

static int write_l1(struct sn_ctx *x, const uint64_t *l1, uint32_t n, uint64_t offset)
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

static int put_new_l1(struct sn_ctx *x, const uint64_t *l1, uint32_t n, uint64_t *offset)
{
    uint64_t bytes = ROUND_UP((uint64_t)(n ? n : 1) * 8, x->s->cluster_size);
    CLEANUP_FREE uint8_t *zero = calloc(1, bytes);
    int r;

    if (!zero) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", n);
    }
    r = put_new(x, zero, bytes, offset);
    return r < 0 ? r : write_l1(x, l1, n, *offset);
}

/* ---- counting the new state ---- */

static int grow_counts(struct sn_ctx *x, uint64_t n)
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

static uint32_t count_of(const struct sn_ctx *x, uint64_t offset)
{
    uint64_t k = offset >> x->s->cluster_bits;

    return k < x->n_counts ? x->counts[k] : 0;
}

/* Count the references of the new state with check's walk, the state
 * described to it through s for the time of the walk. */
static int count_new_state(struct sn_ctx *x)
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
                        s->node->filename);
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
static uint64_t entry_with_flag(const struct sn_ctx *x, uint64_t e)
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
static int fix_l2_flags(struct sn_ctx *x, uint32_t i)
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
        r = put_new(x, t, cs, &copy);
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

static int fix_active_flags(struct sn_ctx *x)
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
static int put_refcounts(struct sn_ctx *x)
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
 * one write: the moment the new state replaces the old. */
static int switch_header(struct sn_ctx *x)
{
    struct qcow2_state *s = x->s;
    struct qcow2_header h = s->hdr;
    CLEANUP_FREE uint8_t *buf = malloc(s->cluster_size);
    int r;

    if (!buf) {
        return err_set(ENOMEM, "qcow2: header");
    }
    h.size = x->size;
    h.l1_size = x->l1_size;
    h.l1_table_offset = x->l1_offset;
    h.refcount_table_offset = x->reftable_offset;
    h.refcount_table_clusters = x->reftable_clusters;
    h.nb_snapshots = x->n_snaps;
    h.snapshots_offset = x->table_offset;
    r = qcow2_header_serialize(&h, buf, s->cluster_size);
    if (r < 0) {
        return err_setx(-r, "qcow2: the header does not fit in cluster 0");
    }
    r = blk_flush(s->file); /* everything new is durable first */
    if (r == 0) {
        r = blk_pwrite(s->file, 24, buf + 24, 48, 0);
    }
    return r < 0 ? r : blk_flush(s->file);
}

/* What the old image used and the new one does not is free space now:
 * give it back to the file system, as qemu discards a deleted
 * snapshot's clusters.  Advisory: a failure changes nothing. */
static void punch_freed(struct sn_ctx *x)
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
static int reload_locked(struct sn_ctx *x, const uint64_t *old_l1, uint32_t old_l1_size)
{
    struct qcow2_state *s = x->s;
    int r;

    for (uint32_t i = 0; i < old_l1_size; i++) {
        if (old_l1[i] & L1E_OFFSET_MASK) {
            qcow2_cache_discard_locked(s->l2_cache, old_l1[i] & L1E_OFFSET_MASK, s->cluster_size);
        }
    }
    for (uint32_t i = 0; i < s->reftable_entries; i++) {
        if (s->reftable[i]) {
            qcow2_cache_discard_locked(s->rb_cache, s->reftable[i], s->cluster_size);
        }
    }
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
static int commit_locked(struct sn_ctx *x)
{
    struct qcow2_state *s = x->s;
    int r = put_new_l1(x, x->l1, x->l1_size, &x->l1_offset);

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
    x->switched = true; /* or maybe: the header may have been written */
    if (r < 0) {
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
static void undo_locked(struct sn_ctx *x, int r)
{
    struct qcow2_state *s = x->s;
    CLEANUP_FREE char *msg = strdup(err_msg());

    if (blk_truncate(s->file, x->old_len) == 0) {
        s->file_end = MIN(s->file_end, ROUND_UP(x->old_len, s->cluster_size));
    }
    if (msg) {
        err_setx(-r, "%s", msg);
    }
}

/* ---- the snapshot table ---- */

/* The on-disk table as it is, entry by entry (its bounds were checked at
 * open): entries are kept byte for byte, unknown extra data included. */
static int read_table(struct qcow2_state *s, uint8_t **buf, uint64_t **starts)
{
    uint64_t bytes = s->snapshots_bytes, pos = 0;

    *buf = malloc(bytes ? bytes : 1);
    *starts = malloc(((size_t)s->n_snapshots + 1) * sizeof **starts);
    if (!*buf || !*starts) {
        return err_set(ENOMEM, "qcow2: snapshot table");
    }
    int r = bytes ? blk_pread(s->file, s->hdr.snapshots_offset, *buf, bytes) : 0;
    for (uint32_t i = 0; r == 0 && i < s->n_snapshots; i++) {
        const uint8_t *e = *buf + pos;
        if (pos + SN_FIXED > bytes) {
            return err_setx(EINVAL, "qcow2: the snapshot table changed under us");
        }
        (*starts)[i] = pos;
        pos += ROUND_UP(
            SN_FIXED + (uint64_t)qcow2_rd32(e + 36) + qcow2_rd16(e + 12) + qcow2_rd16(e + 14), 8);
    }
    (*starts)[s->n_snapshots] = pos;
    return r < 0 ? r : (pos == bytes ? 0 : err_setx(EINVAL, "qcow2: the snapshot table changed"));
}

/* The table without entry 'skip' (-1: none), plus 'add' (NULL: none). */
static int put_table(struct sn_ctx *x, int64_t skip, const uint8_t *add, uint64_t add_len)
{
    struct qcow2_state *s = x->s;
    CLEANUP_FREE uint8_t *old = NULL;
    CLEANUP_FREE uint64_t *starts = NULL;
    int r = read_table(s, &old, &starts);

    if (r < 0) {
        return r;
    }
    CLEANUP_FREE uint8_t *t = malloc(s->snapshots_bytes + add_len + 1);
    uint64_t len = 0;
    if (!t) {
        return err_set(ENOMEM, "qcow2: snapshot table");
    }
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        if ((int64_t)i != skip) {
            memcpy(t + len, old + starts[i], starts[i + 1] - starts[i]);
            len += starts[i + 1] - starts[i];
        }
    }
    if (add) {
        memcpy(t + len, add, add_len);
        len += add_len;
    }
    if (len > QCOW2_MAX_SNAPSHOT_TABLE_BYTES) {
        return err_setx(EFBIG, "qcow2: the snapshot table would exceed 64 MiB");
    }
    x->table_bytes = len;
    x->table_offset = 0;
    return len ? put_new(x, t, len, &x->table_offset) : 0;
}

/* One table entry as qemu-img writes it: no VM state, VM clock 0,
 * icount 0, the current time with microseconds. */
static uint64_t encode_entry(uint8_t *e, const struct qcow2_snapshot *sn)
{
    size_t id_len = strlen(sn->id), name_len = strlen(sn->name);
    uint64_t len = ROUND_UP(SN_FIXED + SN_EXTRA + id_len + name_len, 8);

    memset(e, 0, len);
    qcow2_wr64(e, sn->l1_table_offset);
    qcow2_wr32(e + 8, sn->l1_size);
    e[12] = (uint8_t)(id_len >> 8);
    e[13] = (uint8_t)id_len;
    e[14] = (uint8_t)(name_len >> 8);
    e[15] = (uint8_t)name_len;
    qcow2_wr32(e + 16, sn->date_sec);
    qcow2_wr32(e + 20, sn->date_nsec);
    qcow2_wr64(e + 24, sn->vm_clock_nsec);
    qcow2_wr32(e + 32, (uint32_t)sn->vm_state_size);
    qcow2_wr32(e + 36, SN_EXTRA);
    qcow2_wr64(e + SN_FIXED, sn->vm_state_size);
    qcow2_wr64(e + SN_FIXED + 8, sn->disk_size);
    qcow2_wr64(e + SN_FIXED + 16, (uint64_t)sn->icount);
    memcpy(e + SN_FIXED + SN_EXTRA, sn->id, id_len);
    memcpy(e + SN_FIXED + SN_EXTRA + id_len, sn->name, name_len);
    return len;
}

/* ---- the three operations ---- */

static int find_by_name(const struct qcow2_state *s, const char *name)
{
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        if (strcmp(s->snapshots[i].name, name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* qemu's order for -a: an id first, then a name. */
static int find_by_id_or_name(const struct qcow2_state *s, const char *name)
{
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        if (strcmp(s->snapshots[i].id, name) == 0) {
            return (int)i;
        }
    }
    return find_by_name(s, name);
}

static int copy_active_l1(struct sn_ctx *x, uint32_t size)
{
    struct qcow2_state *s = x->s;

    x->l1 = calloc(size ? size : 1, 8);
    if (!x->l1) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", size);
    }
    for (uint32_t i = 0; i < s->l1_size && i < size; i++) {
        x->l1[i] = s->l1[i] & ~QCOW_OFLAG_COPIED;
    }
    x->l1_size = size;
    return 0;
}

static int snapshot_create_locked(struct sn_ctx *x, const char *name)
{
    struct qcow2_state *s = x->s;
    char id[24], trimmed[SN_MAX_NAME + 1];
    unsigned long max_id = 0;
    struct timespec now;
    int r;

    if (s->n_snapshots >= QCOW2_MAX_SNAPSHOTS) {
        return err_setx(EFBIG, "qcow2: %s already has %d snapshots", s->node->filename,
                        QCOW2_MAX_SNAPSHOTS);
    }
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        unsigned long v = strtoul(s->snapshots[i].id, NULL, 10);
        max_id = MAX(max_id, v);
    }
    snprintf(id, sizeof id, "%lu", max_id + 1);
    snprintf(trimmed, sizeof trimmed, "%s", name);
    clock_gettime(CLOCK_REALTIME, &now);

    /* The snapshot's L1 table: the active one, pointing at the tables as
     * they are. */
    r = copy_active_l1(x, s->l1_size);
    struct qcow2_snapshot sn = {
        .l1_size = s->l1_size,
        .id = id,
        .name = trimmed,
        .date_sec = (uint32_t)now.tv_sec,
        .date_nsec = (uint32_t)(now.tv_nsec / 1000 * 1000),
        .disk_size = s->hdr.size,
        .icount = 0,
    };
    if (r == 0) {
        r = put_new_l1(x, x->l1, x->l1_size, &sn.l1_table_offset);
    }
    if (r < 0) {
        return r;
    }
    uint8_t entry[SN_FIXED + SN_EXTRA + sizeof id + sizeof trimmed + 8];
    uint64_t len = encode_entry(entry, &sn);
    r = put_table(x, -1, entry, len);
    if (r < 0) {
        return r;
    }
    x->snaps = malloc(((size_t)s->n_snapshots + 1) * sizeof *x->snaps);
    x->own_snaps = true;
    if (!x->snaps) {
        return err_set(ENOMEM, "qcow2: snapshot list");
    }
    if (s->n_snapshots) {
        memcpy(x->snaps, s->snapshots, s->n_snapshots * sizeof *x->snaps);
    }
    x->snaps[s->n_snapshots] = sn;
    x->n_snaps = s->n_snapshots + 1;
    x->size = s->hdr.size;
    return commit_locked(x);
}

/* The snapshot's L1 table, checked as open checks the active one. */
static int read_snapshot_l1(struct sn_ctx *x, const struct qcow2_snapshot *sn)
{
    struct qcow2_state *s = x->s;
    uint32_t size = MAX(s->l1_size, sn->l1_size);
    uint64_t dup;
    int r;

    x->l1 = calloc(size ? size : 1, 8);
    if (!x->l1) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", size);
    }
    x->l1_size = size;
    r = sn->l1_size ? blk_pread(s->file, sn->l1_table_offset, x->l1, (uint64_t)sn->l1_size * 8) : 0;
    for (uint32_t i = 0; r == 0 && i < sn->l1_size; i++) {
        uint64_t e = be64toh(x->l1[i]);
        if ((e & L1E_RESERVED_MASK) || (e & L1E_OFFSET_MASK & (s->cluster_size - 1))) {
            return err_setx(EINVAL, "qcow2: snapshot '%s': L1 entry %" PRIu32 " is invalid", sn->id,
                            i);
        }
        x->l1[i] = e & ~QCOW_OFLAG_COPIED;
    }
    if (r == 0) {
        r = qcow2_l1_duplicate(x->l1, x->l1_size, false, &dup);
    }
    if (r > 0) {
        return err_setx(EINVAL, "qcow2: snapshot '%s' names the L2 table at 0x%" PRIx64 " twice",
                        sn->id, dup);
    }
    return r;
}

static int snapshot_apply_locked(struct sn_ctx *x, const char *name)
{
    struct qcow2_state *s = x->s;
    int i = find_by_id_or_name(s, name);
    int r;

    if (i < 0) {
        return err_setx(ENOENT, "Failed to load snapshot: No such file or directory");
    }
    const struct qcow2_snapshot *sn = &s->snapshots[i];
    if (sn->disk_size != s->hdr.size && s->n_bitmaps) {
        return err_setx(ENOTSUP,
                        "qcow2: %s has persistent bitmaps, and the snapshot's size differs: "
                        "remove the bitmaps first",
                        s->node->filename);
    }
    r = read_snapshot_l1(x, sn);
    if (r < 0) {
        return r;
    }
    x->size = sn->disk_size;
    x->snaps = s->snapshots; /* the table stays as it is */
    x->n_snaps = s->n_snapshots;
    x->table_offset = s->n_snapshots ? s->hdr.snapshots_offset : 0;
    x->table_bytes = s->snapshots_bytes;
    return commit_locked(x);
}

static int snapshot_delete_locked(struct sn_ctx *x, const char *name)
{
    struct qcow2_state *s = x->s;
    int i = find_by_name(s, name);
    int r;

    if (i < 0) {
        return err_setx(ENOENT, "snapshot not found");
    }
    r = put_table(x, i, NULL, 0);
    if (r == 0) {
        r = copy_active_l1(x, s->l1_size);
    }
    if (r < 0) {
        return r;
    }
    x->snaps = malloc(((size_t)s->n_snapshots + 1) * sizeof *x->snaps);
    x->own_snaps = true;
    if (!x->snaps) {
        return err_set(ENOMEM, "qcow2: snapshot list");
    }
    x->n_snaps = 0;
    for (uint32_t k = 0; k < s->n_snapshots; k++) {
        if ((int)k != i) {
            x->snaps[x->n_snaps++] = s->snapshots[k];
        }
    }
    /* The active flags are recomputed from the new counts. */
    for (uint32_t k = 0; k < x->l1_size; k++) {
        x->l1[k] = s->l1[k];
    }
    x->size = s->hdr.size;
    return commit_locked(x);
}

int qcow2_snapshot_op(struct blk_node *n, enum blk_snapshot_op op, const char *name)
{
    struct qcow2_state *s = n->opaque;
    struct sn_ctx x = {.s = s};
    int64_t len;
    int r;

    if (s->read_only || s->snapshot_view) {
        return err_setx(EPERM, "%s is read-only", n->filename);
    }
    pthread_mutex_lock(&s->lock);
    r = qcow2_check_writable_locked(s);
    if (r == 0) {
        r = qcow2_flush_caches_locked(s); /* the file holds the whole state */
    }
    if (r == 0 && (len = blk_get_length(s->file)) < 0) {
        r = (int)len;
    }
    if (r == 0) {
        x.old_len = (uint64_t)len;
        x.next = ROUND_UP(MAX(x.old_len, s->file_end), s->cluster_size);
        switch (op) {
        case BLK_SNAPSHOT_CREATE:
            r = snapshot_create_locked(&x, name);
            break;
        case BLK_SNAPSHOT_APPLY:
            r = snapshot_apply_locked(&x, name);
            break;
        case BLK_SNAPSHOT_DELETE:
            r = snapshot_delete_locked(&x, name);
            break;
        default:
            r = err_setx(EINVAL, "qcow2: unknown snapshot operation %d", (int)op);
        }
    }
    if (r < 0 && !x.switched && x.next) {
        undo_locked(&x, r);
    }
    pthread_mutex_unlock(&s->lock);
    free(x.l1);
    if (x.own_snaps) {
        free(x.snaps);
    }
    free(x.counts);
    return r;
}
