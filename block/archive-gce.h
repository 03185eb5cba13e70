/* block/archive-gce.h: writing an image as a Google Compute Engine import
 * archive: a gzip-compressed tar of the old GNU format (`tar
 * --format=oldgnu -S`) holding one sparse member, disk.raw, the image's
 * guest-visible bytes padded with a hole to a whole number of GiB (the
 * delivery-formats reference, section 8.3; diskimg-convert(1)).
 *
 * One pass over the source: its block status gives the sparse map (no
 * data read), the tar header with the map comes first, then the data
 * ranges are read (several requests in flight) and compressed on every
 * core (common/gzip-par.h).  The archive depends only on the source's
 * content and map, the mtime and the level: not on the worker count. */
#ifndef DISKIMG_BLOCK_ARCHIVE_GCE_H
#define DISKIMG_BLOCK_ARCHIVE_GCE_H

#include <signal.h>
#include <stdint.h>

#include "block.h"
#include "common/gce-lint.h"

#define BLK_GCE_ALIGN (1ULL << 30) /* disk.raw: a whole number of GiB */
/* The sparse map is kept below this many entries by storing the shortest
 * holes as data (a fragmented source only; GNU tar has no limit, but a
 * map this long is 24 MiB of headers). */
#define BLK_GCE_MAX_MAP (1u << 20)

struct blk_gce_opts {
    unsigned workers; /* reads in flight (-m); one compressing thread per core, or more */
    int level;        /* gzip level, 1..9 (0: 6, gzip's default) */
    uint64_t mtime;   /* the tar member's and the gzip header's */
    /* Called from the workers with the archive's input bytes done. */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
    volatile sig_atomic_t *cancel; /* set to stop with -EINTR */
};

/* What was written, for the caller's messages. */
struct blk_gce_result {
    uint64_t disk_size;   /* disk.raw's length */
    uint64_t stored;      /* data bytes in the tar (the rest are holes) */
    uint64_t map_entries; /* sparse map pairs, the final one included */
    uint64_t tar_size;    /* the tar, before gzip (what progress counts) */
};

/* disk.raw's length for an image of this size: rounded up to a GiB. */
uint64_t blk_gce_disk_size(uint64_t virtual_size);

/* Write the archive of src to fd (a file or a pipe, written in order).
 * Returns 0 or -errno with a message; the caller removes a file it made
 * when this fails. */
int blk_gce_write(struct blk_image *src, int fd, const struct blk_gce_opts *o,
                  struct blk_gce_result *res);

/* Lint the archive at path ("-": standard input) against GCE's rules
 * (common/gce-lint.h), reporting each violation.  Returns the violation
 * count, or -errno with a message when the file could not be read. */
int blk_gce_lint(const char *path, gce_lint_report_fn *report, void *opaque);

#endif
