/* block/copy.c: copying one image into another (what convert does).
 *
 * Workers claim ranges of the source in offset order.  Each claim is
 * homogeneous by block status: a range that reads as zeroes is never read
 * (and not written at all when the target is known to be zero), a range
 * with data is read whole and then split at min_sparse granularity, so
 * zeroes written as data become holes too.  Reads overlap freely; writes
 * land in offset order unless out-of-order writes were asked for, which
 * keeps a growable target (qcow2) laid out sequentially.  Into a raw
 * image on a server (an NBD export) the writes only need to be sent in
 * order, so they overlap: a claim passes the turn on as its write starts.
 * Such a target is also flushed every EARLY_FLUSH bytes, so that the
 * server's write-back overlaps the copy instead of following it.
 *
 * Compressing and inflating cost CPU, not I/O, so the workers are as many
 * as the usable CPUs when that is more than -m; -m still bounds the
 * requests in flight: every read and write takes one of -m I/O slots,
 * except the read of compressed source data, which inflates as it reads. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "copy-aux.h"
#include "hasher.h"
#include "common/cleanup.h"
#include "common/cpus.h"
#include "common/error.h"
#include "common/turns.h"
#include "common/util.h"

#define DEFAULT_BUFFER (2u << 20)
/* A target on a server is flushed after every so many bytes copied
 * (measured: 16 to 64 MiB all beat one flush at the end, nbd-copy.sh). */
#define EARLY_FLUSH (32ULL << 20)
#define MAX_ZERO_CLAIM (1ULL << 30) /* one zero claim at most (progress stays smooth) */
#define MAX_WORKERS 64              /* -m */
#define MAX_THREADS TURNS_MAX       /* workers, when there are more CPUs than -m */

enum claim_kind { CLAIM_DATA, CLAIM_ZERO, CLAIM_SKIP };

struct copy {
    struct blk_image *src, *dst;
    const struct blk_copy_opts *o;
    uint64_t size;
    uint64_t buffer;
    uint64_t cluster; /* compression unit */
    /* Claims start and end on multiples of this (0: anywhere): the
     * compression cluster, and the hash block with a checksum. */
    uint64_t align;
    /* --checksum: the target's content, from the buffers read (NULL: none). */
    struct blk_hasher *hasher;
    /* Checksum of a target larger than the source (or with a partial last
     * block) whose tail is not known to read as zeroes: the block where
     * the source ends, and what follows it, are read from the target
     * afterwards, so the copy hashes only up to hash_end. */
    uint64_t hash_end;
    /* Room for one compressed cluster: the cluster, or for a target
     * that takes only compressed clusters (whatever deflate makes of
     * incompressible data) a little more. */
    uint64_t slot;
    pthread_mutex_t lock;
    struct turns turns; /* in-order writes, by claim number */
    pthread_cond_t io_free;
    struct blk_rate rate; /* -r */
    _Atomic bool offload; /* -C, until copy offloading fails once */
    _Atomic uint64_t offloaded;
    /* In-order writes pass the turn when they start, not when they end:
     * a raw target on a server, which sees them in order either way. */
    bool pipelined;
    /* A target on a server: flush every flush_every bytes written, so
     * its disk writes back while the copy goes on (0: only at the end). */
    uint64_t flush_every;
    _Atomic uint64_t unflushed;
    _Atomic bool flushing;
    unsigned io_limit;   /* -m */
    unsigned io_busy;    /* under lock */
    uint64_t next_claim; /* under lock */
    uint64_t next_seq;   /* under lock: the number of the next claim */
    uint64_t next_write; /* under lock: in-order writes */
    uint64_t done;       /* under lock */
    int err;             /* first error, under lock */
    char msg[512];
};

struct claim {
    uint64_t start, len;
    uint64_t seq; /* claims are numbered in offset order */
    enum claim_kind kind;
    bool inflates; /* the source stores some of it compressed */
};

static bool copy_failed_locked(struct copy *c)
{
    return c->err || (c->o->cancel && *c->o->cancel);
}

static void copy_fail(struct copy *c, int r)
{
    pthread_mutex_lock(&c->lock);
    if (!c->err) {
        c->err = r;
        snprintf(c->msg, sizeof c->msg, "%s", err_msg_or(r));
    }
    turns_wake_all(&c->turns);
    pthread_cond_broadcast(&c->io_free);
    pthread_mutex_unlock(&c->lock);
}

