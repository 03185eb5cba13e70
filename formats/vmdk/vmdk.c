/* formats/vmdk/vmdk.c: the "vmdk" format driver: its vtable, open and
 * close, and the dispatch of guest requests to extents.
 *
 * An image is either one hosted sparse file (monolithicSparse,
 * streamOptimized: a header, an embedded descriptor, tables and grains)
 * or a text descriptor naming extent files (monolithicFlat,
 * twoGbMaxExtentSparse, twoGbMaxExtentFlat: read-only here).  Writes go to
 * monolithicSparse anywhere and to streamOptimized as whole new grains
 * (stream.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/esc-name.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "common/util.h"
#include "common/uuid.h"
#include "formats/named-file.h"
#include "vmdk.h"

/* ---- opening ---- */

static int read_text(struct blk_node *file, uint64_t off, uint64_t len, char **out)
{
    char *t = malloc(len + 1);
    int r;

    if (!t) {
        return err_set(ENOMEM, "vmdk: descriptor");
    }
    r = blk_pread(file, off, t, len);
    if (r < 0) {
        free(t);
        return r;
    }
    t[len] = '\0';
    *out = t;
    return 0;
}

/* createType values qemu opens from a descriptor file. */
static bool desc_file_type_ok(const char *t)
{
    static const char *const ok[] = {"monolithicFlat", "vmfs", "twoGbMaxExtentSparse",
                                     "twoGbMaxExtentFlat"};
    for (size_t i = 0; t && i < sizeof ok / sizeof ok[0]; i++) {
        if (strcmp(t, ok[i]) == 0) {
            return true;
        }
    }
    return false;
}

static int open_descriptor_file(struct vmdk_state *s, const struct blk_open_opts *opts,
                                int64_t flen)
{
    struct blk_node *n = s->node;
    int r;

    if (flen >= (int64_t)VMDK_MAX_DESC) {
        return err_setx(EFBIG, "%s: vmdk: a descriptor file of %" PRId64 " bytes is too large",
                        ESC_NAME(n), flen);
    }
    r = read_text(n->file, 0, (uint64_t)flen, &s->desc_text);
    if (r < 0) {
        return r;
    }
    s->desc_len = (size_t)flen;
    r = vmdk_desc_parse(s->desc_text, s->desc_len, n->filename, &s->desc);
    if (r < 0) {
        return r;
    }
    if (!desc_file_type_ok(s->desc.create_type)) {
        CLEANUP_FREE char *t = str_escape(s->desc.create_type ? s->desc.create_type : "");
        return err_setx(ENOTSUP,
                        "%s: vmdk: createType \"%s\" is not supported in a descriptor file",
                        ESC_NAME(n), t ? t : "?");
    }
    if (!opts->read_only && !opts->for_check) {
        /* (check -r opens read-write, and then says it cannot repair vmdk) */
        CLEANUP_FREE char *t = str_escape(s->desc.create_type);
        return err_setx(EROFS, "%s: vmdk: %s images are read-only in diskimg", ESC_NAME(n),
                        t ? t : "?");
    }
    return vmdk_open_extents(s, opts, n->filename);
}

