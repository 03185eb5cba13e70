/* tests/unit/test-append-alloc.c: vpc, which appends new blocks at the
 * end of its file, over the recording driver, when the file refuses an
 * append: past the end of a file whose length cannot change (rec-fixed,
 * as an NBD export), or past a limit (rec with rec_fail_writes_from, as a
 * full disk).  A refused append writes nothing (not over the trailing
 * footer), and the next append that fits goes in its place, with no gap. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/block.h"
#include "common/error.h"
#include "check.h"
#include "rec-driver.h"

CHECK_GLOBALS

#define KiB 1024u
#define MiB (1024u * 1024u)
#define VPC_BLOCK (2 * MiB) /* the default block size */

struct bytes {
    uint8_t *data;
    uint64_t len;
};

static struct bytes vpc_image;

/* A fresh 8 MiB image of FORMAT (-o OPTIONS), as bytes. */
static int make_image(const char *format, const char *options, struct bytes *out)
{
    char dir[] = "/tmp/diskimg-append-alloc-XXXXXX";
    char path[sizeof dir + 16];
    char *summary = NULL;
    FILE *f;
    int r;

    if (!mkdtemp(dir)) {
        return -errno;
    }
    snprintf(path, sizeof path, "%s/img", dir);
    struct blk_create_opts o = {
        .filename = path, .format = format, .options = options, .size = 8 * MiB, .size_set = true};
    r = blk_create(&o, &summary);
    free(summary);
    f = r == 0 ? fopen(path, "rb") : NULL;
    if (f) {
        out->data = malloc(4 * MiB);
        out->len = out->data ? fread(out->data, 1, 4 * MiB, f) : 0;
        fclose(f);
    }
    unlink(path);
    rmdir(dir);
    return out->len ? 0 : -EIO;
}

/* IMG (FORMAT) on a PROTOCOL node that holds exactly its bytes. */
static struct blk_image *open_on(const struct bytes *img, const char *format, const char *protocol)
{
    struct blk_image_opts o = {
        .filename = "size=512", /* grown to the preloaded bytes */
        .protocol = protocol,
        .format = format,
        .cache = BLK_CACHE_WRITEBACK,
    };
    struct blk_image *out = NULL;

    rec_preload = img->data;
    rec_preload_len = img->len;
    CHECK_EQ(blk_image_open(&out, &o), 0);
    rec_preload = NULL;
    rec_preload_len = 0;
    return out;
}

static uint64_t file_length(struct blk_image *img)
{
    return (uint64_t)blk_get_length(blk_node_child(blk_image_root(img)));
}

/* The file's bytes now (they go when the image is closed). */
static struct bytes file_bytes(struct blk_image *img)
{
    struct bytes b = {NULL, file_length(img)};

    b.data = malloc(b.len);
    if (b.data) {
        memcpy(b.data, rec_data(), b.len);
    }
    return b;
}

static bool all_bytes(const uint8_t *p, uint64_t len, uint8_t v)
{
    for (uint64_t i = 0; i < len; i++) {
        if (p[i] != v) {
            return false;
        }
    }
    return true;
}

/* A dynamic vpc that fills its export exactly: a write that starts
 * inside a new block is refused, out of space, and nothing is written
 * (the old code wrote the block's bitmap over the trailing footer). */
static void test_vpc_fills_fixed_file(void)
{
    struct blk_image *img = open_on(&vpc_image, "vpc", "rec-fixed");
    static uint8_t data[4 * KiB];

    if (!img) {
        return;
    }
    memset(data, 0x5a, sizeof data);
    rec_reset();
    CHECK_EQ(blk_image_pwrite(img, 4 * KiB, data, sizeof data, 0), -ENOSPC);
    CHECK(strstr(err_msg(), ", and its length cannot change (rec-fixed)") != NULL);
    CHECK_EQ(rec_count(REC_WRITE), 0);
    CHECK(memcmp(rec_data(), vpc_image.data, vpc_image.len) == 0);
    CHECK_EQ(blk_image_close(img), 0);
}

/* A dynamic vpc on a file that refuses writes past its end (a full
 * disk): the refused block leaves the image as it was, and the same
 * write, once it fits, takes the old footer's place and moves the
 * footer just past the block (the old code had already moved free
 * space past the refused block, leaving a gap of a block). */
static void test_vpc_full_disk(void)
{
    struct blk_image *img = open_on(&vpc_image, "vpc", "rec");
    static uint8_t data[4 * KiB], back[4 * KiB];
    /* The block where the footer was: its bitmap (a sector), its data. */
    uint64_t end = vpc_image.len - 512 + 512 + VPC_BLOCK;

    if (!img) {
        return;
    }
    memset(data, 0x5a, sizeof data);
    rec_fail_writes_from = vpc_image.len;
    CHECK_EQ(blk_image_pwrite(img, 4 * KiB, data, sizeof data, 0), -EIO);
    rec_fail_writes_from = 0;
    CHECK(memcmp(rec_data(), vpc_image.data, vpc_image.len) == 0);
    CHECK_EQ(blk_image_pwrite(img, 4 * KiB, data, sizeof data, 0), 0);
    CHECK_EQ(blk_image_flush(img), 0);
    struct bytes f = file_bytes(img);
    CHECK_EQ(blk_image_close(img), 0);
    CHECK_EQ(f.len, end + 512);
    CHECK(f.data && f.len >= 512 && memcmp(f.data, f.data + f.len - 512, 512) == 0);
    img = f.data ? open_on(&f, "vpc", "rec") : NULL;
    if (img) {
        CHECK_EQ(blk_image_pread(img, 4 * KiB, back, sizeof back), 0);
        CHECK(memcmp(back, data, sizeof data) == 0);
        CHECK_EQ(blk_image_pread(img, 0, back, sizeof back), 0);
        CHECK(all_bytes(back, sizeof back, 0));
        CHECK_EQ(blk_image_close(img), 0);
    }
    free(f.data);
}

int main(void)
{
    if (make_image("vpc", NULL, &vpc_image) < 0) {
        fprintf(stderr, "cannot create the images\n");
        return 1;
    }
    RUN(test_vpc_fills_fixed_file);
    RUN(test_vpc_full_disk);
    free(vpc_image.data);
    return check_exit();
}
