/* tests/unit/test-probe.c: format probing over crafted first sectors: each
 * recogniser of formats/foreign.c, qcow2, vpc (and its trailer probe over
 * a last sector) and raw, and how the registry ranks claims
 * (blk_probe_all: score order, ties, a second claim). */
#include <errno.h>
#include <string.h>

#include "block/driver.h"
#include "check.h"
#include "formats/foreign.h"
#include "formats/vpc/vpc.h"
#include "formats/vmdk/vmdk.h"

CHECK_GLOBALS

static uint8_t sec[BLK_PROBE_BYTES];

static void clear(void)
{
    memset(sec, 0, sizeof sec);
}

static void put(size_t at, const void *p, size_t n)
{
    memcpy(sec + at, p, n);
}

static void put_le32(size_t at, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        sec[at + i] = (uint8_t)(v >> (8 * i));
    }
}

static const char *probed(const char *filename)
{
    const struct blk_driver *d = blk_probe_format(sec, sizeof sec, filename);

    return d ? d->name : "(tie)";
}

static void test_qcow_and_qcow2(void)
{
    clear();
    put(0, "QFI\xfb\0\0\0\x01", 8);
    CHECK_EQ(foreign_probe_qcow(sec, sizeof sec, NULL), 100);
    CHECK(strcmp(probed(NULL), "qcow") == 0);
    put(0, "QFI\xfb\0\0\0\x03", 8);
    CHECK_EQ(foreign_probe_qcow(sec, sizeof sec, NULL), 0);
    CHECK(strcmp(probed(NULL), "qcow2") == 0);
    put(0, "QFI\xfb\0\0\0\x00", 8); /* version 0: nobody's */
    CHECK(strcmp(probed(NULL), "raw") == 0);
    CHECK_EQ(foreign_probe_qcow(sec, 47, NULL), 0); /* header is 48 bytes */
}

static void test_qed(void)
{
    clear();
    put(0, "QED", 4);
    CHECK_EQ(foreign_probe_qed(sec, sizeof sec, NULL), 100);
    CHECK_EQ(foreign_probe_qed(sec, 63, NULL), 0);
    put(3, "\x01", 1);
    CHECK_EQ(foreign_probe_qed(sec, sizeof sec, NULL), 0);
}

