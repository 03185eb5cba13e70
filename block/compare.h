/* block/compare.h: do two images read the same?  The engine of "diskimg
 * compare" (qemu-img compare's rules); what to print and which exit code
 * to give are the caller's. */
#ifndef DISKIMG_BLOCK_COMPARE_H
#define DISKIMG_BLOCK_COMPARE_H

#include <stdbool.h>
#include <stdint.h>

struct blk_image;

struct blk_compare_opts {
    /* qemu-img compare -s: the sizes and the block status (data, zero,
     * allocated, offset) must match too, so a hole differs from written
     * zeroes.  Otherwise a hole equals zeroes, and an image larger than
     * the other is equal if its extra tail reads as zeroes. */
    bool strict;
    /* Called as the comparison advances: the offset reached, and the
     * larger of the two sizes. */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
};

enum blk_compare_verdict {
    BLK_CMP_IDENTICAL,
    BLK_CMP_SIZE_DIFFERS,   /* strict: the sizes differ; nothing was read */
    BLK_CMP_STATUS_DIFFERS, /* strict: the block status differs at offset */
    BLK_CMP_DATA_DIFFERS,   /* the first differing byte is at offset */
};

/* The step that failed, since qemu-img gives each its own exit code. */
enum blk_compare_failure {
    BLK_CMP_FAIL_NONE, /* none of these (out of memory) */
    BLK_CMP_FAIL_STATUS,
    BLK_CMP_FAIL_READ,
};

struct blk_compare_result {
    enum blk_compare_verdict verdict;
    uint64_t offset; /* where they differ, or where the failed step was */
    /* Not strict, the sizes differ and the common part is the same: the
     * tail of the larger image was (or was being) compared with zeroes. */
    bool tail_compared;
    enum blk_compare_failure failed; /* when blk_compare fails */
};

/* Compare a with b.  Returns 0 with *res filled in, or -errno with a
 * message recorded and res->failed telling which step failed; ranges that
 * read as zeroes in both images are never read. */
int blk_compare(struct blk_image *a, struct blk_image *b, const struct blk_compare_opts *o,
                struct blk_compare_result *res);

#endif
