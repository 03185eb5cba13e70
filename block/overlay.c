/* block/overlay.c: the throw-away overlay of serve -s (qemu-nbd -s).
 *
 * The image below is opened read-only and is never written.  Writes go to
 * a sparse temporary file at their own offsets, in blocks of
 * OVERLAY_BLOCK bytes: a bitmap in memory says which blocks the overlay
 * holds, and a read takes each block from the overlay or from the image.
 * A write that covers part of a block the overlay does not hold yet
 * copies the image's block first (under cow_lock, so two such writes to
 * one block do not lose each other's bytes); a block's bit is set only
 * once its data is in the file, and never cleared, so readers and writes
 * to blocks held already need no lock.  Written zeroes are holes punched
 * in the file, which block status reports as zeroes.
 *
 * The file is made with O_TMPFILE (or unlinked as soon as it is made), so
 * it disappears with the process, even on kill -9.  Nothing is flushed:
 * the client's data is thrown away at exit. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "driver.h"
#include "esc-name.h"
#include "overlay.h"

#define OVERLAY_BLOCK (64u << 10)

struct overlay {
    int fd;
    uint64_t size;
    uint64_t nblocks;
    _Atomic uint64_t *held; /* one bit per block: the overlay has it */
    pthread_mutex_t cow_lock;
};

static bool held(const struct overlay *s, uint64_t b)
{
    return atomic_load_explicit(&s->held[b / 64], memory_order_acquire) & (1ULL << (b % 64));
}

static void set_held(struct overlay *s, uint64_t b)
{
    atomic_fetch_or_explicit(&s->held[b / 64], 1ULL << (b % 64), memory_order_release);
}

/* The end of the run of blocks from off that have the same state as off's,
 * at most end. */
static uint64_t run_end(const struct overlay *s, uint64_t off, uint64_t end, bool *is_held)
{
    uint64_t b = off / OVERLAY_BLOCK;
    uint64_t pos = (b + 1) * OVERLAY_BLOCK;

    *is_held = held(s, b);
    while (pos < end && held(s, pos / OVERLAY_BLOCK) == *is_held) {
        pos += OVERLAY_BLOCK;
    }
    return MIN(pos, end);
}

static int tmp_pread(struct blk_node *n, void *buf, uint64_t len, uint64_t off)
{
    struct overlay *s = n->opaque;

    for (uint64_t done = 0; done < len;) {
        ssize_t r = pread(s->fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            return err_set(errno, "%s: reading the overlay", ESC_NAME(n));
        }
        if (r == 0) {
            memset((uint8_t *)buf + done, 0, len - done); /* past the end: not written yet */
            break;
        }
        done += (uint64_t)r;
    }
    return 0;
}

static int tmp_pwrite(struct blk_node *n, const void *buf, uint64_t len, uint64_t off)
{
    struct overlay *s = n->opaque;

    for (uint64_t done = 0; done < len;) {
        ssize_t r = pwrite(s->fd, (const uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            return err_set(errno, "%s: writing the overlay", ESC_NAME(n));
        }
        done += (uint64_t)r;
    }
    return 0;
}

static int overlay_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct overlay *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt), end = off + len;

    for (uint64_t pos = off; pos < end;) {
        bool is_held;
        uint64_t next = run_end(s, pos, end, &is_held);
        CLEANUP_FREE uint8_t *buf = malloc(next - pos);
        int r;
        if (!buf) {
            return err_set(ENOMEM, "%s: overlay read buffer", ESC_NAME(n));
        }
        r = is_held ? tmp_pread(n, buf, next - pos, pos) : blk_pread(n->file, pos, buf, next - pos);
        if (r < 0) {
            return r;
        }
        iov_from_buf(iov, iovcnt, pos - off, buf, next - pos);
        pos = next;
    }
    return 0;
}

