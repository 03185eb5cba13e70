/* formats/qcow2/compress.c: compressed clusters.
 *
 * A compressed descriptor holds a byte offset and a count of 512-byte
 * sectors; the stream is raw deflate (zlib, 4 KiB window) or one zstd
 * frame, and must inflate to exactly one cluster.  Only the sector count is
 * known, so trailing input after the end of the stream is ignored. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#ifdef HAVE_ZSTD
#include <zstd.h>
#endif

#include "common/cleanup.h"
#include "common/error.h"
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

static int inflate_zlib(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len)
{
    z_stream z = {0};
    int ret;

    if (inflateInit2(&z, -12) != Z_OK) {
        return -ENOMEM;
    }
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)in_len;
    z.next_out = out;
    z.avail_out = (uInt)out_len;
    ret = inflate(&z, Z_FINISH);
    inflateEnd(&z);
    /* The output must be exactly one cluster; the input may have slack. */
    if ((ret == Z_STREAM_END || ret == Z_BUF_ERROR) && z.avail_out == 0) {
        return 0;
    }
    return -EIO;
}

#ifdef HAVE_ZSTD
static int inflate_zstd(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    ZSTD_inBuffer ib = {in, in_len, 0};
    ZSTD_outBuffer ob = {out, out_len, 0};
    size_t ret = 1;

    if (!dctx) {
        return -ENOMEM;
    }
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
    ZSTD_freeDCtx(dctx);
    return ret == 0 && ob.pos == ob.size ? 0 : -EIO;
}
#endif

int qcow2_decompress_cluster(struct qcow2_state *s, uint64_t l2_entry, uint8_t *out)
{
    uint64_t coffset, csize;
    int r;

    parse_descriptor(s, l2_entry, &coffset, &csize);
    if (coffset >= QCOW2_MAX_HOST_OFFSET || coffset < s->cluster_size) {
        return err_setx(EIO, "qcow2: compressed cluster at invalid offset 0x%" PRIx64, coffset);
    }
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
        r = inflate_zstd(in, csize, out, s->cluster_size);
#else
        return err_setx(ENOTSUP, "qcow2: zstd-compressed clusters need a build with libzstd");
#endif
    } else {
        r = inflate_zlib(in, csize, out, s->cluster_size);
    }
    if (r < 0) {
        return err_setx(-r,
                        "qcow2: compressed cluster at 0x%" PRIx64 " (%" PRIu64
                        " bytes) does not decompress to one cluster",
                        coffset, csize);
    }
    return 0;
}
