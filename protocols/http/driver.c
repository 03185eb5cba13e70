/* protocols/http/driver.c: the read-only "http" and "https" protocol
 * drivers, built into a module, diskimg-http.so, that the program loads
 * on first use (loader.c).  An image named by an http:// or https:// URL is read with
 * range requests (conn.c), so every read-only subcommand works on images
 * on a web server or in an object store.
 *
 * Open asks for the first bytes with a ranged GET: the answer tells the
 * size and that the server serves ranges, and its bytes (one read-ahead
 * window) fill the cache that probing and a format's header reads hit.
 * The generic layer reads from several threads at once (convert's
 * workers): each request takes a connection of its own from a pool that
 * grows up to MAX_CONNS, and every connection keeps, besides its TCP/TLS
 * session, the window it read last.  A small read is widened to a
 * window (qemu's curl driver does the same, 256 KiB by default): qcow2
 * over HTTP makes many small metadata reads. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/driver.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/url-redact.h"
#include "common/util.h"
#include "conn.h"
#include "protocols/module.h"

#define MAX_CONNS 16
#define DEFAULT_READAHEAD (256u << 10)
#define MAX_READAHEAD (16u << 20) /* per connection, 16 of them */
#define DEFAULT_TIMEOUT_S 30u
#define MAX_TIMEOUT_S 3600u
#define RETRIES 5u

struct http_slot {
    struct http_conn *conn;
    bool busy;
    uint8_t *window; /* readahead bytes */
    uint64_t win_off, win_len;
    uint64_t last_use; /* for picking the least recently used idle slot */
};

