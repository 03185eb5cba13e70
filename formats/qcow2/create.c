/* formats/qcow2/create.c: "create -f qcow2": the options qemu-img knows,
 * validated with the same rules, and a fresh image laid out as header,
 * refcount table, refcount blocks and L1 table; then, if asked, every
 * cluster preallocated (metadata, falloc, full).
 *
 * Order (qcow2.h): above check.c; calls alloc (preallocation) and header. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "formats/named-file.h"
#include "qcow2.h"
#include "refcount-math.h"

enum prealloc { PREALLOC_OFF, PREALLOC_METADATA, PREALLOC_FALLOC, PREALLOC_FULL };
static const char *const prealloc_names[] = {"off", "metadata", "falloc", "full"};

struct create_opts {
    uint64_t size;
    bool size_set;
    int version; /* 2 or 3 */
    bool compat_set;
    uint64_t cluster_size;
    bool lazy_refcounts;
    uint64_t refcount_bits;
    bool extended_l2;
    enum prealloc prealloc;
    int compression_type;
    const char *backing_file;
    const char *backing_format;
    bool untrusted; /* open the backing file alone (--untrusted) */
    /* Values as the user spelled them, echoed in the summary as qemu-img
     * does (NULL: not given). */
    const char *compat_str, *prealloc_str, *extl2_str, *lazy_str;
    char *owned[16]; /* copies of -o values, which live only during the walk */
    unsigned n_owned;
};

static const char *keep(struct create_opts *c, const char *value)
{
    if (c->n_owned == sizeof c->owned / sizeof c->owned[0]) {
        return NULL;
    }
    return c->owned[c->n_owned++] = strdup(value);
}

static int opt_bool(const char *key, const char *value, bool *out)
{
    if (!value || parse_bool(value, out) < 0) {
        return err_setx(EINVAL, "qcow2: %s must be on or off", key);
    }
    return 0;
}

