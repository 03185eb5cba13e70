/* tests/unit/test-qcow2-alloc.c: qcow2 allocation when the child fails a
 * write, over the recording driver: clusters taken for data that never
 * reached the file are given back, so check finds no leak. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/block.h"
#include "check.h"
#include "rec-driver.h"

CHECK_GLOBALS

#define REC_SIZE (4u << 20)

static uint8_t *image;
static uint64_t image_len;

/* A fresh 1 MiB qcow2 image (64 KiB clusters), as bytes. */
static int make_image(void)
{
    char dir[] = "/tmp/diskimg-qcow2-alloc-XXXXXX";
    char path[sizeof dir + 16];
    char *summary = NULL;
    FILE *f;
    int r;

    if (!mkdtemp(dir)) {
        return -errno;
    }
    snprintf(path, sizeof path, "%s/img.qcow2", dir);
    struct blk_create_opts o = {
        .filename = path, .format = "qcow2", .size = 1u << 20, .size_set = true};
    r = blk_create(&o, &summary);
    free(summary);
    f = r == 0 ? fopen(path, "rb") : NULL;
    if (f) {
        image = malloc(REC_SIZE);
        image_len = image ? fread(image, 1, REC_SIZE, f) : 0;
        fclose(f);
    }
    unlink(path);
    rmdir(dir);
    return image_len ? 0 : -EIO;
}

static struct blk_image *open_on_rec(void)
{
    struct blk_image_opts o = {
        .filename = "size=4194304",
        .protocol = "rec",
        .format = "qcow2",
        .cache = BLK_CACHE_WRITEBACK,
    };
    struct blk_image *img = NULL;

    rec_preload = image;
    rec_preload_len = image_len;
    CHECK_EQ(blk_image_open(&img, &o), 0);
    rec_preload = NULL;
    rec_preload_len = 0;
    return img;
}

static void test_compressed_write_fails(void)
{
    struct blk_image *img = open_on_rec();
    struct blk_check_result res;
    uint8_t data[1000];

    if (!img) {
        return;
    }
    memset(data, 0x5a, sizeof data); /* never decompressed: the write fails */
    /* The file ends at image_len: the data goes to a new cluster there. */
    rec_fail_writes_from = image_len;
    CHECK(blk_image_pwrite_compressed(img, 0, 65536, data, sizeof data) < 0);
    rec_fail_writes_from = 0;
    CHECK_EQ(blk_image_check(img, BLK_REPAIR_NONE, NULL, &res), 0);
    CHECK_EQ(res.corruptions, 0);
    CHECK_EQ(res.leaks, 0);
    /* The cluster is free again: the same write now succeeds. */
    CHECK_EQ(blk_image_pwrite_compressed(img, 0, 65536, data, sizeof data), 0);
    CHECK_EQ(blk_image_check(img, BLK_REPAIR_NONE, NULL, &res), 0);
    CHECK_EQ(res.corruptions, 0);
    CHECK_EQ(res.leaks, 0);
    CHECK_EQ(blk_image_close(img), 0);
}

int main(void)
{
    if (make_image() < 0) {
        fprintf(stderr, "cannot create a qcow2 image\n");
        return 1;
    }
    RUN(test_compressed_write_fails);
    free(image);
    return check_exit();
}
