/* nbd/worker.c: the worker threads of a connection in transmission,
 * and the connection's locks.  Not the requests themselves: reading,
 * checking, running and answering one is transmission.c's, the bytes on
 * the socket are conn.c's.
 *
 * Workers of one connection take turns at the read side: a worker holds
 * read_lock while it reads one request header and payload, releases it,
 * runs the request on the block layer and sends the reply itself.  So
 * many requests are in flight and replies go out in completion order.
 * Workers are started on demand, when a request arrives and no other
 * worker is waiting to read.
 *
 * Handing the read side over costs a thread wake-up per request, which at
 * queue depth 1 is a fifth of a cold 4k read.  So a worker keeps read_lock
 * through a short request (nbd_req_is_short: a small read or write, or a
 * flush with little written since the last one) when the client is not
 * pipelining (no other request in flight, none arrived yet), and reads the
 * next request itself.  A request that arrives meanwhile waits for that one
 * short request at most; other flushes, trims, zeroing and large transfers,
 * which may take long, always hand the read side over first, and so does a
 * reply that cannot be sent at once (nbd_conn_try_send says -EAGAIN, and
 * nbd_send_keeping_read_side hands over before it waits), because a
 * client that pipelines writes may read replies only after it has sent
 * them all.  Over TLS a reply is tried only when it fits one record (a
 * try encrypts one record at most); so a read whose reply may be longer
 * (nbd_reply_may_be_tried) hands over before it runs.
 *
 * The connection's locks, in the order they are taken:
 *   read_lock   the read side: held to read a request, and through the
 *               short request it keeps the read side for;
 *   write_lock  the write side: held while a reply goes out, so replies
 *               never interleave (nbd_worker_send; the one exception, a
 *               worker that keeps the read side and is the only sender, is
 *               explained at nbd_send_keeping_read_side);
 *   c->lock     the worker count (nthreads and the idle condition); under
 *               it only nbd_thread_reserve, which is atomic (limits.c).
 * No lock is taken while holding write_lock or c->lock, but for a TLS
 * session's glock, held for one GnuTLS call at a time with nothing taken
 * under it (tls-session.c).  A worker thread is created (nbd_maybe_spawn)
 * holding read_lock and no other lock, so a reply never waits for a
 * thread to start.  With at most read_lock held
 * a request takes the block layer's locks, and srv->faillog_lock for a
 * moment when it logs a failure (limits.c); srv->lock is never taken with
 * a connection lock held. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/bufpool.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "internal.h"
#include "names.h"
#include "request.h"
#include "tls.h"

/* Worker buffers up to this size stay with the worker; larger ones come
 * from the shared stash (common/bufpool.h) and go back after the request,
 * so memory stays bounded with many connections. */
#define WORKER_BUF_KEEP (1u << 20)

static void worker_buf_release(struct nbd_worker *w)
{
    if (w->cap > WORKER_BUF_KEEP) {
        bufpool_put(w->buf, w->cap);
    } else {
        free(w->buf);
    }
    w->buf = NULL;
    w->cap = 0;
}

void *nbd_worker_buf(struct nbd_worker *w, size_t len)
{
    if (len > w->cap || !w->buf) { /* a zero-length request needs a buffer too */
        void *p = NULL;
        size_t cap;
        if (len > WORKER_BUF_KEEP) {
            p = bufpool_get(len, &cap);
        } else {
            cap = ROUND_UP(MAX(len, (size_t)65536), 4096);
            if (posix_memalign(&p, 4096, cap) != 0) {
                p = NULL;
            }
        }
        if (!p) {
            return NULL;
        }
        worker_buf_release(w);
        w->buf = p;
        w->cap = cap;
    }
    return w->buf;
}

static void worker_buf_trim(struct nbd_worker *w)
{
    if (w->cap > WORKER_BUF_KEEP) {
        worker_buf_release(w);
    }
}

static void *nbd_worker_main(void *arg);

