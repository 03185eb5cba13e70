/* block/create.c: creating images.  The generic part creates (or
 * truncates) the file and hands the empty protocol node to the format
 * driver's create op. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "driver.h"

const char *blk_create_options_help(const char *format)
{
    const struct blk_driver *drv = blk_find_driver(format);

    return drv ? drv->create_help : NULL;
}

int blk_create(const struct blk_create_opts *o, char **summary)
{
    const struct blk_driver *drv = blk_find_driver(o->format);
    struct blk_open_opts fo = {.filename = o->filename};
    struct blk_node *file = NULL;
    int fd, r;

    *summary = NULL;
    if (!drv || !drv->is_format || !drv->create) {
        return err_setx(EINVAL, "unknown image format '%s' (raw, qcow2)", o->format);
    }
    if (!blk_protocol_for(o->filename)) {
        return -EPROTONOSUPPORT; /* a URL: not a file to create */
    }
    if (drv->create_check && (r = drv->create_check(o)) < 0) {
        return r; /* an existing file stays as it was */
    }
    fd = open(o->filename, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return err_set(errno, "%s", o->filename);
    }
    close(fd);
    r = blk_node_open(&file, blk_find_driver("file"), NULL, &fo);
    if (r < 0) {
        return r;
    }
    file->growable = true;
    r = drv->create(file, o, summary);
    if (r == 0) {
        r = blk_flush(file);
    }
    blk_node_close(file);
    if (r < 0) {
        unlink(o->filename); /* no half-formatted image, as qemu-img does */
    }
    return r;
}
