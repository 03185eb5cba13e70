/* common/util.h: small pure helpers (parsing, buffers), unit-tested in
 * tests/unit/test-util.c. */
#ifndef DISKIMG_COMMON_UTIL_H
#define DISKIMG_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* "4096", "64k", "1.5G", "2T" (binary units, case-insensitive, optional
 * trailing 'B'/"iB") -> bytes.  Returns 0 or -EINVAL (syntax) / -ERANGE. */
int parse_size(const char *s, uint64_t *out);
/* Unsigned decimal integer in [min, max].  Returns 0, -EINVAL or -ERANGE. */
int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* "on"/"off"/"yes"/"no"/"true"/"false"/"1"/"0". */
int parse_bool(const char *s, bool *out);

/* True if len bytes at buf are all zero. */
bool buffer_is_zero(const void *buf, size_t len);

size_t iov_length(const struct iovec *iov, int iovcnt);
bool iov_is_zero(const struct iovec *iov, int iovcnt);
/* Copy between an iovec and a flat buffer, starting at byte 'skip' of the
 * iovec; returns bytes copied. */
size_t iov_to_buf(const struct iovec *iov, int iovcnt, size_t skip, void *buf, size_t len);
size_t iov_from_buf(const struct iovec *iov, int iovcnt, size_t skip, const void *buf, size_t len);
void iov_memset(const struct iovec *iov, int iovcnt, size_t skip, int c, size_t len);
/* Describe bytes [skip, skip+len) of iov in out (at most outmax entries).
 * Returns the entry count, or -1 if outmax is too small. */
int iov_slice(const struct iovec *iov, int iovcnt, size_t skip, size_t len, struct iovec *out,
              int outmax);

/* Monotonic clock in nanoseconds. */
uint64_t clock_ns(void);

/* Walk a qemu-style option list "key=value,key2=value2" (",," is a literal
 * comma; a bare "key" has value NULL), calling fn for each pair; stops at
 * the first non-zero return and returns it. */
int kv_foreach(const char *list, int (*fn)(const char *key, const char *value, void *opaque),
               void *opaque);

/* Set by a command's SIGINT/SIGTERM handler; long waits that a signal
 * may not interrupt (another thread may take it) poll it. */
#include <signal.h>
extern volatile sig_atomic_t diskimg_interrupted;

#endif
