/* nbd/client-driver.c: the "nbd" protocol driver.  An image whose name is
 * an NBD URI opens through it, so every subcommand reads and writes NBD
 * exports.  Capabilities come from the server's transmission flags: FUA,
 * write zeroes, fast zero and trim are native when advertised, and the
 * generic layer emulates the rest.  With CAN_MULTI_CONN several
 * connections share the requests. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "block/driver.h"
#include "block/esc-name.h"
#include "client.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "protocol.h"
#include "tls.h"

#define DEFAULT_MAX_BLOCK (32u << 20)
#define EXTRA_CONN_TIMEOUT_S 2

struct nbd_drv {
    struct nbd_uri uri;
    struct nbd_tls *tls; /* nbds:// */
    struct nbd_client_export exp;
    struct nbd_client_conn *conns[NBD_CLIENT_MAX_CONNS];
    unsigned nconns;
    _Atomic unsigned next;
    uint32_t max_request;
    /* The last block status reply, to answer several calls per round trip.
     * Any write drops it; status_gen counts writes started and ended, so a
     * reply that raced with a write is used once and never cached. */
    pthread_mutex_t status_lock;
    uint64_t status_start;
    struct nbd_client_extent *status;
    uint32_t n_status;
    uint64_t status_gen;
};

static void status_invalidate(struct nbd_drv *d)
{
    pthread_mutex_lock(&d->status_lock);
    d->status_gen++;
    free(d->status);
    d->status = NULL;
    d->n_status = 0;
    pthread_mutex_unlock(&d->status_lock);
}

static struct nbd_client_conn *pick_conn(struct nbd_drv *d)
{
    return d->conns[atomic_fetch_add_explicit(&d->next, 1, memory_order_relaxed) % d->nconns];
}

/* The keys nbd takes, all defaults offered to every image (the
 * subcommands' --tls-creds, --tls-psk, --tls-username, and the connections
 * bulk copies would like): images that are not NBD URIs ignore them. */
static const struct blk_opt_desc nbd_options[] = {
    {.key = "tls-creds", .type = BLK_OPT_STRING, .optional = true},
    {.key = "tls-psk", .type = BLK_OPT_STRING, .optional = true},
    {.key = "tls-username", .type = BLK_OPT_STRING, .optional = true},
    /* at most this many with multi-conn (0, 1: one) */
    {.key = "connections", .type = BLK_OPT_UINT, .optional = true},
    /* --image-opts driver=nbd without a filename: the server as qemu's
     * nbd driver spells it (SocketAddress, export) */
    {.key = "server.type", .type = BLK_OPT_STRING},
    {.key = "server.host", .type = BLK_OPT_STRING},
    {.key = "server.port", .type = BLK_OPT_STRING},
    {.key = "server.path", .type = BLK_OPT_STRING},
    {.key = "export", .type = BLK_OPT_STRING},
    /* qemu's older spellings of the same, which its nbd driver still takes */
    {.key = "host", .type = BLK_OPT_STRING},
    {.key = "port", .type = BLK_OPT_STRING},
    {.key = "path", .type = BLK_OPT_STRING},
    {NULL},
};

/* server.KEY, or KEY as qemu's older spelling. */
static int dup_key(const struct blk_kvlist *l, const char *type, const char *key, const char *dflt,
                   char **out)
{
    const char *v = blk_kv_get(l, key);

    if (!v && strncmp(key, "server.", 7) == 0) {
        v = blk_kv_get(l, key + 7);
    }
    if (!v && !dflt) {
        return blk_opt_error("nbd", key, "is required with server.type=%s", type);
    }
    *out = strdup(v ? v : dflt);
    return *out ? 0 : err_set(ENOMEM, "nbd: option '%s'", key);
}

/* The server and export from the keys alone (no filename), as qemu's
 * nbd driver takes them: server.type=inet with server.host and
 * server.port, or server.type=unix with server.path; TLS when TLS
 * credentials are given, as qemu's tls-creds turns it on. */