/* Start one more worker if none is waiting to read (caller holds read_lock). */
static void nbd_maybe_spawn(struct nbd_conn *c)
{
    pthread_attr_t attr;
    pthread_t t;

    if (atomic_load(&c->waiting_readers) > 0) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    if (c->nthreads >= c->srv->cfg.workers_per_conn || !nbd_thread_reserve(c->srv, true)) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->nthreads++;
    pthread_mutex_unlock(&c->lock);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    if (pthread_create(&t, &attr, nbd_worker_main, c) != 0) {
        pthread_mutex_lock(&c->lock);
        c->nthreads--;
        pthread_mutex_unlock(&c->lock);
        nbd_thread_release(c->srv);
    }
    pthread_attr_destroy(&attr);
}

#define SHORT_TRANSFER_MAX (128u * 1024)
#define SHORT_FLUSH_MAX (1024u * 1024)

/* Bytes written to the export since the previous flush started, counted
 * when a request is read: for a FLUSH the count it covers (and the count
 * starts again), for a write or zeroing 0 after adding its length. */
static uint64_t nbd_track_unflushed(struct nbd_conn *c, const struct nbd_req *req)
{
    switch (req->type) {
    case NBD_CMD_WRITE:
    case NBD_CMD_WRITE_ZEROES: /* may write zeroes as data */
        atomic_fetch_add(&c->exp->unflushed_bytes, req->count);
        return 0;
    case NBD_CMD_FLUSH:
        return atomic_exchange(&c->exp->unflushed_bytes, 0);
    default:
        return 0;
    }
}

/* Bounded work: a small read or write, at most a few device I/Os, or a
 * flush with at most SHORT_FLUSH_MAX to write back (UNFLUSHED). */
static bool nbd_req_is_short(const struct nbd_req *req, uint64_t unflushed)
{
    switch (req->type) {
    case NBD_CMD_READ:
    case NBD_CMD_WRITE:
        return req->count <= SHORT_TRANSFER_MAX;
    case NBD_CMD_FLUSH:
        return unflushed <= SHORT_FLUSH_MAX;
    default:
        return false;
    }
}

/* Whether the reply to a short request can be tried without waiting
 * (nbd_send_keeping_read_side).  Over TLS only a reply that fits one
 * record can (nbd_tls_try_send); a longer one would hand the read side
 * over only after the request ran, so its worker hands over before. */
static bool nbd_reply_may_be_tried(const struct nbd_conn *c, const struct nbd_req *req)
{
    if (!c->tls || req->type != NBD_CMD_READ) {
        return true; /* a write's or a flush's reply: a header, or an error */
    }
    return nbd_reply_read_max(c, req->count) <= NBD_TLS_RECORD_MAX;
}

/* Caller holds read_lock: let another worker read the next request.
 * Starting one (nbd_maybe_spawn) happens here, with no lock but
 * read_lock held. */
static void nbd_hand_over_read_side(struct nbd_worker *w)
{
    nbd_maybe_spawn(w->c);
    w->has_read_side = false;
    pthread_mutex_unlock(&w->c->read_lock);
}

/* A worker that kept the read side runs the only request in flight, and
 * no other can be read before it lets go: it is the only sender, so it
 * tries its reply without write_lock.  When the client does not take the
 * reply at once, it may be sending more requests first (a client that
 * pipelines writes may read replies only after it has sent them all), so
 * the read side goes to another worker before this one waits.  write_lock
 * is taken before read_lock goes, so the next reply waits for the rest of
 * this one. */
static int nbd_send_keeping_read_side(struct nbd_worker *w, struct iovec *iov, int iovcnt)
{
    struct nbd_conn *c = w->c;
    int r = nbd_conn_try_send(c, &iov, &iovcnt);

    if (r != -EAGAIN) {
        return r;
    }
    nbd_maybe_spawn(c);
    pthread_mutex_lock(&c->write_lock);
    w->has_read_side = false;
    pthread_mutex_unlock(&c->read_lock);
    r = nbd_conn_send(c, iov, iovcnt);
    pthread_mutex_unlock(&c->write_lock);
    return r;
}

