/* formats/zfast.c: see zfast.h. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "zfast.h"

#ifdef HAVE_LIBDEFLATE
#include <libdeflate.h>

#define ZLIB_DEFAULT_LEVEL 6 /* what Z_DEFAULT_COMPRESSION means */

struct zfast_state {
    struct libdeflate_compressor *c;
    struct libdeflate_decompressor *d;
};

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

static void state_free(void *p)
{
    struct zfast_state *st = p;

    libdeflate_free_compressor(st->c);
    libdeflate_free_decompressor(st->d);
    free(st);
}

static void state_key_init(void)
{
    pthread_key_create(&state_key, state_free);
}

static struct zfast_state *state_get(void)
{
    struct zfast_state *st;

    pthread_once(&state_once, state_key_init);
    st = pthread_getspecific(state_key);
    if (!st && (st = calloc(1, sizeof *st)) != NULL) {
        pthread_setspecific(state_key, st);
    }
    return st;
}

static struct libdeflate_decompressor *decompressor(void)
{
    struct zfast_state *st = state_get();

    if (st && !st->d) {
        st->d = libdeflate_alloc_decompressor();
    }
    return st ? st->d : NULL;
}

int zfast_zlib_compress(const void *in, size_t len, void *out, size_t cap, size_t *out_len)
{
    struct zfast_state *st = state_get();

    if (st && !st->c) {
        st->c = libdeflate_alloc_compressor(ZLIB_DEFAULT_LEVEL);
    }
    if (!st || !st->c) {
        return -ENOMEM;
    }
    size_t n = libdeflate_zlib_compress(st->c, in, len, out, cap);
    if (n == 0) {
        return -ENOSPC;
    }
    *out_len = n;
    return 0;
}

int zfast_zlib_inflate(const void *in, size_t in_len, void *out, size_t cap, size_t *out_len)
{
    struct libdeflate_decompressor *d = decompressor();
    size_t used;

    if (!d) {
        return -ENOMEM;
    }
    return libdeflate_zlib_decompress_ex(d, in, in_len, out, cap, &used, out_len) ==
                   LIBDEFLATE_SUCCESS
               ? 0
               : -EIO;
}

int zfast_raw_inflate_exact(const void *in, size_t in_len, void *out, size_t len)
{
    struct libdeflate_decompressor *d = decompressor();
    size_t used;

    if (!d) {
        return -ENOMEM;
    }
    return libdeflate_deflate_decompress_ex(d, in, in_len, out, len, &used, NULL) ==
                   LIBDEFLATE_SUCCESS
               ? 0
               : -EIO;
}

#else

int zfast_zlib_compress(const void *in, size_t len, void *out, size_t cap, size_t *out_len)
{
    (void)in, (void)len, (void)out, (void)cap, (void)out_len;
    return -ENOTSUP;
}

int zfast_zlib_inflate(const void *in, size_t in_len, void *out, size_t cap, size_t *out_len)
{
    (void)in, (void)in_len, (void)out, (void)cap, (void)out_len;
    return -ENOTSUP;
}

int zfast_raw_inflate_exact(const void *in, size_t in_len, void *out, size_t len)
{
    (void)in, (void)in_len, (void)out, (void)len;
    return -ENOTSUP;
}

#endif
