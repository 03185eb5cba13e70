/* nbd/handshake.h: helpers shared by handshake.c and handshake-meta.c. */
#ifndef DISKIMG_NBD_HANDSHAKE_H
#define DISKIMG_NBD_HANDSHAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

int nbd_opt_reply(struct nbd_conn *c, uint32_t opt, uint32_t type, const void *data, uint32_t len);
int nbd_opt_reply_err(struct nbd_conn *c, uint32_t opt, uint32_t type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
bool nbd_valid_name(const char *s, uint32_t len);
/* NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT. */
int nbd_opt_meta_context(struct nbd_conn *c, uint32_t opt, const char *data, uint32_t len);
/* Name of a context we offer, and its id on the wire. */
const char *nbd_meta_name(enum nbd_meta_context m);
static inline uint32_t nbd_meta_id(enum nbd_meta_context m)
{
    return (uint32_t)m + 1;
}

#endif
