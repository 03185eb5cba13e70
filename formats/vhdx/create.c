/* formats/vhdx/create.c: "create -f vhdx" with qemu-img 7.2's options,
 * defaults, checks and layout: identifier, two headers, two region
 * tables, the log at 1 MiB, the BAT after it, the metadata region after
 * the BAT, payload from BAT + 5 MiB on.
 *
 * Where diskimg differs: a fixed image is really fixed (every payload
 * block FULLY_PRESENT and its space allocated, whatever block_state_zero
 * says; qemu writes ZERO-state entries by default, and its first write
 * then allocates a new block at the end of the file); known regions are
 * marked required, as Microsoft's writer does; and logical_sector_size
 * and physical_sector_size (512 or 4096 each, as New-VHD takes them) are
 * extra options qemu-img does not have (it writes 512 for both).
 *
 * Order (vhdx.h): above check.c; calls header.c for encodings. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/uuid.h"
#include "common/util.h"
#include "vhdx.h"

const char vhdx_create_help[] =
    "Supported options:\n"
    "  size=<size>               Virtual disk size; max of 64TB\n"
    "  subformat=<str>           dynamic (default) or fixed\n"
    "  block_size=<size>         Block size, 1M to 256M; 0 (default) chooses by size\n"
    "  log_size=<size>           Log size, a multiple of 1M (default 1M)\n"
    "  block_state_zero=<bool>   Unallocated blocks of a dynamic image are ZERO (on, the\n"
    "                            default) or NOT_PRESENT (off)\n"
    "  logical_sector_size=<n>   512 (default) or 4096 (diskimg only)\n"
    "  physical_sector_size=<n>  512 (default) or 4096 (diskimg only)\n"
    "  preallocation=<mode>      off, falloc, full (accepted, as qemu-img: no effect)\n";

struct create_opts {
    uint64_t size;
    bool size_set;
    uint64_t block_size; /* 0: by size */
    uint64_t log_size;
    bool fixed;
    bool block_state_zero;
    uint64_t logical_sector;
    uint64_t physical_sector;
    /* As the user spelled them, for the summary line (qemu-img echoes the
     * given strings). */
    char *subformat_str, *bsz_str, *prealloc_str, *nocow_str;
};

static void free_opts(struct create_opts *c)
{
    free(c->subformat_str);
    free(c->bsz_str);
    free(c->prealloc_str);
    free(c->nocow_str);
}

static int opt_size(const char *key, const char *value, uint64_t *out)
{
    if (parse_size(value, out) < 0) {
        return err_setx(EINVAL, "vhdx: invalid %s '%s'", key, value);
    }
    return 0;
}

static int create_opt(const char *key, const char *value, void *opaque)
{
    struct create_opts *c = opaque;
    bool b;

    if (!value && strcmp(key, "block_state_zero") == 0) {
        value = "on"; /* a bare boolean means on, as in qemu-img */
    }
    if (!value) {
        return err_setx(EINVAL, "vhdx: option '%s' needs a value", key);
    }
    if (strcmp(key, "size") == 0) {
        if (c->size_set) {
            return err_setx(EINVAL, "vhdx: the size is given twice (-o size and SIZE)");
        }
        c->size_set = true;
        return opt_size(key, value, &c->size);
    } else if (strcmp(key, "subformat") == 0) {
        if (strcmp(value, "dynamic") != 0 && strcmp(value, "fixed") != 0) {
            return err_setx(EINVAL, "Parameter 'subformat' does not accept value '%s'", value);
        }
        c->fixed = strcmp(value, "fixed") == 0;
        free(c->subformat_str);
        c->subformat_str = strdup(value);
    } else if (strcmp(key, "block_size") == 0) {
        return opt_size(key, value, &c->block_size);
    } else if (strcmp(key, "log_size") == 0) {
        return opt_size(key, value, &c->log_size);
    } else if (strcmp(key, "block_state_zero") == 0) {
        if (parse_bool(value, &b) < 0) {
            return err_setx(EINVAL, "vhdx: block_state_zero must be on or off");
        }
        c->block_state_zero = b;
        free(c->bsz_str);
        c->bsz_str = strdup(value);
    } else if (strcmp(key, "logical_sector_size") == 0) {
        if (parse_uint(value, 512, 4096, &c->logical_sector) < 0 ||
            (c->logical_sector != 512 && c->logical_sector != 4096)) {
            return err_setx(EINVAL, "vhdx: logical_sector_size must be 512 or 4096");
        }
    } else if (strcmp(key, "physical_sector_size") == 0) {
        if (parse_uint(value, 512, 4096, &c->physical_sector) < 0 ||
            (c->physical_sector != 512 && c->physical_sector != 4096)) {
            return err_setx(EINVAL, "vhdx: physical_sector_size must be 512 or 4096");
        }
    } else if (strcmp(key, "preallocation") == 0) {
        if (strcmp(value, "off") != 0 && strcmp(value, "falloc") != 0 &&
            strcmp(value, "full") != 0) {
            return err_setx(EINVAL, "vhdx: preallocation '%s' is not off, falloc or full", value);
        }
        free(c->prealloc_str);
        c->prealloc_str = strdup(value);
    } else if (strcmp(key, "nocow") == 0) {
        if (parse_bool(value, &b) < 0) {
            return err_setx(EINVAL, "vhdx: nocow must be on or off");
        }
        free(c->nocow_str);
        c->nocow_str = strdup(value);
    } else {
        return err_setx(EINVAL, "vhdx: unknown option '%s' (see -o help)", key);
    }
    return 0;
}

