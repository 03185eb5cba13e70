/* common/tar-gnu.h: the GNU tar header of the old GNU format
 * (`tar --format=oldgnu`), with its sparse members: encoding for the GCE
 * archive writer (block/archive-gce.c) and decoding for its lint
 * (common/gce-lint.c).  Pure byte work, no I/O; unit-tested in
 * tests/unit/test-gce-tar.c.
 *
 * The layout, as GNU tar 1.34 writes it (docs/ and the delivery-formats
 * reference, section 8.3): 512-byte blocks; name at 0 (100 bytes), mode
 * 100, uid 108, gid 116, size 124 (12), mtime 136 (12), checksum 148 (8),
 * typeflag 156, magic "ustar  \0" at 257, uname 265, gname 297.  A sparse
 * member has typeflag 'S', four (offset, numbytes) pairs of 12 bytes at
 * 386, "isextended" at 482 and the real size at 483; the size field holds
 * the stored bytes only.  Extension blocks follow the header: 21 pairs
 * and an isextended byte at 504.  Numbers are octal (size - 1 digits and a
 * NUL) or, when they do not fit, GNU base-256 (0x80, then big-endian). */
#ifndef DISKIMG_COMMON_TAR_GNU_H
#define DISKIMG_COMMON_TAR_GNU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TAR_BLOCK 512u
#define TAR_RECORD 10240u /* GNU tar's default record: 20 blocks */
#define TAR_HEADER_SPARSE 4u
#define TAR_EXT_SPARSE 21u

/* Field offsets and sizes. */
#define TAR_NAME_OFF 0
#define TAR_NAME_LEN 100
#define TAR_MODE_OFF 100
#define TAR_UID_OFF 108
#define TAR_GID_OFF 116
#define TAR_SIZE_OFF 124
#define TAR_MTIME_OFF 136
#define TAR_CHKSUM_OFF 148
#define TAR_TYPEFLAG_OFF 156
#define TAR_MAGIC_OFF 257
#define TAR_UNAME_OFF 265
#define TAR_GNAME_OFF 297
#define TAR_SPARSE_OFF 386
#define TAR_ISEXTENDED_OFF 482
#define TAR_REALSIZE_OFF 483
#define TAR_EXT_ISEXTENDED_OFF 504

/* One (offset, numbytes) pair of a sparse map: numbytes stored bytes of
 * the file at offset; the rest of the file is holes.  GNU tar ends a map
 * whose file ends in a hole with a (real size, 0) pair. */
struct tar_sparse {
    uint64_t offset;
    uint64_t numbytes;
};

/* Store v in a numeric field of size bytes: octal with size - 1 digits
 * and a NUL when it fits, else base-256 (always fits for 12 bytes). */
void tar_put_number(uint8_t *field, size_t size, uint64_t v);
/* Read a numeric field (octal, optionally space-padded, or positive
 * base-256).  Returns 0, or -EINVAL (not a number, or negative) or
 * -ERANGE (above INT64_MAX: no file is that large). */
int tar_get_number(const uint8_t *field, size_t size, uint64_t *v);

/* The unsigned sum of the block with the checksum field as spaces, and
 * whether the stored checksum matches it (or the signed sum, which old
 * tars wrote and GNU tar accepts). */
bool tar_checksum_ok(const uint8_t *block);

/* What the writer puts in the member's header.  uid and gid are 0, the
 * owner names "root", as `tar --owner=0 --group=0` run by root writes. */
struct tar_member {
    const char *name; /* at most 99 bytes */
    uint32_t mode;
    uint64_t mtime;
    uint64_t real_size;
    const struct tar_sparse *map; /* ordered; NULL with n_map 0: not sparse */
    size_t n_map;
};

/* Bytes of header (the header block and its extension blocks). */
uint64_t tar_member_header_size(const struct tar_member *m);
/* Stored data bytes: the sum of the map's numbytes (real_size when not
 * sparse). */
uint64_t tar_member_stored_size(const struct tar_member *m);
/* Write the header blocks into out (tar_member_header_size bytes). */
void tar_member_write_header(const struct tar_member *m, uint8_t *out);
/* Bytes of the archive's end: the data's padding to a block, two zero
 * blocks, padding to a whole record, for an archive of 'before' bytes
 * (header and data). */
uint64_t tar_trailer_size(uint64_t before);

/* ---- Decoding ---- */

enum tar_magic {
    TAR_MAGIC_V7,     /* no magic */
    TAR_MAGIC_OLDGNU, /* "ustar  \0": --format=oldgnu or gnu */
    TAR_MAGIC_USTAR,  /* "ustar\0" "00": ustar or pax */
    TAR_MAGIC_OTHER,
};

struct tar_header {
    char name[TAR_NAME_LEN + 1]; /* NUL-terminated; not escaped */
    char typeflag;
    enum tar_magic magic;
    uint64_t size;      /* the size field: stored bytes */
    uint64_t real_size; /* 'S': the real size field; else size */
    bool isextended;    /* 'S': extension blocks follow */
    struct tar_sparse sparse[TAR_HEADER_SPARSE];
    unsigned n_sparse; /* pairs present in the header */
};

/* Decode one header block (its checksum already checked).  Returns 0 or
 * -EINVAL with *bad naming the field that is not a number. */
int tar_parse_header(const uint8_t *block, struct tar_header *h, const char **bad);
/* Decode the pairs of an extension block: up to TAR_EXT_SPARSE into out,
 * *n the count, *isextended whether another block follows.  Returns 0 or
 * -EINVAL. */
int tar_parse_ext(const uint8_t *block, struct tar_sparse *out, unsigned *n, bool *isextended);
bool tar_block_is_zero(const uint8_t *block);

#endif
