/* formats/qcow2/header.c: parsing, validating and writing cluster 0.
 *
 * Every field is checked here, before any other code uses it, against the
 * spec and against the file: a hostile header gets one line naming the
 * field and why, never a huge allocation or an out-of-range read later.
 * Extensions we do not understand are kept and written back unchanged.
 *
 * Order (qcow2.h): the bottom; no I/O, and no other qcow2 file called. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "qcow2-format.h"

uint64_t qcow2_l1_entries_for(uint64_t size, uint32_t cluster_bits, bool extended_l2)
{
    uint32_t l2_bits = cluster_bits - (extended_l2 ? 4 : 3);
    uint32_t shift = cluster_bits + l2_bits;

    return (size >> shift) + ((size & ((1ULL << shift) - 1)) != 0);
}

void qcow2_header_free(struct qcow2_header *h)
{
    free(h->extra_fields);
    free(h->backing_file);
    free(h->backing_format);
    free(h->data_file);
    free(h->features);
    for (uint32_t i = 0; i < h->n_unknown; i++) {
        free(h->unknown[i].data);
    }
    free(h->unknown);
    memset(h, 0, sizeof *h);
}

int qcow2_header_peek_cluster_bits(const uint8_t *buf, size_t len, uint32_t *cluster_bits)
{
    if (len < QCOW2_V2_HEADER_LENGTH) {
        return err_setx(EINVAL, "qcow2: file too short for a header (%zu bytes)", len);
    }
    if (qcow2_rd32(buf) != QCOW2_MAGIC) {
        return err_setx(EINVAL, "qcow2: bad magic (not a qcow2 image)");
    }
    *cluster_bits = qcow2_rd32(buf + 20);
    if (*cluster_bits < QCOW2_MIN_CLUSTER_BITS || *cluster_bits > QCOW2_MAX_CLUSTER_BITS) {
        return err_setx(EINVAL, "qcow2: cluster_bits %" PRIu32 " is outside %d..%d", *cluster_bits,
                        QCOW2_MIN_CLUSTER_BITS, QCOW2_MAX_CLUSTER_BITS);
    }
    return 0;
}

void qcow2_feature_name(const struct qcow2_header *h, enum qcow2_feature_type type, unsigned bit,
                        char *out, size_t outlen)
{
    static const char *const type_names[] = {"incompatible", "compatible", "autoclear"};

    for (uint32_t i = 0; i < h->n_features; i++) {
        if (h->features[i].type == type && h->features[i].bit == bit) {
            snprintf(out, outlen, "%s", h->features[i].name);
            return;
        }
    }
    snprintf(out, outlen, "unknown %s feature bit %u", type_names[type], bit);
}

/* A string from the image: bounded and without NUL bytes (it must name
 * what the header says, not a prefix of it).  Other bytes are kept, as
 * qemu keeps them: a file name may hold any byte but NUL and '/'.  Every
 * place that prints one escapes it (common/escape.h). */
static char *qcow2_string(const uint8_t *p, uint32_t len)
{
    char *s;

    if (memchr(p, '\0', len)) {
        return NULL;
    }
    s = malloc((size_t)len + 1);
    if (s) {
        memcpy(s, p, len);
        s[len] = '\0';
    }
    return s;
}

static int qcow2_parse_feature_table(struct qcow2_header *h, const uint8_t *p, uint32_t len)
{
    uint32_t n = len / QCOW2_FEATURE_ENTRY_SIZE;

    if (len % QCOW2_FEATURE_ENTRY_SIZE) {
        return err_setx(
            EINVAL, "qcow2: feature name table length %" PRIu32 " is not a multiple of 48", len);
    }
    free(h->features);
    h->features = calloc(n ? n : 1, sizeof *h->features);
    if (!h->features) {
        return err_set(ENOMEM, "qcow2: feature name table");
    }
    h->n_features = n;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = p + i * QCOW2_FEATURE_ENTRY_SIZE;
        h->features[i].type = e[0];
        h->features[i].bit = e[1];
        memcpy(h->features[i].name, e + 2, QCOW2_FEATURE_NAME_SIZE);
        h->features[i].name[QCOW2_FEATURE_NAME_SIZE] = '\0';
        /* Only informative, but printed in errors: no control characters. */
        for (char *c = h->features[i].name; *c; c++) {
            if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                *c = '?';
            }
        }
    }
    return 0;
}

