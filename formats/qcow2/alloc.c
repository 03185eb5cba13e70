/* formats/qcow2/alloc.c: writes, write-zeroes and discard.
 *
 * A write to clusters that are allocated and not shared (L2 entry with the
 * copied flag) goes straight to the host cluster.  Any other write
 * allocates: it registers the guest clusters as in flight (so a second
 * write to the same unallocated cluster waits instead of allocating it
 * again), allocates host clusters, writes the guest data together with the
 * copy-on-write head and tail (from the old cluster, the backing file or
 * zeroes) without the lock, then points the L2 entries at the new clusters
 * and queues the old ones for freeing.
 *
 * Order (qcow2.h): above read.c (copy-on-write reads); calls read,
 * cluster, refcount, writeback, cache, compress, bitmap. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "qcow2.h"

#define IOV_LOCAL 64
/* Pending frees applied by an internal flush once this many queue up. */
#define PENDING_FREE_LIMIT 4096
/* Most clusters one allocating write takes at once. */
#define MAX_ALLOC_CLUSTERS 512

/* Does an entry conflict with a new one of kind 'shared'? */
static bool alloc_overlaps_locked(const struct qcow2_state *s, uint64_t start, uint64_t end,
                                  bool shared)
{
    for (const struct qcow2_alloc *a = s->allocs; a; a = a->next) {
        if (a->guest_start < end && start < a->guest_end && !(shared && a->shared)) {
            return true;
        }
    }
    return false;
}

static void alloc_register_locked(struct qcow2_state *s, struct qcow2_alloc *a, uint64_t start,
                                  uint64_t end, bool shared)
{
    a->guest_start = start;
    a->guest_end = end;
    a->shared = shared;
    a->next = s->allocs;
    s->allocs = a;
}

static void alloc_unregister_locked(struct qcow2_state *s, struct qcow2_alloc *a)
{
    for (struct qcow2_alloc **p = &s->allocs; *p; p = &(*p)->next) {
        if (*p == a) {
            *p = a->next;
            break;
        }
    }
    pthread_cond_broadcast(&s->alloc_done);
}

/* Wait (dropping the lock) until no conflicting write is in flight. */
static void alloc_wait_locked(struct qcow2_state *s, uint64_t start, uint64_t end, bool shared)
{
    while (alloc_overlaps_locked(s, start, end, shared)) {
        pthread_cond_wait(&s->alloc_done, &s->lock);
    }
}

static int maybe_apply_frees_locked(struct qcow2_state *s)
{
    if (s->n_pending < PENDING_FREE_LIMIT) {
        return 0;
    }
    return qcow2_flush_caches_locked(s);
}

/* Read guest [off, off+len) as it is now into buf (for copy-on-write). */
static int cow_read(struct qcow2_state *s, uint64_t off, uint64_t len, void *buf)
{
    return qcow2_read_range(s, off, &(struct iovec){buf, len}, 1);
}

/* Point the L2 entries of [c_start, c_start + n clusters) at host and
 * queue what they pointed at for freeing. */
