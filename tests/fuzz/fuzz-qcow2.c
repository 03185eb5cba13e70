/* tests/fuzz/fuzz-qcow2.c: libFuzzer harness for opening and reading an
 * image.  The input is the whole image file: it is written to a memfd and
 * opened by its /proc/self/fd path with the format probed (qcow2 or raw),
 * read-only and without backing files, as "diskimg info/check/map" do.
 * Then a few ranges are read, block status is walked over the image, the
 * image is checked, and closed.  Everything is bounded (64 extents, 1 MiB
 * per read) so that a slow input means a slow driver, not a slow harness.
 * Two more passes follow when the first one opened the image: its first
 * internal snapshot is read the same way (diskimg serve -l), and the
 * image is opened read-write and repaired (diskimg check -r all), which
 * writes to the memfd only.
 *
 * Besides the sanitizers, the harness traps on broken block-status
 * invariants (an empty or overlong extent would hang "diskimg map").
 *
 * Build and run: see tests/fuzz/README.md. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "block/bitmap.h"
#include "block/block.h"
#include "common/error.h"
#include "fuzz-image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Load a persistent bitmap and walk at most 64 of its extents. */
static void walk_bitmap(struct blk_image *img, const char *name)
{
    struct blk_bitmap *bm = NULL;

    if (blk_image_load_bitmap(img, name, &bm) < 0) {
        err_clear();
        return;
    }
    uint64_t pos = 0;
    for (int i = 0; i < 64 && pos < bm->size; i++) {
        bool dirty;
        uint64_t run;
        blk_bitmap_extent(bm, pos, bm->size - pos, &dirty, &run);
        pos += run;
    }
    blk_bitmap_free(bm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    char snapshot[64] = "";
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = NULL, /* probe */
        .read_only = true,
        .no_backing = true,
    };
    struct blk_check_result res;
    struct blk_image_info info;

    fuzz_image_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        return 0;
    }
    fuzz_read_image(img, fuzz_pick(data, size, 0));
    if (blk_image_get_info(img, &info) == 0 && info.n_snapshots && info.snapshots[0].id) {
        snprintf(snapshot, sizeof snapshot, "%s", info.snapshots[0].id);
    }
    if (info.n_bitmaps && info.bitmaps[0].name) {
        walk_bitmap(img, info.bitmaps[0].name);
    }
    blk_image_info_free(&info); /* what it filled in, even on failure */
    (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
    blk_image_close(img);
    err_clear();

    if (snapshot[0]) {
        blk_kv_set(&o.options, "snapshot", snapshot);
        if (blk_image_open(&img, &o) == 0) {
            fuzz_read_image(img, fuzz_pick(data, size, 0));
            blk_image_close(img);
        }
        o.options.n = 0;
        err_clear();
    }

    o.read_only = false;
    o.for_check = true;
    if (blk_image_open(&img, &o) == 0) {
        if (blk_image_check(img, BLK_REPAIR_ALL, NULL, &res) == 0) {
            (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
        }
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
