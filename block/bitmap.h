/* block/bitmap.h: a persistent dirty bitmap loaded into memory, as the
 * NBD server exports it in the qemu:dirty-bitmap:NAME context.
 *
 * Bit i covers guest bytes [i * granularity, (i + 1) * granularity);
 * bits are numbered from the least significant bit of byte 0, as qcow2
 * stores them.  A loaded bitmap is read-only: diskimg records no writes
 * in bitmaps (see formats/qcow2/bitmap.c for what opening an image for
 * writing does to them). */
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
};

/* Whether guest byte off is dirty, and how many bytes from off (at most
 * len, and never past the bitmap's size) share that state.  off must be
 * below size. */
void blk_bitmap_extent(const struct blk_bitmap *bm, uint64_t off, uint64_t len, bool *dirty,
                       uint64_t *run);

void blk_bitmap_free(struct blk_bitmap *bm);

#endif
