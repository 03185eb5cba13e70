/* tests/fuzz/fuzz-vdi.c: libFuzzer harness for the vdi driver.  The input
 * is the whole image file: it is written to a memfd and opened by its
 * /proc/self/fd path as vdi (named, so every input reaches the header
 * parser), read-only: a few ranges are read, block status is walked and
 * the image is checked, as "diskimg info/map/check" do.  When that open
 * succeeds, the image is opened read-write and written: into a block the
 * input picks (allocating it when it is a hole), zeroes over another, and
 * checked again, which exercises the allocation path on hostile maps; the
 * writes go to the memfd only.  Everything is bounded (64 extents, 1 MiB
 * per read, 64 KiB per write).
 *
 * The harness traps on broken block-status invariants (an empty or
 * overlong extent would hang "diskimg map") and on a written range that
 * does not read back.
 *
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "block/block.h"
#include "common/error.h"
#include "fuzz-image.h"

#define WRITE_LEN 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t wbuf[WRITE_LEN];

/* Write a pattern where the input says, read it back, zero elsewhere. */
static void write_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img);

    if (vsize < WRITE_LEN) {
        return;
    }
    uint64_t off = (fuzz_pick(data, size, 8) % (vsize - WRITE_LEN + 1)) & ~(uint64_t)511;
    memset(wbuf, 0x5a, sizeof wbuf);
    if (blk_image_pwrite(img, off, wbuf, WRITE_LEN, 0) == 0) {
        if (blk_image_pread(img, off, fuzz_buf, WRITE_LEN) == 0 &&
            memcmp(fuzz_buf, wbuf, WRITE_LEN) != 0) {
            fprintf(stderr, "write at %llu does not read back\n", (unsigned long long)off);
            __builtin_trap();
        }
    }
    uint64_t zoff = (fuzz_pick(data, size, 16) % (vsize - WRITE_LEN + 1)) & ~(uint64_t)511;
    (void)blk_image_pwrite_zeroes(img, zoff, WRITE_LEN, 0);
    (void)blk_image_flush(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = "vdi",
        .read_only = true,
        .no_backing = true,
    };
    struct blk_check_result res;
    struct blk_image_info info;

    fuzz_image_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        /* A check opens what a normal open refuses (bad map entries). */
        o.for_check = true;
        if (blk_image_open(&img, &o) == 0) {
            (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
            blk_image_close(img);
        }
        err_clear();
        return 0;
    }
    fuzz_read_image(img, fuzz_pick(data, size, 0));
    if (blk_image_get_info(img, &info) == 0) {
        blk_image_info_free(&info);
    }
    (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
    blk_image_close(img);
    err_clear();

    o.read_only = false;
    if (blk_image_open(&img, &o) == 0) {
        write_image(img, data, size);
        (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
