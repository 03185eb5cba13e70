/* tests/unit/test-checksum.c: block/hasher.c (the dkh1-sha256 tree)
 * against a direct recursive reading of the definition in
 * diskimg-checksum(1), at the edges: an empty image, sizes that are not a
 * multiple of the block, exactly one level-1 node, one block more, and a
 * tree of three levels (1 TiB and a bit); pieces given in order, shuffled,
 * from several threads, as data or as zero ranges.  Known answers from
 * an independent implementation (Python's hashlib) pin the format. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "block/hasher.h"
#include "check.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/sha256.h"

CHECK_GLOBALS

#define B ((uint64_t)BLK_HASH_BLOCK)
#define F ((uint64_t)BLK_HASH_FANOUT)

/* A disk: size bytes, zero except for a few data blocks, whose bytes
 * are a pattern of their index (cut at the end of the disk). */
struct disk {
    uint64_t size;
    const uint64_t *data; /* block indexes with data, sorted */
    unsigned ndata;
};

static bool has_data(const struct disk *d, uint64_t b)
{
    for (unsigned i = 0; i < d->ndata; i++) {
        if (d->data[i] == b) {
            return true;
        }
    }
    return false;
}

/* The bytes of block b (B bytes, zero past the end); returns how many
 * are inside the disk. */
static uint64_t block_bytes(const struct disk *d, uint64_t b, uint8_t *buf)
{
    uint64_t n = MIN(B, d->size - b * B);

    memset(buf, 0, B);
    if (has_data(d, b)) {
        for (uint64_t i = 0; i < n; i++) {
            buf[i] = (uint8_t)(b * 31 + i * 7 + 1);
        }
    }
    return n;
}

static uint64_t nodes(uint64_t size, unsigned k)
{
    uint64_t n = size / B + (size % B != 0);
    while (k--) {
        n = n / F + (n % F != 0);
    }
    return n;
}

/* D_k[i], straight from the definition. */
static void ref_node(const struct disk *d, unsigned k, uint64_t i, uint8_t *out, uint8_t *buf)
{
    static uint8_t zero[SHA256_LEN];
    static bool zero_set;

    if (k == 0 && !has_data(d, i)) {
        if (!zero_set) { /* (a zero block hashed once: 1 TiB is 2^24 of them) */
            memset(buf, 0, B);
            sha256(buf, B, zero);
            zero_set = true;
        }
        memcpy(out, zero, SHA256_LEN);
        return;
    }
    if (k == 0) {
        block_bytes(d, i, buf);
        sha256(buf, B, out);
        return;
    }
    uint64_t n = MIN(F, nodes(d->size, k - 1) - i * F);
    uint8_t(*kids)[SHA256_LEN] = malloc(n * SHA256_LEN);
    for (uint64_t c = 0; c < n; c++) {
        ref_node(d, k - 1, i * F + c, kids[c], buf);
    }
    sha256(kids, n * SHA256_LEN, out);
    free(kids);
}

static void ref_checksum(const struct disk *d, uint8_t *out)
{
    uint8_t msg[11 + 8 + SHA256_LEN], *buf = malloc(B);
    unsigned top = 0;
    size_t len = 11 + 8;

    while (nodes(d->size, top) > 1) {
        top++;
    }
    memcpy(msg, "dkh1-sha256", 11);
    put_le64(msg + 11, d->size);
    if (nodes(d->size, 0) > 0) {
        ref_node(d, top, 0, msg + len, buf);
        len += SHA256_LEN;
    }
    sha256(msg, len, out);
    free(buf);
}

/* A piece: blocks [first, first + count), all zero or one data block. */
struct piece {
    uint64_t first, count;
    bool zero;
};

struct feeder {
    const struct disk *d;
    struct blk_hasher *h;
    struct piece *p;
    size_t n, next;
    pthread_mutex_t lock;
    int err;
};

static int give(const struct disk *d, struct blk_hasher *h, const struct piece *p, uint8_t *buf)
{
    uint64_t off = p->first * B, len = MIN(p->count * B, d->size - off);

    if (p->zero) {
        return blk_hasher_zero(h, off, len);
    }
    return blk_hasher_data(h, off, buf, block_bytes(d, p->first, buf));
}

static void *feed_thread(void *arg)
{
    struct feeder *f = arg;
    uint8_t *buf = malloc(B);

    for (;;) {
        pthread_mutex_lock(&f->lock);
        size_t i = f->next++;
        pthread_mutex_unlock(&f->lock);
        if (i >= f->n) {
            break;
        }
        int r = give(f->d, f->h, &f->p[i], buf);
        if (r < 0) {
            f->err = r;
        }
    }
    free(buf);
    return NULL;
}

/* Cut the disk into pieces: data blocks alone, zero runs of random
 * length (sometimes whole nodes, sometimes a block). */
