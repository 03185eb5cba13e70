/* protocols/rbd/loader.c: the "rbd" entry of the driver registry, in the
 * program; the driver itself (rbd.c and the files beside it) is a module,
 * diskimg-rbd.so, loaded with dlopen when an rbd image is first opened,
 * created or removed, as qemu loads block-rbd.so.
 *
 * Why a module.  A library the program links is loaded at start, and its
 * thread-local storage then sits in the static TLS block that every thread
 * of the process gets, used or not: librbd, librados and libceph-common
 * cost "diskimg serve" about 12 KB per thread and 17 MB per process
 * (measured with 200 clients, tests/interop/serve-limits.bats), and
 * their constructors run in every process.  A library loaded with dlopen gets dynamic TLS,
 * allocated only in the threads that touch it, and only processes that
 * open an rbd image load it at all.
 *
 * What stays here: the names the driver claims and the --image-opts keys
 * it takes (checked before anything is opened), so that a build whose
 * module is missing (a package split) still says what an rbd: name is.
 * The name parser (name.c) is pure and stays too: formats/ and the tests
 * use it, and the module calls it here.
 *
 * Where the module is: in the module folder, <libdir>/diskimg, found from
 * the running program's folder (/proc/self/exe) by the path from bindir
 * to it, so that an installed tree moved elsewhere (meson install
 * --destdir) finds its own module; then beside the program, which is
 * where the build tree has it (build/cmd/).  The first of the two that
 * exists is loaded, and only that one: nothing an image names, and no
 * environment variable, changes where a module comes from. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "module.h"
#include "name.h"

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

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const struct blk_driver *module_driver; /* NULL until loaded */
static char load_error[PATH_MAX + 512];        /* why it did not load */

/* The folder of the running program, or false when /proc cannot say. */
static bool program_dir(char *dir, size_t size)
{
    ssize_t len = readlink("/proc/self/exe", dir, size - 1);
    char *slash;

    if (len <= 0 || (size_t)len >= size - 1) {
        return false;
    }
    dir[len] = '\0';
    slash = strrchr(dir, '/');
    if (!slash) {
        return false;
    }
    *slash = '\0'; /* "" for a program in "/" */
    return true;
}

/* The places to look, best first: the module folder, then beside the
 * program.  Returns how many (1 or 2). */
static int module_paths(char paths[2][PATH_MAX])
{
    char dir[PATH_MAX];
    int n = 0, len;

    if (!program_dir(dir, sizeof dir)) {
        len = snprintf(paths[n], PATH_MAX, "%s/%s", DISKIMG_MODULE_DIR, RBD_MODULE_FILE);
        return len > 0 && len < PATH_MAX ? 1 : 0;
    }
#ifdef DISKIMG_MODULE_RELDIR
    /* "../lib/x86_64-linux-gnu/diskimg" from bin/: each ".." takes one
     * folder off, so messages show a plain path. */
    char base[PATH_MAX];
    const char *rel = DISKIMG_MODULE_RELDIR;
    memcpy(base, dir, sizeof base);
    while (strncmp(rel, "../", 3) == 0 && strrchr(base, '/')) {
        *strrchr(base, '/') = '\0';
        rel += 3;
    }
    len = snprintf(paths[n], PATH_MAX, "%s/%s/%s", base, rel, RBD_MODULE_FILE);
#else
    /* bindir or libdir outside the prefix: no path from one to the other */
    len = snprintf(paths[n], PATH_MAX, "%s/%s", DISKIMG_MODULE_DIR, RBD_MODULE_FILE);
#endif
    n += len > 0 && len < PATH_MAX;
    len = snprintf(paths[n], PATH_MAX, "%s/%s", dir, RBD_MODULE_FILE);
    n += len > 0 && len < PATH_MAX;
    return n;
}

/* Record why the module at path did not load (why: dlerror's text or
 * ours), escaped: the path and a library's text may hold any bytes. */
static void set_load_error(const char *path, const char *why)
{
    size_t plen = strlen(path);
    char *p, *w;

    /* dlerror starts with the file it could not open; path is said once. */
    if (strncmp(why, path, plen) == 0 && strncmp(why + plen, ": ", 2) == 0) {
        why += plen + 2;
    }
    p = str_escape(path);
    w = str_escape(why);
    snprintf(load_error, sizeof load_error, "cannot load the Ceph RBD driver module %s: %s",
             p ? p : "?", w ? w : "?");
    free(p);
    free(w);
}

/* Has the module's driver every op the registry's entry forwards to? */
static bool has_forwarded_ops(const struct blk_driver *d)
{
    return d->open && d->create_node && d->remove_node && d->set_perm && d->close && d->preadv &&
           d->pwritev && d->pwrite_zeroes && d->discard && d->flush && d->block_status &&
           d->get_length && d->truncate && d->get_info && d->snapshot && d->state_size;
}