/* With cow_lock held: give the overlay block b, with the image's bytes. */
static int cow_block_locked(struct blk_node *n, uint64_t b)
{
    struct overlay *s = n->opaque;
    uint64_t start = b * OVERLAY_BLOCK, len = MIN((uint64_t)OVERLAY_BLOCK, s->size - start);
    CLEANUP_FREE uint8_t *buf = NULL;
    int r;

    if (held(s, b)) {
        return 0;
    }
    buf = malloc(OVERLAY_BLOCK); /* (not on a worker's small stack) */
    if (!buf) {
        return err_set(ENOMEM, "%s: overlay block", ESC_NAME(n));
    }
    r = blk_pread(n->file, start, buf, len);
    if (r == 0) {
        r = tmp_pwrite(n, buf, len, start);
    }
    if (r == 0) {
        set_held(s, b);
    }
    return r;
}

/* Before a write or zeroing of [off, end): the blocks it covers only in
 * part are copied up; every block it touches is then the overlay's once
 * the caller has written it (mark_held). */
static int prepare_locked(struct blk_node *n, uint64_t off, uint64_t end)
{
    struct overlay *s = n->opaque;
    uint64_t first = off / OVERLAY_BLOCK, last = (end - 1) / OVERLAY_BLOCK;
    int r = 0;

    if (off % OVERLAY_BLOCK) {
        r = cow_block_locked(n, first);
    }
    if (r == 0 && end % OVERLAY_BLOCK && end < s->size) {
        r = cow_block_locked(n, last);
    }
    return r;
}

static void mark_held(struct overlay *s, uint64_t off, uint64_t end)
{
    for (uint64_t b = off / OVERLAY_BLOCK; b * OVERLAY_BLOCK < end; b++) {
        set_held(s, b);
    }
}

static bool all_held(const struct overlay *s, uint64_t off, uint64_t end)
{
    bool is_held;

    return run_end(s, off, end, &is_held) == end && is_held;
}

static int overlay_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                           unsigned flags)
{
    struct overlay *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt);
    CLEANUP_FREE uint8_t *buf = malloc(len ? len : 1);
    int r;

    (void)flags; /* FUA: nothing here is ever durable */
    if (!buf) {
        return err_set(ENOMEM, "%s: overlay write buffer", ESC_NAME(n));
    }
    iov_to_buf(iov, iovcnt, 0, buf, len);
    if (len == 0 || all_held(s, off, off + len)) {
        return len ? tmp_pwrite(n, buf, len, off) : 0;
    }
    pthread_mutex_lock(&s->cow_lock);
    r = prepare_locked(n, off, off + len);
    if (r == 0) {
        r = tmp_pwrite(n, buf, len, off);
    }
    if (r == 0) {
        mark_held(s, off, off + len);
    }
    pthread_mutex_unlock(&s->cow_lock);
    return r;
}

static int overlay_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct overlay *s = n->opaque;
    int r;

    (void)flags; /* MAY_UNMAP, NO_FALLBACK: a hole is both; FUA: see pwritev */
    if (len == 0) {
        return 0;
    }
    pthread_mutex_lock(&s->cow_lock);
    r = prepare_locked(n, off, off + len);
    if (r == 0 &&
        fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) < 0) {
        static const uint8_t zero[OVERLAY_BLOCK];
        for (uint64_t pos = 0; r == 0 && pos < len; pos += OVERLAY_BLOCK) {
            r = tmp_pwrite(n, zero, MIN((uint64_t)OVERLAY_BLOCK, len - pos), off + pos);
        }
    }
    if (r == 0) {
        mark_held(s, off, off + len);
    }
    pthread_mutex_unlock(&s->cow_lock);
    return r;
}

static int overlay_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    (void)n, (void)off, (void)len, (void)flags;
    return 0; /* advisory: the data stays as it was */
}

static int overlay_flush(struct blk_node *n)
{
    (void)n;
    return 0; /* thrown away at exit: nothing to make durable */
}

/* Held blocks: data or, where zeroes punched a hole, zeroes (lseek says
 * which); the others: the image's status, one layer down. */
static int overlay_block_status(struct blk_node *n, uint64_t off, uint64_t len,
                                struct blk_extent *ext)
{
    struct overlay *s = n->opaque;
    bool is_held;
    uint64_t end = run_end(s, off, off + len, &is_held);