static int open_sparse_file(struct vmdk_state *s, const struct blk_open_opts *opts)
{
    struct blk_node *n = s->node;
    struct vmdk_extent *e;
    int r;

    s->extents = calloc(1, sizeof *s->extents);
    if (!s->extents) {
        return err_set(ENOMEM, "vmdk: extents");
    }
    e = &s->extents[0];
    s->n_extents = 1;
    e->type = VMDK_TYPE_SPARSE;
    e->file = n->file;
    e->name = str_escape(n->filename);
    if (!e->name) {
        return err_set(ENOMEM, "vmdk");
    }
    r = vmdk_sparse_open(e, !opts->read_only);
    if (r < 0) {
        return r;
    }
    if (e->desc_off && e->desc_len) {
        uint64_t len = MIN(e->desc_len, e->file_len - e->desc_off);
        r = read_text(n->file, e->desc_off, len, &s->desc_text);
        if (r < 0) {
            return r;
        }
        s->desc_len = (size_t)len;
        s->desc_embedded = true;
        r = vmdk_desc_parse(s->desc_text, s->desc_len, n->filename, &s->desc);
        if (r < 0) {
            return r;
        }
        if (e->length == 0 && s->desc.n_extents) {
            /* A sparse header wrapped around a descriptor (qemu reads the
             * extents it names). */
            if (!opts->read_only) {
                return err_setx(EROFS, "%s: vmdk: a wrapped descriptor is read-only in diskimg",
                                ESC_NAME(n));
            }
            vmdk_extent_free(e);
            free(s->extents);
            s->extents = NULL;
            s->n_extents = 0;
            s->desc_embedded = false;
            return vmdk_open_extents(s, opts, n->filename);
        }
    }
    s->size = e->length;
    s->stream = e->compressed;
    return 0;
}

static void vmdk_free_state(struct vmdk_state *s)
{
    blk_node_close(s->backing);
    s->backing = NULL;
    s->node->backing = NULL;
    for (unsigned i = 0; i < s->n_extents; i++) {
        vmdk_extent_free(&s->extents[i]);
    }
    free(s->extents);
    s->extents = NULL;
    s->n_extents = 0;
    vmdk_desc_free(&s->desc);
    free(s->desc_text);
    s->desc_text = NULL;
    pthread_mutex_destroy(&s->lock);
}

static int vmdk_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct vmdk_state *s = n->opaque;
    uint8_t magic[4] = {0};
    int64_t flen = blk_get_length(n->file);
    int r;

    if (flen < 0) {
        return (int)flen;
    }
    s->node = n;
    s->read_only = opts->read_only;
    pthread_mutex_init(&s->lock, NULL);
    /* Grains are appended, but not to a file whose length cannot change
     * (an NBD export): a grain past its end fails in the generic layer,
     * out of space, instead of reaching the server.  A read-only open
     * reads nothing past the end (what a short file lacks reads as
     * zeroes here). */
    if (!opts->read_only && blk_can_resize(n->file)) {
        n->file->growable = true;
    }
    r = blk_pread(n->file, 0, magic, (uint64_t)MIN(flen, 4));
    if (r == 0) {
        if (memcmp(magic, VMDK4_MAGIC, 4) == 0 || memcmp(magic, "COWD", 4) == 0) {
            r = open_sparse_file(s, opts);
        } else {
            r = open_descriptor_file(s, opts, flen);
        }
    }
    if (r == 0 && vmdk_has_parent(s) && !opts->no_backing) {
        r = vmdk_open_parent(s, opts);
    }
    if (r == 0 && s->stream && !opts->read_only) {
        r = vmdk_stream_open_rw(s);
    }
    if (r < 0) {
        if (!strstr(err_msg(), n->filename) && !fmt_chain_error_below(r, opts)) {
            CLEANUP_FREE char *esc = str_escape(n->filename);
            err_prefix("%s", esc ? esc : "?");
        }
        vmdk_free_state(s);
        return r;
    }
    n->supported_write_flags = 0; /* FUA: write, then flush of this node */
    n->supported_zero_flags = 0;
    n->compressed_only = s->stream && !opts->read_only;
    n->zero_alignment = 1;
    return 0;
}

static void vmdk_close(struct blk_node *n)
{
    struct vmdk_state *s = n->opaque;

    if (!s->read_only) {
        pthread_mutex_lock(&s->lock);
        int r = s->stream ? vmdk_stream_finish_locked(s) : 0;
        if (r == 0) {
            r = vmdk_sparse_flush_locked(&s->extents[0]);
        }
        if (r < 0) {
            log_error("vmdk: %s: writing metadata at close: %s", ESC_NAME(n), err_msg());
        }
        pthread_mutex_unlock(&s->lock);
    }
    vmdk_free_state(s);
}

