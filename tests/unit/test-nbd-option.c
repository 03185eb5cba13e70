/* tests/unit/test-nbd-option.c: the handshake parser (nbd/option.c):
 * client flags, option headers, each option's payload, the TLS policy,
 * meta context queries and how they match, good and hostile. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nbd/option.h"

CHECK_GLOBALS

static const struct nbd_opt_state plain = {.structured = false};
static const struct nbd_opt_state structured = {.structured = true};
static const struct nbd_opt_state tls_req = {.tls_required = true, .tls_offered = true};
static const struct nbd_opt_state tls_on = {.tls_offered = true};
static const struct nbd_opt_state tls_done = {
    .tls_required = true, .tls_offered = true, .tls_active = true, .structured = true};

/* A payload under construction. */
struct buf {
    char d[8192];
    uint32_t n;
};

static void put32(struct buf *b, uint32_t v)
{
    v = htobe32(v);
    memcpy(b->d + b->n, &v, 4);
    b->n += 4;
}

static void put16(struct buf *b, uint16_t v)
{
    v = htobe16(v);
    memcpy(b->d + b->n, &v, 2);
    b->n += 2;
}

static void put(struct buf *b, const void *p, uint32_t len)
{
    memcpy(b->d + b->n, p, len);
    b->n += len;
}

static void put_str(struct buf *b, const char *s)
{
    put32(b, (uint32_t)strlen(s));
    put(b, s, (uint32_t)strlen(s));
}

static enum nbd_opt_verdict parse(const struct nbd_opt_state *st, uint32_t opt, const struct buf *b,
                                  struct nbd_opt_parsed *p)
{
    /* A copy of exactly b->n bytes, so ASan sees any read past the end. */
    char *copy = malloc(b->n ? b->n : 1);
    memcpy(copy, b->d, b->n);
    enum nbd_opt_verdict v = nbd_opt_parse(st, opt, copy, b->n, p);
    if (v == NBD_OPT_PARSE_OK &&
        (opt == NBD_OPT_LIST_META_CONTEXT || opt == NBD_OPT_SET_META_CONTEXT)) {
        /* the queries point into the data: walk them while it lives */
        uint32_t cur = 0, qlen, n = 0;
        const char *q;
        while (nbd_opt_meta_next(&p->u.meta, &cur, &q, &qlen)) {
            n++;
        }
        CHECK_EQ(n, p->u.meta.n_queries);
        p->u.meta.queries = NULL;
    }
    free(copy);
    return v;
}

