/* formats/vpc/vpc.c: the "vpc" (VHD) format driver: its vtable, open and
 * close, info.  Reads and block status are in read.c, writes in write.c,
 * create in create.c.
 *
 * Which kind an image is: a file whose last 512 bytes are an intact
 * fixed-disk footer is fixed, whatever its first sector holds (qemu looks
 * at offset 0 first, so a fixed disk whose guest data starts with a VHD
 * footer fools it); otherwise the footer copy at offset 0 must be a
 * dynamic or differencing footer, as qemu requires.  Both checksums, the
 * footer's and the dynamic header's, must be right (qemu checks only the
 * footer's).
 *
 * Order (vpc.h): the top; it may call any file. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "formats/named-file.h"
#include "vpc.h"

/* Read the footer: a fixed one at the end, else the copy at offset 0. */
static int read_footer(struct vpc_state *s, int64_t flen, bool *tail_ok)
{
    uint8_t head[VPC_FOOTER_SIZE], tail[VPC_FOOTER_SIZE];
    const char *name = ESC_NAME(s->node); /* quoted by messages only */
    int r;

    *tail_ok = false;
    if (flen < VPC_FOOTER_SIZE) {
        return err_setx(EINVAL, "%s: vpc: the file is too short to hold a VHD footer", name);
    }
    r = blk_pread(s->file, 0, head, sizeof head);
    if (r == 0) {
        r = blk_pread(s->file, (uint64_t)flen - VPC_FOOTER_SIZE, tail, sizeof tail);
    }
    if (r < 0) {
        return r;
    }
    *tail_ok = memcmp(tail, "conectix", 8) == 0 &&
               get_be32(tail + 64) == vpc_checksum(tail, VPC_FOOTER_SIZE, 64);
    if (vpc_probe_tail(tail, sizeof tail, NULL)) {
        memcpy(s->footer_buf, tail, sizeof tail);
        return vpc_parse_footer(tail, &s->footer, name, "at the end of the file");
    }
    if (memcmp(head, "conectix", 8) == 0) {
        memcpy(s->footer_buf, head, sizeof head);
        r = vpc_parse_footer(head, &s->footer, name, "at offset 0");
        if (r == 0 && s->footer.type == VPC_FIXED) {
            return err_setx(EINVAL,
                            "%s: vpc: a fixed-disk footer at offset 0, but none at the end of "
                            "the file",
                            name);
        }
        return r;
    }
    if (memcmp(tail, "conectix", 8) == 0) {
        memcpy(s->footer_buf, tail, sizeof tail);
        return vpc_parse_footer(tail, &s->footer, name, "at the end of the file");
    }
    return err_setx(EINVAL, "%s: vpc: no VHD footer at the start or the end of the file", name);
}