/* ---- requests ---- */

static struct vmdk_extent *find_extent(struct vmdk_state *s, uint64_t off)
{
    for (unsigned i = 0; i < s->n_extents; i++) {
        if (off < s->extents[i].start + s->extents[i].length) {
            return &s->extents[i];
        }
    }
    return NULL;
}

static int read_flat(struct vmdk_extent *e, uint64_t rel, uint8_t *buf, uint64_t len)
{
    int64_t flen = blk_get_length(e->file);
    uint64_t at = e->flat_offset + rel, have;

    if (flen < 0) {
        return (int)flen;
    }
    have = at < (uint64_t)flen ? MIN(len, (uint64_t)flen - at) : 0;
    memset(buf + have, 0, len - have); /* past the end of a short file: zeroes */
    return have ? blk_pread(e->file, at, buf, have) : 0;
}

static int read_linear(struct vmdk_state *s, uint64_t off, uint8_t *buf, uint64_t len)
{
    while (len) {
        struct vmdk_extent *e = find_extent(s, off);
        if (!e) {
            return err_setx(EIO, "%s: vmdk: no extent at %" PRIu64, ESC_NAME(s->node), off);
        }
        uint64_t rel = off - e->start, n = MIN(len, e->length - rel);
        int r;
        switch (e->type) {
        case VMDK_TYPE_FLAT:
            r = read_flat(e, rel, buf, n);
            break;
        case VMDK_TYPE_ZERO:
            memset(buf, 0, n);
            r = 0;
            break;
        default:
            r = vmdk_sparse_read(s, e, rel, buf, n);
            break;
        }
        if (r < 0) {
            return r;
        }
        off += n;
        buf += n;
        len -= n;
    }
    return 0;
}

static int vmdk_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct vmdk_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt);

    if (iovcnt == 1) {
        return read_linear(s, off, iov[0].iov_base, len);
    }
    CLEANUP_FREE uint8_t *tmp = malloc(len ? len : 1);
    if (!tmp) {
        return err_set(ENOMEM, "vmdk: read buffer");
    }
    int r = read_linear(s, off, tmp, len);
    if (r == 0) {
        iov_from_buf(iov, iovcnt, 0, tmp, len);
    }
    return r;
}

/* The first write of each open changes the CID, as VMware and qemu do:
 * a child made from this image no longer matches it. */
