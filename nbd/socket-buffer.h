/* nbd/socket-buffer.h: the send buffer of an NBD socket: the server's
 * large read replies (server.c) and the client's large writes
 * (client-handshake.c) need it. */
#ifndef DISKIMG_NBD_SOCKET_BUFFER_H
#define DISKIMG_NBD_SOCKET_BUFFER_H

/* The send buffer asked for on a unix socket: a 1 MiB read reply with
 * its header fits whole (the kernel doubles what is asked, for its own
 * bookkeeping, and caps it at net.core.wmem_max). */
#define NBD_UNIX_SNDBUF (1u << 20)

/* Fit a whole large reply into fd's send buffer if fd is a unix
 * socket; other sockets are left as they are.  Best effort: a socket
 * that refuses keeps its default, which is only slower. */
void nbd_socket_fit_sndbuf(int fd);

#endif
