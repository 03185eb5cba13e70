/* formats/qcow2/info.c: what `info` shows of a qcow2 image: backing
 * file, snapshots, bitmaps and the format-specific fields, in qemu-img's
 * order.
 *
 * Order (qcow2.h): above alloc.c; calls bitmap and backing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "qcow2.h"

static void info_field(struct blk_image_info *info, struct blk_info_field f)
{
    if (info->n_fields < BLK_INFO_MAX_FIELDS) {
        info->fields[info->n_fields++] = f;
    }
}

int qcow2_get_info(struct blk_node *n, struct blk_image_info *info)
{
    struct qcow2_state *s = n->opaque;
    const struct qcow2_header *h = &s->hdr;

    info->cluster_size = s->cluster_size;
    info->dirty = h->incompatible_features & QCOW2_INCOMPAT_DIRTY;
    if (h->backing_file) {
        info->backing_file = strdup(h->backing_file);
        if (h->backing_format) {
            info->backing_format = strdup(h->backing_format);
        }
        int r = qcow2_backing_path(s, &info->full_backing_file);
        if (r < 0) {
            /* no path at all where qemu cannot make one (NBD) */
            info->full_backing_file = r == -ENOTDIR ? NULL : strdup(h->backing_file);
            err_clear();
        }
    }
    info->snapshots = calloc(s->n_snapshots ? s->n_snapshots : 1, sizeof *info->snapshots);
    if (!info->snapshots) {
        return err_set(ENOMEM, "qcow2: snapshot list");
    }
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        const struct qcow2_snapshot *sn = &s->snapshots[i];
        info->snapshots[i] = (struct blk_snapshot_info){
            .id = strdup(sn->id),
            .name = strdup(sn->name),
            .vm_state_size = sn->vm_state_size,
            .date_sec = sn->date_sec,
            .date_nsec = sn->date_nsec,
            .vm_clock_nsec = sn->vm_clock_nsec,
            .icount = sn->icount,
        };
    }
    info->n_snapshots = s->n_snapshots;
    if (qcow2_bitmaps_info(s, info) < 0) {
        return -ENOMEM;
    }
    /* The fields qemu-img prints, in its order; version 2 has fewer. */
    bool v3 = h->version >= 3;
    info_field(info,
               (struct blk_info_field){"compat", "compat", BLK_INFO_STR, .s = v3 ? "1.1" : "0.10"});
    info_field(info, (struct blk_info_field){"compression-type", "compression type", BLK_INFO_STR,
                                             .s = h->compression_type ? "zstd" : "zlib"});
    if (v3) {
        info_field(info, (struct blk_info_field){"lazy-refcounts", "lazy refcounts", BLK_INFO_BOOL,
                                                 .b = s->lazy_refcounts});
    }
    if (info->n_bitmaps) {
        info_field(info, (struct blk_info_field){"bitmaps", "bitmaps", BLK_INFO_BITMAPS});
    }
    info_field(info, (struct blk_info_field){"refcount-bits", "refcount bits", BLK_INFO_INT,
                                             .i = s->refcount_bits});
    if (v3) {
        info_field(info,
                   (struct blk_info_field){"corrupt", "corrupt", BLK_INFO_BOOL,
                                           .b = h->incompatible_features & QCOW2_INCOMPAT_CORRUPT});
        info_field(info, (struct blk_info_field){"extended-l2", "extended l2", BLK_INFO_BOOL,
                                                 .b = s->extended_l2});
    }
    return 0;
}
