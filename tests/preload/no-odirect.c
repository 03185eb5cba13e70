/* tests/preload/no-odirect.c: LD_PRELOAD shim that makes every open()
 * with O_DIRECT fail with EINVAL, as on a file system without direct I/O
 * (tmpfs before Linux 6.6), so the fallbacks for it can be tested on any
 * machine.  Test-only; never linked into diskimg. */
/* Both open and open64 are defined here, so neither may be renamed. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

typedef int (*open_fn)(const char *, int, ...);

static int refuse_or_open(const char *name, const char *path, int flags, va_list ap)
{
    open_fn real = (open_fn)dlsym(RTLD_NEXT, name);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;

    if (flags & O_DIRECT) {
        errno = EINVAL;
        return -1;
    }
    return real(path, flags, mode);
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int r = refuse_or_open("open", path, flags, ap);
    va_end(ap);
    return r;
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int r = refuse_or_open("open64", path, flags, ap);
    va_end(ap);
    return r;
}
