/* block/copy-aux.h: what convert's copy (copy.c) adds on request: a rate
 * limit (-r), reads that go on past errors (--salvage) and copy
 * offloading (-C).  Each is independent of the copy's claims and
 * workers, so it lives here and copy.c calls it. */
#ifndef DISKIMG_BLOCK_COPY_AUX_H
#define DISKIMG_BLOCK_COPY_AUX_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "block.h"

/* ---- -r: a pace shared by every worker ---- */

struct blk_rate {
    uint64_t bytes_per_s; /* 0: no limit */
    pthread_mutex_t lock;
    double next; /* CLOCK_MONOTONIC seconds when the next write may start */
};

void blk_rate_init(struct blk_rate *r, uint64_t bytes_per_s);
void blk_rate_destroy(struct blk_rate *r);
/* Wait until len more bytes may be written: each write starts once the
 * ones before it have had their time at the rate, so the first goes at
 * once and the average stays at or below the rate.  Returns early (the
 * caller sees the cancel itself) when *cancel is set. */
void blk_rate_wait(struct blk_rate *r, uint64_t len, volatile sig_atomic_t *cancel);

/* ---- --salvage ---- */

/* The sector that --salvage reads, zeroes and reports on its own, as
 * qemu-img does. */
#define BLK_SALVAGE_SECTOR 512u

typedef void (*blk_salvage_fn)(void *opaque, uint64_t off, bool status, int err);

/* Read [off, off+len) of img; when the read fails, read the halves, down
 * to single sectors: a sector that still fails reads as zeroes and is
 * passed to bad (status false) with its errno.  Returns 0. */
int blk_pread_salvage(struct blk_image *img, uint64_t off, void *buf, uint64_t len,
                      blk_salvage_fn bad, void *opaque);

/* ---- -C ---- */

/* Copy [off, off+len) of src to the same offset of dst without reading
 * it here: the source's data must lie in its top image's file (raw, or
 * qcow2's uncompressed clusters), the target must be a window of a file
 * (raw), both plain files the kernel can copy between (copy_file_range).
 * -ENOTSUP (no message) when they are not: the caller reads and writes
 * instead, now and for the rest of the copy; 1 when only a part of this
 * range is not (compressed, or in a backing file): the caller reads and
 * writes this range. */
int blk_copy_range(struct blk_image *src, struct blk_image *dst, uint64_t off, uint64_t len);

#endif