static int create_opt(const char *key, const char *value, void *opaque)
{
    struct create_opts *c = opaque;

    if (!value && (strcmp(key, "lazy_refcounts") == 0 || strcmp(key, "extended_l2") == 0)) {
        value = "on"; /* a bare boolean means on, as in qemu-img */
    }
    if (!value) {
        return err_setx(EINVAL, "qcow2: option '%s' needs a value", key);
    }
    if (strcmp(key, "size") == 0) {
        if (c->size_set) {
            return err_setx(EINVAL, "qcow2: the size is given twice (-o size and SIZE)");
        }
        if (parse_size(value, &c->size) < 0) {
            return err_setx(EINVAL, "qcow2: invalid size '%s'", value);
        }
        c->size_set = true;
    } else if (strcmp(key, "compat") == 0) {
        if (strcmp(value, "0.10") == 0 || strcmp(value, "v2") == 0) {
            c->version = 2;
        } else if (strcmp(value, "1.1") == 0 || strcmp(value, "v3") == 0) {
            c->version = 3;
        } else {
            return err_setx(EINVAL, "qcow2: invalid compatibility level '%s' (0.10, 1.1)", value);
        }
        c->compat_set = true;
        c->compat_str = keep(c, value);
    } else if (strcmp(key, "cluster_size") == 0) {
        if (parse_size(value, &c->cluster_size) < 0 || !IS_POW2(c->cluster_size) ||
            c->cluster_size < 512 || c->cluster_size > (2u << 20)) {
            return err_setx(EINVAL, "Cluster size must be a power of two between 512 and 2048k");
        }
    } else if (strcmp(key, "lazy_refcounts") == 0) {
        c->lazy_str = keep(c, value);
        return opt_bool(key, value, &c->lazy_refcounts);
    } else if (strcmp(key, "extended_l2") == 0) {
        c->extl2_str = keep(c, value);
        return opt_bool(key, value, &c->extended_l2);
    } else if (strcmp(key, "refcount_bits") == 0) {
        if (parse_uint(value, 1, 64, &c->refcount_bits) < 0 || !IS_POW2(c->refcount_bits)) {
            return err_setx(EINVAL,
                            "Refcount width must be a power of two and may not exceed 64 bits");
        }
    } else if (strcmp(key, "preallocation") == 0) {
        int i = 0;
        while (i < 4 && strcmp(value, prealloc_names[i]) != 0) {
            i++;
        }
        if (i == 4) {
            return err_setx(EINVAL,
                            "qcow2: preallocation '%s' is not off, metadata, falloc or "
                            "full",
                            value);
        }
        c->prealloc = (enum prealloc)i;
        c->prealloc_str = keep(c, value);
    } else if (strcmp(key, "compression_type") == 0) {
        if (strcmp(value, "zlib") == 0) {
            c->compression_type = QCOW2_COMPRESSION_ZLIB;
        } else if (strcmp(value, "zstd") == 0) {
#ifdef HAVE_ZSTD
            c->compression_type = QCOW2_COMPRESSION_ZSTD;
#else
            return err_setx(ENOTSUP, "qcow2: compression_type=zstd needs a build with libzstd");
#endif
        } else {
            return err_setx(EINVAL, "qcow2: compression_type '%s' is not zlib or zstd", value);
        }
    } else if (strcmp(key, "backing_file") == 0) {
        c->backing_file = keep(c, value);
    } else if (strcmp(key, "backing_fmt") == 0) {
        c->backing_format = keep(c, value);
    } else if (strcmp(key, "encryption") == 0 || strncmp(key, "encrypt.", 8) == 0) {
        return err_setx(ENOTSUP, "qcow2: encryption is not supported");
    } else if (strcmp(key, "data_file") == 0 || strcmp(key, "data_file_raw") == 0) {
        return err_setx(ENOTSUP, "qcow2: external data files are not supported");
    } else {
        return err_setx(EINVAL, "qcow2: unknown option '%s' (see -o help)", key);
    }
    return 0;
}

/* qemu-img's rules, and its messages. */
static int validate(const struct create_opts *c)
{
    if (c->version == 2) {
        if (c->lazy_refcounts) {
            return err_setx(EINVAL, "Lazy refcounts only supported with compatibility level "
                                    "1.1 and above (use compat=1.1 or greater)");
        }
        if (c->extended_l2) {
            return err_setx(EINVAL, "Extended L2 entries are only supported with compatibility "
                                    "level 1.1 and above (use compat=1.1 or greater)");
        }
        if (c->refcount_bits != 16) {
            return err_setx(EINVAL, "Different refcount widths than 16 bits require "
                                    "compatibility level 1.1 or above (use compat=1.1 or greater)");
        }
        if (c->compression_type != QCOW2_COMPRESSION_ZLIB) {
            return err_setx(EINVAL,
                            "Non-zlib compression type is only supported with "
                            "compatibility level 1.1 and above (use compat=1.1 or greater)");
        }
    }
    if (c->extended_l2 && c->cluster_size < 16384) {
        return err_setx(EINVAL, "Extended L2 entries are only supported with cluster sizes of at "
                                "least 16384 bytes");
    }
    uint32_t bits = (uint32_t)__builtin_ctzll(c->cluster_size);
    uint64_t l1 = qcow2_l1_entries_for(c->size, bits, c->extended_l2);
    if (c->size > INT64_MAX / 2 || l1 * 8 > QCOW2_MAX_L1_BYTES) {
        /* What the largest L1 table maps, and what qcow2 can address. */
        uint32_t l2_bits = bits - (c->extended_l2 ? 4 : 3);
        uint64_t max = MIN((uint64_t)(QCOW2_MAX_L1_BYTES / 8) << (bits + l2_bits),
                           (uint64_t)INT64_MAX / 2 + 1);
        return err_setx(EFBIG,
                        "The image size is too large for file format 'qcow2' (try using a "
                        "larger cluster size): %" PRIu64 "-byte clusters allow at most %" PRIu64
                        " bytes",
                        c->cluster_size, max);
    }
    return 0;
}

