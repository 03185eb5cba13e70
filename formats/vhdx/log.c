/* formats/vhdx/log.c: the VHDX log ([MS-VHDX] 2.3), a ring of 4 KiB
 * sectors through which every metadata update goes, so a crash never
 * leaves a torn BAT.
 *
 * Reading: when the header names a log (LogGuid not zero), the whole log
 * is read, every 4 KiB position that starts a valid entry (signature,
 * GUID, lengths, descriptors, data-sector sequence numbers, CRC-32C) is
 * noted, and the active sequence is the chain of consecutive entries
 * (sequence +1, each starting where the previous ended) ending at the
 * valid entry with the highest sequence number, from the head's tail if
 * the tail is in the chain (the spec) or else from the chain's start (as
 * qemu).  Its descriptors are applied in order, the file is flushed and
 * the log marked empty.  A read-only open refuses such an image, as qemu
 * does.  A LogGuid with no valid entry behind it (a writer stopped
 * before its first entry) is an empty log, as in qemu.  All work is bounded: the chain only goes
 * backwards through strictly decreasing sequence numbers, and the checksum work over all candidate
 * entries is capped.
 *
 * Writing: one entry per update (a few BAT sectors), Tail = the entry
 * itself (each entry is applied and flushed before the next is written),
 * placed after the previous one in the ring.
 *
 * Order (vhdx.h): above header.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "vhdx.h"

#define SECTOR VHDX_LOG_SECTOR
#define ENTRY_HEADER 64
#define DESC_SIZE 32

static const uint8_t zero_guid[16];

/* One valid entry found in the ring. */
struct log_entry {
    uint32_t pos; /* byte offset in the log */
    uint32_t len;
    uint32_t tail;
    uint64_t seq;
    uint32_t ndesc;
    uint64_t flushed_end, last_end;
};

/* The log, in memory, with wrapping access. */
struct ring {
    const uint8_t *buf;
    uint32_t len; /* bytes, a multiple of SECTOR */
};

static const uint8_t *ring_sector(const struct ring *g, uint32_t pos, uint32_t k)
{
    return g->buf + ((uint64_t)pos + (uint64_t)k * SECTOR) % g->len;
}

static uint32_t desc_sectors(uint32_t ndesc)
{
    return (ndesc + 2 + 127) / 128; /* the header takes two descriptor slots */
}

static const uint8_t *descriptor(const struct ring *g, uint32_t pos, uint32_t k)
{
    uint32_t at = ENTRY_HEADER + k * DESC_SIZE;
    return ring_sector(g, pos, at / SECTOR) + at % SECTOR;
}

/* Checksum of the entry at pos (len bytes, wrapping), checksum field as
 * zero. */
static uint32_t entry_crc(const struct ring *g, uint32_t pos, uint32_t len)
{
    static const uint8_t zero4[4];
    const uint8_t *first = ring_sector(g, pos, 0);
    uint32_t c = crc32c_update(0, first, 4);

    c = crc32c_update(c, zero4, 4);
    c = crc32c_update(c, first + 8, SECTOR - 8);
    for (uint32_t k = 1; k < len / SECTOR; k++) {
        c = crc32c_update(c, ring_sector(g, pos, k), SECTOR);
    }
    return c;
}

/* Descriptors and data sectors of an entry whose header is sane. */
static bool descriptors_valid(const struct ring *g, const struct log_entry *e)
{
    uint32_t data = desc_sectors(e->ndesc);

    for (uint32_t k = 0; k < e->ndesc; k++) {
        const uint8_t *d = descriptor(g, e->pos, k);
        bool is_data = memcmp(d, "desc", 4) == 0;
        if ((!is_data && memcmp(d, "zero", 4) != 0) || get_le64(d + 24) != e->seq ||
            get_le64(d + 16) % SECTOR) {
            return false;
        }
        if (!is_data) {
            continue;
        }
        if (data >= e->len / SECTOR) {
            return false;
        }
        const uint8_t *ds = ring_sector(g, e->pos, data++);
        if (memcmp(ds, "data", 4) != 0 || get_le32(ds + 4) != (uint32_t)(e->seq >> 32) ||
            get_le32(ds + 4092) != (uint32_t)e->seq) {
            return false;
        }
    }
    return true;
}

/* Is there a valid entry at pos?  *budget is the checksum work left;
 * *exhausted is set when it ran out. */
