/* formats/raw.c: the "raw" format driver.  Guest bytes are file bytes,
 * optionally a window [offset, offset+size) of the child.  Everything is
 * passed through, and so are the child's native flags: raw promises FUA
 * exactly when its child does.
 *
 * When the format was probed rather than named, a write that would make
 * the first sector look like another format is refused, as qemu does: a
 * guest must not be able to turn its raw disk into, say, a qcow2 image
 * with a backing file of the host's choosing on the next probe.  The
 * guarded windows are the ones probing reads: the first BLK_PROBE_BYTES of
 * the file, and the last ones, where a trailer (a fixed VHD's footer) is
 * recognised.  Every write, zero write and discard that touches them is
 * checked against the bytes it would leave there and done under one mutex
 * with the check, so pipelined or concurrent small writes cannot assemble
 * a header between two checks.  Requests elsewhere take no lock. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "block/driver.h"
#include "block/esc-name.h"
#include "common/error.h"
#include "common/cleanup.h"
#include "common/util.h"

struct raw_state {
    uint64_t offset;
    uint64_t size;
    bool size_set;
    bool probed;
    /* Probed images: held from the check of a request touching the probe
     * window until that request is done. */
    pthread_mutex_t guard_lock;
};

static int raw_probe(const uint8_t *buf, size_t len, const char *filename)
{
    (void)buf;
    (void)len;
    (void)filename;
    return 1; /* anything is raw, with the lowest confidence */
}

/* The keys raw takes: a window [offset, offset+size) of its child. */
static const struct blk_opt_desc raw_options[] = {
    {.key = "offset", .type = BLK_OPT_SIZE},
    {.key = "size", .type = BLK_OPT_SIZE},
    {NULL},
};

static int raw_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct raw_state *s = n->opaque;
    int64_t child_len = blk_get_length(n->file);
    uint64_t offset = 0, size = 0;
    int size_set, r;

    if (child_len < 0) {
        return (int)child_len;
    }
    r = blk_opt_size(opts->options, "raw", "offset", &offset);
    if (r < 0) {
        return r;
    }
    size_set = blk_opt_size(opts->options, "raw", "size", &size);
    if (size_set < 0) {
        return size_set;
    }
    if (offset > (uint64_t)child_len) {
        return err_setx(EINVAL,
                        "%s: offset %" PRIu64 " is beyond the end of the file (%" PRId64 ")",
                        ESC_NAME(n), offset, child_len);
    }
    if (size_set && size > (uint64_t)child_len - offset) {
        return err_setx(EINVAL,
                        "%s: offset %" PRIu64 " plus size %" PRIu64
                        " is beyond the end of the file (%" PRId64 ")",
                        ESC_NAME(n), offset, size, child_len);
    }
    s->offset = offset;
    s->size = size;
    s->size_set = size_set;
    s->probed = opts->probed;
    pthread_mutex_init(&s->guard_lock, NULL);
    n->supported_write_flags = n->file->supported_write_flags & BLK_REQ_WRITE_MASK;
    n->supported_zero_flags = n->file->supported_zero_flags & BLK_REQ_ZERO_MASK;
    n->supported_discard_flags = n->file->supported_discard_flags & BLK_REQ_DISCARD_MASK;
    return 0;
}

static int64_t raw_get_length(struct blk_node *n)
{
    struct raw_state *s = n->opaque;
    int64_t child_len;

    if (s->size_set) {
        return (int64_t)s->size;
    }
    child_len = blk_get_length(n->file);
    if (child_len < 0) {
        return child_len;
    }
    return child_len > (int64_t)s->offset ? child_len - (int64_t)s->offset : 0;
}

static int raw_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct raw_state *s = n->opaque;

    return blk_preadv(n->file, s->offset + off, iov, iovcnt);
}

static void raw_close(struct blk_node *n)
{
    struct raw_state *s = n->opaque;

    pthread_mutex_destroy(&s->guard_lock);
}

