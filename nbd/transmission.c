/* nbd/transmission.c: phase 2, requests and replies.
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
 * them all.  TLS connections always hand over: their sends cannot be tried
 * without blocking.
 *
 * This file owns the connection's locks.  In the order they are taken:
 *   read_lock   the read side: held to read a request, and through the
 *               short request it keeps the read side for;
 *   write_lock  the write side: held while a reply goes out, so replies
 *               never interleave (nbd_worker_send; the one exception, a
 *               worker that keeps the read side and is the only sender, is
 *               explained at nbd_send_keeping_read_side);
 *   c->lock     the worker count (nthreads and the idle condition); under
 *               it only nbd_thread_reserve, which is atomic (limits.c).
 * No lock is taken while holding write_lock or c->lock.  A worker thread
 * is created (nbd_maybe_spawn) holding read_lock and no other lock, so a
 * reply never waits for a thread to start.  With at most read_lock held
 * a request takes the block layer's locks, and srv->faillog_lock for a
 * moment when it logs a failure (limits.c); srv->lock is never taken with
 * a connection lock held.
 *
 * Every field is validated (request.c) before the block layer is touched;
 * an invalid write's payload is read and dropped so the stream stays in
 * sync.  Only a bad magic or a broken stream ends the connection. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/bitmap.h"
#include "block/block.h"
#include "common/bufpool.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/log.h"
#include "common/util.h"
#include "internal.h"
#include "meta.h"
#include "names.h"
#include "request.h"

/* Worker buffers up to this size stay with the worker; larger ones come
 * from the shared stash (common/bufpool.h) and go back after the request,
 * so memory stays bounded with many connections. */
#define WORKER_BUF_KEEP (1u << 20)
/* Descriptors per BLOCK_STATUS reply (the spec asks for at most 2^20). */
#define MAX_EXTENTS (1u << 16)

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

static void *worker_buf(struct nbd_worker *w, size_t len)
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

static bool nbd_any_meta(const struct nbd_conn *c)
{
    for (unsigned m = 0; m < NBD_META_MAX; m++) {
        if (c->meta_selected[m]) {
            return true;
        }
    }
    return false;
}

/* Reads one request and its payload.  Caller holds read_lock.  Returns
 * <0 when the connection must end, else 0 with the stream in sync and in
 * *verdict 0 (run the request) or the -errno to answer it with instead,
 * its message recorded (common/error.h: it stays with this thread until
 * the reply). */
static int nbd_read_request(struct nbd_worker *w, struct nbd_req *req, void **payload,
                            uint64_t *start_ns, int *verdict)
{
    struct nbd_conn *c = w->c;
    uint8_t hdr[NBD_REQUEST_HEADER_SIZE];
    struct nbd_req_limits lim = {
        .export_size = blk_image_size(c->exp->img),
        .eflags = c->eflags,
        .structured = c->structured,
        .meta = nbd_any_meta(c),
        .max_payload = NBD_MAX_PAYLOAD,
    };
    int r = nbd_conn_recv(c, hdr, sizeof hdr);

    *payload = NULL;
    *verdict = 0;
    if (r < 0) {
        return r;
    }
    *start_ns = clock_ns();
    r = nbd_request_decode(hdr, &lim, req);
    if (r == -EPROTO) {
        log_error("%s, closing the connection", err_msg());
        return r;
    }
    if (r < 0) {
        *verdict = r;
        return nbd_conn_discard(c, req->payload_len);
    }
    if (req->payload_len == 0) {
        return 0;
    }
    *payload = worker_buf(w, req->payload_len);
    if (!*payload) {
        *verdict = err_setx(ENOMEM, "%s: no memory for %" PRIu32 " bytes", nbd_cmd_name(req->type),
                            req->payload_len);
        return nbd_conn_discard(c, req->payload_len);
    }
    return nbd_conn_recv(c, *payload, req->payload_len);
}

/* Append one extent, merging it into the previous one when the status is
 * the same.  Lengths fit: together they never exceed the request's 32-bit
 * count.  Returns false when the list is full. */
static bool extent_add(struct nbd_extent_list *l, uint32_t len, uint32_t flags)
{
    if (l->n > 0 && be32toh(l->desc[l->n - 1].status_flags) == flags) {
        l->desc[l->n - 1].length = htobe32(be32toh(l->desc[l->n - 1].length) + len);
        return true;
    }
    if (l->n == l->cap) {
        return false;
    }
    l->desc[l->n++] = (struct nbd_block_descriptor){htobe32(len), htobe32(flags)};
    return true;
}