/* Take one of the -m I/O slots (reads and writes, not the CPU work). */
static void io_begin(struct copy *c)
{
    pthread_mutex_lock(&c->lock);
    while (c->io_busy >= c->io_limit && !copy_failed_locked(c)) {
        pthread_cond_wait(&c->io_free, &c->lock);
    }
    c->io_busy++;
    pthread_mutex_unlock(&c->lock);
}

static void io_end(struct copy *c)
{
    pthread_mutex_lock(&c->lock);
    c->io_busy--;
    pthread_cond_signal(&c->io_free);
    pthread_mutex_unlock(&c->lock);
}

static enum claim_kind extent_kind(const struct copy *c, const struct blk_extent *ext)
{
    if (c->o->top_only && ext->depth != 1) {
        return CLAIM_SKIP; /* the target's backing file has it */
    }
    if ((ext->flags & BLK_EXT_ZERO) && c->o->min_sparse) {
        return CLAIM_ZERO;
    }
    return CLAIM_DATA;
}

/* A data extent can be short (a compressed source answers one cluster at
 * a time): take the data extents after it too, up to a buffer, so that a
 * claim is not a single cluster and workers do not queue for every one. */
static int extend_data_locked(struct copy *c, struct claim *cl, uint64_t *len)
{
    while (*len < c->buffer && cl->start + *len < c->size) {
        struct blk_extent ext;
        uint64_t off = cl->start + *len;
        int r = blk_image_block_status(c->src, off, c->size - off, &ext);
        if (r < 0 && c->o->salvage) {
            err_clear(); /* the next claim asks again */
            break;
        }
        if (r < 0) {
            return r;
        }
        if (extent_kind(c, &ext) != CLAIM_DATA) {
            break;
        }
        cl->inflates |= !!(ext.flags & BLK_EXT_INFLATE);
        *len += ext.length;
    }
    return 0;
}

/* --salvage: block status failed at off.  Ask again for one sector; if
 * that fails too, report it and read the sector as data (as qemu-img). */
static int salvage_status_locked(struct copy *c, uint64_t off, struct blk_extent *ext)
{
    uint64_t len = MIN((uint64_t)BLK_SALVAGE_SECTOR, c->size - off);
    int r;

    err_clear();
    r = blk_image_block_status(c->src, off, len, ext);
    if (r == 0) {
        return 0;
    }
    err_clear();
    if (c->o->salvaged) {
        c->o->salvaged(c->o->salvaged_opaque, off, true, -r);
    }
    *ext = (struct blk_extent){
        .length = len, .flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED, .layer = 0, .depth = 1};
    return 0;
}

/* Claim the next homogeneous range.  Returns 1 when there is none left. */
static int claim_next_locked(struct copy *c, struct claim *cl)
{
    struct blk_extent ext;
    int r;

    if (c->next_claim >= c->size) {
        return 1;
    }
    cl->start = c->next_claim;
    r = blk_image_block_status(c->src, cl->start, c->size - cl->start, &ext);
    if (r < 0 && c->o->salvage) {
        r = salvage_status_locked(c, cl->start, &ext);
    }
    if (r < 0) {
        return r;
    }
    cl->kind = extent_kind(c, &ext);
    cl->inflates = ext.flags & BLK_EXT_INFLATE;
    if (cl->kind == CLAIM_DATA) {
        r = extend_data_locked(c, cl, &ext.length);
        if (r < 0) {
            return r;
        }
    }
    uint64_t max = cl->kind == CLAIM_DATA ? c->buffer : MAX_ZERO_CLAIM;
    uint64_t end = cl->start + MIN(ext.length, max);
    if (c->align) {
        /* Whole clusters or hash blocks only (claims start on a boundary). */
        uint64_t ext_end = end;
        end = MIN(ROUND_UP(ext_end, c->align), c->size);
        if (cl->kind != CLAIM_DATA && end > ext_end) {
            uint64_t aligned = ROUND_DOWN(ext_end, c->align);
            if (aligned > cl->start) {
                end = aligned; /* stop before the mixed unit */
            } else {
                cl->kind = CLAIM_DATA; /* one mixed unit: read (and compress) it whole */
                end = MIN(cl->start + c->align, c->size);
            }
        }
        if (cl->kind == CLAIM_DATA) {
            end = MIN(end, cl->start + c->buffer);
        }
    }
    cl->len = end - cl->start;
    cl->seq = c->next_seq++;
    c->next_claim = cl->start + cl->len;
    return 0;
}

