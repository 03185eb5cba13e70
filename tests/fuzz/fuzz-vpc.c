/* tests/fuzz/fuzz-vpc.c: libFuzzer harness for the vpc (VHD) driver.  The
 * input is the whole image file, written to a memfd and opened by its
 * /proc/self/fd path as vpc, read-only and without its parent, as "diskimg
 * info/map" do: a few ranges are read and block status is walked.  Then
 * the image is opened read-write (a dynamic one allocates blocks, moves its
 * footer and writes its BAT back at flush and close, all into the memfd)
 * and written at a few places the input picks.  Everything is bounded (64
 * extents, 1 MiB per read, 64 KiB per write).
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
#include "common/error.h"

#define MAX_READ (1u << 20)
#define MAX_WRITE (64u << 10)
#define MAX_EXTENTS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t buf[MAX_READ];

static void input_file(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    static int fd = -1;
    size_t done = 0;

    if (fd < 0) {
        fd = memfd_create("fuzz-vpc", MFD_CLOEXEC);
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

/* An offset the input picks, from 8 bytes at its end (0 when short). */
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
    len = len > vsize - off ? vsize - off : len;
    len = len > MAX_READ ? MAX_READ : len;
    if (len) {
        (void)blk_image_pread(img, off, buf, len);
    }
}

static void read_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img), pos = 0;

    read_range(img, vsize, 0, 64 * 1024);
    read_range(img, vsize, vsize / 2, 4096);
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

    memset(buf, 0xa5, MAX_WRITE);
    for (size_t k = 0; k < 3 && vsize; k++) {
        uint64_t off = pick(data, size, 8 * (k + 1)) % vsize;
        uint64_t len = (pick(data, size, 8 * k) % MAX_WRITE) + 1;
        len = len > vsize - off ? vsize - off : len;
        (void)blk_image_pwrite(img, off, buf, len, k == 2 ? BLK_REQ_FUA : 0);
        (void)blk_image_pwrite_zeroes(img, off / 2, len, 0);
    }
    (void)blk_image_flush(img);
    read_range(img, vsize, 0, 64 * 1024);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = "vpc",
        .read_only = true,
        .no_backing = true,
    };
    struct blk_image_info info;

    input_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        return 0;
    }
    read_image(img, data, size);
    (void)blk_image_get_info(img, &info);
    blk_image_info_free(&info); /* what it filled in, even on failure */
    blk_image_close(img);
    err_clear();

    o.read_only = false;
    if (blk_image_open(&img, &o) == 0) {
        write_image(img, data, size);
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
