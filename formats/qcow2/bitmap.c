/* formats/qcow2/bitmap.c: persistent dirty bitmaps (the bitmaps extension):
 * reading them, and recording guest writes in the enabled ones.
 *
 * Opening for writing loads every enabled ("auto") bitmap that is
 * consistent into memory ("tracked").  The first guest write after that
 * sets the in_use flag of every enabled bitmap, durably, before it goes
 * ahead (as qemu does at open; an image opened for writing but never
 * written keeps its bitmaps byte for byte), and every write, zeroing and
 * discard sets the bits it covers in the tracked ones.  A clean close
 * writes them back and clears in_use (bitmap-store.c); a crash leaves them
 * in use, which qemu reports as inconsistent while qemu-img check stays
 * clean.  An enabled bitmap that cannot be loaded is only marked in use.
 * Disabled bitmaps stay valid, since writes do not change them by
 * definition.  An extension we cannot parse is dropped the way the spec
 * allows a program that lacks bitmap support: by clearing autoclear bit 0
 * (see open_read_write in qcow2.c).
 *
 * Every field is bounded as qemu bounds it before it is used: directory
 * at most 64 MiB, at most 65535 bitmaps, names of 1 to 1023 bytes,
 * granularity 512 B to 2 GiB, bitmap data at most 512 MiB.
 *
 * Order (qcow2.h): above snapshot.c; calls writeback and overlap. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/bitmap.h"
#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "qcow2.h"

#define BME_FIXED QCOW2_BME_FIXED
#define BME_MAX_BITMAPS QCOW2_BME_MAX_BITMAPS
#define BME_MAX_DIR_SIZE QCOW2_BME_MAX_DIR_SIZE
#define BME_MAX_NAME QCOW2_BME_MAX_NAME
#define BME_MAX_TABLE_SIZE 0x8000000u
#define BME_MAX_PHYS_SIZE QCOW2_BME_MAX_PHYS_SIZE
#define BME_MIN_GRAN_BITS QCOW2_BME_MIN_GRAN_BITS
#define BME_MAX_GRAN_BITS QCOW2_BME_MAX_GRAN_BITS
#define BME_TYPE_DIRTY_TRACKING 1
#define BME_TABLE_RESERVED 0xff000000000001feull
#define BME_TABLE_ALL_ONES 1ull

/* Bytes of bitmap data for the virtual size at this granularity. */
uint64_t qcow2_bitmap_data_bytes(uint64_t size, uint32_t gran_bits)
{
    uint64_t bits = (size >> gran_bits) + ((size & ((1ull << gran_bits) - 1)) != 0);

    return bits / 8 + (bits % 8 != 0);
}

void qcow2_free_bitmaps(struct qcow2_state *s)
{
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        free(s->bitmaps[i].name);
        free(s->bitmaps[i].extra);
        blk_bitmap_free(s->bitmaps[i].mem);
    }
    free(s->bitmaps);
    s->bitmaps = NULL;
    s->n_bitmaps = 0;
}

static int parse_entry(struct qcow2_state *s, const uint8_t *e, uint64_t left,
                       struct qcow2_bitmap *bm, uint64_t *entry_len)
{
    uint32_t extra = qcow2_rd32(e + 20);
    uint16_t name_len = qcow2_rd16(e + 18);
    uint64_t len = ROUND_UP(BME_FIXED + (uint64_t)extra + name_len, 8);

