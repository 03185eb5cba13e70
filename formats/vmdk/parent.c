/* formats/vmdk/parent.c: the parent of a child image (a snapshot's delta:
 * parentFileNameHint and parentCID in the descriptor, as qemu-img
 * create -b and VMware write them).
 *
 * The parent is opened through formats/named-file.c (relative to the
 * child, a vmdk image, loops and depth checked, refused by --untrusted),
 * and must still have the CID the child recorded: a parent written since
 * would show the child's grains over data they were not made for.  Grains
 * the child does not hold read from the parent. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"
#include "formats/named-file.h"
#include "vmdk.h"

bool vmdk_has_parent(const struct vmdk_state *s)
{
    return s->desc.parent_hint && s->desc.parent_cid != UINT32_MAX;
}

int vmdk_parent_path(const struct vmdk_state *s, char **out)
{
    return fmt_named_path("vmdk", "parent image", s->node->filename, s->desc.parent_hint, 0, out);
}

int vmdk_open_parent(struct vmdk_state *s, const struct blk_open_opts *opts)
{
    CLEANUP_FREE char *path = NULL;
    int r;

    if (opts->untrusted) {
        return fmt_refuse_named("vmdk", "parent image", s->desc.parent_hint);
    }
    r = vmdk_parent_path(s, &path);
    if (r == 0) {
        r = fmt_open_backing(s->node, opts, path, "vmdk", &s->backing);
    }
    if (r < 0) {
        return r;
    }
    s->node->backing = s->backing;
    const struct vmdk_state *ps = s->backing->opaque;
    if (s->backing->drv == s->node->drv && ps->desc.cid != s->desc.parent_cid) {
        CLEANUP_FREE char *esc = str_escape(s->desc.parent_hint);
        return err_setx(EINVAL,
                        "vmdk: the parent '%s' has CID %08" PRIx32 ", not the parentCID %08" PRIx32
                        " the image recorded: it changed after this image was made",
                        esc ? esc : "?", ps->desc.cid, s->desc.parent_cid);
    }
    return 0;
}

/* Guest bytes [off, off+len) as the parent has them (zeroes past its end). */
int vmdk_read_parent(struct vmdk_state *s, uint64_t off, uint8_t *buf, uint64_t len)
{
    int64_t plen = blk_get_length(s->backing);

    if (plen < 0) {
        return (int)plen;
    }
    uint64_t have = off < (uint64_t)plen ? MIN(len, (uint64_t)plen - off) : 0;
    memset(buf + have, 0, len - have);
    return have ? blk_pread(s->backing, off, buf, have) : 0;
}
