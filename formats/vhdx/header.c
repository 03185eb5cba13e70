/* formats/vhdx/header.c: the structures at the start of a VHDX file: the
 * file type identifier, the two headers (chosen by checksum and sequence
 * number, rewritten in turn), the region table and the metadata items
 * (block size, sector sizes, disk size, page 83 id).  Every field read
 * here comes from an untrusted file and is checked before use.  Not for
 * the log (log.c) or the BAT (bat.c).
 *
 * Order (vhdx.h): the bottom; calls only block/ and common/. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/util.h"
#include "vhdx.h"

const uint8_t vhdx_guid_bat[16] = {0x66, 0x77, 0xc2, 0x2d, 0x23, 0xf6, 0x00, 0x42,
                                   0x9d, 0x64, 0x11, 0x5e, 0x9b, 0xfd, 0x4a, 0x08};
const uint8_t vhdx_guid_metadata[16] = {0x06, 0xa2, 0x7c, 0x8b, 0x90, 0x47, 0x9a, 0x4b,
                                        0xb8, 0xfe, 0x57, 0x5f, 0x05, 0x0f, 0x88, 0x6e};
const uint8_t vhdx_guid_file_params[16] = {0x37, 0x67, 0xa1, 0xca, 0x36, 0xfa, 0x43, 0x4d,
                                           0xb3, 0xb6, 0x33, 0xf0, 0xaa, 0x44, 0xe7, 0x6b};
const uint8_t vhdx_guid_disk_size[16] = {0x24, 0x42, 0xa5, 0x2f, 0x1b, 0xcd, 0x76, 0x48,
                                         0xb2, 0x11, 0x5d, 0xbe, 0xd8, 0x3b, 0xf4, 0xb8};
const uint8_t vhdx_guid_page83[16] = {0xab, 0x12, 0xca, 0xbe, 0xe6, 0xb2, 0x23, 0x45,
                                      0x93, 0xef, 0xc3, 0x09, 0xe0, 0x00, 0xc7, 0x46};
const uint8_t vhdx_guid_logical_sector[16] = {0x1d, 0xbf, 0x41, 0x81, 0x6f, 0xa9, 0x09, 0x47,
                                              0xba, 0x47, 0xf2, 0x33, 0xa8, 0xfa, 0xab, 0x5f};
const uint8_t vhdx_guid_physical_sector[16] = {0xc7, 0x48, 0xa3, 0xcd, 0x5d, 0x44, 0x71, 0x44,
                                               0x9c, 0xc9, 0xe9, 0x88, 0x52, 0x51, 0xc5, 0x56};
const uint8_t vhdx_guid_parent_locator[16] = {0x2d, 0x5f, 0xd3, 0xa8, 0x0b, 0xb3, 0x4d, 0x45,
                                              0xab, 0xf7, 0xd3, 0xd8, 0x48, 0x34, 0xab, 0x0c};

uint64_t vhdx_chunk_ratio(uint32_t logical_sector, uint32_t block_size)
{
    return ((uint64_t)1 << 23) * logical_sector / block_size;
}

uint64_t vhdx_bat_entries_for(uint64_t disk_size, uint32_t block_size, uint64_t chunk_ratio)
{
    uint64_t n = (disk_size + block_size - 1) / block_size;

    return n ? n + (n - 1) / chunk_ratio : 0;
}

int vhdx_random_guid(uint8_t *guid)
{
    if (getrandom(guid, 16, 0) != 16) {
        return err_set(errno ? errno : EIO, "vhdx: random GUID");
    }
    guid[7] = (uint8_t)((guid[7] & 0x0f) | 0x40); /* version 4, in Data3's high byte */
    guid[8] = (uint8_t)((guid[8] & 0x3f) | 0x80);
    return 0;
}

/* ---- headers ---- */

/* A checksummed structure: the CRC-32C of all of it with the checksum
 * field (at 4) read as zero. */
static uint32_t struct_crc(const uint8_t *buf, size_t len)
{
    static const uint8_t zero4[4];
    uint32_t c = crc32c_update(0, buf, 4);

    c = crc32c_update(c, zero4, 4);
    return crc32c_update(c, buf + 8, len - 8);
}

