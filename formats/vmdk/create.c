/* formats/vmdk/create.c: creating monolithicSparse and streamOptimized
 * images with qemu-img 7.2's options, layout and summary line.
 *
 * The layout is qemu's: header at sector 0, the descriptor in sectors
 * 1-20, the redundant grain directory at 21 and its tables, the grain
 * directory and its tables, all tables preallocated (zeroed), the first
 * grain at the end of that rounded up to 128 sectors.  streamOptimized
 * has the same front (version 3, compressed grains with markers); its
 * grains are appended by stream.c.
 *
 * layout=vmware (streamOptimized only, our extension) writes the front
 * as VMware's own writer (open-vmdk's vmdk-convert) does: no redundant
 * grain directory or tables, grains right after the tables, and a
 * descriptor with encoding, ddb.longContentID (whose last 8 digits are
 * the CID, kept in step when the CID changes) and VMware's cylinder
 * count.  --target=vsphere and --target=aws ask for it. */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/esc-name.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "formats/named-file.h"
#include "vmdk.h"

#define GRAIN_SECTORS 128u
#define DESC_SECTORS 20u
#define GT_SECTORS (VMDK_MAX_GTES * 4u / VMDK_SECTOR)

struct vmdk_create_opts {
    uint64_t size;
    bool size_set;
    /* copies: kv_foreach's strings last only for the call */
    const char *subformat, *adapter, *hwversion, *toolsversion;
    char subformat_buf[64], adapter_buf[64], hwversion_buf[64], toolsversion_buf[64];
    /* -b and -F, or -o backing_file= and backing_fmt= */
    const char *backing_file, *backing_fmt;
    char backing_file_buf[1024], backing_fmt_buf[64];
    bool compat6, zeroed_grain;
    bool compat6_set, zeroed_set;
    const char *layout; /* NULL, "qemu" or "vmware" */
    char layout_buf[16];
    bool vmware;
};

static int parse_onoff(const char *key, const char *value, bool *out)
{
    if (!value || parse_bool(value, out) < 0) {
        return err_setx(EINVAL, "vmdk: option '%s' takes on or off", key);
    }
    return 0;
}

static int copy_value(const char *key, const char *value, char *buf, size_t cap, const char **out)
{
    if (strlen(value) >= cap) {
        return err_setx(EINVAL, "vmdk: the value of option '%s' is too long", key);
    }
    strcpy(buf, value);
    *out = buf;
    return 0;
}

static int create_opt(const char *key, const char *value, void *opaque)
{
    struct vmdk_create_opts *c = opaque;

    if (strcmp(key, "compat6") == 0) {
        c->compat6_set = true;
        return parse_onoff(key, value, &c->compat6);
    }
    if (strcmp(key, "zeroed_grain") == 0) {
        c->zeroed_set = true;
        return parse_onoff(key, value, &c->zeroed_grain);
    }
    if (!value) {
        return err_setx(EINVAL, "vmdk: option '%s' needs a value", key);
    }
    if (strcmp(key, "size") == 0) {
        if (c->size_set) {
            return err_setx(EINVAL, "vmdk: the size is given twice (-o size and SIZE)");
        }
        if (parse_size(value, &c->size) < 0) {
            return err_setx(EINVAL, "vmdk: invalid size '%s'", value);
        }
        c->size_set = true;
    } else if (strcmp(key, "subformat") == 0) {
        return copy_value(key, value, c->subformat_buf, sizeof c->subformat_buf, &c->subformat);
    } else if (strcmp(key, "adapter_type") == 0) {
        return copy_value(key, value, c->adapter_buf, sizeof c->adapter_buf, &c->adapter);
    } else if (strcmp(key, "hwversion") == 0) {
        return copy_value(key, value, c->hwversion_buf, sizeof c->hwversion_buf, &c->hwversion);
    } else if (strcmp(key, "toolsversion") == 0) {
        return copy_value(key, value, c->toolsversion_buf, sizeof c->toolsversion_buf,
                          &c->toolsversion);
    } else if (strcmp(key, "backing_file") == 0) {
        return copy_value(key, value, c->backing_file_buf, sizeof c->backing_file_buf,
                          &c->backing_file);
    } else if (strcmp(key, "backing_fmt") == 0) {
        return copy_value(key, value, c->backing_fmt_buf, sizeof c->backing_fmt_buf,
                          &c->backing_fmt);
    } else if (strcmp(key, "layout") == 0) {
        return copy_value(key, value, c->layout_buf, sizeof c->layout_buf, &c->layout);
    } else if (strcmp(key, "preallocation") == 0) {
        if (strcmp(value, "off") != 0) {
            return err_setx(ENOTSUP, "vmdk: preallocation '%s' is not supported (off only)", value);
        }
    } else {
        return err_setx(EINVAL, "vmdk: unknown option '%s'", key);
    }
    return 0;
}

