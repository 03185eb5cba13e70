/* block/chain-pool.h: the worker pool that rebase and commit share
 * (block/chain.c).  Inside block/ only. */
#ifndef DISKIMG_BLOCK_CHAIN_POOL_H
#define DISKIMG_BLOCK_CHAIN_POOL_H

#include <stdint.h>

#include "chain.h"

/* Work on [off, off+len) of the image with two scratch buffers of the
 * chunk size each; adds the bytes it wrote to *written (for -r).  Return
 * 0 or -errno with a message set. */
typedef int (*blk_chain_fn)(void *opaque, uint64_t off, uint64_t len, uint8_t *a, uint8_t *b,
                            uint64_t *written);

/* Run fn over [0, size) in chunks of 'chunk' bytes (the last one may be
 * shorter) on o->workers threads, reporting progress, honouring cancel
 * and the rate limit.  Returns 0 or the first error, its message set in
 * the calling thread. */
int blk_chain_run(uint64_t size, uint64_t chunk, blk_chain_fn fn, void *opaque,
                  const struct blk_chain_opts *o);

#endif
