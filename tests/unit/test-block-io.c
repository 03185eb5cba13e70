/* tests/unit/test-block-io.c: the generic block layer's contract, checked
 * against the recording driver: which calls reach a driver, with which
 * flags, for every cache mode and policy. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "block/driver.h"
#include "check.h"
#include "rec-driver.h"

CHECK_GLOBALS

static struct blk_image *open_rec(const char *spec, enum blk_cache_mode cache)
{
    struct blk_image_opts o = {
        .filename = spec,
        .protocol = "rec",
        .format = "raw",
        .cache = cache,
        .discard = BLK_DISCARD_UNMAP,
    };
    struct blk_image *img = NULL;

    CHECK_EQ(blk_image_open(&img, &o), 0);
    rec_reset();
    return img;
}

static unsigned writes_with(unsigned flags)
{
    unsigned n = 0;

    for (unsigned i = 0; i < rec_ncalls; i++) {
        n += rec_calls[i].op == REC_WRITE && (rec_calls[i].flags & flags) == flags;
    }
    return n;
}

static void test_fua_native(void)
{
    struct blk_image *img = open_rec("fua=1", BLK_CACHE_WRITEBACK);
    char buf[4096] = {1};

    CHECK(blk_image_native_fua(img));
    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, BLK_REQ_FUA), 0);
    CHECK_EQ(rec_ncalls, 1);
    CHECK_EQ(writes_with(BLK_REQ_FUA), 1);
    CHECK_EQ(rec_count(REC_FLUSH), 0);
    blk_image_close(img);
}

static void test_fua_emulated(void)
{
    struct blk_image *img = open_rec("fua=0", BLK_CACHE_WRITEBACK);
    char buf[4096] = {1};

    CHECK(!blk_image_native_fua(img));
    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, BLK_REQ_FUA), 0);
    /* write without the flag, then a flush of the node */
    CHECK_EQ(rec_ncalls, 2);
    CHECK_EQ(rec_calls[0].op, REC_WRITE);
    CHECK_EQ(rec_calls[0].flags, 0);
    CHECK_EQ(rec_calls[1].op, REC_FLUSH);
    blk_image_close(img);
}

static void test_fua_refused_at_run_time(void)
{
    struct blk_image *img = open_rec("fua=1,fuaeopnotsupp=1", BLK_CACHE_WRITEBACK);
    char buf[512] = {1};

    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, BLK_REQ_FUA), 0);
    /* refused FUA write, the same write without FUA, then a flush */
    CHECK_EQ(rec_count(REC_WRITE), 2);
    CHECK_EQ(rec_count(REC_FLUSH), 1);
    /* The protocol node stopped declaring FUA; raw above passes FUA down
     * and the protocol node emulates it. */
    CHECK(!(blk_node_child(blk_image_root(img))->supported_write_flags & BLK_REQ_FUA));
    rec_reset();
    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, BLK_REQ_FUA), 0);
    CHECK_EQ(rec_count(REC_WRITE), 1);
    CHECK_EQ(writes_with(BLK_REQ_FUA), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 1);
    blk_image_close(img);
}

static void test_fua_longer_than_native_max(void)
{
    struct blk_image *img = open_rec("fua=1,fuamax=8192", BLK_CACHE_WRITEBACK);
    static char buf[16384] = {1};

    /* up to native_fua_max: native */
    CHECK_EQ(blk_image_pwrite(img, 0, buf, 8192, BLK_REQ_FUA), 0);
    CHECK_EQ(writes_with(BLK_REQ_FUA), 1);
    CHECK_EQ(rec_count(REC_FLUSH), 0);
    rec_reset();
    /* longer: written without FUA, then the node is flushed */
    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, BLK_REQ_FUA), 0);
    CHECK_EQ(rec_count(REC_WRITE), 1);
    CHECK_EQ(writes_with(BLK_REQ_FUA), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 1);
    /* and the node still declares FUA for the short ones */
    CHECK(blk_node_child(blk_image_root(img))->supported_write_flags & BLK_REQ_FUA);
    blk_image_close(img);
}