static void test_client_flags(void)
{
    uint32_t f;
    bool nz = true;

    f = htobe32(NBD_FLAG_C_FIXED_NEWSTYLE);
    CHECK_EQ(nbd_opt_client_flags(&f, &nz), 0);
    CHECK(!nz);
    f = htobe32(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
    CHECK_EQ(nbd_opt_client_flags(&f, &nz), 0);
    CHECK(nz);
    f = htobe32(0);
    CHECK_EQ(nbd_opt_client_flags(&f, &nz), 0);
    f = htobe32(0x80);
    CHECK_EQ(nbd_opt_client_flags(&f, &nz), -EINVAL);
    f = htobe32(0xffffffff);
    CHECK_EQ(nbd_opt_client_flags(&f, &nz), -EINVAL);
}

static void test_header(void)
{
    struct nbd_option_header h = {htobe64(NBD_IHAVEOPT), htobe32(NBD_OPT_GO), htobe32(10)};
    uint32_t opt, len;

    CHECK_EQ(nbd_opt_header(&h, &opt, &len), 0);
    CHECK_EQ(opt, NBD_OPT_GO);
    CHECK_EQ(len, 10);
    h.optlen = htobe32(NBD_MAX_OPTION_LEN);
    CHECK_EQ(nbd_opt_header(&h, &opt, &len), 0);
    h.optlen = htobe32(NBD_MAX_OPTION_LEN + 1);
    CHECK_EQ(nbd_opt_header(&h, &opt, &len), -E2BIG);
    h.optlen = htobe32(0xfffffff0);
    CHECK_EQ(nbd_opt_header(&h, &opt, &len), -E2BIG);
    CHECK_EQ(len, 0xfffffff0); /* for the message */
    h.version = htobe64(NBD_MAGIC);
    h.optlen = 0;
    CHECK_EQ(nbd_opt_header(&h, &opt, &len), -EPROTO);
}

static void test_go(void)
{
    struct nbd_opt_parsed p;
    struct buf b = {.n = 0};

    /* name "disk", two information requests */
    put_str(&b, "disk");
    put16(&b, 2);
    put16(&b, NBD_INFO_NAME);
    put16(&b, NBD_INFO_BLOCK_SIZE);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_OK);
    CHECK(strcmp(p.u.go.name, "disk") == 0);
    CHECK(p.u.go.want_name && !p.u.go.want_desc);
    CHECK_EQ(parse(&plain, NBD_OPT_INFO, &b, &p), NBD_OPT_PARSE_OK);

    /* the default export, no requests, an unknown request ignored */
    b.n = 0;
    put_str(&b, "");
    put16(&b, 1);
    put16(&b, 0x7777);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_OK);
    CHECK(p.u.go.name[0] == '\0' && !p.u.go.want_name && !p.u.go.want_desc);

    /* too short for the two counts */
    b.n = 0;
    put32(&b, 0);
    put(&b, "x", 1);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK_EQ(p.rep_err, NBD_REP_ERR_INVALID);
    CHECK(strstr(p.msg, "too short") != NULL);

    /* a name length that overruns, including one that wraps 32 bits */
    uint32_t lens[] = {5, 100, 0xfffffffa, 0xffffffff};
    for (unsigned i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        b.n = 0;
        put32(&b, lens[i]);
        put(&b, "abcd", 4);
        put16(&b, 0);
        CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_REFUSE);
        CHECK(strstr(p.msg, "overruns") != NULL);
    }

    /* a request count that does not match the length, either way */
    b.n = 0;
    put_str(&b, "a");
    put16(&b, 3);
    put16(&b, NBD_INFO_NAME);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_REFUSE);
    b.n = 0;
    put_str(&b, "a");
    put16(&b, 0);
    put16(&b, NBD_INFO_NAME);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_REFUSE);
    b.n = 0;
    put_str(&b, "a");
    put16(&b, 0xffff);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_REFUSE);

    /* a NUL inside the name */
    b.n = 0;
    put32(&b, 3);
    put(&b, "a\0b", 3);
    put16(&b, 0);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK(strstr(p.msg, "invalid export name") != NULL);

    /* the longest name, and one byte more */
    char name[NBD_MAX_STRING + 2];
    memset(name, 'n', sizeof name - 1);
    name[NBD_MAX_STRING] = '\0';
    b.n = 0;
    put_str(&b, name);
    put16(&b, 0);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_OK);
    CHECK_EQ(strlen(p.u.go.name), NBD_MAX_STRING);
    name[NBD_MAX_STRING] = 'n';
    name[NBD_MAX_STRING + 1] = '\0';
    b.n = 0;
    put_str(&b, name);
    put16(&b, 0);
    CHECK_EQ(parse(&plain, NBD_OPT_GO, &b, &p), NBD_OPT_PARSE_REFUSE);
}

static void test_export_name(void)
{
    struct nbd_opt_parsed p;
    struct buf b = {.n = 0};

    put(&b, "disk", 4);
    CHECK_EQ(parse(&plain, NBD_OPT_EXPORT_NAME, &b, &p), NBD_OPT_PARSE_OK);
    CHECK(strcmp(p.u.export_name, "disk") == 0);
    b.n = 0;
    CHECK_EQ(parse(&plain, NBD_OPT_EXPORT_NAME, &b, &p), NBD_OPT_PARSE_OK);
    CHECK(p.u.export_name[0] == '\0');
    /* no error reply exists for EXPORT_NAME: a bad name drops */
    put(&b, "a\0", 2);
    CHECK_EQ(parse(&plain, NBD_OPT_EXPORT_NAME, &b, &p), NBD_OPT_PARSE_DROP);
    CHECK_EQ(p.drop_err, EINVAL);
    b.n = 0;
    memset(b.d, 'x', NBD_MAX_STRING + 1);
    b.n = NBD_MAX_STRING + 1;
    CHECK_EQ(parse(&plain, NBD_OPT_EXPORT_NAME, &b, &p), NBD_OPT_PARSE_DROP);
}