/* qemu rounds a given block size up to 1 MiB and clamps it to 256 MiB. */
static uint32_t clamped_block_size(uint64_t asked)
{
    return (uint32_t)MIN(ROUND_UP(asked, (uint64_t)MiB), (uint64_t)VHDX_MAX_BLOCK);
}

/* Parse and check, with qemu-img's messages; fills the derived sizes. */
static int parse_opts(const struct blk_create_opts *o, struct create_opts *c)
{
    int r;

    *c = (struct create_opts){.size = o->size,
                              .size_set = o->size_set,
                              .log_size = MiB,
                              .block_state_zero = true,
                              .logical_sector = 512,
                              .physical_sector = 512};
    if (o->backing_file) {
        return err_setx(ENOTSUP, "Backing file not supported for file format 'vhdx'");
    }
    if (o->options && (r = kv_foreach(o->options, create_opt, c)) != 0) {
        return r;
    }
    if (!c->size_set) {
        return err_setx(EINVAL, "vhdx: the image size is required");
    }
    if (c->size > VHDX_MAX_SIZE) {
        return err_setx(EINVAL, "Image size too large; max of 64TB");
    }
    if (c->log_size == 0) {
        return err_setx(EINVAL, "Log size must be a multiple of 1 MB");
    }
    if (c->log_size >= (4ull << 30)) {
        return err_setx(EINVAL, "Log size must be smaller than 4 GB");
    }
    if (c->block_size && !IS_POW2(clamped_block_size(c->block_size))) {
        return err_setx(EINVAL, "Block size must be a power of two");
    }
    return 0;
}

/* qemu's choice when block_size is 0. */
static uint32_t auto_block_size(uint64_t size)
{
    if (size > (32ull << 40)) {
        return 64 * MiB;
    }
    if (size > (100ull << 30)) {
        return 32 * MiB;
    }
    if (size > (1ull << 30)) {
        return 16 * MiB;
    }
    return 8 * MiB;
}

int vhdx_create_check(const struct blk_create_opts *o)
{
    struct create_opts c;
    int r = parse_opts(o, &c);

    free_opts(&c);
    return r;
}

struct layout {
    uint64_t size;
    uint32_t block_size, log_size;
    uint64_t bat_off, bat_len, meta_off, data_off;
    uint64_t entries, chunk_ratio, nblocks;
};

/* qemu's BAT for a disk of no blocks: qemu 7.2 counts its entries as
 * 0 + (0u - 1) / chunk_ratio in 32 bits and refuses ("Invalid
 * argument") a BAT region smaller than that, so an empty disk gets that
 * region, as "qemu-img create -f vhdx x 0" writes it (its entries stay
 * zero: no block present).  diskimg itself counts no entries. */
static uint64_t empty_disk_bat_bytes(uint64_t chunk_ratio)
{
    return ((uint64_t)UINT32_MAX / chunk_ratio) * 8;
}

/* Where create puts each region, and the sizes write.c works with. */
static void plan_layout(const struct create_opts *c, struct layout *l)
{
    l->size = ROUND_UP(c->size, c->logical_sector);
    l->block_size = c->block_size ? clamped_block_size(c->block_size) : auto_block_size(l->size);
    l->log_size = (uint32_t)ROUND_UP(c->log_size, (uint64_t)MiB);
    l->chunk_ratio = vhdx_chunk_ratio((uint32_t)c->logical_sector, l->block_size);
    l->nblocks = (l->size + l->block_size - 1) / l->block_size;
    l->entries = vhdx_bat_entries_for(l->size, l->block_size, l->chunk_ratio);
    l->bat_off = MiB + l->log_size;
    uint64_t bat_bytes = l->entries ? l->entries * 8 : empty_disk_bat_bytes(l->chunk_ratio);
    l->bat_len = ROUND_UP(bat_bytes, (uint64_t)MiB);
    l->meta_off = l->bat_off + l->bat_len;
    l->data_off = l->bat_off + l->bat_len + 5 * MiB;
}

