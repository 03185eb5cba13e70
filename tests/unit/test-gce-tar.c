/* tests/unit/test-gce-tar.c: the GCE archive's pure pieces.  The old GNU
 * tar header against what GNU tar 1.34 writes for the same member (its
 * checksum and fields); the parallel gzip against zlib's inflate, with
 * the same bytes at every thread count; the lint's verdicts on archives
 * built here, good and damaged. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "check.h"
#include "common/gce-lint.h"
#include "common/gzip-par.h"
#include "common/tar-gnu.h"

CHECK_GLOBALS

#define GIB (1ULL << 30)

static void test_numbers(void)
{
    uint8_t f[12];
    uint64_t v = 0;

    tar_put_number(f, 12, 3 * GIB);
    CHECK(memcmp(f, "30000000000", 12) == 0); /* with its NUL */
    CHECK_EQ(tar_get_number(f, 12, &v), 0);
    CHECK_EQ(v, 3 * GIB);
    /* 8 GiB does not fit 11 octal digits: base-256, as GNU tar. */
    tar_put_number(f, 12, 10 * GIB);
    static const uint8_t b256[12] = {0x80, 0, 0, 0, 0, 0, 0, 2, 0x80, 0, 0, 0};
    CHECK(memcmp(f, b256, 12) == 0);
    CHECK_EQ(tar_get_number(f, 12, &v), 0);
    CHECK_EQ(v, 10 * GIB);
    tar_put_number(f, 12, 8 * GIB - 1);
    CHECK(f[0] == '7');
    CHECK_EQ(tar_get_number((const uint8_t *)"  644 \0\0", 8, &v), 0);
    CHECK_EQ(v, 0644);
    CHECK_EQ(tar_get_number((const uint8_t *)"00009\0\0\0", 8, &v), -EINVAL);
    CHECK_EQ(tar_get_number((const uint8_t *)"\xff\xff\xff\xff\xff\xff\xff\xff", 8, &v), -EINVAL);
    static const uint8_t huge[12] = {0x80, 0xff, 0xff, 0xff, 0xff, 0xff,
                                     0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    CHECK_EQ(tar_get_number(huge, 12, &v), -ERANGE);
}

/* GNU tar 1.34, `tar --format=oldgnu -Scf x.tar --mtime=@1700000000
 * --owner=0 --group=0 disk.raw` as root, of a 3 GiB file with 4 KiB of
 * data at 1 MiB and 12 KiB at 100000 * 4 KiB, writes checksum 020473. */
static void test_header_as_gnu_tar(void)
{
    struct tar_sparse map[] = {{1 << 20, 4096}, {100000ULL * 4096, 12288}, {3 * GIB, 0}};
    struct tar_member m = {.name = "disk.raw",
                           .mode = 0644,
                           .mtime = 1700000000,
                           .real_size = 3 * GIB,
                           .map = map,
                           .n_map = 3};
    uint8_t h[512];
    struct tar_header p;
    const char *bad = NULL;

    CHECK_EQ(tar_member_header_size(&m), 512);
    CHECK_EQ(tar_member_stored_size(&m), 16384);
    tar_member_write_header(&m, h);
    CHECK(memcmp(h + 148, "020473\0 ", 8) == 0);
    CHECK(memcmp(h + 124, "00000040000", 12) == 0);
    CHECK(memcmp(h + 257, "ustar  \0root", 12) == 0);
    CHECK(memcmp(h + 386,
                 "00004000000\0"
                 "00000010000",
                 24) == 0);
    CHECK_EQ(h[156], 'S');
    CHECK_EQ(h[482], 0);
    CHECK(tar_checksum_ok(h));
    CHECK_EQ(tar_parse_header(h, &p, &bad), 0);
    CHECK_EQ(p.magic, TAR_MAGIC_OLDGNU);
    CHECK_EQ(p.n_sparse, 3);
    CHECK_EQ(p.real_size, 3 * GIB);
    CHECK_EQ(p.sparse[1].offset, 100000ULL * 4096);
    CHECK(strcmp(p.name, "disk.raw") == 0);
    h[0] ^= 1;
    CHECK(!tar_checksum_ok(h));
}

/* 30 entries: 4 in the header, 21 + 5 in two extension blocks. */
static void test_extension_blocks(void)
{
    struct tar_sparse map[30], e[TAR_EXT_SPARSE];
    struct tar_member m = {
        .name = "disk.raw", .mode = 0644, .real_size = 16 * GIB, .map = map, .n_map = 30};
    unsigned n;
    bool more;

    for (int i = 0; i < 30; i++) {
        map[i] = (struct tar_sparse){(uint64_t)i * (GIB / 2), 4096};
    }
    CHECK_EQ(tar_member_header_size(&m), 3 * 512);
    uint8_t *h = calloc(3, 512);
    tar_member_write_header(&m, h);
    CHECK_EQ(h[482], 1);
    CHECK_EQ(tar_parse_ext(h + 512, e, &n, &more), 0);
    CHECK_EQ(n, 21);
    CHECK(more);
    CHECK_EQ(e[20].offset, 24 * (GIB / 2)); /* past 8 GiB: base-256 */
    CHECK_EQ(tar_parse_ext(h + 1024, e, &n, &more), 0);
    CHECK_EQ(n, 5);
    CHECK(!more);
    free(h);
}

