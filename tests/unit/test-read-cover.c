/* tests/unit/test-read-cover.c: the client's record of which bytes of a
 * READ the reply's chunks covered (nbd/read-cover.c): chunks in and out
 * of order, and every way a hostile server can get them wrong. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nbd/read-cover.h"

CHECK_GLOBALS

static void test_in_order(void)
{
    struct nbd_cover c = {0};

    nbd_cover_reset(&c, 4096, 65536);
    for (uint64_t off = 4096; off < 4096 + 65536; off += 4096) {
        CHECK_EQ(nbd_cover_add(&c, off, 4096), 0);
    }
    CHECK(nbd_cover_full(&c));
    CHECK_EQ(c.n, 1); /* merged into one piece */
    /* a whole-request chunk */
    nbd_cover_reset(&c, 0, 1);
    CHECK(!nbd_cover_full(&c));
    CHECK_EQ(nbd_cover_add(&c, 0, 1), 0);
    CHECK(nbd_cover_full(&c));
    /* a zero-length request is covered by nothing */
    nbd_cover_reset(&c, 100, 0);
    CHECK(nbd_cover_full(&c));
    nbd_cover_free(&c);
}

static void test_out_of_order(void)
{
    struct nbd_cover c = {0};

    nbd_cover_reset(&c, 0, 10);
    CHECK_EQ(nbd_cover_add(&c, 8, 2), 0);
    CHECK_EQ(nbd_cover_add(&c, 0, 2), 0);
    CHECK_EQ(nbd_cover_add(&c, 4, 2), 0);
    CHECK_EQ(c.n, 3);
    CHECK(!nbd_cover_full(&c));
    CHECK_EQ(nbd_cover_add(&c, 2, 2), 0); /* joins the first two */
    CHECK_EQ(c.n, 2);
    CHECK_EQ(nbd_cover_add(&c, 6, 2), 0); /* joins everything */
    CHECK_EQ(c.n, 1);
    CHECK(nbd_cover_full(&c));
    nbd_cover_free(&c);
}

/* Every permutation-like order of 1-byte and larger chunks, checked
 * against a byte map. */
static void test_random_orders(void)
{
    struct nbd_cover c = {0};
    srand(42);
    for (int round = 0; round < 2000; round++) {
        enum { LEN = 200 };
        uint8_t map[LEN] = {0};
        uint64_t start = (uint64_t)rand() * 512;
        nbd_cover_reset(&c, start, LEN);
        for (int k = 0; k < 400 && !nbd_cover_full(&c); k++) {
            uint64_t off = (uint64_t)(rand() % (LEN + 20)) - 10;
            uint64_t len = (uint64_t)(rand() % 30);
            bool inside = off < LEN && len && off + len <= LEN && off < (uint64_t)LEN;
            bool overlap = false;
            for (uint64_t i = off; inside && i < off + len; i++) {
                overlap |= map[i];
            }
            int r = nbd_cover_add(&c, start + off, len);
            int want = len == 0 ? -EINVAL : !inside ? -ERANGE : overlap ? -EEXIST : 0;
            CHECK_EQ(r, want);
            if (r == 0) {
                memset(map + off, 1, len);
            }
            uint64_t covered = 0;
            for (int i = 0; i < LEN; i++) {
                covered += map[i];
            }
            CHECK_EQ(c.covered, covered);
        }
        /* pieces are sorted, disjoint and never touch */
        for (uint32_t i = 0; i + 1 < c.n; i++) {
            CHECK(c.pieces[i].end < c.pieces[i + 1].off);
        }
    }
    nbd_cover_free(&c);
}

static void test_hostile(void)
{
    struct nbd_cover c = {0};

    nbd_cover_reset(&c, 1000, 100);
    CHECK_EQ(nbd_cover_add(&c, 1000, 0), -EINVAL);
    CHECK_EQ(nbd_cover_add(&c, 999, 1), -ERANGE);   /* before */
    CHECK_EQ(nbd_cover_add(&c, 999, 10), -ERANGE);  /* straddles the start */
    CHECK_EQ(nbd_cover_add(&c, 1100, 1), -ERANGE);  /* after */
    CHECK_EQ(nbd_cover_add(&c, 1090, 11), -ERANGE); /* straddles the end */
    CHECK_EQ(nbd_cover_add(&c, 1050, UINT64_MAX), -ERANGE);
    CHECK_EQ(nbd_cover_add(&c, UINT64_MAX, 2), -ERANGE);
    CHECK_EQ(c.covered, 0);
    CHECK_EQ(nbd_cover_add(&c, 1010, 20), 0);
    CHECK_EQ(nbd_cover_add(&c, 1010, 20), -EEXIST);  /* duplicate */
    CHECK_EQ(nbd_cover_add(&c, 1029, 1), -EEXIST);   /* last byte again */
    CHECK_EQ(nbd_cover_add(&c, 1000, 11), -EEXIST);  /* overlaps the front */
    CHECK_EQ(nbd_cover_add(&c, 1015, 2), -EEXIST);   /* inside */
    CHECK_EQ(nbd_cover_add(&c, 1000, 100), -EEXIST); /* around */
    CHECK_EQ(c.covered, 20);
    CHECK(!nbd_cover_full(&c)); /* a short total */
    /* a request at the very end of the 64-bit space */
    nbd_cover_reset(&c, UINT64_MAX - 9, 10);
    CHECK_EQ(nbd_cover_add(&c, UINT64_MAX - 9, 10), 0);
    CHECK(nbd_cover_full(&c));
    nbd_cover_free(&c);
}

static void test_fragmented(void)
{
    struct nbd_cover c = {0};
    uint64_t len = 2ull * NBD_COVER_MAX_PIECES + 2;

    /* every other byte, out of order: pieces that cannot merge */
    nbd_cover_reset(&c, 0, len);
    for (uint64_t i = 0; i < NBD_COVER_MAX_PIECES; i++) {
        CHECK_EQ(nbd_cover_add(&c, len - 2 - 2 * i, 1), 0);
    }
    CHECK_EQ(c.n, NBD_COVER_MAX_PIECES);
    CHECK_EQ(nbd_cover_add(&c, 0, 1), -E2BIG);
    /* filling a gap merges, so there is room again */
    CHECK_EQ(nbd_cover_add(&c, len - 3, 1), 0);
    CHECK_EQ(c.n, NBD_COVER_MAX_PIECES - 1);
    nbd_cover_free(&c);
}

int main(void)
{
    RUN(test_in_order);
    RUN(test_out_of_order);
    RUN(test_random_orders);
    RUN(test_hostile);
    RUN(test_fragmented);
    return check_exit();
}
