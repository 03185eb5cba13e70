/* tests/fuzz/fuzz-vmdk.c: libFuzzer harness for the vmdk driver.  The
 * input is the whole image file (a sparse extent or a text descriptor),
 * written to a memfd and opened as vmdk by its /proc/self/fd path,
 * --untrusted, so that a descriptor's extents are refused rather than
 * looked up beside the memfd.  A few ranges are read, block status is
 * walked (trapping on an empty or overlong extent, which would hang
 * "diskimg map"), info and check run; then the image is opened
 * read-write, one write and a flush go through the allocating (or
 * stream) path, and it is closed, which writes to the memfd only.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t buf[MAX_READ];

static void input_file(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    static int fd = -1;
    size_t done = 0;

    if (fd < 0) {
        fd = memfd_create("fuzz-vmdk", MFD_CLOEXEC);
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

static void read_image(struct blk_image *img, uint64_t pick)
{
    uint64_t vsize = blk_image_size(img), pos = 0;

    read_range(img, vsize, 0, 64 * 1024);
    read_range(img, vsize, vsize > 4096 ? vsize - 4096 : 0, 4096);
    if (vsize) {
        read_range(img, vsize, pick % vsize, 128 * 1024);
    }
    for (unsigned i = 0; i < MAX_EXTENTS && pos < vsize; i++) {
        struct blk_extent ext;
        if (blk_image_block_status(img, pos, vsize - pos, &ext) < 0) {
            break;
        }
        if (ext.length == 0 || ext.length > vsize - pos) {
            fprintf(stderr, "block status at %llu: extent of %llu bytes\n", (unsigned long long)pos,
                    (unsigned long long)ext.length);
            __builtin_trap();
        }
        read_range(img, vsize, pos, ext.length < 65536 ? ext.length : 65536);
        pos += ext.length;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = "vmdk",
        .read_only = true,
        .untrusted = true,
    };
    struct blk_check_result res;
    struct blk_image_info info;
    uint64_t pick = 0;

    if (size >= 8) {
        memcpy(&pick, data + size - 8, sizeof pick);
    }
    input_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        return 0;
    }
    read_image(img, pick);
    memset(&info, 0, sizeof info);
    (void)blk_image_get_info(img, &info);
    blk_image_info_free(&info);
    (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
    blk_image_close(img);
    err_clear();

    o.read_only = false;
    if (blk_image_open(&img, &o) == 0) {
        uint64_t vsize = blk_image_size(img);
        if (vsize) {
            uint64_t off = (pick % vsize) & ~(uint64_t)511;
            uint64_t len = vsize - off < 65536 ? vsize - off : 65536;
            memset(buf, 0x5a, len);
            (void)blk_image_pwrite(img, off, buf, len, 0);
            (void)blk_image_pwrite(img, 0, buf, vsize < 4096 ? vsize : 4096, 0);
            (void)blk_image_flush(img);
            read_image(img, pick);
        }
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