/* Does [a, a+alen) meet [b, b+blen)? */
static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* Load and check the BAT; find where the next block goes. */
static int load_bat(struct vpc_state *s, const struct vpc_dyn_header *h, int64_t flen, bool tail_ok)
{
    const char *name = ESC_NAME(s->node); /* quoted by messages only */
    uint64_t bat_bytes = (uint64_t)s->n_blocks * 4;
    int r;

    if (h->table_offset > (uint64_t)flen || bat_bytes > (uint64_t)flen - h->table_offset) {
        return err_setx(EINVAL,
                        "%s: vpc: the BAT (%" PRIu64 " bytes at offset %" PRIu64
                        ") lies past the end of the file",
                        name, bat_bytes, h->table_offset);
    }
    s->bat = malloc(MAX(bat_bytes, 4));
    s->bm_state = calloc(MAX(s->n_blocks, 1u), 1);
    s->bat_dirty = calloc(ROUND_UP(bat_bytes, VPC_SECTOR) / VPC_SECTOR + 1, 1);
    if (!s->bat || !s->bm_state || !s->bat_dirty) {
        return err_set(ENOMEM, "vpc: BAT of %" PRIu32 " entries", s->n_blocks);
    }
    r = blk_pread(s->file, h->table_offset, s->bat, bat_bytes);
    if (r < 0) {
        return r;
    }
    uint64_t meta_end = MAX(ROUND_UP(h->table_offset + (uint64_t)h->max_entries * 4, VPC_SECTOR),
                            s->footer.data_offset + VPC_DYN_HEADER_SIZE);
    uint64_t end = meta_end;
    uint64_t block_bytes = (uint64_t)s->bitmap_size + s->block_size;
    for (uint32_t i = 0; i < s->n_blocks; i++) {
        s->bat[i] = get_be32(&s->bat[i]);
        if (s->bat[i] == VPC_BAT_UNALLOCATED) {
            continue;
        }
        uint64_t start = (uint64_t)s->bat[i] * VPC_SECTOR;
        if (start + block_bytes > (uint64_t)flen) {
            return err_setx(EINVAL,
                            "%s: vpc: BAT entry %" PRIu32 " points past the end of the file "
                            "(the image is truncated)",
                            name, i);
        }
        if (overlaps(start, block_bytes, 0, VPC_FOOTER_SIZE) ||
            overlaps(start, block_bytes, s->footer.data_offset, VPC_DYN_HEADER_SIZE) ||
            overlaps(start, block_bytes, h->table_offset, bat_bytes)) {
            return err_setx(EINVAL,
                            "%s: vpc: BAT entry %" PRIu32 " points into the image's "
                            "metadata",
                            name, i);
        }
        end = MAX(end, start + block_bytes);
    }
    /* Blocks go where the trailing footer is; past everything when it is
     * missing (a crash while allocating), so no stray bytes are reused. */
    uint64_t footer_at =
        tail_ok ? (uint64_t)flen - VPC_FOOTER_SIZE : ROUND_UP((uint64_t)flen, VPC_SECTOR);
    s->free_off = MAX(end, footer_at);
    return 0;
}

static int open_dynamic(struct vpc_state *s, const struct blk_open_opts *opts, int64_t flen,
                        bool tail_ok)
{
    const char *name = ESC_NAME(s->node); /* quoted by messages only */
    uint8_t buf[VPC_DYN_HEADER_SIZE];
    struct vpc_dyn_header h;
    uint64_t at = s->footer.data_offset;
    int r;

    if (at > (uint64_t)flen || (uint64_t)flen - at < sizeof buf) {
        return err_setx(
            EINVAL, "%s: vpc: the dynamic header offset %" PRIu64 " lies past the end of the file",
            name, at);
    }
    r = blk_pread(s->file, at, buf, sizeof buf);
    if (r == 0) {
        r = vpc_parse_dyn_header(buf, &h, name);
    }
    if (r < 0) {
        return r;
    }
    s->block_size = h.block_size;
    s->block_bits = (uint32_t)__builtin_ctz(h.block_size);
    s->bitmap_size = (uint32_t)ROUND_UP(h.block_size / VPC_SECTOR / 8, VPC_SECTOR);
    uint64_t blocks = (s->size + h.block_size - 1) / h.block_size;
    if (blocks > h.max_entries) {
        return err_setx(EINVAL,
                        "%s: vpc: the BAT has %" PRIu32 " entries, too few for %" PRIu64
                        " bytes in blocks of %" PRIu32,
                        name, h.max_entries, s->size, h.block_size);
    }
    if (blocks > VPC_MAX_BAT_ENTRIES) {
        return err_setx(EINVAL,
                        "%s: vpc: %" PRIu64 " blocks of %" PRIu32 " bytes are more than "
                        "diskimg loads (%u)",
                        name, blocks, h.block_size, VPC_MAX_BAT_ENTRIES);
    }
    s->n_blocks = (uint32_t)blocks;
    s->bat_offset = h.table_offset;
    r = load_bat(s, &h, flen, tail_ok);
    if (r < 0 || s->type != VPC_DIFF) {
        return r;
    }
    if (!opts->read_only) {
        return err_setx(EROFS, "%s: vpc: differencing images are opened read-only", name);
    }
    r = vpc_find_parent(s, &h, !opts->untrusted);
    if (r < 0 || opts->no_backing) {
        return r;
    }
    return opts->untrusted ? vpc_refuse_parent(s) : vpc_open_parent(s, opts, h.parent_uuid);
}

