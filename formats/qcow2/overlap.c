/* formats/qcow2/overlap.c: the metadata map, every host range that holds
 * metadata, so that no guest write and no table of another kind lands on
 * the header or a table (a hostile image may point anything anywhere).
 *
 * Each owner registers its own ranges (header here; L1 and L2 in cluster.c,
 * refcounts in refcount.c, snapshots and bitmaps in their files) and drops
 * them when it frees them.  This file knows no owner and calls no other
 * qcow2 file: it sits just above cache.c (order: qcow2.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "qcow2.h"

/* Index of the first range that ends after off. */
static size_t meta_first_end_after(const struct qcow2_state *s, uint64_t off)
{
    size_t lo = 0, hi = s->n_meta;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->meta[mid].end <= off) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

bool qcow2_overlaps_metadata_locked(const struct qcow2_state *s, uint64_t off, uint64_t len)
{
    size_t i = meta_first_end_after(s, off);

    return i < s->n_meta && s->meta[i].start < off + len;
}

bool qcow2_overlaps_metadata_other_locked(const struct qcow2_state *s, uint64_t off, uint64_t len,
                                          enum qcow2_meta_kind own)
{
    for (size_t i = meta_first_end_after(s, off); i < s->n_meta && s->meta[i].start < off + len;
         i++) {
        if (s->meta[i].kind != own) {
            return true;
        }
    }
    return false;
}

int qcow2_add_metadata_locked(struct qcow2_state *s, uint64_t off, uint64_t len,
                              enum qcow2_meta_kind kind)
{
    size_t i = meta_first_end_after(s, off);

    if (i < s->n_meta && s->meta[i].start < off + len) {
        return err_setx(EINVAL, "qcow2: metadata at 0x%" PRIx64 " overlaps metadata at 0x%" PRIx64,
                        off, s->meta[i].start);
    }
    if (s->n_meta == s->cap_meta) {
        size_t cap = s->cap_meta ? s->cap_meta * 2 : 64;
        struct qcow2_range *m = realloc(s->meta, cap * sizeof *m);
        if (!m) {
            return err_set(ENOMEM, "qcow2: metadata map");
        }
        s->meta = m;
        s->cap_meta = cap;
    }
    memmove(&s->meta[i + 1], &s->meta[i], (s->n_meta - i) * sizeof *s->meta);
    s->meta[i] = (struct qcow2_range){off, off + len, kind};
    s->n_meta++;
    return 0;
}

void qcow2_remove_metadata_locked(struct qcow2_state *s, uint64_t off, uint64_t len)
{
    size_t i = meta_first_end_after(s, off);

    while (i < s->n_meta && s->meta[i].start < off + len) {
        if (s->meta[i].start >= off && s->meta[i].end <= off + len) {
            memmove(&s->meta[i], &s->meta[i + 1], (s->n_meta - i - 1) * sizeof *s->meta);
            s->n_meta--;
        } else {
            i++;
        }
    }
}

int qcow2_reset_metadata_locked(struct qcow2_state *s)
{
    s->n_meta = 0;
    return qcow2_add_metadata_locked(s, 0, s->cluster_size, QCOW2_META_HEADER);
}
