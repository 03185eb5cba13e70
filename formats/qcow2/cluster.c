/* formats/qcow2/cluster.c: from guest offsets to host clusters.
 *
 * The L1 table is kept in memory; L2 tables are read and cached in
 * slices.  Every entry is validated where it is used.  This file registers
 * the L1 and L2 tables in the metadata map (overlap.c).
 *
 * Order (qcow2.h): above refcount.c; calls refcount, writeback, overlap,
 * cache, compress. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

int qcow2_l1_duplicate(const uint64_t *l1, uint32_t n, bool big_endian, uint64_t *dup)
{
    CLEANUP_FREE uint64_t *offs = malloc((n ? n : 1) * sizeof *offs);
    uint32_t k = 0;

    if (!offs) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", n);
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off = (big_endian ? be64toh(l1[i]) : l1[i]) & L1E_OFFSET_MASK;
        if (off) {
            offs[k++] = off;
        }
    }
    qsort(offs, k, sizeof *offs, cmp_u64);
    for (uint32_t i = 1; i < k; i++) {
        if (offs[i] == offs[i - 1]) {
            *dup = offs[i];
            return 1;
        }
    }
    return 0;
}

int qcow2_load_l1(struct qcow2_state *s)
{
    uint64_t bytes = (uint64_t)s->l1_size * 8;
    CLEANUP_FREE uint64_t *l1 = calloc(s->l1_size ? s->l1_size : 1, 8);
    int r;

    if (!l1) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", s->l1_size);
    }
    if (bytes) {
        r = blk_pread(s->file, s->l1_offset, l1, bytes);
        if (r < 0) {
            return r;
        }
    }
    for (uint32_t i = 0; i < s->l1_size; i++) {
        l1[i] = be64toh(l1[i]);
        if (l1[i] & L1E_RESERVED_MASK) {
            return err_setx(EINVAL,
                            "qcow2: L1 entry %" PRIu32 " has reserved bits set "
                            "(0x%016" PRIx64 ")",
                            i, l1[i]);
        }
        uint64_t off = l1[i] & L1E_OFFSET_MASK;
        if (off & (s->cluster_size - 1)) {
            return err_setx(EINVAL,
                            "qcow2: L1 entry %" PRIu32 ": L2 table offset 0x%" PRIx64
                            " is not cluster-aligned",
                            i, off);
        }
    }
    /* One L2 table under many L1 entries makes a file of a few clusters
     * map (and check, and read) like one holding all those tables. */
    uint64_t dup;
    r = qcow2_l1_duplicate(l1, s->l1_size, false, &dup);
    if (r < 0) {
        return r;
    }
    if (r > 0) {
        return err_setx(EINVAL,
                        "qcow2: L1 table: the L2 table at 0x%" PRIx64
                        " is used by more than one L1 entry",
                        dup);
    }
    free(s->l1);
    s->l1 = steal_ptr(&l1);
    return 0;
}

/* A new L1 table of new_size entries, written and synced before the
 * header points at it; the old one is freed afterwards. */