static void wait_turn(struct copy *c, const struct claim *cl)
{
    if (c->o->out_of_order) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    while (c->next_write != cl->start && !copy_failed_locked(c)) {
        turns_wait(&c->turns, cl->seq, &c->lock);
    }
    pthread_mutex_unlock(&c->lock);
}

/* The next claim in offset order may write now. */
static void pass_turn_locked(struct copy *c, const struct claim *cl)
{
    c->next_write = cl->start + cl->len;
    turns_pass(&c->turns, cl->seq);
}

static void finish_claim(struct copy *c, const struct claim *cl)
{
    uint64_t done;

    pthread_mutex_lock(&c->lock);
    if (!c->o->out_of_order && !c->pipelined) {
        pass_turn_locked(c, cl);
    }
    c->done += cl->len;
    done = c->done;
    pthread_mutex_unlock(&c->lock);
    if (c->o->progress) {
        c->o->progress(c->o->progress_opaque, done, c->size);
    }
}

static int write_zero_range(struct copy *c, uint64_t off, uint64_t len, const uint8_t *zeroes)
{
    if (c->o->min_sparse == 0) {
        /* -S 0: allocate everything, zeroes written as data */
        for (uint64_t pos = 0; pos < len;) {
            uint64_t n = MIN(len - pos, c->buffer);
            int r = blk_image_pwrite(c->dst, off + pos, zeroes, n, 0);
            if (r < 0) {
                return r;
            }
            pos += n;
        }
        return 0;
    }
    if (c->o->target_is_zero) {
        return 0;
    }
    return blk_image_pwrite_zeroes(c->dst, off, len, BLK_REQ_MAY_UNMAP);
}

/* Write a data buffer, turning zero runs of at least min_sparse (aligned
 * to absolute offsets) into holes. */
static int write_sparse(struct copy *c, uint64_t off, const uint8_t *buf, uint64_t len,
                        const uint8_t *zeroes)
{
    uint64_t g = c->o->min_sparse;
    uint64_t pos = 0;

    if (g == 0) {
        blk_rate_wait(&c->rate, len, c->o->cancel);
        return blk_image_pwrite(c->dst, off, buf, len, 0);
    }
    while (pos < len) {
        uint64_t run = pos;
        bool zero = false, first = true;
        while (run < len) {
            uint64_t step = MIN(g - (off + run) % g, len - run);
            bool z = step == g && buffer_is_zero(buf + run, step);
            if (first) {
                zero = z;
                first = false;
            } else if (z != zero) {
                break;
            }
            run += step;
        }
        if (!zero) {
            blk_rate_wait(&c->rate, run - pos, c->o->cancel);
        }
        int r = zero ? write_zero_range(c, off + pos, run - pos, zeroes)
                     : blk_image_pwrite(c->dst, off + pos, buf + pos, run - pos, 0);
        if (r < 0) {
            return r;
        }
        pos = run;
    }
    return 0;
}

/* Start the target's write-back early: a server holds what it was sent
 * in its page cache until a flush, so a single flush at the end would
 * leave the whole copy's write-back after the copy.  One worker at a
 * time flushes; the others go on copying. */
static int early_flush(struct copy *c, const struct claim *cl)
{
    if (!c->flush_every || cl->kind != CLAIM_DATA) {
        return 0;
    }
    if (atomic_fetch_add(&c->unflushed, cl->len) + cl->len < c->flush_every ||
        atomic_exchange(&c->flushing, true)) {
        return 0;
    }
    atomic_store(&c->unflushed, 0);
    int r = blk_image_flush(c->dst);
    atomic_store(&c->flushing, false);
    return r;
}

/* Per-worker buffers. */
struct worker_bufs {
    uint8_t *data; /* c->buffer bytes read from the source */
    uint8_t *out;  /* compression: one cluster-sized slot per cluster */
    size_t *clen;  /* compression: per cluster, see CLUSTER_* */
};