static void test_empty_options(void)
{
    struct nbd_opt_parsed p;
    struct buf b = {.n = 0};
    const uint32_t opts[] = {NBD_OPT_LIST, NBD_OPT_STRUCTURED_REPLY};

    for (unsigned i = 0; i < 2; i++) {
        b.n = 0;
        CHECK_EQ(parse(&plain, opts[i], &b, &p), NBD_OPT_PARSE_OK);
        put(&b, "x", 1);
        CHECK_EQ(parse(&plain, opts[i], &b, &p), NBD_OPT_PARSE_REFUSE);
        CHECK_EQ(p.rep_err, NBD_REP_ERR_INVALID);
        CHECK(strstr(p.msg, "takes no data") != NULL);
    }
    /* ABORT: acknowledged whatever it carries */
    CHECK_EQ(parse(&plain, NBD_OPT_ABORT, &b, &p), NBD_OPT_PARSE_OK);
}

static void test_unknown(void)
{
    struct nbd_opt_parsed p;
    struct buf b = {.n = 0};
    const uint32_t opts[] = {0, NBD_OPT_PEEK_EXPORT, NBD_OPT_EXTENDED_HEADERS, 99, 0xffffffff};

    for (unsigned i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        CHECK_EQ(parse(&plain, opts[i], &b, &p), NBD_OPT_PARSE_REFUSE);
        CHECK_EQ(p.rep_err, NBD_REP_ERR_UNSUP);
    }
}