    if (name_len == 0 || name_len > BME_MAX_NAME) {
        return err_setx(EINVAL, "bitmap name of %u bytes", name_len);
    }
    if (len > left) {
        return err_setx(EINVAL, "bitmap entry runs past the directory");
    }
    *bm = (struct qcow2_bitmap){
        .table_offset = qcow2_rd64(e),
        .table_size = qcow2_rd32(e + 8),
        .flags = qcow2_rd32(e + 12),
        .type = e[16],
        .granularity_bits = e[17],
        .extra_data_size = extra,
    };
    if (memchr(e + BME_FIXED + extra, '\0', name_len)) {
        return err_setx(EINVAL, "bitmap name holds a NUL byte");
    }
    if (bm->flags & ~QCOW2_BME_KNOWN_FLAGS) {
        return err_setx(EINVAL, "bitmap flags 0x%" PRIx32 " has reserved bits", bm->flags);
    }
    if (bm->table_size > BME_MAX_TABLE_SIZE) {
        return err_setx(EINVAL, "bitmap table of %" PRIu32 " entries", bm->table_size);
    }
    if (bm->table_size && (!bm->table_offset || (bm->table_offset & (s->cluster_size - 1)) ||
                           bm->table_offset > s->file_end ||
                           (uint64_t)bm->table_size * 8 > s->file_end - bm->table_offset)) {
        return err_setx(EINVAL, "bitmap table at 0x%" PRIx64 " is not a valid range of the file",
                        bm->table_offset);
    }
    bm->name = strndup((const char *)e + BME_FIXED + extra, name_len);
    bm->extra = extra ? malloc(extra) : NULL;
    if (bm->extra) {
        memcpy(bm->extra, e + BME_FIXED, extra);
    }
    if (!bm->name || (extra && !bm->extra)) {
        free(bm->name);
        free(bm->extra);
        return err_set(ENOMEM, "bitmap name");
    }
    *entry_len = len;
    return 0;
}

static int parse_directory(struct qcow2_state *s, const uint8_t *dir, uint64_t size)
{
    uint32_t want = s->hdr.nb_bitmaps;
    uint64_t pos = 0;

    s->bitmaps = calloc(want, sizeof *s->bitmaps);
    if (!s->bitmaps) {
        return err_set(ENOMEM, "bitmap directory");
    }
    while (pos < size) {
        uint64_t len = 0;
        int r;

        if (s->n_bitmaps == want || size - pos < BME_FIXED) {
            return err_setx(EINVAL, "the directory holds more than %" PRIu32 " bitmaps", want);
        }
        r = parse_entry(s, dir + pos, size - pos, &s->bitmaps[s->n_bitmaps], &len);
        if (r < 0) {
            return r;
        }
        for (uint32_t i = 0; i < s->n_bitmaps; i++) {
            if (strcmp(s->bitmaps[i].name, s->bitmaps[s->n_bitmaps].name) == 0) {
                CLEANUP_FREE char *esc = str_escape(s->bitmaps[i].name);
                free(s->bitmaps[s->n_bitmaps].name);
                free(s->bitmaps[s->n_bitmaps].extra);
                return err_setx(EINVAL, "two bitmaps are named '%s'", esc ? esc : "?");
            }
        }
        s->bitmaps[s->n_bitmaps++].dir_pos = pos;
        pos += len;
    }
    if (s->n_bitmaps != want) {
        return err_setx(EINVAL, "the directory holds %" PRIu32 " bitmaps, the header says %" PRIu32,
                        s->n_bitmaps, want);
    }
    return 0;
}

static int read_directory(struct qcow2_state *s, uint8_t **dir)
{
    const struct qcow2_header *h = &s->hdr;
    uint64_t off = h->bitmap_directory_offset, size = h->bitmap_directory_size;

    if (h->nb_bitmaps == 0 || h->nb_bitmaps > BME_MAX_BITMAPS) {
        return err_setx(EINVAL, "%" PRIu32 " bitmaps", h->nb_bitmaps);
    }
    if (size < BME_FIXED || size > BME_MAX_DIR_SIZE || (off & (s->cluster_size - 1)) ||
        off > s->file_end || size > s->file_end - off) {
        return err_setx(EINVAL, "directory of %" PRIu64 " bytes at 0x%" PRIx64, size, off);
    }
    *dir = malloc(size);
    if (!*dir) {
        return err_set(ENOMEM, "bitmap directory");
    }
    return blk_pread(s->file, off, *dir, size);
}

