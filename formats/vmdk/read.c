/* formats/vmdk/read.c: guest reads of sparse extents: data grains in
 * place, compressed grains inflated (zlib, with or without markers),
 * unallocated grains from the parent or as zeroes.  Every size a grain
 * marker claims is checked against the file and the grain before it is
 * read or allocated. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "formats/zfast.h"
#include "vmdk.h"

int vmdk_inflate_grain(struct vmdk_extent *e, uint64_t marker_off, uint64_t grain_index,
                       uint8_t *out, uint64_t out_len)
{
    uint64_t avail, clen, data_off;
    int r;

    if (marker_off >= e->file_len) {
        return vmdk_extent_error(e, EINVAL, "grain at %" PRIu64 " is past the end of the file",
                                 marker_off);
    }
    avail = e->file_len - marker_off;
    if (e->markers) {
        uint8_t mk[VMDK_MARKER_HDR];
        if (avail < VMDK_MARKER_HDR) {
            return vmdk_extent_error(e, EINVAL, "grain marker at %" PRIu64 " is cut short",
                                     marker_off);
        }
        r = blk_pread(e->file, marker_off, mk, sizeof mk);
        if (r < 0) {
            return r;
        }
        clen = get_le32(mk + 8);
        if (get_le64(mk) != grain_index * (e->grain / VMDK_SECTOR)) {
            return vmdk_extent_error(e, EINVAL, "grain marker at %" PRIu64 " names another sector",
                                     marker_off);
        }
        data_off = marker_off + VMDK_MARKER_HDR;
        if (clen == 0 || clen > avail - VMDK_MARKER_HDR || clen > 2 * e->grain + 4096) {
            return vmdk_extent_error(
                e, EINVAL, "grain marker at %" PRIu64 " claims an impossible size", marker_off);
        }
    } else {
        data_off = marker_off;
        clen = MIN(avail, 2 * e->grain + 4096);
    }
    CLEANUP_FREE uint8_t *in = malloc(clen);
    if (!in) {
        return err_set(ENOMEM, "%s: vmdk: compressed grain", e->name);
    }
    r = blk_pread(e->file, data_off, in, clen);
    if (r < 0) {
        return r;
    }
    /* The fast path takes the grains that inflate whole; anything else
     * goes to zlib, whose verdict is the one given. */
    size_t fast_got;
    if (zfast_zlib_inflate(in, clen, out, e->grain, &fast_got) == 0 && fast_got >= out_len) {
        if (fast_got < e->grain) {
            memset(out + fast_got, 0, e->grain - fast_got);
        }
        return 0;
    }
    z_stream z = {0};
    if (inflateInit(&z) != Z_OK) {
        return err_set(ENOMEM, "%s: vmdk: inflate", e->name);
    }
    z.next_in = in;
    z.avail_in = (uInt)clen;
    z.next_out = out;
    z.avail_out = (uInt)e->grain;
    int zr = inflate(&z, Z_FINISH);
    uint64_t got = e->grain - z.avail_out;
    inflateEnd(&z);
    if ((zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && z.avail_out == 0)) || got < out_len) {
        return vmdk_extent_error(
            e, EIO, "compressed grain at %" PRIu64 " does not inflate to a grain", marker_off);
    }
    if (got < e->grain) {
        memset(out + got, 0, e->grain - got);
    }
    return 0;
}

/* Bytes of a data run that the file holds; the rest reads as zeroes. */
static int read_host(struct vmdk_extent *e, uint64_t host, uint8_t *buf, uint64_t len,
                     uint64_t file_len)
{
    if (host >= file_len) {
        return vmdk_extent_error(e, EINVAL, "grain at %" PRIu64 " is past the end of the file",
                                 host);
    }
    uint64_t have = MIN(len, file_len - host);
    if (have < len) {
        memset(buf + have, 0, len - have);
    }
    return blk_pread(e->file, host, buf, have);
}

int vmdk_sparse_read(struct vmdk_state *s, struct vmdk_extent *e, uint64_t off, uint8_t *buf,
                     uint64_t len)
{
    while (len) {
        struct vmdk_map m;
        uint64_t file_len;
        pthread_mutex_lock(&s->lock);
        int r = vmdk_sparse_map_locked(e, off, len, &m);
        file_len = e->file_len;
        pthread_mutex_unlock(&s->lock);
        if (r < 0) {
            return r;
        }
        switch (m.kind) {
        case VMDK_MAP_UNALLOC:
            if (s->backing) {
                r = vmdk_read_parent(s, e->start + off, buf, m.bytes);
            } else {
                memset(buf, 0, m.bytes);
            }
            break;
        case VMDK_MAP_ZERO:
            memset(buf, 0, m.bytes);
            break;
        case VMDK_MAP_DATA:
            r = read_host(e, m.host, buf, m.bytes, file_len);
            break;
        case VMDK_MAP_COMPRESSED: {
            uint64_t g = off / e->grain, in = off % e->grain;
            uint64_t need = MIN(e->grain, e->length - g * e->grain);
            uint8_t *tmp = malloc(e->grain);
            if (!tmp) {
                return err_set(ENOMEM, "%s: vmdk: grain buffer", e->name);
            }
            r = vmdk_inflate_grain(e, m.host, g, tmp, need);
            if (r == 0) {
                memcpy(buf, tmp + in, m.bytes);
            }
            free(tmp);
            break;
        }
        }
        if (r < 0) {
            return r;
        }
        off += m.bytes;
        buf += m.bytes;
        len -= m.bytes;
    }
    return 0;
}
