/* formats/qcow2/upgrade.c: amend -o compat=1.1 on a version 2 image.
 *
 * Version 3 requires every snapshot to record its VM state size in 64
 * bits and its disk size (16 bytes of extra data); qemu before 4.2 wrote
 * v2 snapshots with less.  Such a table is rewritten, as qemu-img does,
 * into new clusters, written and synced; then one header write says
 * version 3 and points at the new table together; the old table's
 * clusters are freed after.  A crash leaves the v2 image with its old
 * table, or the v3 one with the new, at worst with leaked clusters.
 *
 * Order (qcow2.h): above downgrade.c; calls refcount, writeback, overlap
 * and open (the metadata map). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "qcow2.h"

#define SN_FIXED 40
#define SN_V3_EXTRA 16

/* The table with every entry's extra data at least SN_V3_EXTRA bytes.
 * The table was read and bounded at open: each entry lies inside it. */
static int widen_table(struct qcow2_state *s, const uint8_t *old, uint8_t **out, uint64_t *len,
                       bool *changed)
{
    uint64_t pos = 0, npos = 0;
    uint8_t *t = calloc(1, s->snapshots_bytes + (uint64_t)s->n_snapshots * (SN_V3_EXTRA + 8));

    if (!t) {
        return err_set(ENOMEM, "qcow2: snapshot table");
    }
    *changed = false;
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        const uint8_t *e = old + pos;
        uint32_t extra = qcow2_rd32(e + 36), names = qcow2_rd16(e + 12) + qcow2_rd16(e + 14);
        uint32_t nextra = MAX(extra, (uint32_t)SN_V3_EXTRA);
        uint8_t *n = t + npos;

        memcpy(n, e, SN_FIXED + extra);
        qcow2_wr32(n + 36, nextra);
        if (extra < 8) {
            qcow2_wr64(n + SN_FIXED, qcow2_rd32(e + 32)); /* the 32-bit VM state size */
        }
        if (extra < 16) {
            qcow2_wr64(n + SN_FIXED + 8, s->snapshots[i].disk_size); /* the image's size */
        }
        memcpy(n + SN_FIXED + nextra, e + SN_FIXED + extra, names);
        *changed = *changed || extra < SN_V3_EXTRA;
        pos += ROUND_UP(SN_FIXED + (uint64_t)extra + names, 8);
        npos += ROUND_UP(SN_FIXED + (uint64_t)nextra + names, 8);
    }
    if (npos > QCOW2_MAX_SNAPSHOT_TABLE_BYTES) {
        free(t);
        return err_setx(EFBIG, "qcow2: the snapshot table would exceed 64 MiB");
    }
    *out = t;
    *len = npos;
    return 0;
}

/* Write the new table into new clusters and sync: nothing points at it. */
static int write_table_locked(struct qcow2_state *s, const uint8_t *t, uint64_t len,
                              uint64_t *offset)
{
    uint64_t bytes = ROUND_UP(len, s->cluster_size);
    int r = qcow2_alloc_clusters_locked(s, bytes / s->cluster_size, offset);

    if (r < 0) {
        return r;
    }
    if (qcow2_overlaps_metadata_locked(s, *offset, bytes)) {
        return qcow2_mark_corrupt_locked(s, "new snapshot table at 0x%" PRIx64 " overlaps metadata",
                                         *offset);
    }
    CLEANUP_FREE uint8_t *buf = calloc(1, bytes);
    if (!buf) {
        r = err_set(ENOMEM, "qcow2: snapshot table");
    } else {
        memcpy(buf, t, len);
        r = blk_pwrite(s->file, *offset, buf, bytes, 0);
    }
    if (r == 0) {
        r = qcow2_commit_refcounts_locked(s);
    }
    if (r < 0) {
        (void)qcow2_update_refcount_locked(s, *offset, bytes, -1);
    }
    return r;
}

int qcow2_upgrade_locked(struct qcow2_state *s)
{
    CLEANUP_FREE uint8_t *old = NULL;
    CLEANUP_FREE uint8_t *t = NULL;
    uint64_t len = 0, offset = 0, old_off = s->hdr.snapshots_offset;
    uint64_t old_bytes = ROUND_UP(s->snapshots_bytes, s->cluster_size);
    bool changed = false;
    int r = 0;

    if (s->n_snapshots) {
        old = malloc(s->snapshots_bytes);
        if (!old) {
            return err_set(ENOMEM, "qcow2: snapshot table");
        }
        r = blk_pread(s->file, old_off, old, s->snapshots_bytes);
        if (r == 0) {
            r = widen_table(s, old, &t, &len, &changed);
        }
        if (r == 0 && changed) {
            r = write_table_locked(s, t, len, &offset);
        }
        if (r < 0) {
            return r;
        }
    }
    s->hdr.version = 3;
    if (changed) {
        s->hdr.snapshots_offset = offset;
    }
    r = qcow2_commit_header_locked(s);
    if (r < 0) {
        s->hdr.version = 2;
        s->hdr.snapshots_offset = old_off;
        return r;
    }
    if (!changed) {
        return 0;
    }
    s->snapshots_bytes = len;
    r = qcow2_build_metadata_map_locked(s);
    /* Unreferenced now: a crash before this only leaks them. */
    if (r == 0) {
        r = qcow2_update_refcount_locked(s, old_off, old_bytes, -1);
    }
    return r == 0 ? qcow2_commit_refcounts_locked(s) : r;
}
