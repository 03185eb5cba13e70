/* protocols/rbd/create.c: making and removing RBD images (create and
 * convert).  As qemu-img does, creating an image that exists is an error
 * (EEXIST), so nothing a user already has is overwritten; the image gets
 * the pool's default features (exclusive-lock, object-map, fast-diff...)
 * and object size, and the format driver then sizes it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/escape.h"
#include "rbd.h"

/* Connect for d's name (filename, or --image-opts keys). */
static int connect_for(struct rbd_drv *d, const char *filename, const struct blk_kvlist *options)
{
    int r = rbd_drv_name(d, filename, options);

    if (r == 0 && d->name.snap) {
        r = err_setx(EINVAL, "%s: a snapshot cannot be created as an image (rbd snap create)",
                     d->label);
    }
    return r < 0 ? r : rbd_connect(d, false);
}

static void release(struct rbd_drv *d)
{
    rbd_disconnect(d);
    rbd_name_free(&d->name);
    free(d->label);
}

int rbd_create_node(const char *filename, const struct blk_kvlist *options, uint64_t size)
{
    struct rbd_drv d = {0};
    int order = 0;
    int r = connect_for(&d, filename, options);

    if (r == 0) {
        r = rbd_create(d.io, d.name.image, size, &order);
        if (r == -EEXIST) {
            r = err_setx(EEXIST,
                         "%s: the image exists already (remove it with 'rbd rm', or "
                         "write into it with 'diskimg convert -n')",
                         d.label);
        } else if (r < 0) {
            r = rbd_error(&d, r, "creating the image");
        }
    }
    release(&d);
    return r;
}

int rbd_remove_node(const char *filename, const struct blk_kvlist *options)
{
    struct rbd_drv d = {0};
    int r = connect_for(&d, filename, options);

    if (r == 0) {
        r = rbd_remove(d.io, d.name.image);
        if (r < 0) {
            r = rbd_error(&d, r, "removing the image");
        }
    }
    release(&d);
    return r;
}
