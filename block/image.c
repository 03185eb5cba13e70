/* block/image.c: an open image, the stack of nodes plus the policies that
 * qemu attaches to a drive rather than to a node:
 *   - cache mode: O_DIRECT on the protocol node (none, directsync), FUA
 *     added to every write (writethrough, directsync), flushes that never
 *     reach the disk (unsafe);
 *   - detect-zeroes: writes of zero buffers become write-zeroes;
 *   - discard: ignore or unmap, for TRIM and for write-zeroes' MAY_UNMAP.
 * Every request goes to the root node through io.c, which checks it and
 * emulates what the drivers lack; nothing here calls a driver's data
 * path. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/json.h"
#include "common/util.h"
#include "driver.h"
#include "esc-name.h"
#include "overlay.h"

struct blk_image {
    struct blk_node *root;
    enum blk_cache_mode cache;
    enum blk_detect_zeroes detect_zeroes;
    enum blk_discard_mode discard;
    bool read_only;
    bool writethrough;
    bool probed;              /* the format was guessed, not named */
    const char *shown_format; /* NULL: the root's driver (see protocol_image) */
};

int blk_image_open(struct blk_image **out, const struct blk_image_opts *opts)
{
    struct blk_open_opts o = {
        .filename = opts->filename,
        .read_only = opts->read_only,
        .direct = blk_cache_mode_direct(opts->cache),
        .stream = opts->stream,
        .aio = opts->aio,
        .no_backing = opts->no_backing,
        .untrusted = opts->untrusted,
        .no_flush = opts->cache == BLK_CACHE_UNSAFE,
        .for_check = opts->for_check,
        .options = &opts->options,
        .perms = {.perm = BLK_PERM_CONSISTENT_READ,
                  .shared = BLK_PERM_SHARED_DEFAULT,
                  .shared_here = opts->share_in_process ? BLK_PERM_ALL : BLK_PERM_SHARED_DEFAULT},
        .force_share = opts->force_share,
        .write_depth = opts->write_backing_depth,
    };
    struct blk_node *root = NULL;
    struct blk_image *img;
    int r;

    if (opts->temp_overlay) {
        o.read_only = true; /* writes stop at the overlay (if writable at all) */
    }
    if (!o.read_only) {
        o.perms.perm |= BLK_PERM_WRITE;
    }
    if (opts->resize) {
        o.perms.perm |= BLK_PERM_RESIZE;
    }
    if (opts->force_share && (!o.read_only || opts->resize)) {
        return err_setx(EINVAL, "%s: force-share (-U) is for images opened read-only",
                        opts->filename ? ESC_STR(opts->filename) : opts->protocol);
    }
    if (!opts->filename && !opts->protocol) {
        return err_setx(EINVAL, "an image needs a filename or a protocol driver");
    }
    if (opts->detect_zeroes == BLK_DETECT_ZEROES_UNMAP && opts->discard != BLK_DISCARD_UNMAP) {
        /* qemu refuses this too: unmapping zeroes needs discard=unmap. */
        return err_setx(EINVAL, "detect-zeroes=unmap requires discard=unmap");
    }
    const struct blk_driver *proto =
        opts->protocol ? blk_find_driver(opts->protocol) : blk_protocol_for(opts->filename);
    if (!proto) {
        return opts->protocol ? err_setx(ENOTSUP, "unknown protocol driver '%s'", opts->protocol)
                              : -EPROTONOSUPPORT;
    }
    r = blk_open_stack(&root, &o, proto->name, opts->format);
    if (r == 0 && opts->temp_overlay && !opts->read_only) {
        r = blk_overlay_open(&root, root);
        o.read_only = false; /* the overlay takes the writes */
    }
    if (r < 0) {
        return r;
    }
    img = calloc(1, sizeof *img);
    if (!img) {
        r = err_set(ENOMEM, "opening %s", ESC_NAME(root));
        blk_node_close(root);
        return r;
    }
    img->root = root;
    img->cache = opts->cache;
    img->detect_zeroes = opts->detect_zeroes;
    img->discard = opts->discard;
    img->read_only = o.read_only;
    img->writethrough = blk_cache_mode_writethrough(opts->cache);
    img->probed = opts->format == NULL;
    img->shown_format = opts->protocol_image ? proto->name : NULL;
    *out = img;
    return 0;
}

