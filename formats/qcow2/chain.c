/* formats/qcow2/chain.c: the metadata side of rebase and commit:
 * recording another backing file in the header, dropping every cluster
 * so that the image reads through to its backing file (commit's
 * make_empty when the image cannot be rebuilt, empty.c), and zeroing what
 * growing the image (commit's base) would show of its backing file.  The data
 * that keeps the guest view (rebase's differences, commit's copy into the
 * base) is moved by block/rebase.c and block/commit.c before these run.
 *
 * Order (qcow2.h): above alloc.c; calls writeback, cluster, bitmap. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "formats/named-file.h"
#include "qcow2.h"

/* A copy of s, NULL for NULL; false when out of memory. */
static bool dup_or_null(const char *s, char **out)
{
    *out = s ? strdup(s) : NULL;
    return !s || *out;
}

int qcow2_change_backing(struct blk_node *n, const char *file, const char *format)
{
    struct qcow2_state *s = n->opaque;
    char *new_file, *new_format;
    int r;

    if (file && strlen(file) > QCOW2_MAX_BACKING_NAME) {
        return err_setx(EINVAL, "qcow2: a backing file name holds at most %d bytes",
                        QCOW2_MAX_BACKING_NAME);
    }
    if (file && fmt_names_rbd(file)) {
        /* as create: record only an rbd name the image can open again */
        CLEANUP_FREE char *plain = NULL;
        r = fmt_named_path("qcow2", "backing file", n->filename, file, FMT_NAME_MAY_RBD, &plain);
        if (r < 0) {
            return r;
        }
    }
    if (!dup_or_null(file, &new_file) || !dup_or_null(file ? format : NULL, &new_format)) {
        free(new_file);
        return err_set(ENOMEM, "qcow2: backing file name");
    }
    pthread_mutex_lock(&s->lock);
    r = qcow2_check_writable_locked(s);
    /* The data that keeps the guest view is durable before the header
     * names the new backing file: a crash leaves the old chain or the
     * new one, both reading the same. */
    if (r == 0) {
        r = qcow2_flush_caches_locked(s);
    }
    if (r == 0) {
        r = blk_flush(s->file);
    }
    if (r == 0) {
        char *old_file = s->hdr.backing_file, *old_format = s->hdr.backing_format;
        s->hdr.backing_file = new_file;
        s->hdr.backing_format = new_format;
        r = qcow2_commit_header_locked(s);
        if (r < 0) {
            s->hdr.backing_file = old_file;
            s->hdr.backing_format = old_format;
        } else {
            new_file = old_file; /* freed below */
            new_format = old_format;
        }
    }
    pthread_mutex_unlock(&s->lock);
    free(new_file);
    free(new_format);
    return r;
}

/* Set every L2 entry of the slice that maps guest (slice-aligned) to 0,
 * "unallocated: read the backing file", freeing the host clusters once
 * the slice is durable.  A table shared with a snapshot is copied first. */
static int empty_slice_locked(struct qcow2_state *s, uint64_t guest, unsigned entries)
{
    uint64_t *slice, bitmap;
    unsigned idx;
    bool any = false;
    int r = qcow2_get_l2_slice_locked(s, guest, false, &slice, &idx);

    if (r == -ENOENT) {
        return 0; /* no L2 table: nothing allocated */
    }
    if (r < 0) {
        return r;
    }
    for (unsigned i = 0; i < entries && !any; i++) {
        any = qcow2_l2_get(s, slice, idx + i, &bitmap) || bitmap;
    }
    qcow2_cache_put_locked(s->l2_cache, slice);
    if (!any) {
        return 0;
    }
    r = qcow2_get_l2_slice_locked(s, guest, true, &slice, &idx);
    if (r < 0) {
        return r;
    }
    for (unsigned i = 0; i < entries && r == 0; i++) {
        uint64_t old = qcow2_l2_get(s, slice, idx + i, &bitmap);
        if (!old && !bitmap) {
            continue;
        }
        qcow2_l2_set(s, slice, idx + i, 0, 0);
        r = qcow2_free_l2_entry_later_locked(s, old);
    }
    qcow2_cache_mark_dirty_locked(s->l2_cache, slice);
    qcow2_cache_put_locked(s->l2_cache, slice);
    return r;
}

/* Slices emptied between two flushes: bounds the queue of pending frees. */
#define SLICES_PER_FLUSH 256

int qcow2_drop_clusters_locked(struct qcow2_state *s)
{
    uint64_t size = qcow2_virtual_size(s);
    uint64_t span = (uint64_t)s->l2_slice_entries << s->cluster_bits;
    unsigned since_flush = 0;
    int r = 0;

    for (uint64_t guest = 0; r == 0 && guest < size; guest += span) {
        uint64_t clusters = (MIN(span, size - guest) + s->cluster_size - 1) >> s->cluster_bits;
        r = empty_slice_locked(s, guest, (unsigned)clusters);
        if (r == 0 && ++since_flush == SLICES_PER_FLUSH) {
            since_flush = 0;
            r = qcow2_flush_caches_locked(s);
        }
    }
    return r < 0 ? r : qcow2_flush_caches_locked(s);
}

/* Make the slice's entries for guest [from, to) (within one slice) read
 * as zeroes; entries that hold a host cluster are left alone. */
static int zero_tail_slice_locked(struct qcow2_state *s, uint64_t from, uint64_t to)
{
    uint64_t *slice, bitmap;
    unsigned idx;
    int r = qcow2_get_l2_slice_locked(s, from, true, &slice, &idx);

    if (r < 0) {
        return r;
    }
    for (uint64_t g = from; g < to; g += s->cluster_size, idx++) {
        uint64_t old = qcow2_l2_get(s, slice, idx, &bitmap);
        if (old & (L2E_OFFSET_MASK | QCOW_OFLAG_COMPRESSED)) {
            continue;
        }
        if (s->extended_l2) {
            qcow2_l2_set(s, slice, idx, 0, QCOW_ZERO_MASK);
        } else {
            qcow2_l2_set(s, slice, idx, QCOW_OFLAG_ZERO, 0);
        }
    }
    qcow2_cache_mark_dirty_locked(s->l2_cache, slice);
    qcow2_cache_put_locked(s->l2_cache, slice);
    return 0;
}

int qcow2_zero_grown_locked(struct qcow2_state *s, uint64_t old, uint64_t new)
{
    int64_t below = s->backing ? blk_get_length(s->backing) : 0;
    uint64_t span = (uint64_t)s->l2_slice_entries << s->cluster_bits;
    uint64_t end;
    int r = 0;

    if (below <= (int64_t)old || s->hdr.version < 3 || old % s->cluster_size) {
        return 0; /* nothing shows through, or the caller zeroes afterwards */
    }
    end = ROUND_UP(MIN(new, (uint64_t)below), s->cluster_size);
    for (uint64_t g = old; r == 0 && g < end;) {
        uint64_t to = MIN(ROUND_DOWN(g, span) + span, end);
        r = zero_tail_slice_locked(s, g, to);
        g = to;
    }
    if (r == 0) {
        r = qcow2_flush_caches_locked(s);
    }
    return r < 0 ? r : blk_flush(s->file);
}
