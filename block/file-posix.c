/* block/file-posix.c: the "file" protocol driver, a regular file or block
 * device on a POSIX system.
 *
 * Data moves through an engine (threads or io_uring, file-posix-*.c).
 * Native FUA is a write with RWF_DSYNC; flush is fdatasync.  Zeroing and
 * discard use fallocate (zero range, punch hole) or the block device
 * ioctls, and report -ENOTSUP rather than writing zeroes themselves: the
 * generic layer owns that fallback.  Block status comes from SEEK_DATA and
 * SEEK_HOLE.  qemu's image locks (file-lock.c) are taken right after the
 * open, before the first byte is read, and follow set_perm.
 *
 * O_DIRECT (cache=none/directsync) needs aligned requests; the generic
 * layer pads them, which can carry a write past the end of a file whose
 * size is not a multiple of the alignment.  Such a file keeps a second,
 * buffered descriptor for its last partial block (tail_fd), so the file
 * never grows and the tail is still written.
 *
 * Buffered writes to one regular file run one at a time in the kernel
 * (every Linux file system takes the inode lock exclusively for them), and
 * a writer waiting for that lock spins while the holder copies into the
 * page cache.  Large buffered writes therefore queue on a mutex here, where
 * a waiter sleeps and leaves its CPU to the copy (measured: converting into
 * a served file with 8 parallel 2 MiB writes spent a quarter of all CPU in
 * rwsem_spin_on_owner).  Block devices and O_DIRECT writes run in
 * parallel in the kernel and are left alone.
 *
 * A buffered write of 2 MiB at a 2 MiB boundary makes the kernel (6.x,
 * with large folios) allocate one 2 MiB folio, and on a VM whose free
 * memory is reported to the host (virtio-balloon free page reporting)
 * such high-order pages come back from the host cold: copying into them
 * measured 3-14x slower than into the smaller folios of 256 KiB writes
 * (1.4 GB of 2 MiB writes: 1.0-3.9 s against 0.25-0.55 s).  So on such a
 * machine, and only there (common/host-memory.h tells at run time),
 * buffered writes go to the kernel in pieces of FILE_BUFFERED_PIECE;
 * elsewhere a write goes whole, as one syscall. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <linux/fs.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/host-memory.h"
#include "common/log.h"
#include "common/util.h"
#include "driver.h"
#include "esc-name.h"
#include "file-lock.h"
#include "file-open.h"
#include "file-posix.h"

#define FILE_IOV_MAX 64
/* Buffered writes of at least this size take big_write_lock: long enough
 * that sleeping beats spinning in the kernel. */
#define FILE_BIG_WRITE (128u << 10)
/* Where free pages go back to the host, buffered writes reach the
 * kernel in pieces of at most this size. */
#define FILE_BUFFERED_PIECE (256u << 10)

struct file_state {
    int fd;
    int tail_fd; /* buffered, for the unaligned tail with O_DIRECT; -1 */
    bool direct;
    bool is_blockdev;
    const struct file_engine *engine;
    _Atomic int64_t size;
    _Atomic bool no_zero_range; /* learnt: fallocate(ZERO_RANGE) unsupported */
    _Atomic bool no_punch_hole; /* learnt: fallocate(PUNCH_HOLE) unsupported */
    bool serial_big_writes;     /* buffered regular file: see the top of the file */
    uint64_t buffered_piece;    /* largest buffered write at once (0: whole) */
    struct file_stream stream;  /* opts->stream (file-posix-stream.c) */
    pthread_mutex_t big_write_lock;
    struct blk_file_lock *lock; /* qemu's image locks (file-lock.h) */
    bool force_share;           /* opts->force_share: share everything */
    bool no_lock;               /* opts->no_lock: a lock of this process covers the file */
};

static int file_probe_dio_alignment(struct blk_node *n, int fd)
{
    struct statx stx;

    n->request_alignment = 4096; /* safe for every device when unknown */
    n->mem_alignment = 4096;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
        n->request_alignment = MAX(stx.stx_dio_offset_align, 1u);
        n->mem_alignment = MAX(stx.stx_dio_mem_align, 1u);
    }
    if (!IS_POW2(n->request_alignment) || !IS_POW2(n->mem_alignment)) {
        return err_setx(EINVAL, "%s: odd direct I/O alignment %u/%u", ESC_NAME(n),
                        n->request_alignment, n->mem_alignment);
    }
    return 0;
}

