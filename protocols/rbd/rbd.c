/* protocols/rbd/rbd.c: the "rbd" protocol driver, Ceph RBD images
 * through librbd (names: name.h; the cluster: connect.c).  Built into a
 * module, diskimg-rbd.so, that the program loads on first use
 * (loader.c).
 *
 * Locking.  A user that writes or resizes the image holds RBD's
 * exclusive lock (rbd_lock_acquire), taken at open before any byte is
 * written and kept until close: another client's writes are then refused
 * by librbd, and a second writer, here or on another host, fails with
 * BLK_E_IN_USE as a locked file does.  Readers take no lock: many servers
 * may export one golden image read-only, and a snapshot never changes.
 *
 * Durability.  With librbd's cache off an acknowledged write is on the
 * OSDs, so FUA is native (a no-op); with the cache on, writes are
 * acknowledged from memory and FUA is left to the generic layer, which
 * follows the write with a flush (rbd_flush writes the cache back and
 * waits for every write in flight).
 *
 * Requests.  The generic layer calls from many threads at once; librbd's
 * calls are thread-safe, and each thread waits for its own request,
 * issued with the vectored aio calls (rbd_aio_readv/writev).  librbd's
 * synchronous calls were measured against them, converting 256 MiB to
 * and from a local cluster with 8 workers, interleaved rounds on a busy
 * 2-core machine: no difference beyond the noise (writes: medians 0.393 s
 * and 0.394 s of 8 rounds; reads: the faster one changed between two
 * series), so one path serves both. */
#include "rbd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"
#include "protocols/module.h"

int rbd_drv_name(struct rbd_drv *d, const char *filename, const struct blk_kvlist *options)
{
    int r =
        filename ? rbd_name_parse(filename, &d->name) : rbd_name_from_options(options, &d->name);
    char *display;

    if (r < 0) {
        return r;
    }
    display = rbd_name_display(&d->name);
    d->label = display ? str_escape(display) : NULL;
    free(display);
    return d->label ? 0 : err_set(ENOMEM, "rbd");
}

/* Names the client holding the lock, in Ceph's words (escaped). */
static int lock_busy(struct rbd_drv *d)
{
    rbd_lock_mode_t mode;
    char *owners[4];
    size_t n = 4;
    char who[160] = "";

    if (rbd_lock_get_owners(d->image, &mode, owners, &n) == 0) {
        if (n > 0) {
            char *o = str_escape(owners[0]);
            snprintf(who, sizeof who, " (%s)", o ? o : "?");
            free(o);
        }
        rbd_lock_get_owners_cleanup(owners, n);
    }
    return err_setx(BLK_E_IN_USE,
                    "%s: in use: another client holds its exclusive lock%s; a second writer "
                    "is refused",
                    d->label, who);
}

/* The tag of the lock librbd takes for a writer (its WATCHER_LOCK_TAG). */
#define MANAGED_LOCK_TAG "internal"

/* Someone holds a lock that librbd did not take for a writer: "rbd lock
 * add", or another tool's advisory lock.  librbd never breaks such a
 * lock, and rbd_lock_acquire retries on it forever, busy, so a writer
 * is refused before asking.  0 when there is none, or when the lockers
 * cannot be listed (rbd_lock_acquire then decides). */
static int foreign_lock(struct rbd_drv *d)
{
    size_t len[4] = {64, 256, 256, 256}; /* tag, clients, cookies, addresses */
    char *buf[4] = {NULL, NULL, NULL, NULL};
    int exclusive = 0, r = 0;
    ssize_t n = -ERANGE;

    /* -ERANGE: the buffers were too short; len[] now holds the sizes. */
    for (int tries = 0; tries < 2 && n == -ERANGE; tries++) {
        for (int i = 0; i < 4; i++) {
            free(buf[i]);
            if (!(buf[i] = malloc(len[i] ? len[i] : 1))) {
                r = err_set(ENOMEM, "rbd");
                goto out;
            }
        }
        n = rbd_list_lockers(d->image, &exclusive, buf[0], &len[0], buf[1], &len[1], buf[2],
                             &len[2], buf[3], &len[3]);
    }
    if (n > 0 && strcmp(buf[0], MANAGED_LOCK_TAG) != 0) {
        char *who = str_escape(buf[1]), *cookie = str_escape(buf[2]);
        r = err_setx(BLK_E_IN_USE,
                     "%s: in use: %s holds an advisory %s lock '%s' (rbd lock ls); a writer is "
                     "refused until it is removed (rbd lock rm)",
                     d->label, who ? who : "?", exclusive ? "exclusive" : "shared",
                     cookie ? cookie : "?");
        free(who);
        free(cookie);
    }
out:
    for (int i = 0; i < 4; i++) {
        free(buf[i]);
    }
    return r;
}

