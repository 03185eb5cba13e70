/* protocols/rbd/name.h: Ceph RBD image names, as qemu spells them.
 *
 *   rbd:POOL[/NAMESPACE]/IMAGE[@SNAP][:KEY=VALUE...]
 *
 * A backslash escapes the next character ("\:", "\@", "\/", "\="), so
 * names and values may hold the separators.  Keys: conf= (a ceph.conf to
 * read instead of the default search), id= (the client name, without
 * "client."), and any other Ceph option, handed to rados_conf_set as
 * qemu does; auth_supported= is spelled auth_client_required there.
 *
 * A name can come from an image (a qcow2's backing file), so the parser
 * is pure, takes any bytes, and is fuzzed (tests/fuzz/fuzz-rbd-name.c). */
#ifndef DISKIMG_PROTOCOLS_RBD_NAME_H
#define DISKIMG_PROTOCOLS_RBD_NAME_H

#include <stdbool.h>
#include <stddef.h>

#include "block/block.h"

#define RBD_NAME_MAX_KEYS 32

struct rbd_name {
    char *pool;
    char *ns; /* "" for the default namespace */
    char *image;
    char *snap; /* NULL: the image itself (writable) */
    char *conf; /* NULL: the default search (CEPH_CONF, /etc/ceph/ceph.conf) */
    char *user; /* NULL: Ceph's default (admin) */
    /* Other Ceph options, in the order given (later ones win). */
    unsigned n_keys;
    char *keys[RBD_NAME_MAX_KEYS];
    char *values[RBD_NAME_MAX_KEYS];
};

/* Does filename name an RBD image (starts with "rbd:")? */
bool rbd_name_is(const char *filename);

/* Split filename into out (zeroed first); -EINVAL with a message (err_set)
 * naming the problem: no pool, no image, an option without a value, too
 * many options.  rbd_name_free releases out in every case. */
int rbd_name_parse(const char *filename, struct rbd_name *out);

/* The same from --image-opts keys (pool, namespace, image, snapshot, conf,
 * user): -EINVAL with a message when pool or image is missing. */
int rbd_name_from_options(const struct blk_kvlist *options, struct rbd_name *out);

/* "rbd:POOL[/NS]/IMAGE[@SNAP]" with separators escaped, for messages and
 * as a node's name (options, which may hold secrets, left out);
 * malloc'd, NULL when out of memory. */
char *rbd_name_display(const struct rbd_name *n);

void rbd_name_free(struct rbd_name *n);

#endif