static int nbd_uri_from_keys(const struct blk_kvlist *l, struct nbd_uri *u)
{
    const char *type = blk_kv_get(l, "server.type");
    int r;

    memset(u, 0, sizeof *u);
    if (!type) {
        type = blk_kv_get(l, "path") ? "unix" : blk_kv_get(l, "host") ? "inet" : NULL;
    }
    if (!type) {
        return err_setx(EINVAL, "nbd: needs a filename (an NBD URI), server.type=inet|unix, "
                                "path= or host=");
    }
    u->tls = blk_kv_get(l, "tls-creds") || blk_kv_get(l, "tls-psk");
    if (strcmp(type, "unix") == 0) {
        u->unix_socket = true;
        r = dup_key(l, type, "server.path", NULL, &u->socket);
    } else if (strcmp(type, "inet") == 0) {
        r = dup_key(l, type, "server.host", NULL, &u->host);
        if (r == 0) {
            r = dup_key(l, type, "server.port", "10809", &u->port);
        }
    } else {
        r = blk_opt_error("nbd", "server.type", "'%s' is neither inet nor unix", type);
    }
    if (r == 0) {
        r = dup_key(l, type, "export", "", &u->export_name);
    }
    if (r < 0) {
        nbd_uri_free(u);
    }
    return r;
}

/* The node's name when the keys made the URI: qemu's, or for TLS (which
 * qemu 7.2 spells no URI for) the libnbd URI without its query. */
static char *nbd_keys_name(const struct nbd_uri *u)
{
    char *name = nbd_uri_qemu_name(u);

    if (!name && u->unix_socket &&
        asprintf(&name, "nbds+unix:///%s?socket=%s", u->export_name, u->socket) < 0) {
        name = NULL;
    } else if (!name && !u->unix_socket &&
               asprintf(&name, "nbds://%s:%s/%s", u->host, u->port, u->export_name) < 0) {
        name = NULL;
    }
    return name;
}

static int nbd_drv_connect(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct nbd_drv *d = n->opaque;
    unsigned want, connections = 0;
    int r;

    r = blk_opt_uint(opts->options, "nbd", "connections", &connections);
    if (r < 0) {
        return r;
    }
    if (opts->filename) {
        r = nbd_uri_parse(opts->filename, &d->uri);
    } else if ((r = nbd_uri_from_keys(opts->options, &d->uri)) == 0 &&
               !(n->filename = nbd_keys_name(&d->uri))) {
        r = err_set(ENOMEM, "nbd: naming the export");
    }
    if (r < 0) {
        return r;
    }
    if (d->uri.tls) {
        struct nbd_tls_config tc = {
            .creds_dir = d->uri.tls_certificates ? d->uri.tls_certificates
                                                 : blk_kv_get(opts->options, "tls-creds"),
            .psk_file =
                d->uri.tls_psk_file ? d->uri.tls_psk_file : blk_kv_get(opts->options, "tls-psk"),
            .psk_identity = d->uri.tls_username ? d->uri.tls_username
                                                : blk_kv_get(opts->options, "tls-username"),
            /* over TCP the certificate must name the host we dialled */
            .hostname = d->uri.tls_hostname  ? d->uri.tls_hostname
                        : d->uri.unix_socket ? NULL
                                             : d->uri.host,
        };
        if (tc.creds_dir && tc.psk_file) {
            tc.psk_file = NULL; /* the URI's X.509 choice wins over a --tls-psk default */
        }
        if (!tc.creds_dir && !tc.psk_file) {
            return err_setx(EINVAL,
                            "%s: nbds:// needs --tls-creds=DIR or --tls-psk=FILE (or "
                            "tls-certificates= / tls-psk-file= in the URI)",
                            ESC_NAME(n));
        }
        r = nbd_tls_new(&d->tls, &tc, false);
        if (r < 0) {
            return r;
        }
    }
    r = nbd_client_connect(&d->uri, d->tls, NBD_CLIENT_HANDSHAKE_TIMEOUT_S, &d->conns[0], &d->exp);
    if (r == 0) {
        r = nbd_client_start(d->conns[0]);
    }
    if (r < 0) {
        return r;
    }
    d->nconns = 1;
    if (!opts->read_only && (d->exp.eflags & NBD_FLAG_READ_ONLY)) {
        return err_setx(EROFS, "%s: the NBD export is read-only and cannot be written",
                        ESC_NAME(n));
    }
    /* More connections only for bulk work (convert, bench) and where the
     * server says they see each other's writes and flushes.  A server
     * may still take fewer clients than it advertises multi-conn for
     * (qemu-nbd -e 2): extra connections that wait in its backlog give up
     * soon, and the work goes on with those that got through. */
    want = (d->exp.eflags & NBD_FLAG_CAN_MULTI_CONN)
               ? MIN(MAX(connections, 1u), (unsigned)NBD_CLIENT_MAX_CONNS)
               : 1;
    for (unsigned i = 1; i < want; i++) {
        struct nbd_client_export e2;
        if (nbd_client_connect(&d->uri, d->tls, EXTRA_CONN_TIMEOUT_S, &d->conns[i], &e2) < 0 ||
            nbd_client_start(d->conns[i]) < 0) {
            nbd_client_close(d->conns[i]);
            d->conns[i] = NULL;
            err_clear();
            break; /* fewer connections is fine */
        }
        d->nconns++;
    }
    d->max_request = d->exp.max_block && d->exp.max_block != UINT32_MAX
                         ? MIN(d->exp.max_block, DEFAULT_MAX_BLOCK)
                         : DEFAULT_MAX_BLOCK;
    if (d->exp.min_block > 1 && IS_POW2(d->exp.min_block) && d->exp.min_block <= 65536) {
        n->request_alignment = d->exp.min_block;
    }
    if (d->exp.eflags & NBD_FLAG_SEND_FUA) {
        n->supported_write_flags = BLK_REQ_FUA;
    }
    if (d->exp.eflags & NBD_FLAG_SEND_WRITE_ZEROES) {
        n->supported_zero_flags = BLK_REQ_MAY_UNMAP | (n->supported_write_flags & BLK_REQ_FUA);
        if (d->exp.eflags & NBD_FLAG_SEND_FAST_ZERO) {
            n->supported_zero_flags |= BLK_REQ_NO_FALLBACK;
        }
    }
    return 0;
}

