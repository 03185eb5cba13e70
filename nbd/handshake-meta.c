/* nbd/handshake-meta.c: NBD_OPT_LIST_META_CONTEXT and
 * NBD_OPT_SET_META_CONTEXT: the replies, and the selection a SET leaves
 * on the connection.  The contexts an export offers are meta.c's table;
 * queries for namespaces or names we do not know are ignored, as the spec
 * requires.  The option was parsed and checked by option.c. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handshake.h"
#include "meta.h"
#include "names.h"
#include "option.h"

int nbd_opt_meta_context(struct nbd_conn *c, uint32_t opt, const struct nbd_opt_meta *req)
{
    bool list = opt == NBD_OPT_LIST_META_CONTEXT;
    bool sel[NBD_META_MAX] = {false};
    const struct nbd_export *e = nbd_find_export(c->srv, req->export_name);
    char bufs[NBD_META_MAX][NBD_META_NAME_MAX];
    const char *names[NBD_META_MAX];
    uint32_t cursor = 0, qlen;
    const char *q;
    int r;

    if (!e) {
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_UNKNOWN, "export '%s' not found",
                                 req->export_name);
    }
    for (unsigned i = 0; i < nbd_meta_count(e); i++) {
        names[i] = nbd_meta_name(e, i, bufs[i], sizeof bufs[i]);
    }
    while (nbd_opt_meta_next(req, &cursor, &q, &qlen)) {
        nbd_opt_meta_match(names, nbd_meta_count(e), q, qlen, list, sel);
    }
    if (list && req->n_queries == 0) {
        for (unsigned m = 0; m < nbd_meta_count(e); m++) {
            sel[m] = true;
        }
    }
    for (unsigned m = 0; m < nbd_meta_count(e); m++) {
        if (!sel[m]) {
            continue;
        }
        const char *mname = names[m];
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
        c->meta_export = strdup(req->export_name);
        if (!c->meta_export) {
            return -ENOMEM;
        }
    }
    return nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
}