static int create_parse(const struct blk_create_opts *o, struct vmdk_create_opts *c)
{
    static const char *const adapters[] = {"ide", "lsilogic", "buslogic", "legacyESX"};
    int r;

    *c = (struct vmdk_create_opts){.size = o->size,
                                   .size_set = o->size_set,
                                   .backing_file = o->backing_file,
                                   .backing_fmt = o->backing_format};
    if (o->options && (r = kv_foreach(o->options, create_opt, c)) != 0) {
        return r;
    }
    if (c->backing_fmt && strcmp(c->backing_fmt, "vmdk") != 0) {
        return err_setx(EINVAL, "vmdk: backing_file must be a vmdk image");
    }
    if (c->subformat && strcmp(c->subformat, "monolithicSparse") != 0 &&
        strcmp(c->subformat, "streamOptimized") != 0) {
        if (strcmp(c->subformat, "monolithicFlat") == 0 ||
            strcmp(c->subformat, "twoGbMaxExtentSparse") == 0 ||
            strcmp(c->subformat, "twoGbMaxExtentFlat") == 0) {
            return err_setx(ENOTSUP,
                            "vmdk: diskimg reads %s images but writes only monolithicSparse and "
                            "streamOptimized",
                            c->subformat);
        }
        return err_setx(EINVAL, "vmdk: unknown subformat: %s", c->subformat);
    }
    bool adapter_ok = !c->adapter;
    for (size_t i = 0; c->adapter && i < sizeof adapters / sizeof adapters[0]; i++) {
        adapter_ok |= strcmp(c->adapter, adapters[i]) == 0;
    }
    if (!adapter_ok) {
        return err_setx(EINVAL, "vmdk: unknown adapter type: '%s'", c->adapter);
    }
    if (c->layout && strcmp(c->layout, "qemu") != 0 && strcmp(c->layout, "vmware") != 0) {
        return err_setx(EINVAL, "vmdk: layout must be qemu or vmware, not '%s'", c->layout);
    }
    c->vmware = c->layout && strcmp(c->layout, "vmware") == 0;
    if (c->vmware && (!c->subformat || strcmp(c->subformat, "streamOptimized") != 0)) {
        return err_setx(EINVAL, "vmdk: layout=vmware is for subformat=streamOptimized only");
    }
    if (c->compat6 && c->hwversion) {
        return err_setx(EINVAL, "vmdk: compat6 cannot be enabled with hwversion set");
    }
    if ((c->hwversion && strpbrk(c->hwversion, "\"\n\r")) ||
        (c->toolsversion && strpbrk(c->toolsversion, "\"\n\r"))) {
        return err_setx(EINVAL, "vmdk: a version may not hold quotes or line breaks");
    }
    return 0;
}

int vmdk_create_check(const struct blk_create_opts *o)
{
    struct vmdk_create_opts c;

    return create_parse(o, &c);
}

int vmdk_format_descriptor(char *out, size_t cap, const struct vmdk_new_desc *d)
{
    uint32_t cid = d->cid, parent_cid = d->parent_cid;
    const char *create_type = d->create_type, *extent_name = d->extent_name;
    const char *adapter = d->adapter, *hwversion = d->hwversion, *toolsversion = d->toolsversion;
    uint64_t sectors = d->sectors;
    char hint[VMDK_SECTOR * 4] = "";
    unsigned heads = strcmp(adapter, "ide") == 0 ? 16 : 255;
    /* qemu rounds the cylinders down; VMware's writer up, to at most
     * 65535. */
    uint64_t cylinders = d->vmware ? MIN(VMDK_DIV_UP(sectors, 63ull * heads), 65535u)
                                   : sectors * VMDK_SECTOR / (63ull * heads * VMDK_SECTOR);
    char long_id[64] = "", parent[16];
    /* qemu writes the parent's CID unpadded, VMware in 8 digits */
    snprintf(parent, sizeof parent, d->vmware ? "%08" PRIx32 : "%" PRIx32, parent_cid);
    if (d->vmware) {
        snprintf(long_id, sizeof long_id, "ddb.longContentID = \"%s%08" PRIx32 "\"\n",
                 d->long_id_prefix, cid);
    }
    if (d->parent_hint && (size_t)snprintf(hint, sizeof hint, "parentFileNameHint=\"%s\"",
                                           d->parent_hint) >= sizeof hint) {
        return -ENOSPC;
    }
    int n =
        snprintf(out, cap,
                 "# Disk DescriptorFile\n"
                 "version=1\n"
                 "%s"
                 "CID=%08" PRIx32 "\n"
                 "parentCID=%s\n"
                 "createType=\"%s\"\n"
                 "%s\n"
                 "# Extent description\n"
                 "RW %" PRIu64 " SPARSE \"%s\"\n"
                 "\n"
                 "# The Disk Data Base\n"
                 "#DDB\n"
                 "\n"
                 "%s"
                 "ddb.virtualHWVersion = \"%s\"\n"
                 "ddb.geometry.cylinders = \"%" PRIu64 "\"\n"
                 "ddb.geometry.heads = \"%u\"\n"
                 "ddb.geometry.sectors = \"63\"\n"
                 "ddb.adapterType = \"%s\"\n"
                 "ddb.toolsVersion = \"%s\"\n",
                 d->vmware ? "encoding=\"UTF-8\"\n" : "", cid, parent, create_type, hint, sectors,
                 extent_name, long_id, hwversion, cylinders, heads, adapter, toolsversion);
    return n < 0 || (size_t)n >= cap ? -ENOSPC : 0;
}

