/* nbd/socket-buffer.c: see socket-buffer.h.
 *
 * A unix stream socket's send buffer is net.core.wmem_default, 208 KiB
 * on most systems: less than one 1 MiB read reply.  A sender then blocks
 * several times a request, and each time the peer must drain the buffer
 * and wake it, which costs both sides a context switch and keeps a
 * server's worker (holding the connection's write lock) from the next
 * reply.  Asking for NBD_UNIX_SNDBUF lets a whole reply go out in one
 * call; the same holds for a client's large write (a copy sends 256 KiB
 * ones).  It is a limit, not an allocation: memory is only used while a
 * peer leaves data unread, and at most that much per connection.  Where
 * net.core.wmem_max is the kernel's default (212992) the buffer only
 * doubles, which measured neutral; the gain needs wmem_max >= 1 MiB.
 *
 * TCP is left alone: the kernel sizes its buffers to the path (up to
 * net.ipv4.tcp_wmem's maximum), and a fixed SO_SNDBUF would turn that
 * off. */
#include <sys/socket.h>

#include "socket-buffer.h"

void nbd_socket_fit_sndbuf(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int want = NBD_UNIX_SNDBUF;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_UNIX) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
    }
}
