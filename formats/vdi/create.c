/* formats/vdi/create.c: "create -f vdi", as qemu-img 7.2 does it: the
 * options size, static=on|off (default off) and preallocation (a file
 * option that has no effect on a VDI image in qemu-img either), and the
 * same layout: the header at 0, the map at 512, the data after the map
 * rounded to a sector; a dynamic image has every entry unallocated, a
 * static one maps block i to i and its file is extended (sparse) to hold
 * every block.
 *
 * Order (vdi.h): above check.c; calls header.c's constants only. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "common/uuid.h"
#include "vdi.h"

const char vdi_create_help[] = "Supported options:\n"
                               "  size=<size>             Virtual disk size\n"
                               "  static=<bool (on/off)>  VDI static (pre-allocated) image "
                               "(default off)\n"
                               "  preallocation=<mode>    off, falloc, full: accepted, no "
                               "effect (as qemu-img)\n";

struct vdi_create {
    uint64_t size;
    bool size_set;
    bool is_static;
    char static_str[16]; /* as given, echoed like qemu-img */
    char prealloc_str[16];
};

static int create_opt(const char *key, const char *value, void *opaque)
{
    struct vdi_create *c = opaque;

    if (!value && strcmp(key, "static") == 0) {
        value = "on"; /* a bare boolean means on, as in qemu-img */
    }
    if (!value) {
        return err_setx(EINVAL, "vdi: option '%s' needs a value", key);
    }
    if (strcmp(key, "size") == 0) {
        if (c->size_set) {
            return err_setx(EINVAL, "vdi: the size is given twice (-o size and SIZE)");
        }
        if (parse_size(value, &c->size) < 0) {
            return err_setx(EINVAL, "vdi: invalid size '%s'", value);
        }
        c->size_set = true;
    } else if (strcmp(key, "static") == 0) {
        if (parse_bool(value, &c->is_static) < 0 || strlen(value) >= sizeof c->static_str) {
            return err_setx(EINVAL, "vdi: static must be on or off, not '%s'", value);
        }
        snprintf(c->static_str, sizeof c->static_str, "%s", value);
    } else if (strcmp(key, "preallocation") == 0) {
        if (strcmp(value, "off") != 0 && strcmp(value, "falloc") != 0 &&
            strcmp(value, "full") != 0) {
            return err_setx(EINVAL, "vdi: preallocation '%s' is not off, falloc or full", value);
        }
        snprintf(c->prealloc_str, sizeof c->prealloc_str, "%s", value);
    } else {
        return err_setx(EINVAL, "vdi: unknown option '%s' (see -o help)", key);
    }
    return 0;
}

static int parse_create(const struct blk_create_opts *o, struct vdi_create *c)
{
    int r;

    *c = (struct vdi_create){.size = o->size, .size_set = o->size_set, .static_str = "off"};
    if (o->backing_file) {
        return err_setx(ENOTSUP, "Backing file not supported for file format 'vdi'");
    }
    if (o->options && (r = kv_foreach(o->options, create_opt, c)) != 0) {
        return r;
    }
    if (c->size_set && ROUND_UP(c->size, VDI_SECTOR) > VDI_DISK_SIZE_MAX) {
        return err_setx(EFBIG,
                        "vdi: unsupported VDI image size (size is 0x%" PRIx64
                        ", max supported is 0x%" PRIx64 ")",
                        c->size, VDI_DISK_SIZE_MAX);
    }
    return 0;
}

int vdi_create_check(const struct blk_create_opts *o)
{
    struct vdi_create c;

    return parse_create(o, &c);
}

/* The image's two UUIDs, random or derived (reproducible output), in
 * the Microsoft byte order VDI stores: the first three fields
 * little-endian. */
static int put_uuids(uint8_t *sec, const struct blk_create_opts *o)
{
    int r = blk_create_uuid(o, VDI_ID_IMAGE, sec + VDI_OFF_UUID_CREATE);

    if (r == 0) {
        r = blk_create_uuid(o, VDI_ID_MODIFY, sec + VDI_OFF_UUID_MODIFY);
    }
    uuid_to_guid(sec + VDI_OFF_UUID_CREATE);
    uuid_to_guid(sec + VDI_OFF_UUID_MODIFY);
    return r;
}

