/* nbd/client.c: NBD transmission on the client side.  Many threads send
 * requests on one connection; replies are read by whichever thread holds
 * the read side, which puts READ data straight into the waiting request's
 * buffers and marks it done.  Cookies are slot numbers plus a generation,
 * so a late or forged reply can never complete the wrong request.
 *
 * Who reads: a thread that waits for a reply takes the read side when no
 * other thread holds it, and reads replies, its own and others', until its
 * own is in; then it wakes one waiting thread to take over.  A thread
 * whose reply comes first, as on a connection it alone uses, never hands
 * the reply to another thread and never sleeps for the hand-off: a
 * dedicated reader thread cost a wake-up per reply on both sides.  TLS
 * connections keep that thread (nbd_client_start says why).
 *
 * Nothing a server sends is trusted: a structured READ reply must cover
 * each byte of the request exactly once (read-cover.c), so chunks outside
 * the request, overlapping or repeated chunks and a reply that ends short
 * are protocol violations, not buffer contents the caller would take for
 * data.  Any violation fails every request in flight with EIO and a
 * message naming the server and what it did, and ends the connection. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "common/util.h"
#include "names.h"
#include "protocol.h"
#include "tls.h"

#define MAX_STATUS_DESCRIPTORS (1u << 16)

static int recv_all(struct nbd_client_conn *c, void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = c->tls ? nbd_tls_recv(c->tls, p, len) : recv(c->fd, p, len, MSG_WAITALL);
        if (n == 0) {
            return -ECONNRESET;
        }
        if (n < 0 && c->tls) {
            return (int)n;
        }
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int recv_discard(struct nbd_client_conn *c, uint64_t len)
{
    uint8_t scratch[4096];

    while (len > 0) {
        size_t n = (size_t)MIN(len, (uint64_t)sizeof scratch);
        int r = recv_all(c, scratch, n);
        if (r < 0) {
            return r;
        }
        len -= n;
    }
    return 0;
}

/* A protocol violation: the reason, for conn_die.  Returns -EPROTO. */
static int protocol_error(struct nbd_client_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int protocol_error(struct nbd_client_conn *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->proto_err, sizeof c->proto_err, fmt, ap);
    va_end(ap);
    return -EPROTO;
}

/* Fail every request in flight with err and refuse new ones. */
static void conn_die(struct nbd_client_conn *c, int err, const char *why)
{
    pthread_mutex_lock(&c->lock);
    if (!c->dead) {
        c->dead = true;
        c->dead_err = err;
        snprintf(c->dead_msg, sizeof c->dead_msg, "%s: %s", c->where, why);
    }
    for (int i = 0; i < NBD_CLIENT_SLOTS; i++) {
        struct nbd_client_slot *s = &c->slots[i];
        if (s->busy && !s->done) {
            s->err = c->dead_err;
            snprintf(s->msg, sizeof s->msg, "%s", c->dead_msg);
            s->done = true;
            pthread_cond_signal(&s->cond);
        }
    }
    pthread_cond_broadcast(&c->slot_free);
    pthread_mutex_unlock(&c->lock);
    shutdown(c->fd, SHUT_RDWR);
}

static struct nbd_client_slot *slot_for(struct nbd_client_conn *c, uint64_t cookie)
{
    uint64_t idx = cookie & 0xffff, gen = (cookie >> 16) & 0xffff;

    if (idx >= NBD_CLIENT_SLOTS || cookie >> 32) {
        return NULL;
    }
    struct nbd_client_slot *s = &c->slots[idx];
    return s->busy && !s->done && s->generation == gen ? s : NULL;
}

static void slot_complete(struct nbd_client_conn *c, struct nbd_client_slot *s)
{
    pthread_mutex_lock(&c->lock);
    s->done = true;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&c->lock);
}

/* Data for [off, off+len) of a READ, already checked to be inside it:
 * received into the right part of its iovec, or zeroes for a hole. */
