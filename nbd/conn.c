/* nbd/conn.c: the byte stream of one connection.
 *
 * Receives go through a small buffer so that a request header and a short
 * write payload usually arrive in one recv(); large payloads are read
 * straight into the caller's buffer.  During the handshake a deadline
 * bounds every wait, receives and sends alike, so neither a silent client
 * nor one that never reads our option replies can hold a slot.
 *
 * A send blocks in the kernel for at most NBD_SEND_SLICE_S at a time
 * (SO_SNDTIMEO, set at accept), then looks at the connection's limits:
 * the handshake deadline, and whether it is being dropped
 * (nbd_conn_drop: by the watchdog in limits.c, for the idle timeout or at
 * shutdown; its shutdown() wakes a blocked send at once too).  So a client
 * that never reads what we send holds a thread no longer than its limits
 * allow, while a reply the client takes as fast as it can costs one
 * sendmsg() as before (a non-blocking send polled in user space would
 * cost two system calls more each time the socket buffer fills).
 * nbd_conn_try_send never waits: it says -EAGAIN when the socket buffer
 * is full, and its caller decides what to do before it waits (a worker
 * that keeps the read side hands it over first, worker.c).  While
 * a send waits, send_wait_since says since when no byte went out, which
 * is what the watchdog reads.  A TLS send waits for room between its
 * GnuTLS calls (tls-session.c); it sets send_wait_since for its whole
 * duration, and the watchdog ends it by shutting the socket down.  A TLS
 * reply that fits one record can be tried too (nbd_tls_try_send). */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "internal.h"
#include "tls.h"

/* Between requests with --idle-timeout: wait for the next request, but
 * give up once nothing has been in flight for the idle time. */
static int nbd_conn_wait_idle(struct nbd_conn *c)
{
    for (;;) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int r = poll(&p, 1, 1000);
        if (r > 0) {
            return 0;
        }
        if (r < 0 && errno != EINTR) {
            return -errno;
        }
        if (atomic_load(&c->inflight) == 0 &&
            clock_ns() - atomic_load(&c->last_active_ns) >= c->idle_ns) {
            return -ETIMEDOUT;
        }
    }
}

/* Wait until fd is readable or the handshake deadline passes. */
static int nbd_conn_wait_readable(struct nbd_conn *c)
{
    uint64_t deadline = atomic_load(&c->deadline_ns);

    if (!deadline) {
        return c->idle_ns ? nbd_conn_wait_idle(c) : 0;
    }
    for (;;) {
        uint64_t now = clock_ns();
        if (now >= deadline) {
            return -ETIMEDOUT;
        }
        int ms = (int)MIN((deadline - now) / 1000000 + 1, (uint64_t)60000);
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int r = poll(&p, 1, ms);
        if (r > 0) {
            return 0;
        }
        if (r < 0 && errno != EINTR) {
            return -errno;
        }
    }
}

/*
 * Busy-polling for the next request.  A client at queue depth 1 sends its
 * next request some 10-30 µs after our reply; a thread that sleeps in
 * recv() meanwhile takes another 20-30 µs to wake up in a VM (the idle vCPU
 * halts), which doubled the latency of a cached 4k read.  So when nothing
 * else runs on the connection, the reader first polls the socket without
 * blocking for up to poll_ns.  poll_ns adapts like qemu's AioContext
 * polling: it grows (doubling from POLL_MIN_NS up to --debug=nbd.poll-us)
 * while requests arrive within that limit, and halves to zero when they
 * come later, so an idle or slow client costs no CPU.  It polls only after
 * a request served within that limit (from the page cache, say): after one
 * that waited for the device, polling measured 10-15% slower (4k FUA writes
 * and O_DIRECT reads at queue depth 1), as the spinning vCPU competes with
 * the I/O completion work.
 */
#define POLL_MIN_NS 4000u

