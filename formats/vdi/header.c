/* formats/vdi/header.c: the VDI header sector and the block map: probe,
 * parse, validate, load, and the guest-to-host mapping.  No writes.
 *
 * Every field of an untrusted image is checked before it is used: the
 * map's size against the file's (so a header cannot make us allocate
 * what the file does not hold), every map entry against the map's range
 * and the file's end.
 *
 * Order (vdi.h): the bottom; calls nothing of the driver. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "vdi.h"

/* The signature after 64 bytes of text, in a 512-byte header (qemu). */
int vdi_probe(const uint8_t *buf, size_t len, const char *filename)
{
    (void)filename;
    return len >= VDI_SECTOR && get_le32(buf + VDI_OFF_SIGNATURE) == VDI_SIGNATURE ? 100 : 0;
}

static bool uuid_is_null(const uint8_t *p)
{
    static const uint8_t null[16];

    return memcmp(p, null, sizeof null) == 0;
}

void vdi_header_decode(const uint8_t *sec, struct vdi_header *h)
{
    h->signature = get_le32(sec + VDI_OFF_SIGNATURE);
    h->version = get_le32(sec + VDI_OFF_VERSION);
    h->header_size = get_le32(sec + VDI_OFF_HEADER_SIZE);
    h->type = get_le32(sec + VDI_OFF_TYPE);
    h->off_map = get_le32(sec + VDI_OFF_MAP);
    h->off_data = get_le32(sec + VDI_OFF_DATA);
    h->sector_size = get_le32(sec + VDI_OFF_SECTOR_SIZE);
    h->disk_size = get_le64(sec + VDI_OFF_DISK_SIZE);
    h->block_size = get_le32(sec + VDI_OFF_BLOCK_SIZE);
    h->block_extra = get_le32(sec + VDI_OFF_BLOCK_EXTRA);
    h->blocks = get_le32(sec + VDI_OFF_BLOCKS);
    h->allocated = get_le32(sec + VDI_OFF_ALLOCATED);
    h->has_link = !uuid_is_null(sec + VDI_OFF_UUID_LINK);
    h->has_parent = !uuid_is_null(sec + VDI_OFF_UUID_PARENT);
}

/* The layout fields: where the map and the data are. */
static int validate_layout(const struct vdi_header *h, uint64_t file_len, const char *name)
{
    uint64_t map_end = (uint64_t)h->off_map + (uint64_t)h->blocks * 4;

    if (h->off_map % VDI_SECTOR || h->off_data % VDI_SECTOR) {
        return err_setx(ENOTSUP,
                        "%s: vdi: block map offset 0x%" PRIx32 " or data offset 0x%" PRIx32
                        " is not a multiple of 512",
                        name, h->off_map, h->off_data);
    }
    if (h->off_map < VDI_SECTOR) {
        return err_setx(EINVAL, "%s: vdi: the block map (offset 0x%" PRIx32 ") overlaps the header",
                        name, h->off_map);
    }
    if (map_end > h->off_data) {
        return err_setx(EINVAL,
                        "%s: vdi: the block map (%" PRIu32 " entries at 0x%" PRIx32
                        ") overlaps the data area at 0x%" PRIx32,
                        name, h->blocks, h->off_map, h->off_data);
    }
    if (map_end > file_len) {
        return err_setx(EINVAL,
                        "%s: vdi: the block map (%" PRIu32 " entries at 0x%" PRIx32
                        ") extends past the end of the file (%" PRIu64 " bytes)",
                        name, h->blocks, h->off_map, file_len);
    }
    return 0;
}

int vdi_header_validate(const struct vdi_header *h, uint64_t file_len, const char *name)
{
    if (h->signature != VDI_SIGNATURE) {
        return err_setx(EINVAL, "%s: not a VDI image (signature 0x%08" PRIx32 ")", name,
                        h->signature);
    }
    if (h->version != VDI_VERSION_1_1) {
        return err_setx(ENOTSUP, "%s: vdi: version %" PRIu32 ".%" PRIu32 " is not supported (1.1)",
                        name, h->version >> 16, h->version & 0xffff);
    }
    if (h->header_size < VDI_HEADER_SIZE_QEMU || h->header_size > VDI_HEADER_SIZE_MAX) {
        return err_setx(EINVAL, "%s: vdi: header size %" PRIu32 " is outside %u..%u", name,
                        h->header_size, VDI_HEADER_SIZE_QEMU, VDI_HEADER_SIZE_MAX);
    }
    if (h->type != VDI_TYPE_NORMAL && h->type != VDI_TYPE_FIXED) {
        return err_setx(ENOTSUP,
                        "%s: vdi: image type %" PRIu32
                        " is not supported (1 dynamic, 2 static; undo and differencing "
                        "images are not)",
                        name, h->type);
    }
    if (h->has_link || h->has_parent) {
        return err_setx(ENOTSUP,
                        "%s: vdi: differencing images (non-null %s UUID) are not supported", name,
                        h->has_link ? "link" : "parent");
    }
    if (h->sector_size != VDI_SECTOR) {
        return err_setx(ENOTSUP, "%s: vdi: sector size %" PRIu32 " is not 512", name,
                        h->sector_size);
    }
    if (h->block_size != VDI_BLOCK_SIZE) {
        return err_setx(ENOTSUP, "%s: vdi: block size %" PRIu32 " is not 1048576", name,
                        h->block_size);
    }
    if (h->block_extra % VDI_SECTOR || h->block_extra > VDI_BLOCK_EXTRA_MAX) {
        return err_setx(ENOTSUP,
                        "%s: vdi: per-block extra data of %" PRIu32
                        " bytes is not a multiple of 512 up to 1 MiB",
                        name, h->block_extra);
    }
    if (h->blocks > VDI_BLOCKS_MAX) {
        return err_setx(ENOTSUP, "%s: vdi: %" PRIu32 " blocks is too many (at most %u)", name,
                        h->blocks, VDI_BLOCKS_MAX);
    }
    if (h->disk_size > (uint64_t)h->blocks * VDI_BLOCK_SIZE) {
        return err_setx(EINVAL,
                        "%s: vdi: disk size %" PRIu64 " needs more than the %" PRIu32
                        " blocks of the block map",
                        name, h->disk_size, h->blocks);
    }
    return validate_layout(h, file_len, name);
}