static int file_open_fds(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct file_state *s = n->opaque;
    int flags = (opts->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    struct stat st;
    int r;

    s->fd = s->tail_fd = -1;
    s->direct = opts->direct;
    s->buffered_piece = host_reclaims_free_pages() ? FILE_BUFFERED_PIECE : 0;
    s->engine = &file_engine_threads;
    if (opts->aio == BLK_AIO_IO_URING) {
#ifdef HAVE_LIBURING
        s->engine = &file_engine_uring;
#else
        return err_setx(ENOTSUP, "--aio=io_uring: diskimg was built without liburing");
#endif
    }
    r = s->engine->available();
    if (r < 0) {
        return r;
    }
    if (!opts->filename) {
        return err_setx(EINVAL, "the file driver needs a filename");
    }
    r = blk_file_open_checked(opts->filename, flags | (s->direct ? O_DIRECT : 0), &s->fd, &st);
    if (r < 0) {
        return r;
    }
    if (S_ISBLK(st.st_mode)) {
        uint64_t bytes;
        if (ioctl(s->fd, BLKGETSIZE64, &bytes) < 0) {
            return err_set(errno, "%s: BLKGETSIZE64", ESC_STR(opts->filename));
        }
        s->is_blockdev = true;
        s->size = (int64_t)bytes;
    } else {
        s->size = st.st_size;
        s->serial_big_writes = !s->direct;
    }
    if (s->direct) {
        r = file_probe_dio_alignment(n, s->fd);
        if (r < 0) {
            return r;
        }
        if (s->size % n->request_alignment) {
            struct stat tail;
            r = blk_file_open_checked(opts->filename, flags, &s->tail_fd, &tail);
            if (r < 0) {
                return r;
            }
        }
    }
    if (file_kernel_has_rwf_dsync() && !debug_block_emulate_fua) {
        n->supported_write_flags = BLK_REQ_FUA;
        /* Longer buffered FUA writes are written in pieces and flushed by
         * the generic layer (one RWF_DSYNC write would be one large folio,
         * see the top of the file). */
        n->native_fua_max = s->direct ? 0 : s->buffered_piece;
    }
    n->supported_zero_flags = BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK;
    return 0;
}

static void file_close(struct blk_node *n)
{
    struct file_state *s = n->opaque;

    pthread_mutex_destroy(&s->big_write_lock);
    file_stream_destroy(&s->stream);
    blk_file_lock_release(s->lock);
    if (s->fd >= 0) {
        close(s->fd);
    }
    if (s->tail_fd >= 0) {
        close(s->tail_fd);
    }
}

/* -U shares everything, whatever the stack above asks. */
static int file_set_perm(struct blk_node *n, const struct blk_perms *p)
{
    struct file_state *s = n->opaque;
    struct blk_perms mine = *p;

    if (s->force_share) {
        mine.shared = mine.shared_here = BLK_PERM_ALL;
    }
    if (s->no_lock) {
        return 0;
    }
    if (!s->lock) {
        return blk_file_lock_acquire(&s->lock, s->fd, n->filename, &mine, false);
    }
    return blk_file_lock_update(s->lock, &mine);
}

/* Locked right after the open, before a byte is read or written. */
static int file_lock(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct file_state *s = n->opaque;

    s->force_share = opts->force_share;
    s->no_lock = opts->no_lock;
    return file_set_perm(n, &opts->perms);
}

static int file_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct file_state *s = n->opaque;
    int r;

    pthread_mutex_init(&s->big_write_lock, NULL);
    /* Streaming is for the page cache; O_DIRECT has nothing to give back. */
    file_stream_init(&s->stream, opts->stream && !opts->direct);
    r = file_open_fds(n, opts);
    if (r == 0) {
        r = file_lock(n, opts);
    }
    if (r == 0) {
        file_stream_check_cold(&s->stream, s->fd, (uint64_t)atomic_load(&s->size));
    }
    if (r < 0) {
        pthread_mutex_destroy(&s->big_write_lock);
        file_stream_destroy(&s->stream);
        /* the generic layer does not call close after a failed open */
        if (s->fd >= 0) {
            close(s->fd);
        }
        if (s->tail_fd >= 0) {
            close(s->tail_fd);
        }
    }
    return r;
}

