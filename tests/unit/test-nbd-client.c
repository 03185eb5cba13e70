/* tests/unit/test-nbd-client.c: nbd/client.c's transmission against a
 * server on a socketpair that handles one request at a time, as a
 * one-thread server does: while a reply waits for room it reads no
 * request.  The client must then read replies while its own send waits
 * for room, or both sides wait for ever. */
#include <endian.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "nbd/client.h"
#include "nbd/protocol.h"

CHECK_GLOBALS

#define READ_LEN (1u << 20)
#define WRITE_LEN (16u << 20) /* more than both sockets' buffers hold */

static uint8_t pattern_at(uint64_t off)
{
    return (uint8_t)(off % 251);
}

static int full(int fd, void *buf, size_t len, bool sending)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, MSG_WAITALL);
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Serial server: READ answers the pattern, WRITE takes the data, DISC
 * ends; simple replies only. */
static void *serial_server(void *arg)
{
    int fd = *(int *)arg;
    uint8_t *buf = malloc(WRITE_LEN);
    struct nbd_request rq;

    while (buf && full(fd, &rq, sizeof rq, false) == 0) {
        uint16_t type = be16toh(rq.type);
        uint32_t count = be32toh(rq.count);
        uint64_t off = be64toh(rq.offset);
        if (type == NBD_CMD_DISC || count > WRITE_LEN) {
            break;
        }
        if (type == NBD_CMD_WRITE && full(fd, buf, count, false) < 0) {
            break;
        }
        struct nbd_simple_reply rp = {htobe32(NBD_SIMPLE_REPLY_MAGIC), 0, rq.cookie};
        if (full(fd, &rp, sizeof rp, true) < 0) {
            break;
        }
        if (type == NBD_CMD_READ) {
            for (uint32_t i = 0; i < count; i++) {
                buf[i] = pattern_at(off + i);
            }
            if (full(fd, buf, count, true) < 0) {
                break;
            }
        }
    }
    free(buf);
    close(fd);
    return NULL;
}

/* A READ sent and not collected, then a WRITE larger than the sockets
 * hold: the server stops reading while it sends the READ's data, so the
 * WRITE's send only ends if the client reads that reply meanwhile. */
static void test_reply_read_while_send_waits(void)
{
    int sv[2], small = 4096;
    pthread_t server;

    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    CHECK_EQ(setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    CHECK_EQ(pthread_create(&server, NULL, serial_server, &sv[1]), 0);
    struct nbd_client_conn *c = nbd_client_conn_new();
    CHECK(c != NULL);
    c->fd = sv[0];
    snprintf(c->where, sizeof c->where, "test socketpair");
    CHECK_EQ(nbd_client_start(c), 0);

    uint8_t *rbuf = calloc(1, READ_LEN), *wbuf = calloc(1, WRITE_LEN);
    CHECK(rbuf && wbuf);
    struct iovec riov = {rbuf, READ_LEN}, wiov = {wbuf, WRITE_LEN};
    struct nbd_client_ticket t;
    alarm(30); /* a hang fails the test */
    CHECK_EQ(nbd_client_submit(c, NBD_CMD_READ, 0, 4096, READ_LEN, NULL, 0, &riov, 1, true, &t), 0);
    CHECK_EQ(nbd_client_request(c, NBD_CMD_WRITE, 0, 0, WRITE_LEN, &wiov, 1, NULL, 0, NULL, NULL),
             0);
    CHECK_EQ(nbd_client_wait(&t, NULL, NULL), 0);
    alarm(0);
    int wrong = 0;
    for (uint32_t i = 0; i < READ_LEN; i++) {
        wrong += rbuf[i] != pattern_at(4096 + i);
    }
    CHECK_EQ(wrong, 0);
    nbd_client_close(c);
    pthread_join(server, NULL);
    free(rbuf);
    free(wbuf);
}

int main(void)
{
    RUN(test_reply_read_while_send_waits);
    return check_exit();
}