static void nbd_drv_close(struct blk_node *n)
{
    struct nbd_drv *d = n->opaque;

    for (unsigned i = 0; i < NBD_CLIENT_MAX_CONNS; i++) {
        nbd_client_close(d->conns[i]);
    }
    free(d->status);
    nbd_tls_free(d->tls);
    nbd_uri_free(&d->uri);
    pthread_mutex_destroy(&d->status_lock);
}

/* A transfer up to WHOLE_MAX goes as one request (what a caller such as
 * bench sizes on purpose).  A larger one is a bulk buffer (convert's 2
 * MiB): it goes in pieces of PIECE, up to WINDOW of them in flight from
 * this one call.  A server takes each request whole before it answers,
 * so 256 KiB pieces keep it busy on several at once, where one 2 MiB
 * request would queue the rest behind it; and one thread waiting for a
 * window of pieces sleeps once or twice for them, not once for each (a
 * copy with a thread per 256 KiB request spent half its CPU switching
 * threads). */
#define WHOLE_MAX (1u << 20)
#define PIECE (256u << 10)
#define WINDOW 8

struct piece {
    struct nbd_client_ticket t;
    struct iovec iov[64];
};

static uint32_t piece_size(const struct nbd_drv *d, uint64_t len)
{
    uint32_t whole = MIN(WHOLE_MAX, d->max_request);

    return len <= whole ? (uint32_t)len : MIN(PIECE, d->max_request);
}

/* Collect the oldest piece in flight. */
static int wait_oldest(struct piece *p, unsigned *first, unsigned *inflight)
{
    int r = nbd_client_wait(&p[*first % WINDOW].t, NULL, NULL);

    (*first)++;
    (*inflight)--;
    return r;
}

/* A READ or WRITE of the whole iovec, in pieces with several in flight.
 * Every piece sent is collected before returning, failed or not: the
 * caller's buffers stay the requests' until their replies are in.  The
 * first failure is the result. */
static int transfer(struct nbd_drv *d, uint16_t type, uint16_t flags, uint64_t off,
                    const struct iovec *iov, int iovcnt)
{
    struct piece p[WINDOW];
    uint64_t len = iov_length(iov, iovcnt);
    uint32_t size = piece_size(d, len);
    bool write = type == NBD_CMD_WRITE;
    unsigned first = 0, inflight = 0;
    int r = 0;

    for (uint64_t pos = 0; pos < len && r == 0;) {
        if (inflight == WINDOW) {
            r = wait_oldest(p, &first, &inflight);
            continue;
        }
        uint32_t chunk = (uint32_t)MIN(len - pos, (uint64_t)size);
        struct piece *q = &p[(first + inflight) % WINDOW];
        int k = iov_slice(iov, iovcnt, pos, chunk, q->iov, 64);
        if (k < 0) {
            r = err_setx(EINVAL, "NBD %s with too many iovec elements", write ? "write" : "read");
            break;
        }
        /* Holding pieces, never wait for a slot: collect one instead. */
        r = nbd_client_submit(pick_conn(d), type, flags, off + pos, chunk, write ? q->iov : NULL,
                              write ? k : 0, write ? NULL : q->iov, write ? 0 : k, inflight == 0,
                              &q->t);
        if (r == -EAGAIN) {
            r = wait_oldest(p, &first, &inflight);
        } else if (r == 0) {
            inflight++;
            pos += chunk;
        }
    }
    while (inflight > 0) {
        int rr = wait_oldest(p, &first, &inflight);
        r = r < 0 ? r : rr;
    }
    return r;
}

