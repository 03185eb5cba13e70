/* tests/unit/test-vdi-header.c: the vdi driver's header rules over
 * crafted header sectors (one row per refusal, each with the words its
 * message must hold), and the guest-to-host mapping over a crafted map
 * (runs of holes and of contiguous blocks, per-block extra data). */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "common/bytes.h"
#include "common/error.h"
#include "formats/vdi/vdi.h"

CHECK_GLOBALS

static uint8_t sec[VDI_SECTOR];

/* The header qemu-img writes for a 4 MiB dynamic image. */
static void good_header(void)
{
    memset(sec, 0, sizeof sec);
    put_le32(sec + VDI_OFF_SIGNATURE, VDI_SIGNATURE);
    put_le32(sec + VDI_OFF_VERSION, VDI_VERSION_1_1);
    put_le32(sec + VDI_OFF_HEADER_SIZE, VDI_HEADER_SIZE_QEMU);
    put_le32(sec + VDI_OFF_TYPE, VDI_TYPE_NORMAL);
    put_le32(sec + VDI_OFF_MAP, 512);
    put_le32(sec + VDI_OFF_DATA, 1024);
    put_le32(sec + VDI_OFF_SECTOR_SIZE, 512);
    put_le64(sec + VDI_OFF_DISK_SIZE, 4u << 20);
    put_le32(sec + VDI_OFF_BLOCK_SIZE, VDI_BLOCK_SIZE);
    put_le32(sec + VDI_OFF_BLOCKS, 4);
}

static int validate(uint64_t file_len)
{
    struct vdi_header h;

    err_clear();
    vdi_header_decode(sec, &h);
    return vdi_header_validate(&h, file_len, "x.vdi");
}

static void test_good(void)
{
    good_header();
    CHECK_EQ(validate(1024), 0);
    CHECK_EQ(vdi_probe(sec, sizeof sec, NULL), 100);
    put_le32(sec + VDI_OFF_HEADER_SIZE, 0x190); /* VirtualBox's, with LCHS */
    put_le32(sec + VDI_OFF_TYPE, VDI_TYPE_FIXED);
    put_le64(sec + VDI_OFF_DISK_SIZE, (4u << 20) - 1000); /* odd sizes are rounded */
    CHECK_EQ(validate(1024), 0);
    put_le32(sec + VDI_OFF_BLOCKS, 0); /* an empty disk: no map at all */
    put_le64(sec + VDI_OFF_DISK_SIZE, 0);
    put_le32(sec + VDI_OFF_DATA, 512);
    CHECK_EQ(validate(512), 0);
}

struct row {
    unsigned off;
    int width; /* 4 or 8 bytes */
    uint64_t value;
    uint64_t file_len;
    const char *words;
};

