/* block/bitmap.c: walking an in-memory dirty bitmap. */
#include "bitmap.h"

#include <stdlib.h>

#include "common/cleanup.h"

static bool bit_at(const struct blk_bitmap *bm, uint64_t i)
{
    return (bm->bits[i / 8] >> (i % 8)) & 1;
}

/* First bit at or after i (below end) whose value differs from want,
 * or end; skips whole bytes that match. */
static uint64_t next_change(const struct blk_bitmap *bm, uint64_t i, uint64_t end, bool want)
{
    uint8_t same = want ? 0xff : 0x00;

    while (i < end) {
        if (i % 8 == 0 && end - i >= 8 && bm->bits[i / 8] == same) {
            i += 8;
            continue;
        }
        if (bit_at(bm, i) != want) {
            return i;
        }
        i++;
    }
    return end;
}

void blk_bitmap_extent(const struct blk_bitmap *bm, uint64_t off, uint64_t len, bool *dirty,
                       uint64_t *run)
{
    uint64_t end = MIN(bm->size, off + len);
    uint64_t g = bm->granularity;
    uint64_t first = off / g, last = (end - 1) / g + 1;
    uint64_t change;

    *dirty = bit_at(bm, first);
    change = next_change(bm, first + 1, last, *dirty);
    *run = MIN(end, change * g) - off;
}

void blk_bitmap_free(struct blk_bitmap *bm)
{
    if (bm) {
        free(bm->name);
        free(bm->bits);
        free(bm);
    }
}
