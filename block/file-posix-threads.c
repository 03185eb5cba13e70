/* block/file-posix-threads.c: the "threads" engine.  Blocking syscalls in
 * the calling thread: the NBD server's workers are the thread pool, so no
 * hand-off is needed and queue depth 1 pays for nothing extra.  Native FUA
 * is pwritev2(RWF_DSYNC). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include "file-posix.h"

static ssize_t threads_preadv(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    ssize_t r;

    do {
        r = preadv(fd, iov, iovcnt, (off_t)off);
    } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : r;
}

static ssize_t threads_pwritev(int fd, const struct iovec *iov, int iovcnt, uint64_t off, int rwf)
{
    ssize_t r;

    do {
        r = rwf ? pwritev2(fd, iov, iovcnt, (off_t)off, rwf) : pwritev(fd, iov, iovcnt, (off_t)off);
    } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : r;
}

static int threads_fdatasync(int fd)
{
    return fdatasync(fd) < 0 ? -errno : 0;
}

static int threads_available(void)
{
    return 0;
}

const struct file_engine file_engine_threads = {
    .name = "threads",
    .preadv = threads_preadv,
    .pwritev = threads_pwritev,
    .fdatasync = threads_fdatasync,
    .available = threads_available,
};

static bool rwf_dsync_ok;
static pthread_once_t rwf_dsync_once = PTHREAD_ONCE_INIT;

static void probe_rwf_dsync(void)
{
    int p[2];
    char byte = 0;

    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
        return;
    }
    /* The kernel validates RWF_* flags before touching the file, so an
     * unknown flag fails here with EOPNOTSUPP and a known one writes. */
    rwf_dsync_ok = pwritev2(p[1], &(struct iovec){&byte, 1}, 1, -1, RWF_DSYNC) == 1;
    close(p[0]);
    close(p[1]);
}

bool file_kernel_has_rwf_dsync(void)
{
    pthread_once(&rwf_dsync_once, probe_rwf_dsync);
    return rwf_dsync_ok;
}
