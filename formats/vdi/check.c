/* formats/vdi/check.c: "check" on a VDI image, with qemu-img check's
 * rules: every allocated map entry must name a block inside the map's
 * range, no two entries may name the same block, and the header's count
 * of allocated blocks must equal the entries'.  Each finding is a
 * corruption (exit 2).  qemu cannot repair a VDI image, and neither do
 * we: a repair is refused as qemu refuses it (exit 63).
 *
 * The map was loaded at open without its entries checked (a check opens
 * what a normal open refuses, to report it).
 *
 * Order (vdi.h): above alloc.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "block/esc-name.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "vdi.h"

static void report_line(FILE *report, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report_line(FILE *report, const char *fmt, ...)
{
    va_list ap;

    if (!report) {
        return;
    }
    va_start(ap, fmt);
    vfprintf(report, fmt, ap);
    va_end(ap);
    fputc('\n', report);
}

int vdi_check(struct blk_node *n, enum blk_repair repair, FILE *report,
              struct blk_check_result *res)
{
    struct vdi_state *s = n->opaque;
    uint32_t blocks = s->hdr.blocks, counted = 0;

    if (repair != BLK_REPAIR_NONE) {
        return err_setx(ENOTSUP, "%s: vdi images cannot be repaired (as in qemu-img)", ESC_NAME(n));
    }
    /* For each block of the data area, the first map entry using it. */
    CLEANUP_FREE uint32_t *user = malloc(((size_t)blocks + 1) * sizeof *user);
    if (!user) {
        res->check_errors++;
        return err_set(ENOMEM, "%s: vdi: check of %" PRIu32 " blocks", ESC_NAME(n), blocks);
    }
    memset(user, 0xff, ((size_t)blocks + 1) * sizeof *user);
    for (uint32_t b = 0; b < blocks; b++) {
        uint32_t e = vdi_entry(s, b);
        if (!vdi_allocated(e)) {
            continue;
        }
        if (e >= blocks) {
            report_line(report, "ERROR: block index %" PRIu32 " too large, is %" PRIu32, b, e);
            res->corruptions++;
            continue;
        }
        counted++;
        if (user[e] != VDI_UNALLOCATED) {
            report_line(report,
                        "ERROR: block index %" PRIu32 " also used by %" PRIu32
                        " (map entries %" PRIu32 " and %" PRIu32 ")",
                        e, e, user[e], b);
            res->corruptions++;
        } else {
            user[e] = b;
        }
    }
    if (counted != s->hdr.allocated) {
        report_line(report, "ERROR: allocated blocks mismatch, is %" PRIu32 ", should be %" PRIu32,
                    counted, s->hdr.allocated);
        res->corruptions++;
    }
    return 0;
}
