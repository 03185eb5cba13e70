/* nbd/uri.h: NBD URIs (NetworkBlockDevice doc/uri.md), as qemu-img and
 * libnbd accept them:
 *   nbd://HOST[:PORT]/[EXPORT]          TCP (IPv6 hosts in brackets)
 *   nbd+unix:///[EXPORT]?socket=PATH    unix socket
 *   nbds://..., nbds+unix://...         the same over TLS
 * and qemu's older spelling (no TLS, the export name taken as it is):
 *   nbd:unix:PATH[:exportname=NAME]
 *   nbd:HOST[:PORT][:exportname=NAME]
 * Pure parsing, no I/O; unit-tested in tests/unit/test-uri.c. */
#ifndef DISKIMG_NBD_URI_H
#define DISKIMG_NBD_URI_H

#include <stdbool.h>

struct nbd_uri {
    bool tls;
    bool unix_socket;
    char *host;   /* TCP */
    char *port;   /* TCP, "10809" by default */
    char *socket; /* unix */
    char *export_name;
    /* libnbd's query parameters for nbds:// */
    char *tls_certificates; /* tls-certificates=DIR */
    char *tls_psk_file;     /* tls-psk-file=FILE */
    char *tls_username;     /* tls-username=NAME */
    char *tls_hostname;     /* tls-hostname=NAME */
};

/* True if s looks like an NBD URI (scheme nbd, nbds, nbd+unix, nbds+unix)
 * or qemu's nbd: spelling. */
bool nbd_uri_is(const char *s);
/* Returns 0, or -EINVAL with a message naming what is wrong. */
int nbd_uri_parse(const char *s, struct nbd_uri *u);
void nbd_uri_free(struct nbd_uri *u);
/* The name qemu-img gives the connection in its output (nbd://HOST:PORT
 * [/EXPORT] or nbd+unix://[/EXPORT]?socket=PATH, whichever spelling was
 * used), malloc'd; NULL for TLS (qemu 7.2 has no nbds: URIs) or no
 * memory. */
char *nbd_uri_qemu_name(const struct nbd_uri *u);

#endif
