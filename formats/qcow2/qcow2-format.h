/* formats/qcow2/qcow2-format.h: the qcow2 on-disk format (qemu
 * docs/interop/qcow2.txt): constants, entry masks and the parsed header.
 * Pure definitions and the header parser's interface; no I/O here. */
#ifndef DISKIMG_QCOW2_FORMAT_H
#define DISKIMG_QCOW2_FORMAT_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Big-endian fields at any alignment. */
static inline uint16_t qcow2_rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return be16toh(v);
}

static inline uint32_t qcow2_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return be32toh(v);
}

static inline uint64_t qcow2_rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return be64toh(v);
}

static inline void qcow2_wr32(uint8_t *p, uint32_t v)
{
    v = htobe32(v);
    memcpy(p, &v, 4);
}

static inline void qcow2_wr64(uint8_t *p, uint64_t v)
{
    v = htobe64(v);
    memcpy(p, &v, 8);
}

#define QCOW2_MAGIC 0x514649fbu /* "QFI\xfb" */

#define QCOW2_MIN_CLUSTER_BITS 9
#define QCOW2_MAX_CLUSTER_BITS 21
#define QCOW2_V2_HEADER_LENGTH 72
#define QCOW2_V3_MIN_HEADER_LENGTH 104
#define QCOW2_V3_HEADER_LENGTH 112 /* what we write: includes compression_type */
#define QCOW2_MAX_BACKING_NAME 1023
#define QCOW2_MAX_FORMAT_NAME 16

/* Limits that keep a hostile image from making us allocate or loop without
 * bound (the same as qemu's). */
#define QCOW2_MAX_L1_BYTES (32u << 20)
#define QCOW2_MAX_REFTABLE_BYTES (8u << 20)
#define QCOW2_MAX_SNAPSHOTS 65536
#define QCOW2_MAX_SNAPSHOT_TABLE_BYTES (64u << 20)
#define QCOW2_MAX_SNAPSHOT_EXTRA 1024
#define QCOW2_MAX_HOST_OFFSET (1ULL << 56) /* offsets in L1/L2 entries */
#define QCOW2_MAX_BACKING_DEPTH 32

/* Feature bits */
#define QCOW2_INCOMPAT_DIRTY (1ULL << 0)
#define QCOW2_INCOMPAT_CORRUPT (1ULL << 1)
#define QCOW2_INCOMPAT_DATA_FILE (1ULL << 2)
#define QCOW2_INCOMPAT_COMPRESSION (1ULL << 3)
#define QCOW2_INCOMPAT_EXTL2 (1ULL << 4)
#define QCOW2_INCOMPAT_KNOWN                                                                       \
    (QCOW2_INCOMPAT_DIRTY | QCOW2_INCOMPAT_CORRUPT | QCOW2_INCOMPAT_DATA_FILE |                    \
     QCOW2_INCOMPAT_COMPRESSION | QCOW2_INCOMPAT_EXTL2)
#define QCOW2_COMPAT_LAZY_REFCOUNTS (1ULL << 0)
#define QCOW2_AUTOCLEAR_BITMAPS (1ULL << 0)
#define QCOW2_AUTOCLEAR_DATA_FILE_RAW (1ULL << 1)

#define QCOW2_COMPRESSION_ZLIB 0
#define QCOW2_COMPRESSION_ZSTD 1

/* Header extension types */
#define QCOW2_EXT_END 0x00000000u
#define QCOW2_EXT_BACKING_FORMAT 0xe2792acau
#define QCOW2_EXT_FEATURE_TABLE 0x6803f857u
#define QCOW2_EXT_BITMAPS 0x23852875u
#define QCOW2_EXT_CRYPTO 0x0537be77u
#define QCOW2_EXT_DATA_FILE 0x44415441u

/* L1 entries */
#define L1E_OFFSET_MASK 0x00fffffffffffe00ULL
#define L1E_RESERVED_MASK 0x7f000000000001ffULL
/* L2 entries */
#define L2E_OFFSET_MASK 0x00fffffffffffe00ULL
#define L2E_STD_RESERVED_MASK 0x3f000000000001feULL
#define QCOW_OFLAG_COPIED (1ULL << 63)
#define QCOW_OFLAG_COMPRESSED (1ULL << 62)
#define QCOW_OFLAG_ZERO (1ULL << 0)
/* Refcount table entries */
#define REFT_OFFSET_MASK 0xfffffffffffffe00ULL
#define REFT_RESERVED_MASK 0x1ffULL

