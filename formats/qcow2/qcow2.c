/* formats/qcow2/qcow2.c: the "qcow2" format driver: its vtable, open and
 * close, flush, block status, resize.  Reads are in read.c, writes in
 * alloc.c.
 *
 * Order (qcow2.h): the top, since its vtable names check.c, create.c and amend.c
 * and open repairs a dirty image through check.c; it may call any file. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "common/util.h"
#include "formats/named-file.h"
#include "qcow2.h"

/* ---- flush, status, size ---- */

/* The last compressed cluster may end mid-sector, and be the end of the
 * file: pad it to a sector, as qemu does, so that readers working in
 * sectors (an NBD export of the file, O_DIRECT) find the whole sector.
 * The slack after compressed_next is ours until the next compressed
 * allocation, which the lock holds off. */
static int pad_compressed_tail_locked(struct qcow2_state *s)
{
    static const uint8_t zeroes[512];
    uint64_t end = s->compressed_next;

    if (!end || end % 512 == 0) {
        return 0;
    }
    return blk_pwrite(s->file, end, zeroes, 512 - end % 512, 0);
}

static int qcow2_flush(struct blk_node *n)
{
    struct qcow2_state *s = n->opaque;
    int r;

    if (s->read_only) {
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    r = pad_compressed_tail_locked(s);
    if (r == 0) {
        r = qcow2_flush_caches_locked(s);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

static int qcow2_block_status(struct blk_node *n, uint64_t off, uint64_t len,
                              struct blk_extent *ext)
{
    struct qcow2_state *s = n->opaque;
    struct qcow2_map m;
    int r;

    pthread_mutex_lock(&s->lock);
    r = qcow2_map_locked(s, off, len, &m);
    pthread_mutex_unlock(&s->lock);
    if (r < 0) {
        return r;
    }
    memset(ext, 0, sizeof *ext);
    ext->length = m.bytes;
    ext->depth = 1;
    ext->filename = s->file->filename;
    switch (m.type) {
    case QCOW2_NORMAL:
        ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
        ext->offset = m.host;
        if (s->metadata_prealloc) {
            /* Clusters mapped but never written read as zeroes: ask the
             * file, as qemu does for metadata-preallocated images. */
            struct blk_extent fext;
            if (blk_block_status(s->file, m.host, m.bytes, &fext) == 0) {
                ext->length = fext.length;
                if (!(fext.flags & BLK_EXT_DATA)) {
                    ext->flags |= BLK_EXT_ZERO;
                }
            }
            err_clear();
        }
        break;
    case QCOW2_ZERO_ALLOC:
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
        ext->offset = m.host;
        break;
    case QCOW2_ZERO:
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED;
        break;
    case QCOW2_COMPRESSED:
        ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_INFLATE;
        break;
    case QCOW2_UNALLOCATED:
        r = blk_block_status_below(s->backing, off, m.bytes, ext);
        if (r == 0 && !ext->layer && m.has_host) {
            /* answered here as zeroes, over a cluster the file has */
            ext->flags |= BLK_EXT_OFFSET;
            ext->offset = m.host;
            ext->filename = s->file->filename;
        }
        return r;
    }
    return 0;
}

static int64_t qcow2_get_length(struct blk_node *n)
{
    struct qcow2_state *s = n->opaque;

    return (int64_t)s->hdr.size;
}

/* Is anything allocated in guest [from, to)? */
static int tail_in_use_locked(struct qcow2_state *s, uint64_t from, uint64_t to, bool *used)
{
    *used = false;
    while (from < to && !*used) {
        struct qcow2_map m;
        int r = qcow2_map_locked(s, from, to - from, &m);
        if (r < 0) {
            return r;
        }
        *used = m.type != QCOW2_UNALLOCATED && m.type != QCOW2_ZERO;
        from += m.bytes;
    }
    return 0;
}

static int qcow2_truncate(struct blk_node *n, uint64_t len)
{
    struct qcow2_state *s = n->opaque;
    uint64_t need = qcow2_l1_entries_for(len, s->cluster_bits, s->extended_l2);
    int r = 0;

    if (s->read_only || s->snapshot_view) {
        return err_setx(EPERM, "%s is read-only", ESC_NAME(n));
    }
    if (len > INT64_MAX / 2) {
        return err_setx(EFBIG, "qcow2: size %" PRIu64 " is too large", len);
    }
    if (len % 512) {
        return err_setx(EINVAL, "qcow2: the new size must be a multiple of 512");
    }
    if (s->hdr.version < 3 && s->n_snapshots) {
        return err_setx(ENOTSUP, "qcow2: cannot resize a version 2 image that has snapshots");
    }
    pthread_mutex_lock(&s->lock);
    if (len < s->hdr.size) {
        bool used;
        r = tail_in_use_locked(s, len, s->hdr.size, &used);
        if (r == 0 && used) {
            r = err_setx(ENOTSUP,
                         "qcow2: cannot shrink to %" PRIu64 " bytes: data is stored "
                         "past that point",
                         len);
        }
    } else if (need > s->l1_size) {
        r = qcow2_grow_l1_locked(s, (uint32_t)need);
    }
    if (r == 0 && len > s->hdr.size) {
        r = qcow2_zero_grown_locked(s, s->hdr.size, len);
    }
    if (r == 0 && s->n_bitmaps && len != s->hdr.size) {
        r = qcow2_bitmaps_resize_locked(s, len); /* each is sized for the disk */
    } else if (r == 0) {
        uint64_t old = s->hdr.size;
        s->hdr.size = len;
        r = qcow2_commit_header_locked(s);
        if (r < 0) {
            s->hdr.size = old;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* ---- open and close ---- */

static int qcow2_probe(const uint8_t *buf, size_t len, const char *filename)
{
    uint32_t magic, version;

    (void)filename;
    if (len < 8) {
        return 0;
    }
    memcpy(&magic, buf, 4);
    memcpy(&version, buf + 4, 4);
    return be32toh(magic) == QCOW2_MAGIC && be32toh(version) >= 2 ? 100 : 0;
}

static int open_read_write(struct qcow2_state *s, bool for_check)
{
    uint64_t incompat = s->hdr.incompatible_features;
    bool rewrite = false;
    int r;

    if (for_check) {
        return 0; /* check reports and repairs what it finds */
    }
    if (incompat & QCOW2_INCOMPAT_CORRUPT) {
        return err_setx(EROFS,
                        "qcow2: %s is marked corrupt: open it read-only, or repair it "
                        "with 'diskimg check -r all'",
                        ESC_NAME(s->node));
    }
    if (incompat & QCOW2_INCOMPAT_DIRTY) {
        /* Not closed cleanly (lazy refcounts, crashed writer): rebuild
         * the refcounts before anything is written, as qemu does. */
        r = qcow2_repair_refcounts(s);
        if (r < 0) {
            return r;
        }
        s->hdr.incompatible_features &= ~QCOW2_INCOMPAT_DIRTY;
        rewrite = true;
    }
    /* Autoclear bits we cannot keep true are cleared before we write:
     * bitmaps stay consistent, since the enabled ones are marked in use
     * before the first write (bitmap.c); we keep no raw external data file. */
    uint64_t keep = qcow2_bitmaps_open_rw(s) ? QCOW2_AUTOCLEAR_BITMAPS : 0;
    if (s->hdr.autoclear_features & ~keep) {
        s->hdr.autoclear_features &= keep;
        rewrite = true;
    }
    if (rewrite) {
        pthread_mutex_lock(&s->lock);
        r = qcow2_commit_header_locked(s);
        pthread_mutex_unlock(&s->lock);
        return r;
    }
    return 0;
}

/* An image made with preallocation=metadata has far more clusters in use
 * than its file occupies (qemu's heuristic, to the cluster: clusters of
 * the file with a refcount, against its allocated bytes): its block
 * status must ask the file which mapped clusters are still holes.  Where
 * the two tools' answers differed, so did their maps. */
static bool detect_metadata_prealloc(struct qcow2_state *s)
{
    int64_t real = s->file->drv->allocated_size ? s->file->drv->allocated_size(s->file) : -1;
    int64_t length = blk_get_length(s->file);

    if (real < 0 || length < 0) {
        err_clear();
        return false;
    }
    uint64_t real_clusters = (uint64_t)real >> s->cluster_bits;
    uint64_t threshold = MAX(real_clusters * 10 / 9, real_clusters + 2);
    uint64_t end = ROUND_UP((uint64_t)length, s->cluster_size) >> s->cluster_bits;
    uint64_t in_use = 0;

    if (end < threshold) {
        return false; /* not even every cluster of the file would do */
    }
    pthread_mutex_lock(&s->lock);
    for (uint64_t k = 0; k < end && in_use < threshold; k++) {
        uint64_t refcount;
        if (qcow2_get_refcount_locked(s, k, &refcount) < 0) {
            err_clear();
            break;
        }
        in_use += refcount != 0;
    }
    pthread_mutex_unlock(&s->lock);
    return in_use >= threshold;
}

static void qcow2_free_state(struct qcow2_state *s)
{
    blk_node_close(s->backing);
    s->backing = NULL;
    s->node->backing = NULL;
    qcow2_cache_free(s->l2_cache);
    qcow2_cache_free(s->rb_cache);
    qcow2_free_snapshots(s);
    qcow2_free_bitmaps(s);
    free(s->bitmaps_error);
    qcow2_header_free(&s->hdr);
    free(s->l1);
    free(s->reftable);
    free(s->pending);
    free(s->meta);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->alloc_done);
    pthread_cond_destroy(&s->io_done);
}

/* The keys qcow2 takes.  The L2 cache size is offered to every image
 * (serve --l2-cache-size), so an image of another format ignores it. */
static const struct blk_opt_desc qcow2_options[] = {
    {.key = "snapshot", .type = BLK_OPT_STRING},
    {.key = "l2-cache-size", .type = BLK_OPT_SIZE, .optional = true},
    {NULL},
};

static int qcow2_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct qcow2_state *s = n->opaque;
    const char *snapshot = blk_kv_get(opts->options, "snapshot");
    uint64_t l2_cache_bytes = 0; /* 0: the default */
    int64_t file_size;
    int r;

    r = blk_opt_size(opts->options, "qcow2", "l2-cache-size", &l2_cache_bytes);
    if (r < 0) {
        return r;
    }
    if (snapshot && !opts->read_only) {
        return blk_opt_error("qcow2", "snapshot", "a snapshot is opened read-only");
    }
    s->node = n;
    s->file = n->file;
    s->read_only = opts->read_only;
    /* Clusters are appended, and repair at open may append too.  Not to a
     * file whose length cannot change (an NBD export): an allocation past
     * its end fails in the generic layer, out of space, instead of
     * reaching the server.  A read-only image appends nothing, and its
     * file keeps reading past the end as zeroes (a partial last cluster). */
    n->file->growable = opts->read_only || blk_can_resize(n->file);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->alloc_done, NULL);
    pthread_cond_init(&s->io_done, NULL);
    r = qcow2_read_header(s);
    if (r < 0) {
        goto fail;
    }
    qcow2_setup_geometry(s);
    file_size = blk_get_length(n->file);
    s->file_end = ROUND_UP((uint64_t)file_size, s->cluster_size);
    s->free_hint = 1;
    if (s->hdr.compression_type == QCOW2_COMPRESSION_ZSTD) {
#ifndef HAVE_ZSTD
        r = err_setx(ENOTSUP,
                     "qcow2: %s uses zstd compression, and this diskimg was built "
                     "without libzstd",
                     ESC_NAME(n));
        goto fail;
#endif
    }
    r = qcow2_load_reftable(s);
    if (r == 0) {
        r = qcow2_load_l1(s);
    }
    if (r == 0) {
        r = qcow2_read_snapshots(s);
    }
    if (r == 0) {
        r = qcow2_read_bitmaps(s);
    }
    if (r == 0) {
        r = qcow2_make_caches(s, l2_cache_bytes);
    }
    if (r == 0) {
        r = qcow2_build_metadata_map_locked(s);
        if (r < 0 && opts->read_only) {
            /* Overlapping metadata only matters to writers. */
            err_clear();
            r = 0;
        }
    }
    if (r == 0 && snapshot) {
        r = qcow2_load_snapshot_l1(s, snapshot);
    }
    if (r == 0 && s->hdr.backing_file && !opts->no_backing) {
        r = opts->untrusted ? qcow2_refuse_backing(s) : qcow2_open_backing(s, opts);
    }
    if (r == 0 && !opts->read_only) {
        r = open_read_write(s, opts->for_check);
    }
    if (r < 0) {
        goto fail;
    }
    s->metadata_prealloc = detect_metadata_prealloc(s);
    n->supported_write_flags = 0; /* FUA: write, then flush of this node */
    n->supported_zero_flags = BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK;
    n->zero_alignment = s->extended_l2 ? 1u << s->subcluster_bits : (uint32_t)s->cluster_size;
    return 0;

fail:;
    CLEANUP_FREE char *esc = str_escape(n->filename); /* a backing file's name is the image's */
    if (esc && !strstr(err_msg(), esc) && !fmt_chain_error_below(r, opts)) {
        err_prefix("%s", esc);
    }
    qcow2_free_state(s);
    return r;
}

static void qcow2_close(struct blk_node *n)
{
    struct qcow2_state *s = n->opaque;

    if (!s->read_only && !s->corrupt) {
        pthread_mutex_lock(&s->lock);
        if (pad_compressed_tail_locked(s) < 0 || qcow2_flush_caches_locked(s) < 0 ||
            qcow2_bitmaps_store_locked(s) < 0) {
            log_error("qcow2: %s: writing metadata at close: %s", ESC_NAME(n), err_msg());
        }
        pthread_mutex_unlock(&s->lock);
    }
    qcow2_free_state(s);
}

static uint64_t qcow2_cluster_size(struct blk_node *n)
{
    struct qcow2_state *s = n->opaque;

    return s->cluster_size;
}

/* The file holds the metadata: qemu's rules (block/perm.c).  Inside this
 * process, a snapshot's view may also share writes: its tables never
 * change, since every write to a cluster it shares is copied elsewhere
 * (an export of a snapshot beside the live image). */
static void qcow2_child_perm(const struct blk_open_opts *opts, struct blk_perms *child)
{
    struct blk_perms in = *child;

    blk_perm_for_metadata(!opts->read_only, &in, child);
    if (blk_kv_get(opts->options, "snapshot")) {
        child->shared_here |= in.shared_here & (BLK_PERM_WRITE | BLK_PERM_RESIZE);
    }
}

static const struct blk_driver qcow2_driver = {
    .name = "qcow2",
    .is_format = true,
    .options = qcow2_options,
    .state_size = sizeof(struct qcow2_state),
    .probe = qcow2_probe,
    .child_perm = qcow2_child_perm,
    .open = qcow2_open,
    .close = qcow2_close,
    .preadv = qcow2_preadv,
    .pwritev = qcow2_pwritev,
    .pwrite_zeroes = qcow2_pwrite_zeroes,
    .discard = qcow2_discard,
    .compress = qcow2_compress,
    .pwrite_compressed = qcow2_pwrite_compressed,
    .cluster_size = qcow2_cluster_size,
    .flush = qcow2_flush,
    .block_status = qcow2_block_status,
    .get_length = qcow2_get_length,
    .truncate = qcow2_truncate,
    .check = qcow2_check,
    .change_backing = qcow2_change_backing,
    .make_empty = qcow2_make_empty,
    .get_info = qcow2_get_info,
    .load_bitmap = qcow2_load_bitmap,
    .snapshot = qcow2_snapshot_op,
    .bitmap_change = qcow2_bitmap_change,
    .create = qcow2_create,
    .create_check = qcow2_create_check,
    .measure = qcow2_measure,
    .create_help = QCOW2_CREATE_HELP,
    .amend = qcow2_amend,
    .amend_help = QCOW2_AMEND_HELP,
};

BLK_REGISTER_DRIVER(qcow2_driver)