static size_t cut(const struct disk *d, struct piece *p, size_t cap, unsigned *seed)
{
    uint64_t n0 = nodes(d->size, 0), b = 0;
    size_t n = 0;

    while (b < n0 && n < cap) {
        if (has_data(d, b)) {
            p[n++] = (struct piece){b, 1, false};
            b++;
            continue;
        }
        uint64_t run = 1;
        while (b + run < n0 && !has_data(d, b + run)) {
            run++;
        }
        uint64_t take =
            rand_r(seed) % 3 == 0 ? run : MIN(run, 1 + (uint64_t)rand_r(seed) % (3 * F));
        p[n++] = (struct piece){b, take, true};
        b += take;
    }
    CHECK(b == n0);
    return n;
}

static void hasher_checksum(const struct disk *d, unsigned threads, bool shuffle, unsigned seed,
                            uint8_t *out)
{
    size_t cap = 1 << 16;
    struct piece *p = malloc(cap * sizeof *p);
    struct feeder f = {.d = d, .p = p, .n = cut(d, p, cap, &seed)};
    pthread_t tid[8];

    for (size_t i = f.n; shuffle && i > 1; i--) {
        size_t j = rand_r(&seed) % i;
        struct piece t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    CHECK_EQ(blk_hasher_new(d->size, &f.h), 0);
    pthread_mutex_init(&f.lock, NULL);
    for (unsigned i = 0; i < threads; i++) {
        pthread_create(&tid[i], NULL, feed_thread, &f);
    }
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
    }
    CHECK_EQ(f.err, 0);
    CHECK_EQ(blk_hasher_final(f.h, out), 0);
    blk_hasher_free(f.h);
    pthread_mutex_destroy(&f.lock);
    free(p);
}

static void check_disk(const struct disk *d)
{
    uint8_t want[SHA256_LEN], got[SHA256_LEN];

    ref_checksum(d, want);
    hasher_checksum(d, 1, false, 1, got);
    CHECK(memcmp(want, got, SHA256_LEN) == 0);
    for (unsigned seed = 2; seed < 5; seed++) {
        hasher_checksum(d, seed, true, seed, got);
        CHECK(memcmp(want, got, SHA256_LEN) == 0);
    }
}

static void test_edges(void)
{
    static const uint64_t some[] = {0, 1, 5, F - 1, F, F + 2};
    static const uint64_t sizes[] = {
        0,         1,           512,       B - 1, B,         B + 1,
        3 * B + 5, (F - 1) * B, F * B - 7, F * B, F * B + 1, (F + 3) * B + 100,
    };

    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint64_t n0 = nodes(sizes[i], 0);
        unsigned k = 0;
        while (k < 6 && some[k] < n0) {
            k++;
        }
        struct disk zero = {sizes[i], NULL, 0}, data = {sizes[i], some, k};
        check_disk(&zero);
        check_disk(&data);
    }
}

/* 1 TiB and 3 blocks and 5 bytes: three levels above the blocks, zero
 * runs that cover whole level-1 and level-2 nodes. */
static void test_three_levels(void)
{
    static const uint64_t some[] = {7, F * F - 1, F * F + 3};
    struct disk d = {F * F * B + 3 * B + 5, some, 3};

    check_disk(&d);
}

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < SHA256_LEN; i++) {
        snprintf(out + 2 * i, 3, "%02x", d[i]);
    }
}

static void known(uint64_t size, const char *want)
{
    struct disk d = {size, NULL, 0};
    uint8_t got[SHA256_LEN];
    char s[2 * SHA256_LEN + 1];

    hasher_checksum(&d, 2, true, 9, got);
    hex(got, s);
    CHECK(strcmp(s, want) == 0);
}

static void test_known_answers(void)
{
    known(0, "30e2f125af45bf2420ac4b992935daf94a846904abb3a67b0b25bdf37bc7b0e3");
    known(1, "994de64a535bbed0effdd8c013b7281d4236f4167e1c3e3e7fa74c0ceffa56fa");
    known(B, "a1e2faded5753165f595ff924019521cdc4d1f8e89e139b0a4eef699ebb4058e");
    known(1ULL << 40, "cc3a9d0120e60c9f83f96f100a26a3cf96d2f8c8408a8deeedb983b426937b5d");
}

static void test_misuse(void)
{
    struct blk_hasher *h;
    uint8_t out[SHA256_LEN], buf[16] = {1};

    CHECK_EQ(blk_hasher_new(4 * B, &h), 0);
    CHECK_EQ(blk_hasher_zero(h, 1, B), -EINVAL);         /* unaligned */
    CHECK_EQ(blk_hasher_zero(h, 3 * B, 2 * B), -EINVAL); /* past the end */
    CHECK_EQ(blk_hasher_zero(h, 0, 0), -EINVAL);
    CHECK_EQ(blk_hasher_data(h, 0, buf, sizeof buf), 0);
    CHECK_EQ(blk_hasher_zero(h, B, 2 * B), 0);
    CHECK_EQ(blk_hasher_final(h, out), -EIO); /* block 3 never given */
    blk_hasher_free(h);
}

int main(void)
{
    RUN(test_known_answers);
    RUN(test_edges);
    RUN(test_three_levels);
    RUN(test_misuse);
    return check_exit();
}