static void put_region(uint8_t *t, unsigned i, const uint8_t *guid, uint64_t off, uint64_t len)
{
    uint8_t *e = t + 16 + 32 * i;
    memcpy(e, guid, 16);
    put_le64(e + 16, off);
    put_le32(e + 24, (uint32_t)len);
    put_le32(e + 28, 1); /* required */
}

static void put_meta_entry(uint8_t *t, unsigned i, const uint8_t *guid, uint32_t off, uint32_t len,
                           uint32_t flags)
{
    uint8_t *e = t + 32 + 32 * i;
    memcpy(e, guid, 16);
    put_le32(e + 16, off);
    put_le32(e + 20, len);
    put_le32(e + 24, flags);
}

/* A creator's GUID: random, or derived (reproducible output), in the
 * byte order VHDX stores. */
static int create_guid(const struct blk_create_opts *o, const char *label, uint8_t *guid)
{
    int r = blk_create_uuid(o, label, guid);

    uuid_to_guid(guid);
    return r;
}

static int write_front(struct blk_node *file, const struct blk_create_opts *o,
                       const struct layout *l, bool fixed, uint32_t lsector, uint32_t psector)
{
    CLEANUP_FREE uint8_t *buf = calloc(1, 64 * KiB);
    static const char creator[] = "diskimg";
    struct vhdx_header h = {.version = 1, .log_length = l->log_size, .log_offset = MiB};
    uint8_t seq[16];
    int r;

    if (!buf) {
        return err_set(ENOMEM, "vhdx: create");
    }
    /* File type identifier, with the creator in UTF-16LE. */
    memcpy(buf, "vhdxfile", 8);
    for (size_t i = 0; i < sizeof creator - 1; i++) {
        buf[8 + 2 * i] = (uint8_t)creator[i];
    }
    r = blk_pwrite(file, 0, buf, 64 * KiB, 0);
    if (r < 0) {
        return r;
    }
    /* Headers: a random (or derived) sequence number, then +1, as qemu. */
    if ((r = create_guid(o, VHDX_ID_FILE_WRITE, h.file_write_guid)) < 0 ||
        (r = create_guid(o, VHDX_ID_DATA_WRITE, h.data_write_guid)) < 0 ||
        (r = blk_create_uuid(o, VHDX_ID_SEQUENCE, seq)) < 0) {
        return r;
    }
    h.seq = vhdx_seq_from_uuid(seq);
    for (int i = 0; i < 2; i++, h.seq++) {
        memset(buf, 0, 64 * KiB);
        vhdx_header_encode(&h, buf);
        r = blk_pwrite(file, i ? VHDX_HEADER2_OFFSET : VHDX_HEADER1_OFFSET, buf, 64 * KiB, 0);
        if (r < 0) {
            return r;
        }
    }
    /* Region tables. */
    memset(buf, 0, 64 * KiB);
    memcpy(buf, "regi", 4);
    put_le32(buf + 8, 2);
    put_region(buf, 0, vhdx_guid_bat, l->bat_off, l->bat_len);
    put_region(buf, 1, vhdx_guid_metadata, l->meta_off, MiB);
    put_le32(buf + 4, crc32c(buf, 64 * KiB)); /* the field was zero */
    for (int i = 0; i < 2; i++) {
        r = blk_pwrite(file, i ? VHDX_REGION2_OFFSET : VHDX_REGION1_OFFSET, buf, 64 * KiB, 0);
        if (r < 0) {
            return r;
        }
    }
    /* Metadata: table, then the items at +64 KiB in qemu's order. */
    memset(buf, 0, 64 * KiB);
    memcpy(buf, "metadata", 8);
    put_le16(buf + 10, 5);
    put_meta_entry(buf, 0, vhdx_guid_file_params, 64 * KiB, 8, 4);
    put_meta_entry(buf, 1, vhdx_guid_disk_size, 64 * KiB + 8, 8, 6);
    put_meta_entry(buf, 2, vhdx_guid_page83, 64 * KiB + 16, 16, 6);
    put_meta_entry(buf, 3, vhdx_guid_logical_sector, 64 * KiB + 32, 4, 6);
    put_meta_entry(buf, 4, vhdx_guid_physical_sector, 64 * KiB + 36, 4, 6);
    r = blk_pwrite(file, l->meta_off, buf, 64 * KiB, 0);
    if (r < 0) {
        return r;
    }
    uint8_t items[40] = {0};
    put_le32(items, l->block_size);
    put_le32(items + 4, fixed ? 1 : 0); /* LeaveBlockAllocated */
    put_le64(items + 8, l->size);
    if ((r = create_guid(o, VHDX_ID_PAGE83, items + 16)) < 0) {
        return r;
    }
    put_le32(items + 32, lsector);
    put_le32(items + 36, psector);
    return blk_pwrite(file, l->meta_off + 64 * KiB, items, sizeof items, 0);
}

