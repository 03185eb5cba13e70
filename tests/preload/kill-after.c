/* tests/preload/kill-after.c: LD_PRELOAD shim for crash and write-error
 * tests.  It counts the calls that change a file (writes, syncs,
 * truncates, fallocate), so a test can hit a command at every point of its
 * metadata updates, one run per N, instead of at random moments:
 *
 *  - DISKIMG_KILL_AFTER=N: the process kills itself with SIGKILL just
 *    before its Nth such call.  Calls made before stay done, as after a
 *    real kill -9.
 *  - DISKIMG_FAIL_AFTER=N: the Nth such call does nothing and fails with
 *    EIO, as on a failing disk; every other call runs.  Only the one call
 *    fails, so what the error path itself writes (undoing, marking the
 *    image corrupt) reaches the file and can be judged.
 *
 * Set one of the two.  Test-only; never linked into diskimg. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static atomic_long calls;
static long kill_at, fail_at;

static long env_limit(const char *name)
{
    const char *e = getenv(name);

    return e ? atol(e) : 0;
}

/* Read once at load time, before diskimg starts any thread. */
__attribute__((constructor)) static void read_limits(void)
{
    kill_at = env_limit("DISKIMG_KILL_AFTER");
    fail_at = env_limit("DISKIMG_FAIL_AFTER");
}

/* Counts one file-changing call (from any thread); true if it is the one
 * to fail, errno set. */
static bool count_call(void)
{
    long n;

    if (kill_at <= 0 && fail_at <= 0) {
        return false;
    }
    n = atomic_fetch_add(&calls, 1) + 1;
    if (kill_at > 0 && n >= kill_at) {
        raise(SIGKILL);
    }
    if (n == fail_at) {
        errno = EIO;
        return true;
    }
    return false;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (count_call()) {
        return -1;
    }
    return REAL(pwrite64)(fd, buf, n, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    if (count_call()) {
        return -1;
    }
    return REAL(pwritev64)(fd, iov, cnt, off);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    if (count_call()) {
        return -1;
    }
    return REAL(pwritev64v2)(fd, iov, cnt, off, flags);
}

int fdatasync(int fd)
{
    if (count_call()) {
        return -1;
    }
    return REAL(fdatasync)(fd);
}

int fsync(int fd)
{
    if (count_call()) {
        return -1;
    }
    return REAL(fsync)(fd);
}

int ftruncate64(int fd, off_t len)
{
    if (count_call()) {
        return -1;
    }
    return REAL(ftruncate64)(fd, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    if (count_call()) {
        return -1;
    }
    return REAL(fallocate64)(fd, mode, off, len);
}
