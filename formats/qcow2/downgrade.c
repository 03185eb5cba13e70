/* formats/qcow2/downgrade.c: what amend -o compat=0.10 has to undo
 * before the header says version 2: zero clusters (v2 has no zero flag)
 * and persistent bitmaps (v2 has no autoclear bit to vouch for them).
 *
 * Zero clusters become what qemu makes of them: an unallocated entry when
 * nothing lies below the image, otherwise a cluster of zeroes, allocated
 * and written, its refcount durable, before the L2 entry points at it.
 * Every L2 table is walked, the snapshots' too; a table shared with
 * snapshots keeps its sharing (the new cluster takes the table's
 * refcount).  A crash leaves a v3 image that reads the same, at worst
 * with leaked clusters.
 *
 * qemu-img 7.2 keeps the bitmaps extension in the v2 header and leaves
 * the bitmaps' clusters leaked; here they are dropped from the header
 * and freed once the header no longer names them.
 *
 * Order (qcow2.h): above refcount-rewrite.c; calls cluster, refcount,
 * writeback, cache, overlap and open (the metadata map). */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "qcow2.h"

int qcow2_has_compressed_clusters_locked(struct qcow2_state *s, bool *found)
{
    *found = false;
    for (uint64_t off = 0; off < s->hdr.size && !*found;) {
        struct qcow2_map m;
        int r = qcow2_map_locked(s, off, s->hdr.size - off, &m);
        if (r < 0) {
            return r;
        }
        *found = m.type == QCOW2_COMPRESSED;
        off += m.bytes;
    }
    return 0;
}

/* A host cluster named by a table: aligned, past the header, inside the
 * file (the metadata map knows the rest). */
static int check_cluster(const struct qcow2_state *s, uint64_t off, const char *what)
{
    if (off == 0 || off % s->cluster_size || off >= s->file_end) {
        return err_setx(EINVAL, "qcow2: %s at 0x%" PRIx64 " is not a cluster of the file", what,
                        off);
    }
    return 0;
}

static int add_range(struct qcow2_free_list *fl, uint64_t off, uint64_t bytes)
{
    if (fl->n == fl->cap) {
        size_t cap = fl->cap ? fl->cap * 2 : 16;
        struct qcow2_pending_free *v = realloc(fl->v, cap * sizeof *v);
        if (!v) {
            return err_set(ENOMEM, "qcow2: cluster list");
        }
        fl->v = v;
        fl->cap = cap;
    }
    fl->v[fl->n++] = (struct qcow2_pending_free){off, bytes};
    return 0;
}

/* One zero entry of an L2 table that l2_refs L1 tables share becomes
 * data or unallocated (*entry updated).  A preallocated cluster is zeroed
 * in place only when nothing but this table uses it; otherwise this
 * table's references to it go to 'drop', for after the new entry is
 * durable. */
static int expand_entry_locked(struct qcow2_state *s, uint64_t l2_refs, bool below, uint64_t *entry,
                               struct qcow2_free_list *drop)
{
    uint64_t host = *entry & L2E_OFFSET_MASK, refs = l2_refs;
    int r;

    if (host) {
        r = check_cluster(s, host, "zero cluster");
        if (r == 0) {
            r = qcow2_get_refcount_locked(s, host >> s->cluster_bits, &refs);
        }
        if (r < 0) {
            return r;
        }
        if (refs > l2_refs) {
            r = add_range(drop, host, s->cluster_size);
            if (r < 0) {
                return r;
            }
            host = 0;
            refs = l2_refs;
        }
    }
    if (!host) {
        if (!below) {
            *entry = 0; /* reads as zeroes anyway */
            return 0;
        }
        r = qcow2_alloc_clusters_locked(s, 1, &host);
        for (uint64_t i = 1; r == 0 && i < l2_refs; i++) {
            r = qcow2_update_refcount_locked(s, host, s->cluster_size, +1);
        }
        if (r < 0) {
            return r;
        }
    }
    if (qcow2_overlaps_metadata_locked(s, host, s->cluster_size)) {
        return qcow2_mark_corrupt_locked(
            s, "zero cluster at 0x%" PRIx64 " overlaps metadata; not writing it", host);
    }
    r = blk_pwrite_zeroes(s->file, host, s->cluster_size, 0);
    if (r < 0) {
        return r;
    }
    *entry = host | (refs == 1 ? QCOW_OFLAG_COPIED : 0);
    return 0;
}

