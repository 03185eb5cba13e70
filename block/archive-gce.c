/* block/archive-gce.c: the GCE archive writer (see archive-gce.h): the
 * sparse map from block status, the tar stream laid out over it, and the
 * parallel gzip that reads that stream.  The tar and gzip bytes are
 * common/tar-gnu.c's and common/gzip-par.c's; this file only says where
 * each byte of the stream comes from. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "archive-gce.h"
#include "common/cleanup.h"
#include "common/cpus.h"
#include "common/error.h"
#include "common/gzip-par.h"
#include "common/tar-gnu.h"
#include "common/util.h"

#define MERGE_START (64u << 10) /* the first hole size stored as data when the map is too long */

/* The tar stream: header, the data entries back to back, the trailer. */
struct gce_stream {
    struct blk_image *src;
    uint64_t vsize; /* the source's size: beyond it disk.raw reads as zeroes */
    struct tar_sparse *map;
    size_t n_map;      /* data entries (numbytes > 0) */
    size_t map_cap;    /* entries allocated */
    uint64_t min_hole; /* holes shorter than this are stored as data */
    bool end_entry;    /* the map ends with (disk size, 0): disk.raw ends in a hole */
    uint64_t *pos;     /* stream offset of each data entry */
    uint8_t *header;
    uint64_t header_len;
    uint64_t data_end; /* stream offset after the last data entry */
    uint64_t length;   /* the whole tar */
    int fd;
};

uint64_t blk_gce_disk_size(uint64_t virtual_size)
{
    return (virtual_size + BLK_GCE_ALIGN - 1) / BLK_GCE_ALIGN * BLK_GCE_ALIGN;
}

static int map_append(struct gce_stream *s, uint64_t start, uint64_t end)
{
    struct tar_sparse *last = s->n_map ? &s->map[s->n_map - 1] : NULL;

    if (last && start <= last->offset + last->numbytes + s->min_hole) {
        last->numbytes = MAX(last->offset + last->numbytes, end) - last->offset;
        return 0;
    }
    if (s->n_map == s->map_cap) {
        size_t ncap = s->map_cap ? s->map_cap * 2 : 256;
        struct tar_sparse *m = realloc(s->map, ncap * sizeof *m);
        if (!m) {
            return err_set(ENOMEM, "gce: sparse map of %zu entries", ncap);
        }
        s->map = m;
        s->map_cap = ncap;
    }
    s->map[s->n_map++] = (struct tar_sparse){start, end - start};
    return 0;
}

/* The map is too long: store holes shorter than twice the last limit as
 * data, until it is half the cap.  The limit only grows, so the result
 * depends on the map alone. */
static void map_shorten(struct gce_stream *s)
{
    while (s->n_map >= BLK_GCE_MAX_MAP / 2) {
        size_t out = 0;
        s->min_hole = s->min_hole ? s->min_hole * 2 : MERGE_START;
        for (size_t i = 0; i < s->n_map; i++) {
            struct tar_sparse *prev = out ? &s->map[out - 1] : NULL;
            if (prev && s->map[i].offset - (prev->offset + prev->numbytes) <= s->min_hole) {
                prev->numbytes = s->map[i].offset + s->map[i].numbytes - prev->offset;
            } else {
                s->map[out++] = s->map[i];
            }
        }
        s->n_map = out;
    }
}

/* The sparse map: every range block status does not call zero, widened
 * to whole 512-byte blocks (so each entry's data fills whole tar blocks,
 * as GNU tar's readers consume it). */
static int build_map(struct gce_stream *s)
{
    uint64_t off = 0;
    int r;

    while (off < s->vsize) {
        struct blk_extent ext;
        r = blk_image_block_status(s->src, off, s->vsize - off, &ext);
        if (r < 0) {
            return r;
        }
        if (ext.length == 0 || ext.length > s->vsize - off) {
            return err_setx(EIO, "gce: block status at %" PRIu64 " returned a bad extent", off);
        }
        if (!(ext.flags & BLK_EXT_ZERO)) {
            r = map_append(s, ROUND_DOWN(off, TAR_BLOCK),
                           ROUND_UP(off + ext.length, (uint64_t)TAR_BLOCK));
            if (r < 0) {
                return r;
            }
        }
        off += ext.length;
        if (s->n_map >= BLK_GCE_MAX_MAP) {
            map_shorten(s);
        }
    }
    return 0;
}

/* The tar header (with the map and its (size, 0) end) and the data
 * entries' places in the stream. */