static int update_cid(struct vmdk_state *s)
{
    struct vmdk_extent *e = &s->extents[0];
    int r = 0;

    pthread_mutex_lock(&s->lock);
    if (!s->cid_updated && s->desc_embedded) {
        CLEANUP_FREE char *out = calloc(1, e->desc_len);
        uint32_t cid = (uint32_t)(clock_ns() * 2654435761u) ^ (uint32_t)getpid();
        if (cid >= 0xfffffffeu) {
            cid = 1;
        }
        if (!out) {
            r = err_set(ENOMEM, "vmdk: descriptor");
        } else if (vmdk_desc_set_cid(s->desc_text, s->desc_len, cid, out, e->desc_len) == 0) {
            r = blk_pwrite(e->file, e->desc_off, out, e->desc_len, 0);
            if (r == 0) {
                s->desc.cid = cid;
            }
        }
    }
    if (r == 0) {
        s->cid_updated = true;
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* Reproducible output: the CID from seed, as the first write of an open
 * sets it, and no later write of this open changes it again; VMware's
 * ddb.longContentID (layout=vmware) too, its last 8 digits the CID.
 * parentCID is the parent's CID (or "none"): content, not identity. */
static int vmdk_set_identity(struct blk_node *n, const uint8_t seed[BLK_SEED_LEN])
{
    struct vmdk_state *s = n->opaque;
    struct vmdk_extent *e = &s->extents[0];
    uint8_t u[UUID_LEN], long_id[UUID_LEN];
    char prefix[25];
    int r = uuid_derive(seed, VMDK_ID_CID, u);

    if (r == 0) {
        r = uuid_derive(seed, VMDK_ID_LONG_CONTENT, long_id);
    }
    if (r < 0) {
        return r;
    }
    for (int i = 0; i < 12; i++) {
        snprintf(prefix + 2 * i, 3, "%02x", long_id[i]);
    }
    uint32_t cid = vmdk_cid_from_uuid(u);
    pthread_mutex_lock(&s->lock);
    if (s->desc_embedded) {
        CLEANUP_FREE char *out = calloc(1, e->desc_len);
        if (!out) {
            r = err_set(ENOMEM, "vmdk: descriptor");
        } else if (vmdk_desc_set_cid(s->desc_text, s->desc_len, cid, out, e->desc_len) < 0) {
            r = err_setx(EINVAL, "%s: vmdk: no room for the CID in the descriptor", e->name);
        } else {
            vmdk_desc_set_long_id_prefix(out, e->desc_len, prefix);
            r = blk_pwrite(e->file, e->desc_off, out, e->desc_len, 0);
        }
    }
    if (r == 0) {
        s->desc.cid = cid;
        s->cid_updated = true;
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

static int vmdk_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                        unsigned flags)
{
    struct vmdk_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt);
    CLEANUP_FREE uint8_t *tmp = NULL;
    const uint8_t *buf;
    int r;

    (void)flags;
    if (!s->cid_updated && (r = update_cid(s)) < 0) {
        return r;
    }
    if (iovcnt == 1) {
        buf = iov[0].iov_base;
    } else {
        tmp = malloc(len ? len : 1);
        if (!tmp) {
            return err_set(ENOMEM, "vmdk: write buffer");
        }
        iov_to_buf(iov, iovcnt, 0, tmp, len);
        buf = tmp;
    }
    if (s->stream) {
        return vmdk_stream_write(s, off, buf, len);
    }
    return vmdk_sparse_write(s, &s->extents[0], off, buf, len);
}

static int vmdk_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct vmdk_state *s = n->opaque;
    struct vmdk_extent *e = &s->extents[0];

    (void)flags;
    if (s->stream && s->backing) {
        return -ENOTSUP; /* unallocated grains read the parent: write zero grains */
    }
    if (s->stream) {
        /* Only new grains can be written, and they read as zeroes. */
        for (uint64_t g = off / e->grain; g * e->grain < off + len; g++) {
            uint32_t v;
            pthread_mutex_lock(&s->lock);
            int r = vmdk_sparse_get_gte_locked(e, g, &v);
            pthread_mutex_unlock(&s->lock);
            if (r < 0) {
                return r;
            }
            if (v != 0 && !(v == VMDK_GTE_ZERO && e->zeroed_grain)) {
                return -ENOTSUP;
            }
        }
        return 0;
    }
    if (s->backing) {
        return -ENOTSUP; /* unallocated grains read the parent: write zeroes */
    }
    int r = s->cid_updated ? 0 : update_cid(s);
    return r < 0 ? r : vmdk_sparse_zero(s, e, off, len);
}

static int vmdk_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    (void)n;
    (void)off;
    (void)len;
    (void)flags;
    return 0; /* advisory: grains stay (qemu does not discard vmdk either) */
}

