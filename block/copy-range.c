/* block/copy-range.c: copy offloading for convert -C.  The kernel copies
 * from file to file (copy_file_range: one copy instead of a read and a
 * write, and shared extents where the file system can reflink), so this
 * only works out where the bytes lie: in the source's top image file
 * (its block status says where, as for map), and in the target's file
 * through nodes that map offsets linearly (raw).  Anything else is
 * -ENOTSUP and the copy reads and writes instead, as qemu-img falls back
 * when copy_range fails.
 *
 * The write bypasses io.c, so what io.c would do for a write is done
 * here: bounds, read-only, and the write generation that makes the next
 * flush of the file reach the disk. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "copy-aux.h"
#include "driver.h"
#include "file-posix.h"

/* Where the target's guest range lies in its file: the node and offset. */
static int map_target(struct blk_image *dst, uint64_t off, uint64_t len, struct blk_node **file,
                      uint64_t *file_off)
{
    struct blk_node *n = blk_image_root(dst);

    if (blk_image_read_only(dst) || blk_image_format_probed(dst) ||
        blk_cache_mode_writethrough(blk_image_cache_mode(dst)) || off + len > blk_image_size(dst)) {
        return -ENOTSUP; /* io.c refuses, guards or adds FUA: let it */
    }
    while (n->drv->is_format) {
        if (!n->drv->map_linear || !n->file) {
            return -ENOTSUP;
        }
        int r = n->drv->map_linear(n, off, len, &off);
        if (r < 0) {
            return r;
        }
        n = n->file;
    }
    *file = n;
    *file_off = off;
    return 0;
}

/* The next piece of the source's range: its top image's file and the
 * offset there, from block status (data stored as it is, not compressed,
 * not in a backing file or an external data file).  1 when this piece
 * is not stored so (a compressed cluster): others may be. */
static int map_source(struct blk_image *src, uint64_t off, uint64_t len, struct blk_node **file,
                      uint64_t *file_off, uint64_t *pnum)
{
    struct blk_node *root = blk_image_root(src);
    struct blk_extent ext;
    int r;

    if (!root->drv->is_format || !root->file) {
        return -ENOTSUP;
    }
    r = blk_block_status(root, off, len, &ext);
    if (r < 0) {
        err_clear();
        return -ENOTSUP; /* the reads will say what is wrong */
    }
    if (!(ext.flags & BLK_EXT_OFFSET) || (ext.flags & BLK_EXT_INFLATE) || ext.layer != 0 ||
        !ext.filename || strcmp(ext.filename, root->file->filename) != 0 || ext.length == 0) {
        return 1;
    }
    *file = root->file;
    *file_off = ext.offset;
    *pnum = MIN(ext.length, len);
    return 0;
}

int blk_copy_range(struct blk_image *src, struct blk_image *dst, uint64_t off, uint64_t len)
{
    struct blk_node *dfile = NULL, *sfile = NULL;
    uint64_t doff = 0, soff = 0, n = 0;
    int r = map_target(dst, off, len, &dfile, &doff);

    for (uint64_t done = 0; r == 0 && done < len; done += n) {
        r = map_source(src, off + done, len - done, &sfile, &soff, &n);
        if (r == 0) {
            r = file_copy_range(sfile, soff, dfile, doff + done, n);
        }
    }
    if (r == 0 || (r < 0 && r != -ENOTSUP)) {
        /* Even a part written must reach the disk at the next flush. */
        struct blk_node *root = blk_image_root(dst);
        for (struct blk_node *w = root; w; w = w->file) {
            atomic_fetch_add_explicit(&w->write_gen, 1, memory_order_release);
        }
    }
    if (r == 0) {
        atomic_fetch_add_explicit(&dfile->stats.writes, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&dfile->stats.bytes_written, len, memory_order_relaxed);
        blk_trace(dfile, "copy_range", doff, len, 0);
    }
    return r;
}