/* ---- gzip ---- */

struct mem {
    uint8_t *buf;
    size_t len, cap, pos;
};

static int mem_read(void *opaque, uint64_t off, void *buf, size_t len)
{
    const struct mem *m = opaque;
    memcpy(buf, m->buf + off, len);
    return 0;
}

static int mem_write(void *opaque, const void *buf, size_t len)
{
    struct mem *m = opaque;
    if (m->len + len > m->cap) {
        m->cap = (m->len + len) * 2;
        m->buf = realloc(m->buf, m->cap);
    }
    memcpy(m->buf + m->len, buf, len);
    m->len += len;
    return 0;
}

struct both {
    struct mem *in, *out;
};
static int both_read(void *o, uint64_t off, void *buf, size_t len)
{
    return mem_read(((struct both *)o)->in, off, buf, len);
}
static int both_write(void *o, const void *buf, size_t len)
{
    return mem_write(((struct both *)o)->out, buf, len);
}

static struct mem gzip_mem(const uint8_t *data, size_t len, unsigned threads, size_t chunk,
                           unsigned reads)
{
    struct mem in = {.buf = (uint8_t *)data, .len = len}, out = {0};
    struct both b = {&in, &out};
    struct gzpar_opts o = {.length = len,
                           .threads = threads,
                           .level = 6,
                           .mtime = 1700000000,
                           .chunk = chunk,
                           .reads = reads,
                           .read = both_read,
                           .write = both_write,
                           .opaque = &b};
    CHECK_EQ(gzpar_compress(&o), 0);
    return out;
}

static uint8_t *test_data(size_t len)
{
    uint8_t *d = malloc(len);
    uint32_t x = 12345;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245 + 12345;
        /* text-like runs with noise: deflate has matches to find */
        d[i] = (i / 4096) % 3 == 0 ? (uint8_t)(x >> 24) : (uint8_t)("disk.raw "[i % 9]);
    }
    return d;
}

static void test_gzip_roundtrip(void)
{
    size_t len = 3 * (1u << 20) + 777;
    uint8_t *d = test_data(len);
    struct mem a = gzip_mem(d, len, 1, 256 << 10, 0);
    struct mem b = gzip_mem(d, len, 4, 256 << 10, 1); /* 4 threads, 1 read at a time */
    uint8_t *back = malloc(len + 1);
    z_stream z = {0};

    CHECK_EQ(a.len, b.len);
    CHECK(a.len == b.len && memcmp(a.buf, b.buf, a.len) == 0);
    CHECK(a.buf[0] == 0x1f && a.buf[1] == 0x8b && a.buf[3] == 0);
    CHECK_EQ(a.buf[4] | a.buf[5] << 8 | a.buf[6] << 16 | (uint32_t)a.buf[7] << 24, 1700000000);
    /* zlib's inflate checks the CRC-32 and ISIZE of the trailer. */
    CHECK_EQ(inflateInit2(&z, 16 + 15), Z_OK);
    z.next_in = a.buf;
    z.avail_in = (uInt)a.len;
    z.next_out = back;
    z.avail_out = (uInt)len + 1;
    CHECK_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
    CHECK_EQ(z.total_out, len);
    CHECK_EQ(z.avail_in, 0);
    CHECK(memcmp(back, d, len) == 0);
    inflateEnd(&z);
    /* Primed chunks compress as well as one stream, within a few %. */
    uLongf serial = compressBound(len);
    uint8_t *s = malloc(serial);
    compress2(s, &serial, d, len, 6);
    CHECK(a.len < serial + serial / 50);
    free(s);
    free(back);
    free(a.buf);
    free(b.buf);
    free(d);
}

/* ---- lint ---- */

struct verdict {
    unsigned n;
    char last[1024];
};

static void on_violation(void *opaque, const char *problem, const char *fix)
{
    struct verdict *v = opaque;
    v->n++;
    snprintf(v->last, sizeof v->last, "%s; fix: %s", problem, fix);
}

static ssize_t reader(void *opaque, void *buf, size_t len)
{
    struct mem *m = opaque;
    size_t n = m->len - m->pos < len ? m->len - m->pos : len;
    memcpy(buf, m->buf + m->pos, n);
    m->pos += n;
    return (ssize_t)n;
}

/* A tar of one member (map may be NULL: not sparse, size real_size),
 * data bytes of 'x'. */
