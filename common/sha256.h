/* common/sha256.h: SHA-256 (FIPS 180-4) through GnuTLS, whose x86 code
 * uses the SHA extensions where the CPU has them.  Without GnuTLS
 * (-Dtls=disabled) every call fails with -ENOTSUP and a message. */
#ifndef DISKIMG_COMMON_SHA256_H
#define DISKIMG_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

/* One-shot digest of len bytes.  Returns 0 or -errno with a message. */
int sha256(const void *buf, size_t len, uint8_t out[SHA256_LEN]);

/* Incremental digest: init, any number of updates, final (which also
 * frees the context; sha256_abort frees one that is not finished). */
struct sha256_ctx {
    void *hd;
};
int sha256_init(struct sha256_ctx *c);
int sha256_update(struct sha256_ctx *c, const void *buf, size_t len);
void sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_LEN]);
void sha256_abort(struct sha256_ctx *c);

#endif
