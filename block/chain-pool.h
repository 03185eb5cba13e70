/* block/chain-pool.h: the worker pool that rebase and commit share
 * (block/chain.c).  Inside block/ only. */
#ifndef DISKIMG_BLOCK_CHAIN_POOL_H
#define DISKIMG_BLOCK_CHAIN_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "chain.h"

struct blk_image;
struct blk_extent;

/* One chunk of the image being worked on, with two scratch buffers of
 * the chunk size.  The function adds the bytes it wrote to 'written'
 * (for -r). */
struct blk_chain_chunk {
    uint64_t off, len;
    uint8_t *a, *b;
    uint64_t written;
    void *pool;    /* private to chain.c */
    uint64_t seq;  /* private to chain.c */
    bool has_turn; /* private to chain.c */
};
/* Return 0 or -errno with a message set. */
typedef int (*blk_chain_fn)(void *opaque, struct blk_chain_chunk *c);
/* How many bytes from off (at most max) fn would leave alone (0: it has
 * work at off), or -errno with a message set.  Whole chunks of such a
 * stretch become one chunk that fn never sees, so a terabyte overlay
 * holding a few megabytes costs a few chunks, not half a million. */
typedef int64_t (*blk_chain_skip_fn)(void *opaque, uint64_t off, uint64_t max);

/* For a skip function: how many bytes from off (at most max) the engine
 * leaves alone, walking img's extents by block status.  idle says how
 * many bytes at the start of the extent e at off the engine leaves
 * alone (e->length: all of it), or -errno. */
typedef int64_t (*blk_chain_idle_fn)(void *opaque, uint64_t off, const struct blk_extent *e);
int64_t blk_chain_idle_stretch(struct blk_image *img, uint64_t off, uint64_t max,
                               blk_chain_idle_fn idle, void *opaque);

/* Call before writing: waits until every chunk before this one is done,
 * so that writes land in offset order, as convert's do (an image that
 * allocates as it is written, qcow2, stays laid out sequentially), while
 * the reads of later chunks go on.  -ECANCELED when the work stopped. */
int blk_chain_turn(struct blk_chain_chunk *c);

/* Run fn over [0, size) in chunks of 'chunk' bytes (the last one may be
 * shorter) on o->workers threads, reporting progress, honouring cancel
 * and the rate limit; skip (may be NULL) says where fn has nothing to do.
 * Returns 0 or the first error, its message set in the calling thread. */
int blk_chain_run(uint64_t size, uint64_t chunk, blk_chain_fn fn, blk_chain_skip_fn skip,
                  void *opaque, const struct blk_chain_opts *o);

#endif
