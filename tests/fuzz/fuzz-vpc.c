/* tests/fuzz/fuzz-vpc.c: libFuzzer harness for the vpc (VHD) driver.  The
 * input is the whole image file, written to a memfd and opened by its
 * /proc/self/fd path as vpc, read-only and without its parent, as "diskimg
 * info/map" do: a few ranges are read and block status is walked.  Then
 * the image is opened read-write (a dynamic one allocates blocks, moves its
 * footer and writes its BAT back at flush and close, all into the memfd)
 * and written at a few places the input picks.  Everything is bounded (64
 * extents, 1 MiB per read, 64 KiB per write).
 *
 * Besides the sanitizers, the harness traps on broken block-status
 * invariants (an empty or overlong extent would hang "diskimg map").
 *
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <string.h>

#include "block/block.h"
#include "common/error.h"
#include "fuzz-image.h"

#define MAX_WRITE (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void write_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img);

    memset(fuzz_buf, 0xa5, MAX_WRITE);
    for (size_t k = 0; k < 3 && vsize; k++) {
        uint64_t off = fuzz_pick(data, size, 8 * (k + 1)) % vsize;
        uint64_t len = (fuzz_pick(data, size, 8 * k) % MAX_WRITE) + 1;
        len = len > vsize - off ? vsize - off : len;
        (void)blk_image_pwrite(img, off, fuzz_buf, len, k == 2 ? BLK_REQ_FUA : 0);
        (void)blk_image_pwrite_zeroes(img, off / 2, len, 0);
    }
    (void)blk_image_flush(img);
    fuzz_read_range(img, 0, 64 * 1024);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = "vpc",
        .read_only = true,
        .no_backing = true,
    };
    struct blk_image_info info;

    fuzz_image_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        return 0;
    }
    fuzz_read_image(img, fuzz_pick(data, size, 0));
    (void)blk_image_get_info(img, &info);
    blk_image_info_free(&info); /* what it filled in, even on failure */
    blk_image_close(img);
    err_clear();

    o.read_only = false;
    if (blk_image_open(&img, &o) == 0) {
        write_image(img, data, size);
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
