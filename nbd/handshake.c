/* nbd/handshake.c: phase 1, the fixed newstyle handshake.
 *
 * Greeting, client flags, then option haggling until EXPORT_NAME or GO
 * picks an export.  Every option payload is read whole before it is
 * answered, so an error never desynchronises the stream; unknown options
 * get ERR_UNSUP and haggling goes on.  The connection is dropped only
 * where the spec allows: a bad magic, unknown client flags, EXPORT_NAME
 * for an unknown export, ABORT, an absurd option length, or the deadline.
 * Option payloads are parsed and checked by option.c; metadata context
 * options are answered in handshake-meta.c. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/log.h"
#include "handshake.h"
#include "names.h"
#include "option.h"
#include "tls.h"

struct nbd_export *nbd_find_export(struct nbd_server *srv, const char *name)
{
    for (struct nbd_export *e = srv->exports; e; e = e->next) {
        if (strcmp(e->name, name) == 0) {
            return e;
        }
    }
    return NULL;
}

uint16_t nbd_export_flags(const struct nbd_conn *c, const struct nbd_export *exp)
{
    uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_CACHE;

    if (c->structured) {
        f |= NBD_FLAG_SEND_DF;
    }
    if (blk_image_read_only(exp->img)) {
        f |= NBD_FLAG_READ_ONLY;
    } else {
        f |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES;
        if (blk_image_can_fast_zero(exp->img)) {
            f |= NBD_FLAG_SEND_FAST_ZERO;
        }
    }
    /* Every connection shares one open image (one cache, one flush), so a
     * flush on one connection covers writes acknowledged on any other. */
    if (c->srv->cfg.max_connections != 1) {
        f |= NBD_FLAG_CAN_MULTI_CONN;
    }
    return f;
}

int nbd_opt_reply(struct nbd_conn *c, uint32_t opt, uint32_t type, const void *data, uint32_t len)
{
    struct nbd_option_reply h = {
        .magic = htobe64(NBD_REP_MAGIC),
        .option = htobe32(opt),
        .reply = htobe32(type),
        .replylen = htobe32(len),
    };
    struct iovec iov[2] = {{&h, sizeof h}, {(void *)data, len}};

    if (debug_nbd_requests) {
        log_debug("reply %s to %s", nbd_rep_name(type), nbd_opt_name(opt));
    }
    return nbd_conn_send(c, iov, len ? 2 : 1);
}

int nbd_opt_reply_err(struct nbd_conn *c, uint32_t opt, uint32_t type, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) {
        n = 0;
    }
    if (log_verbosity > 0) {
        char esc[1024]; /* the message may quote the client's strings */
        log_debug("%s: %s: %s", nbd_opt_name(opt), nbd_rep_name(type),
                  nbd_log_str(msg, esc, sizeof esc));
    }
    return nbd_opt_reply(c, opt, type, msg, (uint32_t)MIN((size_t)n, sizeof msg - 1));
}

static int nbd_send_info(struct nbd_conn *c, uint32_t opt, uint16_t type, const void *payload,
                         uint32_t len)
{
    uint8_t buf[2 + NBD_MAX_STRING];
    uint16_t be = htobe16(type);

    memcpy(buf, &be, 2);
    memcpy(buf + 2, payload, len);
    return nbd_opt_reply(c, opt, NBD_REP_INFO, buf, 2 + len);
}

