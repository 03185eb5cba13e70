/* block/file-posix.h: shared between the file protocol driver and its I/O
 * engines.  An engine performs one read, write or data sync in the calling
 * thread and returns bytes or -errno; file-posix.c loops over short
 * transfers, splits off the unaligned tail of O_DIRECT files and does
 * everything else (fallocate, lseek) with plain syscalls. */
#ifndef DISKIMG_BLOCK_FILE_POSIX_H
#define DISKIMG_BLOCK_FILE_POSIX_H

#include <pthread.h>
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

/* Streaming (file-posix-stream.c): one pass over the file through the
 * page cache, giving pages back as it goes. */
#define FILE_STREAM_LAG 16 /* writes in writeback before the oldest is dropped */
struct file_stream_range {
    uint64_t off, len;
};
struct file_stream {
    bool enabled;
    _Atomic bool drop_reads; /* the file is read cold: drop what is read */
    pthread_mutex_t lock;
    struct file_stream_range ring[FILE_STREAM_LAG]; /* writes not dropped yet, oldest at head */
    unsigned head, count;                           /* under lock */
};
void file_stream_init(struct file_stream *st, bool enabled);
/* Before the first read: a file mostly missing from the page cache is
 * read cold, its pages dropped as they are read. */
void file_stream_check_cold(struct file_stream *st, int fd, uint64_t size);
void file_stream_destroy(struct file_stream *st);
/* Read what the page cache holds of [off, off+len) without waiting for
 * the device: bytes read (0 when not streaming, or nothing was cached). */
ssize_t file_stream_read_cached(struct file_stream *st, int fd, const struct iovec *iov, int iovcnt,
                                uint64_t off, uint64_t len);
/* After a read or a write of [off, off+len) completed. */
void file_stream_read_done(struct file_stream *st, int fd, uint64_t off, uint64_t len);
void file_stream_write_done(struct file_stream *st, int fd, uint64_t off, uint64_t len);
/* After a successful flush (fdatasync) of the file. */
void file_stream_flushed(struct file_stream *st, int fd);

/* Copy offloading: copy len bytes of the file node src at soff to the
 * file node dst at doff with copy_file_range, so the kernel copies once
 * (and shares extents where the file system can).  -ENOTSUP (no message)
 * when the nodes are not files, use O_DIRECT, or the kernel cannot copy
 * between them; other errors have a message.  Nothing is checked or
 * counted: see blk_copy_range (block/copy-range.c). */
struct blk_node;
int file_copy_range(struct blk_node *src, uint64_t soff, struct blk_node *dst, uint64_t doff,
                    uint64_t len);

/* Does the running kernel accept RWF_DSYNC on writes (Linux >= 4.7)?
 * Probed once, on a pipe, so no image is written to find out. */
bool file_kernel_has_rwf_dsync(void);

#endif
