/* cmd/repro-output.c: --reproducible and SOURCE_DATE_EPOCH for convert
 * and create.  The variable is read once, before any image is opened,
 * through common/epoch.c (the GCE tar.gz writer reads it there too), and
 * handed down in blk_create_opts; the block layer and the formats never
 * look at the environment. */
#include <stdio.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/epoch.h"
#include "common/error.h"

int cmd_repro_setup(bool flag, struct blk_create_opts *o)
{
    struct repro_epoch e;

    if (repro_epoch_get(flag, &e) < 0) {
        fprintf(stderr, "diskimg: %s\n", err_msg());
        return EXIT_USAGE;
    }
    o->reproducible = e.on;
    o->epoch = e.epoch;
    return 0;
}

/* Formats lay blocks out in the order writes allocate them, so -W (writes
 * in completion order) would make the file depend on thread timing.  Only
 * raw puts every byte at its guest offset whatever the order. */
void cmd_repro_order(const struct blk_create_opts *o, const char *format, bool quiet,
                     bool *out_of_order)
{
    if (!o->reproducible || !*out_of_order || strcmp(format, "raw") == 0) {
        return;
    }
    *out_of_order = false;
    if (!quiet) {
        fprintf(stderr,
                "diskimg: convert: -W ignored: reproducible output writes a %s target in order "
                "(its layout follows the write order)\n",
                format);
    }
}

int cmd_repro_identity(const struct blk_create_opts *o, struct blk_image *dst,
                       const uint8_t *content)
{
    uint8_t seed[BLK_SEED_LEN], sum[BLK_CHECKSUM_LEN];
    int r = 0;

    if (!content) {
        /* What the target reads, its backing file included. */
        r = blk_image_checksum(dst, NULL, sum);
        content = sum;
    }
    if (r == 0) {
        r = blk_identity_seed(o, blk_image_size(dst), content, seed);
    }
    return r < 0 ? r : blk_image_set_identity(dst, seed);
}
