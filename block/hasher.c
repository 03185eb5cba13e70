/* block/hasher.c: the dkh1-sha256 tree of hasher.h.
 *
 * Level 0 holds the block digests, level k+1 the digests of BLK_HASH_FANOUT
 * consecutive level-k digests (the last node of a level may have fewer),
 * and the top level is the first with one node at most.  Blocks arrive in
 * any order, so a level-1 node collects its children's digests in place
 * until it has them all; finished level-1 nodes wait in a sorted list of
 * runs until every node before them is finished too, and from there up
 * each level is one streaming SHA-256 fed in order.  A run of whole
 * all-zero nodes moves up as one entry, becoming whole zero nodes of the
 * next level where it covers them: a terabyte of holes costs a few
 * thousand 32-byte updates.  Not for: reading images (checksum.c) or
 * deciding what is zero (the callers' block status and buffer_is_zero). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hasher.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/sha256.h"
#include "common/util.h"

/* 2^64 bytes / 2^16 per block = 2^48 blocks: four levels of 2^12 above. */
#define LEVELS 6
#define F ((uint64_t)BLK_HASH_FANOUT)
#define B ((uint64_t)BLK_HASH_BLOCK)
#define BATCH 128 /* digests per update when feeding copies of one */
/* Without overflow, for sizes up to 2^64 - 1. */
#define DIV_ROUND_UP(x, a) ((x) / (a) + ((x) % (a) != 0))

static const uint8_t zero_block[BLK_HASH_BLOCK];

/* A level-1 node whose children (block digests) are arriving. */
struct open_node {
    uint64_t index;
    uint32_t children, filled;
    uint8_t (*d)[SHA256_LEN];
    struct open_node *next;
};

/* Finished level-1 nodes [start, start + count), all with this digest
 * (count > 1 only for whole zero nodes). */
struct run {
    uint64_t start, count;
    uint8_t digest[SHA256_LEN];
};

/* The node of level k >= 2 being formed from its children, in order. */
struct stream {
    struct sha256_ctx ctx;
    uint64_t index;
    uint64_t fed;
};

struct blk_hasher {
    pthread_mutex_t lock;
    uint64_t size;
    uint64_t n[LEVELS];               /* nodes per level */
    unsigned top;                     /* the first level with at most one node */
    uint8_t zero[LEVELS][SHA256_LEN]; /* a whole all-zero node of each level */
    struct open_node *open;
    struct run *runs;
    size_t head, nruns, cap; /* runs[head .. head + nruns), sorted by start */
    uint64_t next1;          /* the level-1 node the streams expect next */
    struct stream up[LEVELS];
    uint8_t top_digest[SHA256_LEN];
    bool top_done;
    int err;
};

/* Children of node i of level k (k >= 1). */
static uint64_t children_of(const struct blk_hasher *h, unsigned k, uint64_t i)
{
    return MIN(F, h->n[k - 1] - i * F);
}

static int set_top(struct blk_hasher *h, const uint8_t *d)
{
    if (h->top_done) {
        return err_setx(EIO, "checksum: internal error: the top of the tree twice");
    }
    memcpy(h->top_digest, d, SHA256_LEN);
    h->top_done = true;
    return 0;
}

static int feed(struct blk_hasher *h, unsigned k, const uint8_t *d, uint64_t m);

/* count consecutive nodes of level k (k >= 2 streams) are finished. */
static int node_done(struct blk_hasher *h, unsigned k, const uint8_t *d, uint64_t count)
{
    if (k == h->top) {
        return count == 1 ? set_top(h, d)
                          : err_setx(EIO, "checksum: internal error: %" PRIu64 " tops", count);
    }
    return feed(h, k + 1, d, count);
}

