/* protocols/rbd/connect.c: reaching the cluster of an rbd: image.
 *
 * The order is qemu's: the client name (id=), the configuration file
 * (conf=, else Ceph's default search: $CEPH_CONF, /etc/ceph/ceph.conf),
 * then the name's other options, which may override what the file says.
 * Unlike qemu, a dead cluster is an error within a bounded time: unless
 * the configuration chose its own client_mount_timeout, connecting waits
 * CONNECT_TIMEOUT_S, not Ceph's 300 s. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/escape.h"
#include "rbd.h"

#define CONNECT_TIMEOUT_S "20"
#define CEPH_DEFAULT_MOUNT_TIMEOUT 300.0

/* Ceph's own words for the reason, where they help more than strerror. */
static const char *reason(int r)
{
    switch (-r) {
    case EACCES:
    case EPERM:
        return "permission denied (wrong key or user, or the user's caps do not allow it)";
    case ETIMEDOUT: /* connected: an OSD request, under rados_osd_op_timeout */
        return "timed out (is an OSD down? rados_osd_op_timeout is set)";
    case ESHUTDOWN: /* Ceph's EBLOCKLISTED */
        return "this client was blocklisted by the cluster";
    default:
        return strerror(-r);
    }
}

int rbd_error(const struct rbd_drv *d, int r, const char *what)
{
    return err_setx(-r, "%s: %s: %s", d->label, what, reason(r));
}

static int conf_set(struct rbd_drv *d, const char *key, const char *value)
{
    int r = rados_conf_set(d->cluster, key, value);

    if (r < 0) {
        char *k = str_escape(key);
        r = err_setx(EINVAL, "%s: invalid Ceph option '%s': %s", d->label, k ? k : "?",
                     strerror(-r));
        free(k);
    }
    return r;
}

/* A configuration that says nothing about it connects for at most
 * CONNECT_TIMEOUT_S. */
static int bound_timeout(struct rbd_drv *d)
{
    char buf[64];

    if (rados_conf_get(d->cluster, "client_mount_timeout", buf, sizeof buf) == 0 &&
        strtod(buf, NULL) == CEPH_DEFAULT_MOUNT_TIMEOUT) {
        return conf_set(d, "client_mount_timeout", CONNECT_TIMEOUT_S);
    }
    return 0;
}

/* With an OSD op timeout, librbd's cache loses writes: it acknowledges a
 * write at once (the default writearound policy), drops it when the OSD
 * request times out, and a flush after that succeeds.  Such a client
 * writes through, so that a write that timed out fails itself. */
static int cache_off_with_op_timeout(struct rbd_drv *d)
{
    char buf[64];

    if (rados_conf_get(d->cluster, "rados_osd_op_timeout", buf, sizeof buf) == 0 &&
        strtod(buf, NULL) > 0) {
        return conf_set(d, "rbd_cache", "false");
    }
    return 0;
}

static int configure(struct rbd_drv *d, bool direct)
{
    const struct rbd_name *nm = &d->name;
    int r;

    r = rados_conf_read_file(d->cluster, nm->conf);
    if (r < 0 && nm->conf) {
        char *c = str_escape(nm->conf);
        r = err_setx(-r, "%s: cannot read Ceph configuration file %s: %s", d->label, c ? c : "?",
                     strerror(-r));
        free(c);
        return r;
    }
    for (unsigned i = 0; i < nm->n_keys; i++) {
        if ((r = conf_set(d, nm->keys[i], nm->values[i])) < 0) {
            return r;
        }
    }
    /* cache=none/directsync: no client-side cache, as qemu does. */
    if (direct && (r = conf_set(d, "rbd_cache", "false")) < 0) {
        return r;
    }
    if ((r = cache_off_with_op_timeout(d)) < 0) {
        return r;
    }
    return bound_timeout(d);
}

static int open_pool(struct rbd_drv *d)
{
    int r = rados_ioctx_create(d->cluster, d->name.pool, &d->io);

    if (r == -ENOENT) {
        char *p = str_escape(d->name.pool);
        r = err_setx(ENOENT, "%s: pool '%s' does not exist", d->label, p ? p : "?");
        free(p);
        return r;
    }
    if (r < 0) {
        return rbd_error(d, r, "opening the pool");
    }
    rados_ioctx_set_namespace(d->io, d->name.ns);
    if (d->name.ns[0]) {
        bool exists = false;
        r = rbd_namespace_exists(d->io, d->name.ns, &exists);
        if (r < 0) {
            return rbd_error(d, r, "looking up the namespace");
        }
        if (!exists) {
            char *ns = str_escape(d->name.ns);
            r = err_setx(ENOENT, "%s: namespace '%s' does not exist", d->label, ns ? ns : "?");
            free(ns);
            return r;
        }
    }
    return 0;
}

/* A new client for d's name (configured, connected). */
static int new_client(struct rbd_drv *d, bool direct)
{
    int r = rados_create(&d->cluster, d->name.user);

    if (r < 0) {
        d->cluster = NULL;
        return rbd_error(d, r, "creating the Ceph client");
    }
    r = configure(d, direct);
    if (r < 0) {
        return r;
    }
    r = rados_connect(d->cluster);
    if (r == -ENOENT) {
        return err_setx(ENOENT,
                        "%s: no Ceph monitors to connect to (no ceph.conf found: set CEPH_CONF "
                        "or conf=, or give mon_host=)",
                        d->label);
    }
    if (r == -ETIMEDOUT) {
        return err_setx(ETIMEDOUT,
                        "%s: connecting to the Ceph cluster: timed out (are the monitors in "
                        "mon_host reachable?)",
                        d->label);
    }
    if (r < 0) {
        return rbd_error(d, r, "connecting to the Ceph cluster");
    }
    return 0;
}

int rbd_connect(struct rbd_drv *d, bool direct)
{
    char *key = rbd_client_key(&d->name, direct);
    int r = 0;

    if (!key) {
        return err_set(ENOMEM, "%s", d->label);
    }
    if (!rbd_client_get(key, &d->cluster)) {
        r = new_client(d, direct);
        if (r == 0) {
            rbd_client_add(key, d->cluster);
        }
    }
    free(key);
    return r < 0 ? r : open_pool(d);
}

void rbd_disconnect(struct rbd_drv *d)
{
    if (d->io) {
        rados_ioctx_destroy(d->io);
        d->io = NULL;
    }
    if (d->cluster) {
        rbd_client_put(d->cluster);
        d->cluster = NULL;
    }
}

static bool is_true(const char *s)
{
    return strcmp(s, "true") == 0 || strcmp(s, "1") == 0;
}

/* librbd's rbd_cache comes from the configuration, overridden by the
 * pool's and then the image's "conf_rbd_cache" setting (rbd config pool
 * set / rbd config image set).  When in doubt, the cache is on: FUA is
 * then emulated by a flush, which is always correct. */
bool rbd_cache_enabled(struct rbd_drv *d)
{
    char buf[64];
    size_t len = sizeof buf;
    bool on = true;

    if (rados_conf_get(d->cluster, "rbd_cache", buf, sizeof buf) == 0) {
        on = is_true(buf);
    }
    if (rbd_pool_metadata_get(d->io, "conf_rbd_cache", buf, &len) == 0) {
        on = is_true(buf);
    }
    len = sizeof buf;
    if (d->image && rbd_metadata_get(d->image, "conf_rbd_cache", buf, &len) == 0) {
        on = is_true(buf);
    }
    return on;
}
