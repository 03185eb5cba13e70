/* common/gzip-par.h: one gzip member (RFC 1952) compressed on every core,
 * by pigz's method: the input is cut into fixed-size chunks, each chunk
 * is deflated on its own in a worker thread with the 32 KiB of input
 * before it as the preset dictionary and ends with a sync flush (the last
 * one with the final block), and the pieces are written in order as one
 * deflate stream; the CRC-32 of each chunk is combined (crc32_combine)
 * into the member's.
 *
 * The output depends only on the input, the level and the chunk size,
 * never on the thread count or the timing: that is what makes an archive
 * reproducible.  The chunk size is fixed (GZPAR_CHUNK); compression costs
 * about 5 bytes per chunk for the flush marker, and priming with the
 * dictionary keeps the ratio that of one serial deflate.
 *
 * Nothing here knows where the bytes come from or go: callers supply a
 * read function (called concurrently, for any range) and a write function
 * (called in order, one call at a time).  Unit-tested in
 * tests/unit/test-gce-tar.c. */
#ifndef DISKIMG_COMMON_GZIP_PAR_H
#define DISKIMG_COMMON_GZIP_PAR_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define GZPAR_CHUNK (1u << 20)
#define GZPAR_DICT 32768u
#define GZPAR_MAX_THREADS 64
#define GZPAR_DEFAULT_LEVEL 6 /* gzip's and tar -z's */

struct gzpar_opts {
    uint64_t length;  /* uncompressed bytes */
    unsigned threads; /* workers: each reads its chunk, then compresses it */
    unsigned reads;   /* at most this many reads at once (0: threads) */
    int level;        /* 1..9 */
    uint32_t mtime;   /* the gzip header's MTIME (0: none) */
    size_t chunk;     /* 0: GZPAR_CHUNK; the output depends on it */
    /* Fill buf with len input bytes at off; called from the workers at
     * once.  Returns 0 or -errno with a message (err_set). */
    int (*read)(void *opaque, uint64_t off, void *buf, size_t len);
    /* Append len output bytes; called in order, never concurrently.
     * Returns 0 or -errno with a message. */
    int (*write)(void *opaque, const void *buf, size_t len);
    void *opaque;
    /* Called from the workers with the input bytes done so far. */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
    /* Set (by a signal handler) to stop with -EINTR. */
    volatile sig_atomic_t *cancel;
};

/* Compress o->length bytes into one gzip member.  Returns 0 or -errno,
 * with the failing call's message. */
int gzpar_compress(const struct gzpar_opts *o);

/* The 10-byte member header: no name, OS 3 (Unix), as gzip writes it. */
void gzpar_header(uint8_t out[10], uint32_t mtime, int level);

#endif