static void vpc_free_state(struct vpc_state *s)
{
    blk_node_close(s->parent);
    s->parent = NULL;
    s->node->backing = NULL;
    free(s->bat);
    free(s->bm_state);
    free(s->bat_dirty);
    free(s->parent_name);
    free(s->parent_path);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->flush_lock);
}

/* The key vpc takes, as qemu's vpc driver does: how to size the disk. */
static const struct blk_opt_desc vpc_options[] = {
    {.key = "force_size_calc", .type = BLK_OPT_STRING},
    {NULL},
};

static int size_calc_option(const struct blk_open_opts *opts, enum vpc_size_calc *out)
{
    const char *v = blk_kv_get(opts->options, "force_size_calc");

    *out = VPC_SIZE_AUTO;
    if (!v) {
        return 0;
    }
    if (strcmp(v, "chs") == 0) {
        *out = VPC_SIZE_CHS;
    } else if (strcmp(v, "current_size") == 0) {
        *out = VPC_SIZE_CURRENT;
    } else {
        return blk_opt_error("vpc", "force_size_calc", "'%s' is not chs or current_size", v);
    }
    return 0;
}

static int vpc_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct vpc_state *s = n->opaque;
    int64_t flen = blk_get_length(n->file);
    enum vpc_size_calc calc;
    bool tail_ok;
    int r = size_calc_option(opts, &calc);

    s->node = n;
    s->file = n->file;
    s->read_only = opts->read_only;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->flush_lock, NULL);
    if (r < 0) {
        goto fail;
    }
    if (flen < 0) {
        r = (int)flen;
        goto fail;
    }
    r = read_footer(s, flen, &tail_ok);
    if (r < 0) {
        goto fail;
    }
    s->type = (enum vpc_disk_type)s->footer.type;
    s->size = vpc_footer_size(&s->footer, calc);
    if (s->size / VPC_SECTOR > VPC_MAX_SECTORS) {
        r = err_setx(EFBIG,
                     "%s: vpc: %" PRIu64 " bytes is larger than VHD images may be "
                     "(2040 GiB)",
                     ESC_NAME(n), s->size);
        goto fail;
    }
    switch (s->type) {
    case VPC_FIXED:
        if (s->size > (uint64_t)flen - VPC_FOOTER_SIZE) {
            r = err_setx(EINVAL,
                         "%s: vpc: the fixed image of %" PRIu64 " bytes is truncated "
                         "(the file has %" PRId64 ")",
                         ESC_NAME(n), s->size, flen);
        }
        break;
    case VPC_DYNAMIC:
    case VPC_DIFF:
        /* Blocks are appended, but not to a file whose length cannot
         * change (an NBD export): a block past its end fails in the
         * generic layer, out of space, instead of reaching the server.  A
         * read-only open keeps it growable, as qcow2's does, though it
         * reads nothing past the end: open refuses a BAT entry whose
         * block is not in the file. */
        n->file->growable = opts->read_only || blk_can_resize(n->file);
        r = open_dynamic(s, opts, flen, tail_ok);
        break;
    default:
        r = err_setx(ENOTSUP,
                     "%s: vpc: disk type %" PRIu32 " is not fixed, dynamic or "
                     "differencing",
                     ESC_NAME(n), s->footer.type);
    }
    if (r < 0) {
        goto fail;
    }
    if (s->type == VPC_FIXED) {
        n->supported_write_flags = n->file->supported_write_flags & BLK_REQ_WRITE_MASK;
        n->supported_zero_flags = n->file->supported_zero_flags & BLK_REQ_ZERO_MASK;
        n->supported_discard_flags = n->file->supported_discard_flags & BLK_REQ_DISCARD_MASK;
    } else {
        n->supported_write_flags = 0; /* FUA: write, then a flush that writes the BAT */
        n->supported_zero_flags = BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK;
        n->request_alignment = VPC_SECTOR; /* bitmaps have a bit per sector */
    }
    return 0;

fail:;
    CLEANUP_FREE char *esc = str_escape(n->filename);
    if (esc && !strstr(err_msg(), esc) && !fmt_chain_error_below(r, opts)) {
        err_prefix("%s", esc);
    }
    vpc_free_state(s);
    return r;
}

