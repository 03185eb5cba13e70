/* block/flush.c: making completed writes durable, cheaply.
 *
 * Each node counts completed writes, zeroes, discards and truncates
 * (write_gen) and remembers how many a finished flush covered
 * (flushed_gen).  One flush runs per node at a time; a caller that waited
 * behind a flush which already covered its writes returns without
 * flushing again, so N concurrent emulated-FUA writes cost about one
 * fdatasync, not N.
 *
 * A format with nothing of its own to write back (raw: no flush op) passes
 * the flush straight down, without taking its lock: serialising there
 * would hide concurrent callers from the file's coalescing, and N
 * emulated-FUA writes would cost N fdatasyncs again.
 *
 * cache=unsafe sets no_flush on protocol nodes: their flush is skipped,
 * while format nodes still write their caches back (qemu's BDRV_O_NO_FLUSH). */
#include <stdatomic.h>

#include "common/cleanup.h"
#include "driver.h"

int blk_flush(struct blk_node *n)
{
    uint64_t mine = atomic_load_explicit(&n->write_gen, memory_order_acquire);
    int r = 0;

    if (n->no_flush && !n->drv->is_format) {
        atomic_fetch_add_explicit(&n->stats.flushes_skipped, 1, memory_order_relaxed);
        return 0;
    }
    if (n->drv->is_format && !n->drv->flush) {
        return n->file ? blk_flush(n->file) : 0;
    }
    LOCK_GUARD(&n->flush_lock);
    if (n->flushed_gen >= mine && !n->drv->is_format) {
        /* Covered by the flush we waited for.  Formats always write their
         * caches back: metadata changes do not bump write_gen. */
        atomic_fetch_add_explicit(&n->stats.flushes_shared, 1, memory_order_relaxed);
        return 0;
    }
    uint64_t covered = atomic_load_explicit(&n->write_gen, memory_order_acquire);
    blk_trace(n, "flush", 0, 0, 0);
    if (n->drv->flush) {
        r = n->drv->flush(n);
        if (r == 0) {
            atomic_fetch_add_explicit(&n->stats.flushes, 1, memory_order_relaxed);
        }
    }
    if (r == 0 && n->file) {
        r = blk_flush(n->file);
    }
    if (r == 0) {
        n->flushed_gen = covered;
    }
    return r;
}
