/* formats/qcow2/bitmap-ops.c: qemu-img bitmap's operations on a qcow2
 * image (the driver's bitmap_change): add, remove, clear, enable,
 * disable, merge.  Each changes the bitmaps in memory and is made durable
 * by bitmap-store.c before it returns; the refusals and their reasons are
 * qemu's.
 *
 * Resizing the image resizes its bitmaps here too, as qemu does.
 *
 * Order (qcow2.h): above bitmap-store.c; calls it and bitmap.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "block/bitmap.h"
#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "qcow2.h"

#define BME_TYPE_DIRTY_TRACKING 1

/* err_setx with the bitmap's name escaped (it may come from an image:
 * convert --bitmaps copies names); fmt has one %s, for the name. */
static int name_error(int errnum, const char *fmt, const char *name)
{
    CLEANUP_FREE char *esc = str_escape(name);

    return err_setx(errnum, fmt, esc ? esc : "?");
}

/* qemu's default: the cluster size, within 4 KiB..64 KiB. */
static uint32_t default_granularity(const struct qcow2_state *s)
{
    return (uint32_t)MIN(MAX(s->cluster_size, 4096), 65536);
}

static int find_usable(struct qcow2_state *s, const char *name, struct qcow2_bitmap **out)
{
    struct qcow2_bitmap *bm = qcow2_find_bitmap(s, name);

    if (!bm) {
        return name_error(ENOENT, "Dirty bitmap '%s' not found", name);
    }
    if ((bm->flags & QCOW2_BME_IN_USE) && !bm->tracked) {
        return name_error(EINVAL,
                          "Bitmap '%s' is inconsistent and cannot be used; remove it with --remove",
                          name);
    }
    *out = bm;
    return 0;
}

static int check_new(struct qcow2_state *s, const struct blk_bitmap_op *op, uint32_t gran)
{
    size_t len = strlen(op->name);

    /* In qemu's order: the name, the granularity, what qcow2 can store,
     * then whether the name is taken. */
    if (len == 0) {
        return err_setx(EINVAL, "Bitmap name cannot be empty");
    }
    if (gran < 512 || (gran & (gran - 1))) {
        return err_setx(EINVAL, "Granularity must be power of 2 and at least 512");
    }
    if (s->hdr.version < 3) {
        return err_setx(ENOTSUP, "Cannot store dirty bitmaps in qcow2 v2 files");
    }
    if (len > QCOW2_BME_MAX_NAME) {
        return err_setx(EINVAL, "Name length exceeds maximum (%u characters)", QCOW2_BME_MAX_NAME);
    }
    if (s->n_bitmaps >= QCOW2_BME_MAX_BITMAPS) {
        return err_setx(ENOSPC, "Maximum number of persistent bitmaps is already reached");
    }
    if (qcow2_bitmap_data_bytes(qcow2_virtual_size(s), (uint32_t)__builtin_ctz(gran)) >
        QCOW2_BME_MAX_PHYS_SIZE) {
        return err_setx(EFBIG, "Too large bitmap: its data would exceed 512 MiB");
    }
    if (qcow2_find_bitmap(s, op->name)) {
        return name_error(EEXIST, "Bitmap already exists: %s", op->name);
    }
    return 0;
}

static int add_locked(struct qcow2_state *s, const struct blk_bitmap_op *op)
{
    uint32_t gran = op->granularity ? op->granularity : default_granularity(s);
    struct qcow2_bitmap *arr, *bm;
    int r = check_new(s, op, gran);

    if (r < 0) {
        return r;
    }
    arr = realloc(s->bitmaps, (s->n_bitmaps + 1) * sizeof *arr);
    if (!arr) {
        return err_set(ENOMEM, "bitmap list");
    }
    s->bitmaps = arr;
    bm = &arr[s->n_bitmaps];
    *bm = (struct qcow2_bitmap){
        .flags = op->disabled ? 0 : QCOW2_BME_AUTO,
        .type = BME_TYPE_DIRTY_TRACKING,
        .granularity_bits = (uint8_t)__builtin_ctz(gran),
        .name = strdup(op->name),
        .mem = blk_bitmap_new(op->name, qcow2_virtual_size(s), gran),
        .tracked = !op->disabled,
        .stale = true,
    };
    if (!bm->name || !bm->mem) {
        free(bm->name);
        blk_bitmap_free(bm->mem);
        return err_set(ENOMEM, "bitmap '%s'", op->name);
    }
    bm->mem->enabled = !op->disabled;
    s->n_bitmaps++;
    r = qcow2_bitmaps_commit_locked(s, NULL);
    if (r < 0) {
        s->n_bitmaps--;
        free(bm->name);
        blk_bitmap_free(bm->mem);
    }
    return r;
}

static int remove_locked(struct qcow2_state *s, const char *name)
{
    struct qcow2_bitmap *bm = qcow2_find_bitmap(s, name);
    struct qcow2_bitmap dropped;
    uint32_t i;
    int r;

    if (!bm) {
        return name_error(ENOENT, "Dirty bitmap '%s' not found", name);
    }
    i = (uint32_t)(bm - s->bitmaps);
    dropped = *bm;
    memmove(bm, bm + 1, (s->n_bitmaps - i - 1) * sizeof *bm);
    s->n_bitmaps--;
    r = qcow2_bitmaps_commit_locked(s, &dropped);
    if (r < 0) {
        memmove(&s->bitmaps[i + 1], &s->bitmaps[i], (s->n_bitmaps - i) * sizeof *bm);
        s->bitmaps[i] = dropped;
        s->n_bitmaps++;
        return r;
    }
    free(dropped.name);
    free(dropped.extra);
    blk_bitmap_free(dropped.mem);
    return 0;
}

