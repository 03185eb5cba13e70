/* formats/qcow2/bitmap-store.c: writing persistent bitmaps back.
 *
 * Copy on write, as qemu does: a bitmap whose bits changed gets new data
 * clusters and a new table, the directory is written anew, and only once
 * all of that is durable does the header's bitmaps extension switch to
 * the new directory (one sector write, then a sync).  What the old
 * directory used is freed after the switch.  A crash before the switch
 * leaves the old bitmaps and leaked clusters; after it, the new bitmaps
 * and leaked clusters: qemu-img check reports leaks at worst.
 *
 * An all-zero cluster of bitmap data is not stored (its table entry is
 * 0), as qemu does.
 *
 * Order (qcow2.h): above bitmap.c; calls refcount, overlap, writeback. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/bitmap.h"
#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/log.h"
#include "common/util.h"
#include "qcow2.h"

/* Where a bitmap's table lives (the old one, to free, or the new one),
 * and where its entry starts in the new directory. */
struct table_loc {
    uint64_t offset;
    uint32_t size;
    uint64_t dir_pos;
};

/* Allocate n clusters and write buf (len bytes, padded with zeroes to the
 * clusters) there; the caller syncs. */
static int write_new_clusters(struct qcow2_state *s, const void *buf, uint64_t len, uint64_t *off)
{
    uint64_t cs = s->cluster_size, n = len / cs + (len % cs != 0);
    CLEANUP_FREE uint8_t *pad = NULL;
    int r = qcow2_alloc_clusters_locked(s, n, off);

    if (r < 0) {
        return r;
    }
    if (len % cs) {
        pad = calloc(1, n * cs);
        if (!pad) {
            return err_set(ENOMEM, "qcow2: bitmap cluster");
        }
        memcpy(pad, buf, len);
        buf = pad;
    }
    return blk_pwrite(s->file, *off, buf, n * cs, 0);
}

/* Write bm->mem's bits and a table pointing at them. */
static int write_bitmap(struct qcow2_state *s, const struct qcow2_bitmap *bm, struct table_loc *out)
{
    const struct blk_bitmap *b = bm->mem;
    uint64_t cs = s->cluster_size, bytes = blk_bitmap_bytes(b);
    uint64_t entries = bytes / cs + (bytes % cs != 0);
    CLEANUP_FREE uint8_t *table = calloc(entries ? entries : 1, 8);
    int r = 0;

    if (!table) {
        return err_set(ENOMEM, "qcow2: bitmap table");
    }
    for (uint64_t i = 0; i < entries; i++) {
        uint64_t pos = i * cs, n = MIN(cs, bytes - pos), host = 0;
        if (buffer_is_zero(b->bits + pos, n)) {
            continue;
        }
        r = write_new_clusters(s, b->bits + pos, n, &host);
        if (r < 0) {
            return r;
        }
        qcow2_wr64(table + 8 * i, host);
    }
    out->size = (uint32_t)entries;
    out->offset = 0;
    if (entries) {
        r = write_new_clusters(s, table, entries * 8, &out->offset);
    }
    return r;
}

/* Free a table and the data clusters it names (after the switch). */
static int free_table(struct qcow2_state *s, struct table_loc t)
{
    uint64_t cs = s->cluster_size;
    CLEANUP_FREE uint8_t *table = NULL;
    int r;

    if (!t.offset || !t.size) {
        return 0;
    }
    table = malloc((uint64_t)t.size * 8);
    if (!table) {
        return err_set(ENOMEM, "qcow2: bitmap table");
    }
    r = blk_pread(s->file, t.offset, table, (uint64_t)t.size * 8);
    for (uint32_t i = 0; r == 0 && i < t.size; i++) {
        uint64_t host = qcow2_rd64(table + 8 * (uint64_t)i) & L2E_OFFSET_MASK;
        if (host && !(host & (cs - 1)) && host < s->file_end) {
            r = qcow2_update_refcount_locked(s, host, cs, -1);
        }
    }
    if (r == 0) {
        r = qcow2_update_refcount_locked(s, t.offset, ROUND_UP((uint64_t)t.size * 8, cs), -1);
    }
    return r;
}

/* The directory for the bitmaps as they will be: entries with the new
 * table locations; tables[i].dir_pos set. */