static bool entry_at(const struct ring *g, const uint8_t *guid, uint32_t pos, struct log_entry *e,
                     uint64_t *budget, bool *exhausted)
{
    const uint8_t *h = ring_sector(g, pos, 0);

    if (memcmp(h, "loge", 4) != 0 || memcmp(h + 32, guid, 16) != 0) {
        return false;
    }
    *e = (struct log_entry){
        .pos = pos,
        .len = get_le32(h + 8),
        .tail = get_le32(h + 12),
        .seq = get_le64(h + 16),
        .ndesc = get_le32(h + 24),
        .flushed_end = get_le64(h + 48),
        .last_end = get_le64(h + 56),
    };
    if (e->len == 0 || e->len % SECTOR || e->len > g->len || e->seq == 0 || e->tail % SECTOR ||
        e->tail >= g->len || e->ndesc > g->len / DESC_SIZE ||
        (uint64_t)desc_sectors(e->ndesc) * SECTOR > e->len) {
        return false;
    }
    if (*budget < e->len) {
        *exhausted = true;
        return false;
    }
    *budget -= e->len;
    return entry_crc(g, pos, e->len) == get_le32(h + 4) && descriptors_valid(g, e);
}

/* Apply one entry's descriptors to the file; targets were bounded by the
 * caller's limit. */
