/* formats/vdi/vdi.c: the "vdi" format driver (VirtualBox disk images,
 * dynamic and static): its vtable, open and close, reads, block status,
 * info and resize.  Writes are in alloc.c, check in check.c, create in
 * create.c.
 *
 * Block status follows qemu: an unallocated or "zero" block reads as
 * zeroes and is no data; an allocated block is data at its place in the
 * file, and in a static image (whose blocks are all allocated at create,
 * over a sparse file) the file is asked which of it is still a hole.
 *
 * Order (vdi.h): the top; may call any file. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "vdi.h"

#define IOV_LOCAL 64

/* Read a run of allocated blocks.  A block may end past the end of the
 * file (a file cut short, or written by a tool that does not extend it
 * to whole blocks): that part reads as zeroes, as in qemu. */
static int read_data(struct vdi_state *s, uint64_t host, const struct iovec *iov, int iovcnt,
                     uint64_t bytes)
{
    int64_t file_len = blk_get_length(s->file);
    uint64_t in_file = 0;
    int r = 0;

    if (file_len < 0) {
        return (int)file_len;
    }
    if (host < (uint64_t)file_len) {
        in_file = MIN(bytes, (uint64_t)file_len - host);
    }
    if (in_file == bytes) {
        return blk_preadv(s->file, host, iov, iovcnt);
    }
    if (in_file) {
        struct iovec sub[IOV_LOCAL];
        int k = iov_slice(iov, iovcnt, 0, in_file, sub, IOV_LOCAL);
        if (k < 0) {
            return err_setx(EINVAL, "vdi: read with too many iovec elements");
        }
        r = blk_preadv(s->file, host, sub, k);
    }
    iov_memset(iov, iovcnt, in_file, 0, bytes - in_file);
    return r;
}

static int vdi_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct vdi_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), pos = 0;
    int r = 0;

    while (r == 0 && pos < len) {
        struct vdi_run run;
        struct iovec sub[IOV_LOCAL];

        vdi_map(s, off + pos, len - pos, &run);
        int k = iov_slice(iov, iovcnt, pos, run.bytes, sub, IOV_LOCAL);
        if (k < 0) {
            return err_setx(EINVAL, "vdi: read with too many iovec elements");
        }
        if (run.kind == VDI_DATA) {
            r = read_data(s, run.host, sub, k, run.bytes);
        } else {
            iov_memset(sub, k, 0, 0, run.bytes);
        }
        pos += run.bytes;
    }
    return r;
}

static int vdi_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    struct vdi_state *s = n->opaque;
    struct vdi_run run;

    vdi_map(s, off, len, &run);
    memset(ext, 0, sizeof *ext);
    ext->length = run.bytes;
    ext->depth = 1;
    ext->filename = s->file->filename;
    if (run.kind == VDI_HOLE) {
        /* qemu: zero, and so allocated at this layer ("present") */
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED;
        return 0;
    }
    ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
    ext->offset = run.host;
    if (s->hdr.type != VDI_TYPE_FIXED) {
        return 0;
    }
    /* A hole of the file, or past its end, reads as zeroes (a hole that
     * runs to the end covers the rest of the run, as in qemu). */
    int64_t file_len = blk_get_length(s->file);
    if (file_len < 0) {
        return (int)file_len;
    }
    if (run.host >= (uint64_t)file_len) {
        ext->flags |= BLK_EXT_ZERO;
        return 0;
    }
    struct blk_extent fext;
    uint64_t in_file = MIN(run.bytes, (uint64_t)file_len - run.host);
    if (blk_block_status(s->file, run.host, in_file, &fext) == 0) {
        ext->length = MIN(fext.length, in_file);
        if (!(fext.flags & BLK_EXT_DATA)) {
            ext->flags |= BLK_EXT_ZERO;
            if (ext->length == (uint64_t)file_len - run.host) {
                ext->length = run.bytes;
            }
        }
    }
    err_clear();
    return 0;
}

