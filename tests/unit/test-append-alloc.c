/* tests/unit/test-append-alloc.c: vpc and vmdk, which append new blocks
 * (grains) at the end of their file, over the recording driver, when the
 * file refuses an append: past the end of a file whose length cannot
 * change (rec-fixed, as an NBD export), or past a limit (rec with
 * rec_fail_writes_from, as a full disk).  A refused append writes nothing
 * that matters (vpc: not over its trailing footer), and gives its place
 * back, so the next append that fits goes there, with no gap. */
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
#define GRAIN (64 * KiB)    /* vmdk's default */

static struct rec_bytes vpc_image, vmdk_image, stream_image;

/* IMG (FORMAT) on a PROTOCOL node that holds exactly its bytes. */
static struct blk_image *open_on(const struct rec_bytes *img, const char *format,
                                 const char *protocol)
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
static struct rec_bytes file_bytes(struct blk_image *img)
{
    struct rec_bytes b = {NULL, file_length(img)};

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
    struct rec_bytes f = file_bytes(img);
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

static void check_clean(struct blk_image *img)
{
    struct blk_check_result res;

    CHECK_EQ(blk_image_check(img, BLK_REPAIR_NONE, NULL, &res), 0);
    CHECK_EQ(res.corruptions, 0);
    CHECK_EQ(res.check_errors, 0);
}

/* monolithicSparse on a full disk: a two-grain append is refused; the
 * one-grain write after it fits and goes where the refused one would
 * have gone (the old code moved the end past the refused grains, so the
 * next append was refused too). */
static void test_vmdk_full_disk(void)
{
    struct blk_image *img = open_on(&vmdk_image, "vmdk", "rec");
    static uint8_t data[2 * GRAIN], back[2 * GRAIN];

    if (!img) {
        return;
    }
    memset(data, 0x5a, sizeof data);
    rec_fail_writes_from = vmdk_image.len + GRAIN;
    CHECK_EQ(blk_image_pwrite(img, 0, data, 2 * GRAIN, 0), -EIO);
    CHECK_EQ(blk_image_pwrite(img, MiB, data, GRAIN, 0), 0);
    rec_fail_writes_from = 0;
    CHECK_EQ(file_length(img), vmdk_image.len + GRAIN);
    CHECK_EQ(blk_image_pread(img, MiB, back, GRAIN), 0);
    CHECK(memcmp(back, data, GRAIN) == 0);
    CHECK_EQ(blk_image_pread(img, 0, back, sizeof back), 0);
    CHECK(all_bytes(back, sizeof back, 0));
    check_clean(img);
    CHECK_EQ(blk_image_flush(img), 0);
    struct rec_bytes f = file_bytes(img);
    CHECK_EQ(blk_image_close(img), 0);
    img = f.data ? open_on(&f, "vmdk", "rec") : NULL;
    if (img) {
        CHECK_EQ(blk_image_pread(img, MiB, back, GRAIN), 0);
        CHECK(memcmp(back, data, GRAIN) == 0);
        check_clean(img);
        CHECK_EQ(blk_image_close(img), 0);
    }
    free(f.data);
}

/* The last write the driver sent to its file. */
static struct rec_call last_write(void)
{
    for (unsigned i = rec_ncalls; i-- > 0;) {
        if (rec_calls[i].op == REC_WRITE) {
            return rec_calls[i];
        }
    }
    return (struct rec_call){.op = REC_READ, .off = UINT64_MAX};
}

/* Compress a grain of byte v and append it at guest offset off. */
static int append_grain(struct blk_image *img, uint64_t off, uint8_t v)
{
    static uint8_t in[GRAIN], out[2 * GRAIN];
    size_t clen = 0;
    int r;

    memset(in, v, sizeof in);
    r = blk_image_compress(img, in, sizeof in, out, sizeof out, &clen);
    return r < 0 ? r : blk_image_pwrite_compressed(img, off, sizeof in, out, clen);
}

/* streamOptimized: a refused append of a compressed grain gives its
 * place back; the same grain appended again goes there, and the image
 * reads back after close. */
static void test_vmdk_stream_full_disk(void)
{
    struct blk_image *img = open_on(&stream_image, "vmdk", "rec");
    static uint8_t back[GRAIN];

    if (!img) {
        return;
    }
    rec_reset();
    CHECK_EQ(append_grain(img, 0, 0x11), 0);
    struct rec_call first = last_write(); /* marker, data, padding */
    uint64_t next = first.off + first.len;
    CHECK(first.op == REC_WRITE && first.len > 0);
    rec_fail_writes_from = next + 1;
    rec_reset();
    CHECK_EQ(append_grain(img, GRAIN, 0x22), -EIO);
    CHECK_EQ(last_write().off, next);
    rec_fail_writes_from = 0;
    rec_reset();
    CHECK_EQ(append_grain(img, GRAIN, 0x22), 0);
    CHECK_EQ(last_write().off, next);
    CHECK_EQ(blk_image_flush(img), 0);
    struct rec_bytes f = file_bytes(img);
    CHECK_EQ(blk_image_close(img), 0);
    img = f.data ? open_on(&f, "vmdk", "rec") : NULL;
    if (img) {
        CHECK_EQ(blk_image_pread(img, 0, back, GRAIN), 0);
        CHECK(all_bytes(back, GRAIN, 0x11));
        CHECK_EQ(blk_image_pread(img, GRAIN, back, GRAIN), 0);
        CHECK(all_bytes(back, GRAIN, 0x22));
        check_clean(img);
        CHECK_EQ(blk_image_close(img), 0);
    }
    free(f.data);
}

int main(void)
{
    if (rec_make_image("vpc", NULL, 8 * MiB, &vpc_image) < 0 ||
        rec_make_image("vmdk", NULL, 8 * MiB, &vmdk_image) < 0 ||
        rec_make_image("vmdk", "subformat=streamOptimized", 8 * MiB, &stream_image) < 0) {
        fprintf(stderr, "cannot create the images\n");
        return 1;
    }
    RUN(test_vpc_fills_fixed_file);
    RUN(test_vpc_full_disk);
    RUN(test_vmdk_full_disk);
    RUN(test_vmdk_stream_full_disk);
    free(vpc_image.data);
    free(vmdk_image.data);
    free(stream_image.data);
    return check_exit();
}