/* The L2 table at l2_off, rewritten in place when it held zero entries:
 * the zeroes and refcounts are synced first, references dropped after. */
static int expand_l2_locked(struct qcow2_state *s, uint64_t l2_off, bool below, uint64_t *l2)
{
    struct qcow2_free_list drop = {0};
    uint64_t n = s->cluster_size / 8, refs = 1;
    bool dirty = false;
    int r = check_cluster(s, l2_off, "L2 table");

    if (r == 0 && qcow2_overlaps_metadata_other_locked(s, l2_off, s->cluster_size, QCOW2_META_L2)) {
        r = err_setx(EINVAL, "qcow2: L2 table at 0x%" PRIx64 " overlaps other metadata", l2_off);
    }
    if (r == 0) {
        r = blk_pread(s->file, l2_off, l2, s->cluster_size);
    }
    if (r == 0) {
        r = qcow2_get_refcount_locked(s, l2_off >> s->cluster_bits, &refs);
    }
    refs = MAX(refs, (uint64_t)1);
    for (uint64_t j = 0; r == 0 && j < n; j++) {
        uint64_t e = be64toh(l2[j]);
        if ((e & QCOW_OFLAG_COMPRESSED) || !(e & QCOW_OFLAG_ZERO)) {
            continue;
        }
        r = expand_entry_locked(s, refs, below, &e, &drop);
        l2[j] = htobe64(e);
        dirty = true;
    }
    if (r == 0 && dirty) {
        r = qcow2_commit_refcounts_locked(s); /* the zeroes and refcounts first */
    }
    if (r == 0 && dirty) {
        qcow2_cache_discard_locked(s->l2_cache, l2_off, s->cluster_size);
        r = blk_pwrite(s->file, l2_off, l2, s->cluster_size, 0);
        if (r == 0) {
            r = blk_flush(s->file);
        }
    }
    for (size_t i = 0; r == 0 && i < drop.n; i++) {
        for (uint64_t k = 0; r == 0 && k < refs; k++) {
            r = qcow2_update_refcount_locked(s, drop.v[i].offset, drop.v[i].bytes, -1);
        }
    }
    free(drop.v);
    return r;
}

static int expand_l1_locked(struct qcow2_state *s, const uint64_t *l1, uint32_t l1_size,
                            bool big_endian, bool below, struct amend_progress *p, uint64_t *done,
                            uint64_t total)
{
    CLEANUP_FREE uint64_t *l2 = malloc(s->cluster_size);
    int r = 0;

    if (!l2) {
        return err_set(ENOMEM, "qcow2: L2 table");
    }
    for (uint32_t i = 0; r == 0 && i < l1_size; i++) {
        uint64_t off = (big_endian ? be64toh(l1[i]) : l1[i]) & L1E_OFFSET_MASK;
        if (off) {
            r = expand_l2_locked(s, off, below, l2);
        }
        amend_progress(p, ++*done, total);
    }
    return r;
}

int qcow2_expand_zero_clusters_locked(struct qcow2_state *s, struct amend_progress *p)
{
    /* A backing file named, opened or not: its data would show through. */
    bool below = s->hdr.backing_file != NULL;
    uint64_t done = 0, total = s->l1_size;
    int r = qcow2_flush_caches_locked(s);

    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        total += s->snapshots[i].l1_size;
    }
    if (r == 0) {
        r = expand_l1_locked(s, s->l1, s->l1_size, false, below, p, &done, total);
    }
    for (uint32_t i = 0; r == 0 && i < s->n_snapshots; i++) {
        const struct qcow2_snapshot *sn = &s->snapshots[i];
        CLEANUP_FREE uint64_t *l1 = malloc((uint64_t)sn->l1_size * 8 + 1);
        if (!l1) {
            return err_set(ENOMEM, "qcow2: snapshot L1 table");
        }
        r = blk_pread(s->file, sn->l1_table_offset, l1, (uint64_t)sn->l1_size * 8);
        if (r == 0) {
            r = expand_l1_locked(s, l1, sn->l1_size, true, below, p, &done, total);
        }
    }
    return r;
}