static int qcow2_keep_unknown_ext(struct qcow2_header *h, uint32_t type, const uint8_t *p,
                                  uint32_t len)
{
    struct qcow2_unknown_ext *u = h->unknown;

    /* Grow by doubling (at each power of two): a 2 MiB cluster 0 holds
     * 262144 empty extensions, and growing one by one takes minutes. */
    if ((h->n_unknown & (h->n_unknown - 1)) == 0) {
        u = realloc(h->unknown, sizeof *u * (h->n_unknown ? 2 * (size_t)h->n_unknown : 1));
        if (!u) {
            return err_set(ENOMEM, "qcow2: header extension");
        }
        h->unknown = u;
    }
    u[h->n_unknown].type = type;
    u[h->n_unknown].len = len;
    u[h->n_unknown].data = malloc(len ? len : 1);
    if (!u[h->n_unknown].data) {
        return err_set(ENOMEM, "qcow2: header extension");
    }
    memcpy(u[h->n_unknown].data, p, len);
    h->n_unknown++;
    return 0;
}

/* Extensions live between the header and 'end' (the backing file name,
 * or the end of cluster 0). */
static int qcow2_parse_extensions(struct qcow2_header *h, const uint8_t *buf, size_t start,
                                  size_t end)
{
    size_t off = start;

    while (off + 8 <= end) {
        uint32_t type = qcow2_rd32(buf + off), len = qcow2_rd32(buf + off + 4);
        const uint8_t *data = buf + off + 8;
        int r = 0;

        if (type == QCOW2_EXT_END) {
            return 0;
        }
        if (len > end - off - 8) {
            return err_setx(EINVAL,
                            "qcow2: header extension 0x%08" PRIx32 " of %" PRIu32
                            " bytes runs past cluster 0",
                            type, len);
        }
        switch (type) {
        case QCOW2_EXT_BACKING_FORMAT:
            if (len == 0 || len > QCOW2_MAX_FORMAT_NAME) {
                return err_setx(EINVAL, "qcow2: backing format name of %" PRIu32 " bytes", len);
            }
            free(h->backing_format);
            h->backing_format = qcow2_string(data, len);
            if (!h->backing_format) {
                return err_setx(EINVAL, "qcow2: backing format name contains a NUL byte");
            }
            break;
        case QCOW2_EXT_FEATURE_TABLE:
            r = qcow2_parse_feature_table(h, data, len);
            break;
        case QCOW2_EXT_BITMAPS:
            if (len < 24) {
                return err_setx(EINVAL, "qcow2: bitmaps extension of %" PRIu32 " bytes", len);
            }
            h->has_bitmaps_ext = true;
            h->nb_bitmaps = qcow2_rd32(data);
            h->bitmap_directory_size = qcow2_rd64(data + 8);
            h->bitmap_directory_offset = qcow2_rd64(data + 16);
            break; /* written back from these fields (bitmap-store.c changes them) */
        case QCOW2_EXT_CRYPTO:
            h->has_crypto_ext = true;
            r = qcow2_keep_unknown_ext(h, type, data, len);
            break;
        case QCOW2_EXT_DATA_FILE:
            if (len == 0 || len > 4096) {
                return err_setx(EINVAL, "qcow2: data file name of %" PRIu32 " bytes", len);
            }
            free(h->data_file);
            h->data_file = qcow2_string(data, len);
            if (!h->data_file) {
                return err_setx(EINVAL, "qcow2: data file name contains a NUL byte");
            }
            break;
        default:
            r = qcow2_keep_unknown_ext(h, type, data, len);
        }
        if (r < 0) {
            return r;
        }
        off += 8 + ROUND_UP((size_t)len, 8);
    }
    return 0;
}

