/* block/pread-many.h: read several ranges on every core.  Reading a
 * compressed image costs CPU (inflating), not I/O, so one thread reading
 * a chunk after another uses one core; this splits the reads into pieces
 * (whole clusters, so no cluster is inflated twice) and reads them on as
 * many threads as there are usable CPUs. */
#ifndef DISKIMG_BLOCK_PREAD_MANY_H
#define DISKIMG_BLOCK_PREAD_MANY_H

#include <stdint.h>

struct blk_image;

struct blk_pread_job {
    struct blk_image *img;
    uint64_t off;
    void *buf;
    uint64_t len;
};

/* Read every job, on up to 'threads' threads (the caller's included; 0:
 * the usable CPUs).  Returns 0, or the first error (err_* set). */
int blk_pread_many(const struct blk_pread_job *jobs, unsigned njobs, unsigned threads);

#endif
