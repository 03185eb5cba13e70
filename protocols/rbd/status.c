/* protocols/rbd/status.c: block status from librbd's diff iteration.
 *
 * rbd_diff_iterate2 from no snapshot lists the extents that hold data,
 * including those a clone reads from its parent.  With fast-diff (the
 * object map) it answers from the map without reading the objects, but
 * only by whole objects (whole_object); without it librbd asks every
 * object for its extents.  Either way data extents may be coarser than
 * what was written (a 4 KiB write makes its object data from offset 0 to
 * the object's size: reference P13); that is allowed, holes are what
 * matters: a range the iteration does not name reads as zeroes.
 *
 * One iteration covers a window of the image (at least WINDOW bytes), and
 * its extents answer further calls until a write, zero, discard or resize
 * runs (write_gen), so a convert asks the cluster once per window.  Only
 * this node's writes are seen that way: where other clients may write
 * (an image opened without the exclusive lock, not a snapshot) the
 * answer is kept for OTHERS_MS at most, so a reader of a live image
 * sees their new data within that time. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "rbd.h"

#define WINDOW (256ull << 20)
#define OTHERS_MS 1000
#define MAX_WINDOW (4ull << 30)

void rbd_status_init(struct rbd_status_cache *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
}

void rbd_status_free(struct rbd_status_cache *c)
{
    free(c->ext);
    c->ext = NULL;
    pthread_mutex_destroy(&c->lock);
}

struct collect {
    uint64_t *ext;
    unsigned n, cap;
};

/* Called by librbd for each extent, in order: keep the ones with data,
 * merging neighbours. */
static int collect_extent(uint64_t off, size_t len, int exists, void *opaque)
{
    struct collect *c = opaque;

    if (!exists || len == 0) {
        return 0;
    }
    if (c->n > 0 && c->ext[2 * (c->n - 1)] + c->ext[2 * (c->n - 1) + 1] == off) {
        c->ext[2 * (c->n - 1) + 1] += len;
        return 0;
    }
    if (c->n == c->cap) {
        unsigned cap = c->cap ? 2 * c->cap : 64;
        uint64_t *e = realloc(c->ext, sizeof *e * 2 * cap);
        if (!e) {
            return -ENOMEM;
        }
        c->ext = e;
        c->cap = cap;
    }
    c->ext[2 * c->n] = off;
    c->ext[2 * c->n + 1] = len;
    c->n++;
    return 0;
}

/* Answer for off from extents of [start, end) that contain off. */
static void answer(const uint64_t *ext, unsigned n, uint64_t end, uint64_t off, uint64_t len,
                   struct blk_extent *out)
{
    uint64_t stop = MIN(off + len, end);

    out->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
    out->length = stop - off;
    for (unsigned i = 0; i < n; i++) {
        uint64_t s = ext[2 * i], e = s + ext[2 * i + 1];
        if (e <= off) {
            continue;
        }
        if (s <= off) {
            out->flags = BLK_EXT_DATA | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
            out->length = MIN(e, stop) - off;
        } else {
            out->length = MIN(s, stop) - off; /* a hole up to the next data */
        }
        break;
    }
}

static uint64_t now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Can another client change the image under us? */
static bool others_write(const struct rbd_drv *d)
{
    return !d->locked && !d->name.snap;
}

static bool from_cache(struct rbd_drv *d, uint64_t gen, uint64_t off, uint64_t len,
                       struct blk_extent *ext)
{
    struct rbd_status_cache *c = &d->status;

    if (!c->valid || gen != c->gen || off < c->start || off >= c->end) {
        return false;
    }
    if (others_write(d) && now_ms() - c->when_ms > OTHERS_MS) {
        return false;
    }
    answer(c->ext, c->n_ext, c->end, off, len, ext);
    return true;
}

int rbd_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    struct rbd_drv *d = n->opaque;
    struct rbd_status_cache *c = &d->status;
    uint64_t size = 0, gen = atomic_load(&d->write_gen);
    struct collect col = {0};
    int r;

    memset(ext, 0, sizeof *ext);
    ext->offset = off;
    ext->depth = 1;
    ext->filename = n->filename;
    pthread_mutex_lock(&c->lock);
    bool hit = from_cache(d, gen, off, len, ext);
    pthread_mutex_unlock(&c->lock);
    if (hit) {
        return 0;
    }
    r = rbd_get_size(d->image, &size);
    if (r < 0) {
        return rbd_error(d, r, "reading the size");
    }
    if (off >= size) {
        ext->flags = BLK_EXT_ZERO | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET;
        ext->length = len;
        return 0;
    }
    uint64_t obj = d->object_size ? d->object_size : 1;
    uint64_t start = off - off % obj;
    uint64_t end = MIN(size, start + MIN(MAX(len + (off - start), WINDOW), MAX_WINDOW));
    uint64_t asked_ms = now_ms();
    r = rbd_diff_iterate2(d->image, NULL, start, end - start, 1, d->whole_object, collect_extent,
                          &col);
    if (r < 0) {
        free(col.ext);
        return rbd_error(d, r, "reading block status (diff iteration)");
    }
    answer(col.ext, col.n, end, off, len, ext);
    pthread_mutex_lock(&c->lock);
    free(c->ext);
    c->ext = col.ext;
    c->n_ext = col.n;
    c->start = start;
    c->end = end;
    /* Kept only if no write ran meanwhile (it could be missing). */
    c->valid = atomic_load(&d->write_gen) == gen;
    c->gen = gen;
    c->when_ms = asked_ms;
    pthread_mutex_unlock(&c->lock);
    return 0;
}
