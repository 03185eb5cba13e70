/* block/file-open.c: the one way a local image file is opened (see
 * file-open.h). */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "file-open.h"

int blk_file_open_checked(const char *path, int flags, int *fd, struct stat *st)
{
    /* The path may come from an image: quoted escaped. */
    CLEANUP_FREE char *esc = str_escape(path);
    const char *name = esc ? esc : "?";
    struct stat pre;

    /* Opening a device can act on it (a tape rewinds): refuse before. */
    if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode) && !S_ISBLK(pre.st_mode)) {
        return err_setx(EINVAL, "%s is not a regular file or a block device", name);
    }
    *fd = open(path, flags | O_NONBLOCK | O_NOCTTY);
    if (*fd < 0 && errno == EINVAL && (flags & O_DIRECT)) {
        return err_setx(EINVAL,
                        "%s: the file system does not support O_DIRECT "
                        "(needed by cache=none and cache=directsync)",
                        name);
    }
    if (*fd < 0) {
        return err_set(errno, "%s", name);
    }
    if (fstat(*fd, st) < 0) {
        return err_set(errno, "%s: fstat", name);
    }
    if (!S_ISREG(st->st_mode) && !S_ISBLK(st->st_mode)) {
        return err_setx(EINVAL, "%s is not a regular file or a block device", name);
    }
    if (fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) < 0) {
        return err_set(errno, "%s: fcntl", name);
    }
    return 0;
}
