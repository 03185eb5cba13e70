/* protocols/rbd/loader.c: the "rbd" entry of the driver registry, in the
 * program; the driver itself (rbd.c and the files beside it) is a module,
 * diskimg-rbd.so, loaded when an rbd image is first opened, created or
 * removed (protocols/module.h says why and where from).  librbd, librados
 * and libceph-common, linked into the program, cost "diskimg serve" 17 MB
 * per process and 12 KB per thread, rbd image or not.
 *
 * What stays here: the names the driver claims and the --image-opts keys
 * it takes (checked before anything is opened), so that a build whose
 * module is missing (a package split) still says what an rbd: name is.
 * The name parser (name.c) is pure and stays too: formats/ and the tests
 * use it, and the module calls it here. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/escape.h"
#include "name.h"
#include "protocols/module.h"

/* --image-opts keys (qemu's spellings), read by the module's open from
 * the options; ignored when a name is given. */
static const struct blk_opt_desc rbd_options[] = {
    {.key = "pool", .type = BLK_OPT_STRING},
    {.key = "namespace", .type = BLK_OPT_STRING},
    {.key = "image", .type = BLK_OPT_STRING},
    {.key = "snapshot", .type = BLK_OPT_STRING},
    {.key = "conf", .type = BLK_OPT_STRING},
    {.key = "user", .type = BLK_OPT_STRING},
    {NULL},
};

/* Has the module's driver every op the registry's entry forwards to? */
static bool has_forwarded_ops(const struct blk_driver *d)
{
    return d->open && d->create_node && d->remove_node && d->set_perm && d->close && d->preadv &&
           d->pwritev && d->pwrite_zeroes && d->discard && d->flush && d->block_status &&
           d->get_length && d->truncate && d->get_info && d->snapshot;
}

static struct proto_module rbd_module = PROTO_MODULE_INIT("rbd", "Ceph RBD", has_forwarded_ops);

/* The module's driver, loaded on first use; NULL with a message naming
 * the image (filename, or the --image-opts keys), as the driver's own
 * messages do: the display name, without options that may hold a key. */
static const struct blk_driver *rbd_module_driver(const char *filename,
                                                  const struct blk_kvlist *options)
{
    struct rbd_name name;
    char *display = NULL;

    if (proto_module_load(&rbd_module)) {
        return rbd_module.driver;
    }
    if ((filename ? rbd_name_parse(filename, &name) : rbd_name_from_options(options, &name)) == 0) {
        display = rbd_name_display(&name);
    }
    rbd_name_free(&name);
    char *label = display ? str_escape(display) : NULL;
    err_setx(ENOTSUP, "%s: %s", label ? label : "rbd", rbd_module.error);
    free(label);
    free(display);
    return NULL;
}

static bool rbd_loader_claims(const char *filename)
{
    return rbd_name_is(filename);
}

/* The module's driver's state becomes the node's: every op below hands
 * the node to the module's op as it is. */
static int rbd_loader_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    const struct blk_driver *drv = rbd_module_driver(opts->filename, opts->options);

    if (!drv) {
        return -ENOTSUP;
    }
    n->opaque = calloc(1, drv->state_size);
    if (!n->opaque) {
        return err_set(ENOMEM, "rbd");
    }
    return drv->open(n, opts);
}

static int rbd_loader_create_node(const char *filename, const struct blk_kvlist *options,
                                  uint64_t size)
{
    const struct blk_driver *drv = rbd_module_driver(filename, options);

    return drv ? drv->create_node(filename, options, size) : -ENOTSUP;
}

static int rbd_loader_remove_node(const char *filename, const struct blk_kvlist *options)
{
    const struct blk_driver *drv = rbd_module_driver(filename, options);

    return drv ? drv->remove_node(filename, options) : -ENOTSUP;
}

/* The ops of an open node: the module is loaded (open succeeded). */
static int fwd_set_perm(struct blk_node *n, const struct blk_perms *p)
{
    return rbd_module.driver->set_perm(n, p);
}

static void fwd_close(struct blk_node *n)
{
    rbd_module.driver->close(n);
}

static int fwd_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    return rbd_module.driver->preadv(n, off, iov, iovcnt);
}

static int fwd_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                       unsigned flags)
{
    return rbd_module.driver->pwritev(n, off, iov, iovcnt, flags);
}

static int fwd_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    return rbd_module.driver->pwrite_zeroes(n, off, len, flags);
}

static int fwd_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    return rbd_module.driver->discard(n, off, len, flags);
}

static int fwd_flush(struct blk_node *n)
{
    return rbd_module.driver->flush(n);
}

static int fwd_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    return rbd_module.driver->block_status(n, off, len, ext);
}

static int64_t fwd_get_length(struct blk_node *n)
{
    return rbd_module.driver->get_length(n);
}

static int fwd_truncate(struct blk_node *n, uint64_t len)
{
    return rbd_module.driver->truncate(n, len);
}

static int fwd_get_info(struct blk_node *n, struct blk_image_info *info)
{
    return rbd_module.driver->get_info(n, info);
}

static int fwd_snapshot(struct blk_node *n, enum blk_snapshot_op op, const char *name)
{
    return rbd_module.driver->snapshot(n, op, name);
}

/* Every op the module's driver has (rbd.c), so that what the generic
 * layer asks of the registry's entry before anything is loaded (can it
 * write? does it make its own images?) is what the driver answers. */
static const struct blk_driver rbd_loader_driver = {
    .name = "rbd",
    .claims = rbd_loader_claims,
    .names_help = "Ceph RBD images (rbd:POOL/IMAGE)",
    .options = rbd_options,
    .open = rbd_loader_open,
    .create_node = rbd_loader_create_node,
    .remove_node = rbd_loader_remove_node,
    .set_perm = fwd_set_perm,
    .close = fwd_close,
    .preadv = fwd_preadv,
    .pwritev = fwd_pwritev,
    .pwrite_zeroes = fwd_pwrite_zeroes,
    .discard = fwd_discard,
    .flush = fwd_flush,
    .block_status = fwd_block_status,
    .get_length = fwd_get_length,
    .truncate = fwd_truncate,
    .get_info = fwd_get_info,
    .snapshot = fwd_snapshot,
};

BLK_REGISTER_DRIVER(rbd_loader_driver)