static int64_t vdi_get_length(struct blk_node *n)
{
    struct vdi_state *s = n->opaque;

    return (int64_t)s->size;
}

static uint64_t vdi_cluster_size(struct blk_node *n)
{
    (void)n;
    return VDI_BLOCK_SIZE;
}

static int vdi_get_info(struct blk_node *n, struct blk_image_info *info)
{
    info->cluster_size = vdi_cluster_size(n); /* qemu-img: the block size; nothing else */
    return 0;
}

static void vdi_free_state(struct vdi_state *s)
{
    free(s->map);
    s->map = NULL;
    pthread_mutex_destroy(&s->alloc_lock);
}

static int vdi_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct vdi_state *s = n->opaque;
    int64_t file_len = blk_get_length(n->file);
    int r;

    if (file_len < 0) {
        return (int)file_len;
    }
    s->node = n;
    s->file = n->file;
    pthread_mutex_init(&s->alloc_lock, NULL);
    if (file_len < VDI_SECTOR) {
        r = err_setx(EINVAL, "%s: vdi: the file (%" PRId64 " bytes) is too short for a header",
                     ESC_NAME(n), file_len);
        goto fail;
    }
    s->page0_len = (uint32_t)MIN((uint64_t)file_len, sizeof s->page0);
    r = blk_pread(n->file, 0, s->page0, s->page0_len);
    if (r < 0) {
        goto fail;
    }
    vdi_header_decode(s->page0, &s->hdr);
    r = vdi_header_validate(&s->hdr, (uint64_t)file_len, ESC_NAME(n));
    if (r < 0) {
        goto fail;
    }
    s->size = ROUND_UP(s->hdr.disk_size, VDI_SECTOR); /* odd sizes round up, as in qemu */
    s->stride = (uint64_t)s->hdr.block_extra + VDI_BLOCK_SIZE;
    s->file_end = (uint64_t)file_len;
    /* A check opens what it reports: entries are checked by check.c. */
    r = vdi_load_map(s, !opts->for_check, !opts->read_only);
    if (r < 0) {
        goto fail;
    }
    /* Blocks are appended, but not to a file whose length cannot change
     * (an NBD export): a block past its end fails in the generic layer,
     * out of space (alloc.c), instead of reaching the server.  A read-only
     * open reads nothing past the end (read_data gives zeroes there). */
    if (!opts->read_only && blk_can_resize(n->file)) {
        n->file->growable = true;
    }
    n->supported_write_flags = 0; /* FUA: write, then flush of this node */
    n->supported_zero_flags = BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK;
    return 0;

fail:
    vdi_free_state(s);
    return r;
}

static void vdi_close(struct blk_node *n)
{
    vdi_free_state(n->opaque);
}

/* The file holds the metadata: qemu's rules (block/perm.c). */
static void vdi_child_perm(const struct blk_open_opts *opts, struct blk_perms *child)
{
    struct blk_perms in = *child;

    blk_perm_for_metadata(!opts->read_only, &in, child);
}

static const struct blk_driver vdi_driver = {
    .name = "vdi",
    .is_format = true,
    .state_size = sizeof(struct vdi_state),
    .probe = vdi_probe,
    .child_perm = vdi_child_perm,
    .open = vdi_open,
    .close = vdi_close,
    .preadv = vdi_preadv,
    .pwritev = vdi_pwritev,
    .pwrite_zeroes = vdi_pwrite_zeroes,
    .set_identity = vdi_set_identity,
    .cluster_size = vdi_cluster_size,
    .block_status = vdi_block_status,
    .get_length = vdi_get_length,
    .get_info = vdi_get_info,
    .check = vdi_check,
    .create = vdi_create,
    .create_check = vdi_create_check,
    .measure = vdi_measure,
    .create_help = vdi_create_help,
};

BLK_REGISTER_DRIVER(vdi_driver)
