/* common/gce-lint.c: the GCE archive lint (see gce-lint.h).  Two stages:
 * gce_lint_gzip inflates, gce_lint_feed walks the tar one block at a time
 * through a small state machine.  Every step consumes input, so the walk
 * ends with the input. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "error.h"
#include "escape.h"
#include "gce-lint.h"

#define FIX_RECREATE "re-create it with `diskimg convert --target=gce`"

static void violation(struct gce_lint *l, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void violation(struct gce_lint *l, const char *fix, const char *fmt, ...)
{
    char problem[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    l->violations++;
    l->report(l->opaque, problem, fix);
}

void gce_lint_init(struct gce_lint *l, gce_lint_report_fn *report, void *opaque)
{
    memset(l, 0, sizeof *l);
    l->report = report;
    l->opaque = opaque;
}

static void stop(struct gce_lint *l)
{
    l->state = GCE_STOP;
}

static uint64_t blocks_of(uint64_t bytes)
{
    return bytes / TAR_BLOCK + (bytes % TAR_BLOCK != 0);
}

/* After the map (header and extension blocks): its totals against the
 * header's, then the data. */
static void map_done(struct gce_lint *l)
{
    if (l->map_bytes != l->size) {
        violation(l, FIX_RECREATE,
                  "the sparse map of %s holds %" PRIu64 " bytes but its size field says %" PRIu64,
                  GCE_DISK_NAME, l->map_bytes, l->size);
    }
    l->data_left = blocks_of(l->size);
    l->state = l->data_left ? GCE_DATA : GCE_HEADER;
}

static void check_entries(struct gce_lint *l, const struct tar_sparse *e, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        l->map_entries++;
        if (e[i].offset < l->map_end) {
            violation(l, FIX_RECREATE,
                      "sparse map entry %" PRIu64 " (offset %" PRIu64
                      ") is out of order: it starts before the previous one ends (%" PRIu64 ")",
                      l->map_entries, e[i].offset, l->map_end);
            stop(l);
            return;
        }
        if (e[i].numbytes > l->real_size || e[i].offset > l->real_size - e[i].numbytes) {
            violation(l, FIX_RECREATE,
                      "sparse map entry %" PRIu64 " (offset %" PRIu64 ", %" PRIu64
                      " bytes) runs past the file's size %" PRIu64,
                      l->map_entries, e[i].offset, e[i].numbytes, l->real_size);
            stop(l);
            return;
        }
        l->map_end = e[i].offset + e[i].numbytes;
        l->map_bytes += e[i].numbytes; /* <= real_size * entries: the cap keeps it finite */
        if (l->map_bytes > INT64_MAX) {
            violation(l, FIX_RECREATE, "the sparse map's byte count overflows");
            stop(l);
            return;
        }
    }
    if (l->map_entries > GCE_MAX_MAP_ENTRIES) {
        violation(l, FIX_RECREATE, "the sparse map has more than %u entries", GCE_MAX_MAP_ENTRIES);
        stop(l);
    }
}

static void check_name(struct gce_lint *l, const char *name)
{
    l->is_disk = strcmp(name, GCE_DISK_NAME) == 0;
    if (!l->is_disk) {
        char esc[256];
        str_escape_buf(esc, sizeof esc, name);
        violation(l,
                  "name the file disk.raw and archive it from its own directory "
                  "(tar -C DIR ... disk.raw)",
                  "member '%s' is not named %s", esc, GCE_DISK_NAME);
    }
}

static void check_format(struct gce_lint *l, const struct tar_header *h)
{
    static const char *names[] = {"v7", "old GNU", "POSIX ustar/pax", "unknown"};

    if (h->magic != TAR_MAGIC_OLDGNU && !l->seen_format_violation) {
        l->seen_format_violation = true;
        violation(l, "create it with tar --format=oldgnu -S, or diskimg convert --target=gce",
                  "the tar is in the %s format, not the old GNU format", names[h->magic]);
    }
}