static int qcow2_check_table(const char *what, uint64_t offset, uint64_t bytes,
                             uint64_t cluster_size, uint64_t file_size)
{
    if (offset % cluster_size) {
        return err_setx(EINVAL, "qcow2: %s offset 0x%" PRIx64 " is not cluster-aligned", what,
                        offset);
    }
    if (offset == 0) {
        return err_setx(EINVAL, "qcow2: %s at offset 0 overlaps the header", what);
    }
    if (offset > file_size || bytes > file_size - offset) {
        return err_setx(EINVAL,
                        "qcow2: %s at 0x%" PRIx64 " (%" PRIu64
                        " bytes) lies past the end of the file (%" PRIu64 " bytes)",
                        what, offset, bytes, file_size);
    }
    return 0;
}

static int qcow2_parse_fixed(struct qcow2_header *h, const uint8_t *buf, size_t len)
{
    h->version = qcow2_rd32(buf + 4);
    h->backing_file_offset = qcow2_rd64(buf + 8);
    h->backing_file_size = qcow2_rd32(buf + 16);
    h->cluster_bits = qcow2_rd32(buf + 20);
    h->size = qcow2_rd64(buf + 24);
    h->crypt_method = qcow2_rd32(buf + 32);
    h->l1_size = qcow2_rd32(buf + 36);
    h->l1_table_offset = qcow2_rd64(buf + 40);
    h->refcount_table_offset = qcow2_rd64(buf + 48);
    h->refcount_table_clusters = qcow2_rd32(buf + 56);
    h->nb_snapshots = qcow2_rd32(buf + 60);
    h->snapshots_offset = qcow2_rd64(buf + 64);
    if (h->version == 2) {
        h->refcount_order = 4;
        h->header_length = QCOW2_V2_HEADER_LENGTH;
        return 0;
    }
    if (h->version != 3) {
        return err_setx(ENOTSUP, "qcow2: version %" PRIu32 " is not supported (2 or 3)",
                        h->version);
    }
    if (len < QCOW2_V3_MIN_HEADER_LENGTH) {
        return err_setx(EINVAL, "qcow2: file too short for a version 3 header");
    }
    h->incompatible_features = qcow2_rd64(buf + 72);
    h->compatible_features = qcow2_rd64(buf + 80);
    h->autoclear_features = qcow2_rd64(buf + 88);
    h->refcount_order = qcow2_rd32(buf + 96);
    h->header_length = qcow2_rd32(buf + 100);
    if (h->header_length < QCOW2_V3_MIN_HEADER_LENGTH || h->header_length % 8) {
        return err_setx(EINVAL,
                        "qcow2: header_length %" PRIu32 " is not a multiple of 8 of at least 104",
                        h->header_length);
    }
    if (h->header_length > len || h->header_length > (1u << h->cluster_bits)) {
        return err_setx(EINVAL, "qcow2: header_length %" PRIu32 " exceeds cluster 0",
                        h->header_length);
    }
    if (h->header_length > 104) {
        h->compression_type = buf[104];
        for (unsigned i = 105; i < 112 && i < h->header_length; i++) {
            if (buf[i]) {
                return err_setx(EINVAL, "qcow2: header padding byte %u is not zero", i);
            }
        }
    }
    if (h->header_length > QCOW2_V3_HEADER_LENGTH) {
        h->extra_fields_len = h->header_length - QCOW2_V3_HEADER_LENGTH;
        h->extra_fields = malloc(h->extra_fields_len);
        if (!h->extra_fields) {
            return err_set(ENOMEM, "qcow2: header");
        }
        memcpy(h->extra_fields, buf + QCOW2_V3_HEADER_LENGTH, h->extra_fields_len);
    }
    return 0;
}

