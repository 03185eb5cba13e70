/* block/file-lock.h: image locking on local files, the way qemu does it,
 * so that qemu-img, qemu-nbd, qemu and diskimg see each other.
 *
 * A user of a file holds permissions (BLK_PERM_*, block/driver.h) and
 * shares some of them with others.  Each process keeps one open file
 * description per locked file; on it, an OFD read lock on byte 100 + bit
 * says "I hold this permission" and one on byte 200 + bit says "I let
 * nobody else hold it".  Taking permissions locks the bytes first and
 * then asks the kernel (F_OFD_GETLK) whether another open file
 * description holds a conflicting byte, so two processes starting at
 * once cannot both miss each other.  Users inside this process are
 * checked against each other here, since their locks share one open file
 * description and cannot conflict in the kernel.
 *
 * The locks live as long as the open file description: closing the last
 * descriptor, which the kernel does when the process exits however it
 * exits, releases them.  Used by file-posix.c and create.c. */
#ifndef DISKIMG_BLOCK_FILE_LOCK_H
#define DISKIMG_BLOCK_FILE_LOCK_H

#include <stdbool.h>

#include "driver.h"

struct blk_file_lock;

/* Take p->perm and refuse other processes what is not in p->shared (the
 * other users of this process what is not in p->shared_here), on the
 * file open as fd (which may be closed afterwards: the lock keeps its
 * own descriptor).  A 'hold' keeps other processes out but not the users
 * of this process that come after it (create keeps one while it formats
 * the file it made, and convert while it opens that file again); users
 * already there are checked, so a hold is refused on a file this command
 * reads.  -EBUSY with a message
 * naming filename when another process, or another user here,
 * conflicts. */
int blk_file_lock_acquire(struct blk_file_lock **out, int fd, const char *filename,
                          const struct blk_perms *p, bool hold);
/* Change a user's permissions; on failure it keeps the old ones. */
int blk_file_lock_update(struct blk_file_lock *l, const struct blk_perms *p);
/* Also in block.h, for the holds that blk_create hands out.  NULL: no-op. */
void blk_file_lock_release(struct blk_file_lock *l);

#endif