/* Size of the backing file, opened the way the new image will open it. */
static int backing_size(struct blk_node *file, struct create_opts *c)
{
    CLEANUP_FREE char *path = NULL;
    struct blk_node *b = NULL;
    int r;

    if (c->backing_file[0] == '/' || fmt_names_rbd(c->backing_file)) {
        path = strdup(c->backing_file);
    } else {
        CLEANUP_FREE char *copy = strdup(file->filename);
        const char *slash = copy ? strrchr(copy, '/') : NULL;
        if (copy && asprintf(&path, "%.*s%s", slash ? (int)(slash - copy + 1) : 0, copy,
                             c->backing_file) < 0) {
            path = NULL;
        }
    }
    if (!path) {
        return err_set(ENOMEM, "qcow2: backing path");
    }
    /* Only its size is read: share it with every user, as qemu-img does.
     * With --untrusted nothing below it is opened and its format must be
     * unambiguous. */
    struct blk_open_opts o = {.filename = path,
                              .read_only = true,
                              .depth = 1,
                              .perms = {BLK_PERM_CONSISTENT_READ, BLK_PERM_ALL, BLK_PERM_ALL},
                              .force_share = true,
                              .no_backing = c->untrusted,
                              .untrusted = c->untrusted};
    r = blk_open_stack(&b, &o, fmt_names_rbd(path) ? "rbd" : "file", c->backing_format);
    if (r < 0) {
        err_prefix("could not open backing file '%s'", ESC_STR(c->backing_file));
        return r;
    }
    if (!c->backing_format) {
        /* Record what was probed, so the image never probes again. */
        c->backing_format = strcmp(blk_node_driver_name(b), "qcow2") == 0 ? "qcow2" : "raw";
    }
    if (!c->size_set) {
        c->size = (uint64_t)blk_get_length(b);
        c->size_set = true;
    }
    blk_node_close(b);
    return 0;
}

static void put64(uint8_t *p, uint64_t v)
{
    v = htobe64(v);
    memcpy(p, &v, 8);
}

