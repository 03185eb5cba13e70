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

#include "block/block.h"
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

static void amend(struct blk_image *img, void *opaque)
{
    const uint64_t *pick = opaque;

    (void)blk_image_amend(img, amends[*pick % (sizeof amends / sizeof amends[0])], false, NULL,
                          NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t pick = fuzz_pick(data, size, 0);

    fuzz_write_round(data, size, pick >> 8, amend, NULL, &pick);
    return 0;
}
