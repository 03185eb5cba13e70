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
#include <string.h>
#include <unistd.h>

#include "block/block.h"
#include "common/bytes.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "fuzz-image.h"

#define MAX_WRITE (64u << 10)
#define MAX_FILE (16u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    fuzz_must(pwrite(fd, s, len, off) == (ssize_t)len, "pwrite");
}

/* Build the file the input describes in one memfd, reused for every
 * input; false when the input is too short to describe one. */
static bool input_file(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    if (size < 4) {
        return false;
    }
    int fd = fuzz_image_fd(path, pathlen);
    uint64_t fsize = (uint64_t)(get_le32(data) & 0x7fffffffu) * 65536;
    if (fsize > MAX_FILE) {
        fsize = MAX_FILE;
    }
    fuzz_must(ftruncate(fd, (off_t)fsize) == 0, "ftruncate");
    for (size_t pos = 4; pos + 6 <= size;) {
        uint64_t off = get_le32(data + pos);
        size_t len = (size_t)data[pos + 4] | (size_t)data[pos + 5] << 8;
        pos += 6;
        if (len > size - pos) {
            len = size - pos;
        }
        if (off < fsize && len) {
            size_t n = len < fsize - off ? len : (size_t)(fsize - off);
            fuzz_must(pwrite(fd, data + pos, n, (off_t)off) == (ssize_t)n, "pwrite");
        }
        pos += len;
    }
    if (get_le32(data) & 0x80000000u) {
        fix_checksum(fd, 64 * 1024, 4096);
        fix_checksum(fd, 128 * 1024, 4096);
        fix_checksum(fd, 192 * 1024, 65536);
        fix_checksum(fd, 256 * 1024, 65536);
    }
    return true;
}

static void write_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img);

    memset(fuzz_buf, 0x5a, MAX_WRITE);
    for (size_t k = 1; k <= 2 && vsize >= 512; k++) {
        uint64_t off = (fuzz_pick(data, size, 8 * k) % vsize) & ~(uint64_t)511;
        uint64_t len = vsize - off < MAX_WRITE ? vsize - off : MAX_WRITE;
        (void)blk_image_pwrite(img, off, fuzz_buf, len, 0);
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
        fuzz_read_image(img, fuzz_pick(data, size, 0));
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
        fuzz_read_image(img, fuzz_pick(data, size, 0));
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