static int vmdk_flush(struct blk_node *n)
{
    struct vmdk_state *s = n->opaque;
    int r;

    if (s->read_only) {
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    /* A stream is whole after every flush (stream.c): convert's final
     * flush reports a failure to finish it. */
    r = s->stream ? vmdk_stream_finish_locked(s) : vmdk_sparse_flush_locked(&s->extents[0]);
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* A flat extent is all data, and where its file has holes they read as
 * zeroes too (qemu asks the file the same way). */
static int flat_status(struct vmdk_extent *e, struct blk_extent *ext)
{
    struct blk_extent fext;
    int64_t flen = blk_get_length(e->file);

    if (flen < 0 || ext->offset >= (uint64_t)flen) {
        ext->flags |= BLK_EXT_ZERO; /* past the end of a short file */
        err_clear();
        return 0;
    }
    ext->length = MIN(ext->length, (uint64_t)flen - ext->offset);
    if (blk_block_status(e->file, ext->offset, ext->length, &fext) == 0) {
        ext->length = MIN(ext->length, fext.length);
        if (fext.flags & BLK_EXT_ZERO) {
            ext->flags |= BLK_EXT_ZERO;
        }
    }
    err_clear();
    return 0;
}

static int vmdk_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    struct vmdk_state *s = n->opaque;
    struct vmdk_extent *e = find_extent(s, off);
    struct vmdk_map m;
    int r;

    memset(ext, 0, sizeof *ext);
    if (!e) {
        return err_setx(EIO, "%s: vmdk: no extent at %" PRIu64, ESC_NAME(n), off);
    }
    uint64_t rel = off - e->start;
    /* At most 1 GiB per answer: a caller that asks again from where this
     * one ends (convert's claims) then walks each grain table once. */
    len = MIN(MIN(len, e->length - rel), (uint64_t)1 << 30);
    ext->depth = 1;
    ext->filename = e->file ? e->file->filename : NULL;
    switch (e->type) {
    case VMDK_TYPE_FLAT:
        ext->length = len;
        ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
        ext->offset = e->flat_offset + rel;
        return flat_status(e, ext);
    case VMDK_TYPE_ZERO:
        ext->length = len;
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED;
        return 0;
    default:
        break;
    }
    pthread_mutex_lock(&s->lock);
    r = vmdk_sparse_map_locked(e, rel, len, &m);
    pthread_mutex_unlock(&s->lock);
    if (r < 0) {
        return r;
    }
    ext->length = m.bytes;
    switch (m.kind) {
    case VMDK_MAP_UNALLOC:
        return blk_block_status_below(s->backing, off, m.bytes, ext); /* the parent's */
    case VMDK_MAP_ZERO:
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED;
        break;
    case VMDK_MAP_DATA:
        ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
        ext->offset = m.host;
        break;
    case VMDK_MAP_COMPRESSED:
        ext->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_INFLATE;
        break;
    }
    return 0;
}

static int64_t vmdk_get_length(struct blk_node *n)
{
    struct vmdk_state *s = n->opaque;

    return (int64_t)s->size;
}

static uint64_t vmdk_cluster_size(struct blk_node *n)
{
    struct vmdk_state *s = n->opaque;

    return s->n_extents && s->extents[0].type == VMDK_TYPE_SPARSE ? s->extents[0].grain : 0;
}

static void vmdk_child_perm(const struct blk_open_opts *opts, struct blk_perms *child)
{
    struct blk_perms in = *child;

    blk_perm_for_metadata(!opts->read_only, &in, child);
}

static const struct blk_driver vmdk_driver = {
    .name = "vmdk",
    .is_format = true,
    .state_size = sizeof(struct vmdk_state),
    .probe = vmdk_probe,
    .child_perm = vmdk_child_perm,
    .open = vmdk_open,
    .close = vmdk_close,
    .preadv = vmdk_preadv,
    .pwritev = vmdk_pwritev,
    .pwrite_zeroes = vmdk_pwrite_zeroes,
    .discard = vmdk_discard,
    .compress = vmdk_stream_compress,
    .pwrite_compressed = vmdk_stream_pwrite_compressed,
    .cluster_size = vmdk_cluster_size,
    .flush = vmdk_flush,
    .set_identity = vmdk_set_identity,
    .block_status = vmdk_block_status,
    .get_length = vmdk_get_length,
    .get_info = vmdk_get_info,
    .check = vmdk_check,
    .create = vmdk_create,
    .create_check = vmdk_create_check,
    .measure = vmdk_measure,
    .create_help = VMDK_CREATE_HELP,
};

BLK_REGISTER_DRIVER(vmdk_driver)
