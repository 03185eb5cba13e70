/* block/perm.c: which permissions each node of a stack needs, from what
 * the image's user asked for.  The rules are qemu's (its default
 * permissions for a format's storage child and for a backing child), so
 * that a diskimg stack locks the same bytes as the same stack in qemu.
 * Not for: the locks themselves (file-lock.c, held by the file driver). */
#include "driver.h"

/* The shared mask of a metadata file, from its user's. */
static unsigned metadata_shared(unsigned shared)
{
    return shared & ~(unsigned)(BLK_PERM_WRITE | BLK_PERM_RESIZE);
}

void blk_perm_for_metadata(bool writable, const struct blk_perms *in, struct blk_perms *out)
{
    unsigned perm = in->perm | BLK_PERM_CONSISTENT_READ; /* metadata must read as written */

    if (writable) {
        perm |= BLK_PERM_WRITE | BLK_PERM_RESIZE; /* metadata is written, clusters appended */
    }
    /* Guest data in the same file: even a write of unchanged data may
     * allocate a cluster, and any write may grow the file. */
    if (perm & BLK_PERM_WRITE_UNCHANGED) {
        perm |= BLK_PERM_WRITE;
    }
    if (perm & BLK_PERM_WRITE) {
        perm |= BLK_PERM_RESIZE;
    }
    out->perm = perm;
    /* Another writer would change the metadata under us. */
    out->shared = metadata_shared(in->shared);
    out->shared_here = metadata_shared(in->shared_here);
}

/* Of one shared mask. */
static unsigned backing_shared(unsigned shared)
{
    unsigned s = BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE_UNCHANGED;

    if (shared & BLK_PERM_WRITE) {
        s |= BLK_PERM_WRITE | BLK_PERM_RESIZE; /* the user copes with changing data */
    }
    return s;
}

void blk_perm_for_backing(const struct blk_perms *in, struct blk_perms *out)
{
    out->perm = in->perm & BLK_PERM_CONSISTENT_READ;
    out->shared = backing_shared(in->shared);
    out->shared_here = backing_shared(in->shared_here);
}

int blk_perm_set_child(struct blk_node *file, const struct blk_driver *drv,
                       const struct blk_open_opts *o)
{
    struct blk_perms p = o->perms;

    if (drv->child_perm) {
        drv->child_perm(o, &p);
    }
    /* (-U is the file driver's to apply: it shares all, whatever is asked) */
    return file->drv->set_perm ? file->drv->set_perm(file, &p) : 0;
}
