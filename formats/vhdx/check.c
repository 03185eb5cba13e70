/* formats/vhdx/check.c: what `check` and `info` say of a VHDX image, as
 * qemu-img 7.2 does: check counts BAT entries that point past the end of
 * the file or into metadata as corruptions, and a log replayed by the
 * (read-write) open of `check -r` as one corruption fixed; info has the
 * block size as cluster size, and (diskimg only) the subformat, block
 * and sector sizes as format-specific data.
 *
 * Order (vhdx.h): above rw.c. */
#include <string.h>

#include "common/error.h"
#include "vhdx.h"

int vhdx_check(struct blk_node *n, enum blk_repair repair, FILE *report,
               struct blk_check_result *res)
{
    struct vhdx_state *s = n->opaque;

    memset(res, 0, sizeof *res);
    if (repair != BLK_REPAIR_NONE && s->log_replayed) {
        res->corruptions_fixed = 1;
        s->log_replayed = false; /* reported once, not again by the double check */
    }
    res->corruptions = vhdx_bat_problems(s, report);
    err_clear(); /* the problems are the result, not an error of the check */
    return 0;
}

int vhdx_get_info(struct blk_node *n, struct blk_image_info *info)
{
    struct vhdx_state *s = n->opaque;

    info->cluster_size = s->p.block_size;
    /* Not in qemu-img (no format-specific section for vhdx): what
     * `check --target=hyperv` and people comparing images need. */
    blk_info_add_str(info, "subformat", "subformat", s->p.leave_allocated ? "fixed" : "dynamic");
    blk_info_add_int(info, "block-size", "block size", s->p.block_size);
    blk_info_add_int(info, "logical-sector-size", "logical sector size", s->p.logical_sector);
    blk_info_add_int(info, "physical-sector-size", "physical sector size", s->p.physical_sector);
    return 0;
}