static void test_vmdk(void)
{
    static const struct {
        const char *text;
        int score;
    } rows[] = {
        {"# Disk DescriptorFile\nversion=1\nCID=1\n", 100},
        {"version=2\n", 100},
        {"version=3\r\n", 100},
        {"#a\n#b\n   \n  \r\nversion=1\n", 100},
        {"version=4\n", 0},
        {"  x\nversion=1\n", 0},   /* spaces must end the line */
        {"\nversion=1\n", 0},      /* an empty line is not skipped */
        {"CID=1\nversion=1\n", 0}, /* version must come first */
        {"version=1", 0},          /* no line end */
        {"# only a comment", 0},   /* runs off the end */
        {"Version=1\n", 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        clear();
        put(0, rows[i].text, strlen(rows[i].text));
        /* The buffer ends right after the text, as a short file would. */
        int got = vmdk_probe(sec, strlen(rows[i].text), NULL);
        if (got != rows[i].score) {
            fprintf(stderr, "vmdk text %zu scores %d\n", i, got);
            CHECK(0);
        }
    }
    clear();
    put(0, "KDMV", 4);
    CHECK_EQ(vmdk_probe(sec, sizeof sec, NULL), 100);
    put(0, "COWD", 4);
    CHECK_EQ(vmdk_probe(sec, sizeof sec, NULL), 100);
    CHECK_EQ(vmdk_probe(sec, 3, NULL), 0);
}

static void test_vpc_vhdx(void)
{
    clear();
    put(0, "conectix", 8);
    CHECK(strcmp(probed(NULL), "vpc") == 0);
    put(0, "vhdxfile", 8);
    CHECK(strcmp(probed(NULL), "vhdx") == 0);
    put(0, "vhdxfilf", 8);
    CHECK(strcmp(probed(NULL), "raw") == 0);
}

/* A fixed VHD: its footer is the file's last sector, and counts only
 * whole (cookie, checksum, type 2). */
static void test_vpc_tail(void)
{
    static uint8_t tail[BLK_PROBE_BYTES];
    struct vpc_footer f = {
        .type = VPC_FIXED, .creator_app = "qemu", .cyls = 1, .heads = 4, .secs = 17};
    const struct blk_driver *d;

    clear();
    vpc_build_footer(tail, &f);
    CHECK_EQ(vpc_probe_tail(tail, sizeof tail, NULL), 100);
    d = blk_probe_format_tail(sec, sizeof sec, tail, sizeof tail, NULL);
    CHECK(d && strcmp(d->name, "vpc") == 0);
    CHECK(strcmp(probed(NULL), "raw") == 0); /* without the tail: raw, as qemu */
    CHECK_EQ(vpc_probe_tail(tail, sizeof tail - 1, NULL), 0);
    tail[100] ^= 1; /* checksum no longer matches */
    CHECK_EQ(vpc_probe_tail(tail, sizeof tail, NULL), 0);
    d = blk_probe_format_tail(sec, sizeof sec, tail, sizeof tail, NULL);
    CHECK(d && strcmp(d->name, "raw") == 0);
    f.type = VPC_DYNAMIC; /* dynamic images are known by their first sector */
    vpc_build_footer(tail, &f);
    CHECK_EQ(vpc_probe_tail(tail, sizeof tail, NULL), 0);
    /* A qcow2 header first and a fixed footer last: two claims, a tie. */
    f.type = VPC_FIXED;
    vpc_build_footer(tail, &f);
    put(0, "QFI\xfb\0\0\0\x03", 8);
    CHECK(blk_probe_format_tail(sec, sizeof sec, tail, sizeof tail, NULL) == NULL);
}

/* The checksum's test vector, and qemu-img's CHS rounding. */
static void test_vpc_geometry(void)
{
    static const struct {
        uint64_t asked, size;
    } rows[] = {
        {1048576, 1079296},
        {10485760, 10514432},
        {67108864, 67125248},
        {1073741824, 1073995776},
        {107374182400, 107374632960},
        {136365219840, 136365219840},
        {140737488355328 / 64, 0}, /* 2 TiB: past 2040 GiB */
        {1024, 34816},
        {0, 0},
    };
    uint8_t fb[VPC_FOOTER_SIZE] = "conectix";

    CHECK_EQ(vpc_checksum(fb, sizeof fb, 64), 0xfffffca2u);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint16_t c;
        uint8_t h, s;
        uint64_t sectors = 0;
        int r = vpc_create_geometry(rows[i].asked, false, &c, &h, &s, &sectors);
        if (rows[i].asked > VPC_MAX_SECTORS * 512) {
            CHECK(r == -EFBIG);
            continue;
        }
        CHECK_EQ(r, 0);
        if (sectors * 512 != rows[i].size) {
            fprintf(stderr, "vpc size %llu -> %llu\n", (unsigned long long)rows[i].asked,
                    (unsigned long long)(sectors * 512));
            CHECK(0);
        }
    }
}

static void test_vdi(void)
{
    clear();
    put(0, "<<< Oracle VM VirtualBox Disk Image >>>\n", 40);
    put_le32(64, 0xbeda107f);
    CHECK(strcmp(probed(NULL), "vdi") == 0); /* the driver's probe (formats/vdi) */
    CHECK(strcmp(blk_probe_format(sec, 511, NULL)->name, "raw") == 0);
    put_le32(64, 0x7f10dabe);
    CHECK(strcmp(probed(NULL), "raw") == 0);
}

static void test_parallels(void)
{
    clear();
    put(0, "WithoutFreeSpace", 16);
    put_le32(16, 2);
    CHECK_EQ(foreign_probe_parallels(sec, sizeof sec, NULL), 100);
    put(0, "WithouFreSpacExt", 16);
    CHECK_EQ(foreign_probe_parallels(sec, sizeof sec, NULL), 100);
    put_le32(16, 3);
    CHECK_EQ(foreign_probe_parallels(sec, sizeof sec, NULL), 0);
}