static int update_l2_locked(struct qcow2_state *s, uint64_t c_start, uint64_t n, uint64_t host,
                            bool allocated)
{
    uint64_t cs = s->cluster_size;
    uint64_t bitmap_all = s->extended_l2 && allocated ? QCOW_ALLOC_MASK : 0;

    for (uint64_t i = 0; i < n; i++) {
        uint64_t *slice, old_bitmap;
        unsigned idx;
        int r = qcow2_get_l2_slice_locked(s, c_start + i * cs, true, &slice, &idx);
        if (r < 0) {
            return r;
        }
        uint64_t old = qcow2_l2_get(s, slice, idx, &old_bitmap);
        qcow2_l2_set(s, slice, idx, (host + i * cs) | QCOW_OFLAG_COPIED, bitmap_all);
        qcow2_cache_mark_dirty_locked(s->l2_cache, slice);
        qcow2_cache_put_locked(s->l2_cache, slice);
        r = qcow2_free_l2_entry_later_locked(s, old);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

/* The allocating path for [guest, guest+bytes), at most to the end of the
 * mapping run m.  Called with the lock held; returns with it held. */
static int write_allocating_locked(struct qcow2_state *s, uint64_t guest, const struct iovec *iov,
                                   int iovcnt, uint64_t skip, uint64_t bytes, uint64_t *done)
{
    uint64_t cs = s->cluster_size;
    uint64_t end = guest + bytes;
    uint64_t c_start = guest & ~(cs - 1);
    uint64_t c_end = MIN(ROUND_UP(end, cs), c_start + MAX_ALLOC_CLUSTERS * cs);
    struct qcow2_alloc a;
    uint64_t host, n, fresh_from;
    int r;

    end = MIN(end, c_end);
    if (alloc_overlaps_locked(s, c_start, c_end, false)) {
        alloc_wait_locked(s, c_start, c_end, false);
        *done = 0; /* the map may have changed: look again */
        return 0;
    }
    alloc_register_locked(s, &a, c_start, c_end, false);
    n = (c_end - c_start) / cs;
    fresh_from = s->file_end;
    r = qcow2_alloc_clusters_locked(s, n, &host);
    if (r < 0) {
        alloc_unregister_locked(s, &a);
        return r;
    }
    pthread_mutex_unlock(&s->lock);

    /* Data and copy-on-write in one write: [head][guest data][tail]. */
    uint64_t head = guest - c_start, tail = c_end - end;
    bool fresh = host >= fresh_from; /* past the old end: reads as zeroes */
    CLEANUP_FREE uint8_t *cow = NULL;
    struct iovec local[IOV_LOCAL + 2];
    int cnt = 0;

    if (head || tail) {
        cow = malloc(head + tail);
        if (!cow) {
            r = err_set(ENOMEM, "qcow2: copy-on-write buffer");
        }
    }
    if (r == 0 && head) {
        r = cow_read(s, c_start, head, cow);
    }
    if (r == 0 && tail) {
        r = cow_read(s, end, tail, cow + head);
    }
    uint64_t write_off = host;
    if (r == 0) {
        if (head && !(fresh && buffer_is_zero(cow, head))) {
            local[cnt++] = (struct iovec){cow, head};
        } else {
            write_off += head;
        }
        int k = iov_slice(iov, iovcnt, skip, end - guest, local + cnt, IOV_LOCAL);
        if (k < 0) {
            r = err_setx(EINVAL, "qcow2: write with too many iovec elements");
        } else {
            cnt += k;
        }
        if (tail && !(fresh && buffer_is_zero(cow + head, tail))) {
            local[cnt++] = (struct iovec){cow + head, tail};
        }
    }
    if (r == 0) {
        r = blk_pwritev(s->file, write_off, local, cnt, 0);
    }

    pthread_mutex_lock(&s->lock);
    if (r == 0) {
        r = update_l2_locked(s, c_start, n, host, true);
    } else {
        /* Nothing points at the new clusters yet: give them back. */
        (void)qcow2_update_refcount_locked(s, host, n * cs, -1);
    }
    alloc_unregister_locked(s, &a);
    if (r == 0) {
        r = maybe_apply_frees_locked(s);
    }
    *done = end - guest;
    return r;
}

int qcow2_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                  unsigned flags)
{
    struct qcow2_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), pos = 0;
    int r = 0;

    (void)flags; /* no native FUA: the generic layer flushes after us */
    r = qcow2_bitmaps_before_write(s, off, len);
    if (r < 0) {
        return r;
    }
    pthread_mutex_lock(&s->lock);
    while (r == 0 && pos < len) {
        struct qcow2_map m;
        uint64_t done = 0;

        r = qcow2_check_writable_locked(s);
        if (r < 0) {
            break;
        }
        r = qcow2_map_locked(s, off + pos, len - pos, &m);
        if (r < 0) {
            break;
        }
        if (m.type == QCOW2_NORMAL && m.copied) {
            uint64_t cs = s->cluster_size;
            uint64_t c_start = (off + pos) & ~(cs - 1), c_end = ROUND_UP(off + pos + m.bytes, cs);
            if (alloc_overlaps_locked(s, c_start, c_end, true)) {
                /* A write that may move these clusters is in flight. */
                alloc_wait_locked(s, c_start, c_end, true);
                continue;
            }
            struct qcow2_alloc shared;
            struct iovec local[IOV_LOCAL];
            int k = iov_slice(iov, iovcnt, pos, m.bytes, local, IOV_LOCAL);
            if (qcow2_overlaps_metadata_locked(s, m.host, m.bytes)) {
                r = qcow2_mark_corrupt_locked(s,
                                              "guest offset 0x%" PRIx64 " maps to metadata "
                                              "at 0x%" PRIx64,
                                              off + pos, m.host);
                break;
            }
            if (k < 0) {
                r = err_setx(EINVAL, "qcow2: write with too many iovec elements");
                break;
            }
            alloc_register_locked(s, &shared, c_start, c_end, true);
            unsigned e = qcow2_io_enter(s);
            pthread_mutex_unlock(&s->lock);
            r = blk_pwritev(s->file, m.host, local, k, 0);
            qcow2_io_leave(s, e);
            pthread_mutex_lock(&s->lock);
            alloc_unregister_locked(s, &shared);
            done = m.bytes;
        } else {
            r = write_allocating_locked(s, off + pos, iov, iovcnt, pos, MIN(len - pos, m.bytes),
                                        &done);
        }
        pos += done;
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* ---- write zeroes and discard ---- */

/* Does guest [off, off+len) read as zeroes already (without writing)? */
static int reads_as_zero_locked(struct qcow2_state *s, uint64_t off, uint64_t len, bool *zero)
{
    int64_t backing_len = s->backing ? blk_get_length(s->backing) : 0;

    *zero = true;
    while (len > 0 && *zero) {
        struct qcow2_map m;
        int r = qcow2_map_locked(s, off, len, &m);
        if (r < 0) {
            return r;
        }
        switch (m.type) {
        case QCOW2_ZERO:
        case QCOW2_ZERO_ALLOC:
            break;
        case QCOW2_UNALLOCATED:
            *zero = !s->backing || (int64_t)off >= backing_len;
            break;
        default:
            *zero = false;
        }
        off += m.bytes;
        len -= m.bytes;
    }
    return 0;
}

/* Zero or discard whole units (clusters, or subclusters with extended L2)
 * in [off, off+len) through L2 entries.  unmap: the host cluster may go. */
static int zero_units_locked(struct qcow2_state *s, uint64_t off, uint64_t len, bool unmap)
{
    uint64_t cs = s->cluster_size;
    uint64_t end = off + len;

    for (uint64_t pos = off; pos < end;) {
        uint64_t cl_start = pos & ~(cs - 1);
        uint64_t cl_end = MIN(cl_start + cs, end);
        uint64_t *slice, bitmap;
        unsigned idx;
        bool zero_now;
        int r;

        /* An unallocated cluster with nothing beneath reads as zero
         * already: no need to create an L2 table for it. */
        r = reads_as_zero_locked(s, pos, cl_end - pos, &zero_now);
        if (r < 0) {
            return r;
        }
        if (zero_now && !unmap) {
            pos = cl_end;
            continue;
        }
        r = qcow2_get_l2_slice_locked(s, pos, !zero_now, &slice, &idx);
        if (r == -ENOENT) {
            pos = cl_end; /* no L2 table, and it reads as zero already */
            continue;
        }
        if (r < 0) {
            return r;
        }
        uint64_t old = qcow2_l2_get(s, slice, idx, &bitmap);
        uint64_t host = old & L2E_OFFSET_MASK;
        bool compressed = old & QCOW_OFLAG_COMPRESSED;
        uint64_t entry = old, new_bitmap = 0;
        bool free_old = false;

        if (zero_now && !host && !compressed) {
            qcow2_cache_put_locked(s->l2_cache, slice); /* zero, and nothing to free */
            pos = cl_end;
            continue;
        }
        if (s->extended_l2) {
            unsigned sa = (unsigned)((pos - cl_start) >> s->subcluster_bits);
            unsigned sb = (unsigned)((cl_end - cl_start) >> s->subcluster_bits);
            uint64_t range = (((sb == 32) ? 0xffffffffULL : ((1ULL << sb) - 1)) >> sa) << sa;
            if (compressed) {
                /* A compressed cluster can only be replaced whole. */
                if (range != QCOW_ALLOC_MASK) {
                    qcow2_cache_put_locked(s->l2_cache, slice);
                    return -ENOTSUP;
                }
                entry = 0;
                new_bitmap = QCOW_ZERO_MASK;
                free_old = true;
            } else {
                new_bitmap = (bitmap & ~range) | (range << 32);
                if (unmap && host && !(new_bitmap & QCOW_ALLOC_MASK)) {
                    entry = 0; /* no subcluster uses the host cluster now */
                    free_old = true;
                }
            }
        } else if (s->hdr.version < 3) {
            /* No zero flag: unallocated reads as zeroes only without a
             * backing file. */
            if (s->backing) {
                qcow2_cache_put_locked(s->l2_cache, slice);
                return -ENOTSUP;
            }
            entry = 0;
            free_old = host || compressed;
        } else if (!unmap && host && !compressed && (old & QCOW_OFLAG_COPIED)) {
            entry = host | QCOW_OFLAG_COPIED | QCOW_OFLAG_ZERO; /* keep it allocated */
        } else {
            entry = QCOW_OFLAG_ZERO;
            free_old = host || compressed;
        }
        qcow2_l2_set(s, slice, idx, entry, new_bitmap);
        qcow2_cache_mark_dirty_locked(s->l2_cache, slice);
        qcow2_cache_put_locked(s->l2_cache, slice);
        if (free_old) {
            r = qcow2_free_l2_entry_later_locked(s, old);
            if (r < 0) {
                return r;
            }
        }
        pos = cl_end;
    }
    return 0;
}

/* Run op on whole units under an in-flight registration. */
static int zero_or_discard(struct qcow2_state *s, uint64_t off, uint64_t len, bool unmap)
{
    uint64_t cs = s->cluster_size;
    struct qcow2_alloc a;
    int r = qcow2_bitmaps_before_write(s, off, len);

    if (r < 0) {
        return r;
    }
    pthread_mutex_lock(&s->lock);
    r = qcow2_check_writable_locked(s);
    if (r < 0) {
        pthread_mutex_unlock(&s->lock);
        return r;
    }
    alloc_wait_locked(s, off & ~(cs - 1), ROUND_UP(off + len, cs), false);
    alloc_register_locked(s, &a, off & ~(cs - 1), ROUND_UP(off + len, cs), false);
    r = zero_units_locked(s, off, len, unmap);
    alloc_unregister_locked(s, &a);
    if (r == 0) {
        r = maybe_apply_frees_locked(s);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

int qcow2_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct qcow2_state *s = n->opaque;
    uint64_t unit = s->extended_l2 ? (1ULL << s->subcluster_bits) : s->cluster_size;

    if ((off | len) & (unit - 1)) {
        /* A partial unit: done only if it already reads as zeroes; else
         * the generic layer writes zeroes (or fails a fast zero). */
        bool zero;
        int r;
        pthread_mutex_lock(&s->lock);
        r = reads_as_zero_locked(s, off, len, &zero);
        pthread_mutex_unlock(&s->lock);
        if (r == 0 && zero) {
            r = qcow2_bitmaps_before_write(s, off, len); /* a write, for bitmaps (as qemu) */
        }
        return r < 0 ? r : zero ? 0 : -ENOTSUP;
    }
    return zero_or_discard(s, off, len, flags & BLK_REQ_MAY_UNMAP);
}

int qcow2_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct qcow2_state *s = n->opaque;
    uint64_t unit = s->extended_l2 ? (1ULL << s->subcluster_bits) : s->cluster_size;
    uint64_t start = ROUND_UP(off, unit), end = ROUND_DOWN(off + len, unit);
    int r;

    (void)flags; /* no native FUA: the generic layer flushes after us */
    if (end <= start) {
        /* Discard is advisory: partial units are left alone, but bitmaps
         * count the whole request as a write, as qemu's do. */
        return qcow2_bitmaps_before_write(s, off, len);
    }
    r = off < start || off + len > end ? qcow2_bitmaps_before_write(s, off, len) : 0;
    if (r == 0) {
        r = zero_or_discard(s, start, end - start, true);
    }
    return r == -ENOTSUP ? 0 : r;
}

int qcow2_preallocate(struct blk_node *n, bool falloc, bool full, bool keep_backing)
{
    struct qcow2_state *s = n->opaque;
    uint64_t cs = s->cluster_size;
    uint64_t total = (s->hdr.size + cs - 1) >> s->cluster_bits;
    int r = 0;

    pthread_mutex_lock(&s->lock);
    for (uint64_t c = 0; c < total && r == 0;) {
        uint64_t count = MIN(total - c, (uint64_t)MAX_ALLOC_CLUSTERS), host;
        r = qcow2_alloc_clusters_locked(s, count, &host);
        if (r == 0) {
            /* Over a backing file (extended L2 only) the subclusters stay
             * unallocated, so reads still reach the backing data. */
            r = update_l2_locked(s, c * cs, count, host, !keep_backing);
        }
        if (r == 0 && falloc) {
            /* ZERO_RANGE allocates extents that read as zeroes. */
            r = blk_pwrite_zeroes(s->file, host, count * cs, 0);
        }
        for (uint64_t off = 0; r == 0 && full && off < count * cs; off += 1u << 20) {
            static const uint8_t zeroes[1u << 20];
            r = blk_pwrite(s->file, host + off, zeroes,
                           MIN((uint64_t)sizeof zeroes, count * cs - off), 0);
        }
        c += count;
    }
    if (r == 0) {
        r = qcow2_flush_caches_locked(s);
    }
    pthread_mutex_unlock(&s->lock);
    if (r == 0 && blk_get_length(s->file) < (int64_t)s->file_end) {
        /* Metadata only: the data clusters exist as a hole. */
        r = blk_truncate(s->file, s->file_end);
    }
    return r;
}

/* Host bytes for compressed data: packed after the previous compressed
 * cluster, spilling into the next host cluster when that one is free, as
 * qemu packs them.  Every host cluster the data touches gains one
 * reference. */
static int alloc_compressed_bytes_locked(struct qcow2_state *s, uint64_t len, uint64_t *host)
{
    uint64_t cs = s->cluster_size, next = s->compressed_next;
    int r;

    if (next && (next & (cs - 1)) + len <= cs) {
        r = qcow2_update_refcount_locked(s, next & ~(cs - 1), cs, 1);
        if (r == 0) {
            *host = next;
        }
    } else if (next) {
        uint64_t fresh;
        r = qcow2_alloc_clusters_locked(s, 1, &fresh);
        if (r < 0) {
            return r;
        }
        if (fresh == (next & ~(cs - 1)) + cs) {
            r = qcow2_update_refcount_locked(s, next & ~(cs - 1), cs, 1);
            *host = next; /* spans into the cluster just taken */
        } else {
            *host = fresh; /* not adjacent: start over in the new cluster */
        }
    } else {
        r = qcow2_alloc_clusters_locked(s, 1, host);
    }
    if (r == 0) {
        s->compressed_next = (*host + len) & (cs - 1) ? *host + len : 0;
    }
    return r;
}

int qcow2_compress(struct blk_node *n, const void *in, uint64_t len, void *out, size_t cap,
                   size_t *out_len)
{
    struct qcow2_state *s = n->opaque;
    uint64_t cs = s->cluster_size;
    CLEANUP_FREE uint8_t *padded = NULL;

    if (len > cs || len == 0) {
        return err_setx(EINVAL, "qcow2: compression takes one cluster at most");
    }
    if (len < cs) {
        /* the last cluster of the image: pad it with zeroes */
        padded = calloc(1, cs);
        if (!padded) {
            return err_set(ENOMEM, "qcow2: cluster buffer");
        }
        memcpy(padded, in, len);
        in = padded;
    }
    /* Only worth it if it saves at least a byte. */
    return qcow2_compress_cluster(s, in, out, MIN(cap, cs - 1), out_len);
}

int qcow2_pwrite_compressed(struct blk_node *n, uint64_t off, const void *data, size_t clen)
{
    struct qcow2_state *s = n->opaque;
    uint64_t cs = s->cluster_size;
    struct qcow2_alloc a;
    uint64_t host;
    int r;

    if ((off & (cs - 1)) || clen == 0 || clen >= cs) {
        return err_setx(EINVAL, "qcow2: a compressed write is one cluster, compressed");
    }
    r = qcow2_bitmaps_before_write(s, off, cs);
    if (r < 0) {
        return r;
    }
    pthread_mutex_lock(&s->lock);
    r = qcow2_check_writable_locked(s);
    if (r < 0) {
        pthread_mutex_unlock(&s->lock);
        return r;
    }
    alloc_wait_locked(s, off, off + cs, false);
    alloc_register_locked(s, &a, off, off + cs, false);
    r = alloc_compressed_bytes_locked(s, clen, &host);
    bool allocated = r == 0;
    pthread_mutex_unlock(&s->lock);
    if (r == 0) {
        r = blk_pwrite(s->file, host, data, clen, 0);
    }
    pthread_mutex_lock(&s->lock);
    if (allocated && r < 0) {
        /* Nothing points at the data: give back the reference it took on
         * every host cluster it touches. */
        uint64_t first = host & ~(cs - 1);
        (void)qcow2_update_refcount_locked(s, first, ROUND_UP(host + clen, cs) - first, -1);
    }
    if (r == 0) {
        uint64_t *slice, bitmap;
        unsigned idx;
        r = qcow2_get_l2_slice_locked(s, off, true, &slice, &idx);
        if (r == 0) {
            uint64_t nb = ((host + clen - 1) >> 9) - (host >> 9);
            uint64_t old = qcow2_l2_get(s, slice, idx, &bitmap);
            qcow2_l2_set(s, slice, idx, host | (nb << s->csize_shift) | QCOW_OFLAG_COMPRESSED, 0);
            qcow2_cache_mark_dirty_locked(s->l2_cache, slice);
            qcow2_cache_put_locked(s->l2_cache, slice);
            r = qcow2_free_l2_entry_later_locked(s, old);
        }
    }
    alloc_unregister_locked(s, &a);
    pthread_mutex_unlock(&s->lock);
    return r;
}