/* qemu's layout: redundant tables, the first grain on a 64 KiB boundary.
 * VMware's (vmware): no redundant tables (flag bit 1 clear), the grain
 * directory at sector 21, grains right after the tables. */
static void put_header(uint8_t *h, const struct vmdk_create_opts *c, bool stream, uint64_t sectors,
                       uint64_t gd_sectors, uint64_t gt_count, uint64_t *overhead)
{
    bool zeroed = c->zeroed_grain;
    uint64_t rgd = c->vmware ? 0 : 1 + DESC_SECTORS;
    uint64_t gd = c->vmware ? 1 + DESC_SECTORS : rgd + gd_sectors + gt_count * GT_SECTORS;
    uint32_t flags = VMDK_FLAG_NL_DETECT | (c->vmware ? 0 : VMDK_FLAG_RGD);
    uint64_t end = gd + gd_sectors + gt_count * GT_SECTORS;

    *overhead = c->vmware ? end : ROUND_UP(end, GRAIN_SECTORS);
    if (zeroed) {
        flags |= VMDK_FLAG_ZEROED_GRAIN;
    }
    if (stream) {
        flags |= VMDK_FLAG_COMPRESS | VMDK_FLAG_MARKER;
    }
    memset(h, 0, VMDK_HEADER_SIZE);
    memcpy(h, VMDK4_MAGIC, 4);
    put_le32(h + 4, stream ? 3 : zeroed ? 2 : 1);
    put_le32(h + 8, flags);
    put_le64(h + 12, sectors);
    put_le64(h + 20, GRAIN_SECTORS);
    put_le64(h + 28, 1);
    put_le64(h + 36, DESC_SECTORS);
    put_le32(h + 44, VMDK_MAX_GTES);
    put_le64(h + 48, rgd);
    put_le64(h + 56, gd);
    put_le64(h + 64, *overhead);
    memcpy(h + 73, "\n \r\n", 4);
    put_le16(h + 77, stream ? 1 : 0);
}

/* A grain directory whose entries point at consecutive tables. */
static int write_gd(struct blk_node *file, uint64_t at, uint64_t gd_sectors, uint64_t gt_count)
{
    uint64_t bytes = gd_sectors * VMDK_SECTOR;
    CLEANUP_FREE uint8_t *gd = calloc(1, bytes ? bytes : 1);

    if (!gd) {
        return err_set(ENOMEM, "vmdk: grain directory");
    }
    for (uint64_t i = 0; i < gt_count; i++) {
        put_le32(gd + 4 * i, (uint32_t)(at + gd_sectors + i * GT_SECTORS));
    }
    return bytes ? blk_pwrite(file, at * VMDK_SECTOR, gd, bytes, 0) : 0;
}

/* printf at *n of a cap-byte buffer, never past its end. */
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...)
{
    va_list ap;

    if (*n >= cap - 1) {
        return;
    }
    va_start(ap, fmt);
    int w = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    *n = w < 0 ? *n : MIN(cap - 1, *n + (size_t)w);
}

/* The parent of a new child image: its CID (recorded as parentCID) and,
 * when no size is given, its size.  Opened as the child will open it,
 * shared with every user (only its metadata is read). */
