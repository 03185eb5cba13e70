/* nbd/handshake.h: helpers shared by handshake.c and handshake-meta.c. */
#ifndef DISKIMG_NBD_HANDSHAKE_H
#define DISKIMG_NBD_HANDSHAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "meta.h"
#include "option.h"

int nbd_opt_reply(struct nbd_conn *c, uint32_t opt, uint32_t type, const void *data, uint32_t len);
int nbd_opt_reply_err(struct nbd_conn *c, uint32_t opt, uint32_t type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
struct nbd_opt_meta;
/* NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT, parsed. */
int nbd_opt_meta_context(struct nbd_conn *c, uint32_t opt, const struct nbd_opt_meta *m);

#endif