static int build_directory(struct qcow2_state *s, struct table_loc *tables, uint8_t **out,
                           uint64_t *len)
{
    uint64_t size = 0, pos = 0;
    uint8_t *dir;

    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        const struct qcow2_bitmap *bm = &s->bitmaps[i];
        size += ROUND_UP(QCOW2_BME_FIXED + (uint64_t)bm->extra_data_size + strlen(bm->name), 8);
    }
    if (size > QCOW2_BME_MAX_DIR_SIZE) {
        return err_setx(ENOSPC, "the bitmap directory would exceed 64 MiB");
    }
    dir = calloc(1, size ? size : 1);
    if (!dir) {
        return err_set(ENOMEM, "qcow2: bitmap directory");
    }
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        const struct qcow2_bitmap *bm = &s->bitmaps[i];
        uint8_t *e = dir + pos;
        size_t name_len = strlen(bm->name);

        qcow2_wr64(e, tables[i].offset);
        qcow2_wr32(e + 8, tables[i].size);
        qcow2_wr32(e + 12, bm->flags);
        e[16] = bm->type;
        e[17] = bm->granularity_bits;
        e[18] = (uint8_t)(name_len >> 8);
        e[19] = (uint8_t)name_len;
        qcow2_wr32(e + 20, bm->extra_data_size);
        if (bm->extra_data_size) {
            memcpy(e + QCOW2_BME_FIXED, bm->extra, bm->extra_data_size);
        }
        memcpy(e + QCOW2_BME_FIXED + bm->extra_data_size, bm->name, name_len);
        tables[i].dir_pos = pos;
        pos += ROUND_UP(QCOW2_BME_FIXED + (uint64_t)bm->extra_data_size + name_len, 8);
    }
    *out = dir;
    *len = size;
    return 0;
}

/* Everything new is on disk: switch the header to it, durably. */
static int switch_header_locked(struct qcow2_state *s, uint64_t dir_off, uint64_t dir_len)
{
    struct qcow2_header old = s->hdr;
    int r;

    s->hdr.has_bitmaps_ext = s->n_bitmaps > 0;
    s->hdr.nb_bitmaps = s->n_bitmaps;
    s->hdr.bitmap_directory_offset = s->n_bitmaps ? dir_off : 0;
    s->hdr.bitmap_directory_size = s->n_bitmaps ? dir_len : 0;
    if (s->n_bitmaps) {
        s->hdr.autoclear_features |= QCOW2_AUTOCLEAR_BITMAPS;
    } else {
        s->hdr.autoclear_features &= ~QCOW2_AUTOCLEAR_BITMAPS;
    }
    r = qcow2_commit_header_locked(s);
    if (r < 0) {
        s->hdr.has_bitmaps_ext = old.has_bitmaps_ext;
        s->hdr.nb_bitmaps = old.nb_bitmaps;
        s->hdr.bitmap_directory_offset = old.bitmap_directory_offset;
        s->hdr.bitmap_directory_size = old.bitmap_directory_size;
        s->hdr.autoclear_features = old.autoclear_features;
    }
    return r;
}

/* After the switch: free the old directory and tables, keep the map. */
static int release_old_locked(struct qcow2_state *s, uint64_t old_dir_off, uint64_t old_dir_len,
                              const struct table_loc *old, uint32_t n_old)
{
    uint64_t cs = s->cluster_size;
    int r = 0;

    if (old_dir_off && old_dir_len) {
        r = qcow2_update_refcount_locked(s, old_dir_off, ROUND_UP(old_dir_len, cs), -1);
    }
    for (uint32_t i = 0; r == 0 && i < n_old; i++) {
        r = free_table(s, old[i]);
    }
    return r;
}

/* New data and tables for every bitmap whose bits changed: tables[i] is
 * where bitmap i's table will be, old[] collects what is replaced. */
static int write_changed_locked(struct qcow2_state *s, struct table_loc *tables,
                                struct table_loc *old, uint32_t *n_old)
{
    int r = 0;

    for (uint32_t i = 0; r == 0 && i < s->n_bitmaps; i++) {
        const struct qcow2_bitmap *bm = &s->bitmaps[i];
        tables[i] = (struct table_loc){bm->table_offset, bm->table_size};
        if (bm->mem && bm->stale) {
            r = write_bitmap(s, bm, &tables[i]);
            old[(*n_old)++] = (struct table_loc){bm->table_offset, bm->table_size};
        }
    }
    return r;
}

/* The new directory, then everything new made durable, then the switch.
 * A bitmap whose bits are saved whole is saved consistent (in_use
 * cleared); on failure the flags are as they were. */
