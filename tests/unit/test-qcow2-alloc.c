/* tests/unit/test-qcow2-alloc.c: qcow2 over the recording driver.  When
 * the child fails a write, clusters taken for data that never reached the
 * file are given back, so check finds no leak.  Emptying an image whose
 * file cannot change its length (rec-fixed, as an NBD export) drops its
 * clusters in place rather than rebuilding past the end, and a cluster
 * that does not fit in such a file is refused before it is written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/block.h"
#include "block/chain.h"
#include "common/error.h"
#include "check.h"
#include "rec-driver.h"

CHECK_GLOBALS

#define REC_SIZE (4u << 20)

/* A fresh 1 MiB qcow2 image (64 KiB clusters). */
static struct rec_bytes image;

/* The image on a PROTOCOL node described by SPEC (rec-driver.h). */
static struct blk_image *open_spec(const char *protocol, const char *spec)
{
    struct blk_image_opts o = {
        .filename = spec,
        .protocol = protocol,
        .format = "qcow2",
        .cache = BLK_CACHE_WRITEBACK,
    };
    struct blk_image *img = NULL;

    rec_preload = image.data;
    rec_preload_len = image.len;
    CHECK_EQ(blk_image_open(&img, &o), 0);
    rec_preload = NULL;
    rec_preload_len = 0;
    return img;
}

static struct blk_image *open_on(const char *protocol)
{
    return open_spec(protocol, "size=4194304");
}

static void test_compressed_write_fails(void)
{
    struct blk_image *img = open_on("rec");
    struct blk_check_result res;
    uint8_t data[1000];

    if (!img) {
        return;
    }
    memset(data, 0x5a, sizeof data); /* never decompressed: the write fails */
    /* The file ends at image.len: the data goes to a new cluster there. */
    rec_fail_writes_from = image.len;
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

/* Requests that reach past END, the end of the rec node. */
static unsigned calls_past(uint64_t end)
{
    unsigned k = 0;

    for (unsigned i = 0; i < rec_ncalls; i++) {
        enum rec_op op = rec_calls[i].op;
        k += (op == REC_WRITE || op == REC_ZERO) && rec_calls[i].off + rec_calls[i].len > end;
    }
    return k;
}

static void test_empty_fixed_length(void)
{
    struct blk_image *img = open_on("rec-fixed");
    struct blk_check_result res;
    static uint8_t data[128 << 10];

    if (!img) {
        return;
    }
    CHECK(!blk_can_resize(blk_image_root(img)));
    CHECK(!blk_can_resize(blk_node_child(blk_image_root(img))));
    memset(data, 0x5a, sizeof data);
    CHECK_EQ(blk_image_pwrite(img, 64 << 10, data, sizeof data, 0), 0);
    rec_reset();
    CHECK_EQ(blk_image_make_empty(img), 0);
    CHECK_EQ(calls_past(REC_SIZE), 0);
    CHECK(rec_count(REC_DISCARD) > 0); /* the dropped clusters are punched */
    CHECK_EQ(blk_get_length(blk_node_child(blk_image_root(img))), REC_SIZE);
    CHECK_EQ(blk_image_pread(img, 64 << 10, data, sizeof data), 0);
    CHECK(data[0] == 0 && !memcmp(data, data + 1, sizeof data - 1));
    CHECK_EQ(blk_image_check(img, BLK_REPAIR_NONE, NULL, &res), 0);
    CHECK_EQ(res.corruptions, 0);
    CHECK_EQ(res.leaks, 0);
    CHECK_EQ(blk_image_close(img), 0);
}

/* The same on a file that can resize: rebuilt, the file cut short. */
static void test_empty_resizable(void)
{
    struct blk_image *img = open_on("rec");
    struct blk_check_result res;
    static uint8_t data[128 << 10];

    if (!img) {
        return;
    }
    CHECK(blk_can_resize(blk_image_root(img)));
    memset(data, 0x5a, sizeof data);
    CHECK_EQ(blk_image_pwrite(img, 64 << 10, data, sizeof data, 0), 0);
    CHECK_EQ(blk_image_make_empty(img), 0);
    CHECK(blk_get_length(blk_node_child(blk_image_root(img))) < REC_SIZE);
    CHECK_EQ(blk_image_check(img, BLK_REPAIR_NONE, NULL, &res), 0);
    CHECK_EQ(res.corruptions, 0);
    CHECK_EQ(res.leaks, 0);
    CHECK_EQ(blk_image_close(img), 0);
}

/* An allocation past the end of a file that cannot grow (rec-fixed, as
 * an NBD export): refused in the generic layer, out of space, with a
 * message that says why; nothing is written past the end, and the
 * clusters taken for it are given back. */
static void test_alloc_past_fixed_end(void)
{
    /* Header, refcount table and block, L1 table: no room for an L2 table. */
    struct blk_image *img = open_spec("rec-fixed", "size=262144");
    struct blk_check_result res;
    static uint8_t data[64 << 10];

    if (!img) {
        return;
    }
    memset(data, 0x5a, sizeof data);
    rec_reset();
    CHECK_EQ(blk_image_pwrite(img, 0, data, sizeof data, 0), -ENOSPC);
    CHECK(strstr(err_msg(), "size=262144: no space left: writing ") != NULL);
    CHECK(strstr(err_msg(), ", and its length cannot change (rec-fixed)") != NULL);
    CHECK(strchr(err_msg(), '\n') == NULL);
    CHECK_EQ(calls_past(262144), 0);
    CHECK_EQ(blk_get_length(blk_node_child(blk_image_root(img))), 262144);
    CHECK_EQ(blk_image_check(img, BLK_REPAIR_NONE, NULL, &res), 0);
    CHECK_EQ(res.corruptions, 0);
    CHECK_EQ(res.leaks, 0);
    CHECK_EQ(blk_image_close(img), 0);
}

int main(void)
{
    if (rec_make_image("qcow2", NULL, 1u << 20, &image) < 0) {
        fprintf(stderr, "cannot create a qcow2 image\n");
        return 1;
    }
    RUN(test_compressed_write_fails);
    RUN(test_empty_fixed_length);
    RUN(test_empty_resizable);
    RUN(test_alloc_past_fixed_end);
    free(image.data);
    return check_exit();
}