static int update_copies(struct sha256_ctx *ctx, const uint8_t *d, uint64_t m)
{
    uint8_t batch[BATCH][SHA256_LEN];
    uint64_t fill = MIN(m, (uint64_t)BATCH);

    for (uint64_t i = 0; i < fill; i++) {
        memcpy(batch[i], d, SHA256_LEN);
    }
    while (m > 0) {
        uint64_t r = MIN(m, (uint64_t)BATCH);
        int ret = sha256_update(ctx, batch, r * SHA256_LEN);
        if (ret < 0) {
            return ret;
        }
        m -= r;
    }
    return 0;
}

/* Feed m copies of the child digest d, in order, into level k >= 2. */
static int feed(struct blk_hasher *h, unsigned k, const uint8_t *d, uint64_t m)
{
    struct stream *s = &h->up[k];
    bool zero = memcmp(d, h->zero[k - 1], SHA256_LEN) == 0;
    uint64_t full_nodes = h->n[k - 1] / F;
    int r;

    while (m > 0) {
        if (s->index >= h->n[k]) {
            return err_setx(EIO, "checksum: internal error: level %u overflows", k);
        }
        if (zero && s->fed == 0 && m >= F && s->index < full_nodes) {
            uint64_t w = MIN(m / F, full_nodes - s->index);
            s->index += w;
            m -= w * F;
            if ((r = node_done(h, k, h->zero[k], w)) < 0) {
                return r;
            }
            continue;
        }
        uint64_t want = children_of(h, k, s->index);
        uint64_t take = MIN(m, want - s->fed);
        if (s->fed == 0 && (r = sha256_init(&s->ctx)) < 0) {
            return r;
        }
        if ((r = update_copies(&s->ctx, d, take)) < 0) {
            return r;
        }
        s->fed += take;
        m -= take;
        if (s->fed == want) {
            uint8_t out[SHA256_LEN];
            sha256_final(&s->ctx, out);
            s->index++;
            s->fed = 0;
            if ((r = node_done(h, k, out, 1)) < 0) {
                return r;
            }
        }
    }
    return 0;
}

/* Move the runs that are next in order into the level-2 stream (or the
 * top when level 1 is the top). */
static int flush_runs(struct blk_hasher *h)
{
    while (h->nruns > 0 && h->runs[h->head].start == h->next1) {
        struct run *rn = &h->runs[h->head];
        int r = node_done(h, 1, rn->digest, rn->count);
        if (r < 0) {
            return r;
        }
        h->next1 += rn->count;
        h->head++;
        h->nruns--;
    }
    if (h->nruns == 0) {
        h->head = 0;
    }
    return 0;
}

/* Level-1 nodes [start, start + count) are finished with digest d. */
static int level1_done(struct blk_hasher *h, uint64_t start, uint64_t count, const uint8_t *d)
{
    size_t pos;

    if (h->top == 0) {
        return set_top(h, d); /* one block: its digest is the top */
    }
    if (h->head + h->nruns == h->cap) {
        if (h->head > 0) {
            memmove(h->runs, h->runs + h->head, h->nruns * sizeof *h->runs);
            h->head = 0;
        } else {
            size_t cap = h->cap ? h->cap * 2 : 64;
            struct run *nr = realloc(h->runs, cap * sizeof *nr);
            if (!nr) {
                return err_set(ENOMEM, "checksum: pending nodes");
            }
            h->runs = nr;
            h->cap = cap;
        }
    }
    /* Usually the newest run goes last; search from the end. */
    pos = h->head + h->nruns;
    while (pos > h->head && h->runs[pos - 1].start > start) {
        pos--;
    }
    memmove(&h->runs[pos + 1], &h->runs[pos], (h->head + h->nruns - pos) * sizeof *h->runs);
    h->runs[pos] = (struct run){.start = start, .count = count};
    memcpy(h->runs[pos].digest, d, SHA256_LEN);
    h->nruns++;
    return flush_runs(h);
}

static struct open_node *open_node_locked(struct blk_hasher *h, uint64_t index)
{
    struct open_node *o;

