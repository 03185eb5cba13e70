/* formats/vpc/footer.c: the VHD structures as bytes: checksums, CHS
 * geometry and qemu's size rules, the footer and the dynamic header, and
 * the probes.  Pure functions (no I/O), so the unit tests and the fuzzer
 * reach them directly.  Not for anything that reads the file. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "vpc.h"

uint32_t vpc_checksum(const uint8_t *buf, size_t len, size_t csum_at)
{
    uint32_t sum = 0;

    for (size_t i = 0; i < len; i++) {
        if (i < csum_at || i >= csum_at + 4) {
            sum += buf[i];
        }
    }
    return ~sum;
}

void vpc_chs(uint64_t sectors, uint16_t *c, uint8_t *h, uint8_t *s)
{
    uint64_t ch;
    uint32_t heads, spt;

    sectors = MIN(sectors, VPC_MAX_GEOMETRY);
    if (sectors >= 65535ull * 16 * 63) {
        spt = 255;
        heads = 16;
        ch = sectors / spt;
    } else {
        spt = 17;
        ch = sectors / spt;
        heads = (uint32_t)((ch + 1023) / 1024);
        if (heads < 4) {
            heads = 4;
        }
        if (ch >= heads * 1024ull || heads > 16) {
            spt = 31;
            heads = 16;
            ch = sectors / spt;
        }
        if (ch >= heads * 1024ull) {
            spt = 63;
            heads = 16;
            ch = sectors / spt;
        }
    }
    *c = (uint16_t)(ch / heads);
    *h = (uint8_t)heads;
    *s = (uint8_t)spt;
}

int vpc_create_geometry(uint64_t size, bool force_size, uint16_t *c, uint8_t *h, uint8_t *s,
                        uint64_t *sectors)
{
    uint64_t want = size / VPC_SECTOR;

    if (want > VPC_MAX_SECTORS) {
        return err_setx(EFBIG, "The image size is too large for file format 'vpc'");
    }
    *c = 0;
    *h = 0;
    *s = 0;
    if (force_size) {
        *c = VPC_CHS_MAX_C;
        *h = VPC_CHS_MAX_H;
        *s = VPC_CHS_MAX_S;
    } else {
        /* The smallest geometry that holds the size: qemu rounds up, one
         * sector at a time, so convert never truncates. */
        uint64_t start = MIN(VPC_MAX_GEOMETRY, want);
        for (uint64_t i = 0; start > (uint64_t)*c * *h * *s; i++) {
            vpc_chs(start + i, c, h, s);
        }
    }
    uint64_t chs = (uint64_t)*c * *h * *s;
    *sectors = chs == VPC_MAX_GEOMETRY ? want : chs;
    return 0;
}

/* Creators whose tools size the disk by current_size, not by geometry. */
static bool creator_uses_current_size(const char app[4])
{
    static const char *const apps[] = {"win ", "qem2", "d2v ", "CTXS", "tap\0"};

    for (size_t i = 0; i < sizeof apps / sizeof apps[0]; i++) {
        if (memcmp(app, apps[i], 4) == 0) {
            return true;
        }
    }
    return false;
}

uint64_t vpc_footer_size(const struct vpc_footer *f, enum vpc_size_calc calc)
{
    uint64_t chs = (uint64_t)f->cyls * f->heads * f->secs;
    bool current = calc == VPC_SIZE_AUTO ? creator_uses_current_size(f->creator_app)
                                         : calc == VPC_SIZE_CURRENT;

    if (current || chs == VPC_MAX_GEOMETRY) {
        return f->cur_size / VPC_SECTOR * VPC_SECTOR;
    }
    return chs * VPC_SECTOR;
}

int vpc_parse_footer(const uint8_t *buf, struct vpc_footer *f, const char *file, const char *where)
{
    uint32_t stored = get_be32(buf + 64), sum = vpc_checksum(buf, VPC_FOOTER_SIZE, 64);

    if (memcmp(buf, "conectix", 8) != 0) {
        return err_setx(EINVAL, "%s: vpc: no VHD footer (cookie \"conectix\") %s", file, where);
    }
    if (stored != sum) {
        return err_setx(EINVAL,
                        "%s: vpc: incorrect checksum of the footer %s (stored 0x%08" PRIx32
                        ", computed 0x%08" PRIx32 ")",
                        file, where, stored, sum);
    }
    memset(f, 0, sizeof *f);
    f->data_offset = get_be64(buf + 16);
    f->timestamp = get_be32(buf + 24);
    memcpy(f->creator_app, buf + 28, 4);
    memcpy(f->creator_host, buf + 36, 4);
    f->orig_size = get_be64(buf + 40);
    f->cur_size = get_be64(buf + 48);
    f->cyls = get_be16(buf + 56);
    f->heads = buf[58];
    f->secs = buf[59];
    f->type = get_be32(buf + 60);
    memcpy(f->uuid, buf + 68, 16);
    return 0;
}

