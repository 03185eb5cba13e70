/* formats/qcow2/compress.c: compressed clusters.
 *
 * A compressed descriptor holds a byte offset and a count of 512-byte
 * sectors; the stream is raw deflate (zlib, 4 KiB window) or one zstd
 * frame, and must inflate to exactly one cluster.  Only the sector count is
 * known, so trailing input after the end of the stream is ignored.
 *
 * Order (qcow2.h): above header.c; calls no other qcow2 file. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#ifdef HAVE_ZSTD
#include <zstd.h>
#endif

#include "common/cleanup.h"
#include "common/error.h"
#include "formats/zfast.h"
#include "qcow2.h"

static void parse_descriptor(const struct qcow2_state *s, uint64_t l2_entry, uint64_t *coffset,
                             uint64_t *csize)
{
    uint64_t nb_sectors = ((l2_entry >> s->csize_shift) & s->csize_mask) + 1;

    *coffset = l2_entry & s->cluster_offset_mask;
    *csize = nb_sectors * 512 - (*coffset & 511);
}

void qcow2_compressed_range(const struct qcow2_state *s, uint64_t l2_entry, uint64_t *offset,
                            uint64_t *bytes)
{
    uint64_t coffset, csize;

    parse_descriptor(s, l2_entry, &coffset, &csize);
    *offset = coffset & ~(s->cluster_size - 1);
    *bytes = ROUND_UP(coffset + csize, s->cluster_size) - *offset;
}

/* Each thread keeps its codec state: setting up deflate costs more than
 * compressing a small cluster, and a zstd context for inflating is
 * larger than the cluster it inflates. */
struct codec_state {
    z_stream z, unz;
    bool z_ready, unz_ready;
#ifdef HAVE_ZSTD
    ZSTD_CCtx *zstd;
    ZSTD_DCtx *unzstd;
#endif
};

static pthread_key_t codec_key;
static pthread_once_t codec_once = PTHREAD_ONCE_INIT;

static void codec_free(void *p)
{
    struct codec_state *cs = p;

    if (cs->z_ready) {
        deflateEnd(&cs->z);
    }
    if (cs->unz_ready) {
        inflateEnd(&cs->unz);
    }
#ifdef HAVE_ZSTD
    ZSTD_freeCCtx(cs->zstd);
    ZSTD_freeDCtx(cs->unzstd);
#endif
    free(cs);
}

static void codec_key_init(void)
{
    pthread_key_create(&codec_key, codec_free);
}

static struct codec_state *codec_get(void)
{
    struct codec_state *cs;

    pthread_once(&codec_once, codec_key_init);
    cs = pthread_getspecific(codec_key);
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (cs) {
            pthread_setspecific(codec_key, cs);
        }
    }
    return cs;
}

static int inflate_zlib(struct codec_state *cs, const uint8_t *in, size_t in_len, uint8_t *out,
                        size_t out_len)
{
    z_stream *z = &cs->unz;
    int ret;

    /* The fast path takes the clusters that inflate whole; anything else
     * goes to zlib, whose verdict is the one given. */
    if (zfast_raw_inflate_exact(in, in_len, out, out_len) == 0) {
        return 0;
    }

    if (!cs->unz_ready) {
        if (inflateInit2(z, -12) != Z_OK) {
            return -ENOMEM;
        }
        cs->unz_ready = true;
    } else if (inflateReset(z) != Z_OK) {
        return -EIO;
    }
    z->next_in = (Bytef *)in;
    z->avail_in = (uInt)in_len;
    z->next_out = out;
    z->avail_out = (uInt)out_len;
    ret = inflate(z, Z_FINISH);
    /* The output must be exactly one cluster; the input may have slack. */
    if ((ret == Z_STREAM_END || ret == Z_BUF_ERROR) && z->avail_out == 0) {
        return 0;
    }
    return -EIO;
}

#ifdef HAVE_ZSTD
static int inflate_zstd(struct codec_state *cs, const uint8_t *in, size_t in_len, uint8_t *out,
                        size_t out_len)
{
    ZSTD_inBuffer ib = {in, in_len, 0};
    ZSTD_outBuffer ob = {out, out_len, 0};
    size_t ret = 1;

    if (!cs->unzstd && !(cs->unzstd = ZSTD_createDCtx())) {
        return -ENOMEM;
    }
    ZSTD_DCtx *dctx = cs->unzstd;
    /* A stream left mid-frame by a bad cluster must not leak into this one. */
    ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
    while (ob.pos < ob.size) {
        size_t in_before = ib.pos, out_before = ob.pos;
        ret = ZSTD_decompressStream(dctx, &ob, &ib);
        if (ZSTD_isError(ret) || (ib.pos == in_before && ob.pos == out_before)) {
            ret = 1;
            break; /* error, or no progress: truncated or bogus stream */
        }
        if (ret == 0 && ob.pos < ob.size) {
            ret = 1; /* the frame ended before the cluster was full */
            break;
        }
    }
    return ret == 0 && ob.pos == ob.size ? 0 : -EIO;
}
#endif