int qcow2_collect_bitmap_clusters_locked(struct qcow2_state *s, struct qcow2_free_list *fl)
{
    uint64_t cs = s->cluster_size;
    int r = 0;

    if (s->n_bitmaps == 0) {
        return 0; /* none, or an extension we could not read: dropped only */
    }
    r = add_range(fl, s->hdr.bitmap_directory_offset, ROUND_UP(s->hdr.bitmap_directory_size, cs));
    for (uint32_t i = 0; r == 0 && i < s->n_bitmaps; i++) {
        const struct qcow2_bitmap *bm = &s->bitmaps[i];
        uint64_t bytes = (uint64_t)bm->table_size * 8;
        if (!bm->table_size) {
            continue;
        }
        CLEANUP_FREE uint64_t *t = malloc(bytes);
        if (!t) {
            return err_set(ENOMEM, "qcow2: bitmap table");
        }
        r = blk_pread(s->file, bm->table_offset, t, bytes);
        for (uint32_t j = 0; r == 0 && j < bm->table_size; j++) {
            uint64_t off = be64toh(t[j]) & L2E_OFFSET_MASK;
            if (off) {
                r = check_cluster(s, off, "bitmap data cluster");
            }
            if (off && r == 0) {
                r = add_range(fl, off, cs);
            }
        }
        if (r == 0) {
            r = add_range(fl, bm->table_offset, ROUND_UP(bytes, cs));
        }
    }
    return r;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Freeing fl must drop each cluster's refcount by the times it is listed,
 * and touch no other metadata: a hostile bitmap table could name the
 * refcount table, or one cluster twice. */
int qcow2_check_free_list_locked(struct qcow2_state *s, const struct qcow2_free_list *fl)
{
    size_t n = 0;
    int r = 0;

    for (size_t i = 0; i < fl->n; i++) {
        n += fl->v[i].bytes >> s->cluster_bits;
    }
    CLEANUP_FREE uint64_t *c = malloc((n ? n : 1) * sizeof *c);
    if (!c) {
        return err_set(ENOMEM, "qcow2: cluster list");
    }
    n = 0;
    for (size_t i = 0; i < fl->n; i++) {
        for (uint64_t off = fl->v[i].offset; off < fl->v[i].offset + fl->v[i].bytes;
             off += s->cluster_size) {
            c[n++] = off;
        }
    }
    qsort(c, n, sizeof *c, cmp_u64);
    for (size_t i = 0; r == 0 && i < n;) {
        size_t j = i;
        uint64_t refs;
        while (j < n && c[j] == c[i]) {
            j++;
        }
        r = qcow2_get_refcount_locked(s, c[i] >> s->cluster_bits, &refs);
        if (r == 0 && (refs < j - i || qcow2_overlaps_metadata_other_locked(
                                           s, c[i], s->cluster_size, QCOW2_META_BITMAPS))) {
            r = err_setx(EINVAL,
                         "qcow2: bitmap cluster 0x%" PRIx64 " is also used elsewhere (run "
                         "'diskimg check -r all', or remove the bitmaps)",
                         c[i]);
        }
        i = j;
    }
    return r;
}

void qcow2_drop_bitmaps_locked(struct qcow2_state *s)
{
    struct qcow2_header *h = &s->hdr;
    uint32_t k = 0;

    for (uint32_t i = 0; i < h->n_unknown; i++) {
        if (h->unknown[i].type == QCOW2_EXT_BITMAPS) {
            free(h->unknown[i].data);
        } else {
            h->unknown[k++] = h->unknown[i];
        }
    }
    h->n_unknown = k;
    h->has_bitmaps_ext = false;
    h->nb_bitmaps = 0;
    h->bitmap_directory_offset = 0;
    h->bitmap_directory_size = 0;
    h->autoclear_features &= ~QCOW2_AUTOCLEAR_BITMAPS;
    qcow2_free_bitmaps(s);
}