static int take_lock(struct rbd_drv *d)
{
    uint64_t features = 0;
    int r;

    if (d->locked) {
        return 0;
    }
    if (rbd_get_features(d->image, &features) == 0 && !(features & RBD_FEATURE_EXCLUSIVE_LOCK)) {
        /* Nothing to lock with: librbd lets every client write. */
        return err_setx(ENOTSUP,
                        "%s: the image lacks the exclusive-lock feature, so writers cannot be "
                        "kept apart (rbd feature enable IMAGE exclusive-lock)",
                        d->label);
    }
    if ((r = foreign_lock(d)) < 0) {
        return r;
    }
    r = rbd_lock_acquire(d->image, RBD_LOCK_MODE_EXCLUSIVE);
    if (r == -EROFS || r == -EBUSY) {
        return lock_busy(d);
    }
    if (r < 0) {
        return rbd_error(d, r, "taking the exclusive lock");
    }
    d->locked = true;
    return 0;
}

static int rbd_set_perm(struct blk_node *n, const struct blk_perms *p)
{
    struct rbd_drv *d = n->opaque;
    bool writer = p->perm & (BLK_PERM_WRITE | BLK_PERM_RESIZE);

    if (writer && !n->read_only) {
        return take_lock(d);
    }
    if (!writer && d->locked) {
        rbd_lock_release(d->image);
        d->locked = false;
    }
    return 0;
}

static int open_image(struct rbd_drv *d, bool read_only)
{
    int r = read_only || d->name.snap
                ? rbd_open_read_only(d->io, d->name.image, &d->image, d->name.snap)
                : rbd_open(d->io, d->name.image, &d->image, NULL);
    char *img;

    if (r == -ENOENT) {
        img = str_escape(d->name.snap ? d->name.snap : d->name.image);
        r = err_setx(ENOENT, "%s: %s '%s' does not exist", d->label,
                     d->name.snap ? "snapshot (or its image)" : "image", img ? img : "?");
        free(img);
    } else if (r < 0) {
        r = rbd_error(d, r, "opening the image");
    }
    return r;
}

/* What the image can do: FUA, zeroes and status granularity. */
static void set_capabilities(struct blk_node *n, struct rbd_drv *d)
{
    rbd_image_info_t st;
    uint64_t features = 0, flags = 0;

    d->cache = rbd_cache_enabled(d);
    if (rbd_stat(d->image, &st, sizeof st) == 0) {
        d->object_size = st.obj_size;
    }
    if (rbd_get_features(d->image, &features) == 0 && rbd_get_flags(d->image, &flags) == 0) {
        d->whole_object =
            (features & RBD_FEATURE_FAST_DIFF) && !(flags & RBD_FLAG_FAST_DIFF_INVALID);
    }
    n->request_alignment = 1;
    n->mem_alignment = 1;
    n->zero_alignment = 1;
    unsigned fua = d->cache ? 0 : BLK_REQ_FUA;
    n->supported_write_flags = fua;
    /* rbd_write_zeroes discards whole objects and zeroes the rest on the
     * OSDs: no zero buffers travel, so it is always fast. */
    n->supported_zero_flags = fua | BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK;
    n->supported_discard_flags = fua;
}

static void rbd_drv_close(struct blk_node *n)
{
    struct rbd_drv *d = n->opaque;

    if (d->image) {
        if (d->locked) {
            rbd_lock_release(d->image);
        }
        rbd_close(d->image);
    }
    rbd_disconnect(d);
    rbd_status_free(&d->status);
    pthread_mutex_destroy(&d->resize_lock);
    rbd_name_free(&d->name);
    free(d->label);
}

/* A key given in the name (key=, or qemu's legacy password spellings)
 * must not reach messages that print the node's name. */
