/* block/file-posix-stream.c: one pass over a file through the page cache
 * without leaving it there ("streaming"), for convert and compare.
 *
 * A conversion reads and writes every byte once.  Left to itself the page
 * cache fills with those bytes: new pages for all of them, what it held
 * before evicted.  New pages are the expensive part where the host takes
 * free memory back (a VM with virtio-balloon free page reporting: the
 * first touch of such a page is a host fault), while pages freed a moment
 * ago are cheap to reuse.  So a streaming file gives its pages back as it
 * goes, and the next reads and writes reuse them:
 *   - reads: data that was not cached is dropped (POSIX_FADV_DONTNEED)
 *     once read, in whole folios.  Data that was cached stays.  Which it
 *     is, is told at open, before the format probe's first read starts
 *     readahead (up to read_ahead_kb, 8 MiB on some virtio disks): pages
 *     sampled across the file with mincore.  Where mincore cannot tell
 *     (a file the user may not write reads as all cached), the first
 *     RWF_NOWAIT read that finds data missing turns dropping on for the
 *     rest of the file (readahead fills the cache ahead of the reads, so
 *     later reads cannot tell any more);
 *   - writes: writeback starts as soon as a write is done
 *     (sync_file_range), and STREAM_LAG writes later that write is waited
 *     for and dropped.  The final fdatasync has little left to do.
 * Measured on the dev VM, 1.3 GB in 2 MiB requests, durable: reading
 * 0.53-0.63 s against 1.2-2.9 s buffered and 0.84-1.37 s with O_DIRECT;
 * writing 0.60-0.64 s against 1.1-1.9 s buffered and 0.74-0.97 s O_DIRECT,
 * both right after memory was freed and 8 s later.
 *
 * Requests below STREAM_MIN_IO (format metadata) are left alone: their
 * pages are read and rewritten again, and dropping them would turn a
 * partial rewrite into a device read.  Dropping never loses data: the
 * kernel drops only clean pages.  Durability is unchanged: only flushes
 * make data durable.  Not for the server: its cache modes promise the
 * page cache. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "file-posix.h"

#define STREAM_MIN_IO (64u << 10)
/* The largest page-cache folio (x86-64: a PMD, 2 MiB).  Readahead fills
 * the cache in folios up to this size regardless of how the file is read,
 * and a folio is dropped only when the whole of it is in the range. */
#define STREAM_FOLIO_MAX (2u << 20)

void file_stream_init(struct file_stream *st, bool enabled)
{
    st->enabled = enabled;
    atomic_store(&st->drop_reads, false);
    st->head = st->count = 0;
    pthread_mutex_init(&st->lock, NULL);
}

/* Pages sampled to tell whether a file is in the page cache. */
#define STREAM_COLD_SAMPLES 64

void file_stream_check_cold(struct file_stream *st, int fd, uint64_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned sampled = 0, resident = 0;

    if (!st->enabled || page <= 0 || size < STREAM_MIN_IO) {
        return;
    }
    uint64_t pages = size / (uint64_t)page;
    for (unsigned i = 0; i < STREAM_COLD_SAMPLES && i < pages; i++) {
        uint64_t off = pages * i / STREAM_COLD_SAMPLES * (uint64_t)page;
        void *p = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, (off_t)off);
        unsigned char in_core;
        if (p == MAP_FAILED) {
            return; /* no way to tell: the first read decides */
        }
        if (mincore(p, (size_t)page, &in_core) == 0) {
            sampled++;
            resident += in_core & 1;
        }
        munmap(p, (size_t)page);
    }
    if (sampled && resident * 2 < sampled) {
        atomic_store(&st->drop_reads, true);
    }
}

void file_stream_destroy(struct file_stream *st)
{
    pthread_mutex_destroy(&st->lock);
}

ssize_t file_stream_read_cached(struct file_stream *st, int fd, const struct iovec *iov, int iovcnt,
                                uint64_t off, uint64_t len)
{
    ssize_t r;

    if (!st->enabled || len < STREAM_MIN_IO || atomic_load(&st->drop_reads)) {
        return 0;
    }
    do {
        r = preadv2(fd, iov, iovcnt, (off_t)off, RWF_NOWAIT);
    } while (r < 0 && errno == EINTR);
    if (r < 0 || (uint64_t)r < len) {
        /* Missing from the cache (EAGAIN), or no way to tell (EOPNOTSUPP):
         * this file is read cold. */
        atomic_store(&st->drop_reads, true);
    }
    return r < 0 ? 0 : r;
}

void file_stream_read_done(struct file_stream *st, int fd, uint64_t off, uint64_t len)
{
    if (st->enabled && len >= STREAM_MIN_IO && atomic_load(&st->drop_reads)) {
        /* From the start of the folio that holds off: its first part was
         * read before this range was.  The folio at the end goes with the
         * range after this one. */
        uint64_t from = off / STREAM_FOLIO_MAX * STREAM_FOLIO_MAX;
        (void)posix_fadvise(fd, (off_t)from, (off_t)(off + len - from), POSIX_FADV_DONTNEED);
    }
}

void file_stream_write_done(struct file_stream *st, int fd, uint64_t off, uint64_t len)
{
    struct file_stream_range old = {0, 0};

    if (!st->enabled || len < STREAM_MIN_IO) {
        return;
    }
    (void)sync_file_range(fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE);
    pthread_mutex_lock(&st->lock);
    if (st->count == FILE_STREAM_LAG) {
        old = st->ring[st->head];
        st->head = (st->head + 1) % FILE_STREAM_LAG;
        st->count--;
    }
    st->ring[(st->head + st->count) % FILE_STREAM_LAG] = (struct file_stream_range){off, len};
    st->count++;
    pthread_mutex_unlock(&st->lock);
    if (old.len) {
        (void)sync_file_range(fd, (off_t)old.off, (off_t)old.len,
                              SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                  SYNC_FILE_RANGE_WAIT_AFTER);
        (void)posix_fadvise(fd, (off_t)old.off, (off_t)old.len, POSIX_FADV_DONTNEED);
    }
}

void file_stream_flushed(struct file_stream *st, int fd)
{
    struct file_stream_range ring[FILE_STREAM_LAG];
    unsigned head, count;

    if (!st->enabled) {
        return;
    }
    /* Everything written before the flush is clean now: drop what the
     * ring still holds. */
    pthread_mutex_lock(&st->lock);
    memcpy(ring, st->ring, sizeof ring);
    head = st->head;
    count = st->count;
    st->head = st->count = 0;
    pthread_mutex_unlock(&st->lock);
    for (unsigned i = 0; i < count; i++) {
        const struct file_stream_range *r = &ring[(head + i) % FILE_STREAM_LAG];
        (void)posix_fadvise(fd, (off_t)r->off, (off_t)r->len, POSIX_FADV_DONTNEED);
    }
}
