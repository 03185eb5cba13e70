/* nbd/server.c: the server object, its exports and the accept loop.
 *
 * The main thread accepts; each connection gets a thread for its handshake,
 * which then becomes its first worker (transmission.c).  Signal handlers
 * only write a byte to wake_pipe; the accept loop does the work. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "block/bitmap.h"
#include "common/error.h"
#include "common/log.h"
#include "common/util.h"
#include "internal.h"
#include "tls.h"

#define WAKE_SHUTDOWN 'q'
#define WAKE_STATS 's'
#define WAKE_CONN_DONE 'c'

int nbd_server_new(struct nbd_server **out, const struct nbd_server_config *cfg)
{
    struct nbd_server *srv = calloc(1, sizeof *srv);

    if (!srv) {
        return err_set(ENOMEM, "server");
    }
    srv->cfg = *cfg;
    if (srv->cfg.workers_per_conn == 0) {
        srv->cfg.workers_per_conn = 1;
    }
    if (pipe2(srv->wake_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        int e = errno;
        free(srv);
        return err_set(e, "pipe");
    }
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->conn_done, NULL);
    srv->stats.start_ns = clock_ns();
    *out = srv;
    return 0;
}

int nbd_server_add_export(struct nbd_server *srv, const char *name, const char *description,
                          struct blk_image *img, struct blk_bitmap **bitmaps, unsigned n_bitmaps)
{
    struct nbd_export *e, **tail = &srv->exports;

    if (n_bitmaps > NBD_MAX_BITMAPS) {
        return err_setx(EINVAL, "export '%s': at most %d bitmaps", name, NBD_MAX_BITMAPS);
    }
    if (strlen(name) > NBD_MAX_STRING || (description && strlen(description) > NBD_MAX_STRING)) {
        return err_setx(EINVAL, "export name or description longer than %d bytes", NBD_MAX_STRING);
    }
    if (nbd_find_export(srv, name)) {
        return err_setx(EEXIST, "export '%s' is defined twice", name);
    }
    e = calloc(1, sizeof *e);
    if (!e || !(e->name = strdup(name)) ||
        (description && !(e->description = strdup(description)))) {
        if (e) {
            free(e->name);
        }
        free(e);
        return err_set(ENOMEM, "export");
    }
    e->img = img;
    for (unsigned i = 0; i < n_bitmaps; i++) {
        e->bitmaps[i] = bitmaps[i];
    }
    e->n_bitmaps = n_bitmaps;
    while (*tail) {
        tail = &(*tail)->next;
    }
    *tail = e;
    return 0;
}

static void nbd_wake(struct nbd_server *srv, char what)
{
    ssize_t r = write(srv->wake_pipe[1], &what, 1);
    (void)r; /* a full pipe already has a wake-up pending */
}

void nbd_server_signal_shutdown(struct nbd_server *srv)
{
    nbd_wake(srv, WAKE_SHUTDOWN);
}

void nbd_server_signal_stats(struct nbd_server *srv)
{
    nbd_wake(srv, WAKE_STATS);
}

static void nbd_describe_peer(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";

    if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0) {
        snprintf(buf, len, "unknown peer");
    } else if (ss.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "unix socket");
    }
}

static void nbd_conn_free(struct nbd_conn *c)
{
    nbd_tls_session_close(c->tls);
    close(c->fd);
    pthread_mutex_destroy(&c->read_lock);
    pthread_mutex_destroy(&c->write_lock);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->idle);
    free(c->meta_export);
    free(c->rbuf);
    free(c);
}

static void *nbd_conn_main(void *arg)
{
    struct nbd_conn *c = arg;
    struct nbd_server *srv = c->srv;
    int r;

    log_set_context(c->log_ctx);
    log_debug("connection from %s", c->peer);
    if (srv->cfg.handshake_limit_s) {
        c->deadline_ns = clock_ns() + (uint64_t)srv->cfg.handshake_limit_s * 1000000000ULL;
    }
    err_clear();
    r = nbd_handshake(c);
    c->deadline_ns = 0;
    nbd_tls_set_deadline(c->tls, 0);
    if (r == 0) {
        /* Like qemu-nbd, only a client that got an export counts for
         * exiting after the last one leaves (listings and probes do not). */
        pthread_mutex_lock(&srv->lock);
        srv->had_client = true;
        pthread_mutex_unlock(&srv->lock);
        log_info("%s opened export '%s'%s%s%s", c->peer, c->exp->name, c->tls ? " over TLS" : "",
                 c->tls_peer[0] ? " as " : "", c->tls_peer);
        c->idle_ns = (uint64_t)srv->cfg.idle_timeout_s * 1000000000ULL;
        atomic_store(&c->last_active_ns, clock_ns());
        nbd_transmission(c);
        log_info("%s closed export '%s' after %" PRIu64 " request(s)", c->peer, c->exp->name,
                 c->requests);
    } else if (r == -ECONNABORTED) { /* NBD_OPT_ABORT is a clean goodbye */
        log_debug("%s left during the handshake", c->peer);
    } else {
        atomic_fetch_add(&srv->stats.handshake_failures, 1);
        log_info("%s dropped during the handshake: %s", c->peer,
                 r == -ETIMEDOUT ? "time limit reached" : err_msg_or(r));
    }
    nbd_server_conn_finished(srv, c);
    nbd_conn_free(c);
    return NULL;
}

