/* formats/qcow2/writeback.c: the order in which metadata reaches the file,
 * in one place.  What makes a crash leave at worst leaked clusters:
 *
 *  - refcount increments are durable before an L2 entry points at the
 *    cluster: the L2 cache depends on the refcount cache (cache.c flushes
 *    it and syncs the file before writing a dirty slice);
 *  - a new table is written and synced, with its refcount, before anything
 *    points at it (qcow2_write_metadata_locked);
 *  - refcount decrements wait in s->pending until the L2 entries that
 *    stopped using the clusters are durable (qcow2_flush_caches_locked),
 *    and until guest I/O that mapped them has ended (the I/O epochs);
 *  - once something is found wrong, the image is marked corrupt and no
 *    more is written.
 *
 * It sits above cache.c and overlap.c and below refcount.c: applying the
 * pending decrements is refcount.c's job, reached through the hook it sets
 * when it loads the refcount table (s->release_locked).
 *
 * Calls cache.c, overlap.c and header.c (qcow2.h gives the whole order). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/log.h"
#include "qcow2.h"

int qcow2_write_header_locked(struct qcow2_state *s)
{
    CLEANUP_FREE uint8_t *buf = NULL;
    int r;

    if (posix_memalign((void **)&buf, 4096, s->cluster_size) != 0) {
        return err_set(ENOMEM, "qcow2: header");
    }
    r = qcow2_header_serialize(&s->hdr, buf, s->cluster_size);
    if (r < 0) {
        return err_setx(-r, "qcow2: the header and its extensions do not fit in cluster 0");
    }
    return blk_pwrite(s->file, 0, buf, s->cluster_size, 0);
}

int qcow2_commit_header_locked(struct qcow2_state *s)
{
    int r = qcow2_write_header_locked(s);

    return r < 0 ? r : blk_flush(s->file);
}

int qcow2_switch_header_locked(struct qcow2_state *s, const struct qcow2_header *h, unsigned from,
                               unsigned len, bool *issued)
{
    CLEANUP_FREE uint8_t *buf = malloc(s->cluster_size);
    int r;

    *issued = false;
    if (!buf) {
        return err_set(ENOMEM, "qcow2: header");
    }
    r = qcow2_header_serialize(h, buf, s->cluster_size);
    if (r < 0) {
        return err_setx(-r, "qcow2: the header does not fit in cluster 0");
    }
    r = blk_flush(s->file);
    if (r < 0) {
        return r;
    }
    /* From here a failure cannot tell whether the bytes reached the file. */
    *issued = true;
    r = blk_pwrite(s->file, from, buf + from, len, 0);
    return r < 0 ? r : blk_flush(s->file);
}

void qcow2_truncate_back_locked(struct qcow2_state *s, uint64_t old_len, int r)
{
    CLEANUP_FREE char *msg = strdup(err_msg());

    if (blk_truncate(s->file, old_len) == 0) {
        s->file_end = MIN(s->file_end, ROUND_UP(old_len, s->cluster_size));
    }
    if (msg) {
        err_setx(-r, "%s", msg);
    }
}

void qcow2_forget_tables_locked(struct qcow2_state *s, const uint64_t *l1, uint32_t l1_size)
{
    for (uint32_t i = 0; i < l1_size; i++) {
        if (l1[i] & L1E_OFFSET_MASK) {
            qcow2_cache_discard_locked(s->l2_cache, l1[i] & L1E_OFFSET_MASK, s->cluster_size);
        }
    }
    for (uint32_t i = 0; i < s->reftable_entries; i++) {
        if (s->reftable[i]) {
            qcow2_cache_discard_locked(s->rb_cache, s->reftable[i], s->cluster_size);
        }
    }
}

int qcow2_mark_corrupt_locked(struct qcow2_state *s, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!s->corrupt && !s->read_only) {
        /* Stop writing, and tell the next user: qemu-img check -r all. */
        log_error("qcow2: %s: marking the image corrupt: %s", ESC_NAME(s->node), msg);
        s->corrupt = true;
        s->hdr.incompatible_features |= QCOW2_INCOMPAT_CORRUPT;
        (void)qcow2_write_header_locked(s);
        (void)blk_flush(s->file);
    }
    s->corrupt = true;
    return err_setx(EIO, "qcow2: %s: %s", ESC_NAME(s->node), msg);
}

int qcow2_check_writable_locked(const struct qcow2_state *s)
{
    if (s->corrupt) {
        return err_setx(EIO, "qcow2: the image is marked corrupt; not writing");
    }
    return 0;
}

int qcow2_commit_refcounts_locked(struct qcow2_state *s)
{
    int r = qcow2_cache_flush_locked(s->rb_cache);

    return r < 0 ? r : blk_flush(s->file);
}

int qcow2_write_metadata_locked(struct qcow2_state *s, uint64_t off, const void *buf, uint64_t len)
{
    int r = blk_pwrite(s->file, off, buf, len, 0);

    return r < 0 ? r : qcow2_commit_refcounts_locked(s);
}

/* ---- the caches ---- */

/* A dirty table is written only where the metadata map has it. */
static int check_table_write(struct qcow2_state *s, uint64_t off, uint32_t size,
                             enum qcow2_meta_kind kind, const char *what)
{
    if (qcow2_overlaps_metadata_other_locked(s, off, size, kind)) {
        return qcow2_mark_corrupt_locked(
            s, "%s at 0x%" PRIx64 " overlaps other metadata; not writing it", what, off);
    }
    return 0;
}