/* Copy iov into a local array that file_advance() may modify. */
static int file_iov_copy(struct iovec *dst, const struct iovec *src, int iovcnt)
{
    if (iovcnt > FILE_IOV_MAX) {
        return -1;
    }
    memcpy(dst, src, sizeof *src * (size_t)iovcnt);
    return iovcnt;
}

/* Drop 'done' bytes from the front of *iov / *iovcnt. */
static void file_advance(struct iovec **iov, int *iovcnt, size_t done)
{
    while (*iovcnt > 0 && done >= (*iov)->iov_len) {
        done -= (*iov)->iov_len;
        (*iov)++;
        (*iovcnt)--;
    }
    if (*iovcnt > 0 && done) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + done;
        (*iov)->iov_len -= done;
    }
}

static int file_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov_in, int iovcnt)
{
    struct file_state *s = n->opaque;
    struct iovec local[FILE_IOV_MAX], *iov = local;
    uint64_t len = iov_length(iov_in, iovcnt), left = len;
    uint64_t pos = off;

    if (file_iov_copy(local, iov_in, iovcnt) < 0) {
        return err_setx(EINVAL, "%s: too many iovec elements (%d)", ESC_NAME(n), iovcnt);
    }
    /* (what the file holds of the range: a read that stops at its end was
     * not missing anything) */
    int64_t size = atomic_load(&s->size);
    uint64_t in_file = (int64_t)off < size ? MIN(len, (uint64_t)size - off) : 0;
    ssize_t cached = file_stream_read_cached(&s->stream, s->fd, iov, iovcnt, off, in_file);
    file_advance(&iov, &iovcnt, (size_t)cached);
    pos += (uint64_t)cached;
    left -= (uint64_t)cached;
    while (left > 0) {
        ssize_t r = s->engine->preadv(s->fd, iov, iovcnt, pos);
        if (r < 0) {
            return err_set((int)-r, "%s: read at offset %" PRIu64, ESC_NAME(n), pos);
        }
        if (r == 0 || (int64_t)(pos + (uint64_t)r) >= atomic_load(&s->size)) {
            /* End of file: what lies beyond reads as zeroes. */
            file_advance(&iov, &iovcnt, (size_t)r);
            iov_memset(iov, iovcnt, 0, 0, left - (uint64_t)r);
            break;
        }
        file_advance(&iov, &iovcnt, (size_t)r);
        pos += (uint64_t)r;
        left -= (uint64_t)r;
    }
    file_stream_read_done(&s->stream, s->fd, off, len);
    return 0;
}

/* Write the first 'left' bytes of iov at pos with fd, looping over short
 * writes (iov may hold more: the padded tail of an O_DIRECT write). */
static int file_write_loop(struct blk_node *n, int fd, uint64_t pos, const struct iovec *iov_in,
                           int iovcnt_in, uint64_t left, int rwf)
{
    struct file_state *s = n->opaque;
    struct iovec local[FILE_IOV_MAX], *iov = local;
    int iovcnt = iov_slice(iov_in, iovcnt_in, 0, left, local, FILE_IOV_MAX);

    if (iovcnt < 0) {
        return err_setx(EINVAL, "%s: too many iovec elements", ESC_NAME(n));
    }
    /* Buffered writes go to the kernel in pieces (see the top of the
     * file); a FUA write (at most native_fua_max) stays whole, so it syncs
     * once. */
    bool buffered = (fd != s->fd || !s->direct) && !rwf;
    uint64_t piece_max = buffered && s->buffered_piece ? s->buffered_piece : UINT64_MAX;
    while (left > 0) {
        struct iovec piece[FILE_IOV_MAX];
        const struct iovec *wiov = iov;
        int wcnt = iovcnt;
        if (left > piece_max) {
            wcnt = iov_slice(iov, iovcnt, 0, piece_max, piece, FILE_IOV_MAX);
            wiov = piece;
        }
        ssize_t r = s->engine->pwritev(fd, wiov, wcnt, pos, rwf);
        if (r == -EOPNOTSUPP && rwf) {
            return -EOPNOTSUPP; /* the generic layer falls back to write + flush */
        }
        if (r < 0) {
            return err_set((int)-r, "%s: write at offset %" PRIu64, ESC_NAME(n), pos);
        }
        if (r == 0) {
            return err_setx(EIO, "%s: write at offset %" PRIu64 " wrote nothing", ESC_NAME(n), pos);
        }
        file_advance(&iov, &iovcnt, (size_t)r);
        pos += (uint64_t)r;
        left -= (uint64_t)r;
    }
    return 0;
}

