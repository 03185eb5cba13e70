/* tests/fuzz/fuzz-vhdx.c: libFuzzer harness for the vhdx driver.
 *
 * A VHDX file is megabytes of zeroes around a few hundred bytes of
 * structure (every region is 1 MiB aligned), so the input is not the
 * file but a sparse description of it, which keeps seeds to a few KiB and
 * puts the fuzzer's mutations on the bytes that matter:
 *
 *   u32 LE   file size in 64 KiB units (at most 256: 16 MiB); bit 31 set:
 *            recompute the checksums of both headers and region tables
 *            once the file is built, so that mutations reach past them
 *   then records: u32 LE offset, u16 LE length, length bytes
 *
 * (make-vhdx-seeds.py turns an image into this form).  The file is built
 * in a memfd and opened as vhdx read-only, as "diskimg info/map" do: a
 * few ranges are read, block status is walked, the image is checked.
 * Then it is opened read-write as "diskimg check -r all" does, which
 * replays a dirty log into the memfd, and repaired; then opened
 * read-write as serve does and written at two places the input picks
 * (allocating blocks through the log).  Everything is
 * bounded (64 extents, 1 MiB per read, 64 KiB per write).
 *
 * Besides the sanitizers, the harness traps on broken block-status
 * invariants (an empty or overlong extent would hang "diskimg map").
 *
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "block/block.h"
#include "common/bytes.h"
#include "common/crc32c.h"
#include "common/error.h"

#define MAX_READ (1u << 20)
#define MAX_WRITE (64u << 10)
#define MAX_EXTENTS 64
#define MAX_FILE (16u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t buf[MAX_READ];

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void must(int ok, const char *what)
{
    if (!ok) {
        perror(what);
        abort();
    }
}

/* Give the checksummed structure of len bytes at off in fd a good
 * checksum (at 4, computed with the field as zero). */
static void fix_checksum(int fd, off_t off, size_t len)
{
    static uint8_t s[64 * 1024];

    if (pread(fd, s, len, off) != (ssize_t)len) {
        return; /* past the end of a short file */
    }
    memset(s + 4, 0, 4);
    put_le32(s + 4, crc32c(s, len));
    must(pwrite(fd, s, len, off) == (ssize_t)len, "pwrite");
}

/* Build the file the input describes in one memfd, reused for every
 * input; false when the input is too short to describe one. */
static bool input_file(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    static int fd = -1;

    if (size < 4) {
        return false;
    }
    if (fd < 0) {
        fd = memfd_create("fuzz-vhdx", MFD_CLOEXEC);
        must(fd >= 0, "memfd_create");
    }
    uint64_t fsize = (uint64_t)(le32(data) & 0x7fffffffu) * 65536;
    if (fsize > MAX_FILE) {
        fsize = MAX_FILE;
    }
    must(ftruncate(fd, 0) == 0 && ftruncate(fd, (off_t)fsize) == 0, "ftruncate");
    for (size_t pos = 4; pos + 6 <= size;) {
        uint64_t off = le32(data + pos);
        size_t len = (size_t)data[pos + 4] | (size_t)data[pos + 5] << 8;
        pos += 6;
        if (len > size - pos) {
            len = size - pos;
        }
        if (off < fsize && len) {
            size_t n = len < fsize - off ? len : (size_t)(fsize - off);
            must(pwrite(fd, data + pos, n, (off_t)off) == (ssize_t)n, "pwrite");
        }
        pos += len;
    }
    if (le32(data) & 0x80000000u) {
        fix_checksum(fd, 64 * 1024, 4096);
        fix_checksum(fd, 128 * 1024, 4096);
        fix_checksum(fd, 192 * 1024, 65536);
        fix_checksum(fd, 256 * 1024, 65536);
    }
    snprintf(path, pathlen, "/proc/self/fd/%d", fd);
    return true;
}

/* A number the input picks, from 8 bytes at its end (0 when short). */
static uint64_t pick(const uint8_t *data, size_t size, size_t back)
{
    uint64_t v = 0;

    if (size >= back + 8) {
        memcpy(&v, data + size - back - 8, sizeof v);
    }
    return v;
}

static void read_range(struct blk_image *img, uint64_t vsize, uint64_t off, uint64_t len)
{
    if (off >= vsize) {
        return;
    }
    if (len > vsize - off) {
        len = vsize - off;
    }
    if (len > MAX_READ) {
        len = MAX_READ;
    }
    if (len) {
        (void)blk_image_pread(img, off, buf, len);
    }
}

static void read_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img), pos = 0;

    read_range(img, vsize, 0, 64 * 1024);
    read_range(img, vsize, vsize / 2, 4096);
    read_range(img, vsize, vsize > 4096 ? vsize - 4096 : 0, 4096);
    if (vsize) {
        read_range(img, vsize, pick(data, size, 0) % vsize, MAX_READ);
    }
    for (unsigned i = 0; i < MAX_EXTENTS && pos < vsize; i++) {
        struct blk_extent ext;
        if (blk_image_block_status(img, pos, vsize - pos, &ext) < 0) {
            break;
        }
        if (ext.length == 0 || ext.length > vsize - pos) {
            fprintf(stderr, "block status at %llu: extent of %llu bytes (%llu left)\n",
                    (unsigned long long)pos, (unsigned long long)ext.length,
                    (unsigned long long)(vsize - pos));
            __builtin_trap();
        }
        read_range(img, vsize, pos, ext.length < 65536 ? ext.length : 65536);
        pos += ext.length;
    }
}

static void write_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img);

    memset(buf, 0x5a, MAX_WRITE);
    for (size_t k = 1; k <= 2 && vsize >= 512; k++) {
        uint64_t off = (pick(data, size, 8 * k) % vsize) & ~(uint64_t)511;
        uint64_t len = vsize - off < MAX_WRITE ? vsize - off : MAX_WRITE;
        (void)blk_image_pwrite(img, off, buf, len, 0);
    }
    (void)blk_image_flush(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = "vhdx",
        .read_only = true,
        .no_backing = true,
    };
    struct blk_check_result res;
    struct blk_image_info info;

    if (!input_file(data, size, path, sizeof path)) {
        return 0;
    }
    if (blk_image_open(&img, &o) == 0) {
        read_image(img, data, size);
        if (blk_image_get_info(img, &info) == 0) {
            blk_image_info_free(&info);
        }
        (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
        blk_image_close(img);
    }
    err_clear();

    o.read_only = false;
    o.for_check = true;
    if (blk_image_open(&img, &o) == 0) {
        (void)blk_image_check(img, BLK_REPAIR_ALL, NULL, &res);
        blk_image_close(img);
    }
    err_clear();

    o.for_check = false;
    if (blk_image_open(&img, &o) == 0) {
        write_image(img, data, size);
        read_image(img, data, size);
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
