/* block/chain.h: changing backing chains, as qemu-img rebase and commit
 * do.  The engines here move data between the layers of an open image's
 * chain; the format drivers change the metadata (their change_backing
 * and make_empty ops).  Not for: opening chains (stack.c, the drivers). */
#ifndef DISKIMG_BLOCK_CHAIN_H
#define DISKIMG_BLOCK_CHAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

struct blk_image;

/* The depth in img's backing chain (1: img's backing file) of the image
 * that path names, 0 when none does.  Matched as qemu-img matches -b: the
 * same file, with a relative path taken from the directory of the image
 * that records it, or from the current directory. */
unsigned blk_image_chain_find(struct blk_image *img, const char *path);
/* The file name of the image at depth d of img's chain (0: img), or NULL
 * past the bottom. */
const char *blk_image_chain_name(struct blk_image *img, unsigned depth);
/* The format of the image at depth d, or NULL past the bottom. */
const char *blk_image_chain_format(struct blk_image *img, unsigned depth);

/* Can the image's format record another backing file (rebase)? */
bool blk_image_can_change_backing(const struct blk_image *img);
/* Record backing file 'file' (NULL: none) of format 'format' (NULL: not
 * recorded) in the image, durably.  -ENOTSUP when the format cannot. */
int blk_image_change_backing(struct blk_image *img, const char *file, const char *format);
/* Drop every cluster the image holds so that it reads through to its
 * backing file, durably.  -ENOTSUP when the format cannot. */
int blk_image_make_empty(struct blk_image *img);

struct blk_chain_opts {
    unsigned workers;    /* threads (0: 8) */
    uint64_t rate_limit; /* bytes written per second, 0: no limit (commit -r) */
    /* Called from worker threads with the bytes of the image done. */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
    volatile sig_atomic_t *cancel; /* set to stop early with -EINTR */
};

/* Safe rebase's data step: wherever img's top layer holds nothing, write
 * into it what its current chain reads and new_backing (NULL: none; it
 * reads as zeroes past its end) does not, so that img reads the same
 * once new_backing is recorded.  new_depth: new_backing's depth in img's
 * current chain (0: not in it), where what the layers below it hold is
 * known to agree.  Flushed on return. */
int blk_rebase_data(struct blk_image *img, struct blk_image *new_backing, unsigned new_depth,
                    const struct blk_chain_opts *o);

/* commit's data step: the image at base_depth of img's chain, opened
 * writable (write_backing_depth), grows to img's size if smaller and
 * gets everything the layers above it hold; flushed on return, so that
 * img then reads the same whatever its layers above the base hold. */
int blk_commit_data(struct blk_image *img, unsigned base_depth, const struct blk_chain_opts *o);

#endif