static void encode_header(uint8_t *sec, const struct vdi_create *c, uint32_t blocks,
                          uint32_t off_data)
{
    static const char text[] = "<<< QEMU VM Virtual Disk Image >>>\n";

    memset(sec, 0, VDI_SECTOR);
    memcpy(sec + VDI_OFF_TEXT, text, sizeof text - 1);
    put_le32(sec + VDI_OFF_SIGNATURE, VDI_SIGNATURE);
    put_le32(sec + VDI_OFF_VERSION, VDI_VERSION_1_1);
    put_le32(sec + VDI_OFF_HEADER_SIZE, VDI_HEADER_SIZE_QEMU);
    put_le32(sec + VDI_OFF_TYPE, c->is_static ? VDI_TYPE_FIXED : VDI_TYPE_NORMAL);
    put_le32(sec + VDI_OFF_MAP, VDI_SECTOR);
    put_le32(sec + VDI_OFF_DATA, off_data);
    put_le32(sec + VDI_OFF_SECTOR_SIZE, VDI_SECTOR);
    put_le64(sec + VDI_OFF_DISK_SIZE, ROUND_UP(c->size, VDI_SECTOR));
    put_le32(sec + VDI_OFF_BLOCK_SIZE, VDI_BLOCK_SIZE);
    put_le32(sec + VDI_OFF_BLOCKS, blocks);
    put_le32(sec + VDI_OFF_ALLOCATED, c->is_static ? blocks : 0);
}

/* The map, written a MiB at a time (it is up to 2 GiB). */
static int write_map(struct blk_node *file, const struct vdi_create *c, uint32_t blocks)
{
    const uint32_t chunk = 1u << 18;
    CLEANUP_FREE uint8_t *buf = malloc((size_t)chunk * 4);

    if (!buf) {
        return err_set(ENOMEM, "vdi: block map buffer");
    }
    for (uint32_t done = 0; done < blocks;) {
        uint32_t n = MIN(chunk, blocks - done);
        for (uint32_t i = 0; i < n; i++) {
            put_le32(buf + 4 * (size_t)i, c->is_static ? done + i : VDI_UNALLOCATED);
        }
        uint64_t len = ROUND_UP((uint64_t)n * 4, VDI_SECTOR); /* the last chunk pads */
        if (len > (uint64_t)n * 4) {
            memset(buf + (size_t)n * 4, 0, (size_t)(len - (uint64_t)n * 4));
        }
        int r = blk_pwrite(file, VDI_SECTOR + (uint64_t)done * 4, buf, len, 0);
        if (r < 0) {
            return r;
        }
        done += n;
    }
    return 0;
}

int vdi_create(struct blk_node *file, const struct blk_create_opts *o, char **summary)
{
    struct vdi_create c;
    uint8_t sec[VDI_SECTOR];
    int r = parse_create(o, &c);

    if (r < 0) {
        return r;
    }
    if (!c.size_set) {
        return err_setx(EINVAL, "vdi: the image size is required");
    }
    uint32_t blocks = (uint32_t)((c.size + VDI_BLOCK_SIZE - 1) / VDI_BLOCK_SIZE);
    uint32_t off_data = VDI_SECTOR + (uint32_t)ROUND_UP((uint64_t)blocks * 4, VDI_SECTOR);
    encode_header(sec, &c, blocks, off_data);
    r = put_uuids(sec, o);
    if (r == 0) {
        r = blk_pwrite(file, 0, sec, sizeof sec, 0);
    }
    if (r == 0) {
        r = write_map(file, &c, blocks);
    }
    if (r == 0 && c.is_static) {
        r = blk_truncate(file, off_data + (uint64_t)blocks * VDI_BLOCK_SIZE);
    }
    if (r < 0) {
        return r;
    }
    if (asprintf(summary, "fmt=vdi size=%" PRIu64 " static=%s%s%s", c.size, c.static_str,
                 c.prealloc_str[0] ? " preallocation=" : "", c.prealloc_str) < 0) {
        *summary = NULL;
    }
    return 0;
}

/* measure: the file "convert -O vdi" writes: the header sector, the
 * map up to the data area, and one block for each block of the source
 * that holds data (alloc.c appends them in write order, whole); a static
 * image has every block, written or not.  qemu-img cannot measure vdi;
 * these are diskimg's own numbers. */
int vdi_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m)
{
    struct vdi_create c;
    struct blk_create_opts sized;
    uint64_t data = 0;
    int r;

    CLEANUP_FREE char *options = NULL;
    if ((r = blk_measure_sized_opts(o, src, &sized, &options)) < 0) {
        return r;
    }
    if ((r = parse_create(&sized, &c)) < 0) {
        return r;
    }
    const uint64_t blocks = (c.size + VDI_BLOCK_SIZE - 1) / VDI_BLOCK_SIZE;
    const uint64_t off_data = VDI_SECTOR + ROUND_UP(blocks * 4, VDI_SECTOR);
    if (src && !c.is_static && (r = blk_image_data_clusters(src, VDI_BLOCK_SIZE, &data)) < 0) {
        return r;
    }
    m->fully_allocated = off_data + blocks * VDI_BLOCK_SIZE;
    m->required = c.is_static ? m->fully_allocated : off_data + data;
    return 0;
}