static void test_writeback_plain_write(void)
{
    struct blk_image *img = open_rec("fua=1", BLK_CACHE_WRITEBACK);
    char buf[4096] = {1};

    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, 0), 0);
    CHECK_EQ(writes_with(BLK_REQ_FUA), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 0);
    CHECK_EQ(blk_image_flush(img), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 1);
    blk_image_close(img);
}

static void test_writethrough_adds_fua(void)
{
    char buf[4096] = {1};
    struct blk_image *img = open_rec("fua=1", BLK_CACHE_WRITETHROUGH);

    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, 0), 0);
    CHECK_EQ(writes_with(BLK_REQ_FUA), 1);
    CHECK_EQ(blk_image_pwrite_zeroes(img, 0, 4096, 0), 0);
    CHECK_EQ(rec_calls[rec_ncalls - 1].op, REC_FLUSH); /* zeroes: FUA emulated */
    blk_image_close(img);

    /* Without native FUA, writethrough flushes after every write. */
    img = open_rec("fua=0", BLK_CACHE_WRITETHROUGH);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(blk_image_pwrite(img, (uint64_t)i * 4096, buf, sizeof buf, 0), 0);
    }
    CHECK_EQ(rec_count(REC_WRITE), 3);
    CHECK_EQ(rec_count(REC_FLUSH), 3);
    blk_image_close(img);

    img = open_rec("fua=1", BLK_CACHE_DIRECTSYNC);
    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, 0), 0);
    CHECK_EQ(writes_with(BLK_REQ_FUA), 1);
    blk_image_close(img);
}

static void test_unsafe_drops_flushes(void)
{
    struct blk_image *img = open_rec("fua=0", BLK_CACHE_UNSAFE);
    char buf[4096] = {1};

    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, BLK_REQ_FUA), 0);
    CHECK_EQ(blk_image_flush(img), 0);
    CHECK_EQ(rec_count(REC_WRITE), 1);
    CHECK_EQ(rec_count(REC_FLUSH), 0);
    CHECK_EQ(blk_image_close(img), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 0);

    /* Native FUA is not used either: unsafe ignores durability requests. */
    img = open_rec("fua=1", BLK_CACHE_UNSAFE);
    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, BLK_REQ_FUA), 0);
    CHECK_EQ(blk_image_pwrite_zeroes(img, 0, 4096, BLK_REQ_FUA), 0);
    CHECK_EQ(blk_image_discard(img, 0, 4096, BLK_REQ_FUA), 0);
    CHECK_EQ(writes_with(BLK_REQ_FUA), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 0);
    blk_image_close(img);
}

static void test_detect_zeroes_unmap_needs_discard(void)
{
    struct blk_image_opts o = {.filename = "",
                               .protocol = "rec",
                               .format = "raw",
                               .detect_zeroes = BLK_DETECT_ZEROES_UNMAP,
                               .discard = BLK_DISCARD_IGNORE};
    struct blk_image *img = NULL;

    CHECK_EQ(blk_image_open(&img, &o), -EINVAL);
}

static void test_close_flushes(void)
{
    struct blk_image *img = open_rec("fua=0", BLK_CACHE_WRITEBACK);
    char buf[512] = {1};

    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, 0), 0);
    CHECK_EQ(blk_image_close(img), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 1);
}

