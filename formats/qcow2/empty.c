/* formats/qcow2/empty.c: commit's make_empty.  After a commit the image
 * holds nothing its backing file lacks, so it is emptied; like qemu, it
 * then also becomes small again.
 *
 * When qemu rebuilds the image (v3, no internal snapshot, no bitmaps, no
 * encryption or external data file, and the header, a one-cluster
 * refcount table, one refcount block and the L1 table all counted by that
 * block), so does this file, to the layout qemu leaves: header, refcount
 * table, refcount block, then the L1 table (all zero), and the file cut
 * to those 3 + L1 clusters.  The L1 table keeps its size; cluster 0 (the
 * backing file name and format, features, every header extension) is
 * kept but for the L1 and refcount table fields.  Otherwise every
 * cluster is dropped as before (chain.c) and the space freed is punched
 * out of the file, as qemu's fallback discards it; the length stays.  A
 * block device or an NBD export is never rebuilt: the tables cannot go
 * past its end.
 *
 * Crash safety: two shadow switches, each one write of header bytes
 * 40..59 (L1 offset, refcount table offset and clusters: one sector),
 * synced before and after.  First an empty L1 table and a refcount
 * structure counting only it and cluster 0 go past the end of the file,
 * where the old image has nothing: a kill before that switch leaves the
 * old image (the chain reads the same, its data is in the base), a kill
 * after it an empty image.  Then the final tables go to clusters 1 to
 * 2 + L1 clusters, which that empty image does not use, and a second switch points at
 * them; only then is the file cut.  So every state a kill -9 can leave is
 * an image qemu-img check finds clean (at worst too long).  qemu instead
 * overwrites its tables in place under the dirty bit and leaves the
 * refcounts to be repaired if it is interrupted.
 *
 * Write errors leave the same states.  A failure before the first
 * switch's header write is issued (appending the tables, the sync before
 * it) cuts the file back: the old image, byte for byte.  Once that write
 * is issued the header may name either tables, so nothing is cut; a
 * failure of the write or of the sync after it marks the image corrupt
 * (the marking rewrites the header from memory: the tables before the
 * switch).  A failure before the second switch's write leaves the empty
 * image at the end, still in use.
 *
 * Not for: dropping clusters slice by slice (chain.c); the data copy
 * (block/commit.c).
 *
 * Order (qcow2.h): above open.c; calls chain, refcount-new, refcount, overlap,
 * cluster, open, writeback, cache, header. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "qcow2.h"
#include "refcount-math.h"
#include "refcount-new.h"

/* Clusters the active L1 table takes. */
static uint64_t l1_clusters(const struct qcow2_state *s)
{
    return ((uint64_t)s->l1_size * 8 + s->cluster_size - 1) >> s->cluster_bits;
}

/* qemu's conditions for rebuilding rather than dropping clusters: nothing
 * but the header and the active tables lives in the file (no snapshots,
 * bitmaps, LUKS header or external data file) and the new tables fit
 * one refcount block.  qemu also wants v3 for its dirty flag; the switches
 * here do not need it, but both tools then leave the same image. */
static bool can_rebuild(const struct qcow2_state *s)
{
    return s->hdr.version >= 3 && s->n_snapshots == 0 && s->hdr.nb_snapshots == 0 &&
           !s->hdr.has_bitmaps_ext && !s->hdr.has_crypto_ext && s->hdr.crypt_method == 0 &&
           !(s->hdr.incompatible_features & QCOW2_INCOMPAT_DATA_FILE) &&
           3 + l1_clusters(s) <= (1ULL << s->refblock_bits);
}

/* A rebuild appends, then cuts the file.  A block device can do neither
 * (its length is the device's), nor can an NBD export: their clusters are
 * dropped in place.  A file whose driver cannot resize at all is a "no"
 * before asking (blk_can_resize): a same-length truncate would pass
 * there.  Otherwise setting the length the file has is the question, and
 * changes nothing.  The errors that answer "no": ENOTSUP (a block device),
 * EPERM (an append-only or immutable file), EINVAL (a file type ftruncate
 * refuses).  Any other (EIO) is returned: taking the other path would end
 * "successfully" with the file as long as before. */
