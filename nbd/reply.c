/* nbd/reply.c: simple and structured replies.
 *
 * Each reply is built whole and handed to nbd_worker_send (worker.c,
 * which owns the locks), so replies from concurrent workers never
 * interleave and go out in completion order.
 * Structured READ replies describe all-zero runs as OFFSET_HOLE chunks:
 * holes (and zeroes written as data) cost the client no bandwidth, which
 * is what makes qemu-img convert and nbdcopy cheap on sparse images. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "internal.h"
#include "names.h"

/* Zero runs shorter than this are sent as data. */
#define HOLE_GRANULE 4096u
/* A reply never has more chunks than this; the rest is sent as data. */
#define MAX_READ_CHUNKS 64

int nbd_reply_simple(struct nbd_worker *w, uint64_t cookie, uint32_t nbd_err)
{
    struct nbd_simple_reply h = {htobe32(NBD_SIMPLE_REPLY_MAGIC), htobe32(nbd_err), cookie};
    struct iovec iov = {&h, sizeof h};

    return nbd_worker_send(w, &iov, 1);
}

int nbd_reply_error(struct nbd_worker *w, uint64_t cookie, uint32_t nbd_err, const char *msg)
{
    if (!w->c->structured) {
        return nbd_reply_simple(w, cookie, nbd_err);
    }
    size_t mlen = MIN(strlen(msg), (size_t)NBD_MAX_STRING);
    struct nbd_structured_reply h = {
        .magic = htobe32(NBD_STRUCTURED_REPLY_MAGIC),
        .flags = htobe16(NBD_REPLY_FLAG_DONE),
        .type = htobe16(NBD_REPLY_TYPE_ERROR),
        .cookie = cookie,
        .length = htobe32((uint32_t)(sizeof(struct nbd_chunk_error) + mlen)),
    };
    struct nbd_chunk_error e = {htobe32(nbd_err), htobe16((uint16_t)mlen)};
    struct iovec iov[3] = {{&h, sizeof h}, {&e, sizeof e}, {(void *)msg, mlen}};

    return nbd_worker_send(w, iov, 3);
}

/* Chunk headers for one structured READ reply. */
struct read_chunk {
    struct nbd_structured_reply h;
    union {
        struct nbd_chunk_offset_data data;
        struct nbd_chunk_offset_hole hole;
    } u;
};

static void read_chunk_fill(struct read_chunk *ch, uint64_t cookie, uint64_t off, uint32_t len,
                            bool hole, struct iovec *iov, int *iovcnt, const void *data)
{
    ch->h.magic = htobe32(NBD_STRUCTURED_REPLY_MAGIC);
    ch->h.flags = 0;
    ch->h.cookie = cookie;
    if (hole) {
        ch->h.type = htobe16(NBD_REPLY_TYPE_OFFSET_HOLE);
        ch->h.length = htobe32(sizeof ch->u.hole);
        ch->u.hole.offset = htobe64(off);
        ch->u.hole.length = htobe32(len);
        iov[(*iovcnt)++] = (struct iovec){ch, sizeof ch->h + sizeof ch->u.hole};
    } else {
        ch->h.type = htobe16(NBD_REPLY_TYPE_OFFSET_DATA);
        ch->h.length = htobe32((uint32_t)sizeof ch->u.data + len);
        ch->u.data.offset = htobe64(off);
        iov[(*iovcnt)++] = (struct iovec){ch, sizeof ch->h + sizeof ch->u.data};
        iov[(*iovcnt)++] = (struct iovec){(void *)data, len};
    }
}

/* Length of the run starting at pos (relative to buf) whose granules are
 * all zero (zero = true) or all non-zero; granules are aligned to absolute
 * offsets so runs line up with the image's blocks. */
