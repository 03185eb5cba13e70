/* nbd/listen.c: listening sockets, unix and TCP (IPv4 and IPv6). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/error.h"
#include "internal.h"

#define LISTEN_BACKLOG 128

static int nbd_add_listener(struct nbd_server *srv, int fd);

int nbd_server_add_listen_fd(struct nbd_server *srv, int fd)
{
    int listening = 0;
    socklen_t len = sizeof listening;

    /* Anything else would make accept fail in a tight loop. */
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening) {
        return err_setx(ENOTSOCK, "socket activation: fd %d is not a listening socket", fd);
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return nbd_add_listener(srv, fd);
}

static int nbd_add_listener(struct nbd_server *srv, int fd)
{
    if (srv->n_listen == NBD_MAX_LISTENERS) {
        close(fd);
        return err_setx(EMFILE, "too many listening sockets");
    }
    srv->listen_fd[srv->n_listen++] = fd;
    return 0;
}

int nbd_server_listen_unix(struct nbd_server *srv, const char *path)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct stat st;
    int fd;

    if (strlen(path) >= sizeof sun.sun_path) {
        return err_setx(ENAMETOOLONG, "socket path %s is longer than %zu bytes", path,
                        sizeof sun.sun_path - 1);
    }
    strcpy(sun.sun_path, path);
    /* A stale socket from a previous run is replaced; any other file is
     * left alone. */
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            return err_setx(EEXIST, "%s exists and is not a socket", path);
        }
        unlink(path);
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return err_set(errno, "socket");
    }
    if (bind(fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
        int e = errno;
        close(fd);
        return err_set(e, "bind %s", path);
    }
    if (listen(fd, LISTEN_BACKLOG) < 0) {
        int e = errno;
        close(fd);
        unlink(path);
        return err_set(e, "listen %s", path);
    }
    free(srv->unix_path);
    srv->unix_path = strdup(path);
    return nbd_add_listener(srv, fd);
}

int nbd_server_listen_tcp(struct nbd_server *srv, const char *host, const char *port)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_ADDRCONFIG};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    int last_err = 0, bound = 0;

    if (gai != 0) {
        return err_setx(EINVAL, "cannot resolve %s port %s: %s", host ? host : "*", port,
                        gai_strerror(gai));
    }
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        int one = 1;

        if (fd < 0) {
            last_err = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) {
            /* IPv4 gets its own socket from the same lookup. */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        }
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
            last_err = errno;
            close(fd);
            continue;
        }
        if (nbd_add_listener(srv, fd) < 0) {
            freeaddrinfo(res);
            return -EMFILE;
        }
        bound++;
    }
    freeaddrinfo(res);
    if (!bound) {
        return err_set(last_err ? last_err : EADDRNOTAVAIL, "cannot listen on %s port %s",
                       host ? host : "*", port);
    }
    return 0;
}
