/* formats/zfast.h: whole-buffer deflate and inflate with libdeflate, when
 * the build has it (HAVE_LIBDEFLATE): two to three times zlib's speed on
 * a grain or a cluster, which is always whole in memory.  Each thread
 * keeps its own compressor and decompressor.  Every function returns
 * -ENOTSUP without libdeflate, so callers fall back to zlib; zlib stays
 * the reference for what a bad stream is (see the callers). */
#ifndef DISKIMG_FORMATS_ZFAST_H
#define DISKIMG_FORMATS_ZFAST_H

#include <stddef.h>

/* zlib format (RFC 1950, 32 KiB window) at zlib's default level, 6.
 * -ENOSPC when the result does not fit in cap; -ENOMEM. */
int zfast_zlib_compress(const void *in, size_t len, void *out, size_t cap, size_t *out_len);

/* Inflate a zlib stream into at most cap bytes (trailing input after the
 * stream is ignored): 0 with *out_len, -EIO for a bad or too long stream. */
int zfast_zlib_inflate(const void *in, size_t in_len, void *out, size_t cap, size_t *out_len);

/* Inflate raw deflate (RFC 1951) to exactly len bytes: 0, or -EIO. */
int zfast_raw_inflate_exact(const void *in, size_t in_len, void *out, size_t len);

#endif