int blk_image_close(struct blk_image *img)
{
    int r = 0;

    if (!img) {
        return 0;
    }
    if (!img->read_only) {
        r = blk_flush(img->root);
    }
    blk_node_close(img->root);
    free(img);
    return r;
}

uint64_t blk_image_size(const struct blk_image *img)
{
    int64_t len = blk_get_length(img->root);

    return len < 0 ? 0 : (uint64_t)len;
}

bool blk_image_read_only(const struct blk_image *img)
{
    return img->read_only;
}

enum blk_cache_mode blk_image_cache_mode(const struct blk_image *img)
{
    return img->cache;
}

bool blk_image_native_fua(const struct blk_image *img)
{
    return atomic_load(&img->root->supported_write_flags) & BLK_REQ_FUA;
}

bool blk_image_can_fast_zero(const struct blk_image *img)
{
    return atomic_load(&img->root->supported_zero_flags) & BLK_REQ_NO_FALLBACK;
}

struct blk_node *blk_image_root(const struct blk_image *img)
{
    return img->root;
}

unsigned blk_image_chain_length(const struct blk_image *img)
{
    unsigned n = 0;

    for (const struct blk_node *b = img->root; b; b = b->backing) {
        n++;
    }
    return n;
}

const char *blk_image_format(const struct blk_image *img)
{
    return img->shown_format ? img->shown_format : img->root->drv->name;
}

bool blk_image_format_probed(const struct blk_image *img)
{
    return img->probed;
}

int blk_image_pread(struct blk_image *img, uint64_t off, void *buf, uint64_t len)
{
    return blk_pread(img->root, off, buf, len);
}

/* FUA as the cache mode wants it: added to every write by writethrough
 * and directsync, removed by unsafe (which ignores every request for
 * durability, FLUSH and FUA alike, as qemu's cache=unsafe does). */
static unsigned blk_image_fua(const struct blk_image *img, unsigned flags)
{
    if (img->writethrough) {
        flags |= BLK_REQ_FUA;
    }
    if (img->cache == BLK_CACHE_UNSAFE) {
        flags &= ~(unsigned)BLK_REQ_FUA;
    }
    return flags;
}

static unsigned blk_image_zero_flags(const struct blk_image *img, unsigned flags)
{
    flags = blk_image_fua(img, flags);
    if (img->discard == BLK_DISCARD_IGNORE) {
        flags &= ~(unsigned)BLK_REQ_MAY_UNMAP;
    }
    return flags;
}

int blk_image_pwrite(struct blk_image *img, uint64_t off, const void *buf, uint64_t len,
                     unsigned flags)
{
    flags = blk_image_fua(img, flags);
    if (img->detect_zeroes != BLK_DETECT_ZEROES_OFF && len && buffer_is_zero(buf, len)) {
        unsigned zflags = flags & BLK_REQ_FUA;
        if (img->detect_zeroes == BLK_DETECT_ZEROES_UNMAP) {
            zflags |= BLK_REQ_MAY_UNMAP;
        }
        return blk_pwrite_zeroes(img->root, off, len, blk_image_zero_flags(img, zflags));
    }
    return blk_pwrite(img->root, off, buf, len, flags);
}

int blk_image_pwrite_zeroes(struct blk_image *img, uint64_t off, uint64_t len, unsigned flags)
{
    return blk_pwrite_zeroes(img->root, off, len, blk_image_zero_flags(img, flags));
}

int blk_image_compress(struct blk_image *img, const void *in, uint64_t len, void *out, size_t cap,
                       size_t *out_len)
{
    return blk_compress(img->root, in, len, out, cap, out_len);
}

/* No cache-mode flags: a compressed write is never FUA, even with
 * writethrough; convert, its only user, flushes before it succeeds. */