static void test_flags_masked(void)
{
    /* No MAY_UNMAP, no fast zero at the driver. */
    struct blk_image *img = open_rec("unmap=0,fastzero=0", BLK_CACHE_WRITEBACK);

    CHECK(!blk_image_can_fast_zero(img));
    CHECK_EQ(blk_image_pwrite_zeroes(img, 0, 8192, BLK_REQ_MAY_UNMAP), 0);
    CHECK_EQ(rec_ncalls, 1);
    CHECK_EQ(rec_calls[0].op, REC_ZERO);
    CHECK_EQ(rec_calls[0].flags, 0);
    rec_reset();
    CHECK_EQ(blk_image_pwrite_zeroes(img, 0, 8192, BLK_REQ_NO_FALLBACK), -ENOTSUP);
    CHECK_EQ(rec_ncalls, 0);
    blk_image_close(img);

    img = open_rec("unmap=1,fastzero=1", BLK_CACHE_WRITEBACK);
    CHECK(blk_image_can_fast_zero(img));
    CHECK_EQ(blk_image_pwrite_zeroes(img, 0, 8192, BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK), 0);
    CHECK_EQ(rec_calls[0].flags, BLK_REQ_MAY_UNMAP | BLK_REQ_NO_FALLBACK);
    blk_image_close(img);
}

static void test_zero_fallback(void)
{
    struct blk_image *img = open_rec("zero=0,size=65536", BLK_CACHE_WRITEBACK);
    uint8_t *data = rec_data();
    char out[4096];

    memset(data, 0xaa, 65536);
    CHECK_EQ(blk_image_pwrite_zeroes(img, 4096, 8192, 0), 0);
    CHECK_EQ(rec_count(REC_ZERO), 1);
    CHECK(rec_count(REC_WRITE) >= 1); /* zero buffers written instead */
    CHECK_EQ(blk_image_pread(img, 4096, out, sizeof out), 0);
    CHECK(out[0] == 0 && out[4095] == 0);
    CHECK_EQ(data[4095], 0xaa);
    CHECK_EQ(data[4096 + 8192], 0xaa);
    rec_reset();
    /* Fast zero never falls back to writing. */
    CHECK_EQ(blk_image_pwrite_zeroes(img, 0, 4096, BLK_REQ_NO_FALLBACK), -ENOTSUP);
    CHECK_EQ(rec_count(REC_WRITE), 0);
    blk_image_close(img);
}

static void test_bounds_and_read_only(void)
{
    struct blk_image *img = open_rec("size=65536", BLK_CACHE_WRITEBACK);
    char buf[4096] = {0};

    CHECK_EQ(blk_image_size(img), 65536);
    CHECK_EQ(blk_image_pwrite(img, 65536 - 100, buf, 4096, 0), -ENOSPC);
    CHECK_EQ(blk_image_pwrite_zeroes(img, 65536, 1, 0), -ENOSPC);
    CHECK_EQ(blk_image_pread(img, 65536 - 100, buf, 4096), -EINVAL);
    CHECK_EQ(blk_image_discard(img, 60000, 10000, 0), -EINVAL);
    CHECK_EQ(blk_image_pwrite(img, UINT64_MAX - 10, buf, 4096, 0), -EINVAL);
    CHECK_EQ(rec_ncalls, 0);
    /* exactly up to the end is fine, and so is zero length at the end */
    CHECK_EQ(blk_image_pwrite(img, 65536 - 4096, buf, 4096, 0), 0);
    CHECK_EQ(blk_image_pwrite(img, 65536, buf, 0, 0), 0);
    blk_image_close(img);

    struct blk_image_opts o = {
        .filename = "size=65536", .protocol = "rec", .format = "raw", .read_only = true};
    CHECK_EQ(blk_image_open(&img, &o), 0);
    rec_reset();
    CHECK_EQ(blk_image_pwrite(img, 0, buf, 512, 0), -EPERM);
    CHECK_EQ(blk_image_pwrite_zeroes(img, 0, 512, 0), -EPERM);
    CHECK_EQ(blk_image_discard(img, 0, 512, 0), -EPERM);
    CHECK_EQ(blk_image_pread(img, 0, buf, 512), 0);
    CHECK_EQ(rec_count(REC_WRITE) + rec_count(REC_ZERO) + rec_count(REC_DISCARD), 0);
    blk_image_close(img);
}