    for (o = h->open; o; o = o->next) {
        if (o->index == index) {
            return o;
        }
    }
    o = calloc(1, sizeof *o);
    if (o) {
        o->index = index;
        o->children = (uint32_t)(h->top == 0 ? h->n[0] : children_of(h, 1, index));
        o->d = malloc((size_t)o->children * SHA256_LEN);
    }
    if (!o || !o->d) {
        free(o);
        err_set(ENOMEM, "checksum: node digests");
        return NULL;
    }
    o->next = h->open;
    h->open = o;
    return o;
}

static void close_node(struct blk_hasher *h, struct open_node *o)
{
    struct open_node **pp = &h->open;

    while (*pp != o) {
        pp = &(*pp)->next;
    }
    *pp = o->next;
    free(o->d);
    free(o);
}

/* Block digests for blocks [b, b + count) (all the same digest when
 * same is set: d is then one digest). */
static int put_locked(struct blk_hasher *h, uint64_t b, uint64_t count, const uint8_t *d, bool same)
{
    while (count > 0) {
        uint64_t j = b / F, first = j * F;
        uint64_t kids = h->top == 0 ? h->n[0] : children_of(h, 1, j);
        uint64_t full_nodes = h->n[0] / F;
        int r;

        if (b + count > h->n[0]) {
            return err_setx(EIO, "checksum: internal error: block %" PRIu64 " past the end",
                            b + count - 1);
        }
        if (same && h->top > 0 && b == first && count >= F && j < full_nodes &&
            memcmp(d, h->zero[0], SHA256_LEN) == 0) {
            uint64_t w = MIN(count / F, full_nodes - j);
            if ((r = level1_done(h, j, w, h->zero[1])) < 0) {
                return r;
            }
            b += w * F;
            count -= w * F;
            continue;
        }
        struct open_node *o = open_node_locked(h, j);
        if (!o) {
            return -ENOMEM;
        }
        uint64_t take = MIN(count, first + kids - b);
        if (o->filled + take > o->children) {
            return err_setx(EIO, "checksum: internal error: block %" PRIu64 " given twice", b);
        }
        for (uint64_t i = 0; i < take; i++) {
            memcpy(o->d[b - first + i], same ? d : d + i * SHA256_LEN, SHA256_LEN);
        }
        o->filled += (uint32_t)take;
        if (!same) {
            d += take * SHA256_LEN;
        }
        b += take;
        count -= take;
        if (o->filled == o->children) {
            uint8_t out[SHA256_LEN];
            if (h->top == 0) {
                memcpy(out, o->d[0], SHA256_LEN);
            } else if ((r = sha256(o->d, (size_t)o->children * SHA256_LEN, out)) < 0) {
                return r;
            }
            close_node(h, o);
            if ((r = level1_done(h, j, 1, out)) < 0) {
                return r;
            }
        }
    }
    return 0;
}

