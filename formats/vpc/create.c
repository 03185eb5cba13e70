/* formats/vpc/create.c: "create -f vpc": qemu-img 7.2's options
 * (subformat=dynamic|fixed, force_size; preallocation is accepted and,
 * as in qemu, changes nothing), its size rule (the smallest CHS geometry
 * that holds the size, unless force_size keeps the size and writes the
 * largest geometry with creator "qem2"), its layout and its summary line.
 *
 * Order (vpc.h): above write.c; calls footer.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "vpc.h"

#define VPC_CREATE_BLOCK (2u << 20) /* qemu-img has no option for it */

struct create_opts {
    uint64_t size;
    bool size_set;
    bool fixed;
    bool force_size;
    /* Values as the user spelled them, echoed in the summary (NULL: not
     * given); they point into the option string copy in 'list'. */
    const char *subformat_str, *force_str, *prealloc_str;
    char *owned[3];
};

static const char *keep(struct create_opts *c, int slot, const char *value)
{
    free(c->owned[slot]);
    return c->owned[slot] = strdup(value);
}

static int create_opt(const char *key, const char *value, void *opaque)
{
    struct create_opts *c = opaque;

    if (!value && strcmp(key, "force_size") == 0) {
        value = "on"; /* a bare boolean means on, as in qemu-img */
    }
    if (!value) {
        return err_setx(EINVAL, "vpc: option '%s' needs a value", key);
    }
    if (strcmp(key, "size") == 0) {
        if (c->size_set) {
            return err_setx(EINVAL, "The image size must be specified only once");
        }
        if (parse_size(value, &c->size) < 0) {
            return err_setx(EINVAL, "vpc: invalid size '%s'", value);
        }
        c->size_set = true;
    } else if (strcmp(key, "subformat") == 0) {
        if (strcmp(value, "dynamic") != 0 && strcmp(value, "fixed") != 0) {
            return err_setx(EINVAL, "Parameter 'subformat' does not accept value '%s'", value);
        }
        c->fixed = strcmp(value, "fixed") == 0;
        c->subformat_str = keep(c, 0, value);
    } else if (strcmp(key, "force_size") == 0) {
        if (parse_bool(value, &c->force_size) < 0) {
            return err_setx(EINVAL, "Parameter 'force_size' expects 'on' or 'off'");
        }
        c->force_str = keep(c, 1, value);
    } else if (strcmp(key, "preallocation") == 0) {
        if (strcmp(value, "off") != 0 && strcmp(value, "falloc") != 0 &&
            strcmp(value, "full") != 0) {
            return err_setx(EINVAL, "Parameter 'preallocation' does not accept value '%s'", value);
        }
        c->prealloc_str = keep(c, 2, value);
    } else {
        return err_setx(EINVAL, "vpc: unknown option '%s' (see -o help)", key);
    }
    return 0;
}

static void free_create_opts(struct create_opts *c)
{
    for (size_t i = 0; i < sizeof c->owned / sizeof c->owned[0]; i++) {
        free(c->owned[i]);
    }
}

static int parse_create_opts(const struct blk_create_opts *o, struct create_opts *c)
{
    *c = (struct create_opts){.size = o->size, .size_set = o->size_set};
    if (o->backing_file) {
        return err_setx(ENOTSUP, "Backing file not supported for file format 'vpc'");
    }
    int r = o->options ? kv_foreach(o->options, create_opt, c) : 0;
    if (r == 0 && !c->size_set) {
        r = err_setx(EINVAL, "vpc: the image size is required");
    }
    return r;
}

int vpc_create_check(const struct blk_create_opts *o)
{
    struct create_opts c;
    uint16_t cy;
    uint8_t h, sp;
    uint64_t sectors;
    int r = parse_create_opts(o, &c);

    if (r == 0) {
        r = vpc_create_geometry(ROUND_UP(c.size, VPC_SECTOR), c.force_size, &cy, &h, &sp, &sectors);
    }
    free_create_opts(&c);
    return r;
}

/* A footer's time stamp: seconds since 2000-01-01 UTC in 32 bits, so
 * earlier times (SOURCE_DATE_EPOCH=0) record 0 and later ones clamp. */
static uint32_t vpc_timestamp(uint64_t unix_time)
{
    uint64_t t = unix_time > VPC_EPOCH ? unix_time - VPC_EPOCH : 0;

    return t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
}

