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

/* Direct I/O alignment of fd (statx STATX_DIOALIGN; 4096 when unknown). */
void file_dio_alignment(int fd, uint32_t *offset_align, uint32_t *mem_align);

/* Cold reads (file-posix-cold.c): a second, O_DIRECT descriptor for reads
 * of data the page cache does not hold.  fd is -1 when unused. */
struct file_cold {
    int fd;
    uint32_t offset_align, mem_align;
    uint64_t direct_end; /* reads below this may go direct */
    void *map;           /* PROT_READ mapping for mincore(), never touched */
    size_t map_len;
};
void file_cold_init(struct file_cold *c);
/* Set up for a file of size bytes open as buffered_fd; on any failure
 * (no O_DIRECT, no mapping) c stays unused and reads go through the cache. */
void file_cold_open(struct file_cold *c, const char *filename, int buffered_fd, uint64_t size);
void file_cold_close(struct file_cold *c);
/* Should this read go to c->fd: large, aligned, and not wholly cached? */
bool file_cold_read(const struct file_cold *c, uint64_t off, const struct iovec *iov, int iovcnt,
                    uint64_t len);

/* Does the running kernel accept RWF_DSYNC on writes (Linux >= 4.7)?
 * Probed once, on a pipe, so no image is written to find out. */
bool file_kernel_has_rwf_dsync(void);

#endif