static void test_bochs(void)
{
    clear();
    put(0, "Bochs Virtual HD Image", 23);
    put(32, "Redolog", 8);
    put(48, "Growing", 8);
    put_le32(64, 0x00020000);
    CHECK_EQ(foreign_probe_bochs(sec, sizeof sec, NULL), 100);
    put_le32(64, 0x00010000);
    CHECK_EQ(foreign_probe_bochs(sec, sizeof sec, NULL), 100);
    put_le32(64, 0x00030000);
    CHECK_EQ(foreign_probe_bochs(sec, sizeof sec, NULL), 0);
    put_le32(64, 0x00020000);
    put(48, "Undoable", 9); /* only growing images */
    CHECK_EQ(foreign_probe_bochs(sec, sizeof sec, NULL), 0);
    put(48, "Growing!", 9); /* the field must end where the name does */
    CHECK_EQ(foreign_probe_bochs(sec, sizeof sec, NULL), 0);
}

static void test_cloop_dmg_luks(void)
{
    const char *cloop = "#!/bin/sh\n#V2.0 Format\nmodprobe cloop file=$0 && mount -r -t iso9660 "
                        "/dev/cloop $1\n";

    clear();
    put(0, cloop, strlen(cloop));
    CHECK_EQ(foreign_probe_cloop(sec, sizeof sec, NULL), 2);
    CHECK(strcmp(probed(NULL), "cloop") == 0);
    CHECK_EQ(foreign_probe_cloop(sec, 12, NULL), 2); /* as much as the buffer holds */
    sec[5] = 'X';
    CHECK_EQ(foreign_probe_cloop(sec, sizeof sec, NULL), 0);

    clear();
    CHECK_EQ(foreign_probe_dmg(sec, sizeof sec, "a/disk.dmg"), 2);
    CHECK_EQ(foreign_probe_dmg(sec, sizeof sec, ".dmg"), 0); /* more than the suffix */
    CHECK_EQ(foreign_probe_dmg(sec, sizeof sec, "disk.DMG"), 0);
    CHECK_EQ(foreign_probe_dmg(sec, sizeof sec, NULL), 0);
    CHECK(strcmp(probed("x.dmg"), "dmg") == 0);
    /* A magic outranks the name. */
    put(0, "QFI\xfb\0\0\0\x03", 8);
    CHECK(strcmp(probed("x.dmg"), "qcow2") == 0);

    clear();
    put(0, "LUKS\xba\xbe\0\x01", 8);
    CHECK_EQ(foreign_probe_luks(sec, sizeof sec, NULL), 100);
    put(0, "LUKS\xba\xbe\0\x02", 8); /* LUKS2: qemu 7.2 does not probe it */
    CHECK_EQ(foreign_probe_luks(sec, sizeof sec, NULL), 0);
}

static void test_rank(void)
{
    struct blk_probe p;

    clear();
    blk_probe_all(sec, sizeof sec, NULL, &p);
    CHECK(strcmp(p.best->name, "raw") == 0);
    CHECK(p.other == NULL);
    CHECK(!p.tie);

    /* qcow2 at 0 and a VDI signature at 64: both certain, a tie. */
    put(0, "QFI\xfb\0\0\0\x03", 8);
    put_le32(64, 0xbeda107f);
    blk_probe_all(sec, sizeof sec, NULL, &p);
    CHECK(p.tie);
    CHECK(p.other != NULL);
    CHECK(blk_probe_format(sec, sizeof sec, NULL) == NULL);

    /* qcow2 named x.dmg: qcow2 wins, dmg is a second claim. */
    put_le32(64, 0);
    blk_probe_all(sec, sizeof sec, "x.dmg", &p);
    CHECK(strcmp(p.best->name, "qcow2") == 0);
    CHECK(p.other && strcmp(p.other->name, "dmg") == 0);
    CHECK(!p.tie);
}

int main(void)
{
    RUN(test_qcow_and_qcow2);
    RUN(test_qed);
    RUN(test_vmdk);
    RUN(test_vpc_vhdx);
    RUN(test_vpc_tail);
    RUN(test_vpc_geometry);
    RUN(test_vdi);
    RUN(test_parallels);
    RUN(test_bochs);
    RUN(test_cloop_dmg_luks);
    RUN(test_rank);
    return check_exit();
}
