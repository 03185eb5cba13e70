/* tests/fuzz/fuzz-vdi.c: libFuzzer harness for the vdi driver.  The input
 * is the whole image file: it is written to a memfd and opened by its
 * /proc/self/fd path as vdi (named, so every input reaches the header
 * parser), read-only: a few ranges are read, block status is walked and
 * the image is checked, as "diskimg info/map/check" do.  When that open
 * succeeds, the image is opened read-write and written: into a block the
 * input picks (allocating it when it is a hole), zeroes over another, and
 * checked again, which exercises the allocation path on hostile maps; the
 * writes go to the memfd only.  Everything is bounded (64 extents, 1 MiB
 * per read, 64 KiB per write).
 *
 * The harness traps on broken block-status invariants (an empty or
 * overlong extent would hang "diskimg map") and on a written range that
 * does not read back.
 *
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "block/block.h"
#include "common/error.h"

#define MAX_READ (1u << 20)
#define MAX_EXTENTS 64
#define WRITE_LEN 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t buf[MAX_READ];
static uint8_t wbuf[WRITE_LEN];

/* One memfd for the whole run, rewritten for each input. */
static void input_file(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    static int fd = -1;
    size_t done = 0;

    if (fd < 0) {
        fd = memfd_create("fuzz-vdi", MFD_CLOEXEC);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
    }
    if (ftruncate(fd, 0) < 0) {
        perror("ftruncate");
        abort();
    }
    while (done < size) {
        ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
        if (n <= 0) {
            perror("pwrite");
            abort();
        }
        done += (size_t)n;
    }
    snprintf(path, pathlen, "/proc/self/fd/%d", fd);
}

static void read_range(struct blk_image *img, uint64_t size, uint64_t off, uint64_t len)
{
    if (off >= size) {
        return;
    }
    len = len > size - off ? size - off : len;
    len = len > MAX_READ ? MAX_READ : len;
    if (len) {
        (void)blk_image_pread(img, off, buf, len);
    }
}

/* A number the input picks, from its last bytes. */
static uint64_t pick(const uint8_t *data, size_t size, size_t back)
{
    uint64_t v = 0;

    if (size >= back + 8) {
        memcpy(&v, data + size - back - 8, sizeof v);
    }
    return v;
}

static void read_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img);

    read_range(img, vsize, 0, 64 * 1024);
    read_range(img, vsize, vsize / 2, 4096);
    read_range(img, vsize, vsize > 4096 ? vsize - 4096 : 0, 4096);
    if (vsize) {
        read_range(img, vsize, pick(data, size, 0) % vsize, MAX_READ);
    }
    uint64_t pos = 0;
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

/* Write a pattern where the input says, read it back, zero elsewhere. */
static void write_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img);

    if (vsize < WRITE_LEN) {
        return;
    }
    uint64_t off = (pick(data, size, 8) % (vsize - WRITE_LEN + 1)) & ~(uint64_t)511;
    memset(wbuf, 0x5a, sizeof wbuf);
    if (blk_image_pwrite(img, off, wbuf, WRITE_LEN, 0) == 0) {
        if (blk_image_pread(img, off, buf, WRITE_LEN) == 0 && memcmp(buf, wbuf, WRITE_LEN) != 0) {
            fprintf(stderr, "write at %llu does not read back\n", (unsigned long long)off);
            __builtin_trap();
        }
    }
    uint64_t zoff = (pick(data, size, 16) % (vsize - WRITE_LEN + 1)) & ~(uint64_t)511;
    (void)blk_image_pwrite_zeroes(img, zoff, WRITE_LEN, 0);
    (void)blk_image_flush(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = "vdi",
        .read_only = true,
        .no_backing = true,
    };
    struct blk_check_result res;
    struct blk_image_info info;

    input_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        /* A check opens what a normal open refuses (bad map entries). */
        o.for_check = true;
        if (blk_image_open(&img, &o) == 0) {
            (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
            blk_image_close(img);
        }
        err_clear();
        return 0;
    }
    read_image(img, data, size);
    if (blk_image_get_info(img, &info) == 0) {
        blk_image_info_free(&info);
    }
    (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
    blk_image_close(img);
    err_clear();

    o.read_only = false;
    if (blk_image_open(&img, &o) == 0) {
        write_image(img, data, size);
        (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
