/* formats/qcow2/snapshot-write.c: creating, applying and deleting internal
 * snapshots (qemu-img snapshot -c, -a, -d).  The table is read at open by
 * snapshot.c; this file changes it.
 *
 * Each operation describes the new state (L1 tables, snapshot list and
 * table) in a struct qcow2_shadow and lets snapshot-shadow.c write it
 * crash-safely and switch to it; see there.
 *
 * Order (qcow2.h): above snapshot-shadow.c; calls it, open and snapshot. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"
#include "refcount-math.h"
#include "snapshot-shadow.h"

#define SN_FIXED 40
#define SN_EXTRA 24     /* vm_state_size_large, disk_size, icount: what qemu writes */
#define SN_MAX_NAME 255 /* qemu-img keeps the first 255 bytes of a name */

/* The on-disk table as it is, entry by entry (its bounds were checked at
 * open): entries are kept byte for byte, unknown extra data included. */
static int read_table(struct qcow2_state *s, uint8_t **buf, uint64_t **starts)
{
    uint64_t bytes = s->snapshots_bytes, pos = 0;

    *buf = malloc(bytes ? bytes : 1);
    *starts = malloc(((size_t)s->n_snapshots + 1) * sizeof **starts);
    if (!*buf || !*starts) {
        return err_set(ENOMEM, "qcow2: snapshot table");
    }
    int r = bytes ? blk_pread(s->file, s->hdr.snapshots_offset, *buf, bytes) : 0;
    for (uint32_t i = 0; r == 0 && i < s->n_snapshots; i++) {
        const uint8_t *e = *buf + pos;
        if (pos + SN_FIXED > bytes) {
            return err_setx(EINVAL, "qcow2: the snapshot table changed under us");
        }
        (*starts)[i] = pos;
        pos += ROUND_UP(
            SN_FIXED + (uint64_t)qcow2_rd32(e + 36) + qcow2_rd16(e + 12) + qcow2_rd16(e + 14), 8);
    }
    (*starts)[s->n_snapshots] = pos;
    return r < 0 ? r : (pos == bytes ? 0 : err_setx(EINVAL, "qcow2: the snapshot table changed"));
}

/* The table without entry 'skip' (-1: none), plus 'add' (NULL: none). */
static int put_table(struct qcow2_shadow *x, int64_t skip, const uint8_t *add, uint64_t add_len)
{
    struct qcow2_state *s = x->s;
    CLEANUP_FREE uint8_t *old = NULL;
    CLEANUP_FREE uint64_t *starts = NULL;
    int r = read_table(s, &old, &starts);

    if (r < 0) {
        return r;
    }
    CLEANUP_FREE uint8_t *t = malloc(s->snapshots_bytes + add_len + 1);
    uint64_t len = 0;
    if (!t) {
        return err_set(ENOMEM, "qcow2: snapshot table");
    }
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        if ((int64_t)i != skip) {
            memcpy(t + len, old + starts[i], starts[i + 1] - starts[i]);
            len += starts[i + 1] - starts[i];
        }
    }
    if (add) {
        memcpy(t + len, add, add_len);
        len += add_len;
    }
    if (len > QCOW2_MAX_SNAPSHOT_TABLE_BYTES) {
        return err_setx(EFBIG, "qcow2: the snapshot table would exceed 64 MiB");
    }
    x->table_bytes = len;
    x->table_offset = 0;
    return len ? qcow2_shadow_put(x, t, len, &x->table_offset) : 0;
}

/* One table entry as qemu-img writes it: no VM state, VM clock 0,
 * icount 0, the current time with microseconds. */
static uint64_t encode_entry(uint8_t *e, const struct qcow2_snapshot *sn)
{
    size_t id_len = strlen(sn->id), name_len = strlen(sn->name);
    uint64_t len = ROUND_UP(SN_FIXED + SN_EXTRA + id_len + name_len, 8);

    memset(e, 0, len);
    qcow2_wr64(e, sn->l1_table_offset);
    qcow2_wr32(e + 8, sn->l1_size);
    e[12] = (uint8_t)(id_len >> 8);
    e[13] = (uint8_t)id_len;
    e[14] = (uint8_t)(name_len >> 8);
    e[15] = (uint8_t)name_len;
    qcow2_wr32(e + 16, sn->date_sec);
    qcow2_wr32(e + 20, sn->date_nsec);
    qcow2_wr64(e + 24, sn->vm_clock_nsec);
    qcow2_wr32(e + 32, (uint32_t)sn->vm_state_size);
    qcow2_wr32(e + 36, SN_EXTRA);
    qcow2_wr64(e + SN_FIXED, sn->vm_state_size);
    qcow2_wr64(e + SN_FIXED + 8, sn->disk_size);
    qcow2_wr64(e + SN_FIXED + 16, (uint64_t)sn->icount);
    memcpy(e + SN_FIXED + SN_EXTRA, sn->id, id_len);
    memcpy(e + SN_FIXED + SN_EXTRA + id_len, sn->name, name_len);
    return len;
}