/* Write header, refcount table, refcount blocks and an empty L1. */
static int write_layout(struct blk_node *file, const struct create_opts *c)
{
    uint64_t cs = c->cluster_size;
    uint32_t cluster_bits = (uint32_t)__builtin_ctzll(cs);
    uint32_t refcount_order = (uint32_t)__builtin_ctzll(c->refcount_bits);
    uint64_t per_block = cs * 8 / c->refcount_bits;
    uint64_t l1_entries = qcow2_l1_entries_for(c->size, cluster_bits, c->extended_l2);
    uint64_t l1_clusters = ROUND_UP(l1_entries * 8, cs) / cs;
    struct qcow2_refcount_area area;
    int r;

    /* The blocks count every cluster of the layout, themselves included,
     * and the table lists the blocks. */
    struct qcow2_refcount_area_req req = {
        .cluster_bits = cluster_bits,
        .refcount_order = refcount_order,
        .start = 1,
        .tail_clusters = l1_clusters,
    };
    qcow2_refcount_area_size(&req, &area);
    uint64_t table = area.table_clusters, blocks = area.blocks, n = area.end;
    struct qcow2_header h = {
        .version = (uint32_t)c->version,
        .cluster_bits = cluster_bits,
        .size = c->size,
        .l1_size = (uint32_t)l1_entries,
        .l1_table_offset = (1 + table + blocks) * cs,
        .refcount_table_offset = cs,
        .refcount_table_clusters = (uint32_t)table,
        .refcount_order = refcount_order,
        .compression_type = (uint8_t)c->compression_type,
        .backing_file = (char *)c->backing_file,
        .backing_format = (char *)c->backing_format,
    };
    if (c->lazy_refcounts) {
        h.compatible_features |= QCOW2_COMPAT_LAZY_REFCOUNTS;
    }
    if (c->extended_l2) {
        h.incompatible_features |= QCOW2_INCOMPAT_EXTL2;
    }
    if (c->compression_type) {
        h.incompatible_features |= QCOW2_INCOMPAT_COMPRESSION;
    }
    CLEANUP_FREE uint8_t *buf = calloc(1, cs * MAX(table, 1) + cs);
    if (!buf) {
        return err_set(ENOMEM, "qcow2: creating the image");
    }
    r = qcow2_header_serialize(&h, buf, cs);
    if (r < 0) {
        return err_setx(EFBIG,
                        "qcow2: the header and backing file name do not fit in a cluster "
                        "of %" PRIu64 " bytes",
                        cs);
    }
    r = blk_pwrite(file, 0, buf, cs, 0);
    /* Refcount table */
    memset(buf, 0, cs * table);
    for (uint64_t i = 0; i < blocks; i++) {
        put64(buf + i * 8, (1 + table + i) * cs);
    }
    if (r == 0) {
        r = blk_pwrite(file, cs, buf, table * cs, 0);
    }
    /* Refcount blocks: 1 for each of the n clusters of the layout */
    for (uint64_t bi = 0; r == 0 && bi < blocks; bi++) {
        memset(buf, 0, cs);
        for (uint64_t k = bi * per_block; k < MIN(n, (bi + 1) * per_block); k++) {
            qcow2_refblock_set(buf, refcount_order, k - bi * per_block, 1);
        }
        r = blk_pwrite(file, (1 + table + bi) * cs, buf, cs, 0);
    }
    /* The L1 table reads as zeroes: the file just has to reach its end. */
    if (r == 0) {
        r = blk_truncate(file, h.l1_table_offset + l1_entries * 8);
    }
    return r;
}

/* A name the image can open again: a plain rbd:POOL/IMAGE, or a file
 * (formats/named-file.h). */
static int check_backing_name(struct blk_node *file, const char *name)
{
    if (fmt_names_rbd(name)) {
        CLEANUP_FREE char *plain = NULL;
        return fmt_named_path("qcow2", "backing file", file->filename, name, FMT_NAME_MAY_RBD,
                              &plain);
    }
    const char *colon = strchr(name, ':'), *slash = strchr(name, '/');
    if (colon && (!slash || colon < slash)) {
        return err_setx(EINVAL,
                        "qcow2: backing file '%s' looks like a protocol name, which "
                        "would never be opened (write ./%s for a file)",
                        name, name);
    }
    return 0;
}

static int create_image(struct blk_node *file, const struct blk_create_opts *o,
                        struct create_opts c, char **summary)
{
    int r;

