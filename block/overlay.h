/* block/overlay.h: a throw-away overlay over an image opened read-only
 * (serve -s), opened by blk_image_open when blk_image_opts.temp_overlay
 * asks for it. */
#ifndef DISKIMG_BLOCK_OVERLAY_H
#define DISKIMG_BLOCK_OVERLAY_H

struct blk_node;

/* A writable node over base (read-only, of any format), which it owns
 * from then on, even on failure.  Writes land in a file of $TMPDIR
 * (/var/tmp when unset, as qemu) that has no name from the start, so
 * nothing is left behind whatever ends the process. */
int blk_overlay_open(struct blk_node **out, struct blk_node *base);

#endif
