/* formats/qcow2/snapshot.c: the internal snapshot table (read side).
 *
 * The table is parsed and validated at open, as qemu does: every length
 * is bounded before it is used, and the whole table is limited to 64 MiB.
 * A snapshot can be served read-only by switching to its L1 table.
 *
 * Order (qcow2.h): above cluster.c, which loads a snapshot's L1 table;
 * calls cluster, overlap, header. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"

#define SN_FIXED 40

void qcow2_free_snapshots(struct qcow2_state *s)
{
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        free(s->snapshots[i].id);
        free(s->snapshots[i].name);
    }
    free(s->snapshots);
    s->snapshots = NULL;
    s->n_snapshots = 0;
}

static char *sn_string(const uint8_t *p, uint16_t len)
{
    char *str;

    if (memchr(p, '\0', len)) {
        return NULL;
    }
    str = malloc((size_t)len + 1);
    if (str) {
        memcpy(str, p, len);
        str[len] = '\0';
    }
    return str;
}

/* Make sure buf holds [0, need) of the table, reading more as needed. */
static int sn_fill(struct qcow2_state *s, uint8_t **buf, uint64_t *have, uint64_t need,
                   uint64_t file_size)
{
    uint64_t want;
    uint8_t *p;
    int r;

    if (need <= *have) {
        return 0;
    }
    if (need > QCOW2_MAX_SNAPSHOT_TABLE_BYTES) {
        return err_setx(EFBIG, "qcow2: snapshot table exceeds 64 MiB");
    }
    if (s->hdr.snapshots_offset + need > file_size) {
        return err_setx(EINVAL, "qcow2: snapshot table runs past the end of the file");
    }
    want = MIN(MAX(need, *have * 2), (uint64_t)QCOW2_MAX_SNAPSHOT_TABLE_BYTES);
    want = MIN(want, file_size - s->hdr.snapshots_offset);
    p = realloc(*buf, want);
    if (!p) {
        return err_set(ENOMEM, "qcow2: snapshot table");
    }
    *buf = p;
    r = blk_pread(s->file, s->hdr.snapshots_offset + *have, p + *have, want - *have);
    if (r < 0) {
        return r;
    }
    *have = want;
    return 0;
}

static int sn_parse_one(struct qcow2_state *s, const uint8_t *e, uint64_t file_size,
                        struct qcow2_snapshot *sn, uint32_t index)
{
    uint32_t extra = qcow2_rd32(e + 36);
    uint16_t id_len = qcow2_rd16(e + 12), name_len = qcow2_rd16(e + 14);
    const uint8_t *x = e + SN_FIXED;

    sn->l1_table_offset = qcow2_rd64(e);
    sn->l1_size = qcow2_rd32(e + 8);
    sn->date_sec = qcow2_rd32(e + 16);
    sn->date_nsec = qcow2_rd32(e + 20);
    sn->vm_clock_nsec = qcow2_rd64(e + 24);
    sn->vm_state_size = qcow2_rd32(e + 32);
    sn->disk_size = s->hdr.size;
    sn->icount = -1;
    if (extra >= 8) {
        sn->vm_state_size = qcow2_rd64(x);
    }
    if (extra >= 16) {
        sn->disk_size = qcow2_rd64(x + 8);
    }
    if (extra >= 24) {
        sn->icount = (int64_t)qcow2_rd64(x + 16);
    }
    if ((uint64_t)sn->l1_size * 8 > QCOW2_MAX_L1_BYTES) {
        return err_setx(
            EFBIG, "qcow2: snapshot %" PRIu32 ": L1 table of %" PRIu32 " entries exceeds 32 MiB",
            index, sn->l1_size);
    }
    /* Aligned, inside the file, and not at offset 0 (the header). */
    if (sn->l1_size && ((sn->l1_table_offset & (s->cluster_size - 1)) || sn->l1_table_offset == 0 ||
                        sn->l1_table_offset > file_size ||
                        (uint64_t)sn->l1_size * 8 > file_size - sn->l1_table_offset)) {
        return err_setx(EINVAL,
                        "qcow2: snapshot %" PRIu32 ": L1 table offset 0x%" PRIx64 " is invalid",
                        index, sn->l1_table_offset);
    }
    if (sn->disk_size > INT64_MAX / 2 ||
        qcow2_l1_entries_for(sn->disk_size, s->cluster_bits, s->extended_l2) > sn->l1_size) {
        return err_setx(EINVAL, "qcow2: snapshot %" PRIu32 ": L1 table too small for its size",
                        index);
    }
    sn->id = sn_string(x + extra, id_len);
    sn->name = sn_string(x + extra + id_len, name_len);
    if (!sn->id || !sn->name) {
        return err_setx(EINVAL, "qcow2: snapshot %" PRIu32 ": id or name contains a NUL byte",
                        index);
    }
    return 0;
}