static int check_l2_write(void *opaque, uint64_t off, uint32_t size)
{
    return check_table_write(opaque, off, size, QCOW2_META_L2, "L2 table");
}

static int check_refblock_write(void *opaque, uint64_t off, uint32_t size)
{
    return check_table_write(opaque, off, size, QCOW2_META_REFBLOCK, "refcount block");
}

void qcow2_writeback_setup_caches(struct qcow2_state *s)
{
    /* Refcounts (and the guest data of allocating writes, by the sync)
     * reach the file before an L2 entry that points at a new cluster. */
    qcow2_cache_set_dependency(s->l2_cache, s->rb_cache);
    qcow2_cache_set_write_hook(s->l2_cache, check_l2_write, s);
    qcow2_cache_set_write_hook(s->rb_cache, check_refblock_write, s);
}

/* ---- guest I/O epochs ---- */

unsigned qcow2_io_enter(struct qcow2_state *s)
{
    unsigned e = atomic_load(&s->io_epoch) & 1;

    atomic_fetch_add(&s->io_count[e], 1);
    return e;
}

void qcow2_io_leave(struct qcow2_state *s, unsigned epoch)
{
    /* The last I/O of an epoch wakes a drain waiting for it.  A drainer
     * counts itself in io_waiters, under the lock, before it looks at the
     * count: either we see it and wake it under the lock (it is then
     * already waiting), or it sees our decrement and does not wait. */
    if (atomic_fetch_sub(&s->io_count[epoch], 1) == 1 && atomic_load(&s->io_waiters) > 0) {
        pthread_mutex_lock(&s->lock);
        pthread_cond_broadcast(&s->io_done);
        pthread_mutex_unlock(&s->lock);
    }
}

void qcow2_io_drain_locked(struct qcow2_state *s)
{
    /* One drain at a time: a second flip while the first waits would
     * send new I/O to the parity the first is waiting on, and let the
     * second finish while I/O of the epoch before is still running. */
    while (s->io_draining) {
        pthread_cond_wait(&s->io_done, &s->lock);
    }
    s->io_draining = true;
    unsigned old = atomic_fetch_add(&s->io_epoch, 1) & 1;

    /* Only I/O that mapped clusters before the flip counts, and it needs
     * no lock to finish: the lock is free for others while we wait. */
    atomic_fetch_add(&s->io_waiters, 1);
    while (atomic_load(&s->io_count[old]) != 0) {
        pthread_cond_wait(&s->io_done, &s->lock);
    }
    atomic_fetch_sub(&s->io_waiters, 1);
    s->io_draining = false;
    pthread_cond_broadcast(&s->io_done);
}

/* ---- deferred frees ---- */

int qcow2_free_later_locked(struct qcow2_state *s, uint64_t offset, uint64_t bytes)
{
    if (bytes == 0) {
        return 0;
    }
    if (s->n_pending == s->cap_pending) {
        size_t cap = s->cap_pending ? s->cap_pending * 2 : 64;
        struct qcow2_pending_free *p = realloc(s->pending, cap * sizeof *p);
        if (!p) {
            return err_set(ENOMEM, "qcow2: pending frees");
        }
        s->pending = p;
        s->cap_pending = cap;
    }
    s->pending[s->n_pending++] = (struct qcow2_pending_free){offset, bytes};
    return 0;
}

/* The L2 entries that dropped every pending cluster are durable (the
 * caller synced with the lock held): drop their refcounts. */
static int apply_pending_frees_locked(struct qcow2_state *s)
{
    /* Only the frees queued until now: the drain drops the lock, and a
     * free queued meanwhile has an L2 change that is not durable yet and
     * may have been mapped by I/O the drain does not wait for.  Counted
     * from the start of time, since another flush may apply ours first. */
    uint64_t upto = s->pending_done + s->n_pending;
    int r = 0;

    /* Reads that mapped these clusters before they were dropped may still
     * be running: let them finish before the clusters can be reused. */
    qcow2_io_drain_locked(s);
    size_t n = upto > s->pending_done ? (size_t)(upto - s->pending_done) : 0;
    for (size_t i = 0; i < n && r == 0; i++) {
        r = s->release_locked(s, s->pending[i].offset, s->pending[i].bytes);
    }
    /* Applied, or (after an error) given up as leaks. */
    memmove(s->pending, s->pending + n, (s->n_pending - n) * sizeof *s->pending);
    s->n_pending -= n;
    s->pending_done += n;
    return r;
}

int qcow2_flush_caches_locked(struct qcow2_state *s)
{
    int r = qcow2_cache_flush_locked(s->l2_cache); /* refcounts, sync, L2 */

    if (r == 0) {
        r = qcow2_cache_flush_locked(s->rb_cache);
    }
    if (r == 0 && s->n_pending) {
        /* The L2 slices that dropped these clusters are written: once they
         * are durable, the refcounts may go down. */
        r = blk_flush(s->file);
        if (r == 0) {
            r = apply_pending_frees_locked(s);
        }
        if (r == 0) {
            r = qcow2_cache_flush_locked(s->rb_cache);
        }
    }
    return r;
}