int qcow2_grow_l1_locked(struct qcow2_state *s, uint32_t new_size)
{
    uint64_t cs = s->cluster_size;
    uint64_t bytes = ROUND_UP((uint64_t)new_size * 8, cs);
    uint64_t old_offset = s->l1_offset, old_bytes = ROUND_UP((uint64_t)s->l1_size * 8, cs);
    uint64_t new_offset;
    CLEANUP_FREE uint64_t *be = NULL;
    uint64_t *l1;
    int r;

    if ((uint64_t)new_size * 8 > QCOW2_MAX_L1_BYTES) {
        return err_setx(EFBIG, "qcow2: the L1 table would exceed 32 MiB");
    }
    l1 = realloc(s->l1, (size_t)new_size * 8);
    be = calloc(1, bytes);
    if (!l1 || !be) {
        if (l1) {
            s->l1 = l1;
        }
        return err_set(ENOMEM, "qcow2: L1 table");
    }
    s->l1 = l1;
    memset(l1 + s->l1_size, 0, (size_t)(new_size - s->l1_size) * 8);
    r = qcow2_alloc_clusters_locked(s, bytes / cs, &new_offset);
    if (r < 0) {
        return r;
    }
    for (uint32_t i = 0; i < new_size; i++) {
        be[i] = htobe64(l1[i]);
    }
    r = qcow2_add_metadata_locked(s, new_offset, bytes, QCOW2_META_L1);
    if (r == 0) {
        r = qcow2_write_metadata_locked(s, new_offset, be, bytes);
    }
    if (r < 0) {
        return r;
    }
    s->hdr.l1_table_offset = new_offset;
    s->hdr.l1_size = new_size;
    r = qcow2_commit_header_locked(s);
    if (r < 0) {
        return qcow2_mark_corrupt_locked(s, "switching to a larger L1 table failed");
    }
    s->l1_offset = new_offset;
    s->l1_size = new_size;
    if (old_bytes) {
        qcow2_remove_metadata_locked(s, old_offset, old_bytes);
        r = qcow2_free_later_locked(s, old_offset, old_bytes);
    }
    return r;
}

uint64_t qcow2_l2_get(const struct qcow2_state *s, const uint64_t *slice, unsigned i,
                      uint64_t *bitmap)
{
    if (s->extended_l2) {
        *bitmap = be64toh(slice[2 * i + 1]);
        return be64toh(slice[2 * i]);
    }
    *bitmap = 0;
    return be64toh(slice[i]);
}

void qcow2_l2_set(const struct qcow2_state *s, uint64_t *slice, unsigned i, uint64_t entry,
                  uint64_t bitmap)
{
    if (s->extended_l2) {
        slice[2 * i] = htobe64(entry);
        slice[2 * i + 1] = htobe64(bitmap);
    } else {
        slice[i] = htobe64(entry);
    }
}

/* The active L1 table: an owner's part of the metadata map (overlap.c). */
int qcow2_add_l1_metadata_locked(struct qcow2_state *s)
{
    if (s->l1_size == 0) {
        return 0;
    }
    return qcow2_add_metadata_locked(
        s, s->l1_offset, ROUND_UP((uint64_t)s->l1_size * 8, s->cluster_size), QCOW2_META_L1);
}

/* Every L2 table the active L1 table points at. */
int qcow2_add_l2_metadata_locked(struct qcow2_state *s)
{
    int r = 0;

    for (uint32_t i = 0; r == 0 && i < s->l1_size; i++) {
        uint64_t off = s->l1[i] & L1E_OFFSET_MASK;
        if (off) {
            r = qcow2_add_metadata_locked(s, off, s->cluster_size, QCOW2_META_L2);
        }
    }
    return r;
}

/* ---- mapping ---- */

static int l2_entry_invalid(struct qcow2_state *s, uint64_t guest, const char *why, uint64_t entry)
{
    return qcow2_mark_corrupt_locked(
        s, "L2 entry for guest offset 0x%" PRIx64 " %s (0x%016" PRIx64 ")", guest, why, entry);
}

/* Host clusters lie inside the file: past its end they would read as
 * zeroes (and a write would land in space no refcount covers).  s->file_end
 * grows with every allocation before an entry points at it. */
static bool past_eof(const struct qcow2_state *s, uint64_t off, uint64_t len)
{
    return off > s->file_end || len > s->file_end - off;
}

/* The L2 table an L1 entry names lies inside the file. */
static int check_l2_table_locked(struct qcow2_state *s, uint64_t l1i, uint64_t l2_off)
{
    if (past_eof(s, l2_off, s->cluster_size)) {
        return qcow2_mark_corrupt_locked(
            s, "L1 entry %" PRIu64 ": L2 table at 0x%" PRIx64 " lies past the end of the file", l1i,
            l2_off);
    }
    return 0;
}

