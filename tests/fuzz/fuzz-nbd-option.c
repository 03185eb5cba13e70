/* tests/fuzz/fuzz-nbd-option.c: libFuzzer harness for the handshake
 * parser (nbd/option.c).  The input is what a client sends after the
 * greeting: its first byte chooses the server's TLS policy and state,
 * the next four are the client flags, and the rest is a stream of
 * options (16-byte header, then the payload; a payload cut short by the
 * end of the input is taken as it is, with its length adjusted).  Each
 * option is parsed from a buffer of exactly its length, so AddressSanitizer
 * sees any read past it; parsed meta options have their queries walked
 * and matched against a fixed set of context names, as the server does.
 *
 * Besides the sanitizers, the harness traps when a result breaks the
 * parser's promises: a name longer than NBD_MAX_STRING or with a NUL, a
 * query walk that disagrees with the query count or leaves the payload,
 * a refusal without an NBD_REP_ERR_* code or a message, a drop for an
 * option other than EXPORT_NAME.
 *
 * Build and run: see tests/fuzz/README.md; tests/fuzz/replay.c replays
 * the committed corpus (tests/fuzz/corpus/nbd-option) in every build. */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd/option.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why, uint32_t opt)
{
    fprintf(stderr, "fuzz-nbd-option: option %u: %s\n", opt, why);
    __builtin_trap();
}

static void check_name(const char *s, uint32_t opt)
{
    size_t n = strnlen(s, NBD_MAX_STRING + 1);
    if (n > NBD_MAX_STRING) {
        fail("name longer than NBD_MAX_STRING", opt);
    }
}

static const char *const contexts[] = {"base:allocation", "qemu:allocation-depth",
                                       "qemu:dirty-bitmap:a", "qemu:dirty-bitmap:bitmap-b"};
#define N_CONTEXTS (sizeof contexts / sizeof contexts[0])

static void walk_meta(const struct nbd_opt_meta *m, const char *data, uint32_t len, uint32_t opt)
{
    uint32_t cursor = 0, qlen, n = 0;
    const char *q;
    bool sel[N_CONTEXTS] = {false};

    check_name(m->export_name, opt);
    if (m->queries < data || m->queries + m->queries_len != data + len) {
        fail("queries outside the payload", opt);
    }
    while (nbd_opt_meta_next(m, &cursor, &q, &qlen)) {
        if (q < data || qlen > len || q + qlen > data + len || memchr(q, '\0', qlen)) {
            fail("query outside the payload, or with a NUL", opt);
        }
        nbd_opt_meta_match(contexts, N_CONTEXTS, q, qlen, opt == NBD_OPT_LIST_META_CONTEXT, sel);
        n++;
    }
    if (n != m->n_queries) {
        fail("query walk disagrees with the count", opt);
    }
}

static void parse_one(const struct nbd_opt_state *st, uint32_t opt, const uint8_t *p, uint32_t len)
{
    /* exactly len bytes, so a read past the payload is caught */
    char *copy = malloc(len ? len : 1);
    struct nbd_opt_parsed out;

    if (!copy) {
        return;
    }
    memcpy(copy, p, len);
    switch (nbd_opt_parse(st, opt, copy, len, &out)) {
    case NBD_OPT_PARSE_OK:
        if (opt == NBD_OPT_GO || opt == NBD_OPT_INFO) {
            check_name(out.u.go.name, opt);
        } else if (opt == NBD_OPT_EXPORT_NAME) {
            check_name(out.u.export_name, opt);
        } else if (opt == NBD_OPT_LIST_META_CONTEXT || opt == NBD_OPT_SET_META_CONTEXT) {
            walk_meta(&out.u.meta, copy, len, opt);
        }
        break;
    case NBD_OPT_PARSE_REFUSE:
        if (!(out.rep_err & NBD_REP_FLAG_ERROR) || !out.msg[0]) {
            fail("refusal without an error code or message", opt);
        }
        break;
    case NBD_OPT_PARSE_DROP:
        if (opt != NBD_OPT_EXPORT_NAME || !out.drop_err || !out.msg[0]) {
            fail("dropped for the wrong reason", opt);
        }
        break;
    default:
        fail("unknown verdict", opt);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct nbd_opt_state st;
    bool no_zeroes;

    if (size < 5) {
        return 0;
    }
    st = (struct nbd_opt_state){
        .tls_required = data[0] & 1,
        .tls_offered = data[0] & 2,
        .tls_active = data[0] & 4,
        .structured = data[0] & 8,
    };
    if (nbd_opt_client_flags(data + 1, &no_zeroes) < 0) {
        return 0; /* the server drops such a client */
    }
    for (size_t pos = 5; pos + NBD_OPTION_HEADER_SIZE <= size;) {
        uint32_t opt, len;
        int r = nbd_opt_header(data + pos, &opt, &len);

        pos += NBD_OPTION_HEADER_SIZE;
        if (r < 0) {
            break; /* the server drops the client */
        }
        if (len > size - pos) {
            len = (uint32_t)(size - pos);
        }
        parse_one(&st, opt, data + pos, len);
        pos += len;
        if (opt == NBD_OPT_STRUCTURED_REPLY) {
            st.structured = true; /* as the server would */
        }
    }
    return 0;
}