static void test_discard_policy(void)
{
    struct blk_image_opts o = {
        .filename = "", .protocol = "rec", .format = "raw", .discard = BLK_DISCARD_IGNORE};
    struct blk_image *img = NULL;

    CHECK_EQ(blk_image_open(&img, &o), 0);
    rec_reset();
    CHECK_EQ(blk_image_discard(img, 0, 4096, 0), 0);
    CHECK_EQ(blk_image_discard(img, 0, 4096, BLK_REQ_FUA), 0);
    CHECK_EQ(rec_ncalls, 0); /* no discard, and no flush for its FUA */
    CHECK_EQ(blk_image_discard(img, 0, (2 << 20), 0), -EINVAL); /* but still checked */
    CHECK_EQ(blk_image_pwrite_zeroes(img, 0, 4096, BLK_REQ_MAY_UNMAP), 0);
    CHECK_EQ(rec_calls[0].flags, 0); /* may not unmap when discard=ignore */
    blk_image_close(img);

    img = open_rec("", BLK_CACHE_WRITEBACK); /* discard=unmap */
    CHECK_EQ(blk_image_discard(img, 0, 4096, 0), 0);
    CHECK_EQ(rec_count(REC_DISCARD), 1);
    blk_image_close(img);
}

/* A rec node alone, without a format above it: for what only the node
 * API reaches (the rec driver compresses, raw does not). */
static struct blk_node *open_rec_node(const char *spec, bool read_only)
{
    struct blk_open_opts o = {.filename = spec, .read_only = read_only};
    struct blk_node *n = NULL;

    CHECK_EQ(blk_node_open(&n, blk_find_driver("rec"), NULL, &o), 0);
    rec_reset();
    return n;
}

static void test_compressed_write_checked(void)
{
    struct blk_node *n = open_rec_node("size=65536", false);
    char c[100] = {1};

    /* past the end, or running past it: refused before the driver */
    CHECK_EQ(blk_pwrite_compressed(n, 65536, 4096, c, sizeof c), -ENOSPC);
    CHECK_EQ(blk_pwrite_compressed(n, 61440, 8192, c, sizeof c), -ENOSPC);
    CHECK_EQ(blk_pwrite_compressed(n, UINT64_MAX - 10, 4096, c, sizeof c), -EINVAL);
    CHECK_EQ(rec_ncalls, 0);
    /* the last cluster: counted as a write of the guest bytes it holds */
    CHECK_EQ(blk_pwrite_compressed(n, 61440, 4096, c, sizeof c), 0);
    CHECK_EQ(rec_ncalls, 1);
    CHECK_EQ(rec_calls[0].op, REC_COMPRESSED);
    CHECK_EQ(rec_calls[0].off, 61440);
    CHECK_EQ(rec_calls[0].len, sizeof c);
    CHECK_EQ(n->stats.writes, 1);
    CHECK_EQ(n->stats.bytes_written, 4096);
    /* a new write generation: the next flush is not covered by an old one */
    CHECK_EQ(blk_flush(n), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 1);
    blk_node_close(n);

    n = open_rec_node("size=65536", true);
    CHECK_EQ(blk_pwrite_compressed(n, 0, 4096, c, sizeof c), -EPERM);
    CHECK_EQ(rec_ncalls, 0);
    CHECK_EQ(n->stats.writes, 0);
    blk_node_close(n);
}

/* A truncate changes the file as a write does: a flush after it is not
 * covered by the flush before it (qcow2 shrinks a file, then flushes). */
static void test_truncate_needs_flush(void)
{
    struct blk_node *n = open_rec_node("size=65536", false);
    char buf[4096] = {1};

    CHECK_EQ(blk_pwrite(n, 0, buf, sizeof buf, 0), 0);
    CHECK_EQ(blk_flush(n), 0);
    CHECK_EQ(blk_truncate(n, 8192), 0);
    CHECK_EQ(blk_get_length(n), 8192);
    CHECK_EQ(blk_flush(n), 0);
    CHECK_EQ(rec_count(REC_TRUNCATE), 1);
    CHECK_EQ(rec_count(REC_FLUSH), 2);
    /* with nothing changed since, the next flush is still free */
    CHECK_EQ(blk_flush(n), 0);
    CHECK_EQ(rec_count(REC_FLUSH), 2);
    blk_node_close(n);
}