static struct mem make_tar(const char *name, uint64_t real_size, const struct tar_sparse *map,
                           size_t n_map)
{
    struct tar_member m = {
        .name = name, .mode = 0644, .mtime = 1, .real_size = real_size, .map = map, .n_map = n_map};
    uint64_t hl = tar_member_header_size(&m), stored = tar_member_stored_size(&m);
    uint64_t total = hl + stored + tar_trailer_size(hl + stored);
    struct mem t = {.buf = calloc(1, total), .len = total, .cap = total};
    tar_member_write_header(&m, t.buf);
    memset(t.buf + hl, 'x', stored);
    return t;
}

static void rechecksum(uint8_t *h)
{
    unsigned sum = 0;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < 512; i++) {
        sum += h[i];
    }
    snprintf((char *)h + 148, 8, "%06o", sum);
}

static struct verdict lint_tar(struct mem t, size_t cut)
{
    struct mem gz = gzip_mem(t.buf, t.len, 2, 4096, 0);
    struct verdict v = {0};
    gz.len -= cut;
    int r = gce_lint_gzip(reader, &gz, on_violation, &v);
    CHECK_EQ(r, v.n);
    free(gz.buf);
    return v;
}

static struct verdict lint_one(const char *name, uint64_t real_size, const struct tar_sparse *map,
                               size_t n_map)
{
    struct mem t = make_tar(name, real_size, map, n_map);
    struct verdict v = lint_tar(t, 0);
    free(t.buf);
    return v;
}

static void test_lint(void)
{
    struct tar_sparse good[] = {{0, 4096}, {GIB / 2, 8192}, {GIB, 0}};
    struct tar_sparse unordered[] = {{GIB / 2, 4096}, {0, 8192}, {GIB, 0}};
    struct tar_sparse past[] = {{0, 4096}, {GIB - 512, 8192}};
    struct verdict v;

    v = lint_one("disk.raw", GIB, good, 3);
    CHECK_EQ(v.n, 0);
    v = lint_one("disk.raw", 1 << 20, NULL, 0); /* not sparse: fine, but 1 MiB */
    CHECK_EQ(v.n, 1);
    CHECK(strstr(v.last, "not a whole number of GiB"));
    v = lint_one("./disk.raw", GIB, good, 3);
    CHECK_EQ(v.n, 1);
    CHECK(strstr(v.last, "not named disk.raw"));
    v = lint_one("disk.raw", GIB, unordered, 3);
    CHECK(strstr(v.last, "out of order"));
    v = lint_one("disk.raw", GIB, past, 2);
    CHECK(strstr(v.last, "past the file's size"));

    /* Truncated: the gzip stream cut short. */
    struct mem t = make_tar("disk.raw", GIB, good, 3);
    v = lint_tar(t, 20);
    CHECK(v.n >= 1 && strstr(v.last, "truncated"));
    /* Two members. */
    struct mem two = {.buf = malloc(2 * t.len), .len = 0};
    memcpy(two.buf, t.buf, 512 + 12288);
    memcpy(two.buf + 512 + 12288, t.buf, t.len);
    two.len = 512 + 12288 + t.len;
    v = lint_tar(two, 0);
    CHECK_EQ(v.n, 1);
    CHECK(strstr(v.last, "2 members"));
    /* POSIX ustar magic, checksum fixed: a tar, not the old GNU one. */
    memcpy(t.buf + 257,
           "ustar\0"
           "00",
           8);
    rechecksum(t.buf);
    v = lint_tar(t, 0);
    CHECK_EQ(v.n, 1);
    CHECK(strstr(v.last, "POSIX ustar/pax format"));
    /* A damaged header is not tar. */
    t.buf[0] ^= 1;
    v = lint_tar(t, 0);
    CHECK_EQ(v.n, 1);
    CHECK(strstr(v.last, "not a tar archive"));
    free(two.buf);
    free(t.buf);

    /* Not gzip at all. */
    struct mem plain = {.buf = (uint8_t *)"BZh91AY&SY", .len = 10};
    struct verdict w = {0};
    CHECK_EQ(gce_lint_gzip(reader, &plain, on_violation, &w), 1);
    CHECK(strstr(w.last, "not gzip"));
}

/* A flood of valid members, each disk.raw of a GiB with no data: the
 * count is capped, and going past the cap is a violation, not a pass. */
static void test_member_cap(void)
{
    struct tar_sparse map[] = {{GIB, 0}};
    struct tar_member m = {
        .name = "disk.raw", .mode = 0644, .real_size = GIB, .map = map, .n_map = 1};
    uint8_t h[512];
    struct verdict v = {0};
    struct gce_lint l;

    tar_member_write_header(&m, h);
    gce_lint_init(&l, on_violation, &v);
    for (unsigned i = 0; i < GCE_MAX_MEMBERS + 5; i++) {
        gce_lint_feed(&l, h, sizeof h);
    }
    CHECK(gce_lint_finish(&l) >= 1);
    CHECK(strstr(v.last, "more than"));
}

int main(void)
{
    RUN(test_numbers);
    RUN(test_header_as_gnu_tar);
    RUN(test_extension_blocks);
    RUN(test_gzip_roundtrip);
    RUN(test_lint);
    RUN(test_member_cap);
    return check_exit();
}
