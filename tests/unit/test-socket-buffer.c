/* tests/unit/test-socket-buffer.c: nbd/socket-buffer.c grows a unix
 * socket's send buffer to hold a whole 1 MiB reply, and leaves TCP's to
 * the kernel's autotuning. */
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "nbd/socket-buffer.h"

CHECK_GLOBALS

static int sndbuf(int fd)
{
    int v = 0;
    socklen_t len = sizeof v;

    CHECK_EQ(getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len), 0);
    return v;
}

/* What the kernel gives for a request of want bytes: doubled, capped at
 * twice net.core.wmem_max. */
static long granted(long want)
{
    long max = 0;
    FILE *f = fopen("/proc/sys/net/core/wmem_max", "r");

    if (f) {
        CHECK_EQ(fscanf(f, "%ld", &max), 1);
        fclose(f);
    }
    return 2 * (max && max < want ? max : want);
}

static void test_unix_grows(void)
{
    int sv[2];

    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int before = sndbuf(sv[0]);
    nbd_socket_fit_sndbuf(sv[0]);
    CHECK_EQ(sndbuf(sv[0]), granted(NBD_UNIX_SNDBUF));
    CHECK(sndbuf(sv[0]) >= before);
    CHECK_EQ(sndbuf(sv[1]), before); /* the peer's is its own */
    close(sv[0]);
    close(sv[1]);
}

static void test_tcp_untouched(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    CHECK(fd >= 0);
    int before = sndbuf(fd);
    nbd_socket_fit_sndbuf(fd);
    CHECK_EQ(sndbuf(fd), before);
    close(fd);
    nbd_socket_fit_sndbuf(-1); /* not a socket: nothing happens */
}

int main(void)
{
    RUN(test_unix_grows);
    RUN(test_tcp_untouched);
    return check_exit();
}