static void test_compressed_write_unsupported(void)
{
    struct blk_image *img = open_rec("size=65536", BLK_CACHE_WRITEBACK);
    char in[4096] = {1}, out[4096];
    size_t clen;

    /* raw has no compressed clusters, whatever its child has */
    CHECK_EQ(blk_image_compress(img, in, sizeof in, out, sizeof out, &clen), -ENOTSUP);
    CHECK_EQ(blk_image_pwrite_compressed(img, 0, 4096, out, 100), -ENOTSUP);
    CHECK_EQ(rec_ncalls, 0);
    blk_image_close(img);
}

static void test_discard_fua(void)
{
    /* The driver has no FUA for discard: discard, then a flush of the node */
    struct blk_image *img = open_rec("", BLK_CACHE_WRITEBACK);
    struct blk_node *root = blk_image_root(img);

    CHECK_EQ(blk_image_discard(img, 0, 4096, BLK_REQ_FUA), 0);
    CHECK_EQ(rec_ncalls, 2);
    CHECK_EQ(rec_calls[0].op, REC_DISCARD);
    CHECK_EQ(rec_calls[0].flags, 0);
    CHECK_EQ(rec_calls[1].op, REC_FLUSH);
    CHECK_EQ(root->stats.fua_emulated, 1);
    rec_reset();
    /* without FUA: no flush */
    CHECK_EQ(blk_image_discard(img, 0, 4096, 0), 0);
    CHECK_EQ(rec_ncalls, 1);
    blk_image_close(img);

    /* writethrough makes every discard FUA */
    img = open_rec("", BLK_CACHE_WRITETHROUGH);
    CHECK_EQ(blk_image_discard(img, 0, 4096, 0), 0);
    CHECK_EQ(rec_ncalls, 2);
    CHECK_EQ(rec_calls[1].op, REC_FLUSH);
    blk_image_close(img);

    /* native: raw passes it down, and nobody flushes */
    img = open_rec("discardfua=1", BLK_CACHE_WRITEBACK);
    CHECK_EQ(blk_image_discard(img, 0, 4096, BLK_REQ_FUA), 0);
    CHECK_EQ(rec_ncalls, 1);
    CHECK_EQ(rec_calls[0].op, REC_DISCARD);
    CHECK_EQ(rec_calls[0].flags, BLK_REQ_FUA);
    CHECK_EQ(blk_node_child(blk_image_root(img))->stats.fua_native, 1);
    blk_image_close(img);

    /* on a node alone too: io.c emulates, whoever calls */
    struct blk_node *n = open_rec_node("", false);
    CHECK_EQ(blk_discard(n, 4096, 4096, BLK_REQ_FUA), 0);
    CHECK_EQ(rec_ncalls, 2);
    CHECK_EQ(rec_calls[0].op, REC_DISCARD);
    CHECK_EQ(rec_calls[1].op, REC_FLUSH);
    blk_node_close(n);
}