/* ---- the three operations ---- */

static int find_by_name(const struct qcow2_state *s, const char *name)
{
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        if (strcmp(s->snapshots[i].name, name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* qemu's order for -a: an id first, then a name. */
static int find_by_id_or_name(const struct qcow2_state *s, const char *name)
{
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        if (strcmp(s->snapshots[i].id, name) == 0) {
            return (int)i;
        }
    }
    return find_by_name(s, name);
}

static int copy_active_l1(struct qcow2_shadow *x, uint32_t size)
{
    struct qcow2_state *s = x->s;

    x->l1 = calloc(size ? size : 1, 8);
    if (!x->l1) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", size);
    }
    for (uint32_t i = 0; i < s->l1_size && i < size; i++) {
        x->l1[i] = s->l1[i] & ~QCOW_OFLAG_COPIED;
    }
    x->l1_size = size;
    return 0;
}

static int snapshot_create_locked(struct qcow2_shadow *x, const char *name)
{
    struct qcow2_state *s = x->s;
    char id[24], trimmed[SN_MAX_NAME + 1];
    unsigned long max_id = 0;
    struct timespec now;
    int r;

    if (s->n_snapshots >= QCOW2_MAX_SNAPSHOTS) {
        return err_setx(EFBIG, "qcow2: %s already has %d snapshots", ESC_NAME(s->node),
                        QCOW2_MAX_SNAPSHOTS);
    }
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        unsigned long v = strtoul(s->snapshots[i].id, NULL, 10);
        max_id = MAX(max_id, v);
    }
    snprintf(id, sizeof id, "%lu", max_id + 1);
    snprintf(trimmed, sizeof trimmed, "%s", name);
    clock_gettime(CLOCK_REALTIME, &now);

    /* The snapshot's L1 table: the active one, pointing at the tables as
     * they are. */
    r = copy_active_l1(x, s->l1_size);
    struct qcow2_snapshot sn = {
        .l1_size = s->l1_size,
        .id = id,
        .name = trimmed,
        .date_sec = (uint32_t)now.tv_sec,
        .date_nsec = (uint32_t)(now.tv_nsec / 1000 * 1000),
        .disk_size = s->hdr.size,
        .icount = 0,
    };
    if (r == 0) {
        r = qcow2_shadow_put_l1(x, x->l1, x->l1_size, &sn.l1_table_offset);
    }
    if (r < 0) {
        return r;
    }
    uint8_t entry[SN_FIXED + SN_EXTRA + sizeof id + sizeof trimmed + 8];
    uint64_t len = encode_entry(entry, &sn);
    r = put_table(x, -1, entry, len);
    if (r < 0) {
        return r;
    }
    x->snaps = malloc(((size_t)s->n_snapshots + 1) * sizeof *x->snaps);
    x->own_snaps = true;
    if (!x->snaps) {
        return err_set(ENOMEM, "qcow2: snapshot list");
    }
    if (s->n_snapshots) {
        memcpy(x->snaps, s->snapshots, s->n_snapshots * sizeof *x->snaps);
    }
    x->snaps[s->n_snapshots] = sn;
    x->n_snaps = s->n_snapshots + 1;
    x->size = s->hdr.size;
    return qcow2_shadow_commit_locked(x);
}

/* The snapshot's L1 table, checked as open checks the active one. */
static int read_snapshot_l1(struct qcow2_shadow *x, const struct qcow2_snapshot *sn)
{
    struct qcow2_state *s = x->s;
    uint32_t size = MAX(s->l1_size, sn->l1_size);
    uint64_t dup;
    int r;

    x->l1 = calloc(size ? size : 1, 8);
    if (!x->l1) {
        return err_set(ENOMEM, "qcow2: L1 table of %" PRIu32 " entries", size);
    }
    x->l1_size = size;
    r = sn->l1_size ? blk_pread(s->file, sn->l1_table_offset, x->l1, (uint64_t)sn->l1_size * 8) : 0;
    for (uint32_t i = 0; r == 0 && i < sn->l1_size; i++) {
        uint64_t e = be64toh(x->l1[i]);
        if ((e & L1E_RESERVED_MASK) || (e & L1E_OFFSET_MASK & (s->cluster_size - 1))) {
            return err_setx(EINVAL, "qcow2: snapshot '%s': L1 entry %" PRIu32 " is invalid", sn->id,
                            i);
        }
        x->l1[i] = e & ~QCOW_OFLAG_COPIED;
    }
    if (r == 0) {
        r = qcow2_l1_duplicate(x->l1, x->l1_size, false, &dup);
    }
    if (r > 0) {
        return err_setx(EINVAL, "qcow2: snapshot '%s' names the L2 table at 0x%" PRIx64 " twice",
                        sn->id, dup);
    }
    return r;
}