static ssize_t nbd_conn_poll_recv(struct nbd_conn *c, void *buf, size_t len)
{
    uint64_t until = clock_ns() + c->poll_ns;
    ssize_t n;

    do {
        n = recv(c->fd, buf, len, MSG_DONTWAIT);
    } while (n < 0 && (errno == EAGAIN || errno == EINTR) && clock_ns() < until);
    return n;
}

static void nbd_conn_adapt_poll(struct nbd_conn *c, uint64_t waited_ns)
{
    uint64_t max = (uint64_t)MAX(debug_nbd_poll_us, 0) * 1000;

    if (waited_ns <= max) {
        c->poll_ns = MIN(MAX(c->poll_ns * 2, (uint64_t)POLL_MIN_NS), max);
    } else {
        c->poll_ns = c->poll_ns / 2 >= POLL_MIN_NS ? c->poll_ns / 2 : 0;
    }
}

static ssize_t nbd_conn_recv_some(struct nbd_conn *c, void *buf, size_t len)
{
    uint64_t max_ns = (uint64_t)MAX(debug_nbd_poll_us, 0) * 1000;
    bool polling = c->may_poll && !c->tls && max_ns > 0 && atomic_load(&c->inflight) == 0 &&
                   atomic_load_explicit(&c->last_service_ns, memory_order_relaxed) <= max_ns;
    uint64_t t0 = polling ? clock_ns() : 0;

    if (polling && c->poll_ns) {
        ssize_t n = nbd_conn_poll_recv(c, buf, len);
        if (n > 0) {
            return n;
        }
        if (n == 0) {
            return -ECONNRESET;
        }
        if (errno != EAGAIN && errno != EINTR) {
            return -errno;
        }
    }
    for (;;) {
        /* Bytes GnuTLS already decrypted are invisible to poll(). */
        int r = c->tls && nbd_tls_pending(c->tls) ? 0 : nbd_conn_wait_readable(c);
        if (r < 0) {
            return r;
        }
        if (c->tls) {
            ssize_t n = nbd_tls_recv(c->tls, buf, len);
            return n == 0 ? -ECONNRESET : n;
        }
        ssize_t n = recv(c->fd, buf, len, 0);
        if (n > 0) {
            if (polling) {
                nbd_conn_adapt_poll(c, clock_ns() - t0);
            }
            return n;
        }
        if (n == 0) {
            return -ECONNRESET;
        }
        if (errno != EINTR) {
            return -errno;
        }
    }
}

bool nbd_conn_input_pending(struct nbd_conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};

    return c->rpos < c->rlen || (c->tls && nbd_tls_pending(c->tls)) || poll(&p, 1, 0) > 0;
}

int nbd_conn_recv(struct nbd_conn *c, void *buf, size_t len)
{
    uint8_t *dst = buf;

    while (len > 0) {
        if (c->rpos < c->rlen) {
            size_t n = MIN(len, c->rlen - c->rpos);
            memcpy(dst, c->rbuf + c->rpos, n);
            c->rpos += n;
            dst += n;
            len -= n;
            continue;
        }
        if (len >= NBD_RBUF_SIZE / 2) {
            /* Large payload: no point staging it. */
            ssize_t n = nbd_conn_recv_some(c, dst, len);
            if (n < 0) {
                return (int)n;
            }
            dst += n;
            len -= (size_t)n;
            continue;
        }
        ssize_t n = nbd_conn_recv_some(c, c->rbuf, NBD_RBUF_SIZE);
        if (n < 0) {
            return (int)n;
        }
        c->rpos = 0;
        c->rlen = (size_t)n;
    }
    return 0;
}

int nbd_conn_discard(struct nbd_conn *c, uint64_t len)
{
    uint8_t scratch[4096];

    while (len > 0) {
        size_t n = (size_t)MIN(len, (uint64_t)sizeof scratch);
        int r = nbd_conn_recv(c, scratch, n);
        if (r < 0) {
            return r;
        }
        len -= n;
    }
    return 0;
}