/* Classify one standard (non-extended) L2 entry. */
static int classify_entry(struct qcow2_state *s, uint64_t guest, uint64_t entry,
                          struct qcow2_map *m)
{
    uint64_t host = entry & L2E_OFFSET_MASK;

    if (entry & QCOW_OFLAG_COMPRESSED) {
        uint64_t coff, cbytes;
        if (entry & QCOW_OFLAG_COPIED) {
            return l2_entry_invalid(s, guest, "is compressed with the copied flag", entry);
        }
        qcow2_compressed_range(s, entry, &coff, &cbytes);
        if (coff == 0 || past_eof(s, coff, cbytes)) {
            return l2_entry_invalid(
                s, guest, "has compressed data in the header or past the end of the file", entry);
        }
        m->type = QCOW2_COMPRESSED;
        m->l2_entry = entry;
        return 0;
    }
    if (entry & L2E_STD_RESERVED_MASK) {
        return l2_entry_invalid(s, guest, "has reserved bits set", entry);
    }
    if (host && past_eof(s, host, s->cluster_size)) {
        return l2_entry_invalid(s, guest, "points past the end of the file", entry);
    }
    if (entry & QCOW_OFLAG_ZERO) {
        if (s->hdr.version < 3) {
            return l2_entry_invalid(s, guest, "has the zero flag in a version 2 image", entry);
        }
        m->type = host ? QCOW2_ZERO_ALLOC : QCOW2_ZERO;
        m->host = host;
        m->copied = entry & QCOW_OFLAG_COPIED;
        return 0;
    }
    if (!host) {
        if (entry & QCOW_OFLAG_COPIED) {
            return l2_entry_invalid(s, guest, "has the copied flag but no offset", entry);
        }
        m->type = QCOW2_UNALLOCATED;
        return 0;
    }
    m->type = QCOW2_NORMAL;
    m->host = host;
    m->copied = entry & QCOW_OFLAG_COPIED;
    return 0;
}

/* Classify subcluster sc of an extended L2 entry. */
static int classify_sub(struct qcow2_state *s, uint64_t guest, uint64_t entry, uint64_t bitmap,
                        unsigned sc, struct qcow2_map *m)
{
    uint64_t host = entry & L2E_OFFSET_MASK;

    if (entry & QCOW_OFLAG_COMPRESSED) {
        if (bitmap) {
            return l2_entry_invalid(s, guest, "is compressed with a subcluster bitmap", entry);
        }
        return classify_entry(s, guest, entry, m);
    }
    if (entry & (L2E_STD_RESERVED_MASK | QCOW_OFLAG_ZERO)) {
        return l2_entry_invalid(s, guest, "has reserved bits set", entry);
    }
    if ((bitmap >> 32) & bitmap) {
        return l2_entry_invalid(s, guest, "marks a subcluster both allocated and zero", bitmap);
    }
    if (!host && (bitmap & QCOW_ALLOC_MASK)) {
        return l2_entry_invalid(s, guest, "allocates subclusters without a cluster", bitmap);
    }
    if (host && past_eof(s, host, s->cluster_size)) {
        return l2_entry_invalid(s, guest, "points past the end of the file", entry);
    }
    /* Zero and unallocated subclusters of an allocated cluster still have
     * a place in the file (qemu's ZERO_ALLOC and UNALLOCATED_ALLOC). */
    uint64_t sub_host = host ? host + ((uint64_t)sc << s->subcluster_bits) : 0;
    m->copied = entry & QCOW_OFLAG_COPIED;
    if (bitmap & QCOW_SUBCLUSTER_ALLOC(sc)) {
        m->type = QCOW2_NORMAL;
        m->host = sub_host;
    } else if (bitmap & QCOW_SUBCLUSTER_ZERO(sc)) {
        m->type = host ? QCOW2_ZERO_ALLOC : QCOW2_ZERO;
        m->host = sub_host;
    } else {
        m->type = QCOW2_UNALLOCATED;
        m->host = sub_host;
        m->has_host = host != 0;
    }
    return 0;
}

