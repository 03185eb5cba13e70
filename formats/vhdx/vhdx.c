/* formats/vhdx/vhdx.c: the "vhdx" format driver (Hyper-V's VHDX): its
 * probe, vtable, open and close, flush and resize.  I/O is in rw.c.
 *
 * Open follows qemu's order: identifier and headers, the log (replayed
 * on a writable open, refused on a read-only one), region table and
 * metadata, then the BAT and its sanity.  Differencing images are
 * refused; 512- and 4096-byte logical sectors are both read (qemu 7.2
 * refuses 4096).
 *
 * Order (vhdx.h): the top; may call any file. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "common/util.h"
#include "common/uuid.h"
#include "vhdx.h"

/* The file type identifier "vhdxfile", as qemu probes it. */
static int vhdx_probe(const uint8_t *buf, size_t len, const char *filename)
{
    (void)filename;
    return len >= 8 && memcmp(buf, "vhdxfile", 8) == 0 ? 100 : 0;
}

static void vhdx_free_state(struct vhdx_state *s)
{
    free(s->bat);
    s->bat = NULL;
    free(s->name);
    s->name = NULL;
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->meta_lock);
}

static int vhdx_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct vhdx_state *s = n->opaque;
    int r;

    s->node = n;
    s->file = n->file;
    s->read_only = opts->read_only;
    s->for_check = opts->for_check;
    s->name = str_escape(n->filename ? n->filename : "vhdx");
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->meta_lock, NULL);
    if (!s->name) {
        r = err_set(ENOMEM, "vhdx: file name");
        goto fail;
    }
    /* Blocks are appended, but not to a file whose length cannot change
     * (an NBD export): a block past its end fails in the generic layer,
     * out of space, instead of reaching the server.  A read-only open
     * keeps it growable, as qcow2's does, though it reads nothing past the
     * end: open refuses a BAT entry whose block is not in the file. */
    n->file->growable = opts->read_only || blk_can_resize(n->file);
    r = vhdx_read_headers(s);
    if (r == 0) {
        r = vhdx_log_open(s);
    }
    if (r == 0) {
        r = vhdx_read_regions(s);
    }
    if (r == 0) {
        r = vhdx_load_bat(s);
    }
    if (r == 0 && !opts->for_check && vhdx_bat_problems(s, NULL)) {
        r = -EINVAL; /* the first problem's message is set */
    }
    if (r < 0) {
        goto fail;
    }
    int64_t flen = blk_get_length(n->file);
    if (flen < 0) {
        r = (int)flen;
        goto fail;
    }
    s->file_end = (uint64_t)flen;
    n->supported_write_flags = 0; /* FUA: write, then flush of this node */
    n->supported_zero_flags = BLK_REQ_NO_FALLBACK | (s->p.leave_allocated ? 0 : BLK_REQ_MAY_UNMAP);
    n->zero_alignment = 1;
    return 0;

fail:
    vhdx_free_state(s);
    return r;
}

/* Everything this open logged is in place: say the log is empty, so that
 * readers (qemu-img info included) need not replay it. */
static int vhdx_flush(struct blk_node *n)
{
    struct vhdx_state *s = n->opaque;
    int r;

    if (s->read_only) {
        return 0;
    }
    pthread_mutex_lock(&s->meta_lock);
    r = vhdx_log_clear_locked(s);
    pthread_mutex_unlock(&s->meta_lock);
    return r;
}

int vhdx_set_identity(struct blk_node *n, const uint8_t seed[BLK_SEED_LEN])
{
    struct vhdx_state *s = n->opaque;
    struct vhdx_header h;
    uint8_t seq[UUID_LEN], page83[UUID_LEN];
    int r = uuid_derive(seed, VHDX_ID_SEQUENCE, seq);

    if (r == 0) {
        r = uuid_derive(seed, VHDX_ID_PAGE83, page83);
    }
    pthread_mutex_lock(&s->meta_lock);
    h = s->hdr;
    if (r == 0) {
        r = uuid_derive(seed, VHDX_ID_FILE_WRITE, h.file_write_guid);
    }
    if (r == 0) {
        r = uuid_derive(seed, VHDX_ID_DATA_WRITE, h.data_write_guid);
    }
    uuid_to_guid(h.file_write_guid);
    uuid_to_guid(h.data_write_guid);
    uuid_to_guid(page83);
    /* An empty log first (what it described is in place and flushed);
     * then its old entries are dead, and they hold this session's log
     * GUID and a history of when it flushed: zeroes instead. */
    if (r == 0) {
        r = vhdx_log_clear_locked(s);
    }
    if (r == 0 && s->hdr.log_length) {
        r = blk_pwrite_zeroes(s->file, s->hdr.log_offset, s->hdr.log_length, BLK_REQ_MAY_UNMAP);
    }
    if (r == 0) {
        r = blk_pwrite(s->file, s->meta_offset + s->p.page83_off, page83, sizeof page83, 0);
    }
    if (r == 0) {
        memcpy(s->p.page83, page83, sizeof page83);
        memset(h.log_guid, 0, sizeof h.log_guid);
        h.seq = vhdx_seq_from_uuid(seq);
        r = vhdx_rewrite_headers_locked(s, &h);
    }
    pthread_mutex_unlock(&s->meta_lock);
    return r;
}

static void vhdx_close(struct blk_node *n)
{
    struct vhdx_state *s = n->opaque;

    if (!s->read_only && vhdx_flush(n) < 0) {
        log_error("vhdx: %s: clearing the log at close: %s", s->name, err_msg());
    }
    vhdx_free_state(s);
}

static int64_t vhdx_get_length(struct blk_node *n)
{
    struct vhdx_state *s = n->opaque;

    return (int64_t)s->p.disk_size;
}

static uint64_t vhdx_cluster_size(struct blk_node *n)
{
    struct vhdx_state *s = n->opaque;

    return s->p.block_size;
}

static void vhdx_child_perm(const struct blk_open_opts *opts, struct blk_perms *child)
{
    struct blk_perms in = *child;

    blk_perm_for_metadata(!opts->read_only, &in, child);
}

static const struct blk_driver vhdx_driver = {
    .name = "vhdx",
    .is_format = true,
    .state_size = sizeof(struct vhdx_state),
    .probe = vhdx_probe,
    .child_perm = vhdx_child_perm,
    .open = vhdx_open,
    .close = vhdx_close,
    .preadv = vhdx_preadv,
    .pwritev = vhdx_pwritev,
    .pwrite_zeroes = vhdx_pwrite_zeroes,
    .cluster_size = vhdx_cluster_size,
    .flush = vhdx_flush,
    .set_identity = vhdx_set_identity,
    .block_status = vhdx_block_status,
    .map_status = vhdx_map_status,
    .get_length = vhdx_get_length,
    .check = vhdx_check,
    .get_info = vhdx_get_info,
    .create = vhdx_create,
    .create_check = vhdx_create_check,
    .measure = vhdx_measure,
    .create_help = vhdx_create_help,
};

BLK_REGISTER_DRIVER(vhdx_driver)
