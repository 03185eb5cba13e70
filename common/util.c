/* common/util.c: parsing, zero detection and iovec helpers (see util.h). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util.h"

int parse_size(const char *s, uint64_t *out)
{
    static const char units[] = "bkmgtpe";
    unsigned long long whole;
    uint64_t mult = 1, frac_num = 0, frac_den = 1;
    const char *p = s;
    char *end;

    if (!s || !isdigit((unsigned char)*s)) {
        return -EINVAL;
    }
    errno = 0;
    whole = strtoull(p, &end, 10);
    if (errno == ERANGE) {
        return -ERANGE;
    }
    p = end;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) {
            return -EINVAL;
        }
        while (isdigit((unsigned char)*p)) {
            if (frac_den < 1000000000ULL) {
                frac_num = frac_num * 10 + (uint64_t)(*p - '0');
                frac_den *= 10;
            }
            p++;
        }
    }
    if (*p) {
        const char *u = strchr(units, tolower((unsigned char)*p));

        if (!u) {
            return -EINVAL;
        }
        for (long i = 0; i < u - units; i++) {
            mult *= 1024;
        }
        p++;
        /* Accept "KiB", "KB", "K"; a bare "B" means bytes. */
        if (mult > 1 && (*p == 'i' || *p == 'I')) {
            p++;
            if (*p != 'b' && *p != 'B') {
                return -EINVAL;
            }
        }
        if (mult > 1 && (*p == 'b' || *p == 'B')) {
            p++;
        }
        if (*p) {
            return -EINVAL;
        }
    }
    if (frac_num && mult == 1) {
        return -EINVAL; /* fractional bytes */
    }
    if (whole > UINT64_MAX / mult) {
        return -ERANGE;
    }
    uint64_t v = (uint64_t)whole * mult;
    uint64_t f = (uint64_t)((__uint128_t)frac_num * mult / frac_den);
    if (v > UINT64_MAX - f) {
        return -ERANGE;
    }
    *out = v + f;
    return 0;
}

int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    unsigned long long v;
    char *end;

    if (!s || !isdigit((unsigned char)*s)) {
        return -EINVAL;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (*end) {
        return -EINVAL;
    }
    if (errno == ERANGE || v < min || v > max) {
        return -ERANGE;
    }
    *out = v;
    return 0;
}

int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"on", "yes", "true", "1"};
    static const char *const no[] = {"off", "no", "false", "0"};

    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

bool buffer_is_zero(const void *buf, size_t len)
{
    const unsigned char *p = buf;

    /* Check a short prefix bytewise so most data blocks exit at once, then
     * compare the buffer against itself shifted by 16 bytes: if the first
     * 16 bytes are zero and buf[i] == buf[i+16] for all i, all are zero.
     * memcmp is vectorised by libc. */
    if (len <= 16) {
        for (size_t i = 0; i < len; i++) {
            if (p[i]) {
                return false;
            }
        }
        return true;
    }
    for (size_t i = 0; i < 16; i++) {
        if (p[i]) {
            return false;
        }
    }
    return memcmp(p, p + 16, len - 16) == 0;
}

size_t iov_length(const struct iovec *iov, int iovcnt)
{
    size_t len = 0;

    for (int i = 0; i < iovcnt; i++) {
        len += iov[i].iov_len;
    }
    return len;
}

bool iov_is_zero(const struct iovec *iov, int iovcnt)
{
    for (int i = 0; i < iovcnt; i++) {
        if (!buffer_is_zero(iov[i].iov_base, iov[i].iov_len)) {
            return false;
        }
    }
    return true;
}

/* One piece of bytes [skip, skip + len) of an iovec: n bytes at base, the
 * piece starting done bytes into the range. */
typedef void (*iov_piece_fn)(char *base, size_t n, size_t done, void *opaque);

/* Calls fn on each piece of bytes [skip, skip + len) of iov, in order, so
 * that the copies below share one walk; returns the bytes covered, fewer
 * than len when the iovec ends first. */
static size_t iov_walk(const struct iovec *iov, int iovcnt, size_t skip, size_t len,
                       iov_piece_fn fn, void *opaque)
{
    size_t done = 0;

    for (int i = 0; i < iovcnt && done < len; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        size_t n = iov[i].iov_len - skip;
        if (n > len - done) {
            n = len - done;
        }
        fn((char *)iov[i].iov_base + skip, n, done, opaque);
        done += n;
        skip = 0;
    }
    return done;
}

static void piece_to_buf(char *base, size_t n, size_t done, void *buf)
{
    memcpy((char *)buf + done, base, n);
}

size_t iov_to_buf(const struct iovec *iov, int iovcnt, size_t skip, void *buf, size_t len)
{
    return iov_walk(iov, iovcnt, skip, len, piece_to_buf, buf);
}

static void piece_from_buf(char *base, size_t n, size_t done, void *buf)
{
    memcpy(base, (const char *)buf + done, n);
}

size_t iov_from_buf(const struct iovec *iov, int iovcnt, size_t skip, const void *buf, size_t len)
{
    return iov_walk(iov, iovcnt, skip, len, piece_from_buf, (void *)buf); /* only read */
}

static void piece_memset(char *base, size_t n, size_t done, void *c)
{
    (void)done;
    memset(base, *(const int *)c, n);
}

void iov_memset(const struct iovec *iov, int iovcnt, size_t skip, int c, size_t len)
{
    iov_walk(iov, iovcnt, skip, len, piece_memset, &c);
}

int iov_slice(const struct iovec *iov, int iovcnt, size_t skip, size_t len, struct iovec *out,
              int outmax)
{
    int n = 0;

    for (int i = 0; i < iovcnt && len > 0; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        if (n == outmax) {
            return -1;
        }
        size_t take = iov[i].iov_len - skip;
        if (take > len) {
            take = len;
        }
        out[n].iov_base = (char *)iov[i].iov_base + skip;
        out[n].iov_len = take;
        n++;
        len -= take;
        skip = 0;
    }
    return n;
}

uint64_t clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int kv_foreach(const char *list, int (*fn)(const char *key, const char *value, void *opaque),
               void *opaque)
{
    size_t len = strlen(list);
    char *buf = malloc(len + 1);
    int r = 0;

    if (!buf) {
        return -ENOMEM;
    }
    for (size_t i = 0; i <= len && r == 0;) {
        size_t o = 0;
        /* one item: up to a comma that is not doubled */
        while (i < len && !(list[i] == ',' && list[i + 1] != ',')) {
            if (list[i] == ',' && list[i + 1] == ',') {
                i++;
            }
            buf[o++] = list[i++];
        }
        buf[o] = '\0';
        i++;
        if (o == 0) {
            continue;
        }
        char *eq = strchr(buf, '=');
        if (eq) {
            *eq = '\0';
        }
        r = fn(buf, eq ? eq + 1 : NULL, opaque);
    }
    free(buf);
    return r;
}

volatile sig_atomic_t diskimg_interrupted;