static bool has_secret(const struct rbd_name *nm)
{
    for (unsigned i = 0; i < nm->n_keys; i++) {
        if (strcmp(nm->keys[i], "key") == 0 || strstr(nm->keys[i], "secret") != NULL) {
            return true;
        }
    }
    return false;
}

static int rbd_open_node(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct rbd_drv *d = n->opaque;
    int r;

    pthread_mutex_init(&d->resize_lock, NULL);
    rbd_status_init(&d->status);
    r = rbd_drv_name(d, opts->filename, opts->options);
    if (r == 0 && d->name.snap && !opts->read_only) {
        r = err_setx(EROFS,
                     "%s: an RBD snapshot is read-only (open it read-only, or write "
                     "the image itself)",
                     d->label);
    }
    if (r == 0 && (!opts->filename || has_secret(&d->name))) {
        char *display = rbd_name_display(&d->name);
        free(n->filename);
        n->filename = display;
        r = display ? 0 : err_set(ENOMEM, "rbd");
    }
    if (r == 0) {
        r = rbd_connect(d, opts->direct);
    }
    if (r == 0) {
        r = open_image(d, opts->read_only);
    }
    if (r == 0) {
        n->read_only = opts->read_only || d->name.snap;
        set_capabilities(n, d);
        r = rbd_set_perm(n, &opts->perms);
    }
    if (r < 0) {
        rbd_drv_close(n);
    }
    return r;
}

/* Wait for one librbd request; its return value (bytes, 0, -errno). */
static ssize_t wait_request(rbd_completion_t c)
{
    rbd_aio_wait_for_complete(c);
    ssize_t r = rbd_aio_get_return_value(c);
    rbd_aio_release(c);
    return r;
}

static int io_error(struct rbd_drv *d, ssize_t r, const char *what, uint64_t off, uint64_t len)
{
    char buf[96];

    snprintf(buf, sizeof buf, "%s of %" PRIu64 " bytes at offset %" PRIu64, what, len, off);
    return rbd_error(d, (int)r, buf);
}

/* One request of either kind: bytes or -errno. */
static ssize_t rw_request(struct rbd_drv *d, bool write, uint64_t off, const struct iovec *iov,
                          int iovcnt)
{
    rbd_completion_t c;
    ssize_t r = rbd_aio_create_completion(NULL, NULL, &c);

    if (r < 0) {
        return r;
    }
    r = write ? rbd_aio_writev(d->image, iov, iovcnt, off, c)
              : rbd_aio_readv(d->image, iov, iovcnt, off, c);
    if (r < 0) {
        rbd_aio_release(c);
        return r;
    }
    return wait_request(c);
}

static int rbd_drv_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct rbd_drv *d = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), size = 0;
    ssize_t r;

    /* Past the end reads as zeroes, as a file does: a format's file
     * (growable) may end inside a cluster whose tail was never written,
     * and another client may have shrunk the image.  librbd refuses a
     * read that starts at or past the end, and cuts one that crosses it. */
    if (rbd_get_size(d->image, &size) == 0 && off >= size) {
        r = 0;
    } else {
        r = rw_request(d, false, off, iov, iovcnt);
    }
    if (r >= 0 && (uint64_t)r < len) {
        size_t done = (size_t)r;
        for (int i = 0; i < iovcnt; i++) {
            size_t skip = MIN(done, iov[i].iov_len);
            memset((char *)iov[i].iov_base + skip, 0, iov[i].iov_len - skip);
            done -= skip;
        }
    }
    return r < 0 ? io_error(d, r, "read", off, len) : 0;
}

/* A format's file (growable) is written past its end: the image grows
 * first, as qemu's rbd driver does. */
static int grow_for(struct blk_node *n, uint64_t end)
{
    struct rbd_drv *d = n->opaque;
    uint64_t size = 0;
    int r = 0;

    pthread_mutex_lock(&d->resize_lock);
    if (rbd_get_size(d->image, &size) == 0 && end > size) {
        r = rbd_resize(d->image, end);
        if (r < 0) {
            r = rbd_error(d, r, "growing the image");
        }
    }
    pthread_mutex_unlock(&d->resize_lock);
    return r;
}