struct http_drv {
    struct http_config cfg;
    uint64_t size;
    uint64_t readahead;
    CURLSH *share;
    pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
    pthread_mutex_t lock; /* the slots */
    pthread_cond_t idle;
    struct http_slot slots[MAX_CONNS];
    unsigned nslots;
    uint64_t clock;
};

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *opaque)
{
    struct http_drv *d = opaque;
    (void)h;
    (void)access;
    pthread_mutex_lock(&d->share_lock[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *opaque)
{
    struct http_drv *d = opaque;
    (void)h;
    pthread_mutex_unlock(&d->share_lock[data]);
}

/* One DNS cache and TLS session cache for the pool's handles: a new
 * connection resumes the first one's TLS session. */
static int share_init(struct http_drv *d)
{
    CURLSHcode rc = CURLSHE_OK;

    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) {
        pthread_mutex_init(&d->share_lock[i], NULL);
    }
    d->share = curl_share_init();
    if (!d->share) {
        return err_set(ENOMEM, "%s: starting a libcurl share", d->cfg.display);
    }
    rc |= curl_share_setopt(d->share, CURLSHOPT_LOCKFUNC, share_lock);
    rc |= curl_share_setopt(d->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    rc |= curl_share_setopt(d->share, CURLSHOPT_USERDATA, d);
    rc |= curl_share_setopt(d->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    rc |= curl_share_setopt(d->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    if (rc != CURLSHE_OK) {
        return err_setx(EINVAL, "%s: libcurl refused a share option", d->cfg.display);
    }
    d->cfg.share = d->share;
    return 0;
}

static char *dir_file(const char *dir, const char *name)
{
    char *p = NULL;

    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* --tls-creds DIR, as qemu's tls-creds-x509 and the NBD client read it:
 * DIR/ca-cert.pem is the only CA trusted; client-cert.pem and
 * client-key.pem, when both are there, identify the client. */
static int tls_creds(struct http_drv *d, const char *dir)
{
    d->cfg.ca_file = dir_file(dir, "ca-cert.pem");
    d->cfg.client_cert = dir_file(dir, "client-cert.pem");
    d->cfg.client_key = dir_file(dir, "client-key.pem");
    if (!d->cfg.ca_file || !d->cfg.client_cert || !d->cfg.client_key) {
        return err_set(ENOMEM, "%s: TLS credentials", d->cfg.display);
    }
    if (access(d->cfg.ca_file, R_OK) < 0) {
        CLEANUP_FREE char *esc = str_escape(d->cfg.ca_file);
        return err_set(errno, "%s: --tls-creds: cannot read %s", d->cfg.display, esc ? esc : "?");
    }
    if (access(d->cfg.client_cert, R_OK) < 0 || access(d->cfg.client_key, R_OK) < 0) {
        free(d->cfg.client_cert);
        free(d->cfg.client_key);
        d->cfg.client_cert = d->cfg.client_key = NULL;
    }
    return 0;
}

static int read_options(struct http_drv *d, const struct blk_node *n,
                        const struct blk_open_opts *opts)
{
    const char *drv = n->drv->name, *v;
    unsigned timeout = DEFAULT_TIMEOUT_S;
    uint64_t ra = DEFAULT_READAHEAD;
    int r;

    if ((r = blk_opt_size(opts->options, drv, "readahead", &ra)) < 0 ||
        (r = blk_opt_uint(opts->options, drv, "timeout", &timeout)) < 0) {
        return r;
    }
    if (ra > MAX_READAHEAD || ra % 512 != 0) {
        return blk_opt_error(drv, "readahead", "a multiple of 512 up to 16M");
    }
    if (timeout == 0 || timeout > MAX_TIMEOUT_S) {
        return blk_opt_error(drv, "timeout", "between 1 and %u seconds", MAX_TIMEOUT_S);
    }
    d->readahead = ra;
    d->cfg.timeout_s = timeout;
    d->cfg.retries = RETRIES;
    d->cfg.verify = true;
    if ((v = blk_kv_get(opts->options, "sslverify")) && parse_bool(v, &d->cfg.verify) < 0) {
        return blk_opt_error(drv, "sslverify", "on or off");
    }
    v = blk_kv_get(opts->options, "tls-creds");
    return v ? tls_creds(d, v) : 0;
}

/* The URL: the image's name, or url= when --image-opts names none. */
static int pick_url(struct http_drv *d, struct blk_node *n, const struct blk_open_opts *opts)
{
    const char *url = opts->filename ? opts->filename : blk_kv_get(opts->options, "url");
    const char *given = blk_kv_get(opts->options, "url");

    if (!url) {
        return blk_opt_error(n->drv->name, "url", "required (the image's http:// or https:// URL)");
    }
    if (given && opts->filename && strcmp(given, opts->filename) != 0) {
        return blk_opt_error(n->drv->name, "url", "the image is named already");
    }
    d->cfg.url = strdup(url);
    d->cfg.display = url_redact(url);
    if (!d->cfg.url || !d->cfg.display) {
        return err_set(ENOMEM, "opening an HTTP image");
    }
    /* Messages name the node: never with its query string. */
    free(n->filename);
    n->filename = strdup(d->cfg.display);
    if (!n->filename) {
        return err_set(ENOMEM, "opening an HTTP image");
    }
    d->cfg.https_only = strcmp(n->drv->name, "https") == 0;
    if (!http_url_is(url) || (d->cfg.https_only && !http_url_is_https(url))) {
        return err_setx(EINVAL, "%s: not an %s URL", d->cfg.display,
                        d->cfg.https_only ? "https://" : "http:// or https://");
    }
    return 0;
}

/* A free slot, waiting for one when MAX_CONNS are busy; its window is
 * dropped as it is about to be refilled or bypassed. */
static struct http_slot *slot_get(struct http_drv *d)
{
    struct http_slot *best = NULL;

    pthread_mutex_lock(&d->lock);
    for (;;) {
        for (unsigned i = 0; i < d->nslots; i++) {
            struct http_slot *s = &d->slots[i];
            if (!s->busy && (!best || s->last_use < best->last_use)) {
                best = s;
            }
        }
        if (best || d->nslots < MAX_CONNS) {
            break;
        }
        pthread_cond_wait(&d->idle, &d->lock);
    }
    if (!best) {
        best = &d->slots[d->nslots++];
    }
    best->busy = true;
    best->win_len = 0;
    pthread_mutex_unlock(&d->lock);
    return best;
}

static void slot_put(struct http_drv *d, struct http_slot *s, uint64_t win_off, uint64_t win_len)
{
    pthread_mutex_lock(&d->lock);
    s->busy = false;
    s->win_off = win_off;
    s->win_len = win_len;
    s->last_use = ++d->clock;
    pthread_cond_signal(&d->idle);
    pthread_mutex_unlock(&d->lock);
}

/* Make sure the slot has a handle and, when readahead is on, a window. */
static int slot_ready(struct http_drv *d, struct http_slot *s)
{
    if (!s->conn) {
        int r = http_conn_new(&s->conn, &d->cfg);
        if (r < 0) {
            return r;
        }
    }
    if (d->readahead && !s->window && !(s->window = malloc(d->readahead))) {
        return err_set(ENOMEM, "%s: a read-ahead window", d->cfg.display);
    }
    return 0;
}

/* Copy [off, off+len) from an idle slot's window, if one holds it. */
static bool cache_read(struct http_drv *d, uint64_t off, const struct iovec *iov, int iovcnt,
                       uint64_t len)
{
    bool hit = false;

    pthread_mutex_lock(&d->lock);
    for (unsigned i = 0; i < d->nslots && !hit; i++) {
        struct http_slot *s = &d->slots[i];
        if (!s->busy && s->win_len && off >= s->win_off && off + len <= s->win_off + s->win_len) {
            iov_from_buf(iov, iovcnt, 0, s->window + (off - s->win_off), len);
            s->last_use = ++d->clock;
            hit = true;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return hit;
}

/* The window a small read at off is widened to: readahead bytes from
 * off, moved back where it would pass the end (a trailer's reads). */
static void window_for(const struct http_drv *d, uint64_t off, uint64_t len, uint64_t *w_off,
                       uint64_t *w_len)
{
    uint64_t end = MIN(off + MAX(len, d->readahead), d->size);

    *w_off = end - off < d->readahead ? (end > d->readahead ? end - d->readahead : 0) : off;
    *w_len = end - *w_off;
}

static int fetch(struct http_drv *d, struct http_slot *s, uint64_t off, uint64_t len,
                 const struct iovec *iov, int iovcnt)
{
    struct http_answer ans;
    int r = http_conn_get(s->conn, off, len, iov, iovcnt, &ans);

    if (r < 0) {
        return r;
    }
    if (ans.total != d->size || ans.got != len) {
        return err_setx(
            EIO, "%s: the file's size changed on the server (%" PRIu64 " bytes, was %" PRIu64 ")",
            d->cfg.display, ans.total, d->size);
    }
    return 0;
}

static int http_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct http_drv *d = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), w_off = 0, w_len = 0;
    struct http_slot *s;
    int r;

    if (len == 0 || cache_read(d, off, iov, iovcnt, len)) {
        return 0;
    }
    s = slot_get(d);
    r = slot_ready(d, s);
    if (r == 0 && d->readahead && len < d->readahead) {
        window_for(d, off, len, &w_off, &w_len);
        struct iovec w = {.iov_base = s->window, .iov_len = w_len};
        r = fetch(d, s, w_off, w_len, &w, 1);
        if (r == 0) {
            iov_from_buf(iov, iovcnt, 0, s->window + (off - w_off), len);
        }
    } else if (r == 0) {
        r = fetch(d, s, off, len, iov, iovcnt);
    }
    slot_put(d, s, w_off, r == 0 ? w_len : 0);
    return r;
}

/* The first window: the size, range support, and the first bytes. */
static int http_probe_size(struct http_drv *d)
{
    struct http_slot *s = &d->slots[0];
    uint64_t first = d->readahead ? d->readahead : 512;
    struct http_answer ans;
    uint8_t small[512];
    int r;

    d->nslots = 1;
    r = slot_ready(d, s);
    if (r < 0) {
        return r;
    }
    struct iovec w = {.iov_base = s->window ? (void *)s->window : small, .iov_len = first};
    r = http_conn_get(s->conn, 0, first, &w, 1, &ans);
    if (r < 0) {
        return r;
    }
    if (ans.total > (uint64_t)INT64_MAX) {
        return err_setx(EFBIG, "%s: the server says the file has %" PRIu64 " bytes: too large",
                        d->cfg.display, ans.total);
    }
    d->size = ans.total;
    memcpy(d->cfg.etag, ans.etag, sizeof d->cfg.etag); /* before any other request */
    s->win_off = 0;
    s->win_len = s->window ? ans.got : 0;
    s->last_use = ++d->clock;
    return 0;
}

static void http_close(struct blk_node *n)
{
    struct http_drv *d = n->opaque;

    for (unsigned i = 0; i < MAX_CONNS; i++) {
        http_conn_free(d->slots[i].conn);
        free(d->slots[i].window);
    }
    if (d->share) {
        curl_share_cleanup(d->share);
    }
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) {
        pthread_mutex_destroy(&d->share_lock[i]);
    }
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->idle);
    free(d->cfg.url);
    free(d->cfg.display);
    free(d->cfg.ca_file);
    free(d->cfg.client_cert);
    free(d->cfg.client_key);
}

static int http_open_locked(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct http_drv *d = n->opaque;
    int r;

    if ((r = pick_url(d, n, opts)) < 0 || (r = read_options(d, n, opts)) < 0) {
        return r;
    }
    if (!opts->read_only) {
        return err_setx(EROFS,
                        "%s: HTTP images are read-only (open it read-only: serve -r, "
                        "or convert it to a local image)",
                        d->cfg.display);
    }
    if ((r = http_global_init()) < 0 || (r = share_init(d)) < 0) {
        return r;
    }
    return http_probe_size(d);
}

static int http_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct http_drv *d = n->opaque;
    int r;

    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->idle, NULL);
    r = http_open_locked(n, opts);
    if (r < 0) {
        http_close(n);
    }
    return r;
}

static int64_t http_get_length(struct blk_node *n)
{
    struct http_drv *d = n->opaque;

    return (int64_t)d->size;
}

/* A web server says nothing about holes: everything is data, at its own
 * offset, so "map" shows what qemu-img's curl driver shows under raw
 * (an "offset" for every extent). */
static int http_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    memset(ext, 0, sizeof *ext);
    ext->length = len;
    ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
    ext->offset = off;
    ext->depth = 1;
    ext->filename = n->filename;
    return 0;
}

/* Not registered: the registry's "http" and "https" entries (loader.c)
 * claim the names, declare the options, and forward each op to this
 * table, so an op added here needs its forwarder there.  Both names
 * share it: the node's driver is the entry, whose name open reads. */
static const struct blk_driver http_driver = {
    .name = "http",
    .remote = true,
    .state_size = sizeof(struct http_drv),
    .open = http_open,
    .close = http_close,
    .preadv = http_preadv,
    .get_length = http_get_length,
    .block_status = http_block_status,
};

PROTO_MODULE_ENTRY(http, http_driver);