static int put(struct blk_hasher *h, uint64_t b, uint64_t count, const uint8_t *d, bool same)
{
    int r;

    pthread_mutex_lock(&h->lock);
    r = h->err;
    if (r == 0) {
        r = put_locked(h, b, count, d, same);
        if (r < 0) {
            h->err = r;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return r;
}

static int check_range(const struct blk_hasher *h, uint64_t off, uint64_t len)
{
    if (off % B || len == 0 || off > h->size || len > h->size - off) {
        return err_setx(EINVAL,
                        "checksum: range %" PRIu64 "+%" PRIu64
                        " is not block-aligned inside %" PRIu64 " bytes",
                        off, len, h->size);
    }
    return 0;
}

/* One block's digest; a short block is padded with zeroes. */
static int hash_block(const uint8_t *p, uint64_t n, const struct blk_hasher *h, uint8_t *out)
{
    struct sha256_ctx ctx;
    int r;

    if (buffer_is_zero(p, n)) {
        memcpy(out, h->zero[0], SHA256_LEN);
        return 0;
    }
    if (n == B) {
        return sha256(p, n, out);
    }
    if ((r = sha256_init(&ctx)) < 0) {
        return r;
    }
    if ((r = sha256_update(&ctx, p, n)) < 0 || (r = sha256_update(&ctx, zero_block, B - n)) < 0) {
        sha256_abort(&ctx);
        return r;
    }
    sha256_final(&ctx, out);
    return 0;
}

#define CHUNK 64 /* block digests computed per lock taken */

int blk_hasher_data(struct blk_hasher *h, uint64_t off, const void *buf, uint64_t len)
{
    uint8_t d[CHUNK][SHA256_LEN];
    const uint8_t *p = buf;
    int r;

    if ((r = check_range(h, off, len)) < 0) {
        return r;
    }
    for (uint64_t pos = 0; pos < len;) {
        unsigned k = 0;
        uint64_t start = pos;
        for (; k < CHUNK && pos < len; k++) {
            uint64_t n = MIN(B, len - pos);
            if ((r = hash_block(p + pos, n, h, d[k])) < 0) {
                return r;
            }
            pos += n;
        }
        if ((r = put(h, (off + start) / B, k, &d[0][0], false)) < 0) {
            return r;
        }
    }
    return 0;
}

int blk_hasher_zero(struct blk_hasher *h, uint64_t off, uint64_t len)
{
    int r = check_range(h, off, len);

    return r < 0 ? r : put(h, off / B, DIV_ROUND_UP(len, B), h->zero[0], true);
}

int blk_hasher_final(struct blk_hasher *h, uint8_t out[BLK_CHECKSUM_LEN])
{
    static const char name[] = BLK_CHECKSUM_ALGORITHM;
    uint8_t msg[sizeof name - 1 + 8 + SHA256_LEN];
    size_t len = sizeof name - 1;
    int r;

    pthread_mutex_lock(&h->lock);
    r = h->err;
    if (r == 0 && h->n[0] > 0 && !h->top_done) {
        r = err_setx(EIO, "checksum: internal error: some blocks were never given");
    }
    pthread_mutex_unlock(&h->lock);
    if (r < 0) {
        return r;
    }
    memcpy(msg, name, len);
    put_le64(msg + len, h->size);
    len += 8;
    if (h->n[0] > 0) {
        memcpy(msg + len, h->top_digest, SHA256_LEN);
        len += SHA256_LEN;
    }
    return sha256(msg, len, out);
}

int blk_hasher_new(uint64_t size, struct blk_hasher **out)
{
    struct blk_hasher *h = calloc(1, sizeof *h);
    uint8_t kids[BATCH][SHA256_LEN];
    int r;

    if (!h) {
        return err_set(ENOMEM, "checksum");
    }
    h->size = size;
    h->n[0] = DIV_ROUND_UP(size, B);
    for (unsigned k = 1; k < LEVELS; k++) {
        h->n[k] = DIV_ROUND_UP(h->n[k - 1], F);
    }
    while (h->top + 1 < LEVELS && h->n[h->top] > 1) {
        h->top++;
    }
    r = sha256(zero_block, B, h->zero[0]);
    for (unsigned k = 1; k < LEVELS && r == 0; k++) {
        struct sha256_ctx ctx;
        for (unsigned i = 0; i < BATCH; i++) {
            memcpy(kids[i], h->zero[k - 1], SHA256_LEN);
        }
        if ((r = sha256_init(&ctx)) < 0) {
            break;
        }
        for (uint64_t i = 0; i < F / BATCH && r == 0; i++) {
            r = sha256_update(&ctx, kids, sizeof kids);
        }
        if (r < 0) {
            sha256_abort(&ctx);
            break;
        }
        sha256_final(&ctx, h->zero[k]);
    }
    if (r < 0) {
        free(h);
        return r;
    }
    pthread_mutex_init(&h->lock, NULL);
    *out = h;
    return 0;
}

void blk_hasher_free(struct blk_hasher *h)
{
    if (!h) {
        return;
    }
    while (h->open) {
        close_node(h, h->open);
    }
    for (unsigned k = 0; k < LEVELS; k++) {
        sha256_abort(&h->up[k].ctx);
    }
    free(h->runs);
    pthread_mutex_destroy(&h->lock);
    free(h);
}
