/* tests/unit/test-qcow2-refcount-math.c: the pure qcow2 refcount
 * arithmetic (formats/qcow2/refcount-math.c), linked alone: entries of
 * every width against the layout qcow2.txt gives, and the self-counting
 * refcount area against its invariants, against the three loops it
 * replaced (kept here as they were) and against qemu-img 7.2. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "formats/qcow2/refcount-math.h"

CHECK_GLOBALS

#define BLOCK_BYTES 512 /* the smallest cluster: 4096 1-bit .. 64 64-bit entries */

static uint64_t width_max(uint32_t order)
{
    return order == 6 ? UINT64_MAX : (1ULL << (1u << order)) - 1;
}

static uint64_t entries_in(uint32_t order)
{
    return BLOCK_BYTES * 8 >> order;
}

static uint64_t rand64(void)
{
    uint64_t v = 0;
    for (int i = 0; i < 4; i++) {
        v = (v << 16) ^ (uint64_t)(rand() & 0xffff);
    }
    return v;
}

/* Where qcow2.txt puts an entry: big-endian from 8 bits up, least
 * significant bit first below. */
static void test_entry_layout(void)
{
    uint8_t b[BLOCK_BYTES];

    memset(b, 0, sizeof b);
    qcow2_refblock_set(b, 0, 9, 1);
    CHECK_EQ(b[1], 0x02);
    qcow2_refblock_set(b, 0, 7, 1);
    CHECK_EQ(b[0], 0x80);

    memset(b, 0, sizeof b);
    qcow2_refblock_set(b, 1, 1, 3);
    qcow2_refblock_set(b, 1, 4, 2);
    CHECK_EQ(b[0], 0x0c);
    CHECK_EQ(b[1], 0x02);

    memset(b, 0, sizeof b);
    qcow2_refblock_set(b, 2, 1, 0xa);
    qcow2_refblock_set(b, 2, 2, 0x5);
    CHECK_EQ(b[0], 0xa0);
    CHECK_EQ(b[1], 0x05);

    memset(b, 0, sizeof b);
    qcow2_refblock_set(b, 3, 3, 0xfe);
    CHECK_EQ(b[3], 0xfe);

    memset(b, 0, sizeof b);
    qcow2_refblock_set(b, 4, 1, 0x1234);
    CHECK(b[2] == 0x12 && b[3] == 0x34);

    memset(b, 0, sizeof b);
    qcow2_refblock_set(b, 5, 1, 0x12345678);
    CHECK(b[4] == 0x12 && b[5] == 0x34 && b[6] == 0x56 && b[7] == 0x78);

    memset(b, 0, sizeof b);
    qcow2_refblock_set(b, 6, 1, 0x0102030405060708ULL);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(b[8 + i], i + 1);
    }
    CHECK_EQ(qcow2_refblock_get(b, 6, 1), 0x0102030405060708ULL);
    CHECK_EQ(qcow2_refblock_get(b, 5, 2), 0x01020304);
    CHECK_EQ(qcow2_refblock_get(b, 4, 5), 0x0304);
}

/* Set one entry of a block full of other values: it reads back, every
 * other entry and every byte outside it stay as they were. */
static void test_entry_round_trip(void)
{
    uint8_t b[BLOCK_BYTES], before[BLOCK_BYTES];

    srand(12);
    for (uint32_t order = 0; order <= 6; order++) {
        uint64_t max = width_max(order), n = entries_in(order);
        uint64_t values[] = {0, 1, 2 & max, max, max - 1, max >> 1, rand64() & max};
        for (int fill = 0; fill < 3; fill++) {
            for (size_t k = 0; k < sizeof b; k++) {
                b[k] = fill == 0 ? 0 : fill == 1 ? 0xff : (uint8_t)rand();
            }
            for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
                uint64_t idx[] = {0, 1, n / 2, n - 2, n - 1, (uint64_t)rand() % n};
                for (size_t j = 0; j < sizeof idx / sizeof idx[0]; j++) {
                    uint64_t i = idx[j];
                    memcpy(before, b, sizeof b);
                    qcow2_refblock_set(b, order, i, values[v]);
                    CHECK_EQ(qcow2_refblock_get(b, order, i), values[v]);
                    for (uint64_t o = 0; o < n; o++) {
                        if (o != i && qcow2_refblock_get(b, order, o) !=
                                          qcow2_refblock_get(before, order, o)) {
                            CHECK_EQ(o, i); /* a neighbour changed */
                            break;
                        }
                    }
                    uint64_t first = (i << order) / 8, last = ((i + 1) << order) / 8 - 1;
                    if (order < 3) {
                        last = first;
                    }
                    for (uint64_t k = 0; k < sizeof b; k++) {
                        if ((k < first || k > last) && b[k] != before[k]) {
                            CHECK_EQ(k, first); /* a byte outside the entry changed */
                            break;
                        }
                    }
                }
            }
        }
        /* A value wider than the entry is cut, not spilled. */
        if (order < 6) {
            memset(b, 0, sizeof b);
            qcow2_refblock_set(b, order, 1, max + 1 + 5);
            CHECK_EQ(qcow2_refblock_get(b, order, 0), 0);
            CHECK_EQ(qcow2_refblock_get(b, order, 1), 5 & max);
            CHECK_EQ(qcow2_refblock_get(b, order, 2), 0);
        }
    }
}