static void check_disk(struct gce_lint *l, const struct tar_header *h)
{
    if (h->typeflag != '0' && h->typeflag != '\0' && h->typeflag != 'S') {
        char esc[8];
        char t[2] = {h->typeflag, 0};
        str_escape_buf(esc, sizeof esc, t);
        violation(l, "archive the disk image itself, a regular file",
                  "%s is not a regular file (typeflag '%s')", GCE_DISK_NAME, esc);
        return;
    }
    if (h->real_size == 0 || h->real_size % GCE_SIZE_ALIGN) {
        uint64_t up = (h->real_size / GCE_SIZE_ALIGN + 1) * GCE_SIZE_ALIGN;
        char fix[160];
        snprintf(fix, sizeof fix, "grow disk.raw to %" PRIu64 " bytes (truncate -s %" PRIu64 "G)",
                 up, up >> 30);
        violation(l, fix, "%s is %" PRIu64 " bytes, not a whole number of GiB", GCE_DISK_NAME,
                  h->real_size);
    }
}

/* A member's header (the checksum checked). */
static void on_member(struct gce_lint *l, const struct tar_header *h)
{
    l->members++;
    if (l->members > GCE_MAX_MEMBERS) {
        violation(l, "archive disk.raw alone",
                  "the archive holds more than %u members; GCE takes exactly one, disk.raw",
                  GCE_MAX_MEMBERS);
        stop(l);
        return;
    }
    check_format(l, h);
    check_name(l, l->have_long_name ? l->long_name : h->name);
    l->have_long_name = false;
    if (l->is_disk) {
        check_disk(l, h);
    }
    l->size = h->size;
    l->real_size = h->real_size;
    l->map_entries = l->map_bytes = l->map_end = 0;
    if (h->typeflag != 'S') {
        l->data_left = blocks_of(h->size);
        l->state = l->data_left ? GCE_DATA : GCE_HEADER;
        return;
    }
    check_entries(l, h->sparse, h->n_sparse);
    if (l->state == GCE_STOP) {
        return;
    }
    if (h->isextended) {
        l->state = GCE_EXT;
    } else {
        map_done(l);
    }
}

static void on_header(struct gce_lint *l, const uint8_t *b)
{
    struct tar_header h;
    const char *bad = NULL;

    if (tar_block_is_zero(b)) {
        l->zero_blocks++;
        if (l->zero_blocks == 2) {
            l->state = GCE_END;
        }
        return;
    }
    if (l->zero_blocks) {
        /* A lone zero block inside the archive: GNU tar stops there. */
        violation(l, FIX_RECREATE, "a zero block at offset %" PRIu64 " ends the archive early",
                  l->offset - 2 * TAR_BLOCK);
        stop(l);
        return;
    }
    if (!tar_checksum_ok(b)) {
        if (l->offset == TAR_BLOCK) {
            violation(l, "archive disk.raw with tar --format=oldgnu -S", "not a tar archive");
        } else {
            violation(l, FIX_RECREATE, "the tar header at offset %" PRIu64 " is corrupt",
                      l->offset - TAR_BLOCK);
        }
        stop(l);
        return;
    }
    if (tar_parse_header(b, &h, &bad) < 0) {
        violation(l, FIX_RECREATE, "the tar header at offset %" PRIu64 " has a bad %s field",
                  l->offset - TAR_BLOCK, bad);
        stop(l);
        return;
    }
    if (h.typeflag == 'L' || h.typeflag == 'K' || h.typeflag == 'x' || h.typeflag == 'g') {
        /* A long name or pax header: data for the next member's header. */
        check_format(l, &h);
        l->long_len = 0;
        l->have_long_name = h.typeflag == 'L';
        l->data_left = blocks_of(h.size);
        l->state = l->data_left ? GCE_LONGNAME : GCE_HEADER;
        return;
    }
    on_member(l, &h);
}