uint64_t vdi_block_host(const struct vdi_state *s, uint32_t index)
{
    return s->hdr.off_data + (uint64_t)index * s->stride + s->hdr.block_extra;
}

/* An entry that open refuses: its index is outside the map's range or
 * its block starts past the end of the file. */
static int check_entry(const struct vdi_state *s, uint32_t block, uint32_t e, uint64_t file_len)
{
    if (e >= s->hdr.blocks) {
        return err_setx(EINVAL,
                        "%s: vdi: block map entry %" PRIu32 " (block index %" PRIu32
                        ") is beyond the %" PRIu32 " blocks of the image",
                        ESC_NAME(s->node), block, e, s->hdr.blocks);
    }
    if (vdi_block_host(s, e) >= file_len) {
        return err_setx(EINVAL,
                        "%s: vdi: block map entry %" PRIu32 " points past the end of the file "
                        "(offset %" PRIu64 ", file %" PRIu64 " bytes)",
                        ESC_NAME(s->node), block, vdi_block_host(s, e), file_len);
    }
    return 0;
}

/* A writable image: the next allocation takes index 'allocated', so no
 * entry may use it or anything above, and no two may share a block. */
static int check_writable(const struct vdi_state *s)
{
    CLEANUP_FREE uint8_t *used = calloc((size_t)s->hdr.blocks / 8 + 1, 1);

    if (!used) {
        return err_set(ENOMEM, "vdi: block map check");
    }
    for (uint32_t b = 0; b < s->hdr.blocks; b++) {
        uint32_t e = s->map[b];
        if (!vdi_allocated(e)) {
            continue;
        }
        if (e >= s->hdr.allocated) {
            return err_setx(EINVAL,
                            "%s: vdi: block map entry %" PRIu32 " uses block %" PRIu32
                            ", beyond the %" PRIu32
                            " the header counts as allocated (check the image)",
                            ESC_NAME(s->node), b, e, s->hdr.allocated);
        }
        if (used[e / 8] & (1u << (e % 8))) {
            return err_setx(EINVAL,
                            "%s: vdi: block map entry %" PRIu32 " uses block %" PRIu32
                            ", which another entry uses too (check the image)",
                            ESC_NAME(s->node), b, e);
        }
        used[e / 8] |= (uint8_t)(1u << (e % 8));
    }
    return 0;
}

int vdi_load_map(struct vdi_state *s, bool check_entries, bool writable)
{
    const uint32_t chunk = 1u << 18; /* entries per read: 1 MiB */
    CLEANUP_FREE uint8_t *raw = malloc((size_t)chunk * 4);
    int64_t file_len = blk_get_length(s->file);
    int r;

    if (file_len < 0) {
        return (int)file_len;
    }
    /* The map lies inside the file (vdi_header_validate): its size is
     * bounded by what the file holds, not by what the header claims. */
    s->map = malloc(((size_t)s->hdr.blocks + 1) * sizeof *s->map);
    if (!raw || !s->map) {
        return err_set(ENOMEM, "%s: vdi: block map of %" PRIu32 " entries", ESC_NAME(s->node),
                       s->hdr.blocks);
    }
    for (uint32_t done = 0; done < s->hdr.blocks;) {
        uint32_t n = MIN(chunk, s->hdr.blocks - done);
        r = blk_pread(s->file, s->hdr.off_map + (uint64_t)done * 4, raw, (uint64_t)n * 4);
        if (r < 0) {
            return r;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t e = get_le32(raw + 4 * (size_t)i);
            if (check_entries && vdi_allocated(e) &&
                (r = check_entry(s, done + i, e, (uint64_t)file_len)) < 0) {
                return r;
            }
            s->map[done + i] = e;
        }
        done += n;
    }
    return check_entries && writable ? check_writable(s) : 0;
}

void vdi_map(const struct vdi_state *s, uint64_t off, uint64_t len, struct vdi_run *run)
{
    uint32_t b = (uint32_t)(off / VDI_BLOCK_SIZE);
    uint64_t in = off % VDI_BLOCK_SIZE;
    uint32_t e = vdi_entry(s, b);
    /* Stored blocks are contiguous only without per-block extra data. */
    bool can_merge = s->hdr.block_extra == 0;

    run->kind = vdi_allocated(e) ? VDI_DATA : VDI_HOLE;
    run->host = run->kind == VDI_DATA ? vdi_block_host(s, e) + in : 0;
    run->bytes = MIN(len, VDI_BLOCK_SIZE - in);
    while (run->bytes < len) {
        uint32_t next = vdi_entry(s, ++b);
        if (run->kind == VDI_HOLE ? vdi_allocated(next) : !can_merge || next != e + 1) {
            break;
        }
        e = next;
        run->bytes += MIN(len - run->bytes, VDI_BLOCK_SIZE);
    }
}

void vdi_encode_entries(const struct vdi_state *s, uint32_t first, uint32_t count, uint8_t *out)
{
    for (uint32_t i = 0; i < count; i++) {
        put_le32(out + 4 * (size_t)i, vdi_entry(s, first + i));
    }
}