static int parent_facts(const struct blk_create_opts *o, struct vmdk_create_opts *c, uint32_t *cid)
{
    CLEANUP_FREE char *path = NULL;
    struct blk_node *b = NULL;
    int r = fmt_named_path("vmdk", "backing file", o->filename, c->backing_file, 0, &path);

    if (r < 0) {
        return r;
    }
    struct blk_open_opts bo = {.filename = path,
                               .read_only = true,
                               .depth = 1,
                               .perms = {BLK_PERM_CONSISTENT_READ, BLK_PERM_ALL, BLK_PERM_ALL},
                               .force_share = true,
                               .no_backing = true,
                               .untrusted = o->untrusted};
    r = blk_open_stack(&b, &bo, "file", "vmdk");
    if (r < 0) {
        err_prefix("vmdk: could not open backing file '%s'", ESC_STR(c->backing_file));
        return r;
    }
    const struct vmdk_state *ps = b->opaque;
    *cid = ps->desc.cid;
    if (!c->size_set) {
        c->size = ps->size;
        c->size_set = true;
    }
    blk_node_close(b);
    return 0;
}

int vmdk_create(struct blk_node *file, const struct blk_create_opts *o, char **summary)
{
    uint32_t parent_cid = UINT32_MAX;
    struct vmdk_create_opts c;
    uint8_t hdr[VMDK_HEADER_SIZE];
    char desc[DESC_SECTORS * VMDK_SECTOR] = {0};
    uint64_t overhead;
    int r = create_parse(o, &c);

    if (r < 0) {
        return r;
    }
    if (c.backing_file && (r = parent_facts(o, &c, &parent_cid)) < 0) {
        return r;
    }
    if (!c.size_set) {
        return err_setx(EINVAL, "vmdk: the image size is required");
    }
    uint64_t sectors = VMDK_DIV_UP(c.size, VMDK_SECTOR);
    uint64_t grains = VMDK_DIV_UP(sectors, GRAIN_SECTORS);
    uint64_t gt_count = VMDK_DIV_UP(grains, VMDK_MAX_GTES);
    uint64_t gd_sectors = VMDK_DIV_UP(gt_count * 4, VMDK_SECTOR);
    if (sectors > (UINT64_C(1) << 40)) {
        return err_setx(EFBIG, "vmdk: size %" PRIu64 " is too large", c.size);
    }
    bool stream = c.subformat && strcmp(c.subformat, "streamOptimized") == 0;
    put_header(hdr, &c, stream, sectors, gd_sectors, gt_count, &overhead);
    if ((overhead + 2 * gd_sectors) > UINT32_MAX) {
        return err_setx(EFBIG, "vmdk: size %" PRIu64 " is too large", c.size);
    }
    CLEANUP_FREE char *copy = strdup(o->filename);
    uint8_t cid_uuid[16], long_uuid[16];
    char long_prefix[25];
    if ((r = blk_create_uuid(o, VMDK_ID_CID, cid_uuid)) < 0 ||
        (r = blk_create_uuid(o, VMDK_ID_LONG_CONTENT, long_uuid)) < 0) {
        return r;
    }
    for (int i = 0; i < 12; i++) {
        snprintf(long_prefix + 2 * i, 3, "%02x", long_uuid[i]);
    }
    struct vmdk_new_desc nd = {
        .cid = vmdk_cid_from_uuid(cid_uuid),
        .parent_cid = parent_cid,
        .create_type = stream ? "streamOptimized" : "monolithicSparse",
        .sectors = sectors,
        .extent_name = copy ? basename(copy) : "",
        .parent_hint = c.backing_file,
        .adapter = c.adapter ? c.adapter : "ide",
        .hwversion = c.hwversion ? c.hwversion
                     : c.compat6 ? "6"
                                 : "4",
        .toolsversion = c.toolsversion ? c.toolsversion : "2147483647",
        .vmware = c.vmware,
        .long_id_prefix = long_prefix,
    };
    r = copy ? vmdk_format_descriptor(desc, sizeof desc, &nd) : -ENOMEM;
    if (r < 0) {
        return err_setx(-r, "vmdk: the descriptor does not fit in %u sectors", DESC_SECTORS);
    }
    uint64_t rgd = 1 + DESC_SECTORS, gd = get_le64(hdr + 56);
    r = blk_truncate(file, overhead * VMDK_SECTOR);
    if (r == 0 && !c.vmware) {
        r = write_gd(file, rgd, gd_sectors, gt_count);
    }
    if (r == 0) {
        r = write_gd(file, gd, gd_sectors, gt_count);
    }
    if (r == 0) {
        r = blk_pwrite(file, VMDK_SECTOR, desc, sizeof desc, 0);
    }
    if (r == 0) {
        r = blk_pwrite(file, 0, hdr, sizeof hdr, 0);
    }
    if (r == 0 && stream) {
        /* An empty stream ends as every stream does: footer marker, footer,
         * end-of-stream marker (the first grain written goes over them). */
        uint8_t tail[3 * VMDK_SECTOR] = {0};
        put_le64(tail, 1);
        put_le32(tail + 12, VMDK_MARKER_FOOTER);
        memcpy(tail + VMDK_SECTOR, hdr, sizeof hdr);
        r = blk_pwrite(file, overhead * VMDK_SECTOR, tail, sizeof tail, 0);
    }
    if (r < 0) {
        return r;
    }
    /* qemu-img's summary: its option list order, given options only. */
    char line[2048];
    size_t n = 0;
    append(line, sizeof line, &n, "fmt=vmdk size=%" PRIu64, c.size);
    if (c.adapter) {
        append(line, sizeof line, &n, " adapter_type=%s", c.adapter);
    }
    if (c.backing_file) {
        append(line, sizeof line, &n, " backing_file=%s", c.backing_file);
    }
    if (c.backing_fmt) {
        append(line, sizeof line, &n, " backing_fmt=%s", c.backing_fmt);
    }
    append(line, sizeof line, &n, " compat6=%s hwversion=%s", c.compat6 ? "on" : "off",
           c.hwversion ? c.hwversion : "undefined");
    if (c.toolsversion) {
        append(line, sizeof line, &n, " toolsversion=%s", c.toolsversion);
    }
    if (c.subformat) {
        append(line, sizeof line, &n, " subformat=%s", c.subformat);
    }
    if (c.zeroed_set) {
        append(line, sizeof line, &n, " zeroed_grain=%s", c.zeroed_grain ? "on" : "off");
    }
    if (c.layout) {
        append(line, sizeof line, &n, " layout=%s", c.layout);
    }
    *summary = strdup(line);
    return 0;
}

