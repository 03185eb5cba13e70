/* protocols/module.h: protocol drivers built as modules, loaded with
 * dlopen when an image of theirs is first used (module.c), as qemu loads
 * block-rbd.so and block-curl.so.
 *
 * Why.  A library the program links is loaded at start: its thread-local
 * storage sits in the static TLS block that every thread of the process
 * gets, and its start-up code and relocated data cost every process,
 * whether an image of its protocol is used or not.  Measured: librbd,
 * librados and libceph-common cost "diskimg serve" 17 MB per process and
 * 12 KB per thread (tests/interop/serve-limits.bats), libcurl and the 18
 * libraries it brings 2.7 MB per process and 5 ms per run (an info of a
 * local file: 8.1 ms against 3.1 ms).  A library loaded with dlopen gets
 * dynamic TLS, allocated only in the threads that touch it.
 *
 * How.  The module diskimg-NAME.so exports one symbol, diskimg_NAME_module,
 * a struct proto_module_entry.  Everything else it calls in the program
 * is listed in protocols/module.syms, the program's dynamic symbol list.
 * The program keeps the driver's registry entry (NAME/loader.c): the
 * names it claims, its options, and forwarders to every op, which call
 * the module's driver once an open, create_node or remove_node has loaded
 * it.  A module has no stable interface: it must come from the same build
 * as the program, which the loader checks (version, struct sizes).
 *
 * Where.  The module folder, <libdir>/diskimg, found from the running
 * program's folder (/proc/self/exe) by the path from bindir to it, so
 * that an installed tree moved elsewhere (meson install --destdir) loads
 * its own modules; then beside the program, which is where the build
 * tree has them (build/cmd/).  The first of the two that exists is
 * loaded, and only that one: nothing an image names, and no environment
 * variable, changes where a module comes from. */
#ifndef DISKIMG_PROTOCOLS_MODULE_H
#define DISKIMG_PROTOCOLS_MODULE_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "block/driver.h"

/* What a module exports, as diskimg_NAME_module. */
struct proto_module_entry {
    const char *version; /* DISKIMG_VERSION */
    size_t sizes[5];     /* PROTO_MODULE_SIZES as the module was built */
    /* The driver: the ops its registry entry forwards to (it needs no
     * names or options: the entry declares them). */
    const struct blk_driver *driver;
};

#define PROTO_MODULE_SIZES                                                                         \
    {                                                                                              \
        sizeof(struct blk_driver), sizeof(struct blk_node), sizeof(struct blk_open_opts),          \
            sizeof(struct blk_image_info), sizeof(struct blk_extent)                               \
    }

/* In the module: its entry, the one symbol it exports. */
#define PROTO_MODULE_ENTRY(NAME, DRIVER)                                                           \
    __attribute__((visibility("default")))                                                         \
    const struct proto_module_entry diskimg_##NAME##_module = {                                    \
        .version = DISKIMG_VERSION,                                                                \
        .sizes = PROTO_MODULE_SIZES,                                                               \
        .driver = &(DRIVER),                                                                       \
    }

/* In the program: one module, loaded once. */
struct proto_module {
    const char *name; /* "rbd": diskimg-rbd.so, diskimg_rbd_module */
    const char *what; /* for messages: "Ceph RBD" */
    /* Has the module's driver every op the registry's entry forwards? */
    bool (*has_ops)(const struct blk_driver *d);
    pthread_mutex_t lock;
    bool tried;
    const struct blk_driver *driver; /* NULL until loaded */
    char error[PATH_MAX + 256];      /* why it did not load */
};

#define PROTO_MODULE_INIT(NAME, WHAT, HAS_OPS)                                                     \
    {                                                                                              \
        .name = (NAME), .what = (WHAT), .has_ops = (HAS_OPS), .lock = PTHREAD_MUTEX_INITIALIZER    \
    }

/* The module's driver, loaded on the first call; NULL when it does not
 * load, and m->error then says "cannot load the WHAT driver module PATH:
 * REASON" (escaped), for the caller to prefix with the image's name. */
const struct blk_driver *proto_module_load(struct proto_module *m);

#endif
