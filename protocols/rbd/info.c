/* protocols/rbd/info.c: what qemu-img info shows of an rbd image: the
 * object size as cluster_size, and the image's RBD snapshots in the
 * snapshot list, as qemu's rbd driver reports them (ID and tag are the
 * snapshot's name, the "VM size" its size; no dates). */
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
    return list_snapshots(d, info);
}
