/* common/gce-lint.h: does a .tar.gz hold what Google Compute Engine's
 * manual image import takes?  One gzip stream holding a tar of the old
 * GNU format (`tar --format=oldgnu`) with exactly one member, disk.raw,
 * whose size is a whole number of GiB, sparse or not (the delivery-formats
 * reference, section 8.3).
 *
 * The bytes are untrusted: the gzip stream is inflated as it is read, in
 * a fixed buffer, and the tar is parsed one 512-byte block at a time, so
 * memory stays bounded whatever the archive claims; the sparse map is
 * checked as it streams by (order and bounds need only the previous
 * entry) and its length is capped.  Each violation is reported once with
 * how to fix it.  Unit-tested in tests/unit/test-gce-tar.c, fuzzed by
 * tests/fuzz/fuzz-gce-tar.c. */
#ifndef DISKIMG_COMMON_GCE_LINT_H
#define DISKIMG_COMMON_GCE_LINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tar-gnu.h"

#define GCE_DISK_NAME "disk.raw"
#define GCE_SIZE_ALIGN (1ULL << 30)
/* Sparse map entries read at most: GNU tar writes one per data extent, so
 * a real disk of a few TB has far fewer; the cap bounds the work a hostile
 * map costs, not memory (entries are checked as they stream by). */
#define GCE_MAX_MAP_ENTRIES (1u << 22)
/* Members counted at most (the count is reported; past it, parsing stops). */
#define GCE_MAX_MEMBERS 10000u
/* A GNU long name ('L') is read up to this many bytes. */
#define GCE_LONG_NAME_MAX 1024u

/* Called once per violation: problem and fix are one clause each (no
 * newline); strings from the archive in them are escaped. */
typedef void gce_lint_report_fn(void *opaque, const char *problem, const char *fix);

enum gce_lint_state {
    GCE_HEADER, /* expecting a header block */
    GCE_EXT,    /* expecting a sparse extension block */
    GCE_DATA,   /* skipping a member's data blocks */
    GCE_LONGNAME,
    GCE_END,  /* after the end-of-archive zero block(s) */
    GCE_STOP, /* a fatal violation: nothing more is parsed */
};

struct gce_lint {
    gce_lint_report_fn *report;
    void *opaque;
    unsigned violations;
    enum gce_lint_state state;
    uint8_t block[TAR_BLOCK];
    size_t fill;          /* bytes in block */
    uint64_t offset;      /* tar bytes consumed, for messages */
    uint64_t data_left;   /* GCE_DATA / GCE_LONGNAME: blocks to skip */
    unsigned zero_blocks; /* consecutive zero blocks at a header position */
    unsigned members;
    bool seen_format_violation;
    /* The member being parsed. */
    bool is_disk;
    uint64_t size, real_size;
    uint64_t map_entries, map_bytes, map_end;
    char long_name[GCE_LONG_NAME_MAX + 1];
    size_t long_len;
    bool have_long_name;
};

void gce_lint_init(struct gce_lint *l, gce_lint_report_fn *report, void *opaque);
/* Feed decompressed tar bytes. */
void gce_lint_feed(struct gce_lint *l, const uint8_t *buf, size_t len);
/* The tar bytes have ended: report what is missing (a truncated archive,
 * no member).  Returns the violation count. */
unsigned gce_lint_finish(struct gce_lint *l);

/* Read len bytes into buf: the count (0 at end of file) or -errno with a
 * message. */
typedef ssize_t gce_lint_read_fn(void *opaque, void *buf, size_t len);

/* Lint a whole .tar.gz read through read: decompress it (streaming,
 * bounded memory), feed the tar and finish.  Returns the violation count,
 * or -errno when reading failed (the lint is then incomplete). */
int gce_lint_gzip(gce_lint_read_fn *read, void *read_opaque, gce_lint_report_fn *report,
                  void *opaque);

#endif
