/* cmd/convert-bitmaps.c: convert --bitmaps copies the source's persistent
 * dirty bitmaps (its top image only, as qemu-img) after the data, each as
 * "bitmap --add" with the source's granularity and enabled flag, then
 * "--merge" of its bits.  Inconsistent (in-use) bitmaps refuse the whole
 * convert before the target is made, unless --skip-broken-bitmaps. */
#include "convert-bitmaps.h"

#include <errno.h>
#include <stdio.h>

#include "block/bitmap.h"
#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"

int convert_bitmaps_check(struct blk_image *src, const char *dst_format, bool skip_broken)
{
    struct blk_image_info info = {0};
    int status = 0;

    if (!blk_format_has_bitmaps(blk_image_format(src))) {
        fprintf(stderr, "diskimg: Source lacks bitmap support\n");
        return EXIT_ERROR;
    }
    if (!dst_format || !blk_format_has_bitmaps(dst_format)) {
        fprintf(stderr, "diskimg: Format driver '%s' does not support bitmaps\n",
                dst_format ? dst_format : "(target)");
        return EXIT_ERROR;
    }
    if (blk_image_get_info(src, &info) < 0) {
        cmd_print_error(-EIO);
        return EXIT_ERROR;
    }
    for (unsigned i = 0; i < info.n_bitmaps && !skip_broken && status == 0; i++) {
        if (info.bitmaps[i].in_use) {
            CLEANUP_FREE char *esc = str_escape(info.bitmaps[i].name);
            fprintf(stderr,
                    "diskimg: Cannot copy inconsistent bitmap '%s': use --skip-broken-bitmaps, "
                    "or 'diskimg bitmap --remove' to delete it\n",
                    esc ? esc : "?");
            status = EXIT_ERROR;
        }
    }
    blk_image_info_free(&info);
    return status;
}

static int copy_one(struct blk_image *src, struct blk_image *dst, const struct blk_bitmap_info *bi)
{
    struct blk_bitmap *bits = NULL;
    struct blk_bitmap_op add = {
        .kind = BLK_BITMAP_ADD,
        .name = bi->name,
        .granularity = (uint32_t)bi->granularity,
        .disabled = !bi->enabled,
    };
    int r = blk_image_load_bitmap(src, bi->name, &bits);

    if (r == 0) {
        r = blk_image_bitmap_change(dst, &add);
    }
    if (r == 0) {
        struct blk_bitmap_op merge = {.kind = BLK_BITMAP_MERGE, .name = bi->name, .source = bits};
        r = blk_image_bitmap_change(dst, &merge);
    }
    blk_bitmap_free(bits);
    return r;
}

int convert_bitmaps_copy(struct blk_image *src, struct blk_image *dst)
{
    struct blk_image_info info = {0};
    int r = blk_image_get_info(src, &info);

    for (unsigned i = 0; r == 0 && i < info.n_bitmaps; i++) {
        CLEANUP_FREE char *esc = str_escape(info.bitmaps[i].name);
        if (info.bitmaps[i].in_use) {
            fprintf(stderr, "diskimg: warning: Skipping inconsistent bitmap '%s'\n",
                    esc ? esc : "?");
            continue;
        }
        r = copy_one(src, dst, &info.bitmaps[i]);
        if (r < 0) {
            err_prefix("Failed to populate bitmap %s", esc ? esc : "?");
        }
    }
    blk_image_info_free(&info);
    return r;
}