int qcow2_read_bitmaps(struct qcow2_state *s)
{
    CLEANUP_FREE uint8_t *dir = NULL;
    int r;

    if (!s->hdr.has_bitmaps_ext || !(s->hdr.autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        return 0; /* none, or left inconsistent by a program without bitmap support */
    }
    r = read_directory(s, &dir);
    if (r == 0) {
        r = parse_directory(s, dir, s->hdr.bitmap_directory_size);
    }
    if (r < 0) {
        if (r == -ENOMEM) {
            return r;
        }
        /* Unusable, not fatal: the data is still readable, and a writer
         * clears autoclear bit 0 as the spec allows. */
        qcow2_free_bitmaps(s);
        s->bitmaps_invalid = true;
        err_prefix("qcow2: %s: bitmaps extension ignored", ESC_NAME(s->node));
        s->bitmaps_error = strdup(err_msg());
        err_clear();
    }
    return 0;
}

int qcow2_add_bitmap_metadata_locked(struct qcow2_state *s)
{
    uint64_t cs = s->cluster_size;
    int r;

    if (s->n_bitmaps == 0) {
        return 0;
    }
    r = qcow2_add_metadata_locked(s, s->hdr.bitmap_directory_offset,
                                  ROUND_UP(s->hdr.bitmap_directory_size, cs), QCOW2_META_BITMAPS);
    for (uint32_t i = 0; r == 0 && i < s->n_bitmaps; i++) {
        const struct qcow2_bitmap *bm = &s->bitmaps[i];
        if (bm->table_size) {
            r = qcow2_add_metadata_locked(s, bm->table_offset,
                                          ROUND_UP((uint64_t)bm->table_size * 8, cs),
                                          QCOW2_META_BITMAPS);
        }
    }
    return r;
}

static bool needs_marking(const struct qcow2_bitmap *bm)
{
    return (bm->flags & QCOW2_BME_AUTO) && !(bm->flags & QCOW2_BME_IN_USE);
}

bool qcow2_bitmaps_open_rw(struct qcow2_state *s)
{
    if (s->bitmaps_invalid || !(s->hdr.autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        return false;
    }
    pthread_mutex_lock(&s->lock);
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        struct qcow2_bitmap *bm = &s->bitmaps[i];
        uint64_t bytes;

        if (!needs_marking(bm)) {
            continue;
        }
        atomic_store(&s->bitmaps_unmarked, true);
        const char *why = qcow2_bitmap_unusable(s, bm, &bytes);
        if (!why && qcow2_bitmap_load_mem_locked(s, bm) == 0) {
            bm->tracked = true;
            bm->mem->enabled = true;
            continue;
        }
        /* Marked in use at the first write, and left so. */
        CLEANUP_FREE char *esc = str_escape(bm->name);
        log_warn("qcow2: %s: bitmap '%s' cannot be kept up to date: %s", ESC_NAME(s->node),
                 esc ? esc : "?", why ? why : err_msg());
        err_clear();
    }
    pthread_mutex_unlock(&s->lock);
    return true;
}

static int mark_in_use_locked(struct qcow2_state *s)
{
    uint64_t dir_off = s->hdr.bitmap_directory_offset;

    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        struct qcow2_bitmap *bm = &s->bitmaps[i];
        uint8_t flags[4];
        int r;

        if (!needs_marking(bm)) {
            continue;
        }
        qcow2_wr32(flags, bm->flags | QCOW2_BME_IN_USE);
        r = blk_pwrite(s->file, dir_off + bm->dir_pos + 12, flags, 4, 0);
        if (r < 0) {
            return r;
        }
        bm->flags |= QCOW2_BME_IN_USE;
        bm->stale = bm->tracked; /* written back at close */
    }
    /* Durable before the guest write that follows can be. */
    return blk_flush(s->file);
}

