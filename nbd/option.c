/* nbd/option.c: parsing the client's side of the handshake (see
 * option.h).  Every length is checked against the bytes actually there
 * before anything is read, so a hostile length can only produce an
 * error reply; only a bad option magic, an absurd option length, unknown
 * client flags and a bad EXPORT_NAME (which has no error reply) end the
 * connection. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "names.h"
#include "option.h"

int nbd_opt_client_flags(const void *wire4, bool *no_zeroes)
{
    uint32_t f;

    memcpy(&f, wire4, 4);
    f = be32toh(f);
    if (f & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
        return -EINVAL;
    }
    *no_zeroes = f & NBD_FLAG_C_NO_ZEROES;
    return 0;
}

int nbd_opt_header(const void *wire16, uint32_t *opt, uint32_t *len)
{
    struct nbd_option_header h;

    memcpy(&h, wire16, sizeof h);
    *opt = be32toh(h.option);
    *len = be32toh(h.optlen);
    if (be64toh(h.version) != NBD_IHAVEOPT) {
        return -EPROTO;
    }
    return *len > NBD_MAX_OPTION_LEN ? -E2BIG : 0;
}

bool nbd_valid_name(const char *s, uint32_t len)
{
    return len <= NBD_MAX_STRING && memchr(s, '\0', len) == NULL;
}

/* code: an NBD_REP_ERR_* to refuse, an errno to drop. */
static enum nbd_opt_verdict verdict(struct nbd_opt_parsed *out, enum nbd_opt_verdict v,
                                    uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum nbd_opt_verdict verdict(struct nbd_opt_parsed *out, enum nbd_opt_verdict v,
                                    uint32_t code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out->msg, sizeof out->msg, fmt, ap);
    va_end(ap);
    if (v == NBD_OPT_PARSE_DROP) {
        out->drop_err = (int)code;
    } else {
        out->rep_err = code;
    }
    return v;
}

#define REFUSE(out, err, ...) verdict(out, NBD_OPT_PARSE_REFUSE, err, __VA_ARGS__)
#define DROP(out, err, ...) verdict(out, NBD_OPT_PARSE_DROP, err, __VA_ARGS__)

/* A cursor over option data that never reads past the end. */
struct cursor {
    const char *p;
    uint32_t left;
};

static bool cursor_u32(struct cursor *cur, uint32_t *v)
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

/* A length-prefixed name; copied NUL-terminated to buf when buf is set. */
static bool cursor_name(struct cursor *cur, char *buf)
{
    uint32_t len;

    if (!cursor_u32(cur, &len) || len > cur->left || !nbd_valid_name(cur->p, len)) {
        return false;
    }
    if (buf) {
        memcpy(buf, cur->p, len);
        buf[len] = '\0';
    }
    cur->p += len;
    cur->left -= len;
    return true;
}

/* NBD_OPT_INFO and NBD_OPT_GO: be32 name length, name, be16 count of
 * information requests, be16 each. */
static enum nbd_opt_verdict parse_go(uint32_t opt, const char *data, uint32_t len,
                                     struct nbd_opt_parsed *out)
{
    struct nbd_opt_go *go = &out->u.go;
    const char *name = nbd_opt_name(opt);
    uint32_t namelen;
    uint16_t nreq;

    go->want_name = go->want_desc = false;
    if (len < 6) {
        return REFUSE(out, NBD_REP_ERR_INVALID, "%s: payload too short", name);
    }
    memcpy(&namelen, data, 4);
    namelen = be32toh(namelen);
    if (namelen > len - 6) {
        return REFUSE(out, NBD_REP_ERR_INVALID, "%s: name length %" PRIu32 " overruns the option",
                      name, namelen);
    }
    memcpy(&nreq, data + 4 + namelen, 2);
    nreq = be16toh(nreq);
    if (len != 4 + namelen + 2 + 2u * nreq) {
        return REFUSE(out, NBD_REP_ERR_INVALID,
                      "%s: %u information requests do not match the option length", name, nreq);
    }
    if (!nbd_valid_name(data + 4, namelen)) {
        return REFUSE(out, NBD_REP_ERR_INVALID, "%s: invalid export name", name);
    }
    memcpy(go->name, data + 4, namelen);
    go->name[namelen] = '\0';
    for (uint16_t i = 0; i < nreq; i++) {
        uint16_t info;
        memcpy(&info, data + 4 + namelen + 2 + 2 * i, 2);
        switch (be16toh(info)) {
        case NBD_INFO_NAME:
            go->want_name = true;
            break;
        case NBD_INFO_DESCRIPTION:
            go->want_desc = true;
            break;
        default:
            break; /* BLOCK_SIZE is always sent; unknown requests are ignored */
        }
    }
    return NBD_OPT_PARSE_OK;
}

/* NBD_OPT_{LIST,SET}_META_CONTEXT: be32 + export name, be32 query
 * count, then each query as be32 + name. */