/* Where the tail probe window starts in a file of flen bytes (none, past
 * the end, when the file is shorter than the window). */
static uint64_t raw_tail_start(int64_t flen)
{
    return flen >= BLK_PROBE_BYTES ? (uint64_t)flen - BLK_PROBE_BYTES : UINT64_MAX;
}

/* Does a request at guest offset off reach a probe window of a probed
 * image?  (Then it runs under guard_lock, after raw_guard_check_locked.) */
static bool raw_guarded(struct blk_node *n, uint64_t off, uint64_t len)
{
    struct raw_state *s = n->opaque;
    uint64_t at = s->offset + off;

    if (!s->probed || !len) {
        return false;
    }
    return at < BLK_PROBE_BYTES || at + len > raw_tail_start(blk_get_length(n->file));
}

/* Copy the part of a request at file offset at (len bytes: iov's, or
 * zeroes when iov is NULL) that falls in the window starting at wstart
 * into win. */
static void raw_guard_apply(uint8_t *win, uint64_t wstart, uint64_t at, uint64_t len,
                            const struct iovec *iov, int iovcnt)
{
    uint64_t from = MAX(at, wstart), to = MIN(at + len, wstart + BLK_PROBE_BYTES);

    if (from >= to) {
        return;
    }
    if (iov) {
        iov_to_buf(iov, iovcnt, (size_t)(from - at), win + (from - wstart), (size_t)(to - from));
    } else {
        memset(win + (from - wstart), 0, (size_t)(to - from));
    }
}

/* With guard_lock held: would the windows probe as another format once
 * [off, off+len) holds iov's bytes (zeroes when iov is NULL)? */
static int raw_guard_check_locked(struct blk_node *n, uint64_t off, uint64_t len,
                                  const struct iovec *iov, int iovcnt)
{
    struct raw_state *s = n->opaque;
    uint8_t win[BLK_PROBE_BYTES] = {0}, tail[BLK_PROBE_BYTES];
    uint64_t at = s->offset + off;
    int64_t flen = blk_get_length(n->file);
    int r;

    if (flen < 0) {
        return (int)flen;
    }
    uint64_t tstart = raw_tail_start(flen);
    bool has_tail = tstart != UINT64_MAX;
    r = blk_pread(n->file, 0, win, MIN((uint64_t)flen, (uint64_t)sizeof win));
    if (r == 0 && has_tail) {
        r = blk_pread(n->file, tstart, tail, sizeof tail);
    }
    if (r < 0) {
        return r;
    }
    raw_guard_apply(win, 0, at, len, iov, iovcnt);
    if (has_tail) {
        raw_guard_apply(tail, tstart, at, len, iov, iovcnt);
    }
    const struct blk_driver *d = blk_probe_format_tail(win, sizeof win, has_tail ? tail : NULL,
                                                       has_tail ? sizeof tail : 0, NULL);
    if (d != n->drv) {
        return err_setx(EPERM,
                        "%s: refusing a write that would make this probed raw image look like %s "
                        "(name the format raw explicitly to allow it)",
                        ESC_NAME(n), d ? d->name : "two formats at once");
    }
    return 0;
}

static int raw_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                       unsigned flags)
{
    struct raw_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt);
    int r;

    if (!raw_guarded(n, off, len)) {
        return blk_pwritev(n->file, s->offset + off, iov, iovcnt, flags);
    }
    pthread_mutex_lock(&s->guard_lock);
    r = raw_guard_check_locked(n, off, len, iov, iovcnt);
    if (r == 0) {
        r = blk_pwritev(n->file, s->offset + off, iov, iovcnt, flags);
    }
    pthread_mutex_unlock(&s->guard_lock);
    return r;
}

static int raw_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct raw_state *s = n->opaque;
    int r;

    if (!raw_guarded(n, off, len)) {
        return blk_pwrite_zeroes(n->file, s->offset + off, len, flags);
    }
    pthread_mutex_lock(&s->guard_lock);
    r = raw_guard_check_locked(n, off, len, NULL, 0);
    if (r == 0) {
        r = blk_pwrite_zeroes(n->file, s->offset + off, len, flags);
    }
    pthread_mutex_unlock(&s->guard_lock);
    return r;
}