static int read_into(struct nbd_client_conn *c, struct nbd_client_slot *s, uint64_t off,
                     uint64_t len, bool hole)
{
    uint64_t skip = off - s->offset;

    if (hole) {
        iov_memset(s->iov, s->iovcnt, skip, 0, len);
        return 0;
    }
    struct iovec sub[64];
    int k = iov_slice(s->iov, s->iovcnt, skip, len, sub, 64);
    if (k < 0) {
        return -EINVAL;
    }
    for (int i = 0; i < k; i++) {
        int r = recv_all(c, sub[i].iov_base, sub[i].iov_len);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

/* An OFFSET_DATA or OFFSET_HOLE chunk: each byte of the request once. */
static int read_offset_chunk(struct nbd_client_conn *c, struct nbd_client_slot *s, uint64_t off,
                             uint64_t len, bool hole)
{
    const char *what = hole ? "NBD_REPLY_TYPE_OFFSET_HOLE" : "NBD_REPLY_TYPE_OFFSET_DATA";
    int r;

    if (s->type != NBD_CMD_READ) {
        return protocol_error(c, "%s chunk in the reply to %s", what, nbd_cmd_name(s->type));
    }
    r = nbd_cover_add(&s->cover, off, len);
    switch (r) {
    case 0:
        return read_into(c, s, off, len, hole);
    case -EINVAL:
        return protocol_error(c, "empty %s chunk at %" PRIu64, what, off);
    case -ERANGE:
        return protocol_error(c,
                              "%s chunk %" PRIu64 "+%" PRIu64
                              " outside the request NBD_CMD_READ %" PRIu64 "+%" PRIu32,
                              what, off, len, s->offset, s->count);
    case -EEXIST:
        return protocol_error(c,
                              "%s chunk %" PRIu64 "+%" PRIu64
                              " overlaps data already received for NBD_CMD_READ %" PRIu64
                              "+%" PRIu32,
                              what, off, len, s->offset, s->count);
    case -E2BIG:
        return protocol_error(
            c, "reply to NBD_CMD_READ %" PRIu64 "+%" PRIu32 " in more than %d scattered pieces",
            s->offset, s->count, NBD_COVER_MAX_PIECES);
    default:
        return r;
    }
}

static int read_error_chunk(struct nbd_client_conn *c, struct nbd_client_slot *s, uint32_t len,
                            bool with_offset)
{
    struct nbd_chunk_error e;
    char msg[NBD_MAX_STRING + 1];
    int r;

    if (len < sizeof e) {
        return -EPROTO;
    }
    r = recv_all(c, &e, sizeof e);
    uint32_t msglen = be16toh(e.len);
    if (r == 0 && (msglen > len - sizeof e || msglen > NBD_MAX_STRING)) {
        return -EPROTO;
    }
    if (r == 0) {
        r = recv_all(c, msg, msglen);
    }
    if (r == 0) {
        r = recv_discard(c, len - sizeof e - msglen); /* the offset, if any */
    }
    (void)with_offset;
    if (r == 0) {
        msg[msglen] = '\0';
        uint32_t err = be32toh(e.error);
        s->err = err == NBD_EPERM       ? EPERM
                 : err == NBD_EIO       ? EIO
                 : err == NBD_ENOMEM    ? ENOMEM
                 : err == NBD_ENOSPC    ? ENOSPC
                 : err == NBD_EOVERFLOW ? EOVERFLOW
                 : err == NBD_ENOTSUP   ? ENOTSUP
                 : err == NBD_ESHUTDOWN ? ESHUTDOWN
                                        : EINVAL;
        /* The server's text, escaped: it may hold control characters
         * (long messages keep their beginning). */
        str_escape_buf(s->msg, sizeof s->msg, msg);
    }
    return r;
}

static int read_block_status(struct nbd_client_conn *c, struct nbd_client_slot *s, uint32_t len)
{
    uint32_t ctx, n = (len - 4) / 8;
    int r;

    if (s->type != NBD_CMD_BLOCK_STATUS || len < 12 || (len - 4) % 8) {
        return -EPROTO;
    }
    r = recv_all(c, &ctx, 4);
    if (r < 0) {
        return r;
    }
    if (!c->base_alloc || be32toh(ctx) != c->base_alloc_id || s->extents ||
        n > MAX_STATUS_DESCRIPTORS) {
        return recv_discard(c, len - 4); /* not ours, or a second one */
    }
    CLEANUP_FREE struct nbd_block_descriptor *d = malloc((size_t)n * sizeof *d);
    s->extents = malloc((size_t)n * sizeof *s->extents);
    if (!d || !s->extents) {
        return -ENOMEM;
    }
    r = recv_all(c, d, (size_t)n * sizeof *d);
    for (uint32_t i = 0; r == 0 && i < n; i++) {
        s->extents[i].length = be32toh(d[i].length);
        s->extents[i].flags = be32toh(d[i].status_flags);
    }
    s->n_extents = n;
    return r;
}

/* One structured chunk.  Returns 1 when the reply is complete. */
static int read_chunk(struct nbd_client_conn *c)
{
    struct nbd_structured_reply h;
    int r = recv_all(c, (uint8_t *)&h + 4, sizeof h - 4);

    if (r < 0) {
        return r;
    }
    uint16_t flags = be16toh(h.flags), type = be16toh(h.type);
    uint32_t len = be32toh(h.length);
    struct nbd_client_slot *s = slot_for(c, be64toh(h.cookie));
    if (!s || !c->structured) {
        return -EPROTO;
    }
    switch (type) {
    case NBD_REPLY_TYPE_NONE:
        r = len == 0 ? 0 : -EPROTO;
        break;
    case NBD_REPLY_TYPE_OFFSET_DATA: {
        uint64_t off;
        if (len < 8) {
            return -EPROTO;
        }
        r = recv_all(c, &off, 8);
        if (r == 0) {
            r = read_offset_chunk(c, s, be64toh(off), len - 8, false);
        }
        break;
    }
    case NBD_REPLY_TYPE_OFFSET_HOLE: {
        struct nbd_chunk_offset_hole hole;
        if (len != sizeof hole) {
            return -EPROTO;
        }
        r = recv_all(c, &hole, sizeof hole);
        if (r == 0) {
            r = read_offset_chunk(c, s, be64toh(hole.offset), be32toh(hole.length), true);
        }
        break;
    }
    case NBD_REPLY_TYPE_BLOCK_STATUS:
        r = read_block_status(c, s, len);
        break;
    case NBD_REPLY_TYPE_ERROR:
    case NBD_REPLY_TYPE_ERROR_OFFSET:
        r = read_error_chunk(c, s, len, type == NBD_REPLY_TYPE_ERROR_OFFSET);
        break;
    default:
        if (!(type & 0x8000)) {
            return -EPROTO; /* an unknown non-error chunk: cannot continue */
        }
        s->err = EIO; /* unknown error chunk: the request failed */
        r = recv_discard(c, len);
    }
    if (r < 0) {
        return r;
    }
    if (flags & NBD_REPLY_FLAG_DONE) {
        if (!s->err && s->type == NBD_CMD_READ && !nbd_cover_full(&s->cover)) {
            /* claimed success without all the data */
            return protocol_error(c,
                                  "the reply to NBD_CMD_READ %" PRIu64 "+%" PRIu32
                                  " ended after %" PRIu64 " bytes",
                                  s->offset, s->count, s->cover.covered);
        }
        slot_complete(c, s);
    }
    return 0;
}

static int read_simple(struct nbd_client_conn *c)
{
    struct nbd_simple_reply h;
    int r = recv_all(c, (uint8_t *)&h + 4, sizeof h - 4);

    if (r < 0) {
        return r;
    }
    struct nbd_client_slot *s = slot_for(c, be64toh(h.cookie));
    uint32_t err = be32toh(h.error);
    if (!s || (s->type == NBD_CMD_READ && c->structured)) {
        return -EPROTO;
    }
    if (err) {
        s->err = err == NBD_EPERM    ? EPERM
                 : err == NBD_ENOSPC ? ENOSPC
                 : err == NBD_EIO    ? EIO
                                     : EINVAL;
    } else if (s->type == NBD_CMD_READ) {
        r = read_into(c, s, s->offset, s->count, false);
    }
    if (r == 0) {
        slot_complete(c, s);
    }
    return r;
}

/* One simple reply, or one chunk of a structured reply. */
static int read_reply(struct nbd_client_conn *c)
{
    uint32_t magic;
    int r = recv_all(c, &magic, 4);

    if (r < 0) {
        return r;
    }
    magic = be32toh(magic);
    if (magic == NBD_SIMPLE_REPLY_MAGIC) {
        return read_simple(c);
    }
    return magic == NBD_STRUCTURED_REPLY_MAGIC ? read_chunk(c) : -EPROTO;
}

/* Reading a reply failed with r: the connection ends, and every request
 * in flight fails with why. */
static void read_failed(struct nbd_client_conn *c, int r)
{
    if (r == -EPROTO) {
        char why[sizeof c->proto_err + 64];
        snprintf(why, sizeof why, "the NBD server sent an invalid reply%s%s",
                 c->proto_err[0] ? ": " : "", c->proto_err);
        conn_die(c, EIO, why);
    } else {
        conn_die(c, ECONNRESET, "the connection to the NBD server was lost");
    }
}

/* Give the read side up, and wake one thread waiting for its reply to
 * take it over.  Under c->lock. */
static void release_read_side_locked(struct nbd_client_conn *c)
{
    c->reading = false;
    for (int i = 0; i < NBD_CLIENT_SLOTS; i++) {
        struct nbd_client_slot *s = &c->slots[i];
        if (s->waiting && !s->done) {
            pthread_cond_signal(&s->cond);
            return;
        }
    }
}

/* Read replies until slot s is done; the caller holds the read side and
 * c->lock, and still does on return. */
static void read_until_done_locked(struct nbd_client_conn *c, const struct nbd_client_slot *s)
{
    while (!s->done) {
        pthread_mutex_unlock(&c->lock);
        int r = read_reply(c);
        if (r < 0) {
            read_failed(c, r); /* marks every request done, s too */
        }
        pthread_mutex_lock(&c->lock);
    }
}

/* TLS: the thread that holds the read side for good. */
static void *reader_main(void *arg)
{
    struct nbd_client_conn *c = arg;
    int r;

    do {
        r = read_reply(c);
    } while (r == 0);
    read_failed(c, r);
    return NULL;
}

/*
 * The servers this process holds connections to, by address.  A server
 * that takes a limited number of clients (qemu-nbd and diskimg serve take
 * one unless given -e) leaves a further connection in its listen queue
 * without a word; when this process itself holds the connection that
 * fills it (compare or convert between two exports of one server), the
 * wait would never end, so the handshake gives up on the greeting early
 * and says why (client-handshake.c).
 */
static pthread_mutex_t peers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nbd_client_conn *peers;

unsigned nbd_client_peer_count(const char *where)
{
    unsigned n = 0;

    pthread_mutex_lock(&peers_lock);
    for (struct nbd_client_conn *p = peers; p; p = p->peer_next) {
        n += strcmp(p->where, where) == 0;
    }
    pthread_mutex_unlock(&peers_lock);
    return n;
}

void nbd_client_peer_add(struct nbd_client_conn *c)
{
    pthread_mutex_lock(&peers_lock);
    c->peer_next = peers;
    peers = c;
    c->peer_listed = true;
    pthread_mutex_unlock(&peers_lock);
}

static void peer_remove(struct nbd_client_conn *c)
{
    pthread_mutex_lock(&peers_lock);
    for (struct nbd_client_conn **p = &peers; c->peer_listed && *p; p = &(*p)->peer_next) {
        if (*p == c) {
            *p = c->peer_next;
            c->peer_listed = false;
            break;
        }
    }
    pthread_mutex_unlock(&peers_lock);
}

struct nbd_client_conn *nbd_client_conn_new(void)
{
    struct nbd_client_conn *c = calloc(1, sizeof *c);

    if (!c) {
        return NULL;
    }
    c->fd = -1;
    pthread_mutex_init(&c->send_lock, NULL);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->slot_free, NULL);
    for (int i = 0; i < NBD_CLIENT_SLOTS; i++) {
        pthread_cond_init(&c->slots[i].cond, NULL);
    }
    return c;
}

/* A plain connection needs no thread: its waiters read.  Over TLS a
 * sender cannot read replies while its send waits for room (wait_room),
 * since a TLS send cannot be tried without blocking, so one thread keeps
 * reading replies however long a send waits. */
int nbd_client_start(struct nbd_client_conn *c)
{
    c->started = true;
    if (!c->tls) {
        return 0;
    }
    c->reading = true;
    if (pthread_create(&c->reader, NULL, reader_main, c) != 0) {
        return err_set(EAGAIN, "starting the NBD reply reader");
    }
    c->reader_running = true;
    return 0;
}

static int send_request(struct nbd_client_conn *c, const struct nbd_request *req,
                        const struct iovec *payload, int payload_cnt);

void nbd_client_close(struct nbd_client_conn *c)
{
    if (!c) {
        return;
    }
    peer_remove(c);
    if (c->started) {
        /* A polite goodbye (through TLS when the session has it, then
         * TLS's own), and for TLS wait for the reader to see the end. */
        struct nbd_request disc = {htobe32(NBD_REQUEST_MAGIC), 0, htobe16(NBD_CMD_DISC), 0, 0, 0};
        (void)send_request(c, &disc, NULL, 0);
        if (c->tls) {
            pthread_mutex_lock(&c->send_lock);
            nbd_tls_bye(c->tls);
            pthread_mutex_unlock(&c->send_lock);
        }
        shutdown(c->fd, SHUT_RDWR);
    }
    if (c->reader_running) {
        pthread_join(c->reader, NULL);
    }
    nbd_tls_session_close(c->tls);
    if (c->fd >= 0) {
        close(c->fd);
    }
    for (int i = 0; i < NBD_CLIENT_SLOTS; i++) {
        pthread_cond_destroy(&c->slots[i].cond);
        free(c->slots[i].extents);
        nbd_cover_free(&c->slots[i].cover);
    }
    pthread_mutex_destroy(&c->send_lock);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->slot_free);
    free(c);
}