/* A module from another build would call into this program with other
 * struct layouts: refused. */
static bool same_build(const struct rbd_module *m)
{
    static const size_t sizes[] = RBD_MODULE_SIZES;

    return m->version && strcmp(m->version, DISKIMG_VERSION) == 0 &&
           memcmp(m->sizes, sizes, sizeof sizes) == 0 && m->driver &&
           strcmp(m->driver->name, "rbd") == 0 && has_forwarded_ops(m->driver);
}

static void load_module(void)
{
    char paths[2][PATH_MAX];
    int n = module_paths(paths), pick = 0;
    void *handle;
    const struct rbd_module *m;

    if (n == 0) {
        set_load_error(DISKIMG_MODULE_DIR "/" RBD_MODULE_FILE, "path too long");
        return;
    }
    while (pick < n && access(paths[pick], F_OK) != 0) {
        pick++;
    }
    if (pick == n) {
        char why[PATH_MAX + 64];
        snprintf(why, sizeof why, "%s (nor %s)", strerror(ENOENT), paths[n - 1]);
        set_load_error(paths[0], n > 1 ? why : strerror(ENOENT));
        return;
    }
    /* RTLD_NOW: a symbol the program lacks (module.syms) fails here, not
     * in the middle of a request. */
    handle = dlopen(paths[pick], RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        set_load_error(paths[pick], dlerror());
        return;
    }
    m = dlsym(handle, RBD_MODULE_ENTRY);
    if (!m || !same_build(m)) {
        set_load_error(paths[pick], m ? "it belongs to another build of diskimg"
                                      : "not a diskimg module (no " RBD_MODULE_ENTRY ")");
        return; /* not closed: C++ libraries do not always unload cleanly */
    }
    log_debug("rbd: driver module %s loaded", paths[pick]);
    module_driver = m->driver; /* the handle stays open for the process's life */
}

/* The module's driver, loaded on first use; NULL with a message naming
 * the image (filename, or the --image-opts keys), as the driver's own
 * messages do: the display name, without options that may hold a key. */
static const struct blk_driver *rbd_module(const char *filename, const struct blk_kvlist *options)
{
    struct rbd_name name;
    char *display = NULL;

    pthread_once(&load_once, load_module);
    if (module_driver) {
        return module_driver;
    }
    if ((filename ? rbd_name_parse(filename, &name) : rbd_name_from_options(options, &name)) == 0) {
        display = rbd_name_display(&name);
    }
    rbd_name_free(&name);
    char *label = display ? str_escape(display) : NULL;
    err_setx(ENOTSUP, "%s: %s", label ? label : "rbd", load_error);
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
    const struct blk_driver *drv = rbd_module(opts->filename, opts->options);

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
    const struct blk_driver *drv = rbd_module(filename, options);

    return drv ? drv->create_node(filename, options, size) : -ENOTSUP;
}

static int rbd_loader_remove_node(const char *filename, const struct blk_kvlist *options)
{
    const struct blk_driver *drv = rbd_module(filename, options);

    return drv ? drv->remove_node(filename, options) : -ENOTSUP;
}

/* The ops of an open node: the module is loaded (open succeeded). */
static int fwd_set_perm(struct blk_node *n, const struct blk_perms *p)
{
    return module_driver->set_perm(n, p);
}

static void fwd_close(struct blk_node *n)
{
    module_driver->close(n);
}

static int fwd_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    return module_driver->preadv(n, off, iov, iovcnt);
}

static int fwd_pwritev(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt,
                       unsigned flags)
{
    return module_driver->pwritev(n, off, iov, iovcnt, flags);
}

static int fwd_pwrite_zeroes(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    return module_driver->pwrite_zeroes(n, off, len, flags);
}

static int fwd_discard(struct blk_node *n, uint64_t off, uint64_t len, unsigned flags)
{
    return module_driver->discard(n, off, len, flags);
}

static int fwd_flush(struct blk_node *n)
{
    return module_driver->flush(n);
}

static int fwd_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    return module_driver->block_status(n, off, len, ext);
}

static int64_t fwd_get_length(struct blk_node *n)
{
    return module_driver->get_length(n);
}

static int fwd_truncate(struct blk_node *n, uint64_t len)
{
    return module_driver->truncate(n, len);
}

static int fwd_get_info(struct blk_node *n, struct blk_image_info *info)
{
    return module_driver->get_info(n, info);
}

static int fwd_snapshot(struct blk_node *n, enum blk_snapshot_op op, const char *name)
{
    return module_driver->snapshot(n, op, name);
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
