/* common/tar-gnu.c: encoding and decoding old GNU tar headers (see
 * tar-gnu.h).  Every field read from a header is bounded by its size;
 * nothing here allocates or loops past a block. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "tar-gnu.h"

#define OLDGNU_MAGIC "ustar  " /* 8 bytes with its NUL */
#define USTAR_MAGIC "ustar"

void tar_put_number(uint8_t *field, size_t size, uint64_t v)
{
    size_t digits = size - 1;

    if (digits * 3 >= 64 || v >> (digits * 3) == 0) {
        field[digits] = '\0';
        for (size_t i = digits; i-- > 0;) {
            field[i] = (uint8_t)('0' + (v & 7));
            v >>= 3;
        }
        return;
    }
    memset(field, 0, size);
    field[0] = 0x80;
    for (size_t i = size; i-- > 1 && v;) {
        field[i] = (uint8_t)v;
        v >>= 8;
    }
}

static int get_base256(const uint8_t *field, size_t size, uint64_t *v)
{
    uint64_t x = 0;

    if (field[0] != 0x80) {
        return -EINVAL; /* 0xff: negative; anything else: not GNU's */
    }
    for (size_t i = 1; i < size; i++) {
        if (x >> 55) {
            return -ERANGE;
        }
        x = x << 8 | field[i];
    }
    if (x > INT64_MAX) {
        return -ERANGE;
    }
    *v = x;
    return 0;
}

int tar_get_number(const uint8_t *field, size_t size, uint64_t *v)
{
    uint64_t x = 0;
    size_t i = 0;

    if (field[0] & 0x80) {
        return get_base256(field, size, v);
    }
    while (i < size && field[i] == ' ') {
        i++;
    }
    size_t first = i;
    for (; i < size && field[i] >= '0' && field[i] <= '7'; i++) {
        if (x >> 60) {
            return -ERANGE;
        }
        x = x << 3 | (uint64_t)(field[i] - '0');
    }
    if (i == first && field[0] != '\0') {
        return -EINVAL; /* blanks, or no octal digit; an empty field is 0 */
    }
    for (; i < size; i++) {
        if (field[i] != '\0' && field[i] != ' ') {
            return -EINVAL;
        }
    }
    if (x > INT64_MAX) {
        return -ERANGE;
    }
    *v = x;
    return 0;
}

bool tar_checksum_ok(const uint8_t *block)
{
    uint64_t stored;
    uint32_t usum = 0;
    int32_t ssum = 0;

    if (tar_get_number(block + TAR_CHKSUM_OFF, 8, &stored) < 0) {
        return false;
    }
    for (size_t i = 0; i < TAR_BLOCK; i++) {
        bool in_field = i >= TAR_CHKSUM_OFF && i < TAR_CHKSUM_OFF + 8;
        uint8_t b = in_field ? ' ' : block[i];
        usum += b;
        ssum += (int8_t)b;
    }
    return stored == usum || (int64_t)stored == ssum;
}

static void set_checksum(uint8_t *block)
{
    uint32_t sum = 0;

    memset(block + TAR_CHKSUM_OFF, ' ', 8);
    for (size_t i = 0; i < TAR_BLOCK; i++) {
        sum += block[i];
    }
    /* GNU tar's spelling: six octal digits, a NUL, the space kept. */
    tar_put_number(block + TAR_CHKSUM_OFF, 7, sum);
}

static size_t ext_blocks(size_t n_map)
{
    return n_map <= TAR_HEADER_SPARSE
               ? 0
               : (n_map - TAR_HEADER_SPARSE + TAR_EXT_SPARSE - 1) / TAR_EXT_SPARSE;
}

uint64_t tar_member_header_size(const struct tar_member *m)
{
    return (1 + ext_blocks(m->n_map)) * (uint64_t)TAR_BLOCK;
}

uint64_t tar_member_stored_size(const struct tar_member *m)
{
    uint64_t sum = 0;

    if (!m->map) {
        return m->real_size;
    }
    for (size_t i = 0; i < m->n_map; i++) {
        sum += m->map[i].numbytes;
    }
    return sum;
}

static void put_pairs(uint8_t *p, const struct tar_sparse *map, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tar_put_number(p + 24 * i, 12, map[i].offset);
        tar_put_number(p + 24 * i + 12, 12, map[i].numbytes);
    }
}