static int file_resizable(struct qcow2_state *s, bool *yes)
{
    int r;

    *yes = false;
    if (!blk_can_resize(s->file)) {
        return 0;
    }
    int64_t len = blk_get_length(s->file);
    if (len < 0) {
        err_clear(); /* the rebuild needs the length; dropping does not */
        return 0;
    }
    r = blk_truncate(s->file, (uint64_t)len);
    if (r == -ENOTSUP || r == -EPERM || r == -EINVAL) {
        err_clear();
        return 0;
    }
    if (r < 0) {
        err_prefix("qcow2: emptying the image: probing whether its file can be resized");
        return r;
    }
    *yes = true;
    return 0;
}

/* Point the header at another L1 table and refcount table: bytes 40..59
 * in one write, everything written before durable first, the switch
 * durable on return.  *switched: that write was issued, so the header may
 * name the new tables, also on failure.  A failure before it changed
 * nothing the header names and is returned as it is. */
static int switch_tables(struct qcow2_state *s, uint64_t l1_offset, uint64_t reftable_offset,
                         uint32_t reftable_clusters, bool *switched)
{
    struct qcow2_header h = s->hdr;

    h.l1_table_offset = l1_offset;
    h.refcount_table_offset = reftable_offset;
    h.refcount_table_clusters = reftable_clusters;
    int r = qcow2_switch_header_locked(s, &h, 40, 20, switched);
    if (r < 0 && *switched) {
        /* The header may or may not name the new tables now. */
        return qcow2_mark_corrupt_locked(s, "emptying: switching tables failed: %s", err_msg_or(r));
    }
    if (r < 0) {
        return r;
    }
    s->hdr.l1_table_offset = l1_offset;
    s->hdr.refcount_table_offset = reftable_offset;
    s->hdr.refcount_table_clusters = reftable_clusters;
    return 0;
}

/* After a switch the in-memory state follows the file: an all-zero L1
 * table at its new place, the new refcount table (taken over), no cached
 * table of the old image, and the metadata map rebuilt. */
static int adopt_tables(struct qcow2_state *s, uint64_t **reftable, uint32_t reftable_entries,
                        uint64_t file_end)
{
    qcow2_forget_tables_locked(s, s->l1, s->l1_size);
    if (s->l1_size) {
        memset(s->l1, 0, (size_t)s->l1_size * 8);
    }
    s->l1_offset = s->hdr.l1_table_offset;
    free(s->reftable);
    s->reftable = steal_ptr(reftable);
    s->reftable_entries = reftable_entries;
    s->reftable_offset = s->hdr.refcount_table_offset;
    s->free_hint = 1;
    s->compressed_next = 0;
    s->file_end = file_end;
    return qcow2_build_metadata_map_locked(s);
}

/* First switch: an empty L1 table at cluster 'start', past everything
 * the image uses, then a refcount structure counting cluster 0, the L1
 * table and itself (refcount-new.c).  *switched as switch_tables sets it;
 * false on a failure before. */
static int empty_at_end(struct qcow2_state *s, uint64_t start, bool *switched)
{
    uint64_t l1c = l1_clusters(s);
    CLEANUP_FREE uint64_t *table = NULL;
    struct qcow2_refcounts c = {.count = calloc(start + l1c, sizeof(uint32_t)), .n = start + l1c};
    struct qcow2_refcount_area area;
    int r;

    if (!c.count) {
        return err_set(ENOMEM, "qcow2: reference counts of %" PRIu64 " clusters", c.n);
    }
    c.count[0] = 1;
    for (uint64_t k = start; k < start + l1c; k++) {
        c.count[k] = 1;
    }
    r = blk_pwrite_zeroes(s->file, start << s->cluster_bits, (uint64_t)s->l1_size * 8, 0);
    if (r == 0) {
        r = qcow2_write_new_refcounts_locked(s, &c, start + l1c, "qcow2", &table, &area);
    }
    free(c.count);
    if (r == 0) {
        r = switch_tables(s, start << s->cluster_bits, (start + l1c) << s->cluster_bits,
                          (uint32_t)area.table_clusters, switched);
    }
    if (r < 0) {
        return r;
    }
    return adopt_tables(s, &table, (uint32_t)(area.table_clusters * s->cluster_size / 8),
                        area.end << s->cluster_bits);
}

