/* tests/fuzz/fuzz-qcow2.c: libFuzzer harness for opening and reading an
 * image.  The input is the whole image file: it is written to a memfd and
 * opened by its /proc/self/fd path with the format probed (qcow2 or raw),
 * read-only and without backing files, as "diskimg info/check/map" do.
 * Then a few ranges are read, block status is walked over the image, the
 * image is checked, and closed.  Everything is bounded (64 extents, 1 MiB
 * per read) so that a slow input means a slow driver, not a slow harness.
 * Two more passes follow when the first one opened the image: its first
 * internal snapshot is read the same way (diskimg serve -l), and the
 * image is opened read-write and repaired (diskimg check -r all), which
 * writes to the memfd only.
 *
 * Besides the sanitizers, the harness traps on broken block-status
 * invariants (an empty or overlong extent would hang "diskimg map").
 *
 * Build and run: see tests/fuzz/README.md. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "block/bitmap.h"
#include "block/block.h"
#include "common/error.h"

#define MAX_READ (1u << 20)
#define MAX_EXTENTS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t buf[MAX_READ];

/* One memfd for the whole run, rewritten for each input. */
static int input_file(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    static int fd = -1;
    size_t done = 0;

    if (fd < 0) {
        fd = memfd_create("fuzz-qcow2", MFD_CLOEXEC);
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
    return 0;
}

static void read_range(struct blk_image *img, uint64_t size, uint64_t off, uint64_t len)
{
    if (off >= size) {
        return;
    }
    if (len > size - off) {
        len = size - off;
    }
    if (len > MAX_READ) {
        len = MAX_READ;
    }
    if (len) {
        (void)blk_image_pread(img, off, buf, len);
    }
}

/* Reads and block status over an open image. */
static void read_image(struct blk_image *img, const uint8_t *data, size_t size)
{
    uint64_t vsize = blk_image_size(img);

    /* The start, the middle, the end, and one place the input picks. */
    read_range(img, vsize, 0, 64 * 1024);
    read_range(img, vsize, vsize / 2, 4096);
    read_range(img, vsize, vsize > 4096 ? vsize - 4096 : 0, 4096);
    if (size >= 16 && vsize) {
        uint64_t pick;
        memcpy(&pick, data + size - 8, sizeof pick);
        read_range(img, vsize, pick % vsize, MAX_READ);
    }

    /* Walk block status, reading the start of each extent. */
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

/* Load a persistent bitmap and walk at most 64 of its extents. */
static void walk_bitmap(struct blk_image *img, const char *name)
{
    struct blk_bitmap *bm = NULL;

    if (blk_image_load_bitmap(img, name, &bm) < 0) {
        err_clear();
        return;
    }
    uint64_t pos = 0;
    for (int i = 0; i < 64 && pos < bm->size; i++) {
        bool dirty;
        uint64_t run;
        blk_bitmap_extent(bm, pos, bm->size - pos, &dirty, &run);
        pos += run;
    }
    blk_bitmap_free(bm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    char snapshot[64] = "";
    struct blk_image *img = NULL;
    struct blk_image_opts o = {
        .filename = path,
        .format = NULL, /* probe */
        .read_only = true,
        .no_backing = true,
    };
    struct blk_check_result res;
    struct blk_image_info info;

    input_file(data, size, path, sizeof path);
    if (blk_image_open(&img, &o) < 0) {
        err_clear();
        return 0;
    }
    read_image(img, data, size);
    if (blk_image_get_info(img, &info) == 0 && info.n_snapshots && info.snapshots[0].id) {
        snprintf(snapshot, sizeof snapshot, "%s", info.snapshots[0].id);
    }
    if (info.n_bitmaps && info.bitmaps[0].name) {
        walk_bitmap(img, info.bitmaps[0].name);
    }
    blk_image_info_free(&info); /* what it filled in, even on failure */
    (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
    blk_image_close(img);
    err_clear();

    if (snapshot[0]) {
        blk_kv_set(&o.options, "snapshot", snapshot);
        if (blk_image_open(&img, &o) == 0) {
            read_image(img, data, size);
            blk_image_close(img);
        }
        o.options.n = 0;
        err_clear();
    }

    o.read_only = false;
    o.for_check = true;
    if (blk_image_open(&img, &o) == 0) {
        if (blk_image_check(img, BLK_REPAIR_ALL, NULL, &res) == 0) {
            (void)blk_image_check(img, BLK_REPAIR_NONE, NULL, &res);
        }
        blk_image_close(img);
    }
    err_clear();
    return 0;
}
