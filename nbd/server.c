/* nbd/server.c: the server object, its exports and the accept loop.
 *
 * The main thread accepts; each connection gets a thread for its handshake,
 * which then becomes its first worker (worker.c).  Signal handlers
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
#include "socket-buffer.h"
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
    if (srv->cfg.connection_cap == 0) {
        srv->cfg.connection_cap = NBD_DEFAULT_CONNECTION_CAP;
    }
    if (srv->cfg.thread_cap == 0) {
        srv->cfg.thread_cap = NBD_DEFAULT_THREAD_CAP;
    }
    if (pipe2(srv->wake_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        int e = errno;
        free(srv);
        return err_set(e, "pipe");
    }
    pthread_mutex_init(&srv->lock, NULL);
    pthread_mutex_init(&srv->faillog_lock, NULL);
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

/* Why the handshake failed, for the log line. */
static const char *nbd_handshake_failure(struct nbd_conn *c, int r)
{
    if (r == -ETIMEDOUT || atomic_load(&c->drop) == NBD_DROP_DEADLINE) {
        return "time limit reached";
    }
    if (atomic_load(&c->drop) == NBD_DROP_SHUTDOWN) {
        return "the server is shutting down";
    }
    /* Error messages are safe to print: a client's string is escaped
     * where it is quoted (nbd_opt_export_name), and common/error.c
     * neutralises any control character that was not. */
    return err_msg_or(r);
}