static int apply_entry(struct vhdx_state *s, const struct ring *g, const struct log_entry *e,
                       uint64_t limit)
{
    uint32_t data = desc_sectors(e->ndesc);
    uint8_t sector[SECTOR];
    uint64_t log_off = s->hdr.log_offset, log_len = s->hdr.log_length;

    for (uint32_t k = 0; k < e->ndesc; k++) {
        const uint8_t *d = descriptor(g, e->pos, k);
        bool is_data = memcmp(d, "desc", 4) == 0;
        uint64_t at = get_le64(d + 16);
        uint64_t len = is_data ? SECTOR : get_le64(d + 8);
        int r;

        if (!is_data && (len % SECTOR || len > limit)) {
            return err_setx(EINVAL, "%s: vhdx: log entry %" PRIu64 " zeroes %" PRIu64 " bytes",
                            s->name, e->seq, len);
        }
        if (at < VHDX_REGION1_OFFSET || at > limit || len > limit - at ||
            (at < log_off + log_len && log_off < at + len)) {
            return err_setx(EINVAL,
                            "%s: vhdx: log entry %" PRIu64 " writes at %" PRIu64
                            ", outside the file's metadata and data",
                            s->name, e->seq, at);
        }
        if (is_data) {
            const uint8_t *ds = ring_sector(g, e->pos, data++);
            memcpy(sector, d + 8, 8); /* leading bytes */
            memcpy(sector + 8, ds + 8, SECTOR - 12);
            memcpy(sector + SECTOR - 4, d + 4, 4); /* trailing bytes */
            r = blk_pwrite(s->file, at, sector, SECTOR, 0);
        } else {
            r = len ? blk_pwrite_zeroes(s->file, at, len, 0) : 0;
        }
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

static int by_seq(const void *a, const void *b)
{
    const struct log_entry *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The entry with sequence number seq that ends where cur starts, in
 * found[0..n) sorted by sequence number; NULL if none. */
static const struct log_entry *predecessor(const struct log_entry *found, size_t n,
                                           const struct log_entry *cur, uint32_t ring_len)
{
    size_t lo = 0, hi = n;

    while (lo < hi) { /* first entry with seq >= cur->seq - 1 */
        size_t mid = lo + (hi - lo) / 2;
        if (found[mid].seq < cur->seq - 1) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    for (; lo < n && found[lo].seq == cur->seq - 1; lo++) {
        if (((uint64_t)found[lo].pos + found[lo].len) % ring_len == cur->pos) {
            return &found[lo];
        }
    }
    return NULL;
}

/* The active sequence: from its first entry to the head, in order, in
 * out[0..*n).  found[] holds every valid entry, nfound of them; it is
 * sorted here.  The walk goes through strictly decreasing sequence
 * numbers, so it ends. */
static void active_sequence(struct log_entry *found, size_t nfound, uint32_t ring_len,
                            const struct log_entry **out, size_t *n)
{
    size_t count = 0;

    *n = 0;
    if (nfound == 0) {
        return;
    }
    qsort(found, nfound, sizeof *found, by_seq);
    const struct log_entry *head = &found[nfound - 1];
    out[count++] = head;
    for (const struct log_entry *cur = head; cur->pos != head->tail && count < nfound;) {
        const struct log_entry *prev = predecessor(found, nfound, cur, ring_len);
        if (!prev) {
            break; /* the chain starts here (the tail was not in it) */
        }
        out[count++] = cur = prev;
    }
    for (size_t i = 0; i < count / 2; i++) {
        const struct log_entry *t = out[i];
        out[i] = out[count - 1 - i];
        out[count - 1 - i] = t;
    }
    *n = count;
}

/* Find the active sequence and, on a writable open, apply it: 1 when
 * there is none (nothing to replay), 0 when it was replayed, or an error
 * (a read-only open with a log to replay is one, as in qemu). */
static int replay(struct vhdx_state *s, const struct ring *g)
{
    size_t npos = g->len / SECTOR, nfound = 0, nseq = 0;
    CLEANUP_FREE struct log_entry *found = calloc(npos, sizeof *found);
    CLEANUP_FREE const struct log_entry **seq = calloc(npos, sizeof *seq);
    /* Checksums over candidate entries: a sane log has each sector in at
     * most a few candidates; a hostile one could make every position
     * claim the whole ring. */
    uint64_t budget = 8ull * g->len + 16 * MiB;
    int64_t flen = blk_get_length(s->file);
    int r;

    if (!found || !seq) {
        return err_set(ENOMEM, "vhdx: log entries");
    }
    if (flen < 0) {
        return (int)flen;
    }
    bool exhausted = false;
    for (uint32_t pos = 0; pos < g->len && !exhausted; pos += SECTOR) {
        if (entry_at(g, s->hdr.log_guid, pos, &found[nfound], &budget, &exhausted)) {
            nfound++;
        }
    }
    if (exhausted) {
        return err_setx(
            EINVAL, "%s: vhdx: the log has too many overlapping entries to scan: corrupt", s->name);
    }
    active_sequence(found, nfound, g->len, seq, &nseq);
    if (nseq == 0) {
        /* A writer that stopped between setting the LogGuid and writing
         * its first entry (qemu's or ours) leaves this: nothing was
         * changed, so the image opens as it is, as in qemu. */
        return 1;
    }
    if (s->read_only) {
        return err_setx(EPERM,
                        "%s: vhdx: opened read-only, but contains a log that needs to be "
                        "replayed (to replay it: diskimg check -r all %s)",
                        s->name, s->name);
    }
    const struct log_entry *head = seq[nseq - 1];
    if (head->flushed_end > (uint64_t)flen) {
        return err_setx(EINVAL,
                        "%s: vhdx: the file is shorter (%" PRId64 " bytes) than the log says "
                        "was flushed (%" PRIu64 "): it was truncated",
                        s->name, flen, head->flushed_end);
    }
    uint64_t limit = (uint64_t)flen;
    if (head->last_end > limit) {
        limit = head->last_end - limit > 1024ull * MiB ? limit + 1024ull * MiB : head->last_end;
    }
    for (size_t i = 0; i < nseq; i++) {
        r = apply_entry(s, g, seq[i], limit);
        if (r < 0) {
            return r;
        }
    }
    if (head->last_end > (uint64_t)flen && head->last_end <= limit) {
        r = blk_truncate(s->file, head->last_end);
        if (r < 0) {
            return r;
        }
    }
    r = blk_flush(s->file);
    if (r < 0) {
        return r;
    }
    s->log_seq = head->seq + 1;
    s->log_replayed = true;
    return 0;
}

int vhdx_log_open(struct vhdx_state *s)
{
    const struct vhdx_header *h = &s->hdr;
    int64_t flen = blk_get_length(s->file);
    int r;

    s->log_seq = 1;
    if (memcmp(h->log_guid, zero_guid, 16) == 0) {
        return 0;
    }
    if (h->log_length == 0) {
        /* Nothing to replay; a writer clears the GUID. */
        return s->read_only ? 0 : vhdx_update_headers_locked(s, zero_guid);
    }
    if (flen < 0) {
        return (int)flen;
    }
    if (h->log_length > VHDX_MAX_REPLAY_LOG) {
        return err_setx(EFBIG, "%s: vhdx: the log to replay is %" PRIu32 " bytes (at most %u)",
                        s->name, h->log_length, VHDX_MAX_REPLAY_LOG);
    }
    if (h->log_offset > (uint64_t)flen || h->log_length > (uint64_t)flen - h->log_offset) {
        return err_setx(EINVAL, "%s: vhdx: the log is past the end of the file", s->name);
    }
    CLEANUP_FREE uint8_t *buf = malloc(h->log_length);
    if (!buf) {
        return err_set(ENOMEM, "vhdx: log of %" PRIu32 " bytes", h->log_length);
    }
    r = blk_pread(s->file, h->log_offset, buf, h->log_length);
    if (r < 0) {
        return r;
    }
    struct ring g = {buf, h->log_length};
    r = replay(s, &g);
    if (r < 0 || (r == 1 && s->read_only)) {
        return r < 0 ? r : 0;
    }
    return vhdx_update_headers_locked(s, zero_guid);
}

/* ---- writing ---- */

static int ring_write(struct vhdx_state *s, uint32_t pos, const uint8_t *buf, uint32_t len)
{
    uint32_t first = s->hdr.log_length - pos < len ? s->hdr.log_length - pos : len;
    int r = blk_pwrite(s->file, s->hdr.log_offset + pos, buf, first, 0);

    if (r == 0 && first < len) {
        r = blk_pwrite(s->file, s->hdr.log_offset, buf + first, len - first, 0);
    }
    return r;
}

int vhdx_log_write_locked(struct vhdx_state *s, const uint64_t *at, const uint8_t *sectors,
                          unsigned count)
{
    uint32_t nd = desc_sectors(count), len = (nd + count) * SECTOR;
    int64_t flen = blk_get_length(s->file);
    int r;

    if (flen < 0) {
        return (int)flen;
    }
    if (len > s->hdr.log_length) {
        return err_setx(
            ENOSPC, "%s: vhdx: the log (%" PRIu32 " bytes) cannot hold a %" PRIu32 "-byte entry",
            s->name, s->hdr.log_length, len);
    }
    if (!s->log_live) {
        uint8_t guid[16];
        r = vhdx_random_guid(guid);
        if (r == 0) {
            r = vhdx_update_headers_locked(s, guid);
        }
        if (r < 0) {
            return r;
        }
        s->log_live = true;
        s->log_pos = 0;
    }
    CLEANUP_FREE uint8_t *e = calloc(nd + count, SECTOR);
    if (!e) {
        return err_set(ENOMEM, "vhdx: log entry");
    }
    memcpy(e, "loge", 4);
    put_le32(e + 8, len);
    put_le32(e + 12, s->log_pos);
    put_le64(e + 16, s->log_seq);
    put_le32(e + 24, count);
    memcpy(e + 32, s->hdr.log_guid, 16);
    put_le64(e + 48, (uint64_t)flen);
    put_le64(e + 56, (uint64_t)flen);
    for (unsigned k = 0; k < count; k++) {
        const uint8_t *src = sectors + (size_t)k * SECTOR;
        uint8_t *d = e + ENTRY_HEADER + (size_t)k * DESC_SIZE;
        uint8_t *ds = e + (size_t)(nd + k) * SECTOR;
        memcpy(d, "desc", 4);
        memcpy(d + 4, src + SECTOR - 4, 4);
        memcpy(d + 8, src, 8);
        put_le64(d + 16, at[k]);
        put_le64(d + 24, s->log_seq);
        memcpy(ds, "data", 4);
        put_le32(ds + 4, (uint32_t)(s->log_seq >> 32));
        memcpy(ds + 8, src + 8, SECTOR - 12);
        put_le32(ds + SECTOR - 4, (uint32_t)s->log_seq);
    }
    put_le32(e + 4, crc32c(e, len));
    r = ring_write(s, s->log_pos, e, len);
    if (r == 0) {
        r = blk_flush(s->file);
    }
    if (r < 0) {
        return r;
    }
    s->log_pos = (uint32_t)(((uint64_t)s->log_pos + len) % s->hdr.log_length);
    s->log_seq++;
    return 0;
}

int vhdx_log_clear_locked(struct vhdx_state *s)
{
    int r;

    if (!s->log_live) {
        return 0;
    }
    r = blk_flush(s->file); /* what the entries described is in place */
    if (r == 0) {
        r = vhdx_update_headers_locked(s, zero_guid);
    }
    if (r == 0) {
        s->log_live = false;
    }
    return r;
}
