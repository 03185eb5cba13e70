/* tests/fuzz/fuzz-vmdk.c: libFuzzer harness for the vmdk driver.  The
 * input is the whole image file (a sparse extent or a text descriptor),
 * written to a memfd and opened as vmdk by its /proc/self/fd path,
 * --untrusted, so that a descriptor's extents are refused rather than
 * looked up beside the memfd.  A few ranges are read, block status is
 * walked (trapping on an empty or overlong extent, which would hang
 * "diskimg map"), info and check run; then the image is opened
 * read-write, one write and a flush go through the allocating (or
 * stream) path, and it is closed, which writes to the memfd only.
 *
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <string.h>

#include "block/block.h"
#include "common/error.h"
#include "fuzz-image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = "vmdk",
        .read_only = true,
        .untrusted = true,
    };
    struct blk_check_result res;
    struct blk_image_info info;
    uint64_t pick = fuzz_pick(data, size, 0);

    fuzz_image_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        return 0;
    }
    fuzz_read_image(img, pick);
    memset(&info, 0, sizeof info);
    (void)blk_image_get_info(img, &info);
    blk_image_info_free(&info);
    (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
    blk_image_close(img);
    err_clear();

    o.read_only = false;
    if (blk_image_open(&img, &o) == 0) {
        uint64_t vsize = blk_image_size(img);
        if (vsize) {
            uint64_t off = (pick % vsize) & ~(uint64_t)511;
            uint64_t len = vsize - off < 65536 ? vsize - off : 65536;
            memset(fuzz_buf, 0x5a, len);
            (void)blk_image_pwrite(img, off, fuzz_buf, len, 0);
            (void)blk_image_pwrite(img, 0, fuzz_buf, vsize < 4096 ? vsize : 4096, 0);
            (void)blk_image_flush(img);
            fuzz_read_image(img, pick);
        }
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