static int write_directory_and_switch_locked(struct qcow2_state *s, struct table_loc *tables,
                                             uint64_t *dir_off, uint64_t *dir_len)
{
    CLEANUP_FREE uint32_t *flags = calloc(s->n_bitmaps + 1, sizeof *flags);
    CLEANUP_FREE uint8_t *dir = NULL;
    int r = 0;

    if (!flags) {
        return err_set(ENOMEM, "qcow2: bitmaps");
    }
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        flags[i] = s->bitmaps[i].flags;
        if (s->bitmaps[i].mem && s->bitmaps[i].stale) {
            s->bitmaps[i].flags &= ~QCOW2_BME_IN_USE;
        }
    }
    if (s->n_bitmaps) {
        r = build_directory(s, tables, &dir, dir_len);
        if (r == 0) {
            r = write_new_clusters(s, dir, *dir_len, dir_off);
        }
    }
    if (r == 0) {
        r = qcow2_commit_refcounts_locked(s);
    }
    if (r == 0) {
        r = switch_header_locked(s, *dir_off, *dir_len);
    }
    for (uint32_t i = 0; r < 0 && i < s->n_bitmaps; i++) {
        s->bitmaps[i].flags = flags[i]; /* the old bitmaps stay; what was written leaks */
    }
    return r;
}

/* After the switch: the entries and the metadata map describe the new
 * bitmaps. */
static void adopt_new_locked(struct qcow2_state *s, const struct table_loc *tables,
                             const struct table_loc *old, uint32_t n_old, uint64_t old_dir_off,
                             uint64_t old_dir_len, uint64_t dir_off, uint64_t dir_len)
{
    uint64_t cs = s->cluster_size;

    if (old_dir_off) {
        qcow2_remove_metadata_locked(s, old_dir_off, ROUND_UP(old_dir_len, cs));
    }
    for (uint32_t i = 0; i < n_old; i++) {
        if (old[i].offset) {
            qcow2_remove_metadata_locked(s, old[i].offset, ROUND_UP((uint64_t)old[i].size * 8, cs));
        }
    }
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        struct qcow2_bitmap *bm = &s->bitmaps[i];
        if (tables[i].offset != bm->table_offset && tables[i].offset) {
            (void)qcow2_add_metadata_locked(s, tables[i].offset,
                                            ROUND_UP((uint64_t)tables[i].size * 8, cs),
                                            QCOW2_META_BITMAPS);
        }
        bm->table_offset = tables[i].offset;
        bm->table_size = tables[i].size;
        bm->dir_pos = tables[i].dir_pos; /* where mark_in_use_locked writes */
        bm->stale = false;
        if (!bm->tracked && bm->mem) {
            blk_bitmap_free(bm->mem);
            bm->mem = NULL;
        }
        if (bm->tracked) {
            /* The next write marks it in use again. */
            atomic_store(&s->bitmaps_unmarked, true);
        }
    }
    if (dir_off) {
        (void)qcow2_add_metadata_locked(s, dir_off, ROUND_UP(dir_len, cs), QCOW2_META_BITMAPS);
    }
}

int qcow2_bitmaps_commit_locked(struct qcow2_state *s, const struct qcow2_bitmap *dropped)
{
    uint64_t old_dir_off = 0, old_dir_len = 0, dir_off = 0, dir_len = 0;
    CLEANUP_FREE struct table_loc *tables = calloc(s->n_bitmaps + 1, sizeof *tables);
    CLEANUP_FREE struct table_loc *old = calloc(s->n_bitmaps + 1, sizeof *old);
    uint32_t n_old = 0;
    int r;

    if (!tables || !old) {
        return err_set(ENOMEM, "qcow2: bitmaps");
    }
    r = qcow2_check_writable_locked(s);
    if (r < 0) {
        return r;
    }
    if (s->hdr.has_bitmaps_ext && (s->hdr.autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        old_dir_off = s->hdr.bitmap_directory_offset;
        old_dir_len = s->hdr.bitmap_directory_size;
    }
    r = write_changed_locked(s, tables, old, &n_old);
    if (r == 0) {
        r = write_directory_and_switch_locked(s, tables, &dir_off, &dir_len);
    }
    if (r < 0) {
        return r;
    }
    if (dropped) {
        old[n_old++] = (struct table_loc){dropped->table_offset, dropped->table_size};
    }
    adopt_new_locked(s, tables, old, n_old, old_dir_off, old_dir_len, dir_off, dir_len);
    r = release_old_locked(s, old_dir_off, old_dir_len, old, n_old);
    if (r == 0) {
        r = qcow2_commit_refcounts_locked(s);
    }
    if (r < 0) {
        /* The new bitmaps are in place; the old clusters leak. */
        log_warn("qcow2: %s: freeing the old bitmaps: %s", ESC_NAME(s->node), err_msg());
        err_clear();
    }
    return 0;
}

int qcow2_bitmaps_store_locked(struct qcow2_state *s)
{
    bool any = false;

    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        any |= s->bitmaps[i].stale;
    }
    if (!any || s->bitmaps_invalid || !(s->hdr.autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        return 0;
    }
    return qcow2_bitmaps_commit_locked(s, NULL);
}
