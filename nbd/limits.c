/* nbd/limits.c: what keeps a careless or hostile client from holding the
 * server: the global caps on connections and threads, and the watchdog
 * that applies the time limits to connections whose threads are stuck in
 * a system call the connection's own code cannot time out (a TLS send
 * waits for room in tls-session.c and a send on a plain socket in
 * conn.c, with no idle or shutdown limit of their own).
 *
 * The watchdog runs in the main thread: from the accept loop once a
 * second while connections exist and a time limit is set, and from the
 * shutdown wait (nbd_server_stop) every 200 ms.  It drops a connection
 * (nbd_conn_drop: shutdown() of the socket, which wakes any blocked send
 * or receive) when
 *   - its handshake outlived --handshake-limit by 2 s (the connection's
 *     own receives, plain sends and the TLS handshake stop at the limit
 *     and say why; this is the backstop for what they cannot see);
 *   - a reply has been waiting for the client to read it for
 *     --idle-timeout seconds (a client that sends requests but never
 *     reads replies has requests in flight, so it never looks idle to the
 *     reader);
 *   - the server is stopping, the grace period is over, and a reply still
 *     waits for the client.
 * Requests still running on the block layer are not cut short: their
 * replies get the same chance once they are ready. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/socket.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "internal.h"

#define NS_PER_S UINT64_C(1000000000)
/* The connection's own waits (poll, a send's time slice, GnuTLS's
 * handshake timeout) end at the handshake deadline and say why; the
 * watchdog steps in only after this much more, for what they cannot see
 * (GnuTLS waiting inside a record). */
#define DEADLINE_SLACK_NS (2 * NS_PER_S)
/* Log "the cap is reached" at most this often. */
#define CAP_LOG_INTERVAL_NS (60 * NS_PER_S)

bool nbd_thread_reserve(struct nbd_server *srv, bool for_worker)
{
    unsigned n = atomic_fetch_add(&srv->threads, 1);

    if (n < srv->cfg.thread_cap) {
        return true;
    }
    atomic_fetch_sub(&srv->threads, 1);
    if (for_worker) {
        uint64_t now = clock_ns(), last = atomic_load(&srv->thread_cap_logged_ns);
        if ((last == 0 || now - last >= CAP_LOG_INTERVAL_NS) &&
            atomic_compare_exchange_strong(&srv->thread_cap_logged_ns, &last, now)) {
            log_warn("thread cap reached: %u threads serve clients (--thread-cap); requests "
                     "wait for a free worker of their connection",
                     srv->cfg.thread_cap);
        }
    }
    return false;
}

void nbd_thread_release(struct nbd_server *srv)
{
    atomic_fetch_sub(&srv->threads, 1);
}

/* Caller holds srv->lock.  Why a new client cannot be taken now, or NULL. */
const char *nbd_server_full(struct nbd_server *srv)
{
    if (srv->cfg.max_connections && srv->active >= srv->cfg.max_connections) {
        return "slots";
    }
    if (srv->active >= srv->cfg.connection_cap) {
        return "connection cap";
    }
    if (atomic_load(&srv->threads) >= srv->cfg.thread_cap) {
        return "thread cap";
    }
    return NULL;
}

/* Caller holds srv->lock: a client is waiting in the listen queue while
 * the server is full; say so once per episode (and at most once a minute
 * for the caps, which an attack could make bite over and over). */
void nbd_server_log_full(struct nbd_server *srv, const char *why)
{
    uint64_t now = clock_ns();

    if (strcmp(why, "slots") == 0) {
        log_info("client limit reached (-e/--shared=%u): a new client waits until one "
                 "disconnects",
                 srv->cfg.max_connections);
        return;
    }
    if (srv->cap_logged_ns && now - srv->cap_logged_ns < CAP_LOG_INTERVAL_NS) {
        return;
    }
    srv->cap_logged_ns = now;
    if (strcmp(why, "connection cap") == 0) {
        log_warn("connection cap reached: %u connections (--connection-cap); new clients wait "
                 "until one ends",
                 srv->cfg.connection_cap);
    } else {
        log_warn("thread cap reached: %u threads serve clients (--thread-cap); new clients "
                 "wait until one ends",
                 srv->cfg.thread_cap);
    }
}