int qcow2_bitmaps_before_write(struct qcow2_state *s, uint64_t off, uint64_t len)
{
    int r = 0;

    if (atomic_load(&s->bitmaps_unmarked)) {
        pthread_mutex_lock(&s->lock);
        if (atomic_load(&s->bitmaps_unmarked)) {
            r = mark_in_use_locked(s);
            if (r < 0) {
                /* Then no bitmap may claim to be consistent at all. */
                log_error("qcow2: %s: marking bitmaps in use: %s", ESC_NAME(s->node), err_msg());
                s->hdr.autoclear_features &= ~QCOW2_AUTOCLEAR_BITMAPS;
                for (uint32_t i = 0; i < s->n_bitmaps; i++) {
                    s->bitmaps[i].tracked = s->bitmaps[i].stale = false;
                }
                r = qcow2_commit_header_locked(s);
            }
            if (r == 0) {
                atomic_store(&s->bitmaps_unmarked, false);
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
    /* The list and the tracked flags change only with no I/O running
     * (open, an operation of qemu-img bitmap, close). */
    for (uint32_t i = 0; r == 0 && i < s->n_bitmaps; i++) {
        if (s->bitmaps[i].tracked) {
            blk_bitmap_set_range(s->bitmaps[i].mem, off, len);
        }
    }
    return r;
}

const char *qcow2_bitmap_unusable(const struct qcow2_state *s, const struct qcow2_bitmap *bm,
                                  uint64_t *bytes)
{
    if (bm->flags & QCOW2_BME_IN_USE) {
        return "is in use (not saved cleanly: it may miss writes)";
    }
    if (bm->type != BME_TYPE_DIRTY_TRACKING) {
        return "is not a dirty tracking bitmap";
    }
    if (bm->granularity_bits < BME_MIN_GRAN_BITS || bm->granularity_bits > BME_MAX_GRAN_BITS) {
        return "has an unsupported granularity";
    }
    if (bm->extra_data_size && !(bm->flags & QCOW2_BME_EXTRA_DATA_COMPATIBLE)) {
        return "has extra data we do not understand";
    }
    *bytes = qcow2_bitmap_data_bytes(qcow2_virtual_size(s), bm->granularity_bits);
    if (*bytes > BME_MAX_PHYS_SIZE) {
        return "is larger than 512 MiB";
    }
    if (bm->table_size != *bytes / s->cluster_size + (*bytes % s->cluster_size != 0)) {
        return "does not match the virtual size";
    }
    return NULL;
}

static int read_bitmap_data(struct qcow2_state *s, const struct qcow2_bitmap *bm, uint8_t *bits,
                            uint64_t bytes)
{
    uint64_t cs = s->cluster_size;
    CLEANUP_FREE uint8_t *table = NULL;
    int r;

    table = malloc((uint64_t)bm->table_size * 8 + 1);
    if (!table) {
        return err_set(ENOMEM, "bitmap table");
    }
    r = blk_pread(s->file, bm->table_offset, table, (uint64_t)bm->table_size * 8);
    for (uint32_t i = 0; r == 0 && i < bm->table_size; i++) {
        uint64_t e = qcow2_rd64(table + 8 * (uint64_t)i);
        uint64_t host = e & L2E_OFFSET_MASK, pos = (uint64_t)i * cs;
        uint64_t n = MIN(cs, bytes - pos);

        if ((e & BME_TABLE_RESERVED) || (host && (e & BME_TABLE_ALL_ONES)) || (host & (cs - 1)) ||
            host > s->file_end || n > s->file_end - host) {
            return err_setx(EINVAL, "bitmap table entry %" PRIu32 " is invalid (0x%016" PRIx64 ")",
                            i, e);
        }
        if (host) {
            r = blk_pread(s->file, host, bits + pos, n);
        } else {
            memset(bits + pos, (e & BME_TABLE_ALL_ONES) ? 0xff : 0, n);
        }
    }
    return r;
}

struct qcow2_bitmap *qcow2_find_bitmap(struct qcow2_state *s, const char *name)
{
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        if (strcmp(s->bitmaps[i].name, name) == 0) {
            return &s->bitmaps[i];
        }
    }
    return NULL;
}

int qcow2_bitmap_load_mem_locked(struct qcow2_state *s, struct qcow2_bitmap *bm)
{
    struct blk_bitmap *b;
    uint64_t bytes = 0;
    const char *why;
    int r;

    if (bm->mem) {
        return 0;
    }
    CLEANUP_FREE char *esc = str_escape(bm->name);
    why = qcow2_bitmap_unusable(s, bm, &bytes);
    if (why) {
        return err_setx(EINVAL, "%s: bitmap '%s' %s", ESC_NAME(s->node), esc ? esc : "?", why);
    }
    b = blk_bitmap_new(bm->name, qcow2_virtual_size(s), 1u << bm->granularity_bits);
    if (!b) {
        return -ENOMEM;
    }
    b->enabled = bm->flags & QCOW2_BME_AUTO;
    r = read_bitmap_data(s, bm, b->bits, bytes);
    if (r < 0) {
        blk_bitmap_free(b);
        err_prefix("%s: bitmap '%s'", ESC_NAME(s->node), esc ? esc : "?");
        return r;
    }
    if (b->nbits % 8) {
        b->bits[bytes - 1] &= (uint8_t)((1u << (b->nbits % 8)) - 1); /* tail bits must be zero */
    }
    bm->mem = b;
    return 0;
}

int qcow2_load_bitmap(struct blk_node *n, const char *name, struct blk_bitmap **out)
{
    struct qcow2_state *s = n->opaque;
    struct qcow2_bitmap *bm;
    CLEANUP_FREE char *esc = str_escape(name);
    int r = 0;

    if (s->bitmaps_invalid) {
        return err_setx(EINVAL, "%s", s->bitmaps_error ? s->bitmaps_error : "invalid bitmaps");
    }
    bm = qcow2_find_bitmap(s, name);
    if (!bm) {
        return err_setx(ENOENT, "%s: no bitmap named '%s'", ESC_NAME(n), esc ? esc : "?");
    }
    if (s->snapshot_view) {
        return err_setx(EINVAL, "%s: bitmap '%s' describes the active image, not a snapshot",
                        ESC_NAME(n), esc ? esc : "?");
    }
    pthread_mutex_lock(&s->lock);
    if (bm->tracked) {
        /* The live bitmap: an export sees the writes of its own session. */
        *out = blk_bitmap_ref(bm->mem);
    } else if (bm->mem && bm->stale) {
        r = err_setx(EBUSY, "%s: bitmap '%s' is being changed", ESC_NAME(n), esc ? esc : "?");
    } else {
        struct blk_bitmap *keep = steal_ptr(&bm->mem);
        r = qcow2_bitmap_load_mem_locked(s, bm);
        if (r == 0) {
            *out = steal_ptr(&bm->mem);
        }
        bm->mem = keep;
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

int qcow2_bitmaps_info(const struct qcow2_state *s, struct blk_image_info *info)
{
    if (s->n_bitmaps == 0) {
        return 0;
    }
    info->bitmaps = calloc(s->n_bitmaps, sizeof *info->bitmaps);
    if (!info->bitmaps) {
        return err_set(ENOMEM, "bitmap list");
    }
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        const struct qcow2_bitmap *bm = &s->bitmaps[i];
        info->bitmaps[i] = (struct blk_bitmap_info){
            .name = strdup(bm->name),
            .granularity = bm->granularity_bits < 64 ? 1ull << bm->granularity_bits : 0,
            .in_use = bm->flags & QCOW2_BME_IN_USE,
            .enabled = bm->flags & QCOW2_BME_AUTO,
        };
        info->n_bitmaps++;
        if (!info->bitmaps[i].name) {
            return err_set(ENOMEM, "bitmap list");
        }
    }
    return 0;
}
