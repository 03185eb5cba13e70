/* nbd/read-cover.c: the bytes of a READ its reply's chunks covered (see
 * read-cover.h).  The common case, chunks in order, extends the last
 * piece in O(1); a chunk out of order is placed by binary search. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "read-cover.h"

void nbd_cover_reset(struct nbd_cover *c, uint64_t start, uint64_t len)
{
    c->start = start;
    c->len = len;
    c->covered = 0;
    c->n = 0;
}

void nbd_cover_free(struct nbd_cover *c)
{
    free(c->pieces);
    c->pieces = NULL;
    c->n = c->cap = 0;
}

/* The index of the first piece that starts after off. */
static uint32_t first_after(const struct nbd_cover *c, uint64_t off)
{
    uint32_t lo = 0, hi = c->n;

    if (c->n && c->pieces[c->n - 1].off <= off) {
        return c->n; /* in order: after the last piece */
    }
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->pieces[mid].off <= off) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static int insert_at(struct nbd_cover *c, uint32_t i, uint64_t off, uint64_t end)
{
    if (c->n == NBD_COVER_MAX_PIECES) {
        return -E2BIG;
    }
    if (c->n == c->cap) {
        uint32_t cap = c->cap ? 2 * c->cap : 8;
        struct nbd_cover_piece *p = realloc(c->pieces, cap * sizeof *p);
        if (!p) {
            return -ENOMEM;
        }
        c->pieces = p;
        c->cap = cap;
    }
    memmove(&c->pieces[i + 1], &c->pieces[i], (c->n - i) * sizeof *c->pieces);
    c->pieces[i] = (struct nbd_cover_piece){off, end};
    c->n++;
    return 0;
}

int nbd_cover_add(struct nbd_cover *c, uint64_t off, uint64_t len)
{
    if (len == 0) {
        return -EINVAL;
    }
    if (off < c->start || off - c->start > c->len || len > c->len - (off - c->start)) {
        return -ERANGE;
    }
    uint64_t end = off + len; /* no overflow: inside the request */
    uint32_t i = first_after(c, off);
    struct nbd_cover_piece *prev = i > 0 ? &c->pieces[i - 1] : NULL;
    struct nbd_cover_piece *next = i < c->n ? &c->pieces[i] : NULL;

    if ((prev && prev->end > off) || (next && next->off < end)) {
        return -EEXIST;
    }
    if (prev && prev->end == off && next && next->off == end) {
        prev->end = next->end; /* fills the gap between two pieces */
        memmove(next, next + 1, (c->n - i - 1) * sizeof *next);
        c->n--;
    } else if (prev && prev->end == off) {
        prev->end = end;
    } else if (next && next->off == end) {
        next->off = off;
    } else {
        int r = insert_at(c, i, off, end);
        if (r < 0) {
            return r;
        }
    }
    c->covered += len;
    return 0;
}