static void test_detect_zeroes(void)
{
    struct blk_image_opts o = {.filename = "",
                               .protocol = "rec",
                               .format = "raw",
                               .detect_zeroes = BLK_DETECT_ZEROES_ON,
                               .discard = BLK_DISCARD_UNMAP};
    struct blk_image *img = NULL;
    char zero[4096] = {0}, data[4096] = {1};

    CHECK_EQ(blk_image_open(&img, &o), 0);
    rec_reset();
    CHECK_EQ(blk_image_pwrite(img, 0, zero, sizeof zero, 0), 0);
    CHECK_EQ(blk_image_pwrite(img, 4096, data, sizeof data, 0), 0);
    CHECK_EQ(rec_ncalls, 2);
    CHECK_EQ(rec_calls[0].op, REC_ZERO);
    CHECK_EQ(rec_calls[0].flags, 0);
    CHECK_EQ(rec_calls[1].op, REC_WRITE);
    blk_image_close(img);

    o.detect_zeroes = BLK_DETECT_ZEROES_UNMAP;
    CHECK_EQ(blk_image_open(&img, &o), 0);
    rec_reset();
    CHECK_EQ(blk_image_pwrite(img, 0, zero, sizeof zero, 0), 0);
    CHECK_EQ(rec_calls[0].op, REC_ZERO);
    CHECK_EQ(rec_calls[0].flags, BLK_REQ_MAY_UNMAP);
    blk_image_close(img);
}

static void test_unaligned_rmw(void)
{
    struct blk_image *img = open_rec("align=512,size=65536", BLK_CACHE_NONE);
    uint8_t *data = rec_data();
    char in[100], out[100];

    memset(in, 0x5c, sizeof in);
    /* [1000, 1100) spans blocks 512 and 1024: both edges are read, then
     * both blocks written (the rec driver fails any unaligned call). */
    CHECK_EQ(blk_image_pwrite(img, 1000, in, sizeof in, 0), 0);
    CHECK_EQ(rec_count(REC_READ), 2);
    CHECK_EQ(rec_count(REC_WRITE), 1);
    CHECK_EQ(rec_calls[2].op, REC_WRITE);
    CHECK_EQ(rec_calls[2].off, 512);
    CHECK_EQ(rec_calls[2].len, 1024);
    rec_reset();
    /* inside one block: one read */
    CHECK_EQ(blk_image_pwrite(img, 2100, in, 10, 0), 0);
    CHECK_EQ(rec_count(REC_READ), 1);
    CHECK_EQ(rec_calls[1].off, 2048);
    CHECK_EQ(rec_calls[1].len, 512);
    CHECK_EQ(data[999], 0);
    CHECK_EQ(data[1000], 0x5c);
    CHECK_EQ(data[1099], 0x5c);
    CHECK_EQ(data[1100], 0);
    CHECK_EQ(blk_image_pread(img, 1000, out, sizeof out), 0);
    CHECK(memcmp(in, out, sizeof in) == 0);
    blk_image_close(img);
}

struct rmw_thread {
    struct blk_image *img;
    unsigned index;
    pthread_barrier_t *barrier;
};

static void *rmw_writer(void *arg)
{
    struct rmw_thread *t = arg;
    uint8_t byte = (uint8_t)(0x10 + t->index);

    pthread_barrier_wait(t->barrier);
    for (int round = 0; round < 200; round++) {
        /* Each thread owns bytes index, index+16, ... of one 512-byte
         * block: a lost read-modify-write would drop another's bytes. */
        for (unsigned off = t->index; off < 512; off += 16) {
            blk_image_pwrite(t->img, off, &byte, 1, 0);
        }
    }
    return NULL;
}

static void test_unaligned_rmw_concurrent(void)
{
    enum { THREADS = 16 };
    struct blk_image *img = open_rec("align=512,size=4096", BLK_CACHE_NONE);
    struct rmw_thread t[THREADS];
    pthread_t tid[THREADS];
    pthread_barrier_t barrier;
    uint8_t block[512];

    pthread_barrier_init(&barrier, NULL, THREADS);
    for (unsigned i = 0; i < THREADS; i++) {
        t[i] = (struct rmw_thread){img, i, &barrier};
        pthread_create(&tid[i], NULL, rmw_writer, &t[i]);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(tid[i], NULL);
    }
    CHECK_EQ(blk_image_pread(img, 0, block, sizeof block), 0);
    for (unsigned i = 0; i < 512; i++) {
        if (block[i] != 0x10 + i % 16) {
            CHECK_EQ(block[i], 0x10 + i % 16);
            break;
        }
    }
    pthread_barrier_destroy(&barrier);
    blk_image_close(img);
}

