/* nbd/transmission.c: phase 2, one request: read and check it
 * (request.c), run it on the block layer, answer it (reply.c), log and
 * count it.  Which worker thread does that, when the read side is handed
 * over, and the connection's locks are worker.c's.
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
#include "common/error.h"
#include "common/log.h"
#include "common/util.h"
#include "internal.h"
#include "meta.h"
#include "names.h"
#include "request.h"

/* Descriptors per BLOCK_STATUS reply (the spec asks for at most 2^20). */
#define MAX_EXTENTS (1u << 16)

static bool nbd_any_meta(const struct nbd_conn *c)
{
    for (unsigned m = 0; m < NBD_META_MAX; m++) {
        if (c->meta_selected[m]) {
            return true;
        }
    }
    return false;
}

/* The result r of reading the connection, logged when it failed in a way
 * worth a line: a client that left is not, a TLS record it should not
 * have sent is (the TLS layer says EPROTO, and why).  Returns r. */
static int read_noted(int r)
{
    if (r == -EPROTO) {
        log_error("%s, closing the connection", err_msg());
    }
    return r;
}

/* Reads one request and its payload.  Caller holds read_lock.  Returns
 * <0 when the connection must end, else 0 with the stream in sync and in
 * *verdict 0 (run the request) or the -errno to answer it with instead,
 * its message recorded (common/error.h: it stays with this thread until
 * the reply). */
int nbd_read_request(struct nbd_worker *w, struct nbd_req *req, void **payload, uint64_t *start_ns,
                     int *verdict)
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
        return read_noted(r);
    }
    *start_ns = clock_ns();
    r = nbd_request_decode(hdr, &lim, req);
    if (r == -EPROTO) {
        log_error("%s, closing the connection", err_msg());
        return r;
    }
    if (r < 0) {
        *verdict = r;
        return read_noted(nbd_conn_discard(c, req->payload_len));
    }
    if (req->payload_len == 0) {
        return 0;
    }
    *payload = nbd_worker_buf(w, req->payload_len);
    if (!*payload) {
        *verdict = err_setx(ENOMEM, "%s: no memory for %" PRIu32 " bytes", nbd_cmd_name(req->type),
                            req->payload_len);
        return read_noted(nbd_conn_discard(c, req->payload_len));
    }
    return read_noted(nbd_conn_recv(c, *payload, req->payload_len));
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
        void *buf = nbd_worker_buf(w, req->count);
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
void nbd_finish_request(struct nbd_worker *w, const struct nbd_req *req, int verdict, void *payload,
                        uint64_t start_ns)
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