/* A send made no progress for a slice: go on waiting, or give up. */
static int nbd_conn_send_stalled(struct nbd_conn *c)
{
    uint64_t deadline = atomic_load(&c->deadline_ns);

    if (atomic_load(&c->send_wait_since) == 0) {
        atomic_store(&c->send_wait_since, clock_ns());
    }
    if (atomic_load(&c->drop) != NBD_DROP_NONE) {
        return -EPIPE;
    }
    if (deadline && clock_ns() >= deadline) {
        return -ETIMEDOUT;
    }
    return 0;
}

static int nbd_conn_send_tls(struct nbd_conn *c, struct iovec *iov, int iovcnt)
{
    int r;

    atomic_store(&c->send_wait_since, clock_ns());
    r = atomic_load(&c->drop) != NBD_DROP_NONE ? -EPIPE : nbd_tls_send(c->tls, iov, iovcnt);
    atomic_store(&c->send_wait_since, 0);
    return r;
}

/* Move *iov and *iovcnt past n bytes that went out. */
static void nbd_iov_advance(struct iovec **iov, int *iovcnt, size_t n)
{
    while (*iovcnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*iovcnt)--;
    }
    if (*iovcnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

/* TLS: a reply that fits one record is tried as a whole; a record GnuTLS
 * took counts as sent, and what the socket had no room for waits in the
 * session's output queue for the next nbd_conn_send. */
static int nbd_conn_try_send_tls(struct nbd_conn *c, struct iovec **iov, int *iovcnt)
{
    bool taken;

    if (atomic_load(&c->drop) != NBD_DROP_NONE) {
        return -EPIPE;
    }
    int r = nbd_tls_try_send(c->tls, *iov, *iovcnt, &taken);
    if (taken) {
        *iovcnt = 0;
    }
    return r;
}

int nbd_conn_try_send(struct nbd_conn *c, struct iovec **iov, int *iovcnt)
{
    if (c->tls) {
        return nbd_conn_try_send_tls(c, iov, iovcnt);
    }
    while (*iovcnt > 0) {
        struct msghdr msg = {.msg_iov = *iov, .msg_iovlen = (size_t)*iovcnt};
        if (atomic_load(&c->drop) != NBD_DROP_NONE) {
            return -EPIPE;
        }
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
        }
        nbd_iov_advance(iov, iovcnt, (size_t)n);
    }
    return 0;
}

int nbd_conn_send(struct nbd_conn *c, struct iovec *iov, int iovcnt)
{
    int r = 0;

    if (c->tls) {
        return nbd_conn_send_tls(c, iov, iovcnt);
    }
    while (iovcnt > 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        if (atomic_load(&c->drop) != NBD_DROP_NONE) {
            r = -EPIPE;
            break;
        }
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                r = -errno;
                break;
            }
            r = nbd_conn_send_stalled(c); /* SO_SNDTIMEO passed without progress */
            if (r < 0) {
                break;
            }
            continue;
        }
        if (n > 0 && atomic_load(&c->send_wait_since) != 0) {
            atomic_store(&c->send_wait_since, clock_ns()); /* progress */
        }
        nbd_iov_advance(&iov, &iovcnt, (size_t)n);
    }
    atomic_store(&c->send_wait_since, 0);
    return r;
}

int nbd_conn_send_buf(struct nbd_conn *c, const void *buf, size_t len)
{
    struct iovec iov = {(void *)buf, len};

    return nbd_conn_send(c, &iov, 1);
}

void nbd_conn_kill(struct nbd_conn *c)
{
    atomic_store(&c->dead, true);
    shutdown(c->fd, SHUT_RDWR);
}

bool nbd_conn_claim_drop(struct nbd_conn *c, enum nbd_drop_reason why)
{
    int none = NBD_DROP_NONE;

    return atomic_compare_exchange_strong(&c->drop, &none, (int)why);
}

bool nbd_conn_drop(struct nbd_conn *c, enum nbd_drop_reason why)
{
    if (!nbd_conn_claim_drop(c, why)) {
        return false; /* dropped already */
    }
    nbd_conn_kill(c); /* wakes whatever it waits in */
    return true;
}
