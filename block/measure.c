/* block/measure.c: the generic part of "measure" and "dd", as qemu-img
 * has them.  measure: finding the output format and handing the question
 * to its driver's measure op (each format knows its own overhead), plus
 * the one thing every format's answer needs from a source image, how many
 * of its clusters hold data.  dd: copying a window of one image into
 * another, in order.
 *
 * Not for: option parsing or printing (cmd/measure.c, cmd/dd.c), nor any
 * format's arithmetic (formats/). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "driver.h"
#include "esc-name.h"

int blk_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *out)
{
    const struct blk_driver *drv = blk_find_driver(o->format);

    *out = (struct blk_measure){0};
    if (!drv || !drv->is_format) {
        return err_setx(EINVAL, "Unknown file format '%s'", o->format);
    }
    if (!drv->measure) {
        return err_setx(ENOTSUP, "Block driver '%s' does not support size measurement", drv->name);
    }
    return drv->measure(o, src, out);
}

int blk_measure_sized_opts(const struct blk_create_opts *o, struct blk_image *src,
                           struct blk_create_opts *sized, char **options)
{
    const char *list = o->options ? o->options : "";
    size_t len = strlen(list), n = 0;
    char *out = malloc(len + 1);

    if (!out) {
        return err_setx(ENOMEM, "measure: no memory for the options");
    }
    /* Items end at a comma that is not doubled (kv_foreach's rule); each
     * is copied as written unless its key is size. */
    for (size_t i = 0; i < len;) {
        size_t start = i;
        while (i < len && !(list[i] == ',' && list[i + 1] != ',')) {
            i += list[i] == ',' ? 2 : 1;
        }
        size_t item = i - start;
        bool is_size = item >= 4 && strncmp(list + start, "size", 4) == 0 &&
                       (item == 4 || list[start + 4] == '=');
        if (item && !is_size) {
            if (n) {
                out[n++] = ',';
            }
            memcpy(out + n, list + start, item);
            n += item;
        }
        i++;
    }
    out[n] = '\0';
    *sized = *o;
    sized->options = out;
    sized->size = src ? blk_image_size(src) : o->size;
    sized->size_set = true;
    *options = out;
    return 0;
}

int blk_image_data_clusters(struct blk_image *img, uint64_t cluster_size, uint64_t *bytes)
{
    uint64_t size = blk_image_size(img);
    uint64_t total = 0;

    *bytes = 0;
    if (cluster_size == 0 || (cluster_size & (cluster_size - 1)) != 0) {
        return err_setx(EINVAL, "measure: cluster size %" PRIu64 " is not a power of two",
                        cluster_size);
    }
    for (uint64_t off = 0; off < size;) {
        struct blk_extent e;
        int r = blk_image_block_status(img, off, size - off, &e);

        if (r < 0) {
            return r;
        }
        if (e.length == 0 || e.length > size - off) {
            return err_setx(EIO, "%s: block status returned a bad length at offset %" PRIu64,
                            ESC_NAME(blk_image_root(img)), off);
        }
        if ((e.flags & BLK_EXT_ZERO) || !(e.flags & BLK_EXT_DATA)) {
            off += e.length;
            continue;
        }
        /* Every cluster the data touches counts once: the next look
         * starts after the last cluster counted. */
        uint64_t first = off & ~(cluster_size - 1);
        uint64_t end = off + e.length;
        uint64_t last = end > UINT64_MAX - cluster_size ? UINT64_MAX & ~(cluster_size - 1)
                                                        : ROUND_UP(end, cluster_size);
        total += last - first;
        off = last;
    }
    *bytes = total;
    return 0;
}

/* dd reads and writes this much at a time: bs is only a unit of count
 * and skip, as in qemu-img, and the result is the same bytes. */
#define COPY_RANGE_CHUNK (1u << 20)

int blk_dd_copy(struct blk_image *src, uint64_t off, uint64_t len, struct blk_image *dst,
                bool dst_zero, volatile sig_atomic_t *cancel)
{
    CLEANUP_FREE void *buf = NULL;
    int r;

    if (len == 0) {
        return 0;
    }
    if (posix_memalign(&buf, 4096, COPY_RANGE_CHUNK) != 0) {
        return err_setx(ENOMEM, "dd: no memory for a %u-byte buffer", COPY_RANGE_CHUNK);
    }
    for (uint64_t pos = 0; pos < len;) {
        struct blk_extent e;
        uint64_t n = MIN(len - pos, (uint64_t)COPY_RANGE_CHUNK);

        if (cancel && *cancel) {
            return err_setx(EINTR, "dd: interrupted");
        }
        r = blk_image_block_status(src, off + pos, n, &e);
        if (r < 0) {
            return r;
        }
        if (e.length == 0 || e.length > n) {
            return err_setx(EIO, "%s: block status returned a bad length at offset %" PRIu64,
                            ESC_NAME(blk_image_root(src)), off + pos);
        }
        n = e.length;
        if (e.flags & BLK_EXT_ZERO) {
            r = dst_zero ? 0 : blk_image_pwrite_zeroes(dst, pos, n, 0);
        } else {
            r = blk_image_pread(src, off + pos, buf, n);
            if (r == 0) {
                r = blk_image_pwrite(dst, pos, buf, n, 0);
            }
        }
        if (r < 0) {
            return r;
        }
        pos += n;
    }
    return 0;
}