void vpc_build_footer(uint8_t *buf, const struct vpc_footer *f)
{
    memset(buf, 0, VPC_FOOTER_SIZE);
    memcpy(buf, "conectix", 8);
    put_be32(buf + 8, 2);        /* features: the reserved bit, always set */
    put_be32(buf + 12, 0x10000); /* format version 1.0 */
    put_be64(buf + 16, f->data_offset);
    put_be32(buf + 24, f->timestamp);
    memcpy(buf + 28, f->creator_app, 4);
    put_be32(buf + 32, 0x50003); /* creator version, as qemu writes it */
    memcpy(buf + 36, "Wi2k", 4); /* creator host OS */
    put_be64(buf + 40, f->orig_size);
    put_be64(buf + 48, f->cur_size);
    put_be16(buf + 56, f->cyls);
    buf[58] = f->heads;
    buf[59] = f->secs;
    put_be32(buf + 60, f->type);
    memcpy(buf + 68, f->uuid, 16);
    put_be32(buf + 64, vpc_checksum(buf, VPC_FOOTER_SIZE, 64));
}

int vpc_parse_dyn_header(const uint8_t *buf, struct vpc_dyn_header *h, const char *file)
{
    uint32_t stored = get_be32(buf + 36), sum = vpc_checksum(buf, VPC_DYN_HEADER_SIZE, 36);

    if (memcmp(buf, "cxsparse", 8) != 0) {
        return err_setx(EINVAL, "%s: vpc: the dynamic header has no cookie \"cxsparse\"", file);
    }
    if (stored != sum) {
        return err_setx(EINVAL,
                        "%s: vpc: incorrect checksum of the dynamic header (stored 0x%08" PRIx32
                        ", computed 0x%08" PRIx32 ")",
                        file, stored, sum);
    }
    memset(h, 0, sizeof *h);
    h->table_offset = get_be64(buf + 16);
    h->max_entries = get_be32(buf + 28);
    h->block_size = get_be32(buf + 32);
    memcpy(h->parent_uuid, buf + 40, 16);
    h->parent_timestamp = get_be32(buf + 56);
    h->parent_name = buf + 64;
    for (int i = 0; i < 8; i++) {
        const uint8_t *e = buf + 576 + 24 * i;
        h->loc[i].code = get_be32(e);
        h->loc[i].space = get_be32(e + 4);
        h->loc[i].length = get_be32(e + 8);
        h->loc[i].offset = get_be64(e + 16);
    }
    if (h->block_size < VPC_SECTOR || !IS_POW2(h->block_size)) {
        return err_setx(EINVAL, "%s: vpc: invalid block size %" PRIu32, file, h->block_size);
    }
    return 0;
}

void vpc_build_dyn_header(uint8_t *buf, uint64_t table_offset, uint32_t entries,
                          uint32_t block_size)
{
    memset(buf, 0, VPC_DYN_HEADER_SIZE);
    memcpy(buf, "cxsparse", 8);
    put_be64(buf + 8, UINT64_MAX); /* unused: Microsoft's tools expect every bit set */
    put_be64(buf + 16, table_offset);
    put_be32(buf + 24, 0x10000);
    put_be32(buf + 28, entries);
    put_be32(buf + 32, block_size);
    put_be32(buf + 36, vpc_checksum(buf, VPC_DYN_HEADER_SIZE, 36));
}

int vpc_probe(const uint8_t *buf, size_t len, const char *filename)
{
    (void)filename;
    return len >= 8 && memcmp(buf, "conectix", 8) == 0 ? 100 : 0;
}

/* Only a whole, intact fixed-disk footer: cookie, checksum and type, so a
 * stray "conectix" in a raw disk's last sector does not count. */
int vpc_probe_tail(const uint8_t *buf, size_t len, const char *filename)
{
    (void)filename;
    if (len < VPC_FOOTER_SIZE) {
        return 0;
    }
    buf += len - VPC_FOOTER_SIZE;
    if (memcmp(buf, "conectix", 8) != 0 || get_be32(buf + 60) != VPC_FIXED) {
        return 0;
    }
    return get_be32(buf + 64) == vpc_checksum(buf, VPC_FOOTER_SIZE, 64) ? 100 : 0;
}
