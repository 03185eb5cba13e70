/* tests/unit/rec-driver.c: see rec-driver.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/block.h"
#include "block/driver.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "rec-driver.h"

struct rec_call rec_calls[REC_MAX_CALLS];
unsigned rec_ncalls;
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *rec_last_data;
const uint8_t *rec_preload;
uint64_t rec_preload_len;
uint64_t rec_fail_writes_from;

struct rec_state {
    uint8_t *data;
    uint64_t size;
    unsigned flush_delay_us;
    int has_zero;
    int fua_eopnotsupp;
};

static void rec_log(enum rec_op op, uint64_t off, uint64_t len, unsigned flags)
{
    pthread_mutex_lock(&rec_lock);
    if (rec_ncalls < REC_MAX_CALLS) {
        rec_calls[rec_ncalls++] = (struct rec_call){op, off, len, flags};
    }
    pthread_mutex_unlock(&rec_lock);
}

void rec_reset(void)
{
    pthread_mutex_lock(&rec_lock);
    rec_ncalls = 0;
    pthread_mutex_unlock(&rec_lock);
}

unsigned rec_count(enum rec_op op)
{
    unsigned n = 0;

    pthread_mutex_lock(&rec_lock);
    for (unsigned i = 0; i < rec_ncalls; i++) {
        n += rec_calls[i].op == op;
    }
    pthread_mutex_unlock(&rec_lock);
    return n;
}

uint8_t *rec_data(void)
{
    return rec_last_data;
}

static unsigned long opt_value(const char *spec, const char *key, unsigned long def)
{
    size_t kl = strlen(key);

    for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            return strtoul(p + kl + 1, NULL, 0);
        }
    }
    return def;
}

static int rec_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    struct rec_state *s = n->opaque;
    const char *spec = opts->filename;

    s->size = opt_value(spec, "size", 1 << 20);
    s->flush_delay_us = (unsigned)opt_value(spec, "flushdelay", 0);
    s->has_zero = (int)opt_value(spec, "zero", 1);
    s->fua_eopnotsupp = (int)opt_value(spec, "fuaeopnotsupp", 0);
    s->size = MAX(s->size, rec_preload_len);
    s->data = calloc(1, s->size);
    if (!s->data) {
        return -ENOMEM;
    }
    if (rec_preload_len) {
        memcpy(s->data, rec_preload, rec_preload_len);
    }
    rec_last_data = s->data;
    n->request_alignment = (uint32_t)opt_value(spec, "align", 1);
    n->native_fua_max = opt_value(spec, "fuamax", 0);
    n->mem_alignment = 1;
    if (opt_value(spec, "fua", 1)) {
        n->supported_write_flags = BLK_REQ_FUA;
    }
    if (opt_value(spec, "discardfua", 0)) {
        n->supported_discard_flags = BLK_REQ_FUA;
    }
    if (opt_value(spec, "unmap", 1)) {
        n->supported_zero_flags |= BLK_REQ_MAY_UNMAP;
    }
    if (opt_value(spec, "fastzero", 1)) {
        n->supported_zero_flags |= BLK_REQ_NO_FALLBACK;
    }
    return 0;
}

static void rec_close(struct blk_node *n)
{
    struct rec_state *s = n->opaque;

    if (rec_last_data == s->data) {
        rec_last_data = NULL;
    }
    free(s->data);
}

static int rec_set_size(struct rec_state *s, uint64_t len)
{
    if (len > s->size) {
        uint8_t *d = realloc(s->data, len);

        if (!d) {
            return -ENOMEM;
        }
        memset(d + s->size, 0, len - s->size);
        if (rec_last_data == s->data) {
            rec_last_data = d;
        }
        s->data = d;
    }
    s->size = len;
    return 0;
}

/* A request reaching past the end: a format's child (growable) grows, as
 * a file does, unless its length cannot change (rec-fixed); else -EINVAL. */
static int rec_fit(struct blk_node *n, uint64_t end)
{
    struct rec_state *s = n->opaque;

    if (end <= s->size) {
        return 0;
    }
    return n->growable && n->drv->truncate ? rec_set_size(s, end) : -EINVAL;
}

static int rec_check_alignment(struct blk_node *n, uint64_t off, uint64_t len)
{
    /* The generic layer promised aligned requests: hold it to that. */
    return ((off | len) % n->request_alignment) ? -EINVAL : 0;
}

static int rec_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    struct rec_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt);

    rec_log(REC_READ, off, len, 0);
    if (rec_check_alignment(n, off, len) < 0 || off + len > s->size) {
        return -EINVAL;
    }
    iov_from_buf(iov, iovcnt, 0, s->data + off, len);
    return 0;
}

