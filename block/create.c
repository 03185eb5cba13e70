/* block/create.c: creating images.  The generic part creates (or
 * truncates) the file, locked first as qemu-img create does, and hands
 * the empty protocol node to the format driver's create op. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/url-redact.h"
#include "driver.h"
#include "esc-name.h"
#include "file-lock.h"
#include "file-open.h"

const char *blk_create_options_help(const char *format)
{
    const struct blk_driver *drv = blk_find_driver(format);

    return drv ? drv->create_help : NULL;
}

uint64_t blk_create_time(const struct blk_create_opts *o)
{
    time_t now = time(NULL);

    return o->reproducible ? o->epoch : now > 0 ? (uint64_t)now : 0;
}

/* The formats that can be created, as "raw, qcow2", for messages. */
static void creatable_formats(char *buf, size_t len)
{
    const struct blk_driver *drv;
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; (drv = blk_driver_at(i)) != NULL && used < len; i++) {
        if (drv->is_format && drv->create) {
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", drv->name);
        }
    }
}

/* Open (or create) the file and lock it as a writer that resizes, before
 * anything changes it; then empty it.  An existing file is opened as the
 * file driver opens it, so a character device, FIFO or socket is refused
 * before it is opened.  A file that another process uses stays as it was,
 * and one made here goes again when it cannot be locked.  *removable says
 * whether a failure later may remove it: a regular file only, never a
 * device node. */
static int create_lock_file(const char *filename, struct blk_file_lock **hold, bool *removable)
{
    const struct blk_perms perms = {
        .perm = BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE | BLK_PERM_RESIZE,
        .shared = BLK_PERM_SHARED_DEFAULT,
        .shared_here = BLK_PERM_SHARED_DEFAULT, /* (a hold is not checked here) */
    };
    bool made = true;
    struct stat st = {.st_mode = S_IFREG};
    int fd, r = 0;

    *removable = false;
    fd = open(filename, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
        made = false;
        r = blk_file_open_checked(filename, O_RDWR | O_CLOEXEC, &fd, &st);
    } else if (fd < 0) {
        r = err_set(errno, "%s", ESC_STR(filename));
    }
    if (r < 0) {
        if (fd >= 0) {
            close(fd);
        }
        return r;
    }
    r = blk_file_lock_acquire(hold, fd, filename, &perms, true);
    if (r == 0 && S_ISREG(st.st_mode) && ftruncate(fd, 0) < 0) {
        r = err_set(errno, "%s: truncating", ESC_STR(filename));
    }
    close(fd); /* the lock keeps its own descriptor */
    if (r < 0) {
        blk_file_lock_release(*hold);
        *hold = NULL;
        if (made) {
            unlink(filename);
        }
        return r;
    }
    *removable = S_ISREG(st.st_mode);
    return 0;
}

/* Open the new, empty protocol node and let the format write itself
 * into it, durably. */
static int format_new_node(const struct blk_driver *drv, const struct blk_driver *proto,
                           const struct blk_open_opts *fo, const struct blk_create_opts *o,
                           char **summary)
{
    struct blk_node *file = NULL;
    int r = blk_node_open(&file, proto, NULL, fo);

    if (r < 0) {
        return r;
    }
    file->growable = true;
    r = drv->create(file, o, summary);
    if (r == 0) {
        r = blk_flush(file);
    }
    blk_node_close(file);
    return r;
}

/* An image of a protocol that makes its own (rbd): created empty, then
 * opened as a writer (its lock taken) and formatted; removed again if
 * anything fails.  There is no file lock to keep for the caller. */
static int create_on_protocol(const struct blk_driver *drv, const struct blk_driver *proto,
                              const struct blk_create_opts *o, char **summary)
{
    struct blk_open_opts fo = {
        .filename = o->filename,
        .perms = {.perm = BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE | BLK_PERM_RESIZE,
                  .shared = BLK_PERM_SHARED_DEFAULT,
                  .shared_here = BLK_PERM_SHARED_DEFAULT},
    };
    int r;

    r = proto->create_node(o->filename, NULL, 0);
    if (r < 0) {
        return r;
    }
    r = format_new_node(drv, proto, &fo, o, summary);
    if (r < 0 && proto->remove_node) {
        char saved[512];
        snprintf(saved, sizeof saved, "%s", err_msg());
        proto->remove_node(o->filename, NULL); /* no half-formatted image */
        err_setx(-r, "%s", saved);
    }
    return r;
}

int blk_create(const struct blk_create_opts *o, char **summary)
{
    const struct blk_driver *drv = blk_find_driver(o->format);
    /* Every open of the new file below is covered by the hold. */
    struct blk_open_opts fo = {.filename = o->filename, .no_lock = true};
    struct blk_file_lock *hold = NULL;
    char formats[128];
    int r;

    *summary = NULL;
    if (o->keep_lock) {
        *o->keep_lock = NULL;
    }
    creatable_formats(formats, sizeof formats);
    if (drv && drv->is_format && !drv->create) {
        return err_setx(ENOTSUP, "creating %s images is not supported (%s)", drv->name, formats);
    }
    if (!drv || !drv->is_format) {
        return err_setx(EINVAL, "unknown image format '%s' (%s)", o->format, formats);
    }
    const struct blk_driver *proto = blk_protocol_for(o->filename);
    if (!proto) {
        return -EPROTONOSUPPORT; /* a URL: not a file to create */
    }
    if (!proto->pwritev) {
        /* a read-only protocol (http): never a local file of that name */
        CLEANUP_FREE char *shown = url_redact(o->filename);
        return err_setx(EROFS, "%s: %s images are read-only; diskimg cannot create one",
                        shown ? shown : "?", proto->name);
    }
    if (drv->create_check && (r = drv->create_check(o)) < 0) {
        return r; /* an existing file stays as it was */
    }
    if (proto->create_node) {
        return create_on_protocol(drv, proto, o, summary);
    }
    bool removable;
    r = create_lock_file(o->filename, &hold, &removable);
    if (r < 0) {
        return r;
    }
    r = format_new_node(drv, blk_find_driver("file"), &fo, o, summary);
    if (r < 0 && removable) {
        unlink(o->filename); /* no half-formatted image, as qemu-img does */
    }
    if (r == 0 && o->keep_lock) {
        *o->keep_lock = hold;
    } else {
        blk_file_lock_release(hold);
    }
    return r;
}

/* The message of the failure that made the caller remove the image
 * stays the one to report, whether or not it was printed yet. */
int blk_create_remove(const char *filename)
{
    char why[512];
    snprintf(why, sizeof why, "%s", err_msg());
    const struct blk_driver *proto = blk_protocol_for(filename);
    struct stat st;
    int r = 0;

    if (proto && proto->remove_node) {
        r = proto->remove_node(filename, NULL);
    } else if (stat(filename, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* a block device written to (create refuses other nodes): it stays */
    } else if (unlink(filename) < 0) {
        r = -errno;
    }
    err_clear();
    if (why[0]) {
        err_setx(EIO, "%s", why);
    }
    return r;
}

bool blk_create_makes_own(const char *filename)
{
    char why[512];
    snprintf(why, sizeof why, "%s", err_msg());
    const struct blk_driver *proto = blk_protocol_for(filename);

    err_clear(); /* a URL no driver claims is not ours to make: no message */
    if (why[0]) {
        err_setx(EIO, "%s", why);
    }
    return proto && proto->create_node;
}