void tar_member_write_header(const struct tar_member *m, uint8_t *out)
{
    uint64_t bytes = tar_member_header_size(m);
    size_t nmain = m->n_map < TAR_HEADER_SPARSE ? m->n_map : TAR_HEADER_SPARSE;
    uint8_t *h = out;

    memset(out, 0, bytes);
    strncpy((char *)h + TAR_NAME_OFF, m->name, TAR_NAME_LEN - 1);
    tar_put_number(h + TAR_MODE_OFF, 8, m->mode);
    tar_put_number(h + TAR_UID_OFF, 8, 0);
    tar_put_number(h + TAR_GID_OFF, 8, 0);
    tar_put_number(h + TAR_SIZE_OFF, 12, tar_member_stored_size(m));
    tar_put_number(h + TAR_MTIME_OFF, 12, m->mtime);
    h[TAR_TYPEFLAG_OFF] = m->map ? 'S' : '0';
    memcpy(h + TAR_MAGIC_OFF, OLDGNU_MAGIC, sizeof OLDGNU_MAGIC);
    memcpy(h + TAR_UNAME_OFF, "root", 4);
    memcpy(h + TAR_GNAME_OFF, "root", 4);
    if (m->map) {
        put_pairs(h + TAR_SPARSE_OFF, m->map, nmain);
        h[TAR_ISEXTENDED_OFF] = m->n_map > TAR_HEADER_SPARSE;
        tar_put_number(h + TAR_REALSIZE_OFF, 12, m->real_size);
    }
    set_checksum(h);
    /* Extension blocks carry no checksum. */
    size_t done = nmain;
    for (uint8_t *e = out + TAR_BLOCK; done < m->n_map; e += TAR_BLOCK) {
        size_t n = m->n_map - done < TAR_EXT_SPARSE ? m->n_map - done : TAR_EXT_SPARSE;
        put_pairs(e, m->map + done, n);
        done += n;
        e[TAR_EXT_ISEXTENDED_OFF] = done < m->n_map;
    }
}

uint64_t tar_trailer_size(uint64_t before)
{
    uint64_t end = (before + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK + 2 * TAR_BLOCK;
    end = (end + TAR_RECORD - 1) / TAR_RECORD * TAR_RECORD;
    return end - before;
}

bool tar_block_is_zero(const uint8_t *block)
{
    for (size_t i = 0; i < TAR_BLOCK; i++) {
        if (block[i]) {
            return false;
        }
    }
    return true;
}

static enum tar_magic parse_magic(const uint8_t *p)
{
    if (memcmp(p, OLDGNU_MAGIC, sizeof OLDGNU_MAGIC) == 0) {
        return TAR_MAGIC_OLDGNU;
    }
    if (memcmp(p, USTAR_MAGIC, 6) == 0) {
        return TAR_MAGIC_USTAR;
    }
    for (size_t i = 0; i < 8; i++) {
        if (p[i]) {
            return TAR_MAGIC_OTHER;
        }
    }
    return TAR_MAGIC_V7;
}

/* Pairs end at the first one whose numbytes field is empty, as GNU tar
 * reads them. */
static int parse_pairs(const uint8_t *p, unsigned max, struct tar_sparse *out, unsigned *n)
{
    *n = 0;
    for (unsigned i = 0; i < max; i++) {
        const uint8_t *pair = p + 24 * i;
        if (pair[12] == '\0') {
            break;
        }
        if (tar_get_number(pair, 12, &out[i].offset) < 0 ||
            tar_get_number(pair + 12, 12, &out[i].numbytes) < 0) {
            return -EINVAL;
        }
        *n = i + 1;
    }
    return 0;
}

int tar_parse_header(const uint8_t *block, struct tar_header *h, const char **bad)
{
    memset(h, 0, sizeof *h);
    memcpy(h->name, block + TAR_NAME_OFF, TAR_NAME_LEN);
    h->typeflag = (char)block[TAR_TYPEFLAG_OFF];
    h->magic = parse_magic(block + TAR_MAGIC_OFF);
    if (tar_get_number(block + TAR_SIZE_OFF, 12, &h->size) < 0) {
        *bad = "size";
        return -EINVAL;
    }
    h->real_size = h->size;
    if (h->typeflag != 'S') {
        return 0;
    }
    if (tar_get_number(block + TAR_REALSIZE_OFF, 12, &h->real_size) < 0) {
        *bad = "real size";
        return -EINVAL;
    }
    if (parse_pairs(block + TAR_SPARSE_OFF, TAR_HEADER_SPARSE, h->sparse, &h->n_sparse) < 0) {
        *bad = "sparse map";
        return -EINVAL;
    }
    h->isextended = block[TAR_ISEXTENDED_OFF] != 0;
    return 0;
}

int tar_parse_ext(const uint8_t *block, struct tar_sparse *out, unsigned *n, bool *isextended)
{
    *isextended = block[TAR_EXT_ISEXTENDED_OFF] != 0;
    return parse_pairs(block, TAR_EXT_SPARSE, out, n);
}