static int file_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov_in, int iovcnt,
                        unsigned flags)
{
    struct file_state *s = n->opaque;
    struct iovec local[FILE_IOV_MAX];
    uint64_t len = iov_length(iov_in, iovcnt);
    int rwf = (flags & BLK_REQ_FUA) ? RWF_DSYNC : 0;
    int64_t size = atomic_load(&s->size);
    int r;

    if (file_iov_copy(local, iov_in, iovcnt) < 0) {
        return err_setx(EINVAL, "%s: too many iovec elements (%d)", ESC_NAME(n), iovcnt);
    }
    if (s->tail_fd >= 0 && !n->growable && off + len > (uint64_t)size) {
        /* Padding past the end of an O_DIRECT file: the aligned part goes
         * direct, the partial last block through the buffered descriptor,
         * and nothing lands beyond the end. */
        uint64_t tail_start = ROUND_DOWN((uint64_t)size, n->request_alignment);
        uint64_t direct_len = tail_start > off ? tail_start - off : 0;
        struct iovec *iov = local;

        if (direct_len) {
            r = file_write_loop(n, s->fd, off, iov, iovcnt, direct_len, rwf);
            if (r < 0) {
                return r;
            }
            file_advance(&iov, &iovcnt, direct_len);
        }
        uint64_t tail_off = off + direct_len;
        if ((uint64_t)size > tail_off) {
            return file_write_loop(n, s->tail_fd, tail_off, iov, iovcnt, (uint64_t)size - tail_off,
                                   rwf);
        }
        return 0;
    }
    /* (FUA writes sync after the kernel drops its lock: they overlap.) */
    bool serial = s->serial_big_writes && len >= FILE_BIG_WRITE && !rwf;
    if (serial) {
        pthread_mutex_lock(&s->big_write_lock);
    }
    r = file_write_loop(n, s->fd, off, local, iovcnt, len, rwf);
    if (serial) {
        pthread_mutex_unlock(&s->big_write_lock);
    }
    if (r == 0) {
        file_stream_write_done(&s->stream, s->fd, off, len);
    }
    if (r == 0 && n->growable) {
        int64_t end = (int64_t)(off + len);
        int64_t cur = atomic_load(&s->size);
        while (end > cur && !atomic_compare_exchange_weak(&s->size, &cur, end)) {
        }
    }
    return r;
}

static bool file_unsupported(int err)
{
    return err == EOPNOTSUPP || err == ENOSYS || err == EINVAL;
}

static int file_punch_hole(struct file_state *s, uint64_t off, uint64_t len)
{
    if (atomic_load(&s->no_punch_hole)) {
        return -ENOTSUP;
    }
    if (fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) == 0) {
        return 0;
    }
    if (file_unsupported(errno)) {
        atomic_store(&s->no_punch_hole, true);
        return -ENOTSUP;
    }
    return -errno;
}

static int file_zero_range(struct file_state *s, uint64_t off, uint64_t len)
{
    if (atomic_load(&s->no_zero_range)) {
        return -ENOTSUP;
    }
    if (fallocate(s->fd, FALLOC_FL_ZERO_RANGE, (off_t)off, (off_t)len) == 0) {
        return 0;
    }
    if (file_unsupported(errno)) {
        atomic_store(&s->no_zero_range, true);
        return -ENOTSUP;
    }
    return -errno;
}