/* A discarded range reads back as zeroes or as it was; what it was has
 * passed the check already, so zeroes are what to check. */
static int raw_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct raw_state *s = n->opaque;
    int r;

    if (!raw_guarded(n, off, len)) {
        return blk_discard(n->file, s->offset + off, len, flags);
    }
    pthread_mutex_lock(&s->guard_lock);
    r = raw_guard_check_locked(n, off, len, NULL, 0);
    if (r == 0) {
        r = blk_discard(n->file, s->offset + off, len, flags);
    }
    pthread_mutex_unlock(&s->guard_lock);
    return r;
}

static int raw_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    struct raw_state *s = n->opaque;

    /* The child reports file offsets, which is what map wants. */
    return blk_block_status(n->file, s->offset + off, len, ext);
}

/* Copy offloading writes the file directly: not where a probed image's
 * guard must look at what is written. */
static int raw_map_linear(struct blk_node *n, uint64_t off, uint64_t len, uint64_t *file_off)
{
    struct raw_state *s = n->opaque;

    if (raw_guarded(n, off, len)) {
        return -ENOTSUP;
    }
    *file_off = s->offset + off;
    return 0;
}

static int raw_prefetch(struct blk_node *n, uint64_t off, uint64_t len)
{
    struct raw_state *s = n->opaque;

    return blk_prefetch(n->file, s->offset + off, len);
}

static int raw_truncate(struct blk_node *n, uint64_t len)
{
    struct raw_state *s = n->opaque;

    if (s->size_set || s->offset) {
        return err_setx(ENOTSUP, "%s: cannot resize a raw image with an offset or size",
                        ESC_NAME(n));
    }
    if (s->probed) {
        /* Shrinking brings guest bytes to the end of the file, where a
         * trailer (a fixed VHD's footer) is probed. */
        int64_t flen = blk_get_length(n->file);
        if (flen < 0) {
            return (int)flen;
        }
        if (len < (uint64_t)flen && len >= BLK_PROBE_BYTES) {
            uint8_t head[BLK_PROBE_BYTES] = {0}, tail[BLK_PROBE_BYTES];
            int r = blk_pread(n->file, 0, head, sizeof head);
            if (r == 0) {
                r = blk_pread(n->file, len - sizeof tail, tail, sizeof tail);
            }
            if (r < 0) {
                return r;
            }
            const struct blk_driver *d =
                blk_probe_format_tail(head, sizeof head, tail, sizeof tail, NULL);
            if (d != n->drv) {
                return err_setx(EPERM,
                                "%s: refusing to shrink this probed raw image to where its last "
                                "sector looks like %s (name the format raw explicitly to allow "
                                "it)",
                                ESC_NAME(n), d ? d->name : "two formats at once");
            }
        }
    }
    return blk_truncate(n->file, len);
}

/* ---- create ---- */

enum raw_prealloc { RAW_PREALLOC_OFF, RAW_PREALLOC_FALLOC, RAW_PREALLOC_FULL };

struct raw_create {
    uint64_t size;
    bool size_set;
    enum raw_prealloc prealloc;
    bool prealloc_given;
};

static int raw_create_opt(const char *key, const char *value, void *opaque)
{
    struct raw_create *c = opaque;

    if (!value) {
        return err_setx(EINVAL, "raw: option '%s' needs a value", key);
    }
    if (strcmp(key, "size") == 0) {
        if (c->size_set) {
            return err_setx(EINVAL, "raw: the size is given twice (-o size and SIZE)");
        }
        if (parse_size(value, &c->size) < 0) {
            return err_setx(EINVAL, "raw: invalid size '%s'", value);
        }
        c->size_set = true;
    } else if (strcmp(key, "preallocation") == 0) {
        c->prealloc_given = true;
        if (strcmp(value, "off") == 0) {
            c->prealloc = RAW_PREALLOC_OFF;
        } else if (strcmp(value, "falloc") == 0) {
            c->prealloc = RAW_PREALLOC_FALLOC;
        } else if (strcmp(value, "full") == 0) {
            c->prealloc = RAW_PREALLOC_FULL;
        } else {
            return err_setx(EINVAL, "raw: preallocation '%s' is not off, falloc or full", value);
        }
    } else {
        return err_setx(EINVAL, "raw: unknown option '%s'", key);
    }
    return 0;
}

