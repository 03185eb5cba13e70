/* block/bitmap.c: walking and updating an in-memory dirty bitmap. */
#include "bitmap.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"

static uint8_t byte_at(const struct blk_bitmap *bm, uint64_t i)
{
    return __atomic_load_n(&bm->bits[i], __ATOMIC_RELAXED);
}

static bool bit_at(const struct blk_bitmap *bm, uint64_t i)
{
    return (byte_at(bm, i / 8) >> (i % 8)) & 1;
}

uint64_t blk_bitmap_bytes(const struct blk_bitmap *bm)
{
    return bm->nbits / 8 + (bm->nbits % 8 != 0);
}

struct blk_bitmap *blk_bitmap_new(const char *name, uint64_t size, uint32_t granularity)
{
    struct blk_bitmap *bm = calloc(1, sizeof *bm);

    if (!bm) {
        err_set(ENOMEM, "bitmap '%s'", name);
        return NULL;
    }
    bm->size = size;
    bm->granularity = granularity;
    bm->nbits = size / granularity + (size % granularity != 0);
    bm->refs = 1;
    bm->name = strdup(name);
    bm->bits = calloc(1, blk_bitmap_bytes(bm) + 1);
    if (!bm->name || !bm->bits) {
        blk_bitmap_free(bm);
        err_set(ENOMEM, "bitmap '%s'", name);
        return NULL;
    }
    return bm;
}

struct blk_bitmap *blk_bitmap_ref(struct blk_bitmap *bm)
{
    atomic_fetch_add(&bm->refs, 1);
    return bm;
}

/* First bit at or after i (below end) whose value differs from want,
 * or end; skips whole bytes that match. */
static uint64_t next_change(const struct blk_bitmap *bm, uint64_t i, uint64_t end, bool want)
{
    uint8_t same = want ? 0xff : 0x00;

    while (i < end) {
        if (i % 8 == 0 && end - i >= 8 && byte_at(bm, i / 8) == same) {
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

/* Set bits [first, last). */
static void set_bits(struct blk_bitmap *bm, uint64_t first, uint64_t last)
{
    while (first < last) {
        uint64_t byte = first / 8;
        unsigned lo = first % 8;
        unsigned hi = (last - byte * 8 >= 8) ? 8 : (unsigned)(last - byte * 8);
        uint8_t mask = (uint8_t)(((1u << hi) - 1) & ~((1u << lo) - 1));

        if (mask == 0xff) {
            __atomic_store_n(&bm->bits[byte], 0xff, __ATOMIC_RELAXED);
        } else if ((byte_at(bm, byte) & mask) != mask) {
            __atomic_fetch_or(&bm->bits[byte], mask, __ATOMIC_RELAXED);
        }
        first = byte * 8 + hi;
    }
}

void blk_bitmap_set_range(struct blk_bitmap *bm, uint64_t off, uint64_t len)
{
    uint64_t end;

    if (len == 0 || off >= bm->size) {
        return;
    }
    end = len > bm->size - off ? bm->size : off + len;
    set_bits(bm, off / bm->granularity, (end - 1) / bm->granularity + 1);
}

void blk_bitmap_merge(struct blk_bitmap *dst, const struct blk_bitmap *src)
{
    uint64_t off = 0, size = MIN(dst->size, src->size);

    while (off < size) {
        bool dirty;
        uint64_t run;

        blk_bitmap_extent(src, off, size - off, &dirty, &run);
        if (dirty) {
            blk_bitmap_set_range(dst, off, run);
        }
        off += run;
    }
}

void blk_bitmap_clear(struct blk_bitmap *bm)
{
    memset(bm->bits, 0, blk_bitmap_bytes(bm));
}

void blk_bitmap_free(struct blk_bitmap *bm)
{
    if (bm && atomic_fetch_sub(&bm->refs, 1) <= 1) {
        free(bm->name);
        free(bm->bits);
        free(bm);
    }
}
