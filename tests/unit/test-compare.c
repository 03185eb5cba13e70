/* tests/unit/test-compare.c: the compare engine (block/compare.c) on
 * in-memory images of the recording driver: the verdicts and offsets that
 * diskimg compare prints, without the command around it. */
#include "block/block.h"
#include "block/compare.h"
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

static void test_identical_and_different(void)
{
    struct blk_image *a = open_mem("size=65536"), *b = open_mem("size=65536");
    struct blk_compare_opts o = {0};
    struct blk_compare_result res;
    char x = 'x';

    CHECK_EQ(blk_compare(a, b, &o, &res), 0);
    CHECK_EQ(res.verdict, BLK_CMP_IDENTICAL);
    CHECK(!res.tail_compared);
    CHECK_EQ(blk_image_pwrite(b, 5000, &x, 1, 0), 0);
    CHECK_EQ(blk_compare(a, b, &o, &res), 0);
    CHECK_EQ(res.verdict, BLK_CMP_DATA_DIFFERS);
    CHECK_EQ(res.offset, 5000);
    blk_image_close(a);
    blk_image_close(b);
}

static void test_sizes_differ(void)
{
    struct blk_image *a = open_mem("size=65536"), *b = open_mem("size=131072");
    struct blk_compare_opts o = {0};
    struct blk_compare_result res;
    char x = 'x';

    /* the larger image's tail reads as zeroes: equal, with a warning */
    CHECK_EQ(blk_compare(a, b, &o, &res), 0);
    CHECK_EQ(res.verdict, BLK_CMP_IDENTICAL);
    CHECK(res.tail_compared);
    CHECK_EQ(blk_image_pwrite(b, 100000, &x, 1, 0), 0);
    CHECK_EQ(blk_compare(b, a, &o, &res), 0);
    CHECK_EQ(res.verdict, BLK_CMP_DATA_DIFFERS);
    CHECK_EQ(res.offset, 100000);
    /* strict: the sizes alone differ */
    o.strict = true;
    CHECK_EQ(blk_compare(a, b, &o, &res), 0);
    CHECK_EQ(res.verdict, BLK_CMP_SIZE_DIFFERS);
    CHECK(!res.tail_compared);
    blk_image_close(a);
    blk_image_close(b);
}

static void progress(void *opaque, uint64_t done, uint64_t total)
{
    uint64_t *calls = opaque;

    CHECK(done < total);
    CHECK_EQ(total, 65536);
    (*calls)++;
}

static void test_progress(void)
{
    struct blk_image *a = open_mem("size=65536"), *b = open_mem("size=65536");
    uint64_t calls = 0;
    struct blk_compare_opts o = {.progress = progress, .progress_opaque = &calls};
    struct blk_compare_result res;

    CHECK_EQ(blk_compare(a, b, &o, &res), 0);
    CHECK(calls >= 1);
    blk_image_close(a);
    blk_image_close(b);
}

int main(void)
{
    RUN(test_identical_and_different);
    RUN(test_sizes_differ);
    RUN(test_progress);
    return check_exit();
}