/* A client that sends bad requests in a loop must not flood the log:
 * FAILLOG_BURST lines at once, then one per FAILLOG_INTERVAL_NS (a
 * generic cell rate algorithm: tat is when the next line is due). */
#define FAILLOG_BURST 20
#define FAILLOG_INTERVAL_NS NS_PER_S

bool nbd_failure_log_allowed(struct nbd_server *srv, uint64_t *suppressed)
{
    uint64_t now = clock_ns();
    bool ok;

    pthread_mutex_lock(&srv->faillog_lock);
    ok = srv->faillog_tat_ns <= now + (FAILLOG_BURST - 1) * FAILLOG_INTERVAL_NS;
    if (ok) {
        srv->faillog_tat_ns = MAX(srv->faillog_tat_ns, now) + FAILLOG_INTERVAL_NS;
        *suppressed = srv->faillog_suppressed;
        srv->faillog_suppressed = 0;
    } else {
        srv->faillog_suppressed++;
    }
    pthread_mutex_unlock(&srv->faillog_lock);
    return ok;
}

static void watchdog_drop(struct nbd_conn *c, enum nbd_drop_reason why, uint64_t waited_ns)
{
    /* Say why before the socket goes: once it is gone the slot is free,
     * and the next client (or a test reading the log) may be served
     * before a line written after it. */
    if (!nbd_conn_claim_drop(c, why)) {
        return;
    }
    log_set_context(c->log_ctx);
    switch (why) {
    case NBD_DROP_IDLE:
        log_info("%s has not read its replies for %" PRIu64 " s (--idle-timeout), closing", c->peer,
                 waited_ns / NS_PER_S);
        break;
    case NBD_DROP_SHUTDOWN:
        log_info("%s: replies not taken within %d s of the shutdown, dropping the connection",
                 c->peer, NBD_SHUTDOWN_GRACE_S);
        break;
    default:
        break; /* the connection's thread logs the handshake failure */
    }
    log_set_context(NULL);
    nbd_conn_kill(c); /* wakes whatever it waits in */
}

void nbd_watchdog(struct nbd_server *srv)
{
    uint64_t now = clock_ns();
    bool grace_over = srv->stop_deadline_ns && now >= srv->stop_deadline_ns;

    for (struct nbd_conn *c = srv->conns; c; c = c->next) {
        uint64_t deadline = atomic_load(&c->deadline_ns);
        uint64_t since = atomic_load(&c->send_wait_since);
        uint64_t idle = atomic_load(&c->idle_ns);

        if (deadline && now >= deadline + DEADLINE_SLACK_NS) {
            watchdog_drop(c, NBD_DROP_DEADLINE, 0);
        } else if (since && idle && now - since >= idle) {
            watchdog_drop(c, NBD_DROP_IDLE, now - since);
        } else if (since && grace_over) {
            watchdog_drop(c, NBD_DROP_SHUTDOWN, 0);
        }
    }
}

/* How long the accept loop may sleep before the watchdog must look
 * again: -1 when no connection has a time limit. */
int nbd_watchdog_interval_ms(struct nbd_server *srv)
{
    if (srv->active == 0 || (!srv->cfg.handshake_limit_s && !srv->cfg.idle_timeout_s)) {
        return -1;
    }
    return 1000;
}

/* Stop every connection from reading new requests; what is in flight
 * finishes and is answered, within the grace period for the client to
 * take the replies. */
void nbd_server_stop(struct nbd_server *srv)
{
    pthread_mutex_lock(&srv->lock);
    atomic_store(&srv->stopping, true);
    srv->stop_deadline_ns = clock_ns() + (uint64_t)NBD_SHUTDOWN_GRACE_S * NS_PER_S;
    for (struct nbd_conn *c = srv->conns; c; c = c->next) {
        /* The reader sees end of stream; replies can still be sent. */
        shutdown(c->fd, SHUT_RD);
    }
    while (srv->active > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&srv->conn_done, &srv->lock, &ts);
        nbd_watchdog(srv);
    }
    pthread_mutex_unlock(&srv->lock);
}