void nbd_server_conn_finished(struct nbd_server *srv, struct nbd_conn *c)
{
    pthread_mutex_lock(&srv->lock);
    for (struct nbd_conn **p = &srv->conns; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    srv->active--;
    /* Wake the accept loop while srv is certainly alive: once the lock is
     * released, the main thread may free it. */
    nbd_wake(srv, WAKE_CONN_DONE);
    pthread_cond_broadcast(&srv->conn_done);
    pthread_mutex_unlock(&srv->lock);
}

static void nbd_accept_one(struct nbd_server *srv, int lfd)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    struct nbd_conn *c;
    pthread_attr_t attr;
    pthread_t t;
    int one = 1;

    if (fd < 0) {
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
            log_error("accept: %s", strerror(errno));
        }
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails harmlessly on unix */
    c = calloc(1, sizeof *c);
    if (!c || !(c->rbuf = malloc(NBD_RBUF_SIZE))) {
        log_error("no memory for a connection");
        free(c);
        close(fd);
        return;
    }
    c->srv = srv;
    c->fd = fd;
    pthread_mutex_init(&c->read_lock, NULL);
    pthread_mutex_init(&c->write_lock, NULL);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->idle, NULL);
    nbd_describe_peer(fd, c->peer, sizeof c->peer);

    pthread_mutex_lock(&srv->lock);
    c->id = ++srv->next_conn_id;
    snprintf(c->log_ctx, sizeof c->log_ctx, "conn %u", c->id);
    c->next = srv->conns;
    srv->conns = c;
    srv->active++;
    pthread_mutex_unlock(&srv->lock);
    atomic_fetch_add(&srv->stats.connections, 1);

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    if (pthread_create(&t, &attr, nbd_conn_main, c) != 0) {
        log_error("cannot start a thread for %s", c->peer);
        nbd_server_conn_finished(srv, c);
        nbd_conn_free(c);
    }
    pthread_attr_destroy(&attr);
}

/* Drain wake_pipe; returns true if shutdown was requested. */
static bool nbd_handle_wakeups(struct nbd_server *srv)
{
    char buf[64];
    bool quit = false;
    ssize_t n;

    while ((n = read(srv->wake_pipe[0], buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == WAKE_SHUTDOWN) {
                quit = true;
            } else if (buf[i] == WAKE_STATS) {
                nbd_server_report_stats(srv);
            }
        }
    }
    return quit;
}

/* Stop every connection from reading new requests; what is in flight
 * finishes and is answered. */
static void nbd_stop_connections(struct nbd_server *srv)
{
    pthread_mutex_lock(&srv->lock);
    srv->shutting_down = true;
    for (struct nbd_conn *c = srv->conns; c; c = c->next) {
        /* The reader sees end of stream; replies can still be sent. */
        shutdown(c->fd, SHUT_RD);
    }
    while (srv->active > 0) {
        pthread_cond_wait(&srv->conn_done, &srv->lock);
    }
    pthread_mutex_unlock(&srv->lock);
}

int nbd_server_run(struct nbd_server *srv)
{
    struct pollfd pfd[NBD_MAX_LISTENERS + 1];

    for (;;) {
        unsigned nfds = 1;
        bool full, idle_exit;

        pthread_mutex_lock(&srv->lock);
        full = srv->cfg.max_connections && srv->active >= srv->cfg.max_connections;
        idle_exit = !srv->cfg.persistent && srv->had_client && srv->active == 0;
        pthread_mutex_unlock(&srv->lock);
        if (idle_exit) {
            break;
        }
        pfd[0] = (struct pollfd){.fd = srv->wake_pipe[0], .events = POLLIN};
        /* With every slot taken, new clients wait in the backlog. */
        for (unsigned i = 0; !full && i < srv->n_listen; i++) {
            pfd[nfds++] = (struct pollfd){.fd = srv->listen_fd[i], .events = POLLIN};
        }
        if (poll(pfd, nfds, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return err_set(errno, "poll");
        }
        if ((pfd[0].revents & POLLIN) && nbd_handle_wakeups(srv)) {
            break;
        }
        for (unsigned i = 1; i < nfds; i++) {
            if (pfd[i].revents & POLLIN) {
                nbd_accept_one(srv, pfd[i].fd);
            }
        }
    }
    for (unsigned i = 0; i < srv->n_listen; i++) {
        close(srv->listen_fd[i]);
    }
    srv->n_listen = 0;
    if (srv->unix_path) {
        unlink(srv->unix_path);
        free(srv->unix_path);
        srv->unix_path = NULL;
    }
    nbd_stop_connections(srv);
    return 0;
}

void nbd_server_free(struct nbd_server *srv)
{
    if (!srv) {
        return;
    }
    for (unsigned i = 0; i < srv->n_listen; i++) {
        close(srv->listen_fd[i]);
    }
    if (srv->unix_path) {
        unlink(srv->unix_path); /* created, but the server never ran */
    }
    while (srv->exports) {
        struct nbd_export *e = srv->exports;
        srv->exports = e->next;
        free(e->name);
        free(e->description);
        for (unsigned i = 0; i < e->n_bitmaps; i++) {
            blk_bitmap_free(e->bitmaps[i]);
        }
        free(e);
    }
    close(srv->wake_pipe[0]);
    close(srv->wake_pipe[1]);
    pthread_mutex_destroy(&srv->lock);
    pthread_cond_destroy(&srv->conn_done);
    free(srv->unix_path);
    free(srv);
}
