/* block/bitmap.h: a persistent dirty bitmap loaded into memory, as the
 * NBD server exports it in the qemu:dirty-bitmap:NAME context, and as a
 * format driver keeps an enabled bitmap up to date while the image is
 * open for writing.
 *
 * Bit i covers guest bytes [i * granularity, (i + 1) * granularity);
 * bits are numbered from the least significant bit of byte 0, as qcow2
 * stores them.  Bits are set with atomic byte operations and read with
 * atomic loads, so a bitmap that the driver updates on every write can
 * be exported at the same time: a bitmap is shared by reference
 * (blk_bitmap_ref), and freed when its last reference goes. */
#ifndef DISKIMG_BLOCK_BITMAP_H
#define DISKIMG_BLOCK_BITMAP_H

#include <stdbool.h>
#include <stdint.h>

struct blk_bitmap {
    char *name;
    uint64_t size;        /* guest bytes covered (the virtual size) */
    uint32_t granularity; /* bytes per bit, a power of two */
    bool enabled;         /* the image records writes in it ("auto") */
    uint64_t nbits;
    uint8_t *bits; /* ceil(nbits / 8) bytes, unused tail bits zero */
    _Atomic unsigned refs;
};

/* A clean bitmap with one reference; NULL (with a message) when out of
 * memory.  granularity must be a power of two. */
struct blk_bitmap *blk_bitmap_new(const char *name, uint64_t size, uint32_t granularity);
/* Another reference to bm (returned). */
struct blk_bitmap *blk_bitmap_ref(struct blk_bitmap *bm);
/* Bytes of bits. */
uint64_t blk_bitmap_bytes(const struct blk_bitmap *bm);

/* Whether guest byte off is dirty, and how many bytes from off (at most
 * len, and never past the bitmap's size) share that state.  off must be
 * below size. */
void blk_bitmap_extent(const struct blk_bitmap *bm, uint64_t off, uint64_t len, bool *dirty,
                       uint64_t *run);

/* Mark the guest bytes [off, off+len) dirty (clipped to the size): every
 * bit that covers one of them.  Safe against concurrent readers and
 * setters. */
void blk_bitmap_set_range(struct blk_bitmap *bm, uint64_t off, uint64_t len);
/* dst |= src, whatever the two granularities: every dst bit covering a
 * byte that src calls dirty. */
void blk_bitmap_merge(struct blk_bitmap *dst, const struct blk_bitmap *src);
void blk_bitmap_clear(struct blk_bitmap *bm);

/* Drop one reference; frees bm with the last.  NULL is fine. */
void blk_bitmap_free(struct blk_bitmap *bm);

#endif