int nbd_worker_send(struct nbd_worker *w, struct iovec *iov, int iovcnt)
{
    struct nbd_conn *c = w->c;
    int r;

    if (w->has_read_side) {
        r = nbd_send_keeping_read_side(w, iov, iovcnt);
    } else {
        pthread_mutex_lock(&c->write_lock);
        r = nbd_conn_send(c, iov, iovcnt);
        pthread_mutex_unlock(&c->write_lock);
    }
    if (r < 0) {
        nbd_conn_kill(c); /* the client is gone: stop reading too */
    }
    return r;
}

static void nbd_worker_loop(struct nbd_conn *c)
{
    struct nbd_worker w = {.c = c};

    log_set_context(c->log_ctx);
    for (;;) {
        struct nbd_req req;
        void *payload = NULL;
        uint64_t start_ns = 0;
        int verdict, r;

        if (!w.has_read_side) {
            atomic_fetch_add(&c->waiting_readers, 1);
            pthread_mutex_lock(&c->read_lock);
            atomic_fetch_sub(&c->waiting_readers, 1);
            w.has_read_side = true;
        }
        if (atomic_load(&c->dead) || atomic_load(&c->srv->stopping)) {
            /* Gone, or the server stops: no more requests, even buffered ones. */
            atomic_store(&c->dead, true);
            pthread_mutex_unlock(&c->read_lock);
            break;
        }
        r = nbd_read_request(&w, &req, &payload, &start_ns, &verdict);
        if (r < 0 || req.type == NBD_CMD_DISC) {
            if (r == -ETIMEDOUT) {
                log_info("idle for %" PRIu64 " s, closing",
                         atomic_load(&c->idle_ns) / UINT64_C(1000000000));
            } else if (r < 0 && r != -ECONNRESET && r != -EPROTO) {
                log_debug("connection read failed: %s", strerror(-r));
            }
            /* No more requests: the others finish what they run. */
            atomic_store(&c->dead, true);
            pthread_mutex_unlock(&c->read_lock);
            break;
        }
        c->requests++;
        atomic_fetch_add(&c->inflight, 1);
        if (debug_nbd_requests) {
            log_debug("%s flags=0x%x offset=%" PRIu64 " count=%" PRIu32, nbd_cmd_name(req.type),
                      req.flags, req.offset, req.count);
        }
        bool keep =
            nbd_req_is_short(&req, nbd_track_unflushed(c, &req)) && nbd_reply_may_be_tried(c, &req);
        if (!keep || atomic_load(&c->inflight) > 1 || nbd_conn_input_pending(c)) {
            nbd_hand_over_read_side(&w);
        }
        /* Still has_read_side: it keeps it, and reads the next request
         * itself unless its reply had to hand it over. */
        nbd_finish_request(&w, &req, verdict, payload, start_ns);
        atomic_store(&c->last_active_ns, clock_ns());
        atomic_fetch_sub(&c->inflight, 1);
        worker_buf_trim(&w);
    }
    worker_buf_release(&w);
}

static void nbd_worker_exit(struct nbd_conn *c)
{
    /* First: once nthreads is 0 the connection and then the server may
     * be freed. */
    nbd_thread_release(c->srv);
    pthread_mutex_lock(&c->lock);
    c->nthreads--;
    pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->lock);
}

static void *nbd_worker_main(void *arg)
{
    struct nbd_conn *c = arg;

    nbd_worker_loop(c);
    nbd_worker_exit(c);
    return NULL;
}

void nbd_transmission(struct nbd_conn *c)
{
    c->may_poll = true;
    pthread_mutex_lock(&c->lock);
    c->nthreads++;
    pthread_mutex_unlock(&c->lock);
    nbd_worker_loop(c);
    /* Wait for the other workers: they finish in-flight requests and
     * reply before the connection is closed. */
    pthread_mutex_lock(&c->lock);
    c->nthreads--;
    while (c->nthreads > 0) {
        pthread_cond_wait(&c->idle, &c->lock);
    }
    pthread_mutex_unlock(&c->lock);
}
