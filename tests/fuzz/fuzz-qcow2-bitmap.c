/* tests/fuzz/fuzz-qcow2-bitmap.c: libFuzzer harness for the bitmap writer:
 * "diskimg bitmap", the bitmaps every writer keeps up to date, and resize.
 * The input is the whole image file (a memfd, format probed, no backing
 * file opened).  It is opened for writing (which loads the enabled
 * bitmaps), written (a write, a zero write and a discard the input
 * places), given a sequence of bitmap operations the input picks (add,
 * merge of its first bitmap, clear, disable, enable, remove), resized
 * when the input says so, and closed (which writes the bitmaps back).
 * Then it is opened again read-only, its bitmaps loaded, read and
 * checked, as the next user would.  Everything the writer reads comes
 * from the image: the directory, bitmap tables, refcount blocks.
 *
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "block/bitmap.h"
#include "block/block.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "fuzz-image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The image's first bitmap's name (into name), or "" when none. */
static void first_bitmap(struct blk_image *img, char *name, size_t len)
{
    struct blk_image_info info;

    name[0] = '\0';
    if (blk_image_get_info(img, &info) == 0 && info.n_bitmaps && info.bitmaps[0].name) {
        snprintf(name, len, "%s", info.bitmaps[0].name);
    }
    blk_image_info_free(&info);
    err_clear();
}

/* Write where the input picks, inside the image. */
static void write_some(struct blk_image *img, uint64_t pick)
{
    uint64_t size = blk_image_size(img);

    if (size < 4096) {
        return;
    }
    uint64_t off = (pick % size) & ~511ull, len = MIN(4096, size - off);
    memset(fuzz_buf, 0x5a, len);
    (void)blk_image_pwrite(img, off, fuzz_buf, len, 0);
    (void)blk_image_pwrite_zeroes(img, (pick >> 16) % size & ~511ull, 512, 0);
    (void)blk_image_discard(img, (pick >> 32) % size & ~511ull, 512, 0);
    err_clear();
}

/* Up to four operations, two bits each, from the input's pick. */
static void operate(struct blk_image *img, const char *first, uint64_t pick)
{
    struct blk_bitmap *src = NULL;

    if (first[0] && blk_image_load_bitmap(img, first, &src) < 0) {
        src = NULL;
    }
    err_clear();
    for (int i = 0; i < 4; i++, pick >>= 3) {
        struct blk_bitmap_op op = {.name = "fz", .granularity = 512u << (pick & 7)};
        switch ((pick >> 3) & 7) {
        case 0:
            op.kind = BLK_BITMAP_ADD;
            break;
        case 1:
            op.kind = BLK_BITMAP_MERGE;
            op.source = src;
            break;
        case 2:
            op.kind = BLK_BITMAP_CLEAR;
            op.name = first[0] ? first : "fz";
            break;
        case 3:
            op.kind = BLK_BITMAP_DISABLE;
            break;
        case 4:
            op.kind = BLK_BITMAP_ENABLE;
            op.name = first[0] ? first : "fz";
            break;
        default:
            op.kind = BLK_BITMAP_REMOVE;
            op.name = first[0] && (pick & 1) ? first : "fz";
        }
        if (op.kind == BLK_BITMAP_MERGE && !src) {
            continue;
        }
        (void)blk_image_bitmap_change(img, &op);
        err_clear();
    }
    blk_bitmap_free(src);
}

struct round {
    uint64_t pick, ops;
    char first[1100];
};

/* Write, operate on the bitmaps, maybe grow: what the input picks. */
static void change(struct blk_image *img, void *opaque)
{
    struct round *r = opaque;

    first_bitmap(img, r->first, sizeof r->first);
    write_some(img, r->pick);
    operate(img, r->first, r->ops);
    if (r->pick & 1) {
        (void)blk_image_truncate(img, blk_image_size(img) + (1u << 20));
    }
}

/* The next user loads the first bitmap and walks it. */
static void inspect(struct blk_image *img, void *opaque)
{
    struct round *r = opaque;
    struct blk_bitmap *bm = NULL;

    first_bitmap(img, r->first, sizeof r->first);
    if (r->first[0] && blk_image_load_bitmap(img, r->first, &bm) == 0) {
        bool dirty;
        uint64_t run;
        if (bm->size) { /* (off must be inside) */
            blk_bitmap_extent(bm, 0, bm->size, &dirty, &run);
        }
        blk_bitmap_free(bm);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct round r = {.pick = fuzz_pick(data, size, 0), .ops = fuzz_pick(data, size, 8)};

    fuzz_write_round(data, size, r.pick >> 8, change, inspect, &r);
    return 0;
}
