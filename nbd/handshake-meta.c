/* nbd/handshake-meta.c: NBD_OPT_LIST_META_CONTEXT and
 * NBD_OPT_SET_META_CONTEXT.  We offer "base:allocation" and, as qemu-nbd
 * does, "qemu:allocation-depth"; queries for namespaces or names we do not
 * know are ignored, as the spec requires. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "handshake.h"
#include "names.h"

const char *nbd_meta_name(enum nbd_meta_context m)
{
    static const char *const names[NBD_META_COUNT] = {
        [NBD_META_BASE_ALLOCATION] = "base:allocation",
        [NBD_META_ALLOCATION_DEPTH] = "qemu:allocation-depth",
    };
    return names[m];
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

/* Which of our contexts does one query select?  "ns:" lists a namespace
 * (LIST only); a full name selects that context. */
static void meta_match(const char *q, uint32_t qlen, bool list, bool sel[NBD_META_COUNT])
{
    for (int m = 0; m < NBD_META_COUNT; m++) {
        const char *name = nbd_meta_name((enum nbd_meta_context)m);
        const char *colon = strchr(name, ':');
        size_t nslen = (size_t)(colon - name) + 1;

        if (qlen == strlen(name) && memcmp(q, name, qlen) == 0) {
            sel[m] = true;
        } else if (list && qlen == nslen && memcmp(q, name, nslen) == 0) {
            sel[m] = true;
        }
    }
}

int nbd_opt_meta_context(struct nbd_conn *c, uint32_t opt, const char *data, uint32_t len)
{
    bool list = opt == NBD_OPT_LIST_META_CONTEXT;
    struct opt_cursor cur = {data, len};
    bool sel[NBD_META_COUNT] = {false};
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
    for (uint32_t i = 0; i < nq; i++) {
        uint32_t qlen;
        const char *q;

        if (!cursor_u32(&cur, &qlen) || !cursor_string(&cur, qlen, &q)) {
            return nbd_opt_reply_err(c, opt, NBD_REP_ERR_INVALID,
                                     "%s: query %" PRIu32 " is malformed", nbd_opt_name(opt), i);
        }
        meta_match(q, qlen, list, sel);
    }
    if (cur.left != 0) {
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_INVALID, "%s: trailing data",
                                 nbd_opt_name(opt));
    }
    if (!nbd_find_export(c->srv, export_name)) {
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_UNKNOWN, "export '%s' not found", export_name);
    }
    if (list && nq == 0) {
        for (int m = 0; m < NBD_META_COUNT; m++) {
            sel[m] = true;
        }
    }
    for (int m = 0; m < NBD_META_COUNT; m++) {
        if (!sel[m]) {
            continue;
        }
        const char *mname = nbd_meta_name((enum nbd_meta_context)m);
        size_t ml = strlen(mname);
        uint8_t buf[4 + 64];
        /* LIST replies carry id 0, as the spec recommends. */
        uint32_t id = htobe32(list ? 0 : nbd_meta_id((enum nbd_meta_context)m));

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