int blk_image_pwrite_compressed(struct blk_image *img, uint64_t off, uint64_t len, const void *data,
                                size_t clen)
{
    return blk_pwrite_compressed(img->root, off, len, data, clen);
}

uint64_t blk_image_cluster_size(struct blk_image *img)
{
    return img->root->drv->cluster_size ? img->root->drv->cluster_size(img->root) : 0;
}

bool blk_image_compressed_only(const struct blk_image *img)
{
    return img->root->compressed_only;
}

bool blk_image_remote(const struct blk_image *img)
{
    for (const struct blk_node *n = img->root; n; n = n->file) {
        if (n->drv->remote) {
            return true;
        }
    }
    return false;
}

/* discard=ignore drops the discard, not the checks: a read-only image or
 * a range past the end is refused either way. */
int blk_image_discard(struct blk_image *img, uint64_t off, uint64_t len, unsigned flags)
{
    if (img->discard == BLK_DISCARD_IGNORE) {
        return blk_discard_check(img->root, off, len);
    }
    return blk_discard(img->root, off, len, blk_image_fua(img, flags));
}

int blk_image_get_info(struct blk_image *img, struct blk_image_info *info)
{
    struct blk_node *n = img->root, *bottom = n;
    int r = 0;

    memset(info, 0, sizeof *info);
    info->format = blk_image_format(img);
    info->virtual_size = blk_image_size(img);
    while (bottom->file) {
        bottom = bottom->file;
    }
    info->actual_size = bottom->drv->allocated_size ? bottom->drv->allocated_size(bottom) : -1;
    /* qemu asks the format, and raw asks its file: an NBD export has no
     * answer, and qemu-img info then prints no dirty-flag; an rbd image
     * answers with its object size and snapshots. */
    struct blk_node *asked = n->drv->get_info ? n : bottom->drv->get_info ? bottom : NULL;
    info->dirty_unknown = !asked && !bottom->drv->allocated_size;
    if (asked) {
        r = asked->drv->get_info(asked, info);
        /* Only when the image is the protocol itself (driver=rbd) */
        info->specific =
            info->specific &&
            (asked == n || (info->format && strcmp(info->format, asked->drv->name) == 0));
    }
    return r;
}

void blk_image_info_free(struct blk_image_info *info)
{
    free(info->backing_file);
    free(info->backing_format);
    free(info->full_backing_file);
    for (unsigned i = 0; i < info->n_snapshots; i++) {
        free(info->snapshots[i].id);
        free(info->snapshots[i].name);
    }
    free(info->snapshots);
    for (unsigned i = 0; i < info->n_bitmaps; i++) {
        free(info->bitmaps[i].name);
    }
    free(info->bitmaps);
    for (unsigned i = 0; i < info->n_fields; i++) {
        free(info->fields[i].owned);
    }
    memset(info, 0, sizeof *info);
}

int blk_image_load_bitmap(struct blk_image *img, const char *name, struct blk_bitmap **out)
{
    struct blk_node *n = img->root;

    if (!n->drv->load_bitmap) {
        return err_setx(ENOTSUP, "%s: the %s format has no persistent bitmaps", ESC_NAME(n),
                        n->drv->name);
    }
    return n->drv->load_bitmap(n, name, out);
}

int blk_image_bitmap_change(struct blk_image *img, const struct blk_bitmap_op *op)
{
    struct blk_node *n = img->root;

    if (!n->drv->bitmap_change) {
        return err_setx(ENOTSUP, "%s: the %s format cannot store persistent bitmaps", ESC_NAME(n),
                        n->drv->name);
    }
    if (img->read_only) {
        return err_setx(EROFS, "%s is opened read-only", ESC_NAME(n));
    }
    return n->drv->bitmap_change(n, op);
}

int blk_image_check(struct blk_image *img, enum blk_repair repair, FILE *report,
                    struct blk_check_result *res)
{
    memset(res, 0, sizeof *res);
    if (!img->root->drv->check) {
        return err_setx(ENOTSUP, "%s: the %s format has no consistency check", ESC_NAME(img->root),
                        img->root->drv->name);
    }
    if (repair != BLK_REPAIR_NONE && img->read_only) {
        return err_setx(EPERM, "%s: repairing needs a writable image", ESC_NAME(img->root));
    }
    return img->root->drv->check(img->root, repair, report, res);
}

