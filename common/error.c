/* common/error.c: thread-local error messages (see error.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "escape.h"

#define ERR_MSG_MAX 1024
#define ERR_ELLIPSIS " [...] "

static __thread char err_buf[ERR_MSG_MAX];

/* Store "head<sep>tail" in err_buf.  When it does not fit, the middle
 * goes: the start names the object the user asked about and the end is
 * the cause (prefixes pile up in front of it, strerror comes last), so
 * both stay.  Cuts never split a UTF-8 sequence.  The whole text is
 * neutralised before it is cut: the cut then sees valid UTF-8 and moves
 * by at most three bytes, where a hostile name of stray continuation
 * bytes would otherwise walk it back over the whole head or forward over
 * the whole tail. */
static void err_store(const char *head, const char *sep, const char *tail)
{
    size_t hl = strlen(head), sl = strlen(sep), tl = strlen(tail);
    size_t el = sizeof ERR_ELLIPSIS - 1;

    if (hl + sl + tl < sizeof err_buf) {
        memcpy(err_buf, head, hl);
        memcpy(err_buf + hl, sep, sl);
        memcpy(err_buf + hl + sl, tail, tl + 1);
        return;
    }
    /* Keep a third of the buffer from the front, the rest from the end. */
    char whole[3 * ERR_MSG_MAX + 8]; /* head < 2 * MAX, tail < MAX */
    int n = snprintf(whole, sizeof whole, "%s%s%s", head, sep, tail);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof whole ? (size_t)n : sizeof whole - 1;
    str_neutralise(whole);
    size_t keep_head = (sizeof err_buf - 1) / 3;
    size_t keep_tail = sizeof err_buf - 1 - keep_head - el;

    while (keep_head > 0 && (whole[keep_head] & 0xc0) == 0x80) {
        keep_head--;
    }
    size_t from = len - keep_tail;
    while (from < len && (whole[from] & 0xc0) == 0x80) {
        from++;
    }
    memcpy(err_buf, whole, keep_head);
    memcpy(err_buf + keep_head, ERR_ELLIPSIS, el);
    memcpy(err_buf + keep_head + el, whole + from, len - from + 1);
}

/* A message is one line that is safe on a terminal and in a log.
 * Strings from images and peers are escaped where they are quoted
 * (common/escape.h); this catches any that were not: C0 and C1 controls,
 * DEL and every byte of invalid UTF-8 become '?', valid UTF-8 and text
 * already escaped stay as they are.  In place and length-preserving; it
 * runs over every stored message, since err_store neutralises only a
 * text it has to cut, and a prefix can arrive with raw bytes. */
static void err_neutralise(void)
{
    str_neutralise(err_buf);
}

static void err_vformat(int errnum, bool with_strerror, const char *fmt, va_list ap)
{
    int saved = errno;
    char msg[2 * ERR_MSG_MAX];

    if (vsnprintf(msg, sizeof msg, fmt, ap) < 0) {
        msg[0] = '\0';
    }
    if (with_strerror) {
        err_store(msg, ": ", strerror(errnum));
    } else {
        err_store(msg, "", "");
    }
    err_neutralise();
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
    char old[ERR_MSG_MAX], prefix[ERR_MSG_MAX];
    va_list ap;

    memcpy(old, err_buf, sizeof old);
    va_start(ap, fmt);
    if (vsnprintf(prefix, sizeof prefix, fmt, ap) < 0) {
        prefix[0] = '\0';
    }
    va_end(ap);
    err_store(prefix, old[0] ? ": " : "", old);
    err_neutralise();
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
