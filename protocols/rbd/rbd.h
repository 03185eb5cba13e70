/* protocols/rbd/rbd.h: the pieces of the "rbd" protocol driver.
 *
 * rbd.c opens images and serves requests, connect.c talks to the cluster
 * and turns librados/librbd errors into messages, status.c answers block
 * status from librbd's diff iteration, create.c makes and removes
 * images. */
#ifndef DISKIMG_PROTOCOLS_RBD_RBD_H
#define DISKIMG_PROTOCOLS_RBD_RBD_H

#include <pthread.h>
#include <rbd/librbd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "block/driver.h"
#include "name.h"

/* The extents of the last diff iteration (status.c), reused while no
 * write has run since. */
struct rbd_status_cache {
    pthread_mutex_t lock;
    uint64_t start, end; /* the range asked */
    uint64_t *ext;       /* data extents: offset, length pairs, sorted */
    unsigned n_ext;
    uint64_t gen;     /* write_gen when it was asked */
    uint64_t when_ms; /* and when (CLOCK_MONOTONIC) */
    bool valid;
};

struct rbd_drv {
    struct rbd_name name;
    char *label; /* the display name, escaped for messages */
    rados_t cluster;
    rados_ioctx_t io;
    rbd_image_t image;
    bool locked;       /* we hold the exclusive lock */
    bool cache;        /* librbd's write cache is on: acknowledged is not durable */
    bool whole_object; /* fast-diff: block status by whole objects */
    uint64_t object_size;
    pthread_mutex_t resize_lock; /* writes past the end grow the image (growable) */
    _Atomic uint64_t write_gen;  /* bumped by every write: stale status */
    struct rbd_status_cache status;
};

/* clients.c: Ceph clients shared by the images of a process whose names
 * configure them alike (the key).  get: one more user of a client, or
 * false; add: a new client, one user; put: one user less, shut down
 * with the last (or at once when it was never added). */
char *rbd_client_key(const struct rbd_name *n, bool direct);
bool rbd_client_get(const char *key, rados_t *out);
void rbd_client_add(const char *key, rados_t cluster);
void rbd_client_put(rados_t cluster);

/* connect.c: connect to the cluster the name points at and open its pool
 * and namespace (d->cluster, d->io); direct turns librbd's cache off. */
int rbd_connect(struct rbd_drv *d, bool direct);
void rbd_disconnect(struct rbd_drv *d);
/* A message for librados/librbd's error r (negative) during 'what' on
 * d's image; returns r. */
int rbd_error(const struct rbd_drv *d, int r, const char *what);
/* Is librbd's cache on for this image (conf, pool or image setting)? */
bool rbd_cache_enabled(struct rbd_drv *d);

/* status.c */
int rbd_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext);
void rbd_status_init(struct rbd_status_cache *c);
void rbd_status_free(struct rbd_status_cache *c);

/* info.c: object size and snapshots, for qemu-img info. */
int rbd_get_info(struct blk_node *n, struct blk_image_info *info);
int rbd_snapshot(struct blk_node *n, enum blk_snapshot_op op, const char *name);

/* create.c */
int rbd_create_node(const char *filename, const struct blk_kvlist *options, uint64_t size);
int rbd_remove_node(const char *filename, const struct blk_kvlist *options);

/* rbd.c: the name from a filename or from --image-opts keys. */
int rbd_drv_name(struct rbd_drv *d, const char *filename, const struct blk_kvlist *options);

#endif