static int raw_create_check(const struct blk_create_opts *o)
{
    struct raw_create c = {.size = o->size, .size_set = o->size_set};

    if (o->backing_file) {
        return err_setx(ENOTSUP, "Backing file not supported for file format 'raw'");
    }
    return o->options ? kv_foreach(o->options, raw_create_opt, &c) : 0;
}

static int raw_create(struct blk_node *file, const struct blk_create_opts *o, char **summary)
{
    static const char *const prealloc_names[] = {"off", "falloc", "full"};
    struct raw_create c = {.size = o->size, .size_set = o->size_set};
    int r;

    if (o->backing_file) {
        return err_setx(ENOTSUP, "Backing file not supported for file format 'raw'");
    }
    if (o->options && (r = kv_foreach(o->options, raw_create_opt, &c)) != 0) {
        return r;
    }
    if (!c.size_set) {
        return err_setx(EINVAL, "raw: the image size is required");
    }
    uint64_t asked = c.size;        /* printed as given, like qemu-img */
    c.size = ROUND_UP(c.size, 512); /* as qemu-img create does */
    r = blk_truncate(file, c.size);
    if (r == 0 && c.prealloc == RAW_PREALLOC_FALLOC && c.size) {
        r = blk_pwrite_zeroes(file, 0, c.size, 0); /* allocates, reads as zeroes */
    }
    if (r == 0 && c.prealloc == RAW_PREALLOC_FULL) {
        static const uint8_t zeroes[1 << 16];
        for (uint64_t off = 0; r == 0 && off < c.size; off += sizeof zeroes) {
            r = blk_pwrite(file, off, zeroes, MIN((uint64_t)sizeof zeroes, c.size - off), 0);
        }
    }
    if (r < 0) {
        return r;
    }
    if (asprintf(summary, "fmt=raw size=%" PRIu64 "%s%s", asked,
                 c.prealloc_given ? " preallocation=" : "",
                 c.prealloc_given ? prealloc_names[c.prealloc] : "") < 0) {
        *summary = NULL;
    }
    return 0;
}

/* measure: a raw image is as large as its disk, allocated or not; the
 * disk is the source's size or the size asked for, in whole sectors as
 * qemu counts them. */
static int raw_measure(const struct blk_create_opts *o, struct blk_image *src,
                       struct blk_measure *m)
{
    int r = raw_create_check(o);

    if (r < 0) {
        return r;
    }
    m->required = ROUND_UP(src ? blk_image_size(src) : o->size, 512);
    m->fully_allocated = m->required;
    return 0;
}

static const struct blk_driver raw_driver = {
    .name = "raw",
    .is_format = true,
    .options = raw_options,
    .state_size = sizeof(struct raw_state),
    .probe = raw_probe,
    .open = raw_open,
    .close = raw_close,
    .preadv = raw_preadv,
    .pwritev = raw_pwritev,
    .pwrite_zeroes = raw_pwrite_zeroes,
    .discard = raw_discard,
    .block_status = raw_block_status,
    .map_linear = raw_map_linear,
    .prefetch = raw_prefetch,
    .get_length = raw_get_length,
    .truncate = raw_truncate,
    .create = raw_create,
    .create_check = raw_create_check,
    .measure = raw_measure,
    .create_help = "Supported options:\n"
                   "  size=<size>             Virtual disk size\n"
                   "  preallocation=<mode>    off (default), falloc, full\n",
};

BLK_REGISTER_DRIVER(raw_driver)
