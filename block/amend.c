/* block/amend.c: "amend": the generic door to a format's amend op, with
 * qemu-img's refusal for the formats that have none. */
#include <errno.h>

#include "common/error.h"
#include "driver.h"
#include "esc-name.h"

static int no_amend(const char *format)
{
    return err_setx(ENOTSUP, "Format driver '%s' does not support option amendment", format);
}

int blk_image_amend(struct blk_image *img, const char *options, bool force,
                    void (*progress)(void *opaque, uint64_t done, uint64_t total), void *opaque)
{
    struct blk_node *n = blk_image_root(img);

    if (!n->drv->amend) {
        return no_amend(n->drv->name);
    }
    if (blk_image_read_only(img)) {
        return err_setx(EROFS, "%s is opened read-only", ESC_NAME(n));
    }
    return n->drv->amend(n, options, force, progress, opaque);
}

const char *blk_amend_options_help(const char *format)
{
    const struct blk_driver *drv = blk_find_driver(format);

    if (!drv || !drv->is_format) {
        err_setx(EINVAL, "Unknown file format '%s'", format);
        return NULL;
    }
    if (!drv->amend_help) {
        no_amend(format);
        return NULL;
    }
    return drv->amend_help;
}