struct fua_thread {
    struct blk_image *img;
    unsigned index;
    pthread_barrier_t *barrier;
};

static void *fua_writer(void *arg)
{
    struct fua_thread *t = arg;
    char buf[512];

    memset(buf, (int)t->index, sizeof buf);
    pthread_barrier_wait(t->barrier);
    CHECK_EQ(blk_image_pwrite(t->img, t->index * 512ull, buf, sizeof buf, BLK_REQ_FUA), 0);
    return NULL;
}

static void test_concurrent_fua_share_flushes(void)
{
    enum { THREADS = 8 };
    /* A slow flush: writers that arrive while it runs share the next one. */
    struct blk_image *img = open_rec("fua=0,flushdelay=20000", BLK_CACHE_WRITEBACK);
    struct fua_thread t[THREADS];
    pthread_t tid[THREADS];
    pthread_barrier_t barrier;

    pthread_barrier_init(&barrier, NULL, THREADS);
    for (unsigned i = 0; i < THREADS; i++) {
        t[i] = (struct fua_thread){img, i, &barrier};
        pthread_create(&tid[i], NULL, fua_writer, &t[i]);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(tid[i], NULL);
    }
    CHECK_EQ(rec_count(REC_WRITE), THREADS);
    CHECK(rec_count(REC_FLUSH) >= 1);
    CHECK(rec_count(REC_FLUSH) < THREADS);
    /* and a flush with nothing new written costs nothing */
    unsigned before = rec_count(REC_FLUSH);
    CHECK_EQ(blk_image_flush(img), 0);
    CHECK_EQ(rec_count(REC_FLUSH), before);
    pthread_barrier_destroy(&barrier);
    blk_image_close(img);
}

static void test_raw_window(void)
{
    struct blk_image_opts o = {.filename = "size=65536", .protocol = "rec", .format = "raw"};
    struct blk_image *img = NULL;
    char buf[512] = {7};

    CHECK_EQ(blk_kv_add(&o.options, "offset", "4096"), 0);
    CHECK_EQ(blk_kv_add(&o.options, "size", "8192"), 0);
    CHECK_EQ(blk_image_open(&img, &o), 0);
    rec_reset();
    CHECK_EQ(blk_image_size(img), 8192);
    CHECK_EQ(blk_image_pwrite(img, 0, buf, sizeof buf, 0), 0);
    CHECK_EQ(rec_calls[0].off, 4096);
    CHECK_EQ(blk_image_pwrite(img, 8192 - 256, buf, sizeof buf, 0), -ENOSPC);
    blk_image_close(img);

    CHECK_EQ(blk_kv_set(&o.options, "offset", "60000"), 0); /* window past the end of the file */
    CHECK(blk_image_open(&img, &o) < 0);
}

int main(void)
{
    RUN(test_fua_native);
    RUN(test_fua_emulated);
    RUN(test_fua_refused_at_run_time);
    RUN(test_fua_longer_than_native_max);
    RUN(test_writeback_plain_write);
    RUN(test_writethrough_adds_fua);
    RUN(test_unsafe_drops_flushes);
    RUN(test_detect_zeroes_unmap_needs_discard);
    RUN(test_close_flushes);
    RUN(test_flags_masked);
    RUN(test_zero_fallback);
    RUN(test_bounds_and_read_only);
    RUN(test_discard_policy);
    RUN(test_compressed_write_checked);
    RUN(test_compressed_write_unsupported);
    RUN(test_truncate_needs_flush);
    RUN(test_discard_fua);
    RUN(test_detect_zeroes);
    RUN(test_unaligned_rmw);
    RUN(test_unaligned_rmw_concurrent);
    RUN(test_concurrent_fua_share_flushes);
    RUN(test_raw_window);
    return check_exit();
}