    if (c.backing_format && !c.backing_file) {
        return err_setx(EINVAL, "qcow2: a backing format needs a backing file");
    }
    if (c.backing_file) {
        r = check_backing_name(file, c.backing_file);
        if (r < 0) {
            return r;
        }
        if (strlen(c.backing_file) > QCOW2_MAX_BACKING_NAME) {
            return err_setx(EINVAL, "qcow2: backing file name longer than %d bytes",
                            QCOW2_MAX_BACKING_NAME);
        }
        if (!o->no_open_backing || !c.size_set || !c.backing_format) {
            r = backing_size(file, &c);
            if (r < 0) {
                return r;
            }
        }
    }
    if (!c.size_set) {
        return err_setx(EINVAL, "qcow2: the image size is required (or a backing file)");
    }
    if (c.prealloc != PREALLOC_OFF && c.backing_file && !c.extended_l2) {
        /* Every cluster mapped would hide the backing file's data. */
        return err_setx(EINVAL, "Backing file and preallocation can only be used at the same "
                                "time if extended_l2 is on");
    }
    uint64_t asked = c.size;
    c.size = ROUND_UP(c.size, 512); /* as qemu-img does (it prints the size asked for) */
    r = validate(&c);
    if (r == 0) {
        r = write_layout(file, &c);
    }
    if (r == 0 && c.prealloc != PREALLOC_OFF) {
        struct blk_node *img = NULL;
        /* blk_create's lock on the file covers this second open */
        struct blk_open_opts oo = {.filename = file->filename, .no_backing = true, .no_lock = true};
        r = blk_open_stack(&img, &oo, "file", "qcow2");
        if (r == 0) {
            r = qcow2_preallocate(img, c.prealloc >= PREALLOC_FALLOC, c.prealloc == PREALLOC_FULL,
                                  c.backing_file != NULL);
            int r2 = blk_flush(img);
            blk_node_close(img);
            r = r ? r : r2;
        }
    }
    if (r < 0) {
        return r;
    }
    /* The option list qemu-img prints, in its order. */
    char backing[2 * QCOW2_MAX_BACKING_NAME + 64] = "";
    if (c.backing_file) {
        snprintf(backing, sizeof backing, " backing_file=%s backing_fmt=%s", c.backing_file,
                 c.backing_format);
    }
    if (asprintf(summary,
                 "fmt=qcow2 cluster_size=%" PRIu64 " extended_l2=%s%s%s compression_type=%s "
                 "size=%" PRIu64 "%s%s%s lazy_refcounts=%s refcount_bits=%" PRIu64,
                 c.cluster_size, c.extl2_str ? c.extl2_str : "off",
                 c.prealloc_str ? " preallocation=" : "", c.prealloc_str ? c.prealloc_str : "",
                 c.compression_type ? "zstd" : "zlib", asked, backing,
                 c.compat_str ? " compat=" : "", c.compat_str ? c.compat_str : "",
                 c.lazy_str ? c.lazy_str : "off", c.refcount_bits) < 0) {
        *summary = NULL;
    }
    return 0;
}

/* The options as given: defaults, then -o (values it keeps are owned). */
static int parse_create_opts(const struct blk_create_opts *o, struct create_opts *c)
{
    *c = (struct create_opts){
        .size = o->size,
        .size_set = o->size_set,
        .version = 3,
        .cluster_size = 65536,
        .refcount_bits = 16,
        .backing_file = o->backing_file,
        .backing_format = o->backing_format,
        .untrusted = o->untrusted,
    };
    return o->options ? kv_foreach(o->options, create_opt, c) : 0;
}

static void free_create_opts(struct create_opts *c)
{
    for (unsigned i = 0; i < c->n_owned; i++) {
        free(c->owned[i]);
    }
}

int qcow2_create_check(const struct blk_create_opts *o)
{
    struct create_opts c;
    int r = parse_create_opts(o, &c);

    if (r == 0 && c.size_set) {
        c.size = ROUND_UP(c.size, 512);
        r = validate(&c);
    }
    free_create_opts(&c);
    return r;
}

int qcow2_create(struct blk_node *file, const struct blk_create_opts *o, char **summary)
{
    struct create_opts c;
    int r = parse_create_opts(o, &c);

    if (r == 0) {
        r = create_image(file, o, c, summary);
    }
    free_create_opts(&c);
    return r;
}

int qcow2_create_params(const struct blk_create_opts *o, struct qcow2_create_params *p)
{
    struct create_opts c;
    int r = parse_create_opts(o, &c);

    if (r == 0) {
        *p = (struct qcow2_create_params){
            .version = c.version,
            .cluster_size = c.cluster_size,
            .refcount_bits = c.refcount_bits,
            .extended_l2 = c.extended_l2,
            .prealloc_data = c.prealloc == PREALLOC_FALLOC || c.prealloc == PREALLOC_FULL,
            .backing = c.backing_file != NULL,
        };
    }
    free_create_opts(&c);
    return r;
}
