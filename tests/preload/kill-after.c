/* tests/preload/kill-after.c: LD_PRELOAD shim for crash tests: the
 * process kills itself with SIGKILL just before its Nth call that changes
 * a file (DISKIMG_KILL_AFTER=N: writes, syncs, truncates, fallocate), so a
 * test can stop a command at every point of its metadata updates, one
 * run per N, instead of at random moments.  Calls made before stay done,
 * as after a real kill -9.  Test-only; never linked into diskimg. */
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static atomic_long calls;

static void maybe_die(void)
{
    static long limit = -1;

    if (limit < 0) {
        const char *e = getenv("DISKIMG_KILL_AFTER");
        limit = e ? atol(e) : 0;
    }
    if (limit > 0 && atomic_fetch_add(&calls, 1) + 1 >= limit) {
        raise(SIGKILL);
    }
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    maybe_die();
    return REAL(pwrite64)(fd, buf, n, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    maybe_die();
    return REAL(pwritev64)(fd, iov, cnt, off);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    maybe_die();
    return REAL(pwritev64v2)(fd, iov, cnt, off, flags);
}

int fdatasync(int fd)
{
    maybe_die();
    return REAL(fdatasync)(fd);
}

int fsync(int fd)
{
    maybe_die();
    return REAL(fsync)(fd);
}

int ftruncate64(int fd, off_t len)
{
    maybe_die();
    return REAL(ftruncate64)(fd, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    maybe_die();
    return REAL(fallocate64)(fd, mode, off, len);
}
