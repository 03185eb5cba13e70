/* formats/vmdk/sparse.c: hosted sparse extents (monolithicSparse,
 * streamOptimized, the pieces of twoGbMaxExtentSparse): the header, the
 * grain directory, the grain tables, reads and allocating writes.
 *
 * Every number in the header is checked against the file before it is
 * used: the grain directory must lie inside the file (so its size is
 * bounded by the file's), each grain table is read only when used and
 * must lie inside the file, and at most VMDK_MAX_CACHED tables stay in
 * memory.  Guest offsets here are relative to the extent. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "vmdk.h"

/* Grain tables kept in memory (2 KiB each): clean ones are dropped past
 * this, dirty ones are written by a flush. */
#define VMDK_MAX_CACHED 16384u
/* The grain directory may not claim more entries than qemu allows. */
#define VMDK_MAX_GD_ENTRIES (32u << 20)

int vmdk_extent_error(const struct vmdk_extent *e, int err, const char *fmt, ...)
{
    char reason[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return err_setx(err, "%s: vmdk: %s", e->name, reason);
}

/* ---- header ---- */

struct sparse_header {
    uint32_t version, flags;
    uint64_t capacity, grain, desc_off, desc_len;
    uint32_t gtes;
    uint64_t rgd, gd, overhead;
    uint16_t compress;
};

static void header_decode(const uint8_t *b, struct sparse_header *h)
{
    h->version = get_le32(b + 4);
    h->flags = get_le32(b + 8);
    h->capacity = get_le64(b + 12);
    h->grain = get_le64(b + 20);
    h->desc_off = get_le64(b + 28);
    h->desc_len = get_le64(b + 36);
    h->gtes = get_le32(b + 44);
    h->rgd = get_le64(b + 48);
    h->gd = get_le64(b + 56);
    h->overhead = get_le64(b + 64);
    h->compress = get_le16(b + 77);
}

/* A stream whose header says "grain directory at the end" keeps the real
 * header in the footer: the last three sectors are a footer marker, the
 * footer and the end-of-stream marker. */
static int read_footer(struct vmdk_extent *e, struct sparse_header *h)
{
    uint8_t b[3 * VMDK_SECTOR];
    int r;

    if (e->file_len < 4 * VMDK_SECTOR) {
        return vmdk_extent_error(e, EINVAL, "the stream has no footer (%" PRIu64 " bytes)",
                                 e->file_len);
    }
    r = blk_pread(e->file, e->file_len - sizeof b, b, sizeof b);
    if (r < 0) {
        return r;
    }
    const uint8_t *fm = b, *footer = b + VMDK_SECTOR, *eos = b + 2 * VMDK_SECTOR;
    if (get_le32(fm + 8) != 0 || get_le32(fm + 12) != VMDK_MARKER_FOOTER ||
        memcmp(footer, VMDK4_MAGIC, 4) != 0 || get_le64(eos) != 0 || get_le32(eos + 8) != 0 ||
        get_le32(eos + 12) != VMDK_MARKER_EOS) {
        return vmdk_extent_error(e, EINVAL,
                                 "the stream's footer or end-of-stream marker is missing");
    }
    header_decode(footer, h);
    if (h->gd == VMDK_GD_AT_END) {
        return vmdk_extent_error(e, EINVAL, "the footer has no grain directory");
    }
    return 0;
}

static int header_check(struct vmdk_extent *e, const struct sparse_header *h)
{
    if (h->version < 1 || h->version > 3) {
        return vmdk_extent_error(e, ENOTSUP, "version %u is not supported", h->version);
    }
    if (h->gtes == 0 || h->gtes > VMDK_MAX_GTES) {
        return vmdk_extent_error(e, EINVAL, "%u entries per grain table (at most 512)", h->gtes);
    }
    if (h->grain == 0 || h->grain > VMDK_MAX_GRAIN_SECTORS) {
        return vmdk_extent_error(e, EINVAL, "grain size of %" PRIu64 " sectors", h->grain);
    }
    if (h->capacity > (UINT64_C(1) << 53)) {
        return vmdk_extent_error(e, EFBIG, "capacity of %" PRIu64 " sectors is too large",
                                 h->capacity);
    }
    if ((h->flags & VMDK_FLAG_COMPRESS) && h->compress != 1) {
        return vmdk_extent_error(e, ENOTSUP, "compression algorithm %u is not deflate",
                                 h->compress);
    }
    if (h->overhead > e->file_len / VMDK_SECTOR) {
        return vmdk_extent_error(
            e, EINVAL, "the file is truncated (overhead of %" PRIu64 " sectors)", h->overhead);
    }
    if (h->desc_off &&
        (h->desc_len > VMDK_MAX_DESC / VMDK_SECTOR || h->desc_off > e->file_len / VMDK_SECTOR)) {
        return vmdk_extent_error(
            e, EINVAL, "the embedded descriptor at sector %" PRIu64 " is invalid", h->desc_off);
    }
    return 0;
}

/* Read a grain directory of e->gd_n entries at byte offset off. */
static int read_gd(struct vmdk_extent *e, uint64_t off, uint32_t **out, const char *which)
{
    uint64_t bytes = (uint64_t)e->gd_n * 4;
    int r;

    if (off == 0 || off > e->file_len || bytes > e->file_len - off) {
        return vmdk_extent_error(e, EINVAL,
                                 "the %s (%u entries at %" PRIu64 ") is past the end of the file",
                                 which, e->gd_n, off);
    }
    uint8_t *raw = malloc(bytes ? bytes : 1);
    *out = calloc(e->gd_n ? e->gd_n : 1, sizeof **out);
    if (!raw || !*out) {
        free(raw);
        return err_set(ENOMEM, "%s: vmdk: grain directory of %u entries", e->name, e->gd_n);
    }
    r = blk_pread(e->file, off, raw, bytes);
    for (uint32_t i = 0; r == 0 && i < e->gd_n; i++) {
        (*out)[i] = get_le32(raw + 4 * (uint64_t)i);
    }
    free(raw);
    return r;
}

int vmdk_sparse_open(struct vmdk_extent *e, bool writable)
{
    uint8_t b[VMDK_HEADER_SIZE];
    struct sparse_header h;
    int64_t flen = blk_get_length(e->file);
    int r;

    if (flen < 0) {
        return (int)flen;
    }
    e->file_len = (uint64_t)flen;
    if (e->file_len < VMDK_HEADER_SIZE) {
        return vmdk_extent_error(
            e, EINVAL, "the file is too short for a sparse header (%" PRIu64 ")", e->file_len);
    }
    r = blk_pread(e->file, 0, b, sizeof b);
    if (r < 0) {
        return r;
    }
    if (memcmp(b, "COWD", 4) == 0) {
        return vmdk_extent_error(e, ENOTSUP, "VMFS sparse (COWD) extents are not supported");
    }
    if (memcmp(b, VMDK4_MAGIC, 4) != 0) {
        return vmdk_extent_error(e, EINVAL, "the extent has no sparse header");
    }
    header_decode(b, &h);
    if (h.gd == VMDK_GD_AT_END && (h.flags & VMDK_FLAG_COMPRESS)) {
        uint64_t desc_off = h.desc_off, desc_len = h.desc_len;
        r = read_footer(e, &h);
        if (r < 0) {
            return r;
        }
        h.desc_off = desc_off;
        h.desc_len = desc_len;
        if (writable) {
            return vmdk_extent_error(e, EROFS,
                                     "a stream with its grain directory at the end is read-only");
        }
    }
    r = header_check(e, &h);
    if (r < 0) {
        return r;
    }
    if (h.version == 3 && !(h.flags & VMDK_FLAG_COMPRESS) && writable) {
        return vmdk_extent_error(e, EROFS, "VMDK version 3 without compression is read-only");
    }
    e->version = h.version;
    e->flags = h.flags;
    e->grain = h.grain * VMDK_SECTOR;
    e->gtes = h.gtes;
    e->compressed = h.flags & VMDK_FLAG_COMPRESS;
    e->markers = h.flags & VMDK_FLAG_MARKER;
    e->zeroed_grain = (h.flags & VMDK_FLAG_ZEROED_GRAIN) && h.version >= 2;
    e->overhead = h.overhead * VMDK_SECTOR;
    e->desc_off = h.desc_off * VMDK_SECTOR;
    e->desc_len = h.desc_len * VMDK_SECTOR;
    if (!e->length) {
        e->length = h.capacity * VMDK_SECTOR; /* a monolithic file */
    }
    uint64_t sectors = MAX(h.capacity, e->length / VMDK_SECTOR);
    uint64_t grains = (sectors + h.grain - 1) / h.grain;
    uint64_t gd_n = (grains + h.gtes - 1) / h.gtes;
    if (gd_n > VMDK_MAX_GD_ENTRIES) {
        return vmdk_extent_error(e, EFBIG, "the grain directory would have %" PRIu64 " entries",
                                 gd_n);
    }
    e->gd_n = (uint32_t)gd_n;
    if (h.gd > UINT64_MAX / VMDK_SECTOR || h.rgd > UINT64_MAX / VMDK_SECTOR) {
        return vmdk_extent_error(e, EINVAL, "grain directory at sector %" PRIu64, h.gd);
    }
    e->gd_off = h.gd * VMDK_SECTOR;
    r = read_gd(e, e->gd_off, &e->gd, "grain directory");
    if (r < 0) {
        return r;
    }
    if ((h.flags & VMDK_FLAG_RGD) && h.rgd) {
        e->rgd_off = h.rgd * VMDK_SECTOR;
        r = read_gd(e, e->rgd_off, &e->rgd, "redundant grain directory");
        if (r < 0 && !writable) {
            err_clear(); /* readers use the primary tables only */
            e->rgd_off = 0;
            r = 0;
        }
        if (r < 0) {
            return r;
        }
    }
    e->cache.gt = calloc(e->gd_n ? e->gd_n : 1, sizeof *e->cache.gt);
    e->cache.dirty = calloc(e->gd_n ? e->gd_n : 1, 1);
    if (!e->cache.gt || !e->cache.dirty) {
        return err_set(ENOMEM, "%s: vmdk: grain table cache", e->name);
    }
    e->next_alloc = ROUND_UP(e->file_len, VMDK_SECTOR);
    pthread_cond_init(&e->alloc_done, NULL);
    return 0;
}

void vmdk_extent_free(struct vmdk_extent *e)
{
    if (e->cache.gt) {
        for (uint32_t i = 0; i < e->gd_n; i++) {
            free(e->cache.gt[i]);
        }
        pthread_cond_destroy(&e->alloc_done);
    }
    free(e->cache.gt);
    free(e->cache.dirty);
    free(e->gd);
    free(e->rgd);
    if (e->own_file) {
        blk_node_close(e->file);
    }
    free(e->name);
    memset(e, 0, sizeof *e);
}

/* ---- grain tables ---- */

static void drop_clean_locked(struct vmdk_extent *e)
{
    for (uint32_t i = 0; i < e->gd_n && e->cache.loaded; i++) {
        if (e->cache.gt[i] && !e->cache.dirty[i]) {
            free(e->cache.gt[i]);
            e->cache.gt[i] = NULL;
            e->cache.loaded--;
        }
    }
}

/* The grain table of directory entry gdi, or NULL (*out) when the
 * directory has none there. */
static int load_gt_locked(struct vmdk_extent *e, uint32_t gdi, uint32_t **out)
{
    uint64_t bytes = (uint64_t)e->gtes * 4;
    uint64_t off = (uint64_t)e->gd[gdi] * VMDK_SECTOR;
    int r;

    *out = e->cache.gt[gdi];
    if (*out || e->gd[gdi] == 0) {
        return 0;
    }
    if (off > e->file_len || bytes > e->file_len - off) {
        return vmdk_extent_error(
            e, EINVAL, "grain table %u (sector %u) is past the end of the file", gdi, e->gd[gdi]);
    }
    if (e->cache.loaded >= VMDK_MAX_CACHED) {
        if (e->cache.n_dirty >= VMDK_MAX_CACHED / 2) {
            r = vmdk_sparse_flush_locked(e);
            if (r < 0) {
                return r;
            }
        }
        drop_clean_locked(e);
    }
    uint8_t raw[VMDK_MAX_GTES * 4];
    uint32_t *gt = malloc(bytes);
    if (!gt) {
        return err_set(ENOMEM, "%s: vmdk: grain table", e->name);
    }
    r = blk_pread(e->file, off, raw, bytes);
    if (r < 0) {
        free(gt);
        return r;
    }
    for (uint32_t i = 0; i < e->gtes; i++) {
        gt[i] = get_le32(raw + 4 * i);
    }
    e->cache.gt[gdi] = gt;
    e->cache.loaded++;
    *out = gt;
    return 0;
}

int vmdk_sparse_get_gte_locked(struct vmdk_extent *e, uint64_t grain, uint32_t *value)
{
    uint64_t gdi = grain / e->gtes;
    uint32_t *gt;
    int r;

    *value = 0;
    if (gdi >= e->gd_n) {
        return 0;
    }
    r = load_gt_locked(e, (uint32_t)gdi, &gt);
    if (r == 0 && gt) {
        *value = gt[grain % e->gtes];
    }
    return r;
}

bool vmdk_sparse_has_gt(const struct vmdk_extent *e, uint64_t grain)
{
    uint64_t gdi = grain / e->gtes;

    return gdi < e->gd_n && e->gd[gdi] != 0;
}

int vmdk_sparse_no_gt_error(struct vmdk_extent *e, uint64_t grain)
{
    return vmdk_extent_error(e, ENOTSUP,
                             "grain table %" PRIu64 " is not allocated, and diskimg (like qemu) "
                             "does not add grain tables",
                             grain / e->gtes);
}

int vmdk_sparse_set_gte_locked(struct vmdk_extent *e, uint64_t grain, uint32_t value)
{
    uint64_t gdi = grain / e->gtes;
    uint32_t *gt;
    int r;

    if (!vmdk_sparse_has_gt(e, grain)) {
        return vmdk_sparse_no_gt_error(e, grain);
    }
    r = load_gt_locked(e, (uint32_t)gdi, &gt);
    if (r < 0) {
        return r;
    }
    gt[grain % e->gtes] = value;
    if (!e->cache.dirty[gdi]) {
        e->cache.dirty[gdi] = 1;
        e->cache.n_dirty++;
    }
    return 0;
}

static int write_gt_locked(struct vmdk_extent *e, uint32_t gdi)
{
    uint8_t raw[VMDK_MAX_GTES * 4];
    const uint32_t *gt = e->cache.gt[gdi];
    int r = 0;

    for (uint32_t i = 0; i < e->gtes; i++) {
        put_le32(raw + 4 * i, gt[i]);
    }
    /* The redundant copy first: a torn primary table can be rebuilt. */
    if (e->rgd && e->rgd[gdi]) {
        uint64_t roff = (uint64_t)e->rgd[gdi] * VMDK_SECTOR;
        if (roff + (uint64_t)e->gtes * 4 <= e->file_len) {
            r = blk_pwrite(e->file, roff, raw, (uint64_t)e->gtes * 4, 0);
        }
    }
    if (r == 0) {
        r = blk_pwrite(e->file, (uint64_t)e->gd[gdi] * VMDK_SECTOR, raw, (uint64_t)e->gtes * 4, 0);
    }
    return r;
}

int vmdk_sparse_flush_locked(struct vmdk_extent *e)
{
    int r;

    if (!e->cache.n_dirty) {
        return 0;
    }
    r = blk_flush(e->file); /* the grains before the entries that point at them */
    for (uint32_t i = 0; r == 0 && i < e->gd_n; i++) {
        if (e->cache.dirty[i]) {
            r = write_gt_locked(e, i);
            if (r == 0) {
                e->cache.dirty[i] = 0;
                e->cache.n_dirty--;
            }
        }
    }
    if (r == 0) {
        r = blk_flush(e->file);
    }
    return r;
}

/* ---- mapping ---- */

static enum vmdk_map_kind gte_kind(const struct vmdk_extent *e, uint32_t gte)
{
    if (gte == 0) {
        return VMDK_MAP_UNALLOC;
    }
    if (gte == VMDK_GTE_ZERO && e->zeroed_grain) {
        return VMDK_MAP_ZERO;
    }
    return e->compressed ? VMDK_MAP_COMPRESSED : VMDK_MAP_DATA;
}

int vmdk_sparse_map_locked(struct vmdk_extent *e, uint64_t off, uint64_t len, struct vmdk_map *m)
{
    uint64_t grain = off / e->grain, in = off % e->grain;
    uint32_t gte;
    int r;

    r = vmdk_sparse_get_gte_locked(e, grain, &gte);
    if (r < 0) {
        return r;
    }
    m->kind = gte_kind(e, gte);
    m->host = (uint64_t)gte * VMDK_SECTOR + (m->kind == VMDK_MAP_DATA ? in : 0);
    m->bytes = MIN(len, e->grain - in);
    if (m->kind == VMDK_MAP_COMPRESSED) {
        return 0; /* one grain at a time */
    }
    /* Extend over following grains of the same kind (contiguous for data). */
    while (m->bytes < len) {
        uint64_t next = grain + 1;
        uint32_t g2;
        if (m->kind == VMDK_MAP_UNALLOC && next % e->gtes == 0 && next / e->gtes < e->gd_n &&
            e->gd[next / e->gtes] == 0) {
            m->bytes = MIN(len, m->bytes + (uint64_t)e->gtes * e->grain);
            grain += e->gtes;
            continue;
        }
        r = vmdk_sparse_get_gte_locked(e, next, &g2);
        if (r < 0) {
            return r;
        }
        if (gte_kind(e, g2) != m->kind ||
            (m->kind == VMDK_MAP_DATA &&
             (uint64_t)g2 * VMDK_SECTOR != m->host - in + (next - off / e->grain) * e->grain)) {
            break;
        }
        m->bytes = MIN(len, m->bytes + e->grain);
        grain = next;
    }
    return 0;
}

/* ---- allocating writes (uncompressed extents) ---- */

static bool inflight_locked(const struct vmdk_extent *e, uint64_t first, uint64_t count)
{
    for (unsigned i = 0; i < e->n_inflight; i += 2) {
        if (first < e->inflight[i] + e->inflight[i + 1] && e->inflight[i] < first + count) {
            return true;
        }
    }
    return false;
}

static void inflight_remove_locked(struct vmdk_extent *e, uint64_t first)
{
    for (unsigned i = 0; i < e->n_inflight; i += 2) {
        if (e->inflight[i] == first) {
            e->inflight[i] = e->inflight[e->n_inflight - 2];
            e->inflight[i + 1] = e->inflight[e->n_inflight - 1];
            e->n_inflight -= 2;
            break;
        }
    }
    pthread_cond_broadcast(&e->alloc_done);
}

void vmdk_sparse_alloc_done_locked(struct vmdk_extent *e, uint64_t host, uint64_t len, bool written)
{
    if (written) {
        e->file_len = MAX(e->file_len, host + len);
    } else if (e->next_alloc == host + len) {
        e->next_alloc = host; /* no allocation came after: no gap is left */
    }
}

/* The first and last of new grains [first, first+count), when the
 * write covers them partly, keep what the parent has for the rest
 * (unallocated grains only: a zeroed grain stays zeroes). */
static int fill_from_parent(struct vmdk_state *s, struct vmdk_extent *e, uint64_t first,
                            uint64_t count, uint8_t *tmp)
{
    uint64_t ends[2] = {first, first + count - 1};
    int r = 0;

    for (int i = 0; s->backing && r == 0 && i < (count > 1 ? 2 : 1); i++) {
        uint32_t gte;
        pthread_mutex_lock(&s->lock);
        r = vmdk_sparse_get_gte_locked(e, ends[i], &gte);
        pthread_mutex_unlock(&s->lock);
        if (r == 0 && gte == 0) {
            r = vmdk_read_parent(s, e->start + ends[i] * e->grain,
                                 tmp + (ends[i] - first) * e->grain, e->grain);
        }
    }
    return r;
}

/* Grains [first, first+count) are new: write them whole at host (the
 * request's bytes, zeroes around them), then point the table at them. */
static int write_new_grains(struct vmdk_state *s, struct vmdk_extent *e, uint64_t first,
                            uint64_t count, uint64_t host, uint64_t off, const uint8_t *buf,
                            uint64_t len)
{
    uint64_t span = count * e->grain, head = off - first * e->grain;
    int r;

    if (head == 0 && len == span) {
        r = blk_pwrite(e->file, host, buf, len, 0);
    } else {
        uint8_t *tmp = calloc(1, span);
        r = tmp ? fill_from_parent(s, e, first, count, tmp)
                : err_set(ENOMEM, "%s: vmdk: grain buffer", e->name);
        if (r == 0) {
            memcpy(tmp + head, buf, len);
            r = blk_pwrite(e->file, host, tmp, span, 0);
        }
        free(tmp);
    }
    pthread_mutex_lock(&s->lock);
    vmdk_sparse_alloc_done_locked(e, host, span, r == 0);
    for (uint64_t i = 0; r == 0 && i < count; i++) {
        r = vmdk_sparse_set_gte_locked(e, first + i,
                                       (uint32_t)((host + i * e->grain) / VMDK_SECTOR));
    }
    inflight_remove_locked(e, first);
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* One step of a write at extent offset off: either in place over
 * allocated grains, or a run of new grains.  *done gets the bytes. */
static int write_step(struct vmdk_state *s, struct vmdk_extent *e, uint64_t off, const uint8_t *buf,
                      uint64_t len, uint64_t *done)
{
    uint64_t grain = off / e->grain;
    struct vmdk_map m;
    int r;

    pthread_mutex_lock(&s->lock);
    while (inflight_locked(e, grain, 1)) {
        pthread_cond_wait(&e->alloc_done, &s->lock);
    }
    r = vmdk_sparse_map_locked(e, off, len, &m);
    if (r == 0 && m.kind == VMDK_MAP_DATA && m.host < MAX(e->overhead, VMDK_HEADER_SIZE)) {
        /* A hostile table must not turn guest writes into header writes. */
        r = vmdk_extent_error(e, EIO, "grain %" PRIu64 " points into the metadata (at %" PRIu64 ")",
                              grain, m.host);
    }
    if (r < 0 || m.kind == VMDK_MAP_DATA) {
        pthread_mutex_unlock(&s->lock);
        if (r == 0) {
            *done = m.bytes;
            r = blk_pwrite(e->file, m.host, buf, m.bytes, 0);
        }
        return r;
    }
    /* New grains: as many as this request covers that are not data. */
    uint64_t last = (off + len - 1) / e->grain, count = 1;
    while (grain + count <= last && count < (8u << 20) / e->grain + 1) {
        uint32_t g;
        r = vmdk_sparse_get_gte_locked(e, grain + count, &g);
        if (r < 0 || gte_kind(e, g) == VMDK_MAP_DATA || inflight_locked(e, grain + count, 1)) {
            break;
        }
        count++;
    }
    err_clear();
    if (e->n_inflight + 2 > VMDK_MAX_INFLIGHT) {
        pthread_cond_wait(&e->alloc_done, &s->lock);
        pthread_mutex_unlock(&s->lock);
        *done = 0;
        return 0;
    }
    uint64_t host = ROUND_UP(e->next_alloc, VMDK_SECTOR);
    if ((host + count * e->grain) / VMDK_SECTOR > UINT32_MAX) {
        pthread_mutex_unlock(&s->lock);
        return vmdk_extent_error(e, ENOSPC, "the extent file would pass 2 TiB");
    }
    /* every grain table on the way must exist */
    for (uint64_t i = 0; i < count; i++) {
        if (!vmdk_sparse_has_gt(e, grain + i)) {
            pthread_mutex_unlock(&s->lock);
            return vmdk_sparse_no_gt_error(e, grain + i);
        }
    }
    e->next_alloc = host + count * e->grain;
    e->inflight[e->n_inflight++] = grain;
    e->inflight[e->n_inflight++] = count;
    pthread_mutex_unlock(&s->lock);
    *done = MIN(len, (grain + count) * e->grain - off);
    return write_new_grains(s, e, grain, count, host, off, buf, *done);
}

int vmdk_sparse_write(struct vmdk_state *s, struct vmdk_extent *e, uint64_t off, const uint8_t *buf,
                      uint64_t len)
{
    while (len) {
        uint64_t done = 0;
        int r = write_step(s, e, off, buf, len, &done);
        if (r < 0) {
            return r;
        }
        off += done;
        buf += done;
        len -= done;
    }
    return 0;
}

/* Zeroes: unallocated and zero grains read as zeroes already (no parent);
 * whole allocated grains become zeroed-grain entries when the image has
 * them; the rest is written as zeroes in place. */
int vmdk_sparse_zero(struct vmdk_state *s, struct vmdk_extent *e, uint64_t off, uint64_t len)
{
    while (len) {
        struct vmdk_map m;
        int r;
        pthread_mutex_lock(&s->lock);
        while (inflight_locked(e, off / e->grain, 1)) {
            pthread_cond_wait(&e->alloc_done, &s->lock);
        }
        r = vmdk_sparse_map_locked(e, off, MIN(len, e->grain - off % e->grain), &m);
        if (r == 0 && m.kind == VMDK_MAP_DATA && e->zeroed_grain && m.bytes == e->grain) {
            r = vmdk_sparse_set_gte_locked(e, off / e->grain, VMDK_GTE_ZERO);
            m.kind = VMDK_MAP_ZERO;
        }
        pthread_mutex_unlock(&s->lock);
        if (r == 0 && m.kind == VMDK_MAP_DATA && m.host < MAX(e->overhead, VMDK_HEADER_SIZE)) {
            r = vmdk_extent_error(e, EIO, "grain at %" PRIu64 " points into the metadata", m.host);
        }
        if (r == 0 && m.kind == VMDK_MAP_DATA) {
            r = blk_pwrite_zeroes(e->file, m.host, m.bytes, 0);
        }
        if (r < 0) {
            return r;
        }
        off += m.bytes;
        len -= m.bytes;
    }
    return 0;
}

int vmdk_sparse_data_end_locked(struct vmdk_extent *e, uint64_t *end)
{
    uint64_t last = 0, grains = e->length ? (e->length + e->grain - 1) / e->grain : 0;
    bool any = false;
    int r;

    for (uint64_t g = 0; g < grains; g++) {
        uint32_t v;
        if (g % e->gtes == 0 && e->gd[g / e->gtes] == 0) {
            g += e->gtes - 1;
            continue;
        }
        r = vmdk_sparse_get_gte_locked(e, g, &v);
        if (r < 0) {
            return r;
        }
        if (gte_kind(e, v) == VMDK_MAP_COMPRESSED && v > last) {
            last = v;
            any = true;
        }
    }
    *end = ROUND_UP(e->overhead, VMDK_SECTOR);
    if (!any) {
        return 0;
    }
    uint8_t mk[VMDK_MARKER_HDR];
    uint64_t at = last * VMDK_SECTOR;
    if (at + sizeof mk > e->file_len) {
        return vmdk_extent_error(e, EINVAL, "grain at %" PRIu64 " is past the end of the file", at);
    }
    r = blk_pread(e->file, at, mk, sizeof mk);
    if (r < 0) {
        return r;
    }
    *end = ROUND_UP(at + VMDK_MARKER_HDR + get_le32(mk + 8), VMDK_SECTOR);
    return 0;
}