    if (!is_held) {
        return blk_block_status_below(n->file, off, end - off, ext);
    }
    off_t data = lseek(s->fd, (off_t)off, SEEK_DATA);
    bool zero = (data < 0 && errno == ENXIO) || (data >= 0 && (uint64_t)data > off);
    if (zero && data >= 0) {
        end = MIN(end, (uint64_t)data);
    } else if (!zero && data >= 0) {
        off_t hole = lseek(s->fd, (off_t)off, SEEK_HOLE);
        if (hole > (off_t)off) {
            end = MIN(end, (uint64_t)hole);
        }
    }
    *ext = (struct blk_extent){.length = end - off,
                               .flags = BLK_EXT_ALLOCATED | (zero ? BLK_EXT_ZERO : BLK_EXT_DATA),
                               .layer = 0,
                               .depth = 1};
    return 0;
}

static int64_t overlay_get_length(struct blk_node *n)
{
    return (int64_t)((struct overlay *)n->opaque)->size;
}

static int overlay_load_bitmap(struct blk_node *n, const char *name, struct blk_bitmap **out)
{
    if (!n->file->drv->load_bitmap) {
        return err_setx(ENOTSUP, "%s: the %s format has no persistent bitmaps", ESC_NAME(n),
                        n->file->drv->name);
    }
    return n->file->drv->load_bitmap(n->file, name, out);
}

/* A file with no name in $TMPDIR (else /var/tmp): O_TMPFILE, or a name
 * removed at once where the file system has no O_TMPFILE. */
static int overlay_tmpfile(const char *what)
{
    const char *dir = getenv("TMPDIR");
    char path[PATH_MAX];
    int fd;

    if (!dir || !*dir) {
        dir = "/var/tmp";
    }
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
        return fd;
    }
    if (snprintf(path, sizeof path, "%s/diskimg-overlay-XXXXXX", dir) >= (int)sizeof path) {
        return err_setx(ENAMETOOLONG, "%s: TMPDIR is too long", what);
    }
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        return err_set(errno, "%s: creating the overlay in %s", what, dir);
    }
    unlink(path);
    return fd;
}

static int overlay_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct overlay *s = n->opaque;
    int64_t size = blk_get_length(n->file);

    (void)opts;
    if (size < 0) {
        return (int)size;
    }
    s->size = (uint64_t)size;
    s->nblocks = (s->size + OVERLAY_BLOCK - 1) / OVERLAY_BLOCK;
    s->held = calloc(s->nblocks / 64 + 1, sizeof *s->held);
    if (!s->held) {
        return err_set(ENOMEM, "%s: overlay bitmap", ESC_NAME(n));
    }
    /* The file grows as blocks are written: reads past its end are
     * zeroes, and it is never sized up front, which would fail for an
     * image larger than the file system's largest file even if the
     * client writes little.  (A failed open is not closed: undo here.) */
    s->fd = overlay_tmpfile(n->filename);
    if (s->fd < 0) {
        free(s->held);
        return s->fd;
    }
    pthread_mutex_init(&s->cow_lock, NULL);
    n->supported_write_flags = BLK_REQ_FUA;
    n->supported_zero_flags = BLK_REQ_FUA | BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK;
    n->supported_discard_flags = BLK_REQ_FUA;
    return 0;
}

static void overlay_close(struct blk_node *n)
{
    struct overlay *s = n->opaque;

    close(s->fd);
    pthread_mutex_destroy(&s->cow_lock);
    free(s->held);
}

/* Not registered: no image is ever probed or named as an overlay. */
static const struct blk_driver overlay_driver = {
    .name = "overlay",
    .is_format = true,
    .state_size = sizeof(struct overlay),
    .open = overlay_open,
    .close = overlay_close,
    .preadv = overlay_preadv,
    .pwritev = overlay_pwritev,
    .pwrite_zeroes = overlay_pwrite_zeroes,
    .discard = overlay_discard,
    .flush = overlay_flush,
    .block_status = overlay_block_status,
    .get_length = overlay_get_length,
    .load_bitmap = overlay_load_bitmap,
};

int blk_overlay_open(struct blk_node **out, struct blk_node *base)
{
    struct blk_open_opts o = {.filename = base->filename, .read_only = false};

    return blk_node_open(out, &overlay_driver, base, &o);
}