/* Extended L2: 32 subclusters; bitmap word has alloc bits 0-31, zero 32-63 */
#define QCOW2_SUBCLUSTERS 32
#define QCOW_SUBCLUSTER_ALLOC(x) (1ULL << (x))
#define QCOW_SUBCLUSTER_ZERO(x) (1ULL << ((x) + 32))
#define QCOW_ALLOC_MASK 0x00000000ffffffffULL
#define QCOW_ZERO_MASK 0xffffffff00000000ULL

/* Feature name table entry: u8 type, u8 bit, char name[46] */
#define QCOW2_FEATURE_ENTRY_SIZE 48
#define QCOW2_FEATURE_NAME_SIZE 46
enum qcow2_feature_type {
    QCOW2_FEAT_INCOMPAT = 0,
    QCOW2_FEAT_COMPAT = 1,
    QCOW2_FEAT_AUTOCLEAR = 2
};

struct qcow2_feature_name {
    uint8_t type;
    uint8_t bit;
    char name[QCOW2_FEATURE_NAME_SIZE + 1];
};

/* An extension we do not interpret, kept to be written back unchanged. */
struct qcow2_unknown_ext {
    uint32_t type;
    uint32_t len;
    uint8_t *data;
};

/* The header and its extensions, in host byte order. */
struct qcow2_header {
    uint32_t version;
    uint64_t backing_file_offset;
    uint32_t backing_file_size;
    uint32_t cluster_bits;
    uint64_t size;
    uint32_t crypt_method;
    uint32_t l1_size;
    uint64_t l1_table_offset;
    uint64_t refcount_table_offset;
    uint32_t refcount_table_clusters;
    uint32_t nb_snapshots;
    uint64_t snapshots_offset;
    uint64_t incompatible_features;
    uint64_t compatible_features;
    uint64_t autoclear_features;
    uint32_t refcount_order;
    uint32_t header_length;
    uint8_t compression_type;
    /* Header bytes past the fields we know (header_length > 112), kept. */
    uint8_t *extra_fields;
    uint32_t extra_fields_len;

    char *backing_file;   /* NULL: none */
    char *backing_format; /* NULL: not recorded */
    char *data_file;      /* external data file extension, recognised only */
    bool has_bitmaps_ext;
    uint32_t nb_bitmaps;
    uint64_t bitmap_directory_size;
    uint64_t bitmap_directory_offset;
    bool has_crypto_ext;
    struct qcow2_feature_name *features;
    uint32_t n_features;
    struct qcow2_unknown_ext *unknown;
    uint32_t n_unknown;
};

/* Parse and validate cluster 0 (buf holds min(cluster size, file size)
 * bytes; len >= 72).  file_size bounds the tables.  On failure returns
 * -errno with a one-line message naming the field ("qcow2: cluster_bits
 * 30 is outside 9..21").  The caller frees h with qcow2_header_free(). */
int qcow2_header_parse(const uint8_t *buf, size_t len, uint64_t file_size, struct qcow2_header *h);
/* Only the fixed fields (the first 104 bytes), enough to learn cluster_bits
 * before reading the whole of cluster 0. */
int qcow2_header_peek_cluster_bits(const uint8_t *buf, size_t len, uint32_t *cluster_bits);
void qcow2_header_free(struct qcow2_header *h);
/* Serialise the header, its extensions and the backing file name into buf
 * (cluster_size bytes, zero-filled first).  Returns 0, or -EFBIG when
 * they do not fit in cluster 0. */
int qcow2_header_serialize(const struct qcow2_header *h, uint8_t *buf, size_t cluster_size);
/* "dirty bit", or "unknown incompatible feature 5" when the image's feature
 * name table does not name it. */
void qcow2_feature_name(const struct qcow2_header *h, enum qcow2_feature_type type, unsigned bit,
                        char *out, size_t outlen);
/* L1 entries needed to map 'size' bytes. */
uint64_t qcow2_l1_entries_for(uint64_t size, uint32_t cluster_bits, bool extended_l2);

#endif