/* One walk of the image feeds every selected allocation context. */
static int alloc_extents(struct blk_image *img, uint64_t pos, uint64_t end, bool one,
                         const unsigned *which, struct nbd_extent_list *lists, unsigned n)
{
    while (pos < end) {
        struct blk_extent ext;
        bool full = false;
        int r = blk_image_block_status(img, pos, end - pos, &ext);
        if (r < 0) {
            return r;
        }
        for (unsigned i = 0; i < n; i++) {
            if (nbd_meta_is_allocation(which[i])) {
                full |= !extent_add(&lists[i], (uint32_t)ext.length,
                                    nbd_meta_alloc_value(which[i], &ext));
            }
        }
        if (full || one) {
            break;
        }
        pos += ext.length;
    }
    return 0;
}

static void bitmap_extents(const struct blk_bitmap *bm, uint64_t pos, uint64_t end, bool one,
                           struct nbd_extent_list *l)
{
    while (pos < end) {
        bool dirty = false;
        uint64_t run = end - pos; /* past the bitmap (never, in practice): clean */
        if (pos < bm->size) {
            blk_bitmap_extent(bm, pos, end - pos, &dirty, &run);
        }
        if (!extent_add(l, (uint32_t)run, dirty ? NBD_STATE_DIRTY : 0) || one) {
            break;
        }
        pos += run;
    }
}

static int nbd_do_block_status(struct nbd_worker *w, const struct nbd_req *req)
{
    struct nbd_conn *c = w->c;
    bool one = req->flags & NBD_CMD_FLAG_REQ_ONE;
    uint32_t cap = one ? 1 : MAX_EXTENTS;
    struct nbd_extent_list lists[NBD_META_MAX] = {{0}};
    uint32_t ids[NBD_META_MAX];
    unsigned which[NBD_META_MAX];
    unsigned n = 0;
    bool want_alloc = false;
    uint64_t end = req->offset + req->count;
    int r = 0;

    for (unsigned m = 0; m < nbd_meta_count(c->exp); m++) {
        if (c->meta_selected[m]) {
            which[n] = m;
            ids[n] = nbd_meta_id(m);
            want_alloc |= nbd_meta_is_allocation(m);
            lists[n].cap = cap;
            lists[n].desc = malloc(sizeof *lists[n].desc * cap);
            if (!lists[n++].desc) {
                r = err_set(ENOMEM, "block status");
            }
        }
    }
    if (r == 0 && want_alloc) {
        r = alloc_extents(c->exp->img, req->offset, end, one, which, lists, n);
    }
    for (unsigned i = 0; r == 0 && i < n; i++) {
        if (!nbd_meta_is_allocation(which[i])) {
            bitmap_extents(nbd_meta_bitmap(c->exp, which[i]), req->offset, end, one, &lists[i]);
        }
    }
    for (unsigned i = 0; r == 0 && i < n; i++) {
        if (lists[i].n == 0) {
            r = err_setx(EIO, "block status returned nothing");
        }
    }
    if (r == 0 && n == 0) {
        r = err_setx(EIO, "block status returned nothing");
    }
    if (r == 0) {
        /* A reply that cannot be sent closes the connection (reply.c);
         * the request itself succeeded. */
        (void)nbd_reply_block_status(w, req->cookie, ids, lists, n);
    }
    for (unsigned i = 0; i < n; i++) {
        free(lists[i].desc);
    }
    return r;
}

/* Runs a validated request and, when it succeeds, sends its reply.
 * Returns 0 when it succeeded, whether or not the reply could be sent (a
 * reply that cannot be sent closes the connection, reply.c: nothing more
 * is owed), or -errno with the reason recorded when it failed and the
 * caller owes the client an error reply. */
