/* protocols/rbd/module.h: what the rbd driver module (diskimg-rbd.so,
 * built from the driver's files) and the program that loads it
 * (loader.c) agree on.
 *
 * The module exports one symbol, RBD_MODULE_ENTRY, a struct rbd_module.
 * Everything else it calls in the program is listed in module.syms, the
 * program's dynamic symbol list: the module has no stable interface, so
 * it must come from the same build as the program, which the loader
 * checks with the version and the sizes of the structs they share. */
#ifndef DISKIMG_PROTOCOLS_RBD_MODULE_H
#define DISKIMG_PROTOCOLS_RBD_MODULE_H

#include <stddef.h>

#include "block/driver.h"

#define RBD_MODULE_FILE "diskimg-rbd.so"
#define RBD_MODULE_ENTRY "diskimg_rbd_module"

struct rbd_module {
    const char *version; /* DISKIMG_VERSION */
    size_t sizes[5];     /* RBD_MODULE_SIZES as the module was built */
    /* The driver: the ops loader.c forwards to (it has no names or
     * options: the registry's entry in loader.c declares them). */
    const struct blk_driver *driver;
};

#define RBD_MODULE_SIZES                                                                           \
    {                                                                                              \
        sizeof(struct blk_driver), sizeof(struct blk_node), sizeof(struct blk_open_opts),          \
            sizeof(struct blk_image_info), sizeof(struct blk_extent)                               \
    }

#endif
