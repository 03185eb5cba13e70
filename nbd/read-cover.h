/* nbd/read-cover.h: which bytes of a READ request the chunks of a
 * structured reply have covered, for the client (client.c).  A server
 * may send OFFSET_DATA and OFFSET_HOLE chunks in any order, but each
 * byte of the request exactly once: a chunk outside the request, one
 * that overlaps or repeats an earlier one, and a reply that ends with
 * bytes never sent are protocol violations (without these checks a
 * hostile server could make the client use buffer contents it never
 * sent).  Pure: no I/O, no globals; unit-tested in
 * tests/unit/test-read-cover.c. */
#ifndef DISKIMG_NBD_READ_COVER_H
#define DISKIMG_NBD_READ_COVER_H

#include <stdbool.h>
#include <stdint.h>

/* Disjoint pieces kept before a reply counts as too fragmented (a server
 * sends its chunks in order, which merge into one piece; only chunks
 * scattered out of order make pieces). */
#define NBD_COVER_MAX_PIECES 4096

struct nbd_cover_piece {
    uint64_t off, end; /* [off, end) */
};

struct nbd_cover {
    uint64_t start, len; /* the request */
    uint64_t covered;    /* bytes covered so far */
    /* Sorted, disjoint and never touching (touching pieces merge). */
    struct nbd_cover_piece *pieces;
    uint32_t n, cap;
};

/* Start over for a request of len bytes at start (keeps the memory). */
void nbd_cover_reset(struct nbd_cover *c, uint64_t start, uint64_t len);
void nbd_cover_free(struct nbd_cover *c);

/* Record a chunk [off, off + len).  Returns 0, or (nothing recorded):
 * -EINVAL for an empty chunk, -ERANGE for one not inside the request,
 * -EEXIST for one that overlaps bytes already covered, -E2BIG when the
 * reply is too fragmented, -ENOMEM. */
int nbd_cover_add(struct nbd_cover *c, uint64_t off, uint64_t len);

/* Every byte of the request was covered. */
static inline bool nbd_cover_full(const struct nbd_cover *c)
{
    return c->covered == c->len;
}

#endif