int blk_image_truncate(struct blk_image *img, uint64_t size)
{
    return blk_truncate(img->root, size);
}

int blk_image_flush(struct blk_image *img)
{
    return blk_flush(img->root);
}

int blk_image_block_status(struct blk_image *img, uint64_t off, uint64_t len,
                           struct blk_extent *ext)
{
    return blk_block_status(img->root, off, len, ext);
}

int blk_image_map_status(struct blk_image *img, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    const struct blk_driver *drv = img->root->drv;
    int r;

    if (!drv->map_status || len == 0 || off >= blk_image_size(img) ||
        len > blk_image_size(img) - off) {
        return blk_block_status(img->root, off, len, ext); /* and its checks */
    }
    r = drv->map_status(img->root, off, len, ext);
    if (r == 0 && (ext->length == 0 || ext->length > len)) {
        ext->length = len;
    }
    return r;
}

bool blk_image_has_backing(struct blk_image *img)
{
    return img->root->backing != NULL;
}

int blk_image_reads_as_zero(struct blk_image *img, bool *zero)
{
    uint64_t size = blk_image_size(img);

    *zero = false;
    for (uint64_t off = 0; off < size;) {
        struct blk_extent e;
        int r = blk_image_block_status(img, off, size - off, &e);
        if (r < 0) {
            return r;
        }
        if (!(e.flags & BLK_EXT_ZERO)) {
            return 0;
        }
        off += e.length;
    }
    *zero = true;
    return 0;
}

int blk_image_prefetch(struct blk_image *img, uint64_t off, uint64_t len)
{
    return blk_prefetch(img->root, off, len);
}

#define LOAD(n, f) atomic_load_explicit(&(n)->stats.f, memory_order_relaxed)

void blk_image_stats_json(const struct blk_image *img, struct json_writer *w)
{
    json_begin_array(w, "nodes");
    for (struct blk_node *n = img->root; n; n = n->file) {
        json_begin_object(w, NULL);
        json_str(w, "driver", n->drv->name);
        json_str(w, "filename", n->filename);
        json_bool(w, "native-fua", atomic_load(&n->supported_write_flags) & BLK_REQ_FUA);
        json_uint(w, "reads", LOAD(n, reads));
        json_uint(w, "writes", LOAD(n, writes));
        json_uint(w, "zeroes", LOAD(n, zeroes));
        json_uint(w, "discards", LOAD(n, discards));
        json_uint(w, "bytes-read", LOAD(n, bytes_read));
        json_uint(w, "bytes-written", LOAD(n, bytes_written));
        json_uint(w, "fua-native", LOAD(n, fua_native));
        json_uint(w, "fua-emulated", LOAD(n, fua_emulated));
        json_uint(w, "flushes", LOAD(n, flushes));
        json_uint(w, "flushes-shared", LOAD(n, flushes_shared));
        json_uint(w, "flushes-skipped", LOAD(n, flushes_skipped));
        json_uint(w, "rmw", LOAD(n, rmw));
        json_uint(w, "zero-fallback", LOAD(n, zero_fallback));
        json_end_object(w);
    }
    json_end_array(w);
}

void blk_image_totals(const struct blk_image *img, struct blk_image_totals *t)
{
    memset(t, 0, sizeof *t);
    for (struct blk_node *n = img->root; n; n = n->file) {
        t->fua_emulated += LOAD(n, fua_emulated);
        t->flushes_shared += LOAD(n, flushes_shared);
        t->rmw += LOAD(n, rmw);
        if (!n->drv->is_format) {
            /* Protocol nodes are where data meets storage. */
            t->fua_native += LOAD(n, fua_native);
            t->file_flushes += LOAD(n, flushes);
            t->flushes_skipped += LOAD(n, flushes_skipped);
        }
    }
}