int qcow2_decompress_cluster(struct qcow2_state *s, uint64_t l2_entry, uint8_t *out)
{
    uint64_t coffset, csize;
    int r;

    struct codec_state *cs = codec_get();
    if (!cs) {
        return err_set(ENOMEM, "qcow2: compression state");
    }
    parse_descriptor(s, l2_entry, &coffset, &csize);
    int64_t file_len = blk_get_length(s->file);
    if (coffset >= QCOW2_MAX_HOST_OFFSET || coffset < s->cluster_size || file_len < 0 ||
        coffset >= (uint64_t)file_len) {
        return err_setx(EIO, "qcow2: compressed cluster at invalid offset 0x%" PRIx64, coffset);
    }
    /* The descriptor counts whole sectors; the last one of a file written
     * without padding is short.  What is missing was never data. */
    csize = MIN(csize, (uint64_t)file_len - coffset);
    CLEANUP_FREE uint8_t *in = malloc(csize);
    if (!in) {
        return err_set(ENOMEM, "qcow2: compressed cluster of %" PRIu64 " bytes", csize);
    }
    r = blk_pread(s->file, coffset, in, csize);
    if (r < 0) {
        return r;
    }
    if (s->hdr.compression_type == QCOW2_COMPRESSION_ZSTD) {
#ifdef HAVE_ZSTD
        r = inflate_zstd(cs, in, csize, out, s->cluster_size);
#else
        return err_setx(ENOTSUP, "qcow2: zstd-compressed clusters need a build with libzstd");
#endif
    } else {
        r = inflate_zlib(cs, in, csize, out, s->cluster_size);
    }
    if (r < 0) {
        return err_setx(-r,
                        "qcow2: compressed cluster at 0x%" PRIx64 " (%" PRIu64
                        " bytes) does not decompress to one cluster",
                        coffset, csize);
    }
    return 0;
}

/* ---- compression (convert -c) ---- */

#define QCOW2_ZLIB_LEVEL 4

int qcow2_compress_cluster(struct qcow2_state *s, const uint8_t *in, uint8_t *out, size_t cap,
                           size_t *out_len)
{
    struct codec_state *cs = codec_get();

    if (!cs) {
        return err_set(ENOMEM, "qcow2: compression state");
    }
    if (s->hdr.compression_type == QCOW2_COMPRESSION_ZSTD) {
#ifdef HAVE_ZSTD
        if (!cs->zstd && !(cs->zstd = ZSTD_createCCtx())) {
            return err_set(ENOMEM, "qcow2: zstd context");
        }
        size_t n = ZSTD_compressCCtx(cs->zstd, out, cap, in, s->cluster_size, ZSTD_CLEVEL_DEFAULT);
        if (ZSTD_isError(n)) {
            return -ENOSPC; /* does not shrink: store it uncompressed */
        }
        *out_len = n;
        return 0;
#else
        return err_setx(ENOTSUP, "qcow2: zstd compression needs a build with libzstd");
#endif
    }
    /* Raw deflate with a 4 KiB window, as qemu reads it.  qemu deflates
     * at level 6; level 4 costs 1.6 times less CPU for about 2% more
     * bytes (the bench source's clusters), since zlib's levels 4 to 6
     * differ only in how hard they look for longer matches. */
    if (!cs->z_ready) {
        if (deflateInit2(&cs->z, QCOW2_ZLIB_LEVEL, Z_DEFLATED, -12, 9, Z_DEFAULT_STRATEGY) !=
            Z_OK) {
            return err_set(ENOMEM, "qcow2: deflate");
        }
        cs->z_ready = true;
    } else {
        deflateReset(&cs->z);
    }
    cs->z.next_in = (Bytef *)in;
    cs->z.avail_in = (uInt)s->cluster_size;
    cs->z.next_out = out;
    cs->z.avail_out = (uInt)cap;
    if (deflate(&cs->z, Z_FINISH) != Z_STREAM_END) {
        return -ENOSPC;
    }
    *out_len = cap - cs->z.avail_out;
    return 0;
}