/* The send buffer is full.  A server may stop reading requests while its
 * replies wait to be read, and the threads that would read them may be
 * queued behind this one for the send lock: so while it waits for room,
 * the sender reads replies itself when no other thread holds the read
 * side. */
static void wait_room(struct nbd_client_conn *c)
{
    pthread_mutex_lock(&c->lock);
    bool read_side = !c->reading && !c->dead;
    if (read_side) {
        c->reading = true;
    }
    pthread_mutex_unlock(&c->lock);

    struct pollfd p = {.fd = c->fd, .events = (short)(POLLOUT | (read_side ? POLLIN : 0))};
    if (poll(&p, 1, -1) > 0 && read_side && (p.revents & ~POLLOUT)) {
        int r = read_reply(c);
        if (r < 0) {
            read_failed(c, r);
        }
    }
    if (read_side) {
        pthread_mutex_lock(&c->lock);
        release_read_side_locked(c);
        pthread_mutex_unlock(&c->lock);
    }
}

static int send_request(struct nbd_client_conn *c, const struct nbd_request *req,
                        const struct iovec *payload, int payload_cnt)
{
    struct iovec iov[66];
    int n = 0, r = 0;

    if (payload_cnt > 64) {
        return err_setx(EINVAL, "NBD write with too many iovec elements");
    }
    iov[n++] = (struct iovec){(void *)req, sizeof *req};
    for (int i = 0; i < payload_cnt; i++) {
        iov[n++] = payload[i];
    }
    struct iovec *p = iov;
    pthread_mutex_lock(&c->send_lock);
    if (c->tls) {
        r = nbd_tls_send(c->tls, iov, n);
        n = 0;
    }
    while (n > 0) {
        struct msghdr msg = {.msg_iov = p, .msg_iovlen = (size_t)n};
        ssize_t sent = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                wait_room(c);
                continue;
            }
            r = -errno;
            break;
        }
        while (n > 0 && (size_t)sent >= p->iov_len) {
            sent -= (ssize_t)p->iov_len;
            p++;
            n--;
        }
        if (n > 0) {
            p->iov_base = (char *)p->iov_base + sent;
            p->iov_len -= (size_t)sent;
        }
    }
    pthread_mutex_unlock(&c->send_lock);
    return r;
}