static int qcow2_check_features(struct qcow2_header *h)
{
    uint64_t unknown = h->incompatible_features & ~QCOW2_INCOMPAT_KNOWN;
    char name[64];

    if (unknown) {
        unsigned bit = (unsigned)__builtin_ctzll(unknown);
        qcow2_feature_name(h, QCOW2_FEAT_INCOMPAT, bit, name, sizeof name);
        return err_setx(ENOTSUP, "qcow2: unsupported incompatible feature: %s", name);
    }
    if (h->incompatible_features & QCOW2_INCOMPAT_DATA_FILE) {
        /* Never opened: refused before any file is looked at. */
        CLEANUP_FREE char *esc = h->data_file ? str_escape(h->data_file) : NULL;
        return err_setx(ENOTSUP,
                        "qcow2: images with an external data file%s%s%s are not "
                        "supported",
                        esc ? " ('" : "", esc ? esc : "", esc ? "')" : "");
    }
    if (h->crypt_method != 0) {
        return err_setx(ENOTSUP,
                        "qcow2: encrypted images (crypt_method %" PRIu32 ") are not supported",
                        h->crypt_method);
    }
    if (h->refcount_order > 6) {
        return err_setx(EINVAL, "qcow2: refcount_order %" PRIu32 " is above 6 (64 bits)",
                        h->refcount_order);
    }
    if (h->version == 2 && h->refcount_order != 4) {
        return err_setx(EINVAL, "qcow2: version 2 images have 16-bit refcounts");
    }
    if (h->compression_type > QCOW2_COMPRESSION_ZSTD) {
        return err_setx(ENOTSUP, "qcow2: unknown compression_type %u", h->compression_type);
    }
    if ((h->compression_type != 0) != !!(h->incompatible_features & QCOW2_INCOMPAT_COMPRESSION)) {
        return err_setx(EINVAL,
                        "qcow2: compression_type %u does not match the compression "
                        "type feature bit",
                        h->compression_type);
    }
    if ((h->incompatible_features & QCOW2_INCOMPAT_EXTL2) && h->cluster_bits < 14) {
        return err_setx(EINVAL, "qcow2: extended L2 entries need clusters of at least 16 KiB");
    }
    return 0;
}