static void on_ext(struct gce_lint *l, const uint8_t *b)
{
    struct tar_sparse e[TAR_EXT_SPARSE];
    unsigned n;
    bool more;

    if (tar_parse_ext(b, e, &n, &more) < 0) {
        violation(l, FIX_RECREATE, "a sparse map block at offset %" PRIu64 " is corrupt",
                  l->offset - TAR_BLOCK);
        stop(l);
        return;
    }
    check_entries(l, e, n);
    if (l->state == GCE_STOP) {
        return;
    }
    if (!more) {
        map_done(l);
    }
}

static void on_longname(struct gce_lint *l, const uint8_t *b)
{
    if (l->have_long_name) {
        size_t room = GCE_LONG_NAME_MAX - l->long_len;
        size_t n = room < TAR_BLOCK ? room : TAR_BLOCK;
        memcpy(l->long_name + l->long_len, b, n);
        l->long_len += n;
        l->long_name[l->long_len] = '\0'; /* the name ends at its first NUL */
    }
    if (--l->data_left == 0) {
        l->state = GCE_HEADER;
    }
}

static void on_block(struct gce_lint *l, const uint8_t *b)
{
    l->offset += TAR_BLOCK;
    switch (l->state) {
    case GCE_HEADER:
        on_header(l, b);
        break;
    case GCE_EXT:
        on_ext(l, b);
        break;
    case GCE_DATA:
        if (--l->data_left == 0) {
            l->state = GCE_HEADER;
        }
        break;
    case GCE_LONGNAME:
        on_longname(l, b);
        break;
    case GCE_END:
    case GCE_STOP:
        break; /* what follows the end (record padding) is not read */
    }
}

void gce_lint_feed(struct gce_lint *l, const uint8_t *buf, size_t len)
{
    while (len && l->state != GCE_STOP && l->state != GCE_END) {
        if (l->fill == 0 && len >= TAR_BLOCK && l->state == GCE_DATA) {
            /* Data blocks are skipped without copying. */
            uint64_t n = len / TAR_BLOCK < l->data_left ? len / TAR_BLOCK : l->data_left;
            l->data_left -= n;
            l->offset += n * TAR_BLOCK;
            buf += n * TAR_BLOCK;
            len -= n * TAR_BLOCK;
            if (l->data_left == 0) {
                l->state = GCE_HEADER;
            }
            continue;
        }
        size_t n = TAR_BLOCK - l->fill < len ? TAR_BLOCK - l->fill : len;
        memcpy(l->block + l->fill, buf, n);
        l->fill += n;
        buf += n;
        len -= n;
        if (l->fill == TAR_BLOCK) {
            l->fill = 0;
            on_block(l, l->block);
        }
    }
}

unsigned gce_lint_finish(struct gce_lint *l)
{
    bool at_header = l->state == GCE_HEADER && l->fill == 0;

    if (l->state == GCE_STOP) {
        return l->violations;
    }
    if (l->state != GCE_END && !(at_header && l->zero_blocks == 1)) {
        if (l->offset == 0 && l->fill == 0) {
            violation(l, "archive disk.raw with tar --format=oldgnu -S", "the tar is empty");
            return l->violations;
        }
        violation(l, "copy or upload it again, or " FIX_RECREATE,
                  "truncated archive: the tar ends %s at offset %" PRIu64,
                  at_header ? "without its end-of-archive blocks" : "inside a member",
                  l->offset + l->fill);
    }
    if (l->members != 1) {
        violation(l, "archive disk.raw alone",
                  "the archive holds %u members; GCE takes exactly one, disk.raw", l->members);
    }
    return l->violations;
}

/* ---- The gzip stage ---- */

#define GZ_IN 65536
#define GZ_OUT 262144

struct gz_reader {
    gce_lint_read_fn *read;
    void *opaque;
    z_stream z;
    uint8_t in[GZ_IN];
    uint8_t out[GZ_OUT];
    uint64_t in_total; /* compressed bytes read */
    bool eof;
};