/* The BAT, written in pieces of up to 1 MiB. */
static int write_bat(struct blk_node *file, const struct layout *l, bool fixed, bool zero_state)
{
    CLEANUP_FREE uint8_t *buf = malloc(MiB);
    uint64_t per = MiB / 8;
    int r;

    if (!buf) {
        return err_set(ENOMEM, "vhdx: create");
    }
    for (uint64_t first = 0; first < l->entries; first += per) {
        uint64_t n = MIN(per, l->entries - first);
        memset(buf, 0, MiB);
        for (uint64_t i = first; i < first + n; i++) {
            uint64_t e = 0;
            bool bitmap = (i + 1) % (l->chunk_ratio + 1) == 0;
            uint64_t b = i - i / (l->chunk_ratio + 1);
            if (!bitmap && fixed) {
                e = (l->data_off + b * l->block_size) | VHDX_BLOCK_FULLY_PRESENT;
            } else if (!bitmap && zero_state) {
                e = VHDX_BLOCK_ZERO;
            }
            put_le64(buf + (i - first) * 8, e);
        }
        r = blk_pwrite(file, l->bat_off + first * 8, buf, n * 8, 0);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

int vhdx_create(struct blk_node *file, const struct blk_create_opts *o, char **summary)
{
    struct create_opts c;
    struct layout l;
    int r = parse_opts(o, &c);

    if (r < 0) {
        free_opts(&c);
        return r;
    }
    uint64_t asked_block = c.block_size, asked_log = c.log_size;
    plan_layout(&c, &l);
    uint64_t end = l.data_off + (c.fixed ? l.nblocks * l.block_size : 0);
    r = blk_truncate(file, end);
    if (r == 0) {
        r = write_front(file, o, &l, c.fixed, (uint32_t)c.logical_sector,
                        (uint32_t)c.physical_sector);
    }
    if (r == 0) {
        r = write_bat(file, &l, c.fixed, c.block_state_zero);
    }
    if (r == 0 && c.fixed && l.nblocks) {
        /* Really fixed: the payload's space is allocated now. */
        r = blk_pwrite_zeroes(file, l.data_off, l.nblocks * l.block_size, 0);
    }
    if (r == 0 &&
        asprintf(summary,
                 "fmt=vhdx size=%" PRIu64 " log_size=%" PRIu64 " block_size=%" PRIu64
                 "%s%s%s%s%s%s%s%s",
                 c.size, asked_log, asked_block, c.subformat_str ? " subformat=" : "",
                 c.subformat_str ? c.subformat_str : "", c.bsz_str ? " block_state_zero=" : "",
                 c.bsz_str ? c.bsz_str : "", c.nocow_str ? " nocow=" : "",
                 c.nocow_str ? c.nocow_str : "", c.prealloc_str ? " preallocation=" : "",
                 c.prealloc_str ? c.prealloc_str : "") < 0) {
        *summary = NULL;
    }
    free_opts(&c);
    return r;
}

/* measure: the file "convert -O vhdx" writes: create's front (headers,
 * log, BAT, metadata, up to the payload) and, for a dynamic image, one
 * block for each block of the source that holds data (rw.c appends each
 * whole, at a 1 MiB boundary, which every block size is a multiple of);
 * a fixed image has every block.  qemu-img cannot measure vhdx; these
 * are diskimg's own numbers. */
int vhdx_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m)
{
    struct blk_create_opts sized;
    struct create_opts c;
    struct layout l;
    uint64_t data = 0;
    int r;

    CLEANUP_FREE char *options = NULL;
    if ((r = blk_measure_sized_opts(o, src, &sized, &options)) < 0) {
        return r;
    }
    r = parse_opts(&sized, &c);
    bool fixed = c.fixed;
    free_opts(&c);
    if (r < 0) {
        return r;
    }
    plan_layout(&c, &l);
    if (src && !fixed && (r = blk_image_data_clusters(src, l.block_size, &data)) < 0) {
        return r;
    }
    m->fully_allocated = l.data_off + l.nblocks * l.block_size;
    m->required = fixed ? m->fully_allocated : l.data_off + data;
    return 0;
}
