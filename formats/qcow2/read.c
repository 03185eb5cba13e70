/* formats/qcow2/read.c: guest reads.  Each run is mapped under the lock
 * and read without it: host data, a compressed cluster, the backing file
 * (zeroes past its end), or zeroes.  The run's I/O epoch keeps its host
 * clusters from being freed and reused until the read ends.  Writes use
 * qcow2_read_range() for copy-on-write.  Not for block status (qcow2.c).
 *
 * Order (qcow2.h): above backing.c; calls cluster, compress, writeback. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "qcow2.h"

#define IOV_LOCAL 64

/* Read an unallocated range from the backing file; zeroes past its end. */
static int read_backing(struct qcow2_state *s, uint64_t off, const struct iovec *iov, int iovcnt,
                        uint64_t len)
{
    int64_t blen = s->backing ? blk_get_length(s->backing) : 0;
    uint64_t from_backing = 0;
    int r;

    if (blen < 0) {
        return (int)blen;
    }
    if ((int64_t)off < blen) {
        from_backing = MIN(len, (uint64_t)blen - off);
        struct iovec sub[IOV_LOCAL];
        int k = iov_slice(iov, iovcnt, 0, from_backing, sub, IOV_LOCAL);
        if (k < 0) {
            return err_setx(EINVAL, "qcow2: read with too many iovec elements");
        }
        r = blk_preadv(s->backing, off, sub, k);
        if (r < 0) {
            return r;
        }
    }
    iov_memset(iov, iovcnt, from_backing, 0, len - from_backing);
    return 0;
}

static int read_compressed(struct qcow2_state *s, uint64_t guest, uint64_t l2_entry,
                           const struct iovec *iov, int iovcnt, uint64_t len)
{
    CLEANUP_FREE uint8_t *cluster = malloc(s->cluster_size);
    int r;

    if (!cluster) {
        return err_set(ENOMEM, "qcow2: cluster buffer");
    }
    r = qcow2_decompress_cluster(s, l2_entry, cluster);
    if (r == 0) {
        iov_from_buf(iov, iovcnt, 0, cluster + (guest & (s->cluster_size - 1)), len);
    }
    return r;
}

int qcow2_read_range(struct qcow2_state *s, uint64_t off, const struct iovec *iov, int iovcnt)
{
    uint64_t len = iov_length(iov, iovcnt), pos = 0;
    int r = 0;

    while (r == 0 && pos < len) {
        struct qcow2_map m;
        struct iovec sub[IOV_LOCAL];
        unsigned epoch;
        int k;

        pthread_mutex_lock(&s->lock);
        r = qcow2_map_locked(s, off + pos, len - pos, &m);
        epoch = qcow2_io_enter(s);
        pthread_mutex_unlock(&s->lock);
        if (r < 0) {
            qcow2_io_leave(s, epoch);
            break;
        }
        k = iov_slice(iov, iovcnt, pos, m.bytes, sub, IOV_LOCAL);
        if (k < 0) {
            qcow2_io_leave(s, epoch);
            return err_setx(EINVAL, "qcow2: read with too many iovec elements");
        }
        switch (m.type) {
        case QCOW2_NORMAL:
            r = blk_preadv(s->file, m.host, sub, k);
            break;
        case QCOW2_COMPRESSED:
            r = read_compressed(s, off + pos, m.l2_entry, sub, k, m.bytes);
            break;
        case QCOW2_UNALLOCATED:
            r = read_backing(s, off + pos, sub, k, m.bytes);
            break;
        default:
            iov_memset(sub, k, 0, 0, m.bytes);
        }
        qcow2_io_leave(s, epoch);
        pos += m.bytes;
    }
    return r;
}

int qcow2_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    return qcow2_read_range(n->opaque, off, iov, iovcnt);
}