/* Second switch: qemu's layout of an empty image.  Refcount table at
 * cluster 1 (one entry), its block at 2 counting clusters 0 .. 2 + L1
 * clusters, the L1 table at 3; clusters the first switch left free. */
static int empty_at_front(struct qcow2_state *s)
{
    uint64_t cs = s->cluster_size, l1c = l1_clusters(s), end = (3 + l1c) * cs;
    CLEANUP_FREE uint8_t *buf = calloc(2 + l1c, cs);
    CLEANUP_FREE uint64_t *table = calloc(cs / 8, 8);
    bool switched; /* a failure leaves the first switch's image either way */
    int r;

    if (!buf || !table) {
        return err_set(ENOMEM, "qcow2: empty image tables");
    }
    table[0] = 2 * cs;
    qcow2_wr64(buf, table[0]);
    for (uint64_t k = 0; k < 3 + l1c; k++) {
        qcow2_refblock_set(buf + cs, s->hdr.refcount_order, k, 1);
    }
    r = blk_pwrite(s->file, cs, buf, (2 + l1c) * cs, 0);
    if (r == 0) {
        r = switch_tables(s, 3 * cs, cs, 1, &switched);
    }
    if (r < 0) {
        return r;
    }
    r = adopt_tables(s, &table, (uint32_t)(cs / 8), end);
    /* Only what the image no longer uses goes. */
    if (r == 0) {
        r = blk_truncate(s->file, end);
    }
    return r < 0 ? r : blk_flush(s->file);
}

static int rebuild_locked(struct qcow2_state *s)
{
    int64_t len = blk_get_length(s->file);
    uint64_t start;
    bool switched = false;
    int r;

    if (len < 0) {
        return (int)len;
    }
    start = ROUND_UP(MAX((uint64_t)len, s->file_end), s->cluster_size) >> s->cluster_bits;
    /* The front tables must not land on the first switch's. */
    start = MAX(start, 3 + l1_clusters(s));
    r = empty_at_end(s, start, &switched);
    if (r < 0 && !switched) {
        /* The header write was not issued, so nothing names what was
         * appended: drop it, the image is as it was. */
        qcow2_truncate_back_locked(s, (uint64_t)len, r);
        return r;
    }
    return r < 0 ? r : empty_at_front(s);
}

/* Give the clusters nothing uses back to the file system (holes), as
 * qemu's discard of the dropped clusters does.  Advisory: a failure to
 * punch changes nothing. */
static int punch_free_locked(struct qcow2_state *s)
{
    uint64_t end = s->file_end >> s->cluster_bits, run = 0, rc;
    int r = 0;

    for (uint64_t k = 1; r == 0 && k <= end; k++) {
        bool free_ = false;
        if (k < end) {
            r = qcow2_get_refcount_locked(s, k, &rc);
            free_ = rc == 0 &&
                    !qcow2_overlaps_metadata_locked(s, k << s->cluster_bits, s->cluster_size);
        }
        if (free_) {
            run++;
        } else if (run) {
            (void)blk_discard(s->file, (k - run) << s->cluster_bits, run << s->cluster_bits, 0);
            run = 0;
        }
    }
    err_clear();
    return r;
}

int qcow2_make_empty(struct blk_node *n)
{
    struct qcow2_state *s = n->opaque;
    bool resizable = false;
    int r;

    /* No bitmap records this, as in qemu: after a commit the image reads
     * as before (its data is in the backing file now). */
    if (s->read_only || s->snapshot_view) {
        return err_setx(EPERM, "%s is read-only", ESC_NAME(n));
    }
    pthread_mutex_lock(&s->lock);
    r = qcow2_check_writable_locked(s);
    if (r == 0 && can_rebuild(s)) {
        r = file_resizable(s, &resizable);
    }
    if (r == 0 && resizable) {
        /* The file holds the whole old state before anything moves. */
        r = qcow2_flush_caches_locked(s);
        if (r == 0 && s->n_pending) {
            /* A free queued for an old cluster would hit the new tables. */
            r = err_setx(EBUSY, "qcow2: %s: frees still pending", ESC_NAME(n));
        }
        if (r == 0) {
            r = rebuild_locked(s);
        }
    } else if (r == 0) {
        r = qcow2_drop_clusters_locked(s);
        if (r == 0) {
            r = blk_flush(s->file);
        }
        if (r == 0) {
            r = punch_free_locked(s);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}
