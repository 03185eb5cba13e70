/* tests/unit/test-nbd-meta.c: the metadata context table (nbd/meta.c):
 * which contexts an export offers, their names and ids, and what the
 * allocation contexts report for an extent. */
#include <string.h>

#include "block/bitmap.h"
#include "block/block.h"
#include "check.h"
#include "nbd/internal.h"
#include "nbd/meta.h"
#include "nbd/protocol.h"

CHECK_GLOBALS

static void test_names(void)
{
    struct blk_bitmap b0 = {.name = "b0"}, b1 = {.name = "nightly"};
    struct nbd_export plain = {.name = "plain"};
    struct nbd_export two = {.name = "two", .bitmaps = {&b0, &b1}, .n_bitmaps = 2};
    char buf[NBD_META_NAME_MAX];

    CHECK_EQ(nbd_meta_count(&plain), 2);
    CHECK_EQ(nbd_meta_count(&two), 4);
    CHECK(!strcmp(nbd_meta_name(&plain, NBD_META_BASE_ALLOCATION, buf, sizeof buf),
                  "base:allocation"));
    CHECK(!strcmp(nbd_meta_name(&plain, NBD_META_ALLOCATION_DEPTH, buf, sizeof buf),
                  "qemu:allocation-depth"));
    CHECK(!strcmp(nbd_meta_name(&two, NBD_META_DIRTY_BITMAP, buf, sizeof buf),
                  "qemu:dirty-bitmap:b0"));
    CHECK(!strcmp(nbd_meta_name(&two, NBD_META_DIRTY_BITMAP + 1, buf, sizeof buf),
                  "qemu:dirty-bitmap:nightly"));
    CHECK(nbd_meta_bitmap(&two, NBD_META_DIRTY_BITMAP + 1) == &b1);
    CHECK(nbd_meta_is_allocation(NBD_META_BASE_ALLOCATION));
    CHECK(nbd_meta_is_allocation(NBD_META_ALLOCATION_DEPTH));
    CHECK(!nbd_meta_is_allocation(NBD_META_DIRTY_BITMAP));
}

/* Ids are never 0 (LIST replies use 0) and distinct. */
static void test_ids(void)
{
    for (unsigned m = 0; m < NBD_META_MAX; m++) {
        CHECK(nbd_meta_id(m) != 0);
        for (unsigned k = 0; k < m; k++) {
            CHECK(nbd_meta_id(m) != nbd_meta_id(k));
        }
    }
}

static void test_alloc_values(void)
{
    struct blk_extent data = {.length = 4096, .flags = BLK_EXT_DATA, .depth = 1};
    struct blk_extent zero_data = {
        .length = 4096, .flags = BLK_EXT_DATA | BLK_EXT_ZERO, .depth = 2};
    struct blk_extent hole = {.length = 4096, .flags = 0, .depth = 0};
    struct blk_extent zero_hole = {.length = 4096, .flags = BLK_EXT_ZERO, .depth = 0};

    CHECK_EQ(nbd_meta_alloc_value(NBD_META_BASE_ALLOCATION, &data), 0);
    CHECK_EQ(nbd_meta_alloc_value(NBD_META_BASE_ALLOCATION, &zero_data), NBD_STATE_ZERO);
    CHECK_EQ(nbd_meta_alloc_value(NBD_META_BASE_ALLOCATION, &hole), NBD_STATE_HOLE);
    CHECK_EQ(nbd_meta_alloc_value(NBD_META_BASE_ALLOCATION, &zero_hole),
             NBD_STATE_HOLE | NBD_STATE_ZERO);
    CHECK_EQ(nbd_meta_alloc_value(NBD_META_ALLOCATION_DEPTH, &data), 1);
    CHECK_EQ(nbd_meta_alloc_value(NBD_META_ALLOCATION_DEPTH, &zero_data), 2);
    CHECK_EQ(nbd_meta_alloc_value(NBD_META_ALLOCATION_DEPTH, &hole), 0);
}

int main(void)
{
    RUN(test_names);
    RUN(test_ids);
    RUN(test_alloc_values);
    return check_exit();
}
