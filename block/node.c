/* block/node.c: opening and closing nodes, and the node accessors.  What a
 * node may do is decided by its driver's open; the checks and emulation
 * that apply to every node are in io.c and flush.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "driver.h"

int blk_node_open(struct blk_node **out, const struct blk_driver *drv, struct blk_node *child,
                  const struct blk_open_opts *opts)
{
    struct blk_node *n = calloc(1, sizeof *n);
    int r;

    if (!n) {
        blk_node_close(child);
        return err_set(ENOMEM, "allocating a %s node", drv->name);
    }
    n->drv = drv;
    n->file = child;
    n->read_only = opts->read_only;
    n->request_alignment = 1;
    n->zero_alignment = 1;
    n->mem_alignment = 1;
    /* A protocol opened from its option keys alone (no filename) names
     * itself in open; a format is named after its file. */
    const char *name = opts->filename ? opts->filename : child ? child->filename : NULL;
    n->filename = name ? strdup(name) : NULL;
    pthread_mutex_init(&n->flush_lock, NULL);
    pthread_rwlock_init(&n->rmw_lock, NULL);
    if (drv->state_size) {
        n->opaque = calloc(1, drv->state_size);
    }
    if ((name && !n->filename) || (drv->state_size && !n->opaque)) {
        r = err_set(ENOMEM, "allocating a %s node", drv->name);
        goto fail;
    }
    r = drv->open(n, opts);
    if (r == 0 && !n->filename && !(n->filename = strdup(drv->name))) {
        r = err_set(ENOMEM, "allocating a %s node", drv->name);
    }
    if (r < 0) {
        goto fail;
    }
    *out = n;
    return 0;

fail:
    n->drv = NULL; /* open failed: close must not run the driver's close */
    blk_node_close(n);
    return r;
}

void blk_node_close(struct blk_node *n)
{
    if (!n) {
        return;
    }
    if (n->drv && n->drv->close) {
        n->drv->close(n);
    }
    blk_node_close(n->file);
    pthread_mutex_destroy(&n->flush_lock);
    pthread_rwlock_destroy(&n->rmw_lock);
    free(n->opaque);
    free(n->filename);
    free(n);
}

const char *blk_node_driver_name(const struct blk_node *n)
{
    return n->drv->name;
}

const char *blk_node_filename(const struct blk_node *n)
{
    return n->filename;
}

struct blk_node *blk_node_child(const struct blk_node *n)
{
    return n->file;
}

void blk_trace(const struct blk_node *n, const char *op, uint64_t off, uint64_t len, unsigned flags)
{
    if (!debug_block_trace) {
        return;
    }
    log_msg(LOG_LEVEL_DEBUG, "block: %s node=%s off=%" PRIu64 " len=%" PRIu64 " flags=%s%s%s%s", op,
            n->drv->name, off, len, flags ? "" : "0", (flags & BLK_REQ_FUA) ? "FUA," : "",
            (flags & BLK_REQ_MAY_UNMAP) ? "MAY_UNMAP," : "",
            (flags & BLK_REQ_NO_FALLBACK) ? "NO_FALLBACK," : "");
}
