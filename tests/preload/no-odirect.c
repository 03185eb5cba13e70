/* tests/preload/no-odirect.c: LD_PRELOAD shim that makes every open()
 * with O_DIRECT fail with EINVAL, as on a file system without direct I/O
 * (tmpfs before Linux 6.6), so the fallbacks for it can be tested on any
 * machine.  Test-only; never linked into diskimg. */
/* open and open64 are both defined here, so neither may be renamed. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

typedef int (*open_fn)(const char *, int, ...);

int open(const char *path, int flags, ...)
{
    static open_fn real;
    mode_t mode = 0;

    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (flags & O_DIRECT) {
        errno = EINVAL;
        return -1;
    }
    if (!real) {
        real = (open_fn)dlsym(RTLD_NEXT, "open");
    }
    return real(path, flags, mode);
}

/* On 64-bit glibc open64 is open; programs built with large-file
 * offsets call it by this name. */
int open64(const char *path, int flags, ...) __attribute__((alias("open")));