/* NBD_OPT_INFO and NBD_OPT_GO.  Returns 1 when GO succeeded. */
static int nbd_opt_info_go(struct nbd_conn *c, uint32_t opt, const struct nbd_opt_go *go)
{
    struct nbd_export *exp;
    int r;

    exp = nbd_find_export(c->srv, go->name);
    if (!exp) {
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_UNKNOWN, "export '%s' not found", go->name);
    }

    struct __attribute__((packed)) {
        uint64_t size;
        uint16_t flags;
    } export_info = {htobe64(blk_image_size(exp->img)), htobe16(nbd_export_flags(c, exp))};
    r = nbd_send_info(c, opt, NBD_INFO_EXPORT, &export_info, sizeof export_info);
    if (r == 0 && go->want_name) {
        r = nbd_send_info(c, opt, NBD_INFO_NAME, exp->name, (uint32_t)strlen(exp->name));
    }
    if (r == 0 && go->want_desc && exp->description) {
        r = nbd_send_info(c, opt, NBD_INFO_DESCRIPTION, exp->description,
                          (uint32_t)strlen(exp->description));
    }
    if (r == 0) {
        /* Any alignment works (unaligned writes are read-modify-written),
         * and the export size need not be a multiple of anything. */
        uint32_t sizes[3] = {htobe32(1), htobe32(NBD_PREFERRED_BLOCK), htobe32(NBD_MAX_PAYLOAD)};
        r = nbd_send_info(c, opt, NBD_INFO_BLOCK_SIZE, sizes, sizeof sizes);
    }
    if (r == 0) {
        r = nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
    }
    if (r < 0 || opt != NBD_OPT_GO) {
        return r;
    }
    c->exp = exp;
    return 1;
}

/* NBD_OPT_EXPORT_NAME: no error path in the protocol, so failure drops. */
static int nbd_opt_export_name(struct nbd_conn *c, const char *name)
{
    struct nbd_export_name_reply reply = {0};
    struct nbd_export *exp = nbd_find_export(c->srv, name);
    int r;

    if (!exp) {
        char esc[4 * NBD_MAX_STRING + 1]; /* a name the client chose */
        return err_setx(ENOENT, "NBD_OPT_EXPORT_NAME: export '%s' not found",
                        nbd_log_str(name, esc, sizeof esc));
    }
    reply.exportsize = htobe64(blk_image_size(exp->img));
    reply.eflags = htobe16(nbd_export_flags(c, exp));
    r = nbd_conn_send_buf(c, &reply, c->no_zeroes ? 10 : sizeof reply);
    if (r < 0) {
        return r;
    }
    c->exp = exp;
    return 1;
}

static int nbd_opt_list(struct nbd_conn *c)
{
    for (struct nbd_export *e = c->srv->exports; e; e = e->next) {
        size_t nl = strlen(e->name), dl = e->description ? strlen(e->description) : 0;
        CLEANUP_FREE uint8_t *buf = malloc(4 + nl + dl);
        uint32_t be = htobe32((uint32_t)nl);
        int r;

        if (!buf) {
            return -ENOMEM;
        }
        memcpy(buf, &be, 4);
        memcpy(buf + 4, e->name, nl);
        if (dl) {
            memcpy(buf + 4 + nl, e->description, dl);
        }
        r = nbd_opt_reply(c, NBD_OPT_LIST, NBD_REP_SERVER, buf, (uint32_t)(4 + nl + dl));
        if (r < 0) {
            return r;
        }
    }
    return nbd_opt_reply(c, NBD_OPT_LIST, NBD_REP_ACK, NULL, 0);
}

/* NBD_OPT_STARTTLS: upgrade, then forget everything negotiated in the
 * clear (structured replies, metadata contexts), as the spec requires. */
static int nbd_opt_starttls(struct nbd_conn *c)
{
    struct nbd_server *srv = c->srv;
    int r;

    if (c->rpos < c->rlen) {
        /* Bytes sent after STARTTLS before our answer: not a TLS client. */
        return err_setx(EPROTO, "data after NBD_OPT_STARTTLS before the reply");
    }
    r = nbd_opt_reply(c, NBD_OPT_STARTTLS, NBD_REP_ACK, NULL, 0);
    if (r < 0) {
        return r;
    }
    r = nbd_tls_handshake(srv->cfg.tls, c->fd, c->deadline_ns, &c->tls, c->tls_peer,
                          sizeof c->tls_peer);
    if (r < 0) {
        return r; /* the message says why */
    }
    c->structured = false;
    memset(c->meta_selected, 0, sizeof c->meta_selected);
    free(c->meta_export);
    c->meta_export = NULL;
    char esc[512];
    log_debug("TLS established%s%s", c->tls_peer[0] ? " with " : "",
              nbd_log_str(c->tls_peer, esc, sizeof esc));
    return 0;
}

/* One option.  Returns 1 when the client entered transmission, 0 to keep
 * haggling, <0 to drop the connection. */
