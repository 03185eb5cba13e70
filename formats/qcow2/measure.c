/* formats/qcow2/measure.c: "measure -O qcow2", the file size a new qcow2
 * image needs, with qemu-img's arithmetic so that both print the same
 * numbers: the fully allocated size is the header cluster, every L2
 * table, the L1 table, the refcount table and blocks that count all of
 * it, and the data; the required size is that less the data clusters
 * that the source does not fill.
 *
 * Not for: parsing -o (create.c does it once for both) or reading a
 * source (block/measure.c counts its data clusters).
 *
 * Order (qcow2.h): above create.c, whose option parsing it calls. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "qcow2.h"

#define DIV_UP(a, b) (((a) + (b)-1) / (b))

/* Refcount table and blocks for 'clusters' clusters of other data: each
 * block and table cluster must be counted too, hence a fixed point (the
 * counts only grow, and by less each round, so it ends). */
static uint64_t refcount_bytes(uint64_t clusters, uint64_t cluster_size, uint64_t refcount_bits)
{
    const uint64_t per_block = cluster_size * 8 / refcount_bits;
    const uint64_t per_table_cluster = cluster_size / 8;
    uint64_t table = 0, blocks = 0, total = 0, last;

    do {
        last = total;
        blocks = DIV_UP(clusters + table + blocks, per_block);
        table = DIV_UP(blocks, per_table_cluster);
        total = clusters + blocks + table;
    } while (total != last);
    return (blocks + table) * cluster_size;
}

/* Every cluster of a disk of 'size' bytes (a multiple of the cluster
 * size) allocated, with the metadata that maps and counts it. */
static uint64_t fully_allocated(uint64_t size, const struct qcow2_create_params *p)
{
    const uint64_t cs = p->cluster_size;
    const uint64_t l2_entry = p->extended_l2 ? 16 : 8;
    uint64_t meta = cs; /* the header */

    /* L2 tables: whole tables, one entry per cluster. */
    uint64_t l2_entries = ROUND_UP(size / cs, cs / l2_entry);
    meta += l2_entries * l2_entry;
    /* The L1 table: one entry per L2 table, whole clusters. */
    uint64_t l1_entries = ROUND_UP(l2_entries * l2_entry / cs, cs / 8);
    meta += l1_entries * 8;
    meta += refcount_bytes((meta + size) / cs, cs, p->refcount_bits);
    return meta + size;
}

/* The source's persistent bitmaps copied into clusters of cluster_size:
 * all their data (as if every bit were set), their tables, and the
 * directory. */
static int bitmaps_bytes(struct blk_image *src, uint64_t cluster_size, uint64_t *out)
{
    struct blk_image_info info = {0};
    uint64_t size = blk_image_size(src), total = 0, directory = 0;
    int r = blk_image_get_info(src, &info);

    if (r < 0) {
        blk_image_info_free(&info);
        return r;
    }
    for (unsigned i = 0; i < info.n_bitmaps; i++) {
        const struct blk_bitmap_info *b = &info.bitmaps[i];
        uint64_t bits = b->granularity ? DIV_UP(size, b->granularity) : 0;
        uint64_t clusters = DIV_UP(DIV_UP(bits, 8), cluster_size);

        total += clusters * cluster_size;
        total += ROUND_UP(clusters * 8, cluster_size); /* the bitmap's table */
        /* A directory entry: 24 bytes, the name, padded to 8. */
        directory += ROUND_UP(24 + strlen(b->name), 8);
    }
    blk_image_info_free(&info);
    *out = total + ROUND_UP(directory, cluster_size);
    return 0;
}

/* Can src keep persistent bitmaps?  qcow2 v3 can; so qemu-img prints a
 * bitmaps size (0 without any) for such a source only. */
static bool keeps_bitmaps(struct blk_image *src)
{
    struct blk_node *root = blk_image_root(src);

    if (strcmp(blk_node_driver_name(root), "qcow2") != 0) {
        return false;
    }
    const struct qcow2_state *s = root->opaque;
    return s->hdr.version >= 3;
}

/* qemu-img's checks for measure, which are fewer than create's: the
 * cluster size for extended L2 entries, the refcount width for v2. */
static int measure_params(const struct blk_create_opts *o, struct qcow2_create_params *p)
{
    int r = qcow2_create_params(o, p);

    if (r < 0) {
        return r;
    }
    if (p->extended_l2 && p->cluster_size < 16384) {
        return err_setx(EINVAL, "Extended L2 entries are only supported with cluster sizes of at "
                                "least 16384 bytes");
    }
    if (p->version == 2 && p->refcount_bits != 16) {
        return err_setx(EINVAL, "Different refcount widths than 16 bits require "
                                "compatibility level 1.1 or above (use compat=1.1 or greater)");
    }
    return 0;
}

int qcow2_measure(const struct blk_create_opts *o, struct blk_image *src, struct blk_measure *m)
{
    struct qcow2_create_params p;
    uint64_t size, required = 0;
    int r = measure_params(o, &p);

    if (r < 0) {
        return r;
    }
    const uint64_t cs = p.cluster_size;
    /* The size asked for (none with a source) must fit an L1 table. */
    size = ROUND_UP(o->size, cs);
    uint64_t l2_tables = DIV_UP(size / cs, cs / (p.extended_l2 ? 16 : 8));
    if (o->size > INT64_MAX || l2_tables > QCOW2_MAX_L1_BYTES / 8) {
        return err_setx(EFBIG, "The image size is too large (try using a larger cluster size)");
    }
    if (src) {
        size = ROUND_UP(blk_image_size(src), cs);
        if (p.backing) {
            /* The new image's backing file may share nothing with the
             * source: every cluster may need writing. */
            required = size;
        } else if ((r = blk_image_data_clusters(src, cs, &required)) < 0) {
            return r;
        }
    }
    if (p.prealloc_data) {
        required = size;
    }
    m->fully_allocated = fully_allocated(size, &p);
    /* The metadata of a full image, and only the data clusters needed. */
    m->required = m->fully_allocated - size + required;
    m->has_bitmaps = p.version >= 3 && src && keeps_bitmaps(src);
    if (m->has_bitmaps && (r = bitmaps_bytes(src, cs, &m->bitmaps)) < 0) {
        return r;
    }
    return 0;
}
