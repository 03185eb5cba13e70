/* block/file-posix.h: shared between the file protocol driver and its I/O
 * engines.  An engine performs one read, write or data sync in the calling
 * thread and returns bytes or -errno; file-posix.c loops over short
 * transfers, splits off the unaligned tail of O_DIRECT files and does
 * everything else (fallocate, lseek) with plain syscalls. */
#ifndef DISKIMG_BLOCK_FILE_POSIX_H
#define DISKIMG_BLOCK_FILE_POSIX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct file_engine {
    const char *name;
    ssize_t (*preadv)(int fd, const struct iovec *iov, int iovcnt, uint64_t off);
    /* rwf: 0 or RWF_DSYNC (native FUA) */
    ssize_t (*pwritev)(int fd, const struct iovec *iov, int iovcnt, uint64_t off, int rwf);
    int (*fdatasync)(int fd);
    /* 0 if usable in this process, else -errno with a message set */
    int (*available)(void);
};

extern const struct file_engine file_engine_threads;
#ifdef HAVE_LIBURING
extern const struct file_engine file_engine_uring;
#endif

/* Does the running kernel accept RWF_DSYNC on writes (Linux >= 4.7)?
 * Probed once, on a pipe, so no image is written to find out. */
bool file_kernel_has_rwf_dsync(void);

#endif