#define CLUSTER_ZERO 0           /* reads as zeroes */
#define CLUSTER_RAW ((size_t)-1) /* does not shrink: written as it is */

/* Compress every cluster of a data claim, before waiting for its turn to
 * write: workers compress in parallel even when writes go in order. */
static int compress_claim(struct copy *c, const struct claim *cl, struct worker_bufs *w)
{
    for (uint64_t pos = 0, i = 0; pos < cl->len; pos += c->cluster, i++) {
        uint64_t n = MIN(c->cluster, cl->len - pos);
        const uint8_t *in = w->data + pos;
        int r;
        if (buffer_is_zero(in, n)) {
            w->clen[i] = CLUSTER_ZERO;
            continue;
        }
        r = blk_image_compress(c->dst, in, n, w->out + i * c->slot, c->slot, &w->clen[i]);
        if (r == -ENOSPC) {
            w->clen[i] = CLUSTER_RAW;
        } else if (r < 0) {
            return r;
        }
    }
    return 0;
}

static int write_compressed(struct copy *c, const struct claim *cl, const struct worker_bufs *w)
{
    for (uint64_t pos = 0, i = 0; pos < cl->len; pos += c->cluster, i++) {
        uint64_t off = cl->start + pos, n = MIN(c->cluster, cl->len - pos);
        int r;
        if (w->clen[i] == CLUSTER_ZERO) {
            r = c->o->target_is_zero ? 0
                                     : blk_image_pwrite_zeroes(c->dst, off, n, BLK_REQ_MAY_UNMAP);
        } else if (w->clen[i] == CLUSTER_RAW) {
            blk_rate_wait(&c->rate, n, c->o->cancel);
            r = blk_image_pwrite(c->dst, off, w->data + pos, n, 0);
        } else {
            blk_rate_wait(&c->rate, w->clen[i], c->o->cancel);
            r = blk_image_pwrite_compressed(c->dst, off, n, w->out + i * c->slot, w->clen[i]);
        }
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

/* Give the claim's content to the checksum, in the worker (hashing runs
 * on every core; the hasher puts the pieces in order). */
static int hash_claim(struct copy *c, const struct claim *cl, const struct worker_bufs *w)
{
    uint64_t len = MIN(cl->start + cl->len, c->hash_end) - MIN(cl->start, c->hash_end);

    if (!c->hasher || len == 0 || cl->kind == CLAIM_SKIP) {
        return 0;
    }
    return cl->kind == CLAIM_DATA ? blk_hasher_data(c->hasher, cl->start, w->data, len)
                                  : blk_hasher_zero(c->hasher, cl->start, len);
}

static int read_claim(struct copy *c, const struct claim *cl, struct worker_bufs *w)
{
    if (c->o->salvage) {
        return blk_pread_salvage(c->src, cl->start, w->data, cl->len, c->o->salvaged,
                                 c->o->salvaged_opaque);
    }
    return blk_image_pread(c->src, cl->start, w->data, cl->len);
}

/* -C: copy a data claim without reading it here.  1: it cannot be
 * offloaded (and, unless only its source data is stored otherwise, no
 * later claim will try): read and write it. */
static int offload_claim(struct copy *c, const struct claim *cl)
{
    int r = blk_copy_range(c->src, c->dst, cl->start, cl->len);
    if (r == -ENOTSUP) {
        atomic_store(&c->offload, false);
        return 1;
    }
    if (r == 1) {
        return 1;
    }
    if (r == 0) {
        atomic_fetch_add(&c->offloaded, cl->len);
        blk_rate_wait(&c->rate, cl->len, c->o->cancel); /* (paces the next write) */
    }
    return r;
}

static int process_claim(struct copy *c, const struct claim *cl, struct worker_bufs *w,
                         const uint8_t *zeroes)
{
    bool offload = cl->kind == CLAIM_DATA && atomic_load(&c->offload);
    bool data_read = cl->kind == CLAIM_DATA && !offload;
    int r = 0;

    if (data_read) {
        if (!cl->inflates) {
            io_begin(c);
        }
        r = read_claim(c, cl, w);
        if (!cl->inflates) {
            io_end(c);
        }
        if (r == 0 && c->o->compress) {
            r = compress_claim(c, cl, w);
        }
    }
    if (r == 0) {
        r = hash_claim(c, cl, w);
    }
    if (r < 0) {
        return r;
    }
    wait_turn(c, cl);
    pthread_mutex_lock(&c->lock);
    bool stop = copy_failed_locked(c);
    pthread_mutex_unlock(&c->lock);
    if (stop) {
        return 0;
    }
    io_begin(c);
    if (c->pipelined) {
        pthread_mutex_lock(&c->lock);
        pass_turn_locked(c, cl); /* this write has its slot: the next may follow */
        pthread_mutex_unlock(&c->lock);
    }
    switch (cl->kind) {
    case CLAIM_SKIP:
        break;
    case CLAIM_ZERO:
        r = write_zero_range(c, cl->start, cl->len, zeroes);
        break;
    case CLAIM_DATA:
        if (offload && (r = offload_claim(c, cl)) != 1) {
            break;
        }
        if (offload) {
            r = read_claim(c, cl, w); /* offloading failed: the usual way */
            if (r < 0) {
                break;
            }
        }
        r = c->o->compress ? write_compressed(c, cl, w)
                           : write_sparse(c, cl->start, w->data, cl->len, zeroes);
        break;
    }
    io_end(c);
    return r;
}

struct worker_arg {
    struct copy *c;
    const uint8_t *zeroes;
};

static void *copy_worker(void *arg)
{
    struct worker_arg *wa = arg;
    struct copy *c = wa->c;
    struct worker_bufs w = {NULL, NULL, NULL};
    void *data = NULL;

    if (posix_memalign(&data, 4096, c->buffer) != 0 ||
        (c->o->compress && (!(w.out = malloc(c->buffer / c->cluster * c->slot)) ||
                            !(w.clen = calloc(c->buffer / c->cluster, sizeof *w.clen))))) {
        free(data);
        free(w.out);
        copy_fail(c, err_set(ENOMEM, "copy buffer"));
        return NULL;
    }
    w.data = data;
    for (;;) {
        struct claim cl;
        int r;

        pthread_mutex_lock(&c->lock);
        if (copy_failed_locked(c)) {
            pthread_mutex_unlock(&c->lock);
            break;
        }
        r = claim_next_locked(c, &cl);
        pthread_mutex_unlock(&c->lock);
        if (r == 1) {
            break;
        }
        if (r == 0) {
            r = process_claim(c, &cl, &w, wa->zeroes);
        }
        if (r < 0) {
            copy_fail(c, r);
            break;
        }
        finish_claim(c, &cl);
        r = early_flush(c, &cl);
        if (r < 0) {
            copy_fail(c, r);
            break;
        }
    }
    free(data);
    free(w.out);
    free(w.clen);
    return NULL;
}

/* The target's virtual size, for its checksum. */
static uint64_t checksum_size(const struct copy *c)
{
    return c->o->checksum_size ? c->o->checksum_size : blk_image_size(c->dst);
}

/* --checksum: the hasher, claims aligned to its blocks, and how far the
 * copy's own reads are the target's content. */
static int checksum_start(struct copy *c)
{
    const struct blk_copy_opts *o = c->o;
    uint64_t size = checksum_size(c);

    if (!o->checksum) {
        return 0;
    }
    if (o->top_only) {
        return err_setx(EINVAL, "a checksum of the copy cannot be computed with -B: the "
                                "target's content includes its backing file, which the copy "
                                "does not read");
    }
    if (size < c->size) {
        return err_setx(EINVAL, "checksum of %" PRIu64 " bytes for a copy of %" PRIu64 " bytes",
                        size, c->size);
    }
    c->hash_end = c->size;
    if (!o->target_is_zero && size > c->size) {
        if (size > blk_image_size(c->dst)) {
            return err_setx(EINVAL,
                            "checksum: the target's tail past %" PRIu64
                            " bytes is neither known to be zero nor readable",
                            blk_image_size(c->dst));
        }
        c->hash_end = ROUND_DOWN(c->size, BLK_HASH_BLOCK); /* the rest: read from dst */
    }
    c->align = MAX(c->align, (uint64_t)BLK_HASH_BLOCK);
    c->buffer = MAX(ROUND_DOWN(c->buffer, c->align), c->align);
    return blk_hasher_new(size, &c->hasher);
}

/* After the copy: the target's tail past the source, then the checksum. */
static int checksum_finish(struct copy *c)
{
    const struct blk_copy_opts *o = c->o;
    uint64_t size = checksum_size(c), from = ROUND_UP(c->size, (uint64_t)BLK_HASH_BLOCK);
    int r = 0;

    if (!c->hasher) {
        return 0;
    }
    if (o->target_is_zero) {
        if (size > from) {
            r = blk_hasher_zero(c->hasher, from, size - from);
        }
    } else if (c->hash_end < size) {
        struct blk_checksum_opts ro = {.workers = o->workers, .cancel = o->cancel};
        r = blk_hasher_read(c->hasher, c->dst, c->hash_end, size, &ro);
    }
    return r < 0 ? r : blk_hasher_final(c->hasher, o->checksum);
}

int blk_copy(struct blk_image *src, struct blk_image *dst, const struct blk_copy_opts *opts)
{
    struct blk_copy_opts local = *opts;
    const struct blk_copy_opts *o = &local;
    struct copy c = {.src = src, .dst = dst, .o = o};
    unsigned m = o->workers ? o->workers : BLK_COPY_DEFAULT_IN_FLIGHT;
    unsigned n;
    pthread_t tid[MAX_THREADS];
    struct worker_arg wa = {&c, NULL};
    unsigned started = 0;
    void *zeroes = NULL;

    local.compress = opts->compress || blk_image_compressed_only(dst);
    c.size = blk_image_size(src);
    c.buffer = o->buffer_size ? o->buffer_size : DEFAULT_BUFFER;
    m = MIN(m, (unsigned)MAX_WORKERS);
    n = MIN(MAX(m, cpus_usable()), (unsigned)MAX_THREADS);
    if (blk_image_size(dst) < c.size) {
        return err_setx(
            ENOSPC, "the target (%" PRIu64 " bytes) is smaller than the source (%" PRIu64 " bytes)",
            blk_image_size(dst), c.size);
    }
    if (o->compress) {
        c.cluster = blk_image_cluster_size(dst);
        if (!c.cluster) {
            return err_setx(ENOTSUP,
                            "compression needs a target format with clusters (qcow2, vmdk)");
        }
        c.align = c.cluster;
        c.buffer = MAX(ROUND_DOWN(c.buffer, c.cluster), c.cluster);
        c.slot = blk_image_compressed_only(dst) ? c.cluster + c.cluster / 8 + 1024 : c.cluster;
    }
    int r = checksum_start(&c);
    if (r < 0) {
        return r;
    }
    if (posix_memalign(&zeroes, 4096, c.buffer) != 0) {
        blk_hasher_free(c.hasher);
        return err_set(ENOMEM, "copy buffer");
    }
    memset(zeroes, 0, c.buffer);
    wa.zeroes = zeroes;
    /* Offloading copies what it does not read: never with a checksum
     * (which hashes what is read), compression or salvaging. */
    atomic_store(&c.offload, o->offload && !c.hasher && !o->compress && !o->salvage);
    c.flush_every = blk_image_remote(dst) ? EARLY_FLUSH : 0;
    c.pipelined = !o->out_of_order && !o->compress && blk_image_remote(dst) &&
                  blk_image_cluster_size(dst) == 0;
    blk_rate_init(&c.rate, o->rate_limit);
    pthread_mutex_init(&c.lock, NULL);
    turns_init(&c.turns, n);
    pthread_cond_init(&c.io_free, NULL);
    c.io_limit = m;
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&tid[i], NULL, copy_worker, &wa) != 0) {
            break;
        }
        started++;
    }
    if (started == 0) {
        copy_fail(&c, err_set(EAGAIN, "starting copy workers"));
    }
    for (unsigned i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
    }
    blk_rate_destroy(&c.rate);
    if (o->offloaded) {
        *o->offloaded = atomic_load(&c.offloaded);
    }
    pthread_mutex_destroy(&c.lock);
    turns_destroy(&c.turns);
    pthread_cond_destroy(&c.io_free);
    free(zeroes);
    if (c.err) {
        err_setx(-c.err, "%s", c.msg);
        r = c.err;
    } else if (o->cancel && *o->cancel) {
        r = err_setx(EINTR, "interrupted");
    } else {
        r = checksum_finish(&c);
    }
    blk_hasher_free(c.hasher);
    return r;
}
