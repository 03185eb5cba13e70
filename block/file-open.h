/* block/file-open.h: opening a local image file, for the file driver
 * (file-posix.c) and for create (create.c). */
#ifndef DISKIMG_BLOCK_FILE_OPEN_H
#define DISKIMG_BLOCK_FILE_OPEN_H

#include <sys/stat.h>

/* Open path, which must be a regular file or a block device, with flags
 * (O_RDWR, O_DIRECT...).  Names can come from an image (a backing file),
 * so anything else is refused before it is opened (opening a device can
 * act on it: a tape rewinds), and the open itself must not block if the
 * file is swapped in between: O_NONBLOCK keeps a FIFO's open from waiting
 * for a writer, the type is checked again on the descriptor before any
 * read, and only then is O_NONBLOCK cleared.  0 with *fd and *st, or
 * -errno with a message; *fd may then be open, for the caller to close. */
int blk_file_open_checked(const char *path, int flags, int *fd, struct stat *st);

#endif
