/* formats/vmdk/check.c: what `info` shows of a vmdk image (qemu-img 7.2's
 * format-specific fields: cid, parent-cid, create-type, extents) and
 * `check` (qemu's: every allocated grain must start inside its file;
 * repair is not supported, as in qemu). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/error.h"
#include "common/util.h"
#include "vmdk.h"

static void field(struct blk_image_info *info, struct blk_info_field f)
{
    if (info->n_fields < BLK_INFO_MAX_FIELDS) {
        info->fields[info->n_fields++] = f;
    }
}

static void str_field(struct blk_image_info *info, const char *key, const char *label,
                      const char *value)
{
    char *copy = strdup(value ? value : "");

    field(info,
          (struct blk_info_field){key, label, BLK_INFO_STR, .s = copy ? copy : "", .owned = copy});
}

static const char *extent_format(const struct vmdk_state *s, const struct vmdk_extent *e)
{
    if (s->desc_embedded || (s->n_extents == 1 && e->file == s->node->file)) {
        return ""; /* a monolithic file opened directly, as qemu shows it */
    }
    switch (e->type) {
    case VMDK_TYPE_FLAT:
        return "FLAT";
    case VMDK_TYPE_ZERO:
        return "ZERO";
    default:
        return "SPARSE";
    }
}

/* Does the stream end with an end-of-stream marker after its last
 * grain, past any grain table, grain directory and footer markers?  An
 * end-of-stream marker is an all-zero sector, so qemu-img's streams,
 * whose last grain is followed by the zeroes of the grain's unused
 * space, have one too, unless that grain did not compress. */
static int stream_has_eos(struct vmdk_state *s, bool *eos)
{
    struct vmdk_extent *e = &s->extents[0];
    uint8_t m[VMDK_SECTOR];
    uint64_t at;
    int r;

    pthread_mutex_lock(&s->lock);
    r = vmdk_sparse_data_end_locked(e, &at);
    uint64_t flen = e->file_len;
    pthread_mutex_unlock(&s->lock);
    *eos = false;
    /* Each marker but the last is followed by at least one sector: the
     * walk ends within the file, and within 2 markers per table. */
    for (uint64_t steps = 0; r == 0 && at + VMDK_SECTOR <= flen && steps < 2ull * e->gd_n + 4;
         steps++) {
        r = blk_pread(e->file, at, m, sizeof m);
        uint64_t val = get_le64(m);
        uint32_t size = get_le32(m + 8), type = get_le32(m + 12);
        if (r < 0 || size != 0) {
            break; /* a grain, or unreadable: no end marker here */
        }
        if (type == VMDK_MARKER_EOS) {
            *eos = buffer_is_zero(m, sizeof m);
            break;
        }
        if ((type != VMDK_MARKER_GT && type != VMDK_MARKER_GD && type != VMDK_MARKER_FOOTER) ||
            val > flen / VMDK_SECTOR) {
            break;
        }
        at += (1 + val) * VMDK_SECTOR;
    }
    return r;
}

/* Beyond qemu-img's fields (diskimg only): a monolithic sparse file's
 * header and descriptor facts, which decide whether VMware takes it. */
static int monolithic_info(struct vmdk_state *s, struct blk_image_info *info)
{
    const struct vmdk_extent *e = &s->extents[0];
    const struct vmdk_desc *d = &s->desc;
    bool eos;

    if (s->n_extents != 1 || e->type != VMDK_TYPE_SPARSE || !s->desc_embedded) {
        return 0;
    }
    blk_info_add_int(info, "header-version", "header version", e->version);
    blk_info_add_int(info, "header-flags", "header flags", e->flags);
    if (e->compressed) {
        int r = stream_has_eos(s, &eos);
        if (r < 0) {
            return r;
        }
        blk_info_add_bool(info, "end-of-stream", "end of stream", eos);
    }
    if (d->encoding) {
        blk_info_add_str(info, "encoding", "encoding", d->encoding);
    }
    if (d->adapter_type) {
        blk_info_add_str(info, "adapter-type", "adapter type", d->adapter_type);
    }
    if (d->hw_version) {
        blk_info_add_str(info, "hardware-version", "hardware version", d->hw_version);
    }
    if (d->long_content_id) {
        blk_info_add_str(info, "long-content-id", "long content id", d->long_content_id);
    }
    return 0;
}