/* Same run?  NORMAL runs must also be contiguous on the host. */
static bool map_continues(const struct qcow2_map *m, const struct qcow2_map *next)
{
    if (m->type != next->type) {
        return false;
    }
    switch (m->type) {
    case QCOW2_NORMAL:
        return next->copied == m->copied && next->host == m->host + m->bytes;
    case QCOW2_ZERO_ALLOC:
        return next->host == m->host + m->bytes;
    case QCOW2_UNALLOCATED:
        return next->has_host == m->has_host && (!m->has_host || next->host == m->host + m->bytes);
    case QCOW2_COMPRESSED:
        return false;
    default:
        return true;
    }
}

int qcow2_map_locked(struct qcow2_state *s, uint64_t guest, uint64_t max_bytes, struct qcow2_map *m)
{
    uint64_t cs = s->cluster_size;
    uint64_t cluster = guest >> s->cluster_bits;
    uint64_t l1i = cluster >> s->l2_bits;
    uint64_t end = guest + max_bytes;
    uint64_t l2_off;
    uint64_t *slice;
    int r;

    memset(m, 0, sizeof *m);
    if (l1i >= s->l1_size || !(l2_off = s->l1[l1i] & L1E_OFFSET_MASK)) {
        /* No L2 table: unallocated up to the end of its range. */
        uint64_t range_end = (l1i + 1) << (s->l2_bits + s->cluster_bits);
        m->type = QCOW2_UNALLOCATED;
        m->bytes = MIN(max_bytes, range_end - guest);
        return 0;
    }
    r = check_l2_table_locked(s, l1i, l2_off);
    if (r < 0) {
        return r;
    }
    uint64_t l2i = cluster & ((1ULL << s->l2_bits) - 1);
    uint64_t first_index = l2i % s->l2_slice_entries;
    r = qcow2_cache_get_locked(s->l2_cache, l2_off + (l2i / s->l2_slice_entries) * s->l2_slice_size,
                               true, (void **)&slice);
    if (r < 0) {
        return r;
    }
    /* Walk clusters (or subclusters) of this slice while the status and
     * the host contiguity last. */
    for (uint64_t pos = guest; pos < end;) {
        uint64_t cl_start = pos & ~(cs - 1);
        uint64_t idx = first_index + ((cl_start >> s->cluster_bits) - cluster);
        uint64_t bitmap, entry;
        uint64_t unit_start = cl_start, unit_end = cl_start + cs;
        struct qcow2_map next = {0};

        if (idx >= s->l2_slice_entries) {
            break;
        }
        entry = qcow2_l2_get(s, slice, (unsigned)idx, &bitmap);
        if (s->extended_l2 && !(entry & QCOW_OFLAG_COMPRESSED)) {
            unsigned sc = (unsigned)((pos - cl_start) >> s->subcluster_bits);
            unit_start = cl_start + ((uint64_t)sc << s->subcluster_bits);
            unit_end = unit_start + (1ULL << s->subcluster_bits);
            r = classify_sub(s, pos, entry, bitmap, sc, &next);
        } else if (s->extended_l2) {
            r = classify_sub(s, pos, entry, bitmap, 0, &next);
        } else {
            r = classify_entry(s, pos, entry, &next);
        }
        if (r < 0) {
            break;
        }
        uint64_t take = MIN(unit_end, end) - pos;
        if (next.type == QCOW2_NORMAL || next.type == QCOW2_ZERO_ALLOC || next.has_host) {
            next.host += pos - unit_start;
        }
        if (pos == guest) {
            *m = next;
            m->bytes = take;
            if (m->type == QCOW2_COMPRESSED) {
                break; /* one compressed cluster at a time */
            }
        } else if (map_continues(m, &next)) {
            m->bytes += take;
        } else {
            break;
        }
        pos += take;
    }
    qcow2_cache_put_locked(s->l2_cache, slice);
    return r;
}

