/* tests/unit/test-bench.c: the bench engine (block/bench.c) on in-memory
 * images of the recording driver: the requests diskimg bench claims to
 * send (where, how many, with which flags, the flushes between them) and
 * what it counts, without the command around it.  One request in flight,
 * since the recording driver's log is not thread-safe. */
#include <errno.h>
#include <stdatomic.h>

#include "block/bench.h"
#include "block/block.h"
#include "check.h"
#include "rec-driver.h"

CHECK_GLOBALS

static struct blk_image *open_mem(const char *spec)
{
    struct blk_image_opts o = {.filename = spec, .protocol = "rec", .format = "raw"};
    struct blk_image *img = NULL;

    CHECK_EQ(blk_image_open(&img, &o), 0);
    return img;
}

static struct blk_bench_result res;

static void test_sequential_writes(void)
{
    struct blk_image *img = open_mem("size=65536");
    struct blk_bench_opts o = {
        .write = true, .depth = 1, .size = 4096, .count = 20, .offset = 8192, .flush_interval = 8};
    uint8_t *d;

    rec_reset();
    CHECK_EQ(blk_bench(img, &o, &res), 0);
    CHECK_EQ(res.failed, BLK_BENCH_FAIL_NONE);
    CHECK_EQ(atomic_load(&res.lat.count), 20);
    CHECK_EQ(atomic_load(&res.flush_lat.count), 2);
    CHECK(res.ns > 0);
    /* 14 slots from offset 8192, wrapping round; a flush after writes 8
     * and 16, and one at the end */
    CHECK_EQ(rec_count(REC_WRITE), 20);
    CHECK_EQ(rec_count(REC_FLUSH), 3);
    CHECK_EQ(rec_ncalls, 23);
    CHECK_EQ(rec_calls[0].op, REC_WRITE);
    CHECK_EQ(rec_calls[0].off, 8192);
    CHECK_EQ(rec_calls[0].len, 4096);
    CHECK_EQ(rec_calls[8].op, REC_FLUSH);
    CHECK_EQ(rec_calls[15].op, REC_WRITE);
    CHECK_EQ(rec_calls[15].off, 8192);
    CHECK_EQ(rec_calls[22].op, REC_FLUSH);
    d = rec_data();
    CHECK_EQ(d[8191], 0);
    CHECK_EQ(d[8192], 0xa5);
    CHECK_EQ(d[65535], 0xa5);
    blk_image_close(img);
}

static void test_fua_writes(void)
{
    struct blk_image *img = open_mem("size=65536,fua=1");
    struct blk_bench_opts o = {.write = true, .fua = true, .depth = 1, .size = 512, .count = 4};

    rec_reset();
    CHECK_EQ(blk_bench(img, &o, &res), 0);
    CHECK_EQ(rec_count(REC_WRITE), 4);
    for (unsigned i = 0; i < 4; i++) {
        CHECK(rec_calls[i].flags & BLK_REQ_FUA);
    }
    blk_image_close(img);
}

static void test_random_reads(void)
{
    struct blk_image *img = open_mem("size=65536");
    struct blk_bench_opts o = {.rand = true, .depth = 1, .size = 4096, .count = 50, .offset = 4096};

    rec_reset();
    CHECK_EQ(blk_bench(img, &o, &res), 0);
    CHECK_EQ(atomic_load(&res.lat.count), 50);
    /* reads only, no flush; every offset is a slot inside the region */
    CHECK_EQ(rec_count(REC_READ), 50);
    CHECK_EQ(rec_ncalls, 50);
    for (unsigned i = 0; i < rec_ncalls; i++) {
        CHECK(rec_calls[i].off >= 4096 && rec_calls[i].off % 4096 == 0);
        CHECK(rec_calls[i].off + rec_calls[i].len <= 65536);
    }
    blk_image_close(img);
}

static void test_failed_write(void)
{
    struct blk_image *img = open_mem("size=65536");
    struct blk_bench_opts o = {.write = true, .depth = 1, .size = 4096, .count = 10};

    rec_reset();
    rec_fail_writes_from = 3 * 4096;
    /* the fourth write fails: no more requests, and no final flush */
    CHECK_EQ(blk_bench(img, &o, &res), -EIO);
    CHECK_EQ(res.failed, BLK_BENCH_FAIL_REQUEST);
    CHECK_EQ(rec_count(REC_WRITE), 4);
    CHECK_EQ(rec_count(REC_FLUSH), 0);
    rec_fail_writes_from = 0;
    blk_image_close(img);
}

static void test_image_too_small(void)
{
    struct blk_image *img = open_mem("size=65536");
    struct blk_bench_opts o = {.depth = 1, .size = 4096, .count = 1, .offset = 61441};

    rec_reset();
    CHECK_EQ(blk_bench(img, &o, &res), -EINVAL);
    CHECK_EQ(rec_ncalls, 0);
    blk_image_close(img);
}

int main(void)
{
    RUN(test_sequential_writes);
    RUN(test_fua_writes);
    RUN(test_random_reads);
    RUN(test_failed_write);
    RUN(test_image_too_small);
    return check_exit();
}