static int nbd_handle_option(struct nbd_conn *c, uint32_t opt, const char *data, uint32_t len)
{
    const struct nbd_server_config *cfg = &c->srv->cfg;
    struct nbd_opt_state st = {
        .tls_required = cfg->tls_mode == NBD_TLS_REQUIRE,
        .tls_offered = cfg->tls && cfg->tls_mode != NBD_TLS_OFF,
        .tls_active = c->tls != NULL,
        .structured = c->structured,
    };
    struct nbd_opt_parsed p;

    switch (nbd_opt_parse(&st, opt, data, len, &p)) {
    case NBD_OPT_PARSE_DROP:
        return err_setx(p.drop_err, "%s", p.msg);
    case NBD_OPT_PARSE_REFUSE:
        return nbd_opt_reply_err(c, opt, p.rep_err, "%s", p.msg);
    case NBD_OPT_PARSE_OK:
        break;
    }
    switch (opt) {
    case NBD_OPT_EXPORT_NAME:
        return nbd_opt_export_name(c, p.u.export_name);
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
        return nbd_opt_info_go(c, opt, &p.u.go);
    case NBD_OPT_LIST:
        return nbd_opt_list(c);
    case NBD_OPT_ABORT:
        (void)nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
        return -ECONNABORTED;
    case NBD_OPT_STRUCTURED_REPLY:
        c->structured = true;
        return nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
        return nbd_opt_meta_context(c, opt, &p.u.meta);
    case NBD_OPT_STARTTLS:
        return nbd_opt_starttls(c);
    default: /* the parser refuses every other option */
        return nbd_opt_reply_err(c, opt, NBD_REP_ERR_UNSUP, "%s is not supported",
                                 nbd_opt_name(opt));
    }
}

static int nbd_greet(struct nbd_conn *c)
{
    struct nbd_new_handshake hs = {
        .nbdmagic = htobe64(NBD_MAGIC),
        .version = htobe64(NBD_IHAVEOPT),
        .gflags = htobe16(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES),
    };
    uint8_t cflags[4];
    int r = nbd_conn_send_buf(c, &hs, sizeof hs);

    if (r == 0) {
        r = nbd_conn_recv(c, cflags, sizeof cflags);
    }
    if (r < 0) {
        return r;
    }
    if (nbd_opt_client_flags(cflags, &c->no_zeroes) < 0) {
        uint32_t f;
        memcpy(&f, cflags, 4);
        return err_setx(EINVAL, "unknown client flags 0x%" PRIx32, be32toh(f));
    }
    return 0;
}

/* One option header and its payload (malloc'd into *data). */
static int nbd_recv_option(struct nbd_conn *c, uint32_t *opt, char **data, uint32_t *len)
{
    uint8_t h[NBD_OPTION_HEADER_SIZE];
    int r = nbd_conn_recv(c, h, sizeof h);

    *data = NULL;
    if (r < 0) {
        return r;
    }
    r = nbd_opt_header(h, opt, len);
    if (r == -EPROTO) {
        return err_setx(EPROTO, "bad option magic");
    }
    if (r == -E2BIG) {
        return err_setx(E2BIG, "%s with %" PRIu32 " bytes of data", nbd_opt_name(*opt), *len);
    }
    *data = malloc((size_t)*len + 1);
    if (!*data) {
        return -ENOMEM;
    }
    r = nbd_conn_recv(c, *data, *len);
    (*data)[*len] = '\0';
    return r;
}

int nbd_handshake(struct nbd_conn *c)
{
    int r = nbd_greet(c);

    while (r == 0) {
        CLEANUP_FREE char *data = NULL;
        uint32_t opt, len;

        r = nbd_recv_option(c, &opt, &data, &len);
        if (r < 0) {
            break;
        }
        if (debug_nbd_requests) {
            log_debug("option %s, %" PRIu32 " bytes", nbd_opt_name(opt), len);
        }
        r = nbd_handle_option(c, opt, data, len);
    }
    if (r == 1) {
        if (c->meta_export && strcmp(c->meta_export, c->exp->name) != 0) {
            /* Contexts were selected for another export: not for this one. */
            memset(c->meta_selected, 0, sizeof c->meta_selected);
        }
        c->eflags = nbd_export_flags(c, c->exp);
        return 0;
    }
    return r;
}
