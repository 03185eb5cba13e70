/* tests/fuzz/fuzz-image.c: see fuzz-image.h. */
#include "fuzz-image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/error.h"

#define MAX_EXTENTS 64

uint8_t fuzz_buf[FUZZ_MAX_READ];

void fuzz_must(bool ok, const char *what)
{
    if (!ok) {
        perror(what);
        abort();
    }
}

int fuzz_image_fd(char *path, size_t pathlen)
{
    static int fd = -1;

    if (fd < 0) {
        fd = memfd_create("fuzz-image", MFD_CLOEXEC);
        fuzz_must(fd >= 0, "memfd_create");
    }
    fuzz_must(ftruncate(fd, 0) == 0, "ftruncate");
    snprintf(path, pathlen, "/proc/self/fd/%d", fd);
    return fd;
}

void fuzz_image_file(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    int fd = fuzz_image_fd(path, pathlen);

    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
        fuzz_must(n > 0, "pwrite");
        done += (size_t)n;
    }
}

uint64_t fuzz_pick(const uint8_t *data, size_t size, size_t back)
{
    uint64_t v = 0;

    if (size >= back + 8) {
        memcpy(&v, data + size - back - 8, sizeof v);
    }
    return v;
}

void fuzz_read_range(struct blk_image *img, uint64_t off, uint64_t len)
{
    uint64_t vsize = blk_image_size(img);

    if (off >= vsize) {
        return;
    }
    len = len > vsize - off ? vsize - off : len;
    len = len > FUZZ_MAX_READ ? FUZZ_MAX_READ : len;
    if (len) {
        (void)blk_image_pread(img, off, fuzz_buf, len);
    }
}

void fuzz_read_image(struct blk_image *img, uint64_t pick)
{
    uint64_t vsize = blk_image_size(img), pos = 0;

    fuzz_read_range(img, 0, 64 * 1024);
    fuzz_read_range(img, vsize / 2, 4096);
    fuzz_read_range(img, vsize > 4096 ? vsize - 4096 : 0, 4096);
    if (vsize) {
        fuzz_read_range(img, pick % vsize, FUZZ_MAX_READ);
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
        fuzz_read_range(img, pos, ext.length < 65536 ? ext.length : 65536);
        pos += ext.length;
    }
}

void fuzz_write_round(const uint8_t *data, size_t size, uint64_t pick,
                      void (*change)(struct blk_image *img, void *opaque),
                      void (*inspect)(struct blk_image *img, void *opaque), void *opaque)
{
    char path[64];
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .no_backing = true,
        .untrusted = true,
    };
    struct blk_check_result res;

    fuzz_image_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        return;
    }
    change(img, opaque);
    blk_image_close(img);
    err_clear();

    o.read_only = true;
    if (blk_image_open(&img, &o) == 0) {
        if (inspect) {
            inspect(img, opaque);
        }
        fuzz_read_image(img, pick);
        (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
        blk_image_close(img);
    }
    err_clear();
}