static int lay_out(struct gce_stream *s, uint64_t disk_size, uint64_t mtime)
{
    struct tar_member m = {.name = "disk.raw",
                           .mode = 0644,
                           .mtime = mtime,
                           .real_size = disk_size,
                           .map = s->map,
                           .n_map = s->n_map};
    const struct tar_sparse *last = s->n_map ? &s->map[s->n_map - 1] : NULL;

    s->end_entry = !last || last->offset + last->numbytes < disk_size;
    s->pos = malloc((s->n_map + 1) * sizeof *s->pos);
    if (!s->pos) {
        return err_set(ENOMEM, "gce: sparse map");
    }
    if (s->end_entry) {
        s->min_hole = 0; /* never merged: it starts past the last entry's end */
        int r = map_append(s, disk_size, disk_size);
        if (r < 0) {
            return r;
        }
    }
    m.map = s->map;
    m.n_map = s->n_map; /* with the end entry */
    s->header_len = tar_member_header_size(&m);
    s->header = malloc(s->header_len);
    if (!s->header) {
        return err_set(ENOMEM, "gce: tar header of %" PRIu64 " bytes", s->header_len);
    }
    tar_member_write_header(&m, s->header);
    if (s->end_entry) {
        s->n_map--; /* the end entry has no data */
    }
    uint64_t p = s->header_len;
    for (size_t i = 0; i < s->n_map; i++) {
        s->pos[i] = p;
        p += s->map[i].numbytes; /* whole blocks: entries are block-aligned */
    }
    s->data_end = p;
    s->length = p + tar_trailer_size(p);
    return 0;
}

/* The data entry holding stream offset off (header_len <= off < data_end). */
static size_t find_entry(const struct gce_stream *s, uint64_t off)
{
    size_t lo = 0, hi = s->n_map;

    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->pos[mid] <= off) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* disk.raw's bytes [off, off + len): the source's, zeroes past its end. */
static int read_disk(struct gce_stream *s, uint64_t off, uint8_t *buf, uint64_t len)
{
    uint64_t n = off < s->vsize ? MIN(len, s->vsize - off) : 0;

    memset(buf + n, 0, len - n);
    return n ? blk_image_pread(s->src, off, buf, n) : 0;
}

static int stream_read(void *opaque, uint64_t off, void *out, size_t len)
{
    struct gce_stream *s = opaque;
    uint8_t *buf = out;

    while (len) {
        uint64_t n;
        int r = 0;
        if (off < s->header_len) {
            n = MIN(len, s->header_len - off);
            memcpy(buf, s->header + off, n);
        } else if (off < s->data_end) {
            size_t i = find_entry(s, off);
            uint64_t in = off - s->pos[i];
            n = MIN(len, s->map[i].numbytes - in);
            r = read_disk(s, s->map[i].offset + in, buf, n);
        } else {
            n = len;
            memset(buf, 0, n); /* end-of-archive blocks and record padding */
        }
        if (r < 0) {
            return r;
        }
        off += n;
        buf += n;
        len -= n;
    }
    return 0;
}

static int stream_write(void *opaque, const void *buf, size_t len)
{
    struct gce_stream *s = opaque;
    const uint8_t *p = buf;

    while (len) {
        ssize_t n = write(s->fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return err_set(errno, "gce: writing the archive");
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int blk_gce_write(struct blk_image *src, int fd, const struct blk_gce_opts *o,
                  struct blk_gce_result *res)
{
    struct gce_stream s = {.src = src, .vsize = blk_image_size(src), .fd = fd};
    uint64_t disk_size = blk_gce_disk_size(s.vsize);
    int r;

    if (s.vsize == 0) {
        return err_setx(EINVAL, "gce: the source is empty; GCE needs a disk of at least 1 GiB");
    }
    r = build_map(&s);
    if (r == 0) {
        r = lay_out(&s, disk_size, o->mtime);
    }
    if (r == 0) {
        res->disk_size = disk_size;
        res->stored = s.data_end - s.header_len;
        res->map_entries = s.n_map + s.end_entry;
        res->tar_size = s.length;
        struct gzpar_opts g = {
            .length = s.length,
            .threads = MAX(o->workers, cpus_usable()), /* every core compresses */
            .reads = o->workers,                       /* -m bounds the I/O */
            .level = o->level ? o->level : GZPAR_DEFAULT_LEVEL,
            .mtime = o->mtime > UINT32_MAX ? 0 : (uint32_t)o->mtime, /* 0: none, as gzip */
            .read = stream_read,
            .write = stream_write,
            .opaque = &s,
            .progress = o->progress,
            .progress_opaque = o->progress_opaque,
            .cancel = o->cancel,
        };
        r = gzpar_compress(&g);
    }
    free(s.map);
    free(s.pos);
    free(s.header);
    return r;
}

struct lint_file {
    int fd;
    const char *path;
};

static ssize_t lint_read(void *opaque, void *buf, size_t len)
{
    struct lint_file *f = opaque;

    for (;;) {
        ssize_t n = read(f->fd, buf, len);
        if (n >= 0) {
            return n;
        }
        if (errno != EINTR) {
            return err_set(errno, "%s: read", f->path);
        }
    }
}

int blk_gce_lint(const char *path, gce_lint_report_fn *report, void *opaque)
{
    struct lint_file f = {.fd = strcmp(path, "-") == 0 ? 0 : -1, .path = path};
    int r;

    if (f.fd < 0) {
        f.fd = open(path, O_RDONLY | O_CLOEXEC);
        if (f.fd < 0) {
            return err_set(errno, "%s", path);
        }
    }
    r = gce_lint_gzip(lint_read, &f, report, opaque);
    if (f.fd != 0) {
        close(f.fd);
    }
    return r;
}