int nbd_client_submit(struct nbd_client_conn *c, uint16_t type, uint16_t flags, uint64_t offset,
                      uint32_t count, const struct iovec *payload, int payload_cnt,
                      const struct iovec *read_iov, int read_cnt, bool wait_slot,
                      struct nbd_client_ticket *t)
{
    struct nbd_client_slot *s = NULL;
    int idx = -1, r;

    pthread_mutex_lock(&c->lock);
    while (!c->dead) {
        for (int i = 0; i < NBD_CLIENT_SLOTS && idx < 0; i++) {
            if (!c->slots[i].busy) {
                idx = i;
            }
        }
        if (idx >= 0 || !wait_slot) {
            break;
        }
        pthread_cond_wait(&c->slot_free, &c->lock);
    }
    if (c->dead) {
        /* The same words as for the requests that were in flight. */
        int e = c->dead_err;
        err_setx(e, "NBD server: %s failed: %s: %s", nbd_cmd_name(type), strerror(e), c->dead_msg);
        pthread_mutex_unlock(&c->lock);
        return -e;
    }
    if (idx < 0) {
        pthread_mutex_unlock(&c->lock);
        return -EAGAIN;
    }
    s = &c->slots[idx];
    s->busy = true;
    s->done = false;
    s->waiting = false;
    s->generation++;
    s->type = type;
    s->offset = offset;
    s->count = count;
    s->iov = read_iov;
    s->iovcnt = read_cnt;
    nbd_cover_reset(&s->cover, offset, type == NBD_CMD_READ ? count : 0);
    s->err = 0;
    s->msg[0] = '\0';
    s->extents = NULL;
    s->n_extents = 0;
    pthread_mutex_unlock(&c->lock);