static int refill(struct gz_reader *g)
{
    ssize_t n = g->read(g->opaque, g->in, sizeof g->in);

    if (n < 0) {
        return (int)n;
    }
    g->z.next_in = g->in;
    g->z.avail_in = (uInt)n;
    g->in_total += (uint64_t)n;
    g->eof = n == 0;
    return 0;
}

static bool gzip_magic(const uint8_t *p, size_t n)
{
    return n >= 2 && p[0] == 0x1f && p[1] == 0x8b;
}

/* After a member's end: another member (gzip and tar read on), or bytes
 * that are not gzip (reported, as gzip -t warns of them).  Returns 1 to
 * go on inflating, 0 at the end, -errno on a read error. */
static int after_member(struct gce_lint *l, struct gz_reader *g)
{
    int r;

    while (g->z.avail_in == 0 && !g->eof) {
        if ((r = refill(g)) < 0) {
            return r;
        }
    }
    if (g->z.avail_in == 0) {
        return 0;
    }
    if (g->z.avail_in >= 2 && gzip_magic(g->z.next_in, g->z.avail_in)) {
        return inflateReset(&g->z) == Z_OK ? 1 : -EIO;
    }
    violation(l, "remove what follows the gzip stream",
              "the file goes on after the end of its gzip stream (trailing garbage)");
    return 0;
}

/* Inflate until the input ends, feeding the tar lint.  Returns 0 or
 * -errno (a read error). */
static int inflate_all(struct gce_lint *l, struct gz_reader *g)
{
    for (;;) {
        if (g->z.avail_in == 0 && !g->eof) {
            int r = refill(g);
            if (r < 0) {
                return r;
            }
        }
        g->z.next_out = g->out;
        g->z.avail_out = sizeof g->out;
        int zr = inflate(&g->z, Z_NO_FLUSH);
        gce_lint_feed(l, g->out, sizeof g->out - g->z.avail_out);
        if (zr == Z_STREAM_END) {
            int r = after_member(l, g);
            if (r <= 0) {
                return r;
            }
            continue;
        }
        if (zr == Z_BUF_ERROR && g->eof && g->z.avail_in == 0) {
            violation(l, "copy or upload it again, or " FIX_RECREATE,
                      "truncated archive: the gzip stream ends early");
            l->state = l->state == GCE_END ? GCE_END : GCE_STOP;
            return 0;
        }
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            violation(l, FIX_RECREATE, "the gzip stream is corrupt: %s",
                      g->z.msg ? g->z.msg : "inflate failed");
            stop(l);
            return 0;
        }
        if (l->state == GCE_STOP) {
            return 0; /* nothing more to learn */
        }
    }
}

int gce_lint_gzip(gce_lint_read_fn *read, void *read_opaque, gce_lint_report_fn *report,
                  void *opaque)
{
    static struct gz_reader zero;
    struct gce_lint l;
    struct gz_reader *g = malloc(sizeof *g);
    int r;

    if (!g) {
        return err_set(ENOMEM, "gzip reader");
    }
    *g = zero;
    g->read = read;
    g->opaque = read_opaque;
    gce_lint_init(&l, report, opaque);
    r = refill(g);
    if (r < 0) {
        free(g);
        return r;
    }
    if (!gzip_magic(g->in, g->z.avail_in)) {
        violation(&l, "compress the tar with gzip (tar -z), not another compressor",
                  "not gzip-compressed (no gzip magic)");
        free(g);
        return (int)l.violations;
    }
    if (inflateInit2(&g->z, 16 + 15) != Z_OK) {
        free(g);
        return err_setx(ENOMEM, "gzip: cannot set up inflate");
    }
    r = inflate_all(&l, g);
    inflateEnd(&g->z);
    free(g);
    if (r < 0) {
        return r;
    }
    return (int)gce_lint_finish(&l);
}