static int file_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct file_state *s = n->opaque;
    int r = -ENOTSUP;

    /* A punched hole reads back as zeroes, on files and on block devices
     * (where the kernel only punches if the device zeroes discarded
     * blocks). */
    if (flags & BLK_REQ_MAY_UNMAP) {
        r = file_punch_hole(s, off, len);
    }
    if (r == -ENOTSUP) {
        r = file_zero_range(s, off, len);
    }
    if (r == -ENOTSUP && !s->is_blockdev && !atomic_load(&s->no_punch_hole)) {
        /* Punch, then allocate again: zeroes without deallocating. */
        r = file_punch_hole(s, off, len);
        if (r == 0 && fallocate(s->fd, 0, (off_t)off, (off_t)len) < 0 && !file_unsupported(errno)) {
            r = -errno;
        }
    }
    if (r == -ENOTSUP) {
        return err_setx(ENOTSUP, "%s: no fast way to write zeroes", ESC_NAME(n));
    }
    if (r < 0) {
        return err_set(-r, "%s: zeroing %" PRIu64 "+%" PRIu64, ESC_NAME(n), off, len);
    }
    if (n->growable && (int64_t)(off + len) > atomic_load(&s->size)) {
        /* A punched hole past the end keeps the size: extend explicitly. */
        if (ftruncate(s->fd, (off_t)(off + len)) < 0) {
            return err_set(errno, "%s: extending to %" PRIu64, ESC_NAME(n), off + len);
        }
        atomic_store(&s->size, (int64_t)(off + len));
    }
    return 0;
}

static int file_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct file_state *s = n->opaque;
    int r;

    (void)flags; /* no native FUA: the generic layer flushes after us */

    if (s->is_blockdev) {
        uint64_t start = ROUND_UP(off, 512), end = ROUND_DOWN(off + len, 512);
        if (end > start && ioctl(s->fd, BLKDISCARD, (uint64_t[2]){start, end - start}) < 0 &&
            !file_unsupported(errno)) {
            return err_set(errno, "%s: discard %" PRIu64 "+%" PRIu64, ESC_NAME(n), off, len);
        }
        return 0;
    }
    r = file_punch_hole(s, off, len);
    if (r == -ENOTSUP) {
        return 0; /* discard is advisory */
    }
    if (r < 0) {
        return err_set(-r, "%s: discard %" PRIu64 "+%" PRIu64, ESC_NAME(n), off, len);
    }
    return 0;
}

static const struct blk_driver file_driver;

/* Errors of copy_file_range that mean "not between these files": the
 * caller copies through buffers instead. */
static bool file_no_offload(int err)
{
    return err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == EBADF ||
           err == ETXTBSY || err == EPERM;
}

int file_copy_range(struct blk_node *src, uint64_t soff, struct blk_node *dst, uint64_t doff,
                    uint64_t len)
{
    if (src->drv != &file_driver || dst->drv != &file_driver) {
        return -ENOTSUP;
    }
    struct file_state *ss = src->opaque, *ds = dst->opaque;
    loff_t in = (loff_t)soff, out = (loff_t)doff;

    if (ss->direct || ds->direct) {
        return -ENOTSUP; /* the kernel's copy goes through the page cache */
    }
    for (uint64_t done = 0; done < len;) {
        ssize_t n = copy_file_range(ss->fd, &in, ds->fd, &out, len - done, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && file_no_offload(errno)) {
            return -ENOTSUP;
        }
        if (n < 0) {
            return err_set(errno, "copy_file_range %s to %s at offset %" PRIu64, ESC_NAME(src),
                           ESC_NAME(dst), doff + done);
        }
        if (n == 0) {
            return -ENOTSUP; /* the source ends early: let the reads say why */
        }
        done += (uint64_t)n;
    }
    file_stream_write_done(&ds->stream, ds->fd, doff, len);
    return 0;
}

static int file_flush(struct blk_node *n)
{
    struct file_state *s = n->opaque;
    int r = s->engine->fdatasync(s->fd);

    if (r < 0) {
        return err_set(-r, "%s: fdatasync", ESC_NAME(n));
    }
    file_stream_flushed(&s->stream, s->fd);
    return 0;
}

