/* common/gzip-par.c: parallel gzip by independent chunks (see gzip-par.h).
 *
 * Workers claim chunks in order.  Each reads its chunk together with the
 * GZPAR_DICT bytes before it (read again rather than handed over, so no
 * worker waits for another to read), deflates it as raw deflate primed
 * with those bytes, computes its CRC-32, then waits for its turn and
 * writes.  So there are as many reads in flight as workers, and as many
 * chunks compressing as cores take. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "error.h"
#include "gzip-par.h"

struct gzpar {
    const struct gzpar_opts *o;
    size_t chunk;
    uint64_t n_chunks;
    pthread_mutex_t lock;
    pthread_cond_t turn;
    unsigned reading; /* under lock: reads in flight, at most max_reads */
    unsigned max_reads;
    uint64_t next_claim; /* under lock */
    uint64_t next_write; /* under lock */
    uint32_t crc;        /* under lock: of the chunks written */
    int err;             /* under lock: the first error */
    char msg[512];
};

struct gzpar_worker {
    struct gzpar *g;
    z_stream z;
    uint8_t *in;  /* GZPAR_DICT + chunk bytes */
    uint8_t *out; /* the chunk's deflate bound */
    size_t out_cap;
};

void gzpar_header(uint8_t out[10], uint32_t mtime, int level)
{
    out[0] = 0x1f;
    out[1] = 0x8b;
    out[2] = 8; /* deflate */
    out[3] = 0; /* no name, no comment, no extra field */
    out[4] = (uint8_t)mtime;
    out[5] = (uint8_t)(mtime >> 8);
    out[6] = (uint8_t)(mtime >> 16);
    out[7] = (uint8_t)(mtime >> 24);
    out[8] = level == 9 ? 2 : level == 1 ? 4 : 0; /* XFL, as gzip sets it */
    out[9] = 3;                                   /* Unix */
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static bool gzpar_failed_locked(struct gzpar *g)
{
    return g->err || (g->o->cancel && *g->o->cancel);
}

static void gzpar_fail(struct gzpar *g, int r)
{
    pthread_mutex_lock(&g->lock);
    if (!g->err) {
        g->err = r;
        snprintf(g->msg, sizeof g->msg, "%s", err_msg_or(r));
    }
    pthread_cond_broadcast(&g->turn);
    pthread_mutex_unlock(&g->lock);
}

/* Deflate in[0, len) of the worker's buffer after 'dict' bytes of
 * dictionary; *out_len gets the compressed size. */
static int deflate_chunk(struct gzpar_worker *w, size_t dict, size_t len, bool last,
                         size_t *out_len)
{
    z_stream *z = &w->z;

    if (deflateReset(z) != Z_OK || (dict && deflateSetDictionary(z, w->in, (uInt)dict) != Z_OK)) {
        return err_setx(EIO, "gzip: deflate could not start a chunk");
    }
    z->next_in = w->in + dict;
    z->avail_in = (uInt)len;
    z->next_out = w->out;
    z->avail_out = (uInt)w->out_cap;
    int zr = deflate(z, last ? Z_FINISH : Z_SYNC_FLUSH);
    if ((last && zr != Z_STREAM_END) || (!last && zr != Z_OK) || z->avail_in) {
        return err_setx(EIO, "gzip: deflate failed (%d)", zr);
    }
    *out_len = w->out_cap - z->avail_out;
    return 0;
}

static void wait_turn(struct gzpar *g, uint64_t k)
{
    pthread_mutex_lock(&g->lock);
    while (g->next_write != k && !gzpar_failed_locked(g)) {
        pthread_cond_wait(&g->turn, &g->lock);
    }
    pthread_mutex_unlock(&g->lock);
}

/* Write chunk k's output and fold its CRC into the member's. */
static int write_in_order(struct gzpar *g, uint64_t k, const uint8_t *out, size_t out_len,
                          uint32_t crc, size_t len)
{
    int r = 0;

    wait_turn(g, k);
    pthread_mutex_lock(&g->lock);
    bool stop = gzpar_failed_locked(g);
    pthread_mutex_unlock(&g->lock);
    if (stop) {
        return -EINTR;
    }
    /* Only the worker whose turn it is gets here: writes are in order. */
    r = g->o->write(g->o->opaque, out, out_len);
    pthread_mutex_lock(&g->lock);
    g->crc = (uint32_t)crc32_combine(g->crc, crc, (z_off_t)len);
    g->next_write = k + 1;
    pthread_cond_broadcast(&g->turn);
    pthread_mutex_unlock(&g->lock);
    return r;
}

/* Read through o->read with at most max_reads reads in flight (-m
 * bounds the I/O; the compressing threads follow the cores). */
static int bounded_read(struct gzpar *g, uint64_t off, void *buf, size_t len)
{
    pthread_mutex_lock(&g->lock);
    while (g->reading >= g->max_reads) {
        pthread_cond_wait(&g->turn, &g->lock);
    }
    g->reading++;
    pthread_mutex_unlock(&g->lock);
    int r = g->o->read(g->o->opaque, off, buf, len);
    pthread_mutex_lock(&g->lock);
    g->reading--;
    pthread_cond_broadcast(&g->turn);
    pthread_mutex_unlock(&g->lock);
    return r;
}

static int do_chunk(struct gzpar_worker *w, uint64_t k)
{
    struct gzpar *g = w->g;
    uint64_t start = k * g->chunk;
    size_t len = (size_t)(g->o->length - start < g->chunk ? g->o->length - start : g->chunk);
    size_t dict = start < GZPAR_DICT ? (size_t)start : GZPAR_DICT;
    size_t out_len = 0;
    int r;

    r = bounded_read(g, start - dict, w->in, dict + len);
    if (r < 0) {
        return r;
    }
    r = deflate_chunk(w, dict, len, k + 1 == g->n_chunks, &out_len);
    if (r < 0) {
        return r;
    }
    uint32_t crc = (uint32_t)crc32(0, w->in + dict, (uInt)len);
    r = write_in_order(g, k, w->out, out_len, crc, len);
    if (r == 0 && g->o->progress) {
        g->o->progress(g->o->progress_opaque, start + len, g->o->length);
    }
    return r;
}

static void *gzpar_worker_main(void *arg)
{
    struct gzpar_worker *w = arg;
    struct gzpar *g = w->g;

    for (;;) {
        pthread_mutex_lock(&g->lock);
        bool stop = gzpar_failed_locked(g) || g->next_claim == g->n_chunks;
        uint64_t k = g->next_claim;
        if (!stop) {
            g->next_claim++;
        }
        pthread_mutex_unlock(&g->lock);
        if (stop) {
            return NULL;
        }
        int r = do_chunk(w, k);
        if (r < 0) {
            gzpar_fail(g, r);
            return NULL;
        }
    }
}

static int worker_init(struct gzpar_worker *w, struct gzpar *g)
{
    memset(w, 0, sizeof *w);
    w->g = g;
    if (deflateInit2(&w->z, g->o->level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        return err_setx(ENOMEM, "gzip: cannot set up deflate at level %d", g->o->level);
    }
    /* Room for the chunk at worst, plus the sync flush's empty block. */
    w->out_cap = deflateBound(&w->z, (uLong)g->chunk) + 16;
    /* Page-aligned: the read callback may read straight into it (O_DIRECT). */
    void *in = NULL;
    if (posix_memalign(&in, 4096, GZPAR_DICT + g->chunk) != 0) {
        in = NULL;
    }
    w->in = in;
    w->out = malloc(w->out_cap);
    if (!w->in || !w->out) {
        return err_set(ENOMEM, "gzip: buffers for a %zu-byte chunk", g->chunk);
    }
    return 0;
}

static void worker_free(struct gzpar_worker *w)
{
    deflateEnd(&w->z);
    free(w->in);
    free(w->out);
}

static int run_workers(struct gzpar *g, unsigned n)
{
    struct gzpar_worker *w = calloc(n, sizeof *w);
    pthread_t *tid = calloc(n, sizeof *tid);
    unsigned started = 0, ready = 0;
    int r = 0;

    if (!w || !tid) {
        r = err_set(ENOMEM, "gzip: %u workers", n);
    }
    for (; r == 0 && ready < n; ready++) {
        r = worker_init(&w[ready], g);
        if (r < 0) {
            worker_free(&w[ready]);
        }
    }
    for (; r == 0 && started < n; started++) {
        if ((r = pthread_create(&tid[started], NULL, gzpar_worker_main, &w[started])) != 0) {
            r = err_set(r, "gzip: starting a worker");
            gzpar_fail(g, r);
        }
    }
    for (unsigned i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
    }
    for (unsigned i = 0; i < ready && w; i++) {
        worker_free(&w[i]);
    }
    free(w);
    free(tid);
    return r;
}

int gzpar_compress(const struct gzpar_opts *o)
{
    struct gzpar g = {.o = o, .chunk = o->chunk ? o->chunk : GZPAR_CHUNK};
    uint8_t head[10], tail[8];
    int r;

    if (o->level < 1 || o->level > 9 || o->length == 0) {
        return err_setx(EINVAL, "gzip: level %d or length %llu out of range", o->level,
                        (unsigned long long)o->length);
    }
    g.n_chunks = (o->length + g.chunk - 1) / g.chunk;
    g.crc = (uint32_t)crc32(0, NULL, 0);
    unsigned n = o->threads < 1                   ? 1
                 : o->threads > GZPAR_MAX_THREADS ? GZPAR_MAX_THREADS
                                                  : o->threads;
    if (n > g.n_chunks) {
        n = (unsigned)g.n_chunks;
    }
    g.max_reads = o->reads ? o->reads : n;
    pthread_mutex_init(&g.lock, NULL);
    pthread_cond_init(&g.turn, NULL);
    gzpar_header(head, o->mtime, o->level);
    r = o->write(o->opaque, head, sizeof head);
    if (r == 0) {
        r = run_workers(&g, n);
    }
    if (r == 0 && g.err) {
        r = err_setx(-g.err, "%s", g.msg); /* the worker's message, in this thread */
    }
    if (r == 0 && o->cancel && *o->cancel) {
        r = -EINTR;
    }
    if (r == 0) {
        put_le32(tail, g.crc);
        put_le32(tail + 4, (uint32_t)o->length); /* ISIZE: the length mod 2^32 */
        r = o->write(o->opaque, tail, sizeof tail);
    }
    pthread_cond_destroy(&g.turn);
    pthread_mutex_destroy(&g.lock);
    return r;
}