void vhdx_header_encode(const struct vhdx_header *h, uint8_t *buf)
{
    memset(buf, 0, VHDX_HEADER_SIZE);
    memcpy(buf, "head", 4);
    put_le64(buf + 8, h->seq);
    memcpy(buf + 16, h->file_write_guid, 16);
    memcpy(buf + 32, h->data_write_guid, 16);
    memcpy(buf + 48, h->log_guid, 16);
    put_le16(buf + 64, h->log_version);
    put_le16(buf + 66, h->version);
    put_le32(buf + 68, h->log_length);
    put_le64(buf + 72, h->log_offset);
    put_le32(buf + 4, struct_crc(buf, VHDX_HEADER_SIZE));
}

/* Decode one header: true when its signature, checksum and version are
 * good (what qemu calls a valid header). */
static bool header_decode(const uint8_t *buf, struct vhdx_header *h)
{
    if (memcmp(buf, "head", 4) != 0 || get_le32(buf + 4) != struct_crc(buf, VHDX_HEADER_SIZE)) {
        return false;
    }
    h->seq = get_le64(buf + 8);
    memcpy(h->file_write_guid, buf + 16, 16);
    memcpy(h->data_write_guid, buf + 32, 16);
    memcpy(h->log_guid, buf + 48, 16);
    h->log_version = get_le16(buf + 64);
    h->version = get_le16(buf + 66);
    h->log_length = get_le32(buf + 68);
    h->log_offset = get_le64(buf + 72);
    return h->version == 1;
}

int vhdx_read_headers(struct vhdx_state *s)
{
    uint8_t buf[2][VHDX_HEADER_SIZE];
    uint8_t ident[8];
    struct vhdx_header h[2];
    bool ok[2];
    int r;

    r = blk_pread(s->file, 0, ident, sizeof ident);
    if (r < 0) {
        return r;
    }
    if (memcmp(ident, "vhdxfile", 8) != 0) {
        return err_setx(EINVAL, "%s: vhdx: no 'vhdxfile' signature at the start of the file",
                        s->name);
    }
    for (int i = 0; i < 2; i++) {
        r = blk_pread(s->file, i ? VHDX_HEADER2_OFFSET : VHDX_HEADER1_OFFSET, buf[i],
                      VHDX_HEADER_SIZE);
        if (r < 0) {
            return r;
        }
        ok[i] = header_decode(buf[i], &h[i]);
    }
    if (!ok[0] && !ok[1]) {
        return err_setx(EINVAL, "%s: vhdx: neither header is valid (bad signature or checksum)",
                        s->name);
    }
    if (ok[0] && ok[1] && h[0].seq == h[1].seq && memcmp(buf[0], buf[1], VHDX_HEADER_SIZE) != 0) {
        return err_setx(
            EINVAL, "%s: vhdx: the two headers differ but have the same sequence number", s->name);
    }
    s->cur_hdr = ok[0] && (!ok[1] || h[0].seq >= h[1].seq) ? 0 : 1;
    s->hdr = h[s->cur_hdr];

    const struct vhdx_header *c = &s->hdr;
    static const uint8_t zero_guid[16];
    bool log_empty = memcmp(c->log_guid, zero_guid, 16) == 0;
    if (c->log_version != 0 && !log_empty) {
        return err_setx(ENOTSUP, "%s: vhdx: log version %u is not supported", s->name,
                        c->log_version);
    }
    if (c->log_offset % VHDX_ALIGN || c->log_offset < VHDX_ALIGN || c->log_length % VHDX_ALIGN ||
        c->log_offset > VHDX_MAX_SIZE * 2) {
        return err_setx(EINVAL,
                        "%s: vhdx: log at %" PRIu64 " of %" PRIu32 " bytes is not aligned to 1 MiB",
                        s->name, c->log_offset, c->log_length);
    }
    return 0;
}