int vmdk_get_info(struct blk_node *n, struct blk_image_info *info)
{
    struct vmdk_state *s = n->opaque;
    uint64_t grain = 0;
    bool same = true;

    for (unsigned i = 0; i < s->n_extents; i++) {
        const struct vmdk_extent *e = &s->extents[i];
        uint64_t g = e->type == VMDK_TYPE_SPARSE ? e->grain : 0;
        if (i == 0) {
            grain = g;
        } else if (g != grain) {
            same = false;
        }
    }
    info->cluster_size = same ? grain : 0;
    /* qemu's vmdk has no driver info then: qemu-img shows no dirty-flag */
    info->dirty_unknown = !same;
    /* The descriptor's extents take space too (qemu-img adds them up). */
    for (unsigned i = 0; i < s->n_extents && info->actual_size >= 0; i++) {
        struct blk_node *f = s->extents[i].own_file ? s->extents[i].file : NULL;
        int64_t a = f && f->drv->allocated_size ? f->drv->allocated_size(f) : 0;
        info->actual_size = a >= 0 ? info->actual_size + a : -1;
    }
    if (vmdk_has_parent(s)) {
        info->backing_file = strdup(s->desc.parent_hint);
        info->backing_format = strdup("vmdk"); /* qemu opens a parent as vmdk */
        int r = vmdk_parent_path(s, &info->full_backing_file);
        if (r < 0) {
            /* no path at all where qemu cannot make one (NBD) */
            info->full_backing_file = r == -ENOTDIR ? NULL : strdup(s->desc.parent_hint);
            err_clear();
        }
    }
    field(info, (struct blk_info_field){"cid", "cid", BLK_INFO_INT, .i = s->desc.cid});
    field(info, (struct blk_info_field){"parent-cid", "parent cid", BLK_INFO_INT,
                                        .i = s->desc.parent_cid});
    str_field(info, "create-type", "create type", s->desc.create_type);
    field(info, (struct blk_info_field){"extents", "extents", BLK_INFO_ARRAY});
    /* Each extent takes 7 fields; the list stops where the model is full. */
    for (unsigned i = 0; i < s->n_extents && info->n_fields + 8 < BLK_INFO_MAX_FIELDS; i++) {
        const struct vmdk_extent *e = &s->extents[i];
        field(info, (struct blk_info_field){NULL, NULL, BLK_INFO_OBJECT, .i = i});
        if (e->type == VMDK_TYPE_SPARSE && e->compressed) {
            field(info,
                  (struct blk_info_field){"compressed", "compressed", BLK_INFO_BOOL, .b = true});
        }
        field(info, (struct blk_info_field){"virtual-size", "virtual size", BLK_INFO_INT,
                                            .i = (int64_t)e->length});
        str_field(info, "filename", "filename", e->file ? e->file->filename : "");
        if (e->type == VMDK_TYPE_SPARSE) {
            field(info, (struct blk_info_field){"cluster-size", "cluster size", BLK_INFO_INT,
                                                .i = (int64_t)e->grain});
        }
        str_field(info, "format", "format", extent_format(s, e));
        field(info, (struct blk_info_field){.type = BLK_INFO_END});
    }
    field(info, (struct blk_info_field){.type = BLK_INFO_END});
    return monolithic_info(s, info);
}

static int check_extent(struct vmdk_state *s, struct vmdk_extent *e, FILE *report,
                        struct blk_check_result *res)
{
    for (uint64_t off = 0; off < e->length;) {
        struct vmdk_map m;
        pthread_mutex_lock(&s->lock);
        int r = vmdk_sparse_map_locked(e, off, e->length - off, &m);
        uint64_t file_len = e->file_len;
        pthread_mutex_unlock(&s->lock);
        if (r < 0) {
            if (report) {
                fprintf(report, "ERROR: could not get the grain of sector %" PRIu64 ": %s\n",
                        (e->start + off) / VMDK_SECTOR, err_msg());
            }
            err_clear();
            res->check_errors++;
            return 0; /* qemu stops at the first unreadable table */
        }
        if (m.kind == VMDK_MAP_DATA || m.kind == VMDK_MAP_COMPRESSED) {
            /* A run of data grains: check each grain's start. */
            uint64_t first = m.kind == VMDK_MAP_DATA ? m.host - off % e->grain : m.host;
            for (uint64_t g = 0; g * e->grain < m.bytes + off % e->grain; g++) {
                uint64_t host = m.kind == VMDK_MAP_DATA ? first + g * e->grain : first;
                if (host >= file_len) {
                    if (report) {
                        fprintf(report,
                                "ERROR: cluster offset for sector %" PRIu64 " points after EOF\n",
                                (e->start + off) / VMDK_SECTOR + g * (e->grain / VMDK_SECTOR));
                    }
                    res->corruptions++;
                    /* qemu-img 7.2 stops here and fails the check (exit 1) */
                    return err_setx(EINVAL, "check failed: a grain of %s points after its end",
                                    e->name);
                }
            }
        }
        off += m.bytes;
    }
    return 0;
}

int vmdk_check(struct blk_node *n, enum blk_repair repair, FILE *report,
               struct blk_check_result *res)
{
    struct vmdk_state *s = n->opaque;

    if (repair != BLK_REPAIR_NONE) {
        return -ENOTSUP; /* qemu-img cannot repair vmdk either */
    }
    memset(res, 0, sizeof *res);
    for (unsigned i = 0; i < s->n_extents; i++) {
        struct vmdk_extent *e = &s->extents[i];
        if (e->type == VMDK_TYPE_SPARSE) {
            int r = check_extent(s, e, report, res);
            if (r < 0) {
                return r;
            }
        }
    }
    return 0;
}
