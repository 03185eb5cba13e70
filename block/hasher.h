/* block/hasher.h: the content checksum "dkh1-sha256" of diskimg-checksum(1),
 * assembled from pieces that may arrive in any order and from any thread.
 *
 * The disk is cut into blocks of BLK_HASH_BLOCK bytes (the last one
 * padded with zeroes), each block is hashed with SHA-256, and the block
 * digests are hashed BLK_HASH_FANOUT at a time, level after level, until
 * one digest is left; the checksum is SHA-256 of the algorithm's name,
 * the virtual size and that digest (the man page has the exact rules).
 * Zeroes cost nothing: an all-zero block, and a whole all-zero node at
 * every level, has a digest computed once.  Callers (the checksum reader
 * and convert's copy) give each block exactly once: as data (hashed by
 * the calling thread, outside the lock) or as zeroes. */
#ifndef DISKIMG_BLOCK_HASHER_H
#define DISKIMG_BLOCK_HASHER_H

#include <stdint.h>

#include "block.h"

#define BLK_HASH_BLOCK (64u << 10)
#define BLK_HASH_FANOUT 4096u

struct blk_hasher;

/* For an image of size bytes (any size, 0 included). */
int blk_hasher_new(uint64_t size, struct blk_hasher **out);
void blk_hasher_free(struct blk_hasher *h);

/* The guest bytes [off, off + len): off is a multiple of BLK_HASH_BLOCK
 * and len > 0.  When off + len is not a multiple of BLK_HASH_BLOCK, the
 * range covers the start of its last block and the rest of that block
 * reads as zeroes (it is past the end of the image, or the caller knows
 * it is zero).  Thread-safe; the expensive part runs unlocked. */
int blk_hasher_data(struct blk_hasher *h, uint64_t off, const void *buf, uint64_t len);
/* The same for a range that reads as zeroes: nothing is hashed but a
 * partial node's worth of precomputed digests. */
int blk_hasher_zero(struct blk_hasher *h, uint64_t off, uint64_t len);
/* Read [start, end) of img (start a multiple of BLK_HASH_BLOCK, end at
 * most its size) on o's workers and give it to h: ranges that block
 * status says read as zeroes are never read (checksum.c). */
int blk_hasher_read(struct blk_hasher *h, struct blk_image *img, uint64_t start, uint64_t end,
                    const struct blk_checksum_opts *o);
/* The checksum, once every block was given (-EIO otherwise). */
int blk_hasher_final(struct blk_hasher *h, uint8_t out[BLK_CHECKSUM_LEN]);

#endif
