/* block/stack.c: opening an image as a stack of nodes, a format driver
 * over a protocol driver, for the top of an image and for every backing
 * file below it.  Formats are probed only among registered drivers, and
 * a backing chain may neither loop nor grow without bound.  The file is
 * locked for what the caller asked before the probe reads it, and for
 * what the format needs before the format reads it. */
#include <errno.h>
#include <inttypes.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "driver.h"
#include "esc-name.h"

/* Probe the format from the first BLK_PROBE_BYTES (zero-padded, as qemu
 * does) and the last ones (for trailers: a fixed VHD).  Two formats that
 * claim the bytes equally are refused: qemu would take whichever driver
 * its build registered first.  With --untrusted any second claim is
 * refused: the format must be named. */
static int blk_pick_format(struct blk_node *file, const struct blk_open_opts *o, const char *format,
                           const struct blk_driver **out)
{
    uint8_t buf[BLK_PROBE_BYTES] = {0};
    uint8_t tail[BLK_PROBE_BYTES];
    bool has_tail;
    struct blk_probe p;
    int64_t len;
    int r;

    if (format) {
        *out = blk_find_driver(format);
        if (!*out || !(*out)->is_format) {
            return err_setx(EINVAL, "unknown image format '%s'", ESC_STR(format));
        }
        return 0;
    }
    len = blk_get_length(file);
    if (len < 0) {
        return (int)len;
    }
    r = blk_pread(file, 0, buf, (uint64_t)MIN(len, (int64_t)sizeof buf));
    if (r < 0) {
        return r;
    }
    has_tail = len >= (int64_t)sizeof tail;
    if (has_tail && (r = blk_pread(file, (uint64_t)len - sizeof tail, tail, sizeof tail)) < 0) {
        return r;
    }
    if (has_tail && file->drv->uncache) {
        /* The tail page leaves the cache again: on ext4 a cached page of
         * a fallocated, never written tail reads back as data in
         * SEEK_DATA, and every tool's map of the file would change
         * (qemu-img's too) because we looked at it. */
        file->drv->uncache(file, (uint64_t)len - sizeof tail, sizeof tail);
    }
    blk_probe_all_tail(buf, sizeof buf, has_tail ? tail : NULL, has_tail ? sizeof tail : 0,
                       file->filename, &p);
    if (!p.best) {
        return err_setx(EINVAL,
                        "%s: no format driver recognises the image; name the format with -f",
                        ESC_NAME(file));
    }
    if (p.other && (p.tie || o->untrusted)) {
        return err_setx(EINVAL,
                        "%s: the first bytes look like both %s and %s images; name the format "
                        "with -f",
                        ESC_NAME(file), p.best->name, p.other->name);
    }
    *out = p.best;
    return 0;
}

static int blk_check_chain(const struct blk_open_opts *o)
{
    struct stat st;

    if (o->depth > BLK_MAX_CHAIN_DEPTH) {
        return err_setx(ELOOP, "backing chain deeper than %d backing files (%s is number %u)",
                        BLK_MAX_CHAIN_DEPTH, ESC_STR(o->filename), o->depth);
    }
    if (!o->chain || !o->filename || stat(o->filename, &st) < 0) {
        return 0; /* the protocol driver reports a missing file */
    }
    for (const struct blk_chain *c = o->chain; c; c = c->up) {
        if (c->dev == st.st_dev && c->ino == st.st_ino) {
            return err_setx(ELOOP, "%s: backing file loop (the file is already in the chain)",
                            ESC_STR(o->filename)); /* from the image above */
        }
    }
    return 0;
}

int blk_open_stack(struct blk_node **out, const struct blk_open_opts *o, const char *protocol,
                   const char *format)
{
    const struct blk_driver *proto = blk_find_driver(protocol);
    const struct blk_driver *fmt = NULL;
    struct blk_open_opts fo = *o;
    struct blk_node *file = NULL;
    int r;

    if (!proto || proto->is_format) {
        return err_setx(ENOTSUP, "unknown protocol driver '%s'", protocol);
    }
    r = blk_check_chain(o);
    if (r < 0) {
        return r;
    }
    r = blk_node_open(&file, proto, NULL, o);
    if (r < 0) {
        return r;
    }
    file->no_flush = o->no_flush;
    r = blk_pick_format(file, o, format, &fmt);
    if (r == 0) {
        r = blk_perm_set_child(file, fmt, o); /* what the format needs of its file */
    }
    if (r < 0) {
        blk_node_close(file);
        return r;
    }
    r = blk_opts_check_stack(o->options, fmt, proto);
    if (r < 0) {
        err_prefix("%s", ESC_NAME(file));
        blk_node_close(file);
        return r;
    }
    fo.probed = format == NULL;
    fo.filename = file->filename; /* the protocol's name: an HTTP URL without its query */
    return blk_node_open(out, fmt, file, &fo);
}