static int nbd_drv_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    return transfer(n->opaque, NBD_CMD_READ, 0, off, iov, iovcnt);
}

static int nbd_drv_pwritev_chunks(struct blk_node *n, uint64_t off, const struct iovec *iov,
                                  int iovcnt, unsigned flags)
{
    uint16_t f = (flags & BLK_REQ_FUA) ? NBD_CMD_FLAG_FUA : 0;

    return transfer(n->opaque, NBD_CMD_WRITE, f, off, iov, iovcnt);
}

/* Commands without payload are split at 4 GiB - 1 (the length field). */
#define MAX_EFFECT 0xfffff000u

static int nbd_drv_zeroes_chunks(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct nbd_drv *d = n->opaque;
    uint16_t f = 0;
    int r = 0;

    if (!(d->exp.eflags & NBD_FLAG_SEND_WRITE_ZEROES)) {
        return -ENOTSUP;
    }
    f |= (flags & BLK_REQ_MAY_UNMAP) ? 0 : NBD_CMD_FLAG_NO_HOLE;
    f |= (flags & BLK_REQ_FUA) ? NBD_CMD_FLAG_FUA : 0;
    f |= (flags & BLK_REQ_NO_FALLBACK) ? NBD_CMD_FLAG_FAST_ZERO : 0;
    for (uint64_t pos = 0; pos < len && r == 0;) {
        uint32_t chunk = (uint32_t)MIN(len - pos, (uint64_t)MAX_EFFECT);
        r = nbd_client_request(pick_conn(d), NBD_CMD_WRITE_ZEROES, f, off + pos, chunk, NULL, 0,
                               NULL, 0, NULL, NULL);
        pos += chunk;
    }
    return r;
}

static int nbd_drv_discard_chunks(struct blk_node *n, uint64_t off, uint64_t len)
{
    struct nbd_drv *d = n->opaque;
    int r = 0;

    if (!(d->exp.eflags & NBD_FLAG_SEND_TRIM)) {
        return 0; /* advisory */
    }
    for (uint64_t pos = 0; pos < len && r == 0;) {
        uint32_t chunk = (uint32_t)MIN(len - pos, (uint64_t)MAX_EFFECT);
        r = nbd_client_request(pick_conn(d), NBD_CMD_TRIM, 0, off + pos, chunk, NULL, 0, NULL, 0,
                               NULL, NULL);
        pos += chunk;
    }
    return r;
}

/* Writes of every kind make the cached block status stale. */
static int nbd_drv_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                           unsigned flags)
{
    status_invalidate(n->opaque);
    int r = nbd_drv_pwritev_chunks(n, off, iov, iovcnt, flags);
    status_invalidate(n->opaque);
    return r;
}

static int nbd_drv_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    status_invalidate(n->opaque);
    int r = nbd_drv_zeroes_chunks(n, off, len, flags);
    status_invalidate(n->opaque);
    return r;
}

static int nbd_drv_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    (void)flags; /* FUA: TRIM, then the generic layer's FLUSH */
    status_invalidate(n->opaque);
    int r = nbd_drv_discard_chunks(n, off, len);
    status_invalidate(n->opaque);
    return r;
}

static int nbd_drv_flush(struct blk_node *n)
{
    struct nbd_drv *d = n->opaque;

    if (!(d->exp.eflags & NBD_FLAG_SEND_FLUSH)) {
        return 0; /* the server has no write cache to flush */
    }
    /* Multi-conn: one flush covers writes completed on every connection. */
    return nbd_client_request(d->conns[0], NBD_CMD_FLUSH, 0, 0, 0, NULL, 0, NULL, 0, NULL, NULL);
}

static void status_to_extent(const struct nbd_client_extent *e, uint64_t off,
                             struct blk_extent *ext)
{
    bool data = !(e->flags & NBD_STATE_HOLE);

    /* The export is the image: every byte has an offset in it. */
    ext->flags = BLK_EXT_ALLOCATED | BLK_EXT_OFFSET | (data ? BLK_EXT_DATA : 0) |
                 ((e->flags & NBD_STATE_ZERO) ? BLK_EXT_ZERO : 0);
    ext->offset = off;
    ext->depth = 1;
}

/* Answer from the cached reply when it covers off. */
static bool status_cached(struct nbd_drv *d, struct blk_node *n, uint64_t off, uint64_t len,
                          struct blk_extent *ext)
{
    uint64_t pos = d->status_start;

