/* formats/vmdk/stream.c: writing streamOptimized images.
 *
 * A stream is append-only: each grain is written once, whole, deflated
 * (zlib, as qemu and VMware write it) behind a 12-byte marker, at the end
 * of the file; the grain tables (preallocated at the front, as qemu lays
 * them out) are updated in memory and written at flush.  At close a footer
 * (marker and a copy of the header) and an end-of-stream marker follow
 * the last grain, as VMware's streams end.  A later writer appends over
 * that footer and writes a new one.
 *
 * A stream being written is never taken for a valid one, as VMware's
 * writer makes sure: before the first grain of a session the header's
 * magic becomes "kdmv" (lowercase: no reader recognises it), and only
 * when the tables, the footer and the end marker are on stable storage
 * does it become "KDMV" again (finish, at every flush and at close).
 * Without it a crash could leave a file whose tables were written but
 * whose later grains or footer were not, and that qemu would open.
 *
 * Compression is split in two, as the block layer's compress hooks want:
 * convert deflates grains on all its workers (vmdk_stream_compress, no
 * lock) and appends them in order (vmdk_stream_pwrite_compressed).
 * Anything else (a partial grain, a grain written before) is refused, as
 * qemu refuses it. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "block/esc-name.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "formats/zfast.h"
#include "vmdk.h"

/* Each thread keeps its deflate state: setting it up costs more than
 * compressing a small grain. */
struct deflate_state {
    z_stream z;
    bool ready;
};

static pthread_key_t deflate_key;
static pthread_once_t deflate_once = PTHREAD_ONCE_INIT;

static void deflate_free(void *p)
{
    struct deflate_state *d = p;

    if (d->ready) {
        deflateEnd(&d->z);
    }
    free(d);
}

static void deflate_key_init(void)
{
    pthread_key_create(&deflate_key, deflate_free);
}

static int deflate_grain(const void *in, uint64_t len, void *out, size_t cap, size_t *out_len)
{
    struct deflate_state *d;

    /* libdeflate, when built with it: the same format, twice as fast. */
    int r = zfast_zlib_compress(in, len, out, cap, out_len);
    if (r != -ENOTSUP) {
        return r == -ENOMEM ? err_set(ENOMEM, "vmdk: deflate") : r;
    }

    pthread_once(&deflate_once, deflate_key_init);
    d = pthread_getspecific(deflate_key);
    if (!d) {
        d = calloc(1, sizeof *d);
        if (!d) {
            return err_set(ENOMEM, "vmdk: deflate");
        }
        pthread_setspecific(deflate_key, d);
    }
    if (!d->ready) {
        if (deflateInit(&d->z, Z_DEFAULT_COMPRESSION) != Z_OK) {
            return err_set(ENOMEM, "vmdk: deflate");
        }
        d->ready = true;
    } else {
        deflateReset(&d->z);
    }
    d->z.next_in = (Bytef *)in;
    d->z.avail_in = (uInt)len;
    d->z.next_out = out;
    d->z.avail_out = (uInt)cap;
    if (deflate(&d->z, Z_FINISH) != Z_STREAM_END) {
        return -ENOSPC;
    }
    *out_len = cap - d->z.avail_out;
    return 0;
}

int vmdk_stream_compress(struct blk_node *n, const void *in, uint64_t len, void *out, size_t cap,
                         size_t *out_len)
{
    struct vmdk_state *s = n->opaque;

    struct vmdk_extent *e = &s->extents[0];

    if (!s->stream) {
        return -ENOSPC; /* monolithicSparse stores grains as they are (qemu too) */
    }
    if (len >= e->grain) {
        return deflate_grain(in, len, out, cap, out_len);
    }
    /* The last grain of an image whose size is not a multiple of the
     * grain: a whole grain, zero-padded, so that every sector of the
     * image inflates (qemu checks that a read fits in what inflates). */
    uint8_t *whole = calloc(1, e->grain);
    if (!whole) {
        return err_set(ENOMEM, "vmdk: grain buffer");
    }
    memcpy(whole, in, len);
    int r = deflate_grain(whole, e->grain, out, cap, out_len);
    free(whole);
    return r;
}

static int stream_refuse(struct vmdk_state *s, uint64_t off, uint64_t len, const char *why)
{
    return err_setx(EINVAL,
                    "%s: vmdk: a streamOptimized image takes each grain once, whole and in "
                    "order (convert); refusing the write at %" PRIu64 "+%" PRIu64 ": %s",
                    ESC_NAME(s->node), off, len, why);
}

