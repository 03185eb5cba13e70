/* formats/vhdx/bat.c: the block allocation table ([MS-VHDX] 2.4, 2.5):
 * loading it whole (its size follows from the metadata and is bounded by
 * the region, which must lie inside the file), checking its entries, and
 * changing one entry safely: the 4 KiB BAT sector holding it is written
 * to the log and flushed before it is written in place.
 *
 * Order (vhdx.h): above log.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "vhdx.h"

int vhdx_load_bat(struct vhdx_state *s)
{
    int64_t flen = blk_get_length(s->file);
    int r;

    if (flen < 0) {
        return (int)flen;
    }
    s->chunk_ratio = vhdx_chunk_ratio(s->p.logical_sector, s->p.block_size);
    s->nblocks = (s->p.disk_size + s->p.block_size - 1) / s->p.block_size;
    s->bat_entries = vhdx_bat_entries_for(s->p.disk_size, s->p.block_size, s->chunk_ratio);
    uint64_t bytes = s->bat_entries * 8;
    if (bytes > s->bat_length) {
        return err_setx(EINVAL,
                        "%s: vhdx: the BAT region (%" PRIu64 " bytes) is too small for %" PRIu64
                        " entries",
                        s->name, s->bat_length, s->bat_entries);
    }
    if (s->bat_offset > (uint64_t)flen || bytes > (uint64_t)flen - s->bat_offset) {
        return err_setx(EINVAL,
                        "%s: vhdx: the BAT (%" PRIu64 " entries) is past the end of the file",
                        s->name, s->bat_entries);
    }
    s->bat = malloc(bytes ? bytes : 8);
    if (!s->bat) {
        return err_set(ENOMEM, "vhdx: BAT of %" PRIu64 " entries", s->bat_entries);
    }
    r = bytes ? blk_pread(s->file, s->bat_offset, s->bat, bytes) : 0;
    if (r < 0) {
        return r;
    }
    for (uint64_t i = 0; i < s->bat_entries; i++) {
        s->bat[i] = get_le64(&s->bat[i]);
    }
    return 0;
}

/* Bytes of payload block b that hold guest data (the last may be short). */
static uint64_t block_bytes(const struct vhdx_state *s, uint64_t b)
{
    uint64_t start = b * s->p.block_size;
    return MIN((uint64_t)s->p.block_size, s->p.disk_size - start);
}

static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

uint64_t vhdx_bat_problems(struct vhdx_state *s, FILE *report)
{
    int64_t flen = blk_get_length(s->file);
    uint64_t n = 0;
    bool first = true;

    for (uint64_t b = 0; b < s->nblocks; b++) {
        uint64_t i = vhdx_bat_index(s, b), e = s->bat[i], off = VHDX_BAT_OFFSET(e);
        uint64_t len = block_bytes(s, b);
        const char *why = NULL;

        if (VHDX_BAT_STATE(e) == VHDX_BLOCK_PARTIALLY_PRESENT) {
            why = "is PARTIALLY_PRESENT, which only differencing images may use";
        } else if (VHDX_BAT_STATE(e) != VHDX_BLOCK_FULLY_PRESENT) {
            continue;
        } else if (flen < 0 || off > (uint64_t)flen || len > (uint64_t)flen - off) {
            why = "points past the end of the file";
        } else if (off < VHDX_ALIGN || overlaps(off, len, s->bat_offset, s->bat_length) ||
                   overlaps(off, len, s->meta_offset, s->meta_length) ||
                   overlaps(off, len, s->hdr.log_offset, s->hdr.log_length)) {
            why = "points into the image's metadata";
        }
        if (!why) {
            continue;
        }
        if (first) {
            err_setx(EINVAL, "%s: vhdx: BAT entry %" PRIu64 " %s", s->name, i, why);
            first = false;
        }
        if (report) {
            fprintf(report,
                    "ERROR: BAT entry %" PRIu64 " (block %" PRIu64 ", offset %" PRIu64 ") %s\n", i,
                    b, off, why);
        }
        n++;
    }
    return n;
}

int vhdx_bat_set_locked(struct vhdx_state *s, uint64_t b, uint64_t entry)
{
    uint64_t i = vhdx_bat_index(s, b);
    uint64_t at = s->bat_offset + (i * 8 / VHDX_LOG_SECTOR) * VHDX_LOG_SECTOR;
    uint8_t sector[VHDX_LOG_SECTOR];
    int r;

    /* The sector as it is on disk (neighbours past the last entry
     * included), with the one entry changed. */
    r = blk_pread(s->file, at, sector, sizeof sector);
    if (r < 0) {
        return r;
    }
    put_le64(sector + (i * 8) % VHDX_LOG_SECTOR, entry);
    r = blk_flush(s->file); /* the block's data before the entry that points at it */
    if (r == 0) {
        r = vhdx_log_write_locked(s, &at, sector, 1);
    }
    if (r == 0) {
        r = blk_pwrite(s->file, at, sector, sizeof sector, 0);
    }
    if (r < 0) {
        return r;
    }
    pthread_mutex_lock(&s->lock);
    s->bat[i] = entry;
    pthread_mutex_unlock(&s->lock);
    return 0;
}