static int rec_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                       unsigned flags)
{
    struct rec_state *s = n->opaque;
    uint64_t len = iov_length(iov, iovcnt);

    rec_log(REC_WRITE, off, len, flags);
    if ((flags & BLK_REQ_FUA) && s->fua_eopnotsupp) {
        return -EOPNOTSUPP;
    }
    if (rec_check_alignment(n, off, len) < 0) {
        return -EINVAL;
    }
    if (rec_fail_writes_from && off + len > rec_fail_writes_from) {
        return -EIO;
    }
    int r = rec_fit(n, off + len);
    if (r < 0) {
        return r;
    }
    iov_to_buf(iov, iovcnt, 0, s->data + off, len);
    return 0;
}

static int rec_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    struct rec_state *s = n->opaque;

    rec_log(REC_ZERO, off, len, flags);
    if (!s->has_zero) {
        return -ENOTSUP;
    }
    int r = rec_fit(n, off + len);
    if (r < 0) {
        return r;
    }
    memset(s->data + off, 0, len);
    return 0;
}

static int rec_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    (void)n;
    rec_log(REC_DISCARD, off, len, flags);
    return 0;
}

/* Not a compression: the copy is enough to see what the layer passes. */
static int rec_compress(struct blk_node *n, const void *in, uint64_t len, void *out, size_t cap,
                        size_t *out_len)
{
    (void)n;
    if (len > cap) {
        return -ENOSPC;
    }
    memcpy(out, in, len);
    *out_len = len;
    return 0;
}

static int rec_pwrite_compressed(struct blk_node *n, uint64_t off, const void *data, size_t clen)
{
    (void)n;
    (void)data;
    rec_log(REC_COMPRESSED, off, clen, 0);
    return 0;
}

static int rec_flush(struct blk_node *n)
{
    struct rec_state *s = n->opaque;

    rec_log(REC_FLUSH, 0, 0, 0);
    if (s->flush_delay_us) {
        usleep(s->flush_delay_us);
    }
    return 0;
}

/* Shrinks keep the buffer, growing reallocates it zeroed. */
static int rec_truncate(struct blk_node *n, uint64_t len)
{
    rec_log(REC_TRUNCATE, 0, len, 0);
    return rec_set_size(n->opaque, len);
}

static int64_t rec_get_length(struct blk_node *n)
{
    struct rec_state *s = n->opaque;

    return (int64_t)s->size;
}

static const struct blk_driver rec_driver = {
    .name = "rec",
    .state_size = sizeof(struct rec_state),
    .open = rec_open,
    .close = rec_close,
    .preadv = rec_preadv,
    .pwritev = rec_pwritev,
    .pwrite_zeroes = rec_pwrite_zeroes,
    .discard = rec_discard,
    .compress = rec_compress,
    .pwrite_compressed = rec_pwrite_compressed,
    .flush = rec_flush,
    .get_length = rec_get_length,
    .truncate = rec_truncate,
};

BLK_REGISTER_DRIVER(rec_driver)

/* "rec-fixed": rec without truncate, a length that cannot change (an NBD
 * export's).  Writes past its end fail, as the server refuses them. */
static const struct blk_driver rec_fixed_driver = {
    .name = "rec-fixed",
    .state_size = sizeof(struct rec_state),
    .open = rec_open,
    .close = rec_close,
    .preadv = rec_preadv,
    .pwritev = rec_pwritev,
    .pwrite_zeroes = rec_pwrite_zeroes,
    .discard = rec_discard,
    .flush = rec_flush,
    .get_length = rec_get_length,
};

BLK_REGISTER_DRIVER(rec_fixed_driver)

int rec_make_image(const char *format, const char *options, uint64_t size, struct rec_bytes *out)
{
    char dir[] = "/tmp/diskimg-rec-image-XXXXXX";
    char path[sizeof dir + 16];
    char *summary = NULL;
    struct blk_create_opts o = {
        .format = format, .options = options, .size = size, .size_set = true};
    FILE *f = NULL;
    long len = -1;

    *out = (struct rec_bytes){0};
    if (!mkdtemp(dir)) {
        return -errno;
    }
    snprintf(path, sizeof path, "%s/img", dir);
    o.filename = path;
    int r = blk_create(&o, &summary);
    free(summary);
    if (r == 0 && (f = fopen(path, "rb")) && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (out->data = malloc((size_t)len))) {
        out->len = fread(out->data, 1, (size_t)len, f);
    }
    if (f) {
        fclose(f);
    }
    unlink(path);
    rmdir(dir);
    if (r == 0 && out->len != (uint64_t)len) {
        free(out->data);
        *out = (struct rec_bytes){0};
        r = -EIO;
    }
    return r;
}