    for (uint32_t i = 0; i < d->n_status; i++) {
        uint64_t end = pos + d->status[i].length;
        if (off >= pos && off < end) {
            status_to_extent(&d->status[i], off, ext);
            ext->length = MIN(end - off, len);
            ext->filename = n->filename;
            return true;
        }
        pos = end;
    }
    return false;
}

static int nbd_drv_block_status(struct blk_node *n, uint64_t off, uint64_t len,
                                struct blk_extent *ext)
{
    struct nbd_drv *d = n->opaque;
    struct nbd_client_conn *c = pick_conn(d);
    struct nbd_client_extent *ex = NULL;
    uint32_t n_ex = 0;
    int r;

    memset(ext, 0, sizeof *ext);
    if (!c->base_alloc) {
        ext->length = len;
        ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
        ext->offset = off;
        ext->depth = 1;
        ext->filename = n->filename;
        return 0;
    }
    pthread_mutex_lock(&d->status_lock);
    bool hit = status_cached(d, n, off, len, ext);
    uint64_t gen = d->status_gen;
    pthread_mutex_unlock(&d->status_lock);
    if (hit) {
        return 0;
    }
    /* Ask in whole blocks of the server's minimum size (the export's end
     * may cut the last one); the reply then covers off. */
    uint64_t qoff = off, qend = MIN(off + MIN(len, (uint64_t)MAX_EFFECT), d->exp.size);
    if (d->exp.min_block > 1) {
        qoff = ROUND_DOWN(off, (uint64_t)d->exp.min_block);
        qend = MIN(ROUND_UP(qend, (uint64_t)d->exp.min_block), d->exp.size);
    }
    r = nbd_client_request(c, NBD_CMD_BLOCK_STATUS, 0, qoff, (uint32_t)(qend - qoff), NULL, 0, NULL,
                           0, &ex, &n_ex);
    if (r < 0) {
        free(ex);
        return r;
    }
    if (n_ex == 0 || ex[0].length == 0) {
        free(ex);
        return err_setx(EPROTO, "%s: the NBD server answered block status with no extent",
                        ESC_NAME(n));
    }
    pthread_mutex_lock(&d->status_lock);
    free(d->status);
    d->status = ex;
    d->n_status = n_ex;
    d->status_start = qoff;
    bool hit2 = status_cached(d, n, off, len, ext);
    if (d->status_gen != gen) {
        /* A write ran meanwhile: answer from this reply, do not keep it. */
        d->status = NULL;
        d->n_status = 0;
    } else {
        ex = NULL;
    }
    pthread_mutex_unlock(&d->status_lock);
    free(ex);
    if (!hit2) {
        return err_setx(EPROTO, "%s: the NBD server's block status does not cover offset %" PRIu64,
                        ESC_NAME(n), off);
    }
    return 0;
}

static int nbd_drv_prefetch(struct blk_node *n, uint64_t off, uint64_t len)
{
    struct nbd_drv *d = n->opaque;

    if (!(d->exp.eflags & NBD_FLAG_SEND_CACHE)) {
        return 0;
    }
    return nbd_client_request(pick_conn(d), NBD_CMD_CACHE, 0, off,
                              (uint32_t)MIN(len, (uint64_t)MAX_EFFECT), NULL, 0, NULL, 0, NULL,
                              NULL);
}

static int64_t nbd_drv_get_length(struct blk_node *n)
{
    struct nbd_drv *d = n->opaque;

    return (int64_t)d->exp.size;
}

static int nbd_drv_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct nbd_drv *d = n->opaque;
    int r;

    pthread_mutex_init(&d->status_lock, NULL);
    r = nbd_drv_connect(n, opts);
    if (r < 0) {
        nbd_drv_close(n); /* whatever part of the connection was made */
    }
    return r;
}

static const struct blk_driver nbd_driver = {
    .name = "nbd",
    .claims = nbd_uri_is,
    .remote = true,
    .names_help = "NBD URIs (nbd://, nbds://, nbd+unix://, nbds+unix://, nbd:unix:PATH, "
                  "nbd:HOST:PORT)",
    .state_size = sizeof(struct nbd_drv),
    .options = nbd_options,
    .open = nbd_drv_open,
    .close = nbd_drv_close,
    .preadv = nbd_drv_preadv,
    .pwritev = nbd_drv_pwritev,
    .pwrite_zeroes = nbd_drv_pwrite_zeroes,
    .discard = nbd_drv_discard,
    .flush = nbd_drv_flush,
    .block_status = nbd_drv_block_status,
    .prefetch = nbd_drv_prefetch,
    .get_length = nbd_drv_get_length,
};

BLK_REGISTER_DRIVER(nbd_driver)