static int nbd_run_request(struct nbd_worker *w, const struct nbd_req *req, void *payload)
{
    struct nbd_conn *c = w->c;
    struct blk_image *img = c->exp->img;
    unsigned fua = (req->flags & NBD_CMD_FLAG_FUA) ? BLK_REQ_FUA : 0;
    int r;

    switch (req->type) {
    case NBD_CMD_READ: {
        void *buf = worker_buf(w, req->count);
        if (!buf) {
            return err_set(ENOMEM, "read of %" PRIu32 " bytes", req->count);
        }
        r = blk_image_pread(img, req->offset, buf, req->count);
        if (r < 0) {
            return r;
        }
        (void)nbd_reply_read(w, req->cookie, req->offset, buf, req->count,
                             req->flags & NBD_CMD_FLAG_DF);
        return 0;
    }
    case NBD_CMD_WRITE:
        r = blk_image_pwrite(img, req->offset, payload, req->count, fua);
        break;
    case NBD_CMD_FLUSH:
        r = blk_image_flush(img);
        break;
    case NBD_CMD_TRIM:
        r = blk_image_discard(img, req->offset, req->count, fua);
        break;
    case NBD_CMD_WRITE_ZEROES: {
        unsigned f = fua;
        if (!(req->flags & NBD_CMD_FLAG_NO_HOLE)) {
            f |= BLK_REQ_MAY_UNMAP;
        }
        if (req->flags & NBD_CMD_FLAG_FAST_ZERO) {
            f |= BLK_REQ_NO_FALLBACK;
        }
        r = blk_image_pwrite_zeroes(img, req->offset, req->count, f);
        break;
    }
    case NBD_CMD_CACHE:
        r = blk_image_prefetch(img, req->offset, req->count);
        break;
    case NBD_CMD_BLOCK_STATUS:
        return nbd_do_block_status(w, req);
    default:
        return err_setx(EINVAL, "unknown command %u", req->type);
    }
    if (r < 0) {
        return r;
    }
    (void)nbd_reply_simple(w, req->cookie, 0);
    return 0;
}

/* One line per failed request: the connection (its log context, and
 * the peer), the command, its range, the error the client gets and the
 * reason the block layer or the checks recorded.  Errors a client
 * provokes are warnings, the others errors.  Rate-limited server-wide
 * (limits.c) unless every request is logged anyway (--debug). */
static void nbd_log_failure(struct nbd_conn *c, const struct nbd_req *req, uint32_t wire,
                            const char *msg)
{
    bool client_side = wire == NBD_EINVAL || wire == NBD_ENOSPC || wire == NBD_EPERM ||
                       wire == NBD_ENOTSUP || wire == NBD_EOVERFLOW;
    uint64_t suppressed = 0;
    char cmd[32], text[1024], more[80] = "";

    if (!debug_nbd_requests && !nbd_failure_log_allowed(c->srv, &suppressed)) {
        return;
    }
    if (req->type < NBD_CMD_COUNT) {
        snprintf(cmd, sizeof cmd, "%s", nbd_cmd_name(req->type));
    } else {
        snprintf(cmd, sizeof cmd, "command %u", req->type);
    }
    size_t cl = strlen(cmd);
    if (strncmp(msg, cmd, cl) == 0 && msg[cl] == ':' && msg[cl + 1] == ' ') {
        msg += cl + 2; /* the checks' messages start with the command too */
    }
    if (suppressed) {
        snprintf(more, sizeof more, " (%" PRIu64 " more failed requests were not logged)",
                 suppressed);
    }
    log_msg(client_side ? LOG_LEVEL_WARN : LOG_LEVEL_ERROR,
            "%s: %s %" PRIu64 "+%" PRIu32 " failed with %s: %s%s", c->peer, cmd, req->offset,
            req->count, nbd_err_name(wire), nbd_log_str(msg, text, sizeof text), more);
}

/* Runs a request nbd_read_request let through (verdict 0) or answers
 * the one it refused (verdict -errno, message recorded), and counts it. */
static void nbd_finish_request(struct nbd_worker *w, const struct nbd_req *req, int verdict,
                               void *payload, uint64_t start_ns)
{
    struct nbd_conn *c = w->c;
    int r = verdict;

    if (r == 0) {
        err_clear();
        r = nbd_run_request(w, req, payload);
    }
    if (r < 0) {
        /* Only FAST_ZERO may see ENOTSUP; anything else is an I/O error. */
        int e = -r;
        if (e == ENOTSUP && !(req->flags & NBD_CMD_FLAG_FAST_ZERO)) {
            e = EIO;
        }
        uint32_t wire = nbd_errno_to_wire(e);
        const char *msg = err_msg_or(r);
        nbd_log_failure(c, req, wire, msg);
        (void)nbd_reply_error(w, req->cookie, wire, msg);
    }
    if (req->flags & NBD_CMD_FLAG_FUA) {
        atomic_fetch_add_explicit(&c->srv->stats.fua_requests, 1, memory_order_relaxed);
    }
    uint64_t bytes =
        (req->type == NBD_CMD_READ || req->type == NBD_CMD_WRITE) && r >= 0 ? req->count : 0;
    uint64_t service_ns = clock_ns() - start_ns;
    nbd_stats_record(&c->srv->stats, req->type, r < 0, bytes, service_ns);
    atomic_store_explicit(&c->last_service_ns, service_ns, memory_order_relaxed);
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
        bool is_short = nbd_req_is_short(&req, nbd_track_unflushed(c, &req));
        if (c->tls || !is_short || atomic_load(&c->inflight) > 1 || nbd_conn_input_pending(c)) {
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
