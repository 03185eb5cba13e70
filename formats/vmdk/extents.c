/* formats/vmdk/extents.c: the files a text descriptor names
 * (monolithicFlat, twoGbMaxExtentSparse, twoGbMaxExtentFlat).
 *
 * A descriptor comes with the image, so the names in it are hostile until
 * shown otherwise: each must be a plain name in the descriptor's own
 * directory (no '/', not "." or ".."), a regular file or a block device
 * (never a FIFO that would block the open, nor a directory), and
 * --untrusted opens none of them: formats/named-file.c has the rules.
 * Not for: parsing (descriptor.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"
#include "formats/named-file.h"
#include "vmdk.h"

static int open_extent_file(struct vmdk_state *s, const struct blk_open_opts *opts,
                            const char *name, struct blk_node **out)
{
    CLEANUP_FREE char *path = NULL;
    int r = fmt_named_path("vmdk", "extent", s->node->filename, name, FMT_NAME_SAME_DIR, &path);

    return r < 0 ? r : fmt_open_extent(s->node, opts, path, out);
}

int vmdk_open_extents(struct vmdk_state *s, const struct blk_open_opts *opts, const char *dir_of)
{
    const struct vmdk_desc *d = &s->desc;
    uint64_t start = 0;
    int r;

    (void)dir_of;
    if (d->n_extents == 0) {
        return err_setx(EINVAL, "%s: vmdk: the descriptor names no extent", ESC_NAME(s->node));
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
                            ESC_NAME(s->node));
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
            return fmt_refuse_named("vmdk", "extent", x->name);
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