/* The encoders create.c (every count 1) and check.c (OR into a zeroed
 * block) used before: the same bytes. */
static void old_or_into_zeroed(uint8_t *block, uint32_t bits, uint64_t i, uint64_t v)
{
    switch (bits) {
    case 1:
    case 2:
    case 4:
        block[i * bits / 8] |= (uint8_t)(v << (i * bits % 8));
        break;
    case 8:
        block[i] = (uint8_t)v;
        break;
    default:
        for (uint32_t k = 0; k < bits / 8; k++) {
            block[i * bits / 8 + k] = (uint8_t)(v >> (bits - 8 - 8 * k));
        }
    }
}

static void test_entry_matches_old_encoders(void)
{
    uint8_t oldb[BLOCK_BYTES], newb[BLOCK_BYTES];

    srand(34);
    for (uint32_t order = 0; order <= 6; order++) {
        uint32_t bits = 1u << order;
        uint64_t n = entries_in(order);
        /* create.c: a count of 1 for the first k clusters */
        for (uint64_t k = 0; k <= n; k += 1 + n / 7) {
            memset(oldb, 0, sizeof oldb);
            memset(newb, 0, sizeof newb);
            for (uint64_t i = 0; i < k; i++) {
                uint64_t bit = i * bits;
                if (bits < 8) {
                    oldb[bit / 8] |= (uint8_t)(1u << (bit % 8));
                } else {
                    oldb[bit / 8 + bits / 8 - 1] = 1;
                }
                qcow2_refblock_set(newb, order, i, 1);
            }
            CHECK(memcmp(oldb, newb, sizeof oldb) == 0);
        }
        /* check.c: capped counts into a zeroed block */
        memset(oldb, 0, sizeof oldb);
        memset(newb, 0, sizeof newb);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t v = rand64() & width_max(order);
            old_or_into_zeroed(oldb, bits, i, v);
            qcow2_refblock_set(newb, order, i, v);
        }
        CHECK(memcmp(oldb, newb, sizeof oldb) == 0);
    }
}

/* ---- the self-counting refcount area ---- */

static uint64_t block_bits(const struct qcow2_refcount_area_req *q)
{
    return q->cluster_bits + 3 - q->refcount_order;
}

static bool exists(const struct qcow2_refcount_area_req *q, uint64_t i)
{
    return i < q->reftable_entries && q->reftable[i] != 0;
}

/* Does an area of t table clusters and b blocks count itself? */
static bool suffices(const struct qcow2_refcount_area_req *q, uint64_t t, uint64_t b)
{
    uint64_t end = q->start + t + b + q->tail_clusters;
    uint64_t first = q->start >> block_bits(q), last = (end - 1) >> block_bits(q);
    uint64_t need = q->blocks_before, entries = t << (q->cluster_bits - 3);

    for (uint64_t i = first; i <= last; i++) {
        need += !exists(q, i);
    }
    return t >= 1 && b >= need && entries > last && entries >= q->min_entries;
}