/* measure: the file "convert -O vmdk" writes.  monolithicSparse: create's
 * front (header, descriptor, both grain directories and every table,
 * rounded up to a grain) and one whole grain for each grain of the source
 * that holds data, appended in write order.  streamOptimized: the same
 * front, each grain deflated behind a 12-byte marker and padded to a
 * sector, then the footer and end-of-stream sectors; how small a grain
 * deflates depends on its bytes, so the numbers are an upper bound, with
 * each grain at its full size plus one sector (deflate's worst case for a
 * 64 KiB grain, 65,569 bytes, and the marker fit in it).  A new image with
 * a backing file may need every grain.  qemu-img cannot measure vmdk;
 * these are diskimg's own numbers. */
int vmdk_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m)
{
    struct blk_create_opts sized;
    struct vmdk_create_opts c;
    uint8_t hdr[VMDK_HEADER_SIZE];
    uint64_t overhead, data;
    int r;

    CLEANUP_FREE char *options = NULL;
    if ((r = blk_measure_sized_opts(o, src, &sized, &options)) < 0) {
        return r;
    }
    if ((r = create_parse(&sized, &c)) < 0) {
        return r;
    }
    const uint64_t grain = GRAIN_SECTORS * VMDK_SECTOR;
    const uint64_t sectors = VMDK_DIV_UP(c.size, VMDK_SECTOR);
    const uint64_t grains = VMDK_DIV_UP(sectors, GRAIN_SECTORS);
    const uint64_t gt_count = VMDK_DIV_UP(grains, VMDK_MAX_GTES);
    const uint64_t gd_sectors = VMDK_DIV_UP(gt_count * 4, VMDK_SECTOR);
    if (sectors > (UINT64_C(1) << 40)) {
        return err_setx(EFBIG, "vmdk: size %" PRIu64 " is too large", c.size);
    }
    const bool stream = c.subformat && strcmp(c.subformat, "streamOptimized") == 0;
    put_header(hdr, &c, stream, sectors, gd_sectors, gt_count, &overhead);
    if ((overhead + 2 * gd_sectors) > UINT32_MAX) {
        return err_setx(EFBIG, "vmdk: size %" PRIu64 " is too large", c.size);
    }
    data = grains * grain;
    if (src && !c.backing_file && (r = blk_image_data_clusters(src, grain, &data)) < 0) {
        return r;
    }
    if (!src && !c.backing_file) {
        data = 0;
    }
    const uint64_t front = overhead * VMDK_SECTOR;
    if (stream) {
        const uint64_t tail = 3 * VMDK_SECTOR, per_grain = grain + VMDK_SECTOR;
        m->fully_allocated = front + grains * per_grain + tail;
        m->required = front + data / grain * per_grain + tail;
    } else {
        m->fully_allocated = front + grains * grain;
        m->required = front + data;
    }
    return 0;
}