int vhdx_update_headers_locked(struct vhdx_state *s, const uint8_t *log_guid)
{
    uint8_t buf[VHDX_HEADER_SIZE];
    struct vhdx_header h = s->hdr;
    int r;

    if (!s->session_started) {
        /* The first update of this open: new write GUIDs, as the spec
         * asks before the first change to the file and its data. */
        r = vhdx_random_guid(h.file_write_guid);
        if (r == 0) {
            r = vhdx_random_guid(h.data_write_guid);
        }
        if (r < 0) {
            return r;
        }
    }
    if (log_guid) {
        memcpy(h.log_guid, log_guid, 16);
    }
    for (int i = 0; i < 2; i++) {
        unsigned slot = s->cur_hdr ^ 1;
        h.seq++;
        vhdx_header_encode(&h, buf);
        r = blk_pwrite(s->file, slot ? VHDX_HEADER2_OFFSET : VHDX_HEADER1_OFFSET, buf, sizeof buf,
                       0);
        if (r == 0) {
            r = blk_flush(s->file);
        }
        if (r < 0) {
            return r;
        }
        s->cur_hdr = slot;
        s->hdr = h;
    }
    s->session_started = true;
    return 0;
}

uint64_t vhdx_seq_from_uuid(const uint8_t *u)
{
    return get_le32(u);
}

int vhdx_rewrite_headers_locked(struct vhdx_state *s, const struct vhdx_header *h)
{
    uint8_t buf[VHDX_HEADER_SIZE];
    struct vhdx_header w = *h;
    int r = 0;

    for (unsigned slot = 0; slot < 2 && r == 0; slot++, w.seq++) {
        vhdx_header_encode(&w, buf);
        r = blk_pwrite(s->file, slot ? VHDX_HEADER2_OFFSET : VHDX_HEADER1_OFFSET, buf, sizeof buf,
                       0);
        if (r == 0) {
            r = blk_flush(s->file);
        }
        if (r == 0) {
            s->cur_hdr = slot;
            s->hdr = w;
        }
    }
    if (r == 0) {
        s->session_started = true; /* no new write GUIDs for this open */
    }
    return r;
}

/* ---- region table ---- */

struct region {
    uint64_t off, len;
};

/* Does [a, a+alen) overlap [b, b+blen)? */
static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

static int parse_region_table(struct vhdx_state *s, const uint8_t *t, struct region *bat,
                              struct region *meta)
{
    uint32_t count = get_le32(t + 8);
    bool have_bat = false, have_meta = false;

    if (count > VHDX_MAX_ENTRIES) {
        return err_setx(EINVAL, "%s: vhdx: region table claims %" PRIu32 " entries (at most %d)",
                        s->name, count, VHDX_MAX_ENTRIES);
    }
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = t + 16 + 32 * (size_t)i;
        uint64_t off = get_le64(e + 16);
        uint32_t len = get_le32(e + 24);
        bool required = get_le32(e + 28) & 1;
        bool is_bat = memcmp(e, vhdx_guid_bat, 16) == 0;
        bool is_meta = memcmp(e, vhdx_guid_metadata, 16) == 0;

        if (!is_bat && !is_meta) {
            if (required) {
                return err_setx(ENOTSUP, "%s: vhdx: region %" PRIu32 " is required and unknown",
                                s->name, i);
            }
            continue;
        }
        if ((is_bat && have_bat) || (is_meta && have_meta)) {
            return err_setx(EINVAL, "%s: vhdx: the region table names the %s region twice", s->name,
                            is_bat ? "BAT" : "metadata");
        }
        if (off % VHDX_ALIGN || off < VHDX_ALIGN || len % VHDX_ALIGN || len == 0 ||
            off > VHDX_MAX_SIZE * 2) {
            return err_setx(EINVAL,
                            "%s: vhdx: %s region at %" PRIu64 " of %" PRIu32
                            " bytes is not aligned to 1 MiB",
                            s->name, is_bat ? "BAT" : "metadata", off, len);
        }
        *(is_bat ? bat : meta) = (struct region){off, len};
        *(is_bat ? &have_bat : &have_meta) = true;
    }
    if (!have_bat || !have_meta) {
        return err_setx(EINVAL, "%s: vhdx: the region table has no %s region", s->name,
                        have_bat ? "metadata" : "BAT");
    }
    return 0;
}