static int qcow2_check_layout(const struct qcow2_header *h, uint64_t file_size)
{
    uint64_t cs = 1ULL << h->cluster_bits;
    bool extl2 = h->incompatible_features & QCOW2_INCOMPAT_EXTL2;
    uint64_t need = qcow2_l1_entries_for(h->size, h->cluster_bits, extl2);
    int r;

    if (h->size > INT64_MAX / 2) {
        return err_setx(EINVAL, "qcow2: virtual size %" PRIu64 " is too large", h->size);
    }
    if ((uint64_t)h->l1_size * 8 > QCOW2_MAX_L1_BYTES) {
        return err_setx(EFBIG, "qcow2: l1_size %" PRIu32 " exceeds 32 MiB", h->l1_size);
    }
    if (h->l1_size < need) {
        return err_setx(EINVAL,
                        "qcow2: l1_size %" PRIu32 " is too small for a virtual size of %" PRIu64
                        " (needs %" PRIu64 ")",
                        h->l1_size, h->size, need);
    }
    if (h->l1_size) {
        r = qcow2_check_table("L1 table", h->l1_table_offset, (uint64_t)h->l1_size * 8, cs,
                              file_size);
        if (r < 0) {
            return r;
        }
    }
    if (h->refcount_table_clusters == 0) {
        return err_setx(EINVAL, "qcow2: refcount_table_clusters is 0 (no refcount table)");
    }
    if ((uint64_t)h->refcount_table_clusters * cs > QCOW2_MAX_REFTABLE_BYTES) {
        return err_setx(EFBIG, "qcow2: refcount table of %" PRIu32 " clusters exceeds 8 MiB",
                        h->refcount_table_clusters);
    }
    r = qcow2_check_table("refcount table", h->refcount_table_offset,
                          (uint64_t)h->refcount_table_clusters * cs, cs, file_size);
    if (r < 0) {
        return r;
    }
    if (h->nb_snapshots > QCOW2_MAX_SNAPSHOTS) {
        return err_setx(EFBIG, "qcow2: nb_snapshots %" PRIu32 " exceeds %d", h->nb_snapshots,
                        QCOW2_MAX_SNAPSHOTS);
    }
    if (h->nb_snapshots) {
        /* The entries' sizes are checked when the table is read. */
        r = qcow2_check_table("snapshot table", h->snapshots_offset, 40, cs, file_size);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

int qcow2_header_parse(const uint8_t *buf, size_t len, uint64_t file_size, struct qcow2_header *h)
{
    size_t ext_start, ext_end;
    int r;

    memset(h, 0, sizeof *h);
    r = qcow2_header_peek_cluster_bits(buf, len, &h->cluster_bits);
    if (r < 0) {
        return r;
    }
    r = qcow2_parse_fixed(h, buf, len);
    if (r < 0) {
        goto fail;
    }
    uint64_t cs = 1ULL << h->cluster_bits;
    ext_start = h->header_length;
    ext_end = MIN(len, (size_t)cs);
    if (h->backing_file_offset) {
        if (h->backing_file_size == 0 || h->backing_file_size > QCOW2_MAX_BACKING_NAME) {
            r = err_setx(EINVAL, "qcow2: backing_file_size %" PRIu32 " is outside 1..%d",
                         h->backing_file_size, QCOW2_MAX_BACKING_NAME);
            goto fail;
        }
        if (h->backing_file_offset < ext_start || h->backing_file_offset > ext_end ||
            h->backing_file_size > ext_end - h->backing_file_offset) {
            r = err_setx(EINVAL,
                         "qcow2: backing file name at 0x%" PRIx64 " (%" PRIu32
                         " bytes) lies outside cluster 0",
                         h->backing_file_offset, h->backing_file_size);
            goto fail;
        }
        h->backing_file = qcow2_string(buf + h->backing_file_offset, h->backing_file_size);
        if (!h->backing_file) {
            r = err_setx(EINVAL, "qcow2: backing file name contains a NUL byte");
            goto fail;
        }
        ext_end = (size_t)h->backing_file_offset;
    }
    if (h->version >= 3) {
        r = qcow2_parse_extensions(h, buf, ext_start, ext_end);
        if (r < 0) {
            goto fail;
        }
    } else {
        /* Version 2 images may carry extensions too (backing format). */
        r = qcow2_parse_extensions(h, buf, QCOW2_V2_HEADER_LENGTH, ext_end);
        if (r < 0) {
            goto fail;
        }
    }
    r = qcow2_check_features(h);
    if (r == 0) {
        r = qcow2_check_layout(h, file_size);
    }
    if (r == 0) {
        return 0;
    }
fail:
    qcow2_header_free(h);
    return r;
}

static const struct {
    uint8_t type, bit;
    const char *name;
} our_features[] = {
    {QCOW2_FEAT_INCOMPAT, 0, "dirty bit"},
    {QCOW2_FEAT_INCOMPAT, 1, "corrupt bit"},
    {QCOW2_FEAT_INCOMPAT, 2, "external data file"},
    {QCOW2_FEAT_INCOMPAT, 3, "compression type"},
    {QCOW2_FEAT_INCOMPAT, 4, "extended L2 entries"},
    {QCOW2_FEAT_COMPAT, 0, "lazy refcounts"},
    {QCOW2_FEAT_AUTOCLEAR, 0, "bitmaps"},
    {QCOW2_FEAT_AUTOCLEAR, 1, "raw external data"},
};

/* Append one extension at *off; returns false if it does not fit before
 * 'end' (which leaves room for the end marker). */
static bool put_ext(uint8_t *buf, size_t *off, size_t end, uint32_t type, const void *data,
                    uint32_t len)
{
    size_t need = 8 + ROUND_UP((size_t)len, 8);

    if (*off + need > end) {
        return false;
    }
    qcow2_wr32(buf + *off, type);
    qcow2_wr32(buf + *off + 4, len);
    memcpy(buf + *off + 8, data, len);
    *off += need;
    return true;
}

int qcow2_header_serialize(const struct qcow2_header *h, uint8_t *buf, size_t cluster_size)
{
    size_t backing_len = h->backing_file ? strlen(h->backing_file) : 0;
    size_t end = cluster_size - 8 - ROUND_UP(backing_len, 8); /* room for end marker + name */
    size_t off;

    if (cluster_size < QCOW2_V3_HEADER_LENGTH + 8 + backing_len) {
        return -EFBIG;
    }
    memset(buf, 0, cluster_size);
    qcow2_wr32(buf, QCOW2_MAGIC);
    qcow2_wr32(buf + 4, h->version);
    qcow2_wr32(buf + 20, h->cluster_bits);
    qcow2_wr64(buf + 24, h->size);
    qcow2_wr32(buf + 32, h->crypt_method);
    qcow2_wr32(buf + 36, h->l1_size);
    qcow2_wr64(buf + 40, h->l1_table_offset);
    qcow2_wr64(buf + 48, h->refcount_table_offset);
    qcow2_wr32(buf + 56, h->refcount_table_clusters);
    qcow2_wr32(buf + 60, h->nb_snapshots);
    qcow2_wr64(buf + 64, h->snapshots_offset);
    if (h->version == 2) {
        off = QCOW2_V2_HEADER_LENGTH;
    } else {
        uint32_t hlen = QCOW2_V3_HEADER_LENGTH + h->extra_fields_len;
        qcow2_wr64(buf + 72, h->incompatible_features);
        qcow2_wr64(buf + 80, h->compatible_features);
        qcow2_wr64(buf + 88, h->autoclear_features);
        qcow2_wr32(buf + 96, h->refcount_order);
        qcow2_wr32(buf + 100, hlen);
        buf[104] = h->compression_type;
        if (hlen > end) {
            return -EFBIG;
        }
        if (h->extra_fields_len) {
            memcpy(buf + QCOW2_V3_HEADER_LENGTH, h->extra_fields, h->extra_fields_len);
        }
        off = hlen;
    }
    if (h->backing_format && !put_ext(buf, &off, end, QCOW2_EXT_BACKING_FORMAT, h->backing_format,
                                      (uint32_t)strlen(h->backing_format))) {
        return -EFBIG;
    }
    /* Like qemu, name our features only where cluster 0 has room to spare. */
    if (h->version >= 3 && cluster_size > 4096) {
        uint8_t table[sizeof our_features / sizeof our_features[0] * QCOW2_FEATURE_ENTRY_SIZE];
        memset(table, 0, sizeof table);
        for (size_t i = 0; i < sizeof our_features / sizeof our_features[0]; i++) {
            uint8_t *e = table + i * QCOW2_FEATURE_ENTRY_SIZE;
            e[0] = our_features[i].type;
            e[1] = our_features[i].bit;
            memcpy(e + 2, our_features[i].name, strlen(our_features[i].name));
        }
        if (!put_ext(buf, &off, end, QCOW2_EXT_FEATURE_TABLE, table, sizeof table)) {
            return -EFBIG;
        }
    }
    if (h->has_bitmaps_ext) {
        uint8_t ext[24] = {0};
        qcow2_wr32(ext, h->nb_bitmaps);
        qcow2_wr64(ext + 8, h->bitmap_directory_size);
        qcow2_wr64(ext + 16, h->bitmap_directory_offset);
        if (!put_ext(buf, &off, end, QCOW2_EXT_BITMAPS, ext, sizeof ext)) {
            return -EFBIG;
        }
    }
    for (uint32_t i = 0; i < h->n_unknown; i++) {
        if (!put_ext(buf, &off, end, h->unknown[i].type, h->unknown[i].data, h->unknown[i].len)) {
            return -EFBIG;
        }
    }
    off += 8; /* end marker: already zero */
    if (backing_len) {
        /* The name follows the extensions; the header records where. */
        memcpy(buf + off, h->backing_file, backing_len);
        qcow2_wr64(buf + 8, off);
        qcow2_wr32(buf + 16, (uint32_t)backing_len);
    }
    return 0;
}