/* Append one compressed grain and point the table at it. */
static int append_grain(struct vmdk_state *s, uint64_t grain, const void *data, size_t clen)
{
    struct vmdk_extent *e = &s->extents[0];
    uint8_t marker[VMDK_MARKER_HDR];
    static const uint8_t pad[VMDK_SECTOR];
    uint32_t gte;
    int r;

    pthread_mutex_lock(&s->lock);
    r = vmdk_sparse_get_gte_locked(e, grain, &gte);
    if (r == 0 && gte != 0 && !(gte == VMDK_GTE_ZERO && e->zeroed_grain)) {
        r = stream_refuse(s, grain * e->grain, e->grain, "the grain is written already");
    }
    if (r == 0 && !vmdk_sparse_has_gt(e, grain)) {
        r = vmdk_sparse_no_gt_error(e, grain);
    }
    if (r == 0 && !s->stream_torn) {
        r = blk_pwrite(e->file, 0, VMDK_TORN_MAGIC, 4, 0); /* durable by the next sync */
        s->stream_torn = r == 0;
    }
    uint64_t host = e->next_alloc;
    uint64_t total = ROUND_UP(VMDK_MARKER_HDR + (uint64_t)clen, VMDK_SECTOR);
    if (r == 0 && (host + total) / VMDK_SECTOR > UINT32_MAX) {
        r = err_setx(ENOSPC, "%s: vmdk: the file would pass 2 TiB", ESC_NAME(s->node));
    }
    if (r < 0) {
        pthread_mutex_unlock(&s->lock);
        return r;
    }
    e->next_alloc = host + total;
    pthread_mutex_unlock(&s->lock);

    put_le64(marker, grain * (e->grain / VMDK_SECTOR));
    put_le32(marker + 8, (uint32_t)clen);
    struct iovec iov[3] = {
        {marker, sizeof marker},
        {(void *)data, clen},
        {(void *)pad, total - VMDK_MARKER_HDR - clen},
    };
    r = blk_pwritev(e->file, host, iov, iov[2].iov_len ? 3 : 2, 0);
    pthread_mutex_lock(&s->lock);
    vmdk_sparse_alloc_done_locked(e, host, total, r == 0);
    if (r == 0) {
        r = vmdk_sparse_set_gte_locked(e, grain, (uint32_t)(host / VMDK_SECTOR));
    }
    s->stream_dirty = true;
    pthread_mutex_unlock(&s->lock);
    return r;
}

int vmdk_stream_pwrite_compressed(struct blk_node *n, uint64_t off, const void *data, size_t clen)
{
    struct vmdk_state *s = n->opaque;
    struct vmdk_extent *e = &s->extents[0];

    if (!s->stream) {
        return err_setx(ENOTSUP, "%s: vmdk: only streamOptimized images store compressed grains",
                        ESC_NAME(n));
    }
    if (off % e->grain) {
        return stream_refuse(s, off, clen, "not at the start of a grain");
    }
    if (clen > UINT32_MAX) {
        return stream_refuse(s, off, clen, "too large");
    }
    return append_grain(s, off / e->grain, data, clen);
}

int vmdk_stream_write(struct vmdk_state *s, uint64_t off, const uint8_t *buf, uint64_t len)
{
    struct vmdk_extent *e = &s->extents[0];
    size_t cap = (size_t)(e->grain + e->grain / 8 + 1024);
    int r = 0;

    if (off % e->grain || (len % e->grain && off + len != s->size)) {
        return stream_refuse(s, off, len, "not whole grains");
    }
    uint8_t *out = malloc(cap);
    if (!out) {
        return err_set(ENOMEM, "vmdk: grain buffer");
    }
    for (uint64_t pos = 0; r == 0 && pos < len; pos += e->grain) {
        uint64_t n = MIN(e->grain, len - pos);
        const uint8_t *in = buf + pos;
        size_t clen;
        if (!s->backing && buffer_is_zero(buf + pos, n)) {
            uint32_t gte;
            pthread_mutex_lock(&s->lock);
            r = vmdk_sparse_get_gte_locked(e, (off + pos) / e->grain, &gte);
            pthread_mutex_unlock(&s->lock);
            if (r == 0 && gte == 0) {
                continue; /* reads as zeroes already */
            }
        }
        r = vmdk_stream_compress(s->node, in, n, out, cap, &clen);
        if (r == 0) {
            r = append_grain(s, (off + pos) / e->grain, out, clen);
        }
    }
    free(out);
    return r;
}

int vmdk_stream_open_rw(struct vmdk_state *s)
{
    struct vmdk_extent *e = &s->extents[0];
    uint64_t end;
    int r;

    if (!e->markers) {
        return err_setx(EROFS, "%s: vmdk: compressed grains without markers are read-only",
                        ESC_NAME(s->node));
    }
    pthread_mutex_lock(&s->lock);
    r = vmdk_sparse_data_end_locked(e, &end);
    if (r == 0) {
        e->next_alloc = MAX(end, ROUND_UP(e->overhead, VMDK_SECTOR));
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* After the last grain: a footer marker, the footer (the header again)
 * and the end-of-stream marker; nothing after them.  Then, once all of
 * it is on stable storage, the header's magic says the stream is whole. */
int vmdk_stream_finish_locked(struct vmdk_state *s)
{
    struct vmdk_extent *e = &s->extents[0];
    uint8_t tail[3 * VMDK_SECTOR] = {0};
    int r = 0;

    if (s->stream_dirty) {
        r = vmdk_sparse_flush_locked(e);
        if (r == 0) {
            r = blk_pread(e->file, 0, tail + VMDK_SECTOR, VMDK_SECTOR);
        }
        if (r < 0) {
            return r;
        }
        memcpy(tail + VMDK_SECTOR, VMDK4_MAGIC, 4);
        put_le64(tail, 1); /* one sector of metadata follows */
        put_le32(tail + 12, VMDK_MARKER_FOOTER);
        r = blk_pwrite(e->file, e->next_alloc, tail, sizeof tail, 0);
        if (r == 0) {
            r = blk_truncate(e->file, e->next_alloc + sizeof tail);
        }
        if (r == 0) {
            e->file_len = e->next_alloc + sizeof tail;
            s->stream_dirty = false;
        }
    }
    if (r == 0 && s->stream_torn) {
        r = blk_flush(e->file);
        if (r == 0) {
            r = blk_pwrite(e->file, 0, VMDK4_MAGIC, 4, 0);
        }
        if (r == 0) {
            r = blk_flush(e->file);
        }
        s->stream_torn = r != 0;
    }
    return r;
}