static void *nbd_conn_main(void *arg)
{
    struct nbd_conn *c = arg;
    struct nbd_server *srv = c->srv;
    char ebuf[512], pbuf[512];
    int r;

    log_set_context(c->log_ctx);
    log_debug("connection from %s", c->peer);
    if (srv->cfg.handshake_limit_s) {
        atomic_store(&c->deadline_ns,
                     clock_ns() + (uint64_t)srv->cfg.handshake_limit_s * 1000000000ULL);
    }
    err_clear();
    r = nbd_handshake(c);
    atomic_store(&c->deadline_ns, 0);
    nbd_tls_set_deadline(c->tls, 0);
    if (r == 0 && atomic_load(&c->drop) != NBD_DROP_NONE) {
        r = -EPIPE; /* the watchdog took it just as it finished */
    }
    if (r == 0) {
        /* Like qemu-nbd, only a client that got an export counts for
         * exiting after the last one leaves (listings and probes do not). */
        pthread_mutex_lock(&srv->lock);
        srv->had_client = true;
        pthread_mutex_unlock(&srv->lock);
        log_info("%s opened export '%s'%s%s%s", c->peer,
                 nbd_log_str(c->exp->name, ebuf, sizeof ebuf), c->tls ? " over TLS" : "",
                 c->tls_peer[0] ? " as " : "",
                 nbd_log_str(c->tls_peer, pbuf, sizeof pbuf)); /* a client's DN or PSK identity */
        atomic_store(&c->idle_ns, (uint64_t)srv->cfg.idle_timeout_s * 1000000000ULL);
        atomic_store(&c->last_active_ns, clock_ns());
        nbd_transmission(c);
        log_info("%s closed export '%s' after %" PRIu64 " request(s)", c->peer,
                 nbd_log_str(c->exp->name, ebuf, sizeof ebuf), c->requests);
    } else if (r == -ECONNABORTED) { /* NBD_OPT_ABORT is a clean goodbye */
        log_debug("%s left during the handshake", c->peer);
    } else {
        atomic_fetch_add(&srv->stats.handshake_failures, 1);
        log_info("%s dropped during the handshake: %s", c->peer, nbd_handshake_failure(c, r));
    }
    nbd_thread_release(srv); /* while srv is certainly alive */
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

/* Accept one client and start its thread.  Returns false when accepting
 * failed for want of resources (file descriptors, memory), so the caller
 * backs off instead of retrying in a tight loop. */
static bool nbd_accept_one(struct nbd_server *srv, int lfd)
{
    struct nbd_conn *c;
    pthread_attr_t attr;
    pthread_t t;
    int one = 1, fd;

    if (!nbd_thread_reserve(srv, false)) {
        return true; /* the loop sees the thread cap next time round */
    }
    fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        nbd_thread_release(srv);
        if (e == EAGAIN || e == EINTR || e == ECONNABORTED) {
            return true;
        }
        if (!srv->accept_failing) { /* once, not every second it goes on */
            log_error("accept: %s", strerror(e));
        }
        srv->accept_failing = true;
        return e != EMFILE && e != ENFILE && e != ENOMEM && e != ENOBUFS;
    }
    srv->accept_failing = false;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails harmlessly on unix */
    /* A send to a client that does not read returns now and then to look
     * at its limits (conn.c). */
    struct timeval slice = {.tv_sec = NBD_SEND_SLICE_S};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &slice, sizeof slice);
    nbd_socket_fit_sndbuf(fd);
    c = calloc(1, sizeof *c);
    if (!c || !(c->rbuf = malloc(NBD_RBUF_SIZE))) {
        log_error("no memory for a connection");
        free(c);
        close(fd);
        nbd_thread_release(srv);
        return false;
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
    bool started = pthread_create(&t, &attr, nbd_conn_main, c) == 0;
    if (!started) {
        log_error("cannot start a thread for %s", c->peer);
        nbd_server_conn_finished(srv, c);
        nbd_conn_free(c);
        nbd_thread_release(srv);
    }
    pthread_attr_destroy(&attr);
    return started;
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

/*
 * The accept loop.  While the server is full (-e slots, or a cap), the
 * listening sockets are left alone and new clients wait in the kernel's
 * listen queue, as with qemu-nbd.  The loop still notices the first
 * client that waits, to say so in the log once, then stops looking until
 * a connection ends.
 */
int nbd_server_run(struct nbd_server *srv)
{
    struct pollfd pfd[NBD_MAX_LISTENERS + 1];
    bool told_full = false, backoff = false;
    unsigned first = 0; /* listeners take turns at being looked at first */

    for (;;) {
        unsigned nfds = 1;
        const char *full;
        bool idle_exit;
        int timeout;

        pthread_mutex_lock(&srv->lock);
        full = nbd_server_full(srv);
        idle_exit = !srv->cfg.persistent && srv->had_client && srv->active == 0;
        timeout = nbd_watchdog_interval_ms(srv);
        pthread_mutex_unlock(&srv->lock);
        if (idle_exit) {
            break;
        }
        if (!full) {
            told_full = false;
        }
        pfd[0] = (struct pollfd){.fd = srv->wake_pipe[0], .events = POLLIN};
        for (unsigned i = 0; !(full && told_full) && !backoff && i < srv->n_listen; i++) {
            unsigned k = (first + i) % srv->n_listen;
            pfd[nfds++] = (struct pollfd){.fd = srv->listen_fd[k], .events = POLLIN};
        }
        if (backoff) {
            timeout = 1000; /* out of file descriptors or memory: retry in a second */
            backoff = false;
        }
        int n = poll(pfd, nfds, timeout);
        if (n < 0 && errno != EINTR) {
            return err_set(errno, "poll");
        }
        if (n > 0 && (pfd[0].revents & POLLIN) && nbd_handle_wakeups(srv)) {
            break;
        }
        for (unsigned i = 1; n > 0 && i < nfds; i++) {
            if (!(pfd[i].revents & POLLIN)) {
                continue;
            }
            if (full) {
                pthread_mutex_lock(&srv->lock);
                nbd_server_log_full(srv, full);
                pthread_mutex_unlock(&srv->lock);
                told_full = true;
                break;
            }
            /* One at a time: the next may find the server full. */
            backoff = !nbd_accept_one(srv, pfd[i].fd);
            first++;
            break;
        }
        pthread_mutex_lock(&srv->lock);
        nbd_watchdog(srv);
        pthread_mutex_unlock(&srv->lock);
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
    nbd_server_stop(srv);
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
    pthread_mutex_destroy(&srv->faillog_lock);
    pthread_cond_destroy(&srv->conn_done);
    free(srv->unix_path);
    free(srv);
}
