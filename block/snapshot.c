/* block/snapshot.c: internal snapshots through the image's format driver
 * (qemu-img snapshot).  The driver does the work and its ordering; this
 * file only checks that the format has snapshots and the image is
 * writable. */
#include <errno.h>

#include "common/error.h"
#include "driver.h"
#include "esc-name.h"

int blk_image_snapshot(struct blk_image *img, enum blk_snapshot_op op, const char *name)
{
    struct blk_node *n = blk_image_root(img);

    /* As qemu does: a format without snapshots of its own (raw) hands the
     * request to its file, whose protocol may keep them (rbd). */
    if (!n->drv->snapshot && n->file && n->file->drv->snapshot) {
        n = n->file;
    }
    if (!n->drv->snapshot) {
        return err_setx(ENOTSUP, "%s: the %s format has no internal snapshots", ESC_NAME(n),
                        n->drv->name);
    }
    if (blk_image_read_only(img)) {
        return err_setx(EPERM, "%s: changing snapshots needs a writable image", ESC_NAME(n));
    }
    return n->drv->snapshot(n, op, name);
}
