/* cmd/target-gce.h: the gce target's hooks (target-gce.c), for the
 * target table of cmd/target.c. */
#ifndef DISKIMG_CMD_TARGET_GCE_H
#define DISKIMG_CMD_TARGET_GCE_H

#include "target.h"

/* target_write_fn: the archive of src at out ("-": standard output),
 * disk.raw of size bytes (src rounded up to a GiB). */
int target_gce_write(const struct target_profile *p, struct blk_image *src, const char *out,
                     uint64_t size, const struct blk_copy_opts *copy,
                     const struct blk_create_opts *create);
/* target_lint_fn: each violation of filename ("-": standard input) on
 * stdout with its fix; their count, or -errno when it cannot be read. */
int target_gce_lint(const char *name, const char *filename, bool quiet);

#endif
