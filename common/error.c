/* common/error.c: thread-local error messages (see error.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

#define ERR_MSG_MAX 512

static __thread char err_buf[ERR_MSG_MAX];

static void err_vformat(int errnum, bool with_strerror, const char *fmt, va_list ap)
{
    int saved = errno;
    int n = vsnprintf(err_buf, sizeof err_buf, fmt, ap);

    if (with_strerror && n >= 0 && (size_t)n < sizeof err_buf) {
        snprintf(err_buf + n, sizeof err_buf - n, ": %s", strerror(errnum));
    }
    errno = saved;
}

int err_set(int errnum, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    err_vformat(errnum, true, fmt, ap);
    va_end(ap);
    return -errnum;
}

int err_setx(int errnum, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    err_vformat(errnum, false, fmt, ap);
    va_end(ap);
    return -errnum;
}

void err_prefix(const char *fmt, ...)
{
    char old[ERR_MSG_MAX];
    va_list ap;
    int n;

    snprintf(old, sizeof old, "%s", err_buf);
    va_start(ap, fmt);
    n = vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof err_buf && old[0]) {
        /* Truncation is fine: a long message keeps its beginning. */
        size_t room = sizeof err_buf - (size_t)n;
        if (room > 2) {
            size_t take = strnlen(old, room - 3);
            memcpy(err_buf + n, ": ", 2);
            memcpy(err_buf + n + 2, old, take);
            err_buf[(size_t)n + 2 + take] = '\0';
        }
    }
}

const char *err_msg(void)
{
    return err_buf;
}

const char *err_msg_or(int r)
{
    if (err_buf[0]) {
        return err_buf;
    }
    return strerror(r < 0 ? -r : r);
}

void err_clear(void)
{
    err_buf[0] = '\0';
}
