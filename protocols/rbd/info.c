/* protocols/rbd/info.c: what qemu-img info shows of an rbd image: the
 * object size as cluster_size, and the image's RBD snapshots in the
 * snapshot list, as qemu's rbd driver reports them (ID and tag are the
 * snapshot's name, the "VM size" its size; no dates).  The snapshot
 * subcommand creates, rolls back to and removes them, as qemu-img
 * snapshot does on rbd images. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "rbd.h"

#define MAX_LISTED 1000

static int list_snapshots(struct rbd_drv *d, struct blk_image_info *info)
{
    int max = 16, n;
    rbd_snap_info_t *snaps = NULL;

    for (;;) {
        free(snaps);
        snaps = calloc((size_t)max, sizeof *snaps);
        if (!snaps) {
            return err_set(ENOMEM, "%s: listing snapshots", d->label);
        }
        n = rbd_snap_list(d->image, snaps, &max);
        if (n != -ERANGE || max > MAX_LISTED) {
            break;
        }
    }
    if (n < 0) {
        free(snaps);
        return rbd_error(d, n, "listing snapshots");
    }
    info->snapshots = calloc((size_t)n + 1, sizeof *info->snapshots);
    if (!info->snapshots) {
        rbd_snap_list_end(snaps);
        free(snaps);
        return err_set(ENOMEM, "%s: listing snapshots", d->label);
    }
    for (int i = 0; i < n; i++) {
        struct blk_snapshot_info *s = &info->snapshots[info->n_snapshots];
        s->id = strdup(snaps[i].name);
        s->name = strdup(snaps[i].name);
        s->vm_state_size = snaps[i].size;
        info->n_snapshots++;
        if (!s->id || !s->name) {
            rbd_snap_list_end(snaps);
            free(snaps);
            return err_set(ENOMEM, "%s: listing snapshots", d->label);
        }
    }
    rbd_snap_list_end(snaps);
    free(snaps);
    return 0;
}

int rbd_get_info(struct blk_node *n, struct blk_image_info *info)
{
    struct rbd_drv *d = n->opaque;

    info->cluster_size = d->object_size;
    info->specific = true; /* qemu: {"type": "rbd", "data": {}} (no encryption) */
    return list_snapshots(d, info);
}

/* The snapshot named name exists (qemu's IDs of rbd snapshots are their
 * names, so an ID is a name too). */
static bool snapshot_exists(struct rbd_drv *d, const char *name)
{
    uint64_t id;

    return rbd_snap_get_id(d->image, name, &id) == 0;
}

int rbd_snapshot(struct blk_node *n, enum blk_snapshot_op op, const char *name)
{
    struct rbd_drv *d = n->opaque;
    int r;

    if (op != BLK_SNAPSHOT_CREATE && !snapshot_exists(d, name)) {
        return err_setx(ENOENT, "%s: no snapshot '%s'", d->label, name);
    }
    atomic_fetch_add(&d->write_gen, 1); /* rollback changes the data */
    switch (op) {
    case BLK_SNAPSHOT_CREATE:
        r = rbd_snap_create(d->image, name);
        return r < 0 ? rbd_error(d, r, "creating the snapshot") : 0;
    case BLK_SNAPSHOT_APPLY:
        r = rbd_snap_rollback(d->image, name);
        return r < 0 ? rbd_error(d, r, "rolling back to the snapshot") : 0;
    case BLK_SNAPSHOT_DELETE:
        r = rbd_snap_remove(d->image, name);
        if (r == -EBUSY) {
            return err_setx(EBUSY, "%s: snapshot '%s' is protected (rbd snap unprotect)", d->label,
                            name);
        }
        return r < 0 ? rbd_error(d, r, "removing the snapshot") : 0;
    }
    return err_setx(EINVAL, "%s: unknown snapshot operation", d->label);
}