/* Invariants: the area covers itself, and no smaller one would. */
static void check_area(const struct qcow2_refcount_area_req *q, const struct qcow2_refcount_area *a)
{
    CHECK_EQ(a->end, q->start + a->table_clusters + a->blocks + q->tail_clusters);
    CHECK(a->table_clusters >= 1);
    CHECK(a->blocks >= q->blocks_before);
    CHECK(suffices(q, a->table_clusters, a->blocks));
    /* Every cluster of the area has its block: an old one, or one of
     * the new ones (exactly as many new as missing). */
    uint64_t first = q->start >> block_bits(q), last = (a->end - 1) >> block_bits(q), missing = 0;
    for (uint64_t i = first; i <= last; i++) {
        missing += !exists(q, i);
    }
    CHECK_EQ(a->blocks, q->blocks_before + missing);
    CHECK(a->table_clusters << (q->cluster_bits - 3) >= last + 1);
    /* Minimal: one block or one table cluster fewer does not suffice. */
    if (a->table_clusters > 1) {
        CHECK(!suffices(q, a->table_clusters - 1, a->blocks));
    }
    if (a->blocks > 0) {
        CHECK(!suffices(q, a->table_clusters, a->blocks - 1));
    }
    /* ... and for small areas, nothing smaller at all. */
    if (a->table_clusters * a->blocks < 4096) {
        for (uint64_t t = 1; t <= a->table_clusters; t++) {
            for (uint64_t b = 0; b <= a->blocks; b++) {
                if ((t != a->table_clusters || b != a->blocks) && suffices(q, t, b)) {
                    CHECK(!"a smaller area suffices");
                    return;
                }
            }
        }
    }
}

/* create.c's loop before the helper. */
static void old_create(uint32_t cluster_bits, uint32_t order, uint64_t l1_clusters,
                       uint64_t *table_out, uint64_t *blocks_out, uint64_t *n_out)
{
    uint64_t cs = 1ULL << cluster_bits, per_block = cs * 8 / (1u << order);
    uint64_t table = 1, blocks = 1, n;

    for (;;) {
        n = 1 + table + blocks + l1_clusters;
        uint64_t b = (n + per_block - 1) / per_block;
        uint64_t t = ((b * 8 + cs - 1) / cs * cs) / cs;
        if (b == blocks && t == table) {
            break;
        }
        blocks = b;
        table = t;
    }
    *table_out = table;
    *blocks_out = blocks;
    *n_out = n;
}

static void test_area_create(void)
{
    for (uint32_t cb = 9; cb <= 21; cb++) {
        for (uint32_t order = 0; order <= 6; order++) {
            uint64_t l1s[] = {0,
                              1,
                              2,
                              3,
                              7,
                              61,
                              62,
                              63,
                              64,
                              65,
                              500,
                              4093,
                              4094,
                              4095,
                              4096,
                              65536,
                              (32u << 20) >> cb};
            for (size_t j = 0; j < sizeof l1s / sizeof l1s[0]; j++) {
                uint64_t t, b, n;
                struct qcow2_refcount_area a;
                struct qcow2_refcount_area_req q = {.cluster_bits = cb,
                                                    .refcount_order = order,
                                                    .start = 1,
                                                    .tail_clusters = l1s[j]};
                qcow2_refcount_area_size(&q, &a);
                old_create(cb, order, l1s[j], &t, &b, &n);
                CHECK_EQ(a.table_clusters, t);
                CHECK_EQ(a.blocks, b);
                CHECK_EQ(a.end, n);
                check_area(&q, &a);
            }
        }
    }
}

/* Boundaries: a layout one cluster short of filling its blocks, and
 * exactly at the point where one more block and one more table cluster
 * are needed. */
static void test_area_create_edges(void)
{
    for (uint32_t cb = 9; cb <= 21; cb += 3) {
        for (uint32_t order = 0; order <= 6; order += 2) {
            uint64_t per_block = 1ULL << (cb + 3 - order);
            for (uint64_t tail = per_block * 3 - 8; tail < per_block * 3 + 2; tail++) {
                uint64_t t, b, n;
                struct qcow2_refcount_area a;
                struct qcow2_refcount_area_req q = {
                    .cluster_bits = cb, .refcount_order = order, .start = 1, .tail_clusters = tail};
                qcow2_refcount_area_size(&q, &a);
                old_create(cb, order, tail, &t, &b, &n);
                CHECK(a.table_clusters == t && a.blocks == b && a.end == n);
                check_area(&q, &a);
            }
        }
    }
}

/* qemu-img 7.2 'create -f qcow2 -o cluster_size=C,refcount_bits=R F SIZE'
 * for sizes where its table is one cluster: table, blocks and file size
 * (in clusters, rounded up) read back from the image.  (With a bigger table qemu-img
 * places and sizes it its own way, larger than needed.) */
