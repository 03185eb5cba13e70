/* formats/qcow2/open.c: the pieces of opening an image that read its
 * metadata into memory: the header, the geometry that follows from it, the
 * metadata caches, and the metadata map built from every owner's ranges.
 * The open sequence itself, backing files and repair are the driver's
 * (qcow2.c); check.c rebuilds the map after a repair.
 *
 * Order (qcow2.h): above info.c; calls the metadata owners below it. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "qcow2.h"

#define L2_SLICE_MAX 4096
#define DEFAULT_L2_CACHE_MAX (32u << 20)
#define MIN_L2_CACHE_ENTRIES 16
#define MIN_RB_CACHE_ENTRIES 4

int qcow2_read_header(struct qcow2_state *s)
{
    int64_t file_size = blk_get_length(s->file);
    uint8_t first[QCOW2_V3_HEADER_LENGTH] = {0};
    uint32_t cluster_bits;
    int r;

    if (file_size < 0) {
        return (int)file_size;
    }
    r = blk_pread(s->file, 0, first, MIN((uint64_t)file_size, sizeof first));
    if (r < 0) {
        return r;
    }
    r = qcow2_header_peek_cluster_bits(first, MIN((size_t)file_size, sizeof first), &cluster_bits);
    if (r < 0) {
        return r;
    }
    size_t len = (size_t)MIN((uint64_t)file_size, 1ULL << cluster_bits);
    CLEANUP_FREE uint8_t *buf = malloc(len);
    if (!buf) {
        return err_set(ENOMEM, "qcow2: header");
    }
    r = blk_pread(s->file, 0, buf, len);
    if (r == 0) {
        r = qcow2_header_parse(buf, len, (uint64_t)file_size, &s->hdr);
    }
    return r;
}

void qcow2_setup_geometry(struct qcow2_state *s)
{
    s->cluster_bits = s->hdr.cluster_bits;
    s->cluster_size = 1ULL << s->cluster_bits;
    s->extended_l2 = s->hdr.incompatible_features & QCOW2_INCOMPAT_EXTL2;
    s->l2_entry_size = s->extended_l2 ? 16 : 8;
    s->l2_bits = s->cluster_bits - (s->extended_l2 ? 4 : 3);
    s->subcluster_bits = s->extended_l2 ? s->cluster_bits - 5 : s->cluster_bits;
    s->csize_shift = 62 - (s->cluster_bits - 8);
    s->csize_mask = (1ULL << (s->cluster_bits - 8)) - 1;
    s->cluster_offset_mask = (1ULL << s->csize_shift) - 1;
    s->refcount_bits = 1u << s->hdr.refcount_order;
    s->refblock_bits = s->cluster_bits + 3 - s->hdr.refcount_order;
    s->refcount_max = s->refcount_bits == 64 ? UINT64_MAX : (1ULL << s->refcount_bits) - 1;
    s->l2_slice_size = (uint32_t)MIN(s->cluster_size, (uint64_t)L2_SLICE_MAX);
    s->l2_slice_entries = s->l2_slice_size / s->l2_entry_size;
    s->l1_size = s->hdr.l1_size;
    s->l1_offset = s->hdr.l1_table_offset;
    s->lazy_refcounts = s->hdr.compatible_features & QCOW2_COMPAT_LAZY_REFCOUNTS;
}

int qcow2_make_caches(struct qcow2_state *s, uint64_t l2_cache_bytes)
{
    /* Default: enough L2 to map the whole image, at most 32 MiB. */
    uint64_t whole = ((s->hdr.size + s->cluster_size - 1) >> s->cluster_bits) * s->l2_entry_size;
    uint64_t bytes = l2_cache_bytes ? l2_cache_bytes : MIN(whole, (uint64_t)DEFAULT_L2_CACHE_MAX);
    unsigned l2_entries = (unsigned)MAX(bytes / s->l2_slice_size, (uint64_t)MIN_L2_CACHE_ENTRIES);
    unsigned rb_entries =
        (unsigned)MAX(bytes / 4 / s->cluster_size, (uint64_t)MIN_RB_CACHE_ENTRIES);
    int r = qcow2_cache_new(&s->l2_cache, s->file, s->l2_slice_size, l2_entries);

    if (r == 0) {
        r = qcow2_cache_new(&s->rb_cache, s->file, (uint32_t)s->cluster_size, rb_entries);
    }
    if (r == 0) {
        qcow2_writeback_setup_caches(s);
    }
    return r;
}

int qcow2_build_metadata_map_locked(struct qcow2_state *s)
{
    int r = qcow2_reset_metadata_locked(s);

    if (r == 0) {
        r = qcow2_add_l1_metadata_locked(s);
    }
    if (r == 0) {
        r = qcow2_add_refcount_metadata_locked(s);
    }
    if (r == 0) {
        r = qcow2_add_l2_metadata_locked(s);
    }
    if (r == 0) {
        r = qcow2_add_snapshot_metadata_locked(s);
    }
    if (r == 0) {
        r = qcow2_add_snapshot_l1_metadata_locked(s);
        if (r == -EINVAL) {
            return r; /* the message names the snapshot */
        }
    }
    if (r == 0) {
        r = qcow2_add_bitmap_metadata_locked(s);
    }
    if (r < 0) {
        err_prefix("qcow2: the image is corrupt");
    }
    return r;
}
