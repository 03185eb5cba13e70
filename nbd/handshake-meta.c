/* nbd/handshake-meta.c: NBD_OPT_LIST_META_CONTEXT and
 * NBD_OPT_SET_META_CONTEXT.  We offer "base:allocation" and, as qemu-nbd
 * does, "qemu:allocation-depth" and "qemu:dirty-bitmap:NAME" for each
 * bitmap the export was given; queries for namespaces or names we do not
 * know are ignored, as the spec requires. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/bitmap.h"
#include "common/cleanup.h"
#include "handshake.h"
#include "names.h"

unsigned nbd_meta_count(const struct nbd_export *e)
{
    return NBD_META_DIRTY_BITMAP + e->n_bitmaps;
}

const char *nbd_meta_name(const struct nbd_export *e, unsigned i, char *buf, size_t size)
{
    switch (i) {
    case NBD_META_BASE_ALLOCATION:
        return "base:allocation";
    case NBD_META_ALLOCATION_DEPTH:
        return "qemu:allocation-depth";
    default:
        snprintf(buf, size, "%s%s", NBD_DIRTY_BITMAP_PREFIX,
                 e->bitmaps[i - NBD_META_DIRTY_BITMAP]->name);
        return buf;
    }
}

/* A cursor over option data that never reads past the end. */
struct opt_cursor {
    const char *p;
    uint32_t left;
};

static bool cursor_u32(struct opt_cursor *cur, uint32_t *v)
{
    if (cur->left < 4) {
        return false;
    }
    memcpy(v, cur->p, 4);
    *v = be32toh(*v);
    cur->p += 4;
    cur->left -= 4;
    return true;
}

static bool cursor_string(struct opt_cursor *cur, uint32_t len, const char **s)
{
    if (len > cur->left || !nbd_valid_name(cur->p, len)) {
        return false;
    }
    *s = cur->p;
    cur->p += len;
    cur->left -= len;
    return true;
}

/* Which contexts of export e does one query select?  A full name selects
 * that context; in LIST only, "ns:" selects a namespace and
 * "qemu:dirty-bitmap:" every bitmap, as qemu-nbd answers. */
static void meta_match(const struct nbd_export *e, const char *q, uint32_t qlen, bool list,
                       bool sel[NBD_META_MAX])
{
    for (unsigned i = 0; i < nbd_meta_count(e); i++) {
        char buf[NBD_META_NAME_MAX];
        const char *name = nbd_meta_name(e, i, buf, sizeof buf);
        size_t nslen = (size_t)(strchr(name, ':') - name) + 1;
        size_t plen = strlen(NBD_DIRTY_BITMAP_PREFIX);

        if (qlen == strlen(name) && memcmp(q, name, qlen) == 0) {
            sel[i] = true;
        } else if (list && qlen == nslen && memcmp(q, name, nslen) == 0) {
            sel[i] = true;
        } else if (list && i >= NBD_META_DIRTY_BITMAP && qlen == plen &&
                   memcmp(q, NBD_DIRTY_BITMAP_PREFIX, plen) == 0) {
            sel[i] = true;
        }
    }
}

int nbd_opt_meta_context(struct nbd_conn *c, uint32_t opt, const char *data, uint32_t len)
{
    bool list = opt == NBD_OPT_LIST_META_CONTEXT;
    struct opt_cursor cur = {data, len};
    bool sel[NBD_META_MAX] = {false};
    const struct nbd_export *e;
    uint32_t namelen, nq;
    const char *name;
    char export_name[NBD_MAX_STRING + 1];
    int r;

    if (!list && !c->structured) {
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_INVALID,
                                 "NBD_OPT_SET_META_CONTEXT needs structured replies first");
    }
    if (!cursor_u32(&cur, &namelen) || !cursor_string(&cur, namelen, &name) ||
        !cursor_u32(&cur, &nq)) {
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_INVALID, "%s: malformed request",
                                 nbd_opt_name(opt));
    }
    memcpy(export_name, name, namelen);
    export_name[namelen] = '\0';
    e = nbd_find_export(c->srv, export_name);
    for (uint32_t i = 0; i < nq; i++) {
        uint32_t qlen;
        const char *q;

        if (!cursor_u32(&cur, &qlen) || !cursor_string(&cur, qlen, &q)) {
            return nbd_opt_reply_err(c, opt, NBD_REP_ERR_INVALID,
                                     "%s: query %" PRIu32 " is malformed", nbd_opt_name(opt), i);
        }
        if (e) {
            meta_match(e, q, qlen, list, sel);
        }
    }
    if (cur.left != 0) {
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_INVALID, "%s: trailing data",
                                 nbd_opt_name(opt));
    }
    if (!e) {
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_UNKNOWN, "export '%s' not found", export_name);
    }
    if (list && nq == 0) {
        for (unsigned m = 0; m < nbd_meta_count(e); m++) {
            sel[m] = true;
        }
    }
    for (unsigned m = 0; m < nbd_meta_count(e); m++) {
        if (!sel[m]) {
            continue;
        }
        char nbuf[NBD_META_NAME_MAX];
        const char *mname = nbd_meta_name(e, m, nbuf, sizeof nbuf);
        size_t ml = strlen(mname);
        uint8_t buf[4 + NBD_META_NAME_MAX];
        /* LIST replies carry id 0, as the spec recommends. */
        uint32_t id = htobe32(list ? 0 : nbd_meta_id(m));

        memcpy(buf, &id, 4);
        memcpy(buf + 4, mname, ml);
        r = nbd_opt_reply(c, opt, NBD_REP_META_CONTEXT, buf, (uint32_t)(4 + ml));
        if (r < 0) {
            return r;
        }
    }
    if (!list) {
        memcpy(c->meta_selected, sel, sizeof sel);
        free(c->meta_export);
        c->meta_export = strdup(export_name);
        if (!c->meta_export) {
            return -ENOMEM;
        }
    }
    return nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
}
