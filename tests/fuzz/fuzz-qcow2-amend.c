/* tests/fuzz/fuzz-qcow2-amend.c: libFuzzer harness for "diskimg amend".
 * The input is the whole image file (a memfd, format probed, no backing
 * file opened, as amend --untrusted opens it).  It is opened for writing
 * and amended with one of a few option lists the input picks: the
 * refcount rewrite in both directions, the downgrade (zero clusters in
 * every L2 table, snapshots' too, bitmaps dropped), the upgrade, lazy
 * refcounts, a size.  Then it is opened again read-only, read and
 * checked, as the next user would.  Everything amend parses comes from
 * the image: L2 entries, snapshot and bitmap tables, refcount blocks.
 *
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <string.h>

#include "block/block.h"
#include "common/error.h"
#include "fuzz-image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const amends[] = {
    "compat=0.10",
    "refcount_bits=1",
    "refcount_bits=64",
    "compat=1.1,lazy_refcounts=on,refcount_bits=8",
    "compat=0.10,refcount_bits=16",
    "lazy_refcounts=off,size=8M",
    "backing_file=base.qcow2,backing_fmt=qcow2",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .no_backing = true,
        .untrusted = true,
    };
    struct blk_check_result res;
    uint64_t pick = fuzz_pick(data, size, 0);

    fuzz_image_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        return 0;
    }
    const char *opts = amends[pick % (sizeof amends / sizeof amends[0])];
    (void)blk_image_amend(img, opts, false, NULL, NULL);
    blk_image_close(img);
    err_clear();

    o.read_only = true;
    if (blk_image_open(&img, &o) == 0) {
        fuzz_read_image(img, pick >> 8);
        (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
