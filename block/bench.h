/* block/bench.h: the engine of "diskimg bench": DEPTH threads keep
 * requests in flight against an open image (reads, writes, FUA writes, a
 * flush every N writes) and time each one.  Opening the image, and what
 * to print and which exit code to give, are the caller's. */
#ifndef DISKIMG_BLOCK_BENCH_H
#define DISKIMG_BLOCK_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/histogram.h"

struct blk_image;

struct blk_bench_opts {
    bool write; /* write (non-zero bytes) instead of read */
    bool fua;   /* every write with BLK_REQ_FUA */
    bool rand;  /* random request offsets, else sequential */
    uint64_t depth;
    uint64_t size;  /* bytes per request */
    uint64_t count; /* requests in all */
    /* Requests fall in [offset, image size), on multiples of size from
     * offset: the image must hold one request at offset. */
    uint64_t offset;
    uint64_t flush_interval; /* a flush after every N writes; 0: none */
};

/* The step that failed, since the caller reports them differently. */
enum blk_bench_failure {
    BLK_BENCH_FAIL_NONE,
    BLK_BENCH_FAIL_START,   /* no memory, or no thread could start */
    BLK_BENCH_FAIL_REQUEST, /* a request or an interval flush */
    BLK_BENCH_FAIL_FLUSH,   /* the flush of what was written, at the end */
};

struct blk_bench_result {
    uint64_t ns;                /* the time the requests took */
    struct histogram lat;       /* each request's latency, ns */
    struct histogram flush_lat; /* each interval flush's, ns */
    enum blk_bench_failure failed;
};

/* Runs o->count requests on img with o->depth in flight, then flushes
 * what was written (not timed).  Returns 0 with *res filled in, or -errno
 * with res->failed telling which step failed and, for a failed request,
 * its message recorded on the calling thread. */
int blk_bench(struct blk_image *img, const struct blk_bench_opts *o, struct blk_bench_result *res);

#endif