static int snapshot_apply_locked(struct qcow2_shadow *x, const char *name)
{
    struct qcow2_state *s = x->s;
    int i = find_by_id_or_name(s, name);
    int r;

    if (i < 0) {
        return err_setx(ENOENT, "Failed to load snapshot: No such file or directory");
    }
    const struct qcow2_snapshot *sn = &s->snapshots[i];
    if (sn->disk_size != s->hdr.size && s->n_bitmaps) {
        return err_setx(ENOTSUP,
                        "qcow2: %s has persistent bitmaps, and the snapshot's size differs: "
                        "remove the bitmaps first",
                        ESC_NAME(s->node));
    }
    r = read_snapshot_l1(x, sn);
    if (r < 0) {
        return r;
    }
    x->size = sn->disk_size;
    x->snaps = s->snapshots; /* the table stays as it is */
    x->n_snaps = s->n_snapshots;
    x->table_offset = s->n_snapshots ? s->hdr.snapshots_offset : 0;
    x->table_bytes = s->snapshots_bytes;
    return qcow2_shadow_commit_locked(x);
}

static int snapshot_delete_locked(struct qcow2_shadow *x, const char *name)
{
    struct qcow2_state *s = x->s;
    int i = find_by_name(s, name);
    int r;

    if (i < 0) {
        return err_setx(ENOENT, "snapshot not found");
    }
    r = put_table(x, i, NULL, 0);
    if (r == 0) {
        r = copy_active_l1(x, s->l1_size);
    }
    if (r < 0) {
        return r;
    }
    x->snaps = malloc(((size_t)s->n_snapshots + 1) * sizeof *x->snaps);
    x->own_snaps = true;
    if (!x->snaps) {
        return err_set(ENOMEM, "qcow2: snapshot list");
    }
    x->n_snaps = 0;
    for (uint32_t k = 0; k < s->n_snapshots; k++) {
        if ((int)k != i) {
            x->snaps[x->n_snaps++] = s->snapshots[k];
        }
    }
    /* The active flags are recomputed from the new counts. */
    for (uint32_t k = 0; k < x->l1_size; k++) {
        x->l1[k] = s->l1[k];
    }
    x->size = s->hdr.size;
    return qcow2_shadow_commit_locked(x);
}

int qcow2_snapshot_op(struct blk_node *n, enum blk_snapshot_op op, const char *name)
{
    struct qcow2_state *s = n->opaque;
    struct qcow2_shadow x = {.s = s};
    int64_t len;
    int r;

    if (s->read_only || s->snapshot_view) {
        return err_setx(EPERM, "%s is read-only", ESC_NAME(n));
    }
    pthread_mutex_lock(&s->lock);
    r = qcow2_check_writable_locked(s);
    if (r == 0) {
        r = qcow2_flush_caches_locked(s); /* the file holds the whole state */
    }
    if (r == 0 && (len = blk_get_length(s->file)) < 0) {
        r = (int)len;
    }
    if (r == 0) {
        x.old_len = (uint64_t)len;
        x.next = ROUND_UP(MAX(x.old_len, s->file_end), s->cluster_size);
        switch (op) {
        case BLK_SNAPSHOT_CREATE:
            r = snapshot_create_locked(&x, name);
            break;
        case BLK_SNAPSHOT_APPLY:
            r = snapshot_apply_locked(&x, name);
            break;
        case BLK_SNAPSHOT_DELETE:
            r = snapshot_delete_locked(&x, name);
            break;
        default:
            r = err_setx(EINVAL, "qcow2: unknown snapshot operation %d", (int)op);
        }
    }
    if (r < 0 && !x.switched && x.next) {
        qcow2_shadow_undo_locked(&x, r);
    }
    pthread_mutex_unlock(&s->lock);
    free(x.l1);
    if (x.own_snaps) {
        free(x.snaps);
    }
    free(x.counts);
    return r;
}
