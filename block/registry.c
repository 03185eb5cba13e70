/* block/registry.c: the driver registry.  Drivers add themselves from a
 * constructor (BLK_REGISTER_DRIVER), so block/ never names a format. */
#include <stddef.h>
#include <string.h>

#include "driver.h"

#define BLK_MAX_DRIVERS 16

static const struct blk_driver *drivers[BLK_MAX_DRIVERS];
static size_t n_drivers;

void blk_register_driver(const struct blk_driver *drv)
{
    if (n_drivers < BLK_MAX_DRIVERS) {
        drivers[n_drivers++] = drv;
    }
}

const struct blk_driver *blk_find_driver(const char *name)
{
    for (size_t i = 0; i < n_drivers; i++) {
        if (strcmp(drivers[i]->name, name) == 0) {
            return drivers[i];
        }
    }
    return NULL;
}

const struct blk_driver *blk_protocol_for(const char *filename)
{
    for (size_t i = 0; i < n_drivers; i++) {
        if (!drivers[i]->is_format && drivers[i]->claims && drivers[i]->claims(filename)) {
            return drivers[i];
        }
    }
    return blk_find_driver("file");
}

const struct blk_driver *blk_probe_format(const uint8_t *buf, size_t len)
{
    const struct blk_driver *best = NULL;
    int best_score = 0;

    for (size_t i = 0; i < n_drivers; i++) {
        if (drivers[i]->is_format && drivers[i]->probe) {
            int score = drivers[i]->probe(buf, len);
            if (score > best_score) {
                best = drivers[i];
                best_score = score;
            }
        }
    }
    return best ? best : blk_find_driver("raw");
}