static int check_regions(struct vhdx_state *s, const struct region *bat, const struct region *meta)
{
    uint64_t log_off = s->hdr.log_offset, log_len = s->hdr.log_length;

    if (overlaps(bat->off, bat->len, meta->off, meta->len)) {
        return err_setx(EINVAL, "%s: vhdx: the BAT and metadata regions overlap", s->name);
    }
    if (log_len && (overlaps(bat->off, bat->len, log_off, log_len) ||
                    overlaps(meta->off, meta->len, log_off, log_len))) {
        return err_setx(EINVAL, "%s: vhdx: the log overlaps the %s region", s->name,
                        overlaps(bat->off, bat->len, log_off, log_len) ? "BAT" : "metadata");
    }
    return 0;
}

/* ---- metadata ---- */

struct meta_item {
    const uint8_t *guid;
    uint32_t len; /* exact length the item must have */
    void *out;
    bool found;
    uint32_t off; /* where it was found */
};

static int read_item(struct vhdx_state *s, uint32_t i, const uint8_t *e, struct meta_item *item)
{
    uint32_t off = get_le32(e + 16), len = get_le32(e + 20);
    uint8_t buf[16];

    if (item->found) {
        return err_setx(EINVAL, "%s: vhdx: metadata item %" PRIu32 " appears twice", s->name, i);
    }
    if (len != item->len || off < VHDX_METADATA_TABLE_SIZE || off > s->meta_length ||
        len > s->meta_length - off) {
        return err_setx(EINVAL,
                        "%s: vhdx: metadata item %" PRIu32 " (offset %" PRIu32 ", %" PRIu32
                        " bytes) is malformed or outside the metadata region",
                        s->name, i, off, len);
    }
    int r = blk_pread(s->file, s->meta_offset + off, buf, len);
    if (r < 0) {
        return r;
    }
    memcpy(item->out, buf, len);
    item->found = true;
    item->off = off;
    return 0;
}

static int decode_params(struct vhdx_state *s, const uint8_t *fp, const uint8_t *sz,
                         const uint8_t *ls, const uint8_t *ps)
{
    struct vhdx_params *p = &s->p;

    p->block_size = get_le32(fp);
    p->leave_allocated = get_le32(fp + 4) & 1;
    p->has_parent = get_le32(fp + 4) & 2;
    p->disk_size = get_le64(sz);
    p->logical_sector = get_le32(ls);
    p->physical_sector = get_le32(ps);
    if (p->has_parent) {
        return err_setx(ENOTSUP, "%s: vhdx: differencing images (with a parent) are not supported",
                        s->name);
    }
    if (p->block_size < VHDX_MIN_BLOCK || p->block_size > VHDX_MAX_BLOCK ||
        !IS_POW2(p->block_size)) {
        return err_setx(
            EINVAL, "%s: vhdx: block size %" PRIu32 " is not a power of two from 1 MiB to 256 MiB",
            s->name, p->block_size);
    }
    if (p->logical_sector != 512 && p->logical_sector != 4096) {
        return err_setx(EINVAL, "%s: vhdx: logical sector size %" PRIu32 " is not 512 or 4096",
                        s->name, p->logical_sector);
    }
    if (p->physical_sector != 512 && p->physical_sector != 4096) {
        return err_setx(EINVAL, "%s: vhdx: physical sector size %" PRIu32 " is not 512 or 4096",
                        s->name, p->physical_sector);
    }
    if (p->disk_size > VHDX_MAX_SIZE || p->disk_size % p->logical_sector) {
        return err_setx(EINVAL,
                        "%s: vhdx: virtual disk size %" PRIu64
                        " is over 64 TiB or not a multiple of the %" PRIu32 "-byte sector",
                        s->name, p->disk_size, p->logical_sector);
    }
    return 0;
}

