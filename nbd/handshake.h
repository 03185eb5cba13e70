/* nbd/handshake.h: helpers shared by handshake.c and handshake-meta.c. */
#ifndef DISKIMG_NBD_HANDSHAKE_H
#define DISKIMG_NBD_HANDSHAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "option.h"

int nbd_opt_reply(struct nbd_conn *c, uint32_t opt, uint32_t type, const void *data, uint32_t len);
int nbd_opt_reply_err(struct nbd_conn *c, uint32_t opt, uint32_t type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
struct nbd_opt_meta;
/* NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT, parsed. */
int nbd_opt_meta_context(struct nbd_conn *c, uint32_t opt, const struct nbd_opt_meta *m);
/* Contexts export e offers; the name of context i (buf holds it when it
 * is not a constant); its id on the wire. */
#define NBD_META_NAME_MAX 1100 /* prefix + a qcow2 bitmap name (at most 1023) */
unsigned nbd_meta_count(const struct nbd_export *e);
const char *nbd_meta_name(const struct nbd_export *e, unsigned i, char *buf, size_t size);
static inline uint32_t nbd_meta_id(unsigned i)
{
    return i + 1;
}

#endif