static void test_tls_policy(void)
{
    struct nbd_opt_parsed p;
    struct buf b = {.n = 0};

    /* --tls=require: nothing but STARTTLS and ABORT before TLS */
    CHECK_EQ(parse(&tls_req, NBD_OPT_LIST, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK_EQ(p.rep_err, NBD_REP_ERR_TLS_REQD);
    CHECK_EQ(parse(&tls_req, 99, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK_EQ(p.rep_err, NBD_REP_ERR_TLS_REQD);
    CHECK_EQ(parse(&tls_req, NBD_OPT_EXPORT_NAME, &b, &p), NBD_OPT_PARSE_DROP);
    CHECK_EQ(p.drop_err, EACCES);
    CHECK_EQ(parse(&tls_req, NBD_OPT_ABORT, &b, &p), NBD_OPT_PARSE_OK);
    CHECK_EQ(parse(&tls_req, NBD_OPT_STARTTLS, &b, &p), NBD_OPT_PARSE_OK);
    /* after TLS everything is allowed, a second STARTTLS is not */
    CHECK_EQ(parse(&tls_done, NBD_OPT_LIST, &b, &p), NBD_OPT_PARSE_OK);
    CHECK_EQ(parse(&tls_done, NBD_OPT_STARTTLS, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK_EQ(p.rep_err, NBD_REP_ERR_INVALID);
    /* --tls=on: both ways; --tls=off: STARTTLS is refused by policy */
    CHECK_EQ(parse(&tls_on, NBD_OPT_LIST, &b, &p), NBD_OPT_PARSE_OK);
    CHECK_EQ(parse(&tls_on, NBD_OPT_STARTTLS, &b, &p), NBD_OPT_PARSE_OK);
    CHECK_EQ(parse(&plain, NBD_OPT_STARTTLS, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK_EQ(p.rep_err, NBD_REP_ERR_POLICY);
    put(&b, "x", 1);
    CHECK_EQ(parse(&tls_on, NBD_OPT_STARTTLS, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK_EQ(p.rep_err, NBD_REP_ERR_INVALID);
}

static void meta(struct buf *b, const char *export, unsigned n, const char *const *q)
{
    b->n = 0;
    put_str(b, export);
    put32(b, n);
    for (unsigned i = 0; i < n; i++) {
        put_str(b, q[i]);
    }
}

static void test_meta(void)
{
    struct nbd_opt_parsed p;
    struct buf b;
    const char *q2[] = {"base:allocation", "qemu:dirty-bitmap:b1"};

    meta(&b, "disk", 2, q2);
    CHECK_EQ(parse(&structured, NBD_OPT_SET_META_CONTEXT, &b, &p), NBD_OPT_PARSE_OK);
    CHECK(strcmp(p.u.meta.export_name, "disk") == 0);
    CHECK_EQ(p.u.meta.n_queries, 2);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_OK);
    /* SET needs structured replies first */
    CHECK_EQ(parse(&plain, NBD_OPT_SET_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK(strstr(p.msg, "structured replies") != NULL);
    /* no queries */
    meta(&b, "", 0, NULL);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_OK);
    CHECK_EQ(p.u.meta.n_queries, 0);
    /* trailing bytes */
    put(&b, "zz", 2);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK(strstr(p.msg, "trailing") != NULL);
    /* more queries claimed than there are */
    meta(&b, "disk", 2, q2);
    memcpy(b.d + 8, &(uint32_t){htobe32(3)}, 4);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK(strstr(p.msg, "query 2 is malformed") != NULL);
    memcpy(b.d + 8, &(uint32_t){htobe32(0xffffffff)}, 4);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
    /* a query length that overruns */
    meta(&b, "disk", 1, q2);
    memcpy(b.d + 12, &(uint32_t){htobe32(0xfffffff0)}, 4);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
    /* an export name that overruns, a truncated count, nothing at all */
    b.n = 0;
    put32(&b, 100);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
    CHECK(strstr(p.msg, "malformed request") != NULL);
    b.n = 0;
    put_str(&b, "disk");
    put16(&b, 1);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
    b.n = 0;
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
    /* a NUL inside a query */
    b.n = 0;
    put_str(&b, "");
    put32(&b, 1);
    put32(&b, 3);
    put(&b, "a\0b", 3);
    CHECK_EQ(parse(&plain, NBD_OPT_LIST_META_CONTEXT, &b, &p), NBD_OPT_PARSE_REFUSE);
}

static void test_meta_match(void)
{
    const char *names[] = {"base:allocation", "qemu:allocation-depth", "qemu:dirty-bitmap:b1",
                           "qemu:dirty-bitmap:b2"};
    struct {
        const char *q;
        bool list;
        bool want[4];
    } rows[] = {
        {"base:allocation", false, {1, 0, 0, 0}},
        {"base:allocation", true, {1, 0, 0, 0}},
        {"qemu:dirty-bitmap:b2", false, {0, 0, 0, 1}},
        {"base:", true, {1, 0, 0, 0}},
        {"base:", false, {0, 0, 0, 0}}, /* namespaces select in LIST only */
        {"qemu:", true, {0, 1, 1, 1}},
        {"qemu:dirty-bitmap:", true, {0, 0, 1, 1}},
        {"qemu:dirty-bitmap:", false, {0, 0, 0, 0}},
        {"qemu:dirty-bitmap:b", false, {0, 0, 0, 0}},
        {"base:allocation2", false, {0, 0, 0, 0}},
        {"base", true, {0, 0, 0, 0}},
        {"", true, {0, 0, 0, 0}},
        {":", true, {0, 0, 0, 0}},
        {"x:y", false, {0, 0, 0, 0}},
    };

    for (unsigned i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        bool sel[4] = {false};
        check_current = rows[i].q;
        nbd_opt_meta_match(names, 4, rows[i].q, (uint32_t)strlen(rows[i].q), rows[i].list, sel);
        for (unsigned k = 0; k < 4; k++) {
            CHECK_EQ(sel[k], rows[i].want[k]);
        }
    }
    /* queries are not NUL-terminated on the wire: only qlen bytes count */
    bool sel[4] = {false};
    nbd_opt_meta_match(names, 4, "base:allocationXYZ", 15, false, sel);
    CHECK(sel[0]);
    check_current = "test_meta_match";
}

int main(void)
{
    RUN(test_client_flags);
    RUN(test_header);
    RUN(test_go);
    RUN(test_export_name);
    RUN(test_empty_options);
    RUN(test_unknown);
    RUN(test_tls_policy);
    RUN(test_meta);
    RUN(test_meta_match);
    return check_exit();
}
