/* formats/qcow2/check.c: consistency check and repair (the driver's
 * check op, and the repair of dirty images at read-write open).
 *
 * The check walks every structure that references clusters (header,
 * L1/L2 tables of the active image and of every snapshot, refcount table
 * and blocks, snapshot table, bitmaps) and counts the references of each
 * host cluster; then it compares the counts with the stored refcounts.  A
 * stored refcount below the count is a corruption (the cluster could be
 * handed out twice), above it a leak (space lost, data safe).  Repair
 * rebuilds the refcount structure from the counts (all) or lowers leaked
 * refcounts (leaks), and fixes the copied flags.
 *
 * Order (qcow2.h): above open.c; calls open (the map), refcount-new, refcount, cluster,
 * cache, compress, writeback. */
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"
#include "refcount-new.h"
#include "refcount-math.h"

struct check_ctx {
    struct qcow2_state *s;
    struct qcow2_refcounts refs; /* references per host cluster (saturating) */
    struct blk_check_result *res;
    FILE *report;
    bool count_refcount_structures;
    uint64_t next_contiguous; /* fragmentation, per L2 table as qemu counts it */
};

static void report(struct check_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report(struct check_ctx *c, const char *fmt, ...)
{
    va_list ap;

    if (!c->report) {
        return;
    }
    va_start(ap, fmt);
    vfprintf(c->report, fmt, ap);
    va_end(ap);
    fputc('\n', c->report);
}

/* Count one reference to each cluster in [off, off+bytes). */
static void add_ref(struct check_ctx *c, uint64_t off, uint64_t bytes, const char *what)
{
    struct qcow2_state *s = c->s;

    if (bytes == 0) {
        return;
    }
    uint64_t first = off >> s->cluster_bits, last = (off + bytes - 1) >> s->cluster_bits;
    for (uint64_t k = first; k <= last; k++) {
        if (k >= c->refs.n) {
            report(c, "ERROR %s at 0x%" PRIx64 " is beyond the end of the image", what,
                   k << s->cluster_bits);
            c->res->corruptions++;
            continue;
        }
        if (c->refs.count[k] < UINT32_MAX) {
            c->refs.count[k]++;
        }
    }
}

static int read_table(struct qcow2_state *s, uint64_t off, uint64_t bytes, uint64_t **out)
{
    uint64_t *t = malloc(bytes ? bytes : 8);
    int r;

    if (!t) {
        return err_set(ENOMEM, "qcow2 check: table of %" PRIu64 " bytes", bytes);
    }
    r = blk_pread(s->file, off, t, bytes);
    if (r < 0) {
        free(t);
        return r;
    }
    *out = t;
    return 0;
}

/* Walk one L2 table: count the clusters it references. */
static int check_l2(struct check_ctx *c, uint64_t l2_off, bool active, bool *fix_copied)
{
    struct qcow2_state *s = c->s;
    uint64_t entries = 1ULL << s->l2_bits;
    CLEANUP_FREE uint64_t *l2 = NULL;
    int r = read_table(s, l2_off, s->cluster_size, &l2);

    *fix_copied = false;
    c->next_contiguous = 0; /* contiguity is counted within one L2 table */
    if (r < 0) {
        return r;
    }
    for (uint64_t i = 0; i < entries; i++) {
        uint64_t bitmap, e = qcow2_l2_get(s, l2, (unsigned)i, &bitmap);
        uint64_t host = e & L2E_OFFSET_MASK;

        if (e & QCOW_OFLAG_COMPRESSED) {
            uint64_t off, bytes;
            qcow2_compressed_range(s, e, &off, &bytes);
            if (e & QCOW_OFLAG_COPIED) {
                report(c, "ERROR compressed L2 entry 0x%016" PRIx64 " has the copied flag", e);
                c->res->corruptions++;
            }
            if (bitmap) {
                report(c, "ERROR compressed L2 entry 0x%016" PRIx64 " has a subcluster bitmap", e);
                c->res->corruptions++;
            }
            add_ref(c, off, bytes, "compressed cluster");
            c->res->compressed_clusters += active;
            c->res->allocated_clusters += active;
            c->res->fragmented_clusters += active; /* fragmented by nature, qemu says */
            continue;
        }
        if (e & L2E_STD_RESERVED_MASK) {
            report(c, "ERROR L2 entry 0x%016" PRIx64 " at 0x%" PRIx64 " has reserved bits set", e,
                   l2_off + i * s->l2_entry_size);
            c->res->corruptions++;
            continue;
        }
        /* Entries the read path refuses are corruptions here too; the
         * cluster they name is still counted. */
        if ((e & QCOW_OFLAG_ZERO) && (s->extended_l2 || s->hdr.version < 3)) {
            report(c,
                   "ERROR L2 entry 0x%016" PRIx64 " at 0x%" PRIx64
                   " has the zero flag (reserved %s)",
                   e, l2_off + i * s->l2_entry_size,
                   s->extended_l2 ? "with extended L2 entries" : "in version 2");
            c->res->corruptions++;
        }
        if (s->extended_l2 &&
            (((bitmap >> 32) & bitmap) || (!host && (bitmap & QCOW_ALLOC_MASK)))) {
            report(c,
                   "ERROR L2 entry 0x%016" PRIx64 " at 0x%" PRIx64
                   " has an invalid subcluster bitmap 0x%016" PRIx64,
                   e, l2_off + i * s->l2_entry_size, bitmap);
            c->res->corruptions++;
        }
        if (!host && (e & QCOW_OFLAG_COPIED) && !(e & QCOW_OFLAG_ZERO)) {
            report(c,
                   "ERROR L2 entry 0x%016" PRIx64 " at 0x%" PRIx64
                   " has the copied flag but no offset",
                   e, l2_off + i * s->l2_entry_size);
            c->res->corruptions++;
        }
        if (!host) {
            continue;
        }
        if (host & (s->cluster_size - 1)) {
            report(c, "ERROR L2 entry 0x%016" PRIx64 ": offset not cluster-aligned", e);
            c->res->corruptions++;
            continue;
        }
        add_ref(c, host, s->cluster_size, "data cluster");
        if (active) {
            c->res->allocated_clusters++;
            uint64_t k = host >> s->cluster_bits;
            if (c->next_contiguous && k != c->next_contiguous) {
                c->res->fragmented_clusters++;
            }
            c->next_contiguous = k + 1;
        }
    }
    return 0;
}

static int check_l1(struct check_ctx *c, uint64_t l1_off, uint32_t l1_size, bool active)
{
    struct qcow2_state *s = c->s;
    CLEANUP_FREE uint64_t *l1 = NULL;
    int r;

    if (l1_size == 0) {
        return 0;
    }
    add_ref(c, l1_off, (uint64_t)l1_size * 8, active ? "L1 table" : "snapshot L1 table");
    r = read_table(s, l1_off, (uint64_t)l1_size * 8, &l1);
    if (r < 0) {
        return r;
    }
    /* One L2 table under many entries would be walked once per entry:
     * a few clusters of file could cost hours (open refuses this for the
     * active table; snapshot tables are only read here). */
    uint64_t dup;
    r = qcow2_l1_duplicate(l1, l1_size, true, &dup);
    if (r < 0) {
        return r;
    }
    if (r > 0) {
        report(c,
               "ERROR L1 table at 0x%" PRIx64 " names the L2 table at 0x%" PRIx64
               " more than once; not walking it",
               l1_off, dup);
        c->res->corruptions++;
        return 0;
    }
    for (uint32_t i = 0; i < l1_size; i++) {
        uint64_t e = be64toh(l1[i]);
        uint64_t l2 = e & L1E_OFFSET_MASK;
        bool fix;

        if (e & L1E_RESERVED_MASK) {
            report(c, "ERROR L1 entry %" PRIu32 " has reserved bits set (0x%016" PRIx64 ")", i, e);
            c->res->corruptions++;
            continue;
        }
        if (!l2) {
            continue;
        }
        if (l2 & (s->cluster_size - 1)) {
            report(c, "ERROR L2 table at 0x%" PRIx64 " is not cluster-aligned", l2);
            c->res->corruptions++;
            continue;
        }
        add_ref(c, l2, s->cluster_size, "L2 table");
        r = check_l2(c, l2, active, &fix);
        if (r < 0) {
            c->res->check_errors++;
            report(c, "ERROR cannot read L2 table at 0x%" PRIx64 ": %s", l2, err_msg_or(r));
        }
    }
    return 0;
}

static int check_bitmaps(struct check_ctx *c)
{
    struct qcow2_state *s = c->s;
    const struct qcow2_header *h = &s->hdr;
    uint64_t size = h->bitmap_directory_size;
    CLEANUP_FREE uint8_t *dir = NULL;
    int r;

    if (!h->has_bitmaps_ext || !(h->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS) || size == 0) {
        return 0;
    }
    if (size > (64u << 20) || (h->bitmap_directory_offset & (s->cluster_size - 1))) {
        report(c, "ERROR bitmap directory at 0x%" PRIx64 " (%" PRIu64 " bytes) is invalid",
               h->bitmap_directory_offset, size);
        c->res->corruptions++;
        return 0;
    }
    dir = malloc(size);
    if (!dir) {
        return err_set(ENOMEM, "qcow2 check: bitmap directory");
    }
    r = blk_pread(s->file, h->bitmap_directory_offset, dir, size);
    if (r < 0) {
        return r;
    }
    add_ref(c, h->bitmap_directory_offset, size, "bitmap directory");
    for (uint64_t pos = 0; pos + 24 <= size;) {
        uint64_t table_off;
        uint32_t table_size, extra;
        uint16_t name_size;
        memcpy(&table_off, dir + pos, 8);
        memcpy(&table_size, dir + pos + 8, 4);
        memcpy(&name_size, dir + pos + 18, 2);
        memcpy(&extra, dir + pos + 20, 4);
        table_off = be64toh(table_off);
        table_size = be32toh(table_size);
        name_size = be16toh(name_size);
        extra = be32toh(extra);
        if ((uint64_t)table_size * 8 > (64u << 20)) {
            report(c, "ERROR bitmap table of %" PRIu32 " entries is too large", table_size);
            c->res->corruptions++;
            break;
        }
        add_ref(c, table_off, (uint64_t)table_size * 8, "bitmap table");
        CLEANUP_FREE uint64_t *t = NULL;
        if (table_size && read_table(s, table_off, (uint64_t)table_size * 8, &t) == 0) {
            for (uint32_t i = 0; i < table_size; i++) {
                uint64_t off = be64toh(t[i]) & L2E_OFFSET_MASK;
                if (off) {
                    add_ref(c, off, s->cluster_size, "bitmap data");
                }
            }
        }
        pos += ROUND_UP(24 + (uint64_t)extra + name_size, 8);
    }
    return 0;
}

struct l1_use {
    uint64_t offset;
    int64_t index; /* snapshot, -1 for the active table */
};

static int cmp_l1_use(const void *a, const void *b)
{
    const struct l1_use *x = a, *y = b;

    if (x->offset != y->offset) {
        return x->offset < y->offset ? -1 : 1;
    }
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Mark the snapshots whose L1 table is the active one's or an earlier
 * snapshot's: 65536 snapshots naming one table would walk it 65536 times
 * (snapshots made by qemu each have their own table). */
static int shared_snapshot_l1(struct check_ctx *c, bool *shared)
{
    struct qcow2_state *s = c->s;
    CLEANUP_FREE struct l1_use *u = malloc(((size_t)s->n_snapshots + 1) * sizeof *u);
    size_t n = 0;

    if (!u) {
        return err_set(ENOMEM, "qcow2 check: %" PRIu32 " snapshots", s->n_snapshots);
    }
    if (s->hdr.l1_size) {
        u[n++] = (struct l1_use){s->hdr.l1_table_offset, -1};
    }
    for (uint32_t i = 0; i < s->n_snapshots; i++) {
        if (s->snapshots[i].l1_size) {
            u[n++] = (struct l1_use){s->snapshots[i].l1_table_offset, i};
        }
    }
    qsort(u, n, sizeof *u, cmp_l1_use);
    for (size_t k = 1; k < n; k++) {
        if (u[k].offset == u[k - 1].offset) {
            shared[u[k].index] = true; /* index >= 0: the active table sorts first */
        }
    }
    return 0;
}

/* Count every reference in the image. */
static int count_references(struct check_ctx *c)
{
    struct qcow2_state *s = c->s;
    CLEANUP_FREE bool *shared = calloc(s->n_snapshots ? s->n_snapshots : 1, sizeof *shared);
    int r;

    if (!shared) {
        return err_set(ENOMEM, "qcow2 check: %" PRIu32 " snapshots", s->n_snapshots);
    }
    add_ref(c, 0, s->cluster_size, "header");
    r = check_l1(c, s->hdr.l1_table_offset, s->hdr.l1_size, true);
    if (r == 0) {
        r = shared_snapshot_l1(c, shared);
    }
    for (uint32_t i = 0; r == 0 && i < s->n_snapshots; i++) {
        const struct qcow2_snapshot *sn = &s->snapshots[i];
        if (shared[i]) {
            report(c,
                   "ERROR snapshot %" PRIu32 " uses the L1 table at 0x%" PRIx64
                   " of another snapshot or the active image; not walking it again",
                   i, sn->l1_table_offset);
            c->res->corruptions++;
            add_ref(c, sn->l1_table_offset, (uint64_t)sn->l1_size * 8, "snapshot L1 table");
            continue;
        }
        r = check_l1(c, sn->l1_table_offset, sn->l1_size, false);
    }
    if (r == 0 && s->n_snapshots) {
        add_ref(c, s->hdr.snapshots_offset, s->snapshots_bytes, "snapshot table");
    }
    if (r == 0) {
        r = check_bitmaps(c);
    }
    if (r == 0 && c->count_refcount_structures) {
        add_ref(c, s->reftable_offset, (uint64_t)s->reftable_entries * 8, "refcount table");
        for (uint32_t i = 0; i < s->reftable_entries; i++) {
            if (s->reftable[i]) {
                add_ref(c, s->reftable[i], s->cluster_size, "refcount block");
            }
        }
    }
    return r;
}

/* Copied flags of the active L1 and its L2 tables must say refcount == 1. */
static int check_copied_flags(struct check_ctx *c, bool fix)
{
    struct qcow2_state *s = c->s;
    int r = 0;

    for (uint32_t i = 0; i < s->l1_size && r == 0; i++) {
        uint64_t l2 = s->l1[i] & L1E_OFFSET_MASK;
        uint64_t rc;
        if (!l2 || (l2 & (s->cluster_size - 1))) {
            continue;
        }
        r = qcow2_get_refcount_locked(s, l2 >> s->cluster_bits, &rc);
        bool want = rc == 1, have = s->l1[i] & QCOW_OFLAG_COPIED;
        if (r == 0 && want != have) {
            report(c, "%s OFLAG_COPIED L2 cluster: l1_index=%" PRIu32 " refcount=%" PRIu64,
                   fix ? "Repairing" : "ERROR", i, rc); /* qemu's words */
            c->res->corruptions++;
            if (fix) {
                s->l1[i] = (s->l1[i] & ~QCOW_OFLAG_COPIED) | (want ? QCOW_OFLAG_COPIED : 0);
                uint64_t be = htobe64(s->l1[i]);
                r = blk_pwrite(s->file, s->l1_offset + i * 8ull, &be, 8, 0);
                c->res->corruptions_fixed++;
            }
        }
        uint64_t slices = (1ULL << s->l2_bits) / s->l2_slice_entries;
        for (uint64_t sl = 0; r == 0 && sl < slices; sl++) {
            uint64_t *slice;
            r = qcow2_cache_get_locked(s->l2_cache, l2 + sl * s->l2_slice_size, true,
                                       (void **)&slice);
            if (r < 0) {
                break;
            }
            for (unsigned j = 0; j < s->l2_slice_entries && r == 0; j++) {
                uint64_t bitmap, e = qcow2_l2_get(s, slice, j, &bitmap);
                uint64_t host = e & L2E_OFFSET_MASK;
                if ((e & QCOW_OFLAG_COMPRESSED) || !host || (host & (s->cluster_size - 1))) {
                    continue;
                }
                r = qcow2_get_refcount_locked(s, host >> s->cluster_bits, &rc);
                bool want_d = rc == 1, have_d = e & QCOW_OFLAG_COPIED;
                if (r == 0 && want_d != have_d) {
                    report(c,
                           "%s OFLAG_COPIED data cluster: l2_entry=%" PRIx64 " refcount=%" PRIu64,
                           fix ? "Repairing" : "ERROR", e, rc);
                    c->res->corruptions++;
                    if (fix) {
                        e = (e & ~QCOW_OFLAG_COPIED) | (want_d ? QCOW_OFLAG_COPIED : 0);
                        qcow2_l2_set(s, slice, j, e, bitmap);
                        qcow2_cache_mark_dirty_locked(s->l2_cache, slice);
                        c->res->corruptions_fixed++;
                    }
                }
            }
            qcow2_cache_put_locked(s->l2_cache, slice);
        }
    }
    return r;
}

/* Write a new refcount structure for the counts in refs, at the end of
 * the image, and switch the header to it. */
static int rebuild_refcounts(struct check_ctx *c)
{
    struct qcow2_state *s = c->s;
    uint64_t cs = s->cluster_size, used_end = 0;
    struct qcow2_refcount_area area;
    uint64_t *host_table = NULL;
    int r;

    for (uint64_t k = 0; k < c->refs.n; k++) {
        if (c->refs.count[k]) {
            used_end = k + 1;
        }
    }
    /* The new table and blocks sit at used_end; with leaks at the end of
     * the file the area starts (and may end) before c->refs.n, which the
     * loops after this one still walk: refs never shrinks. */
    uint64_t start = used_end;
    r = qcow2_write_new_refcounts_locked(s, &c->refs, start, "qcow2 repair", &host_table, &area);
    uint64_t table_clusters = area.table_clusters, end = area.end;
    if (r == 0) {
        r = blk_flush(s->file);
    }
    if (r == 0) {
        s->hdr.refcount_table_offset = start << s->cluster_bits;
        s->hdr.refcount_table_clusters = (uint32_t)table_clusters;
        r = qcow2_write_header_locked(s);
    }
    if (r == 0) {
        r = blk_flush(s->file);
    }
    if (r < 0) {
        free(host_table);
        return r;
    }
    /* Switch the in-memory state to the new structure. */
    for (uint32_t i = 0; i < s->reftable_entries; i++) {
        if (s->reftable[i]) {
            qcow2_cache_discard_locked(s->rb_cache, s->reftable[i], s->cluster_size);
        }
    }
    free(s->reftable);
    s->reftable = host_table;
    s->reftable_entries = (uint32_t)(table_clusters * cs / 8);
    s->reftable_offset = start << s->cluster_bits;
    s->file_end = MAX(s->file_end, end << s->cluster_bits);
    s->free_hint = 1;
    return qcow2_build_metadata_map_locked(s);
}

/* Move the stored refcount of cluster k by one step toward counted. */
static int step_refcount(struct qcow2_state *s, uint64_t k, uint64_t *stored, uint64_t counted)
{
    int delta = *stored > counted ? -1 : 1;
    int r = qcow2_update_refcount_locked(s, k << s->cluster_bits, s->cluster_size, delta);

    if (r == 0) {
        *stored = delta < 0 ? *stored - 1 : *stored + 1;
    }
    return r;
}

/* Compare counted references with the stored refcounts, as qemu does:
 * a referenced cluster whose refcount is 0 needs the refcount structure
 * rebuilt (*rebuild: done by the caller, with -r all only); any other
 * mismatch is fixed in place when the repair allows it (leaks: a leaked
 * cluster; all: a refcount too low too).  With fix false it only counts. */
static int compare_refcounts(struct check_ctx *c, enum blk_repair repair, bool fix, bool *rebuild)
{
    struct qcow2_state *s = c->s;
    int r = 0;

    *rebuild = false;
    for (uint64_t k = 0; k < c->refs.n && r == 0; k++) {
        uint64_t stored, counted = c->refs.count[k];

        r = qcow2_get_refcount_locked(s, k, &stored);
        if (r < 0) {
            report(c, "ERROR cannot read the refcount of cluster %" PRIu64 ": %s", k,
                   err_msg_or(r));
            c->res->check_errors++;
            r = 0;
            continue;
        }
        if (stored == counted) {
            continue;
        }
        bool low = stored < counted;
        *rebuild |= stored == 0;
        bool repairing =
            fix && stored != 0 && (low ? repair == BLK_REPAIR_ALL : repair != BLK_REPAIR_NONE);
        report(c, "%s cluster %" PRIu64 " refcount=%" PRIu64 " reference=%" PRIu64,
               repairing ? "Repairing"
               : low     ? "ERROR"
                         : "Leaked",
               k, stored, counted);
        while (repairing && stored != counted && r == 0) {
            r = step_refcount(s, k, &stored, counted);
        }
        bool fixed = repairing && r == 0;
        uint64_t *tally = low ? (fixed ? &c->res->corruptions_fixed : &c->res->corruptions)
                              : (fixed ? &c->res->leaks_fixed : &c->res->leaks);
        (*tally)++;
    }
    return r;
}

int qcow2_check(struct blk_node *n, enum blk_repair repair, FILE *rep, struct blk_check_result *res)
{
    struct qcow2_state *s = n->opaque;
    int64_t file_size = blk_get_length(s->file);
    struct check_ctx c = {.s = s, .res = res, .report = rep, .count_refcount_structures = true};
    bool rebuild = false;
    int r;

    memset(res, 0, sizeof *res);
    if (file_size < 0) {
        return (int)file_size;
    }
    c.refs.n = ROUND_UP((uint64_t)file_size, s->cluster_size) >> s->cluster_bits;
    c.refs.count = calloc(c.refs.n ? c.refs.n : 1, sizeof *c.refs.count);
    if (!c.refs.count) {
        return err_set(ENOMEM, "qcow2 check: %" PRIu64 " clusters", c.refs.n);
    }
    pthread_mutex_lock(&s->lock);
    r = qcow2_flush_caches_locked(s);
    if (r == 0) {
        r = count_references(&c);
    }
    /* First only look, as qemu does: a structure to rebuild decides what
     * is fixed, and how. */
    struct blk_check_result before = *res;
    if (r == 0) {
        r = compare_refcounts(&c, repair, false, &rebuild);
    }
    if (r == 0 && rebuild && repair == BLK_REPAIR_LEAKS) {
        /* as qemu-img check -r leaks: nothing is changed, the check fails */
        report(&c, "ERROR need to rebuild refcount structures");
        res->check_errors++;
        r = err_setx(EIO, "Check failed: Input/output error");
    }
    if (r == 0 && !rebuild && repair != BLK_REPAIR_NONE && (res->leaks || res->corruptions)) {
        *res = before; /* counted again, with the fixes */
        r = compare_refcounts(&c, repair, true, &rebuild);
    }
    if (r == 0 && repair == BLK_REPAIR_ALL && rebuild) {
        /* Count again without the old refcount structure, and write a
         * new one that matches. */
        memset(c.refs.count, 0, c.refs.n * sizeof *c.refs.count);
        c.count_refcount_structures = false;
        struct blk_check_result scratch = {0};
        c.res = &scratch;
        FILE *saved = c.report;
        c.report = NULL;
        r = count_references(&c);
        c.report = saved;
        c.res = res;
        if (r == 0) {
            r = rebuild_refcounts(&c);
        }
        if (r == 0) {
            report(&c, "Rebuilding refcount structure");
            res->corruptions_fixed += res->corruptions;
            res->leaks_fixed += res->leaks;
        }
    }
    if (r == 0) {
        r = check_copied_flags(&c, repair == BLK_REPAIR_ALL);
    }
    if (r == 0 && repair == BLK_REPAIR_ALL && res->corruptions == res->corruptions_fixed &&
        (s->hdr.incompatible_features & (QCOW2_INCOMPAT_CORRUPT | QCOW2_INCOMPAT_DIRTY))) {
        /* Consistent again: the image may be opened read-write. */
        s->hdr.incompatible_features &= ~(QCOW2_INCOMPAT_CORRUPT | QCOW2_INCOMPAT_DIRTY);
        s->corrupt = false;
        r = qcow2_write_header_locked(s);
    }
    if (r == 0 && repair != BLK_REPAIR_NONE) {
        r = qcow2_flush_caches_locked(s);
        if (r == 0) {
            r = blk_flush(s->file);
        }
    }
    res->total_clusters = (s->hdr.size + s->cluster_size - 1) >> s->cluster_bits;
    for (uint64_t k = 0; k < c.refs.n; k++) {
        if (c.refs.count[k]) {
            res->image_end_offset = (k + 1) << s->cluster_bits; /* as qemu-img reports it */
        }
    }
    pthread_mutex_unlock(&s->lock);
    free(c.refs.count);
    return r;
}

int qcow2_repair_refcounts(struct qcow2_state *s)
{
    struct blk_check_result res;

    return qcow2_check(s->node, BLK_REPAIR_ALL, NULL, &res);
}

int qcow2_count_references_locked(struct qcow2_state *s, uint64_t n_clusters, uint32_t **counts,
                                  uint64_t *problems)
{
    struct blk_check_result res = {0};
    struct check_ctx c = {.s = s, .res = &res};
    int r;

    c.refs.n = n_clusters;
    c.refs.count = calloc(n_clusters ? n_clusters : 1, sizeof *c.refs.count);
    if (!c.refs.count) {
        return err_set(ENOMEM, "qcow2: reference counts of %" PRIu64 " clusters", n_clusters);
    }
    r = count_references(&c);
    if (r < 0) {
        free(c.refs.count);
        return r;
    }
    *counts = c.refs.count;
    *problems = res.corruptions + res.check_errors;
    return 0;
}
