/* common/sha256.c: the SHA-256 wrapper of sha256.h over GnuTLS's hash
 * API, so that no other file names the library. */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "sha256.h"

#ifdef HAVE_GNUTLS
#include <gnutls/crypto.h>

int sha256(const void *buf, size_t len, uint8_t out[SHA256_LEN])
{
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, buf, len, out) < 0) {
        return err_setx(EIO, "SHA-256 failed");
    }
    return 0;
}

int sha256_init(struct sha256_ctx *c)
{
    gnutls_hash_hd_t hd;

    if (gnutls_hash_init(&hd, GNUTLS_DIG_SHA256) < 0) {
        c->hd = NULL;
        return err_setx(ENOMEM, "SHA-256: cannot start a digest");
    }
    c->hd = hd;
    return 0;
}

int sha256_update(struct sha256_ctx *c, const void *buf, size_t len)
{
    if (gnutls_hash(c->hd, buf, len) < 0) {
        return err_setx(EIO, "SHA-256 failed");
    }
    return 0;
}

void sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_LEN])
{
    gnutls_hash_deinit(c->hd, out);
    c->hd = NULL;
}

void sha256_abort(struct sha256_ctx *c)
{
    if (c->hd) {
        gnutls_hash_deinit(c->hd, NULL);
        c->hd = NULL;
    }
}

#else

static int no_sha256(void)
{
    return err_setx(ENOTSUP, "SHA-256 needs GnuTLS, which this build has not (-Dtls=disabled)");
}

int sha256(const void *buf, size_t len, uint8_t out[SHA256_LEN])
{
    (void)buf;
    (void)len;
    memset(out, 0, SHA256_LEN);
    return no_sha256();
}

int sha256_init(struct sha256_ctx *c)
{
    c->hd = NULL;
    return no_sha256();
}

int sha256_update(struct sha256_ctx *c, const void *buf, size_t len)
{
    (void)c;
    (void)buf;
    (void)len;
    return no_sha256();
}

void sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_LEN])
{
    c->hd = NULL;
    memset(out, 0, SHA256_LEN);
}

void sha256_abort(struct sha256_ctx *c)
{
    c->hd = NULL;
}

#endif