static void test_refusals(void)
{
    static const struct row rows[] = {
        {VDI_OFF_SIGNATURE, 4, 0x7f10dabe, 1024, "not a VDI image"},
        {VDI_OFF_VERSION, 4, 0x00010000, 1024, "version 1.0 is not supported"},
        {VDI_OFF_HEADER_SIZE, 4, 0xffffffff, 1024, "header size 4294967295 is outside"},
        {VDI_OFF_HEADER_SIZE, 4, 0x17c, 1024, "header size 380 is outside"},
        {VDI_OFF_TYPE, 4, 4, 1024, "image type 4 is not supported"},
        {VDI_OFF_UUID_LINK + 15, 4, 1, 1024, "non-null link UUID"},
        {VDI_OFF_UUID_PARENT, 4, 1, 1024, "non-null parent UUID"},
        {VDI_OFF_SECTOR_SIZE, 4, 4096, 1024, "sector size 4096 is not 512"},
        {VDI_OFF_BLOCK_SIZE, 4, 2u << 20, 1024, "block size 2097152 is not 1048576"},
        {VDI_OFF_BLOCK_EXTRA, 4, 100, 1024, "extra data of 100 bytes"},
        {VDI_OFF_BLOCK_EXTRA, 4, 4u << 20, 1024, "extra data of 4194304 bytes"},
        {VDI_OFF_BLOCKS, 4, 0xffffffff, 1024, "4294967295 blocks is too many"},
        {VDI_OFF_BLOCKS, 4, 3, 1024, "needs more than the 3 blocks"},
        {VDI_OFF_DISK_SIZE, 8, UINT64_MAX, 1024, "needs more than the 4 blocks"},
        {VDI_OFF_MAP, 4, 0x201, 1024, "is not a multiple of 512"},
        {VDI_OFF_DATA, 4, 0x401, 1024, "is not a multiple of 512"},
        {VDI_OFF_MAP, 4, 0, 1024, "overlaps the header"},
        {VDI_OFF_BLOCKS, 4, 0x1fffff80, 1024, "overlaps the data area"},
        {VDI_OFF_MAP, 4, 1024, 1024, "overlaps the data area"},
        {VDI_OFF_DATA, 4, 0x80000000, 1024, "extends past the end of the file"},
        {VDI_OFF_SIGNATURE, 4, VDI_SIGNATURE, 520, "extends past the end of the file"},
    };

    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct row *r = &rows[i];
        good_header();
        if (r->off == VDI_OFF_DATA && r->value == 0x80000000) {
            put_le32(sec + VDI_OFF_BLOCKS, 0x1fffff00); /* a map the data offset leaves room for */
            put_le64(sec + VDI_OFF_DISK_SIZE, 0);
        }
        if (r->width == 8) {
            put_le64(sec + r->off, r->value);
        } else {
            put_le32(sec + r->off, (uint32_t)r->value);
        }
        int got = validate(r->file_len);
        CHECK(got < 0);
        if (!strstr(err_msg(), r->words) || !strstr(err_msg(), "x.vdi")) {
            fprintf(stderr, "row %zu: '%s' lacks '%s'\n", i, err_msg(), r->words);
            check_failures++;
        }
    }
}

static void test_map_runs(void)
{
    uint32_t map[6] = {VDI_UNALLOCATED, VDI_ZERO, 0, 1, 3, VDI_UNALLOCATED};
    struct vdi_state s = {.map = map, .stride = VDI_BLOCK_SIZE};
    struct vdi_run run;
    const uint64_t mib = VDI_BLOCK_SIZE;

    s.hdr.off_data = 1024;
    s.hdr.blocks = 6;
    /* Unallocated and zero blocks make one hole. */
    vdi_map(&s, 4096, 6 * mib - 4096, &run);
    CHECK_EQ(run.kind, VDI_HOLE);
    CHECK_EQ(run.bytes, 2 * mib - 4096);
    /* Blocks 0 and 1 of the data area are contiguous, 3 is not. */
    vdi_map(&s, 2 * mib + 512, 4 * mib - 512, &run);
    CHECK_EQ(run.kind, VDI_DATA);
    CHECK_EQ(run.host, 1024 + 512);
    CHECK_EQ(run.bytes, 2 * mib - 512);
    vdi_map(&s, 4 * mib, 2 * mib, &run);
    CHECK_EQ(run.host, 1024 + 3 * mib);
    CHECK_EQ(run.bytes, mib);
    /* A run stops at the length asked for. */
    vdi_map(&s, 2 * mib, 100, &run);
    CHECK_EQ(run.bytes, 100);
    /* With per-block extra data, blocks are never contiguous. */
    s.hdr.block_extra = 512;
    s.stride = VDI_BLOCK_SIZE + 512;
    vdi_map(&s, 2 * mib, 2 * mib, &run);
    CHECK_EQ(run.host, 1024 + 512);
    CHECK_EQ(run.bytes, mib);
    CHECK_EQ(vdi_block_host(&s, 3), 1024 + 3 * (mib + 512) + 512);
    /* Entries are written back little-endian. */
    uint8_t out[12];
    vdi_encode_entries(&s, 1, 3, out);
    CHECK_EQ(get_le32(out), VDI_ZERO);
    CHECK_EQ(get_le32(out + 8), 1);
}

int main(void)
{
    RUN(test_good);
    RUN(test_refusals);
    RUN(test_map_runs);
    return check_exit();
}