int qcow2_read_snapshots(struct qcow2_state *s)
{
    uint32_t n = s->hdr.nb_snapshots;
    int64_t file_size = blk_get_length(s->file);
    CLEANUP_FREE uint8_t *buf = NULL;
    uint64_t have = 0, pos = 0;
    int r = 0;

    if (n == 0) {
        return 0;
    }
    if (file_size < 0) {
        return (int)file_size;
    }
    s->snapshots = calloc(n, sizeof *s->snapshots);
    if (!s->snapshots) {
        return err_set(ENOMEM, "qcow2: %" PRIu32 " snapshots", n);
    }
    for (uint32_t i = 0; i < n; i++) {
        r = sn_fill(s, &buf, &have, pos + SN_FIXED, (uint64_t)file_size);
        if (r < 0) {
            break;
        }
        uint32_t extra = qcow2_rd32(buf + pos + 36);
        uint64_t entry_len =
            SN_FIXED + (uint64_t)extra + qcow2_rd16(buf + pos + 12) + qcow2_rd16(buf + pos + 14);
        if (extra > QCOW2_MAX_SNAPSHOT_EXTRA) {
            r = err_setx(EINVAL,
                         "qcow2: snapshot %" PRIu32 ": extra data of %" PRIu32 " bytes exceeds %d",
                         i, extra, QCOW2_MAX_SNAPSHOT_EXTRA);
            break;
        }
        r = sn_fill(s, &buf, &have, pos + entry_len, (uint64_t)file_size);
        if (r < 0) {
            break;
        }
        s->n_snapshots = i + 1;
        r = sn_parse_one(s, buf + pos, (uint64_t)file_size, &s->snapshots[i], i);
        if (r < 0) {
            break;
        }
        pos += ROUND_UP(entry_len, 8);
    }
    if (r < 0) {
        qcow2_free_snapshots(s);
        return r;
    }
    s->snapshots_bytes = pos;
    return 0;
}

/* The snapshot table: an owner's part of the metadata map. */
int qcow2_add_snapshot_metadata_locked(struct qcow2_state *s)
{
    if (s->n_snapshots == 0) {
        return 0;
    }
    return qcow2_add_metadata_locked(s, s->hdr.snapshots_offset,
                                     ROUND_UP(s->snapshots_bytes, s->cluster_size),
                                     QCOW2_META_SNAPSHOTS);
}

/* The snapshots' L1 tables.  An overlap fails with a message that names the
 * snapshot and needs no prefix. */
int qcow2_add_snapshot_l1_metadata_locked(struct qcow2_state *s)
{
    uint64_t cs = s->cluster_size;
    int r = 0;

    for (uint32_t i = 0; r == 0 && i < s->n_snapshots; i++) {
        const struct qcow2_snapshot *sn = &s->snapshots[i];
        if (sn->l1_size && sn->l1_table_offset != s->l1_offset) {
            r = qcow2_add_metadata_locked(s, sn->l1_table_offset,
                                          ROUND_UP((uint64_t)sn->l1_size * 8, cs),
                                          QCOW2_META_SNAPSHOT_L1);
            if (r == -EINVAL) {
                /* Snapshot L1 tables may share clusters with each other
                 * only through refcounts, never overlap active metadata.
                 * Named by index: a name may hold any byte, newlines too. */
                return err_setx(EINVAL,
                                "qcow2: the L1 table of snapshot %" PRIu32 " overlaps other "
                                "metadata",
                                i);
            }
        }
    }
    return r;
}

int qcow2_load_snapshot_l1(struct qcow2_state *s, const char *name_or_id)
{
    const struct qcow2_snapshot *sn = NULL;

    for (uint32_t i = 0; i < s->n_snapshots && !sn; i++) {
        if (strcmp(s->snapshots[i].id, name_or_id) == 0) {
            sn = &s->snapshots[i];
        }
    }
    for (uint32_t i = 0; i < s->n_snapshots && !sn; i++) {
        if (strcmp(s->snapshots[i].name, name_or_id) == 0) {
            sn = &s->snapshots[i];
        }
    }
    if (!sn) {
        return err_setx(ENOENT, "qcow2: no snapshot named '%s'", name_or_id);
    }
    s->l1_offset = sn->l1_table_offset;
    s->l1_size = sn->l1_size;
    s->hdr.size = sn->disk_size;
    s->snapshot_view = true;
    return qcow2_load_l1(s);
}