static int read_metadata(struct vhdx_state *s)
{
    CLEANUP_FREE uint8_t *t = malloc(VHDX_METADATA_TABLE_SIZE);
    uint8_t fp[8], sz[8], ls[4], ps[4];
    struct meta_item items[] = {
        {vhdx_guid_file_params, 8, fp, false},      {vhdx_guid_disk_size, 8, sz, false},
        {vhdx_guid_page83, 16, s->p.page83, false}, {vhdx_guid_logical_sector, 4, ls, false},
        {vhdx_guid_physical_sector, 4, ps, false},
    };
    const size_t nitems = sizeof items / sizeof items[0];
    int r;

    if (!t) {
        return err_set(ENOMEM, "vhdx: metadata table");
    }
    r = blk_pread(s->file, s->meta_offset, t, VHDX_METADATA_TABLE_SIZE);
    if (r < 0) {
        return r;
    }
    uint16_t count = get_le16(t + 10);
    if (memcmp(t, "metadata", 8) != 0 || count > VHDX_MAX_ENTRIES) {
        return err_setx(EINVAL, "%s: vhdx: bad metadata table (signature or %u entries)", s->name,
                        count);
    }
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = t + 32 + 32 * (size_t)i;
        size_t k = 0;
        while (k < nitems && memcmp(e, items[k].guid, 16) != 0) {
            k++;
        }
        if (k < nitems) {
            r = read_item(s, i, e, &items[k]);
            if (r < 0) {
                return r;
            }
        } else if (memcmp(e, vhdx_guid_parent_locator, 16) == 0) {
            return err_setx(ENOTSUP,
                            "%s: vhdx: differencing images (with a parent locator) are not "
                            "supported",
                            s->name);
        } else if (get_le32(e + 24) & 4) {
            return err_setx(ENOTSUP, "%s: vhdx: metadata item %" PRIu32 " is required and unknown",
                            s->name, i);
        }
    }
    for (size_t k = 0; k < nitems; k++) {
        if (!items[k].found) {
            static const char *const names[] = {"file parameters", "virtual disk size",
                                                "page 83 data", "logical sector size",
                                                "physical sector size"};
            return err_setx(EINVAL, "%s: vhdx: the metadata has no %s item", s->name, names[k]);
        }
    }
    s->p.page83_off = items[2].off;
    return decode_params(s, fp, sz, ls, ps);
}

int vhdx_read_regions(struct vhdx_state *s)
{
    CLEANUP_FREE uint8_t *t = malloc(VHDX_REGION_SIZE);
    struct region bat = {0}, meta = {0};
    int r = -EINVAL;
    int64_t flen = blk_get_length(s->file);

    if (!t) {
        return err_set(ENOMEM, "vhdx: region table");
    }
    if (flen < 0) {
        return (int)flen;
    }
    /* qemu reads the first copy only; the second is the same by the spec,
     * so it is a fallback when the first is damaged. */
    for (int copy = 0; copy < 2 && r < 0; copy++) {
        r = blk_pread(s->file, copy ? VHDX_REGION2_OFFSET : VHDX_REGION1_OFFSET, t,
                      VHDX_REGION_SIZE);
        if (r < 0) {
            return r;
        }
        if (memcmp(t, "regi", 4) != 0 || get_le32(t + 4) != struct_crc(t, VHDX_REGION_SIZE)) {
            r = err_setx(EINVAL, "%s: vhdx: both region tables are bad (signature or checksum)",
                         s->name);
            continue;
        }
        r = parse_region_table(s, t, &bat, &meta);
    }
    if (r < 0) {
        return r;
    }
    r = check_regions(s, &bat, &meta);
    if (r < 0) {
        return r;
    }
    if (meta.off + VHDX_METADATA_TABLE_SIZE > (uint64_t)flen) {
        return err_setx(EINVAL, "%s: vhdx: the metadata region is past the end of the file",
                        s->name);
    }
    s->bat_offset = bat.off;
    s->bat_length = bat.len;
    s->meta_offset = meta.off;
    s->meta_length = meta.len;
    return read_metadata(s);
}