static int before_write(struct blk_node *n, uint64_t off, uint64_t len)
{
    struct rbd_drv *d = n->opaque;
    uint64_t size = 0;

    atomic_fetch_add(&d->write_gen, 1);
    if (n->growable && rbd_get_size(d->image, &size) == 0 && off + len > size) {
        return grow_for(n, off + len);
    }
    return 0;
}

static int rbd_drv_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                           unsigned flags)
{
    struct rbd_drv *d = n->opaque;
    uint64_t len = iov_length(iov, iovcnt);
    ssize_t r;

    (void)flags; /* FUA is only offered with the cache off: every write is durable */
    r = before_write(n, off, len);
    if (r == 0) {
        r = rw_request(d, true, off, iov, iovcnt);
    }
    atomic_fetch_add(&d->write_gen, 1);
    return r < 0 ? io_error(d, r, "write", off, len) : 0;
}

/* librbd takes sizes as size_t and int results: big ranges go in pieces. */
#define MAX_ZERO_CHUNK (1ull << 30)

static int rbd_drv_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct rbd_drv *d = n->opaque;
    ssize_t r = before_write(n, off, len);

    (void)flags; /* MAY_UNMAP: librbd decides; NO_FALLBACK: never falls back */
    for (uint64_t pos = 0; pos < len && r >= 0;) {
        uint64_t chunk = MIN(len - pos, MAX_ZERO_CHUNK);
        r = rbd_write_zeroes(d->image, off + pos, (size_t)chunk, 0, 0);
        pos += chunk;
    }
    atomic_fetch_add(&d->write_gen, 1);
    return r < 0 ? io_error(d, r, "write zeroes", off, len) : 0;
}

static int rbd_drv_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct rbd_drv *d = n->opaque;
    int r = 0;

    (void)flags;
    atomic_fetch_add(&d->write_gen, 1);
    for (uint64_t pos = 0; pos < len && r >= 0;) {
        uint64_t chunk = MIN(len - pos, MAX_ZERO_CHUNK);
        r = rbd_discard(d->image, off + pos, chunk);
        pos += chunk;
    }
    atomic_fetch_add(&d->write_gen, 1);
    return r < 0 ? io_error(d, r, "discard", off, len) : 0;
}

static int rbd_drv_flush(struct blk_node *n)
{
    struct rbd_drv *d = n->opaque;
    int r;

    if (n->read_only) {
        return 0;
    }
    r = rbd_flush(d->image);
    return r < 0 ? rbd_error(d, r, "flush") : 0;
}

static int64_t rbd_drv_get_length(struct blk_node *n)
{
    struct rbd_drv *d = n->opaque;
    uint64_t size;
    int r = rbd_get_size(d->image, &size);

    return r < 0 ? rbd_error(d, r, "reading the size") : (int64_t)size;
}

static int rbd_drv_truncate(struct blk_node *n, uint64_t len)
{
    struct rbd_drv *d = n->opaque;
    int r;

    atomic_fetch_add(&d->write_gen, 1);
    pthread_mutex_lock(&d->resize_lock);
    r = rbd_resize(d->image, len);
    pthread_mutex_unlock(&d->resize_lock);
    atomic_fetch_add(&d->write_gen, 1);
    return r < 0 ? rbd_error(d, r, "resizing the image") : 0;
}

static const struct blk_driver rbd_driver = {
    .name = "rbd",
    .state_size = sizeof(struct rbd_drv),
    .set_perm = rbd_set_perm,
    .open = rbd_open_node,
    .close = rbd_drv_close,
    .preadv = rbd_drv_preadv,
    .pwritev = rbd_drv_pwritev,
    .pwrite_zeroes = rbd_drv_pwrite_zeroes,
    .discard = rbd_drv_discard,
    .flush = rbd_drv_flush,
    .block_status = rbd_block_status,
    .get_length = rbd_drv_get_length,
    .truncate = rbd_drv_truncate,
    .get_info = rbd_get_info,
    .snapshot = rbd_snapshot,
    .create_node = rbd_create_node,
    .remove_node = rbd_remove_node,
};

/* Not registered: the registry's "rbd" entry (loader.c) claims the names,
 * declares the options, and forwards each op to this table, so an op
 * added here needs its forwarder there. */
PROTO_MODULE_ENTRY(rbd, rbd_driver);
