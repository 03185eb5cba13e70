/* formats/vmdk/extents.c: the files a text descriptor names
 * (monolithicFlat, twoGbMaxExtentSparse, twoGbMaxExtentFlat).
 *
 * A descriptor comes with the image, so the names in it are hostile until
 * shown otherwise: each must be a plain name in the descriptor's own
 * directory (no '/', not "." or ".."), a regular file or a block device
 * (never a FIFO that would block the open, nor a directory), and
 * --untrusted opens none of them.  Not for: parsing (descriptor.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"
#include "vmdk.h"

static int refuse_name(const char *image, const char *name, const char *why)
{
    CLEANUP_FREE char *ei = str_escape(image);
    CLEANUP_FREE char *en = str_escape(name);

    return err_setx(EPERM, "%s: vmdk: refusing to open extent file '%s' (%s)", ei ? ei : "?",
                    en ? en : "?", why);
}

/* The extent's path: its name beside the descriptor. */
static int extent_path(const char *image, const char *name, char **out)
{
    if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        return refuse_name(image, name,
                           "an extent must be a file in the descriptor's directory, named "
                           "without '/'");
    }
    for (const char *p = name; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            return refuse_name(image, name, "a control character in the name");
        }
    }
    CLEANUP_FREE char *copy = strdup(image);
    if (!copy) {
        return err_set(ENOMEM, "vmdk: extent path");
    }
    if (!strchr(image, '/')) {
        *out = strdup(name); /* beside an image in the current directory */
        return *out ? 0 : err_set(ENOMEM, "vmdk: extent path");
    }
    if (asprintf(out, "%s/%s", dirname(copy), name) < 0) {
        *out = NULL;
        return err_set(ENOMEM, "vmdk: extent path");
    }
    return 0;
}

/* Only regular files and block devices: a FIFO would block the open and
 * a character device is no disk. */
static int check_kind(const char *image, const char *name, const char *path)
{
    struct stat st;

    if (lstat(path, &st) < 0) {
        CLEANUP_FREE char *ep = str_escape(path);
        return err_set(errno, "%s", ep ? ep : "?");
    }
    if (S_ISLNK(st.st_mode) && stat(path, &st) < 0) {
        CLEANUP_FREE char *ep = str_escape(path);
        return err_set(errno, "%s", ep ? ep : "?");
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        return refuse_name(image, name, "not a regular file or block device");
    }
    return 0;
}

static int open_extent_file(struct vmdk_state *s, const struct blk_open_opts *opts,
                            const char *name, struct blk_node **out)
{
    CLEANUP_FREE char *path = NULL;
    int r = extent_path(s->node->filename, name, &path);

    if (r == 0) {
        r = check_kind(s->node->filename, name, path);
    }
    if (r < 0) {
        return r;
    }
    struct blk_open_opts fo = {
        .filename = path,
        .read_only = true,
        .direct = opts->direct,
        .aio = opts->aio,
        .stream = opts->stream,
        .no_flush = opts->no_flush,
        .force_share = opts->force_share,
    };
    blk_perm_for_metadata(false, &opts->perms, &fo.perms);
    r = blk_node_open(out, blk_find_driver("file"), NULL, &fo);
    if (r < 0) {
        return r;
    }
    (*out)->no_flush = opts->no_flush;
    return 0;
}

int vmdk_open_extents(struct vmdk_state *s, const struct blk_open_opts *opts, const char *dir_of)
{
    const struct vmdk_desc *d = &s->desc;
    uint64_t start = 0;
    int r;

    (void)dir_of;
    if (d->n_extents == 0) {
        return err_setx(EINVAL, "%s: vmdk: the descriptor names no extent", s->node->filename);
    }
    s->extents = calloc(d->n_extents, sizeof *s->extents);
    if (!s->extents) {
        return err_set(ENOMEM, "vmdk: extents");
    }
    for (unsigned i = 0; i < d->n_extents; i++) {
        const struct vmdk_desc_extent *x = &d->extents[i];
        struct vmdk_extent *e = &s->extents[i];
        if (x->sectors > (UINT64_C(1) << 53) / VMDK_SECTOR ||
            start + x->sectors * VMDK_SECTOR > (UINT64_C(1) << 53)) {
            return err_setx(EFBIG, "%s: vmdk: the extents add up to more than 8 PiB",
                            s->node->filename);
        }
        e->type = x->type;
        e->start = start;
        e->length = x->sectors * VMDK_SECTOR;
        e->flat_offset = x->offset * VMDK_SECTOR;
        s->n_extents = i + 1;
        start += e->length;
        if (x->type == VMDK_TYPE_ZERO) {
            e->name = strdup("(zero)");
            continue;
        }
        if (opts->untrusted) {
            return refuse_name(s->node->filename, x->name, "--untrusted opens the image alone");
        }
        r = open_extent_file(s, opts, x->name, &e->file);
        if (r < 0) {
            return r;
        }
        e->own_file = true;
        e->name = str_escape(e->file->filename);
        if (!e->name) {
            return err_set(ENOMEM, "vmdk: extents");
        }
        if (x->type == VMDK_TYPE_SPARSE) {
            r = vmdk_sparse_open(e, false);
            if (r < 0) {
                return r;
            }
        }
    }
    s->size = start;
    return 0;
}