static void test_area_against_qemu_img(void)
{
    static const struct {
        uint32_t cluster_bits, order;
        uint64_t l1_entries, table, blocks, file_clusters;
    } cases[] = {
        {16, 4, 2, 1, 1, 4},           /* 64 KiB, 16 bits, 1G */
        {9, 0, 4194304, 1, 17, 65555}, /* 512 B, 1 bit, 128G */
        {9, 6, 32768, 1, 9, 523},      /* 512 B, 64 bits, 1G */
        {9, 4, 131072, 1, 9, 2059},    /* 512 B, 16 bits, 4G */
        {10, 2, 524288, 1, 3, 4101},   /* 1 KiB, 4 bits, 64G */
        {11, 6, 2097152, 1, 33, 8227}, /* 2 KiB, 64 bits, 1T */
        {12, 6, 2097152, 1, 9, 4107},  /* 4 KiB, 64 bits, 4T */
        {12, 3, 51200, 1, 1, 103},     /* 4 KiB, 8 bits, 100G */
        {13, 5, 2097152, 1, 2, 2052},  /* 8 KiB, 32 bits, 16T */
        {14, 1, 2097152, 1, 1, 1027},  /* 16 KiB, 2 bits, 64T */
        {16, 6, 524288, 1, 1, 67},     /* 64 KiB, 64 bits, 256T */
        {21, 6, 2, 1, 1, 4},           /* 2 MiB, 64 bits, 1T */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t cs = 1ULL << cases[i].cluster_bits;
        struct qcow2_refcount_area a;
        struct qcow2_refcount_area_req q = {
            .cluster_bits = cases[i].cluster_bits,
            .refcount_order = cases[i].order,
            .start = 1,
            .tail_clusters = (cases[i].l1_entries * 8 + cs - 1) / cs,
        };
        qcow2_refcount_area_size(&q, &a);
        CHECK_EQ(a.table_clusters, cases[i].table);
        CHECK_EQ(a.blocks, cases[i].blocks);
        CHECK_EQ(a.end, cases[i].file_clusters);
        check_area(&q, &a);
    }
}

/* refcount.c's table growth loop before the helper. */
static void old_grow(uint32_t cluster_bits, uint32_t refblock_bits, const uint64_t *reftable,
                     uint64_t reftable_entries, uint64_t start, uint64_t min_entries,
                     uint64_t *table_out, uint64_t *blocks_out, uint64_t *end_out)
{
    uint64_t cs = 1ULL << cluster_bits, entries_per_cluster = cs / 8;
    uint64_t new_entries = min_entries > reftable_entries * 2 ? min_entries : reftable_entries * 2;
    uint64_t table_clusters, new_blocks = 0, end;

    for (;;) {
        table_clusters = (new_entries + entries_per_cluster - 1) / entries_per_cluster *
                         entries_per_cluster / entries_per_cluster;
        end = start + table_clusters + new_blocks;
        uint64_t need_entries = ((end - 1) >> refblock_bits) + 1;
        uint64_t blocks = 0;
        for (uint64_t rt = start >> refblock_bits; rt <= (end - 1) >> refblock_bits; rt++) {
            if (rt >= reftable_entries || reftable[rt] == 0) {
                blocks++;
            }
        }
        if (need_entries > new_entries) {
            new_entries = need_entries;
            continue;
        }
        if (blocks == new_blocks) {
            break;
        }
        new_blocks = blocks;
    }
    *table_out = table_clusters;
    *blocks_out = new_blocks;
    *end_out = end;
}

static void test_area_grow(void)
{
    enum { MAX_ENTRIES = 1024 };
    static uint64_t reftable[MAX_ENTRIES];

    int failures_before = check_failures;

    srand(56);
    for (int round = 0; round < 3000; round++) {
        uint32_t cb = 9 + (uint32_t)rand() % 13, order = (uint32_t)rand() % 7;
        uint32_t rb = cb + 3 - order;
        uint64_t entries = 1 + (uint64_t)rand() % MAX_ENTRIES;
        int density = rand() % 4; /* none, sparse, most, all blocks exist */
        for (uint64_t i = 0; i < entries; i++) {
            bool have = density == 3 || (density == 1 && rand() % 8 == 0) ||
                        (density == 2 && rand() % 8 != 0);
            reftable[i] = have ? (i + 1) << cb : 0;
        }
        /* The file ends inside, at, or past what the table covers. */
        uint64_t covered = entries << rb;
        uint64_t start = 1 + (rand64() % (covered + (covered >> (rand() % 4)) + 64));
        uint64_t min_entries = rand() % 2 ? entries + 1 : (start >> rb) + 1 + rand() % 3;
        uint64_t t, b, e;
        struct qcow2_refcount_area a;
        struct qcow2_refcount_area_req q = {
            .cluster_bits = cb,
            .refcount_order = order,
            .start = start,
            .min_entries = min_entries > entries * 2 ? min_entries : entries * 2,
            .reftable = reftable,
            .reftable_entries = entries,
        };
        qcow2_refcount_area_size(&q, &a);
        old_grow(cb, rb, reftable, entries, start, min_entries, &t, &b, &e);
        CHECK_EQ(a.table_clusters, t);
        CHECK_EQ(a.blocks, b);
        CHECK_EQ(a.end, e);
        check_area(&q, &a);
        if (check_failures != failures_before) {
            fprintf(stderr, "round %d cb %u order %u entries %" PRIu64 " start %" PRIu64 "\n",
                    round, cb, order, entries, start);
            return;
        }
    }
}