static uint32_t read_run(uint64_t off, const uint8_t *buf, uint32_t pos, uint32_t len, bool *zero)
{
    uint32_t end = pos;
    bool first = true;

    while (end < len) {
        uint32_t g = HOLE_GRANULE - (uint32_t)((off + end) % HOLE_GRANULE);
        g = MIN(g, len - end);
        bool z = g == HOLE_GRANULE && buffer_is_zero(buf + end, g);
        if (first) {
            *zero = z;
            first = false;
        } else if (z != *zero) {
            break;
        }
        end += g;
    }
    return end - pos;
}

size_t nbd_reply_read_max(const struct nbd_conn *c, uint32_t len)
{
    if (!c->structured) {
        return sizeof(struct nbd_simple_reply) + len;
    }
    /* One data chunk is the longest: a hole takes out at least
     * HOLE_GRANULE bytes of data for two chunk headers. */
    return sizeof(struct nbd_structured_reply) + sizeof(struct nbd_chunk_offset_data) + len;
}

int nbd_reply_read(struct nbd_worker *w, uint64_t cookie, uint64_t off, const void *buf,
                   uint32_t len, bool df)
{
    if (!w->c->structured) {
        struct nbd_simple_reply h = {htobe32(NBD_SIMPLE_REPLY_MAGIC), 0, cookie};
        struct iovec iov[2] = {{&h, sizeof h}, {(void *)buf, len}};
        return nbd_worker_send(w, iov, len ? 2 : 1);
    }
    if (len == 0) {
        struct nbd_structured_reply h = {htobe32(NBD_STRUCTURED_REPLY_MAGIC),
                                         htobe16(NBD_REPLY_FLAG_DONE), htobe16(NBD_REPLY_TYPE_NONE),
                                         cookie, 0};
        struct iovec iov = {&h, sizeof h};
        return nbd_worker_send(w, &iov, 1);
    }

    struct read_chunk chunks[MAX_READ_CHUNKS];
    struct iovec iov[2 * MAX_READ_CHUNKS];
    int iovcnt = 0, n = 0;
    uint32_t pos = 0;
    const uint8_t *p = buf;

    while (pos < len) {
        bool zero = false;
        uint32_t run = len - pos;

        /* DF: one data chunk.  Otherwise split into data and holes while
         * chunks remain; the last chunk takes whatever is left. */
        if (!df && n < MAX_READ_CHUNKS - 1) {
            run = read_run(off, p, pos, len, &zero);
        }
        read_chunk_fill(&chunks[n], cookie, off + pos, run, zero, iov, &iovcnt, p + pos);
        n++;
        pos += run;
    }
    chunks[n - 1].h.flags = htobe16(NBD_REPLY_FLAG_DONE);
    return nbd_worker_send(w, iov, iovcnt);
}

int nbd_reply_block_status(struct nbd_worker *w, uint64_t cookie, const uint32_t *ctx_ids,
                           struct nbd_extent_list *lists, unsigned nlists)
{
    struct {
        struct nbd_structured_reply h;
        uint32_t ctx;
    } __attribute__((packed)) hdr[NBD_META_MAX];
    struct iovec iov[2 * NBD_META_MAX];
    int iovcnt = 0;

    for (unsigned i = 0; i < nlists && i < NBD_META_MAX; i++) {
        uint32_t bytes = lists[i].n * (uint32_t)sizeof(struct nbd_block_descriptor);
        hdr[i].h = (struct nbd_structured_reply){
            .magic = htobe32(NBD_STRUCTURED_REPLY_MAGIC),
            .flags = htobe16(i + 1 == nlists ? NBD_REPLY_FLAG_DONE : 0),
            .type = htobe16(NBD_REPLY_TYPE_BLOCK_STATUS),
            .cookie = cookie,
            .length = htobe32(4 + bytes),
        };
        hdr[i].ctx = htobe32(ctx_ids[i]);
        iov[iovcnt++] = (struct iovec){&hdr[i], sizeof hdr[i]};
        iov[iovcnt++] = (struct iovec){lists[i].desc, bytes};
    }
    return nbd_worker_send(w, iov, iovcnt);
}