static enum nbd_opt_verdict parse_meta(const struct nbd_opt_state *st, uint32_t opt,
                                       const char *data, uint32_t len, struct nbd_opt_parsed *out)
{
    struct nbd_opt_meta *m = &out->u.meta;
    struct cursor cur = {data, len};
    const char *name = nbd_opt_name(opt);

    if (opt == NBD_OPT_SET_META_CONTEXT && !st->structured) {
        return REFUSE(out, NBD_REP_ERR_INVALID,
                      "NBD_OPT_SET_META_CONTEXT needs structured replies first");
    }
    if (!cursor_name(&cur, m->export_name) || !cursor_u32(&cur, &m->n_queries)) {
        return REFUSE(out, NBD_REP_ERR_INVALID, "%s: malformed request", name);
    }
    m->queries = cur.p;
    m->queries_len = cur.left;
    for (uint32_t i = 0; i < m->n_queries; i++) {
        if (!cursor_name(&cur, NULL)) {
            return REFUSE(out, NBD_REP_ERR_INVALID, "%s: query %" PRIu32 " is malformed", name, i);
        }
    }
    if (cur.left != 0) {
        return REFUSE(out, NBD_REP_ERR_INVALID, "%s: trailing data", name);
    }
    return NBD_OPT_PARSE_OK;
}

bool nbd_opt_meta_next(const struct nbd_opt_meta *m, uint32_t *cursor, const char **q,
                       uint32_t *qlen)
{
    struct cursor cur = {m->queries + *cursor, m->queries_len - *cursor};

    if (*cursor >= m->queries_len || !cursor_u32(&cur, qlen) || *qlen > cur.left) {
        return false;
    }
    *q = cur.p;
    *cursor += 4 + *qlen;
    return true;
}

void nbd_opt_meta_match(const char *const *names, unsigned n, const char *q, uint32_t qlen,
                        bool list, bool *sel)
{
    size_t plen = strlen(NBD_DIRTY_BITMAP_PREFIX);

    for (unsigned i = 0; i < n; i++) {
        const char *name = names[i], *colon = strchr(name, ':');
        size_t nslen = colon ? (size_t)(colon - name) + 1 : 0;

        if (qlen == strlen(name) && memcmp(q, name, qlen) == 0) {
            sel[i] = true;
        } else if (list && nslen && qlen == nslen && memcmp(q, name, nslen) == 0) {
            sel[i] = true;
        } else if (list && qlen == plen && memcmp(q, NBD_DIRTY_BITMAP_PREFIX, plen) == 0 &&
                   strncmp(name, NBD_DIRTY_BITMAP_PREFIX, plen) == 0) {
            sel[i] = true;
        }
    }
}

/* What the TLS policy says before the payload is looked at. */
static enum nbd_opt_verdict check_tls(const struct nbd_opt_state *st, uint32_t opt,
                                      struct nbd_opt_parsed *out)
{
    if (!st->tls_required || st->tls_active || opt == NBD_OPT_STARTTLS || opt == NBD_OPT_ABORT) {
        return NBD_OPT_PARSE_OK;
    }
    /* Nothing about the exports leaks before TLS; EXPORT_NAME has no
     * error reply, so it ends the connection. */
    if (opt == NBD_OPT_EXPORT_NAME) {
        return DROP(out, EACCES, "NBD_OPT_EXPORT_NAME before TLS");
    }
    return REFUSE(out, NBD_REP_ERR_TLS_REQD, "TLS is required (STARTTLS)");
}

static enum nbd_opt_verdict parse_starttls(const struct nbd_opt_state *st, uint32_t len,
                                           struct nbd_opt_parsed *out)
{
    if (!st->tls_offered) {
        return REFUSE(out, NBD_REP_ERR_POLICY, "TLS is not enabled on this server");
    }
    if (st->tls_active) {
        return REFUSE(out, NBD_REP_ERR_INVALID, "TLS is already active");
    }
    if (len != 0) {
        return REFUSE(out, NBD_REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
    }
    return NBD_OPT_PARSE_OK;
}

enum nbd_opt_verdict nbd_opt_parse(const struct nbd_opt_state *st, uint32_t opt, const char *data,
                                   uint32_t len, struct nbd_opt_parsed *out)
{
    enum nbd_opt_verdict v;

    out->opt = opt;
    out->rep_err = 0;
    out->drop_err = 0;
    out->msg[0] = '\0';
    v = check_tls(st, opt, out);
    if (v != NBD_OPT_PARSE_OK) {
        return v;
    }
    switch (opt) {
    case NBD_OPT_EXPORT_NAME:
        if (!nbd_valid_name(data, len)) {
            return DROP(out, EINVAL, "NBD_OPT_EXPORT_NAME: invalid export name");
        }
        memcpy(out->u.export_name, data, len);
        out->u.export_name[len] = '\0';
        return NBD_OPT_PARSE_OK;
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
        return parse_go(opt, data, len, out);
    case NBD_OPT_ABORT:
        return NBD_OPT_PARSE_OK;
    case NBD_OPT_LIST:
    case NBD_OPT_STRUCTURED_REPLY:
        if (len != 0) {
            return REFUSE(out, NBD_REP_ERR_INVALID, "%s takes no data", nbd_opt_name(opt));
        }
        return NBD_OPT_PARSE_OK;
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
        return parse_meta(st, opt, data, len, out);
    case NBD_OPT_STARTTLS:
        return parse_starttls(st, len, out);
    default:
        return REFUSE(out, NBD_REP_ERR_UNSUP, "option %" PRIu32 " (%s) is not supported", opt,
                      nbd_opt_name(opt));
    }
}