static int file_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    struct file_state *s = n->opaque;
    int64_t size = atomic_load(&s->size);
    /* A raw file is the image: holes are part of it, reading as zeroes. */
    struct blk_extent hole = {.flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET,
                              .offset = off,
                              .depth = 1,
                              .filename = n->filename};
    struct blk_extent data = {.flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET,
                              .offset = off,
                              .depth = 1,
                              .filename = n->filename};
    off_t data_pos, hole_pos;

    if ((int64_t)off >= size) {
        *ext = hole;
        ext->length = len;
        return 0;
    }
    len = MIN(len, (uint64_t)size - off);
    data_pos = lseek(s->fd, (off_t)off, SEEK_DATA);
    if (data_pos < 0 && errno == ENXIO) {
        *ext = hole; /* no data from off to the end of the file */
        ext->length = len;
        return 0;
    }
    if (data_pos < 0) {
        *ext = data; /* the file system cannot tell: everything is data */
        ext->length = len;
        return 0;
    }
    if ((uint64_t)data_pos > off) {
        *ext = hole;
        ext->length = MIN(len, (uint64_t)data_pos - off);
        return 0;
    }
    hole_pos = lseek(s->fd, (off_t)off, SEEK_HOLE);
    if (hole_pos < 0 || (uint64_t)hole_pos <= off) {
        hole_pos = (off_t)(off + len);
    }
    *ext = data;
    ext->length = MIN(len, (uint64_t)hole_pos - off);
    return 0;
}

static int file_prefetch(struct blk_node *n, uint64_t off, uint64_t len)
{
    struct file_state *s = n->opaque;

    if (!s->direct) {
        (void)posix_fadvise(s->fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
    }
    return 0;
}

/* Whole pages around the range: the kernel drops only whole ones. */
static void file_uncache(struct blk_node *n, uint64_t off, uint64_t len)
{
    struct file_state *s = n->opaque;
    uint64_t page = 4096, from = off / page * page;

    if (!s->direct) {
        (void)posix_fadvise(s->fd, (off_t)from, (off_t)ROUND_UP(off + len - from, page),
                            POSIX_FADV_DONTNEED);
    }
}

static int64_t file_get_length(struct blk_node *n)
{
    struct file_state *s = n->opaque;

    return atomic_load_explicit(&s->size, memory_order_relaxed);
}

static int file_truncate(struct blk_node *n, uint64_t len)
{
    struct file_state *s = n->opaque;

    if (s->is_blockdev) {
        return err_setx(ENOTSUP, "%s: cannot resize a block device", ESC_NAME(n));
    }
    if (len > INT64_MAX) {
        return err_setx(EFBIG, "%s: %" PRIu64 " bytes is more than a file can hold", ESC_NAME(n),
                        len);
    }
    if (ftruncate(s->fd, (off_t)len) < 0) {
        if (errno == EFBIG) {
            return err_setx(EFBIG,
                            "%s: cannot make the file %" PRIu64 " bytes long: the file system "
                            "does not allow files that large",
                            ESC_NAME(n), len);
        }
        return err_set(errno, "%s: truncate to %" PRIu64, ESC_NAME(n), len);
    }
    atomic_store(&s->size, (int64_t)len);
    return 0;
}

static int64_t file_allocated_size(struct blk_node *n)
{
    struct file_state *s = n->opaque;
    struct stat st;

    if (fstat(s->fd, &st) < 0) {
        return -errno;
    }
    return (int64_t)st.st_blocks * 512;
}

static const struct blk_driver file_driver = {
    .name = "file",
    .state_size = sizeof(struct file_state),
    .open = file_open,
    .close = file_close,
    .set_perm = file_set_perm,
    .preadv = file_preadv,
    .pwritev = file_pwritev,
    .pwrite_zeroes = file_pwrite_zeroes,
    .discard = file_discard,
    .flush = file_flush,
    .block_status = file_block_status,
    .prefetch = file_prefetch,
    .uncache = file_uncache,
    .get_length = file_get_length,
    .truncate = file_truncate,
    .allocated_size = file_allocated_size,
};

BLK_REGISTER_DRIVER(file_driver)
