/* block/file-posix-cold.c: reading what the page cache does not hold with
 * O_DIRECT ("cold reads"), for one pass over an image (convert, compare).
 *
 * A buffered read of data that is not cached makes the kernel read it
 * into new page-cache pages and then copy it: the pages are allocated
 * (on a VM with free page reporting, faulted in by the host) and evict
 * what the cache held, for data read once.  A direct read moves it from
 * the device into the caller's buffer.  Data that is cached is still read
 * from the cache, which is faster than the device.  Whether a range is
 * cached comes from mincore() on a mapping of the file that is never
 * touched, so no page is faulted in; a kernel that hides residency from
 * this process (it does for files the caller neither owns nor may write)
 * reports every page resident, which reads through the cache as before.
 *
 * Not for the server: its cache mode promises the page cache for reads. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "file-posix.h"

/* Smaller reads (metadata) go through the cache: a direct read would wait
 * for the device each time. */
#define COLD_MIN_READ (64u << 10)
/* mincore() answers for this much per call. */
#define COLD_CHECK_CHUNK (8u << 20)

void file_cold_init(struct file_cold *c)
{
    c->fd = -1;
    c->map = NULL;
    c->map_len = 0;
}

void file_cold_open(struct file_cold *c, const char *filename, int buffered_fd, uint64_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *map;

    c->fd = open(filename, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (c->fd < 0) {
        return; /* no O_DIRECT here (tmpfs): every read goes through the cache */
    }
    file_dio_alignment(c->fd, &c->offset_align, &c->mem_align);
    /* whole pages, for mincore() */
    c->offset_align = MAX(c->offset_align, (uint32_t)page);
    /* Only whole aligned blocks are read directly: the partial last one
     * goes through the cache. */
    c->direct_end = ROUND_DOWN(size, c->offset_align);
    c->map_len = ROUND_DOWN(size, page);
    map = c->map_len ? mmap(NULL, c->map_len, PROT_READ, MAP_SHARED, buffered_fd, 0) : MAP_FAILED;
    if (map == MAP_FAILED || c->offset_align % page || c->direct_end > c->map_len) {
        /* (an odd direct I/O alignment larger than a page) */
        if (map != MAP_FAILED) {
            munmap(map, c->map_len);
        }
        file_cold_close(c);
        return;
    }
    c->map = map;
}

void file_cold_close(struct file_cold *c)
{
    if (c->map) {
        munmap(c->map, c->map_len);
    }
    if (c->fd >= 0) {
        close(c->fd);
    }
    file_cold_init(c);
}

static bool cold_aligned(const struct file_cold *c, uint64_t off, const struct iovec *iov,
                         int iovcnt, uint64_t len)
{
    if (off % c->offset_align || len % c->offset_align || off + len > c->direct_end) {
        return false;
    }
    for (int i = 0; i < iovcnt; i++) {
        if ((uintptr_t)iov[i].iov_base % c->mem_align || iov[i].iov_len % c->offset_align) {
            return false;
        }
    }
    return true;
}

/* Is some page of [off, off+len) missing from the page cache? */
static bool cold_range_missing(const struct file_cold *c, uint64_t off, uint64_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[COLD_CHECK_CHUNK / 4096];

    while (len > 0) {
        uint64_t n = MIN(len, (uint64_t)COLD_CHECK_CHUNK);
        size_t pages = (size_t)((n + page - 1) / page);
        if (pages > sizeof vec || mincore((char *)c->map + off, (size_t)n, vec) < 0) {
            return false; /* cannot tell: the cache serves it as before */
        }
        for (size_t i = 0; i < pages; i++) {
            if (!(vec[i] & 1)) {
                return true;
            }
        }
        off += n;
        len -= n;
    }
    return false;
}

bool file_cold_read(const struct file_cold *c, uint64_t off, const struct iovec *iov, int iovcnt,
                    uint64_t len)
{
    return c->fd >= 0 && len >= COLD_MIN_READ && cold_aligned(c, off, iov, iovcnt, len) &&
           cold_range_missing(c, off, len);
}