/* Write one L1 entry through to the file. */
static int write_l1_entry_locked(struct qcow2_state *s, uint64_t l1i)
{
    uint64_t be = htobe64(s->l1[l1i]);

    return blk_pwrite(s->file, s->l1_offset + l1i * 8, &be, 8, 0);
}

/* A fresh (or copied) L2 table for L1 index l1i: written and synced with
 * its refcount before the L1 entry points at it. */
static int alloc_l2_table_locked(struct qcow2_state *s, uint64_t l1i, uint64_t old_l2)
{
    uint64_t cs = s->cluster_size, new_l2;
    CLEANUP_FREE void *buf = NULL;
    int r;

    r = qcow2_alloc_clusters_locked(s, 1, &new_l2);
    if (r < 0) {
        return r;
    }
    r = qcow2_add_metadata_locked(s, new_l2, cs, QCOW2_META_L2);
    if (r < 0) {
        return r;
    }
    if (posix_memalign(&buf, 4096, cs) != 0) {
        return err_set(ENOMEM, "qcow2: L2 table");
    }
    if (old_l2) {
        /* Copy-on-write of a table shared with a snapshot: write back the
         * cached slices of the old table first so the copy is current. */
        r = qcow2_cache_flush_locked(s->l2_cache);
        if (r == 0) {
            r = blk_pread(s->file, old_l2, buf, cs);
        }
    } else {
        memset(buf, 0, cs);
    }
    if (r == 0) {
        r = qcow2_write_metadata_locked(s, new_l2, buf, cs);
    }
    if (r < 0) {
        return r;
    }
    s->l1[l1i] = new_l2 | QCOW_OFLAG_COPIED;
    r = write_l1_entry_locked(s, l1i);
    if (r == 0 && old_l2) {
        /* Cached slices of the old table stay valid for the snapshot. */
        r = qcow2_free_later_locked(s, old_l2, cs);
    }
    return r;
}

int qcow2_get_l2_slice_locked(struct qcow2_state *s, uint64_t guest, bool alloc, uint64_t **slice,
                              unsigned *index)
{
    uint64_t cluster = guest >> s->cluster_bits;
    uint64_t l1i = cluster >> s->l2_bits;
    uint64_t l2i = cluster & ((1ULL << s->l2_bits) - 1);
    uint64_t l2_off;
    int r;

    if (l1i >= s->l1_size) {
        return qcow2_mark_corrupt_locked(s, "guest offset 0x%" PRIx64 " is beyond the L1 table",
                                         guest);
    }
    l2_off = s->l1[l1i] & L1E_OFFSET_MASK;
    r = l2_off ? check_l2_table_locked(s, l1i, l2_off) : 0;
    if (r < 0) {
        return r;
    }
    if (alloc && (!l2_off || !(s->l1[l1i] & QCOW_OFLAG_COPIED))) {
        r = alloc_l2_table_locked(s, l1i, l2_off);
        if (r < 0) {
            return r;
        }
        l2_off = s->l1[l1i] & L1E_OFFSET_MASK;
    }
    if (!l2_off) {
        return -ENOENT;
    }
    r = qcow2_cache_get_locked(s->l2_cache, l2_off + (l2i / s->l2_slice_entries) * s->l2_slice_size,
                               true, (void **)slice);
    if (r == 0) {
        *index = (unsigned)(l2i % s->l2_slice_entries);
    }
    return r;
}

int qcow2_free_l2_entry_later_locked(struct qcow2_state *s, uint64_t l2_entry)
{
    if (l2_entry & QCOW_OFLAG_COMPRESSED) {
        uint64_t off, bytes;
        qcow2_compressed_range(s, l2_entry, &off, &bytes);
        return qcow2_free_later_locked(s, off, bytes);
    }
    uint64_t host = l2_entry & L2E_OFFSET_MASK;
    return host ? qcow2_free_later_locked(s, host, s->cluster_size) : 0;
}