/* Clear, enable, disable, merge: on a bitmap that is consistent. */
static int change_locked(struct qcow2_state *s, const struct blk_bitmap_op *op)
{
    struct qcow2_bitmap *bm = NULL;
    uint32_t flags;
    bool tracked;
    int r = find_usable(s, op->name, &bm);

    if (r < 0) {
        return r;
    }
    flags = bm->flags;
    tracked = bm->tracked;
    switch (op->kind) {
    case BLK_BITMAP_CLEAR:
    case BLK_BITMAP_MERGE:
        if (op->kind == BLK_BITMAP_MERGE && op->source->size != qcow2_virtual_size(s)) {
            return err_setx(EINVAL, "Bitmaps are incompatible and can't be merged");
        }
        r = qcow2_bitmap_load_mem_locked(s, bm);
        if (r < 0) {
            return r;
        }
        if (op->kind == BLK_BITMAP_CLEAR) {
            blk_bitmap_clear(bm->mem);
        } else {
            blk_bitmap_merge(bm->mem, op->source);
        }
        bm->stale = true;
        break;
    case BLK_BITMAP_ENABLE:
        r = qcow2_bitmap_load_mem_locked(s, bm);
        if (r < 0) {
            return r;
        }
        bm->flags |= QCOW2_BME_AUTO;
        bm->tracked = true;
        bm->mem->enabled = true;
        break;
    case BLK_BITMAP_DISABLE:
        bm->flags &= ~QCOW2_BME_AUTO;
        bm->tracked = false;
        if (bm->mem) {
            bm->mem->enabled = false;
        }
        break;
    default:
        return err_setx(EINVAL, "unknown bitmap operation");
    }
    r = qcow2_bitmaps_commit_locked(s, NULL);
    if (r < 0) {
        bm->flags = flags;
        bm->tracked = tracked;
    }
    return r;
}

/* Every bitmap at the new size, in memory (news[i]); all or none. */
static int resized_copies_locked(struct qcow2_state *s, uint64_t len, struct blk_bitmap **news)
{
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        struct qcow2_bitmap *bm = &s->bitmaps[i];
        int r;

        if ((bm->flags & QCOW2_BME_IN_USE) && !bm->tracked) {
            return name_error(
                EINVAL,
                "qcow2: bitmap '%s' is inconsistent: remove it first (diskimg bitmap --remove)",
                bm->name);
        }
        if (qcow2_bitmap_data_bytes(len, bm->granularity_bits) > QCOW2_BME_MAX_PHYS_SIZE) {
            return name_error(EFBIG, "qcow2: bitmap '%s' would exceed 512 MiB", bm->name);
        }
        r = qcow2_bitmap_load_mem_locked(s, bm);
        if (r < 0) {
            return r;
        }
        news[i] = blk_bitmap_new(bm->name, len, bm->mem->granularity);
        if (!news[i]) {
            return -ENOMEM;
        }
        news[i]->enabled = bm->mem->enabled;
        blk_bitmap_merge(news[i], bm->mem);
    }
    return 0;
}

int qcow2_bitmaps_resize_locked(struct qcow2_state *s, uint64_t len)
{
    CLEANUP_FREE struct blk_bitmap **news = calloc(s->n_bitmaps + 1, sizeof *news);
    CLEANUP_FREE struct blk_bitmap **olds = calloc(s->n_bitmaps + 1, sizeof *olds);
    CLEANUP_FREE bool *stale = calloc(s->n_bitmaps + 1, sizeof *stale);
    uint64_t old_size = s->hdr.size;
    int r;

    if (!news || !olds || !stale) {
        return err_set(ENOMEM, "qcow2: bitmaps");
    }
    r = resized_copies_locked(s, len, news);
    if (r == 0) {
        for (uint32_t i = 0; i < s->n_bitmaps; i++) {
            olds[i] = s->bitmaps[i].mem;
            stale[i] = s->bitmaps[i].stale;
            s->bitmaps[i].mem = news[i];
            s->bitmaps[i].stale = true;
            news[i] = NULL;
        }
        /* One header write switches the size and the bitmaps together. */
        s->hdr.size = len;
        r = qcow2_bitmaps_commit_locked(s, NULL);
        for (uint32_t i = 0; r < 0 && i < s->n_bitmaps; i++) {
            news[i] = s->bitmaps[i].mem;
            s->bitmaps[i].mem = olds[i];
            s->bitmaps[i].stale = stale[i];
            olds[i] = NULL;
        }
        if (r < 0) {
            s->hdr.size = old_size;
        }
    }
    for (uint32_t i = 0; i < s->n_bitmaps; i++) {
        blk_bitmap_free(news[i]);
        blk_bitmap_free(olds[i]);
    }
    return r;
}

int qcow2_bitmap_change(struct blk_node *n, const struct blk_bitmap_op *op)
{
    struct qcow2_state *s = n->opaque;
    int r;

    if (s->read_only || s->snapshot_view) {
        return err_setx(EROFS, "%s is opened read-only", ESC_NAME(n));
    }
    if (s->bitmaps_invalid) {
        return err_setx(EINVAL, "%s", s->bitmaps_error ? s->bitmaps_error : "invalid bitmaps");
    }
    pthread_mutex_lock(&s->lock);
    switch (op->kind) {
    case BLK_BITMAP_ADD:
        r = add_locked(s, op);
        break;
    case BLK_BITMAP_REMOVE:
        r = remove_locked(s, op->name);
        break;
    default:
        r = change_locked(s, op);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}