/* check.c's rebuild loop before the helper: counts[k] of cluster k. */
static void old_repair(uint32_t cluster_bits, uint32_t refblock_bits, const uint32_t *counts,
                       uint64_t n, uint64_t *table_out, uint64_t *blocks_out, uint64_t *end_out)
{
    uint64_t cs = 1ULL << cluster_bits, per_block = 1ULL << refblock_bits, used_end = 0;

    for (uint64_t k = 0; k < n; k++) {
        if (counts[k]) {
            used_end = k + 1;
        }
    }
    uint64_t start = used_end, table_clusters = 1, blocks = 0;
    for (;;) {
        uint64_t end = start + table_clusters + blocks;
        uint64_t nblocks = (end + per_block - 1) / per_block;
        uint64_t tclusters = (nblocks * 8 + cs - 1) / cs;
        uint64_t needed_blocks = 0;
        for (uint64_t b = 0; b < nblocks; b++) {
            bool any = b >= start / per_block;
            for (uint64_t k = b * per_block; !any && k < (b + 1) * per_block && k < n; k++) {
                any = counts[k] != 0;
            }
            needed_blocks += any;
        }
        if (tclusters == table_clusters && needed_blocks == blocks) {
            break;
        }
        table_clusters = tclusters;
        blocks = needed_blocks;
    }
    *table_out = table_clusters;
    *blocks_out = blocks;
    *end_out = start + table_clusters + blocks;
}

static void test_area_repair(void)
{
    enum { MAX_CLUSTERS = 1 << 17 };
    uint32_t *counts = calloc(MAX_CLUSTERS, sizeof *counts);

    CHECK(counts != NULL);
    if (!counts) {
        return;
    }
    int failures_before = check_failures;

    srand(78);
    for (int round = 0; round < 400; round++) {
        uint32_t cb = 9 + (uint32_t)rand() % 13, order = (uint32_t)rand() % 7;
        uint32_t rb = cb + 3 - order;
        uint64_t n = 1 + rand64() % MAX_CLUSTERS;
        int density = rand() % 4;
        memset(counts, 0, MAX_CLUSTERS * sizeof *counts);
        counts[0] = 1; /* the header */
        for (uint64_t k = 1; k < n; k++) {
            counts[k] = density == 3 || (density == 1 && rand() % 512 == 0) ||
                        (density == 2 && rand() % 4 == 0);
        }
        uint64_t used_end = 0, before = 0;
        for (uint64_t k = 0; k < n; k++) {
            used_end = counts[k] ? k + 1 : used_end;
        }
        for (uint64_t blk = 0; blk < used_end >> rb; blk++) {
            bool any = false;
            for (uint64_t k = blk << rb; !any && k < (blk + 1) << rb && k < n; k++) {
                any = counts[k] != 0;
            }
            before += any;
        }
        uint64_t t, b, e;
        struct qcow2_refcount_area a;
        struct qcow2_refcount_area_req q = {
            .cluster_bits = cb,
            .refcount_order = order,
            .start = used_end,
            .blocks_before = before,
        };
        qcow2_refcount_area_size(&q, &a);
        old_repair(cb, rb, counts, n, &t, &b, &e);
        CHECK_EQ(a.table_clusters, t);
        CHECK_EQ(a.blocks, b);
        CHECK_EQ(a.end, e);
        check_area(&q, &a);
        if (check_failures != failures_before) {
            fprintf(stderr, "round %d cb %u order %u n %" PRIu64 "\n", round, cb, order, n);
            break;
        }
    }
    free(counts);
}

int main(void)
{
    RUN(test_entry_layout);
    RUN(test_entry_round_trip);
    RUN(test_entry_matches_old_encoders);
    RUN(test_area_create);
    RUN(test_area_create_edges);
    RUN(test_area_against_qemu_img);
    RUN(test_area_grow);
    RUN(test_area_repair);
    return check_exit();
}