/* Footer copy, dynamic header, an empty BAT, footer. */
static int write_dynamic(struct blk_node *file, const uint8_t *footer, uint64_t size)
{
    uint64_t entries = (size + VPC_CREATE_BLOCK - 1) / VPC_CREATE_BLOCK;
    uint64_t bat_bytes = ROUND_UP(entries * 4, VPC_SECTOR);
    uint64_t bat_at = VPC_FOOTER_SIZE + VPC_DYN_HEADER_SIZE;
    uint8_t header[VPC_DYN_HEADER_SIZE];
    CLEANUP_FREE uint8_t *ones = malloc(64 * 1024);
    int r;

    if (!ones) {
        return err_set(ENOMEM, "vpc: creating the image");
    }
    memset(ones, 0xff, 64 * 1024);
    vpc_build_dyn_header(header, bat_at, (uint32_t)entries, VPC_CREATE_BLOCK);
    r = blk_pwrite(file, 0, footer, VPC_FOOTER_SIZE, 0);
    if (r == 0) {
        r = blk_pwrite(file, VPC_FOOTER_SIZE, header, sizeof header, 0);
    }
    for (uint64_t done = 0; r == 0 && done < bat_bytes; done += 64 * 1024) {
        r = blk_pwrite(file, bat_at + done, ones, MIN(bat_bytes - done, 64 * 1024u), 0);
    }
    if (r == 0) {
        r = blk_pwrite(file, bat_at + bat_bytes, footer, VPC_FOOTER_SIZE, 0);
    }
    return r;
}

int vpc_create(struct blk_node *file, const struct blk_create_opts *o, char **summary)
{
    struct create_opts c;
    struct vpc_footer f = {0};
    uint8_t footer[VPC_FOOTER_SIZE];
    uint64_t sectors;
    int r = parse_create_opts(o, &c);

    if (r == 0) {
        r = vpc_create_geometry(ROUND_UP(c.size, VPC_SECTOR), c.force_size, &f.cyls, &f.heads,
                                &f.secs, &sectors);
    }
    if (r < 0) {
        free_create_opts(&c);
        return r;
    }
    uint64_t size = sectors * VPC_SECTOR;
    f.data_offset = c.fixed ? UINT64_MAX : VPC_FOOTER_SIZE;
    f.timestamp = vpc_timestamp(blk_create_time(o));
    memcpy(f.creator_app, c.force_size ? "qem2" : "qemu", 4);
    f.orig_size = f.cur_size = size;
    f.type = c.fixed ? VPC_FIXED : VPC_DYNAMIC;
    r = blk_create_uuid(o, VPC_ID_UUID, f.uuid);
    vpc_build_footer(footer, &f);
    if (r == 0 && c.fixed) {
        r = blk_truncate(file, size + VPC_FOOTER_SIZE);
        if (r == 0) {
            r = blk_pwrite(file, size, footer, sizeof footer, 0);
        }
    } else if (r == 0) {
        r = write_dynamic(file, footer, size);
    }
    if (r == 0 &&
        asprintf(summary, "fmt=vpc size=%" PRIu64 "%s%s%s%s%s%s", c.size,
                 c.subformat_str ? " subformat=" : "", c.subformat_str ? c.subformat_str : "",
                 c.force_str ? " force_size=" : "", c.force_str ? c.force_str : "",
                 c.prealloc_str ? " preallocation=" : "",
                 c.prealloc_str ? c.prealloc_str : "") < 0) {
        *summary = NULL;
    }
    free_create_opts(&c);
    return r;
}

/* measure: the file "convert -O vpc" writes (create's layout above plus
 * write.c's blocks, each a one-sector bitmap and the block, appended
 * before the trailing footer).  qemu-img cannot measure vpc; these are
 * diskimg's own numbers, exact for what diskimg writes.  Fixed: the
 * disk and its footer, allocated or not. */
int vpc_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m)
{
    struct blk_create_opts sized;
    struct create_opts c;
    uint16_t cy;
    uint8_t h, sp;
    uint64_t sectors, data = 0;
    int r;

    CLEANUP_FREE char *options = NULL;
    if ((r = blk_measure_sized_opts(o, src, &sized, &options)) < 0) {
        return r;
    }
    r = parse_create_opts(&sized, &c);
    if (r == 0) {
        r = vpc_create_geometry(ROUND_UP(c.size, VPC_SECTOR), c.force_size, &cy, &h, &sp, &sectors);
    }
    bool fixed = c.fixed;
    free_create_opts(&c);
    if (r < 0) {
        return r;
    }
    uint64_t size = sectors * VPC_SECTOR;
    if (fixed) {
        m->required = m->fully_allocated = size + VPC_FOOTER_SIZE;
        return 0;
    }
    if (src && (r = blk_image_data_clusters(src, VPC_CREATE_BLOCK, &data)) < 0) {
        return r;
    }
    const uint64_t entries = (size + VPC_CREATE_BLOCK - 1) / VPC_CREATE_BLOCK;
    const uint64_t bitmap = ROUND_UP(VPC_CREATE_BLOCK / VPC_SECTOR / 8, VPC_SECTOR);
    const uint64_t per_block = bitmap + VPC_CREATE_BLOCK;
    const uint64_t front =
        VPC_FOOTER_SIZE + VPC_DYN_HEADER_SIZE + ROUND_UP(entries * 4, VPC_SECTOR);

    m->fully_allocated = front + entries * per_block + VPC_FOOTER_SIZE;
    m->required = front + data / VPC_CREATE_BLOCK * per_block + VPC_FOOTER_SIZE;
    return 0;
}