static void vpc_close(struct blk_node *n)
{
    struct vpc_state *s = n->opaque;

    if (!s->read_only && s->type != VPC_FIXED) {
        if (vpc_write_back_bat(s) < 0 || blk_flush(s->file) < 0) {
            log_error("vpc: %s: writing the BAT at close: %s", ESC_NAME(n), err_msg());
        }
    }
    vpc_free_state(s);
}

static int64_t vpc_get_length(struct blk_node *n)
{
    struct vpc_state *s = n->opaque;

    return (int64_t)s->size;
}

static uint64_t vpc_cluster_size(struct blk_node *n)
{
    struct vpc_state *s = n->opaque;

    return s->type == VPC_FIXED ? 0 : s->block_size;
}

/* A 4-character footer field as text: a NUL byte ends it ("tap\0"),
 * and a byte that is no printable ASCII shows as '?' (info prints it,
 * JSON too). */
static void footer_text(char out[5], const char in[4])
{
    for (int i = 0; i < 4; i++) {
        unsigned char c = (unsigned char)in[i];
        out[i] = (char)(c >= 0x20 && c < 0x7f ? c : c ? '?' : '\0');
    }
    out[4] = '\0';
}

/* The footer's facts, which qemu-img does not show (it has no
 * format-specific section for vpc): what decides how readers size the
 * disk, for `check --target` and for people comparing two VHDs. */
static void footer_info(const struct vpc_state *s, struct blk_image_info *info)
{
    static const char *const kinds[] = {
        [VPC_FIXED] = "fixed", [VPC_DYNAMIC] = "dynamic", [VPC_DIFF] = "differencing"};
    const struct vpc_footer *f = &s->footer;
    char app[5], host[5];

    footer_text(app, f->creator_app);
    footer_text(host, f->creator_host);
    blk_info_add_str(info, "subformat", "subformat", kinds[s->type]);
    blk_info_add_str(info, "creator-app", "creator app", app);
    blk_info_add_str(info, "creator-host", "creator host", host);
    blk_info_add_int(info, "original-size", "original size", (int64_t)f->orig_size);
    blk_info_add_int(info, "current-size", "current size", (int64_t)f->cur_size);
    blk_info_add_int(info, "cylinders", "cylinders", f->cyls);
    blk_info_add_int(info, "heads", "heads", f->heads);
    blk_info_add_int(info, "sectors-per-track", "sectors per track", f->secs);
}

/* What qemu-img shows (cluster-size for dynamic images), the parent of a
 * differencing image, and the footer's facts. */
static int vpc_get_info(struct blk_node *n, struct blk_image_info *info)
{
    struct vpc_state *s = n->opaque;

    info->cluster_size = vpc_cluster_size(n);
    if (s->parent_name) {
        info->backing_file = strdup(s->parent_name);
        info->full_backing_file = strdup(s->parent_path);
        if (!info->backing_file || !info->full_backing_file) {
            return err_set(ENOMEM, "vpc: info");
        }
    }
    footer_info(s, info);
    return 0;
}

static void vpc_child_perm(const struct blk_open_opts *opts, struct blk_perms *child)
{
    struct blk_perms in = *child;

    blk_perm_for_metadata(!opts->read_only, &in, child);
}

static const struct blk_driver vpc_driver = {
    .name = "vpc",
    .is_format = true,
    .state_size = sizeof(struct vpc_state),
    .options = vpc_options,
    .probe = vpc_probe,
    .probe_tail = vpc_probe_tail,
    .child_perm = vpc_child_perm,
    .open = vpc_open,
    .close = vpc_close,
    .preadv = vpc_preadv,
    .pwritev = vpc_pwritev,
    .pwrite_zeroes = vpc_pwrite_zeroes,
    .discard = vpc_discard,
    .cluster_size = vpc_cluster_size,
    .flush = vpc_flush,
    .set_identity = vpc_set_identity,
    .block_status = vpc_block_status,
    .map_status = vpc_map_status,
    .get_length = vpc_get_length,
    .get_info = vpc_get_info,
    .create = vpc_create,
    .create_check = vpc_create_check,
    .measure = vpc_measure,
    .create_help = VPC_CREATE_HELP,
};

BLK_REGISTER_DRIVER(vpc_driver)
