/* cmd/convert-bitmaps.h: convert --bitmaps, as qemu-img's. */
#ifndef DISKIMG_CMD_CONVERT_BITMAPS_H
#define DISKIMG_CMD_CONVERT_BITMAPS_H

#include <stdbool.h>

struct blk_image;

/* Before the target exists: SRC and the target's format (NULL: not a
 * block format) must both store bitmaps, and every bitmap of SRC must be
 * consistent unless skip_broken.  0, or EXIT_ERROR after one line. */
int convert_bitmaps_check(struct blk_image *src, const char *dst_format, bool skip_broken);
/* After the copy: every consistent bitmap of src into dst, with its name,
 * granularity, enabled flag and bits (inconsistent ones skipped with a
 * warning).  0, or -errno after printing which bitmap failed. */
int convert_bitmaps_copy(struct blk_image *src, struct blk_image *dst);

#endif
