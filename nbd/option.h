/* nbd/option.h: parsing what a client sends during the handshake: the
 * client flags, each option header and each option's payload.  Pure: no
 * I/O, no globals, no allocation; handshake.c and handshake-meta.c call
 * it on the bytes they received, tests/unit/test-nbd-option.c and
 * tests/fuzz/fuzz-nbd-option.c on anything at all.  What the server then
 * does with a parsed option (look an export up, send replies, start TLS)
 * stays in handshake*.c. */
#ifndef DISKIMG_NBD_OPTION_H
#define DISKIMG_NBD_OPTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

#define NBD_OPTION_HEADER_SIZE 16
#define NBD_MAX_OPTION_LEN (64u << 10) /* larger option payloads end the connection */

/* The client flags after the greeting.  Returns 0, or -EINVAL for flags
 * we do not know (the spec says to drop such a client). */
int nbd_opt_client_flags(const void *wire4, bool *no_zeroes);

/* An option header.  Returns 0, -EPROTO for a bad magic, -E2BIG for a
 * payload over NBD_MAX_OPTION_LEN; both end the connection. */
int nbd_opt_header(const void *wire16, uint32_t *opt, uint32_t *len);

/* The connection's state that decides whether an option is allowed. */
struct nbd_opt_state {
    bool tls_required; /* --tls=require */
    bool tls_offered;  /* STARTTLS may be answered with ACK */
    bool tls_active;   /* STARTTLS done */
    bool structured;   /* structured replies were negotiated */
};

/* NBD_OPT_INFO and NBD_OPT_GO: the export name and the information
 * asked for (NBD_INFO_EXPORT and NBD_INFO_BLOCK_SIZE are always sent). */
struct nbd_opt_go {
    char name[NBD_MAX_STRING + 1];
    bool want_name, want_desc;
};

/* NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT.  The queries
 * stay in the option data, checked; nbd_opt_meta_next walks them. */
struct nbd_opt_meta {
    char export_name[NBD_MAX_STRING + 1];
    uint32_t n_queries;
    const char *queries; /* n_queries times: be32 length, that many bytes */
    uint32_t queries_len;
};

struct nbd_opt_parsed {
    uint32_t opt;
    union {
        struct nbd_opt_go go;
        char export_name[NBD_MAX_STRING + 1]; /* NBD_OPT_EXPORT_NAME */
        struct nbd_opt_meta meta;
    } u;
    /* NBD_OPT_PARSE_REFUSE: the error reply (NBD_REP_ERR_*) and its
     * message.  NBD_OPT_PARSE_DROP: why the connection ends, an errno in
     * drop_err and the message. */
    uint32_t rep_err;
    int drop_err;
    char msg[160];
};

enum nbd_opt_verdict {
    NBD_OPT_PARSE_OK,     /* act on out->u */
    NBD_OPT_PARSE_REFUSE, /* answer with out->rep_err and out->msg, go on haggling */
    NBD_OPT_PARSE_DROP    /* end the connection (EXPORT_NAME has no error reply) */
};

/* Parse the payload of option opt (len bytes at data) in state st.
 * Checks the TLS policy first (with --tls=require nothing but STARTTLS
 * and ABORT before TLS), then the payload's layout: names without NUL of
 * at most NBD_MAX_STRING bytes, lengths that match the option length,
 * no trailing bytes, empty payloads where the spec says so.  Unknown
 * options are refused with NBD_REP_ERR_UNSUP. */
enum nbd_opt_verdict nbd_opt_parse(const struct nbd_opt_state *st, uint32_t opt, const char *data,
                                   uint32_t len, struct nbd_opt_parsed *out);

/* The next query of a parsed meta option (cursor starts at 0).  Returns
 * false after the last one. */
bool nbd_opt_meta_next(const struct nbd_opt_meta *m, uint32_t *cursor, const char **q,
                       uint32_t *qlen);

/* Which of an export's contexts (names[0..n)) one query selects: a full
 * name selects that context; in LIST only, "ns:" selects every context
 * of a namespace and "qemu:dirty-bitmap:" every bitmap, as qemu-nbd
 * answers.  Sets sel[i] for each match. */
#define NBD_DIRTY_BITMAP_PREFIX "qemu:dirty-bitmap:"
void nbd_opt_meta_match(const char *const *names, unsigned n, const char *q, uint32_t qlen,
                        bool list, bool *sel);

/* A name from the wire: no NUL inside, at most NBD_MAX_STRING bytes. */
bool nbd_valid_name(const char *s, uint32_t len);

#endif