    struct nbd_request req = {
        .magic = htobe32(NBD_REQUEST_MAGIC),
        .flags = htobe16(flags),
        .type = htobe16(type),
        .cookie = htobe64(((uint64_t)s->generation << 16) | (uint64_t)idx),
        .offset = htobe64(offset),
        .count = htobe32(count),
    };
    r = send_request(c, &req, payload, payload_cnt);
    if (r < 0) {
        /* Only the reader fails requests (it may be filling one right
         * now): make it see the end of the stream.  The ticket's wait
         * then reports it. */
        shutdown(c->fd, SHUT_RDWR);
    }
    *t = (struct nbd_client_ticket){.c = c, .slot = idx, .type = type};
    return 0;
}

int nbd_client_wait(const struct nbd_client_ticket *t, struct nbd_client_extent **extents,
                    uint32_t *n_extents)
{
    struct nbd_client_conn *c = t->c;
    struct nbd_client_slot *s = &c->slots[t->slot];
    int r;

    pthread_mutex_lock(&c->lock);
    while (!s->done) {
        if (!c->reading) {
            c->reading = true;
            read_until_done_locked(c, s);
            release_read_side_locked(c);
            break;
        }
        s->waiting = true;
        pthread_cond_wait(&s->cond, &c->lock);
        s->waiting = false;
    }
    r = s->err ? -s->err : 0;
    if (r < 0) {
        /* The server's message often starts with the command name too. */
        const char *name = nbd_cmd_name(t->type), *msg = s->msg;
        size_t nl = strlen(name);
        if (strncmp(msg, name, nl) == 0 && msg[nl] == ':') {
            msg += nl + 1 + (msg[nl + 1] == ' ');
        }
        err_setx(-r, "NBD server: %s failed: %s%s%s", name, strerror(-r), msg[0] ? ": " : "", msg);
    }
    if (extents) {
        *extents = s->extents;
        *n_extents = s->n_extents;
    } else {
        free(s->extents);
    }
    s->extents = NULL;
    s->busy = false;
    pthread_cond_signal(&c->slot_free);
    pthread_mutex_unlock(&c->lock);
    return r;
}

int nbd_client_request(struct nbd_client_conn *c, uint16_t type, uint16_t flags, uint64_t offset,
                       uint32_t count, const struct iovec *payload, int payload_cnt,
                       const struct iovec *read_iov, int read_cnt,
                       struct nbd_client_extent **extents, uint32_t *n_extents)
{
    struct nbd_client_ticket t;
    int r = nbd_client_submit(c, type, flags, offset, count, payload, payload_cnt, read_iov,
                              read_cnt, true, &t);

    return r < 0 ? r : nbd_client_wait(&t, extents, n_extents);
}
