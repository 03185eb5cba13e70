/* nbd/tls-session.c: one TLS session on a connected socket (see tls.h):
 * the handshake with the checks of the peer (client certificate, CA, CRL,
 * --tls-authz), then records in and out.
 *
 * GnuTLS reads and writes the socket through our transport functions, not
 * its own, so that a deadline bounds every wait: during the NBD handshake
 * a client that sends half a TLS record and stalls, or stops reading, is
 * dropped at the connection's deadline instead of holding a slot.
 *
 * In transmission several threads share a session: one reads requests
 * while others send replies.  GnuTLS allows one sender beside one
 * receiver, but not a TLS 1.3 key update the peer asks for: receiving it
 * switches the session's keys under a sender's feet, and the peer could
 * not decrypt the records that followed (GnuTLS 3.7).  So from then on
 * every GnuTLS call holds glock, and none of them waits while it does:
 * the reader waits for ciphertext before its call (read_ahead_waiting),
 * and a push never waits for room but leaves what the socket does not
 * take in the output queue, which the sender drains between its calls
 * (see tls_push).  So a reply waiting for room never stops the reader,
 * nor the reader a reply. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"
#include "tls-internal.h"
#include "tls.h"

#define BYE_LIMIT_NS 1000000000ULL

/* A client's Ctrl-C (diskimg_interrupted) ends a wait in the handshake,
 * as it does for plain sockets: checked between slices of this length. */
#define SLICE_MS 200

/* Wait until fd has events or the deadline passes (then errno is
 * ETIMEDOUT and the session remembers why it failed). */
static int wait_ready(struct nbd_tls_session *ts, short events)
{
    for (;;) {
        uint64_t now = clock_ns();
        if (now >= ts->deadline_ns) {
            ts->timed_out = true;
            errno = ETIMEDOUT;
            return -1;
        }
        if (diskimg_interrupted) {
            ts->interrupted = true;
            errno = EINTR;
            return -1;
        }
        int ms = (int)MIN((ts->deadline_ns - now) / 1000000 + 1, (uint64_t)SLICE_MS);
        struct pollfd p = {.fd = ts->fd, .events = events};
        int r = poll(&p, 1, ms);
        if (r > 0) {
            return 0;
        }
        if (r < 0 && errno != EINTR) {
            return -1;
        }
    }
}

/* GnuTLS pulls a record in two reads, its 5-byte header and then its
 * body, so a 1 MiB write arriving as 64 records cost 128 recv calls, and
 * every small request two.  So the pull reads what the socket has, up to
 * READ_AHEAD, and hands it out from there: one recv covers several records
 * when the peer sends faster than we decrypt.  A body at least that large
 * goes straight into GnuTLS's buffer. */
#define READ_AHEAD (64u * 1024)

/* One recv, retried on EINTR; notes the end of the stream. */
static ssize_t recv_noting_end(struct nbd_tls_session *ts, void *buf, size_t len, int flags)
{
    ssize_t n;

    do {
        n = recv(ts->fd, buf, len, flags);
    } while (n < 0 && errno == EINTR);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
        ts->pull_gone = true;
    }
    return n;
}

/* The pull's recv: in the handshake it waits for data (up to the
 * deadline), in a shared session it does not (-1 with EAGAIN, and
 * would_block set). */
static ssize_t recv_once(struct nbd_tls_session *ts, void *buf, size_t len)
{
    if (!ts->shared && ts->deadline_ns && wait_ready(ts, POLLIN) < 0) {
        return -1;
    }
    ssize_t n = recv_noting_end(ts, buf, len, ts->shared ? MSG_DONTWAIT : 0);
    if (n < 0 && ts->shared && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        ts->would_block = true;
        errno = EAGAIN;
    }
    return n;
}

static ssize_t tls_pull(gnutls_transport_ptr_t ptr, void *buf, size_t len)
{
    struct nbd_tls_session *ts = ptr;

    if (ts->rpos == ts->rlen) {
        if (len >= READ_AHEAD || (!ts->rbuf && !(ts->rbuf = malloc(READ_AHEAD)))) {
            return recv_once(ts, buf, len);
        }
        ssize_t n = recv_once(ts, ts->rbuf, READ_AHEAD);
        if (n <= 0) {
            return n;
        }
        ts->rpos = 0;
        ts->rlen = (size_t)n;
    }
    size_t n = MIN(len, ts->rlen - ts->rpos);
    memcpy(buf, ts->rbuf + ts->rpos, n);
    ts->rpos += n;
    return (ssize_t)n;
}

/* GnuTLS asks whether data arrives within ms (TLS 1.3 uses it): > 0 yes,
 * 0 not in time, -1 an error (the deadline passed, or Ctrl-C). */
static int tls_pull_timeout(gnutls_transport_ptr_t ptr, unsigned ms)
{
    struct nbd_tls_session *ts = ptr;
    if (ts->rpos < ts->rlen) {
        return 1; /* read ahead already */
    }
    uint64_t until =
        ms == GNUTLS_INDEFINITE_TIMEOUT ? UINT64_MAX : clock_ns() + (uint64_t)ms * 1000000;
    bool cut = ts->deadline_ns && ts->deadline_ns < until;

    if (cut) {
        until = ts->deadline_ns;
    }
    for (;;) {
        if (ts->deadline_ns && diskimg_interrupted) {
            ts->interrupted = true;
            errno = EINTR;
            return -1;
        }
        uint64_t now = clock_ns();
        int wait = until == UINT64_MAX ? -1
                   : now >= until      ? 0
                                  : (int)MIN((until - now + 999999) / 1000000, (uint64_t)INT_MAX);
        if (ts->deadline_ns && (wait < 0 || wait > SLICE_MS)) {
            wait = SLICE_MS;
        }
        struct pollfd p = {.fd = ts->fd, .events = POLLIN};
        int r = poll(&p, 1, wait);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r != 0) {
            return r;
        }
        if (until != UINT64_MAX && clock_ns() >= until) {
            if (cut) {
                ts->timed_out = true;
                errno = ETIMEDOUT;
                return -1;
            }
            return 0;
        }
    }
}

/* One sendmsg, retried on EINTR; in the handshake it waits for room (up
 * to the deadline), in a shared session it does not (-1 with EAGAIN). */
static ssize_t send_some(struct nbd_tls_session *ts, const struct iovec *iov, int iovcnt)
{
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};

    for (;;) {
        if (!ts->shared && ts->deadline_ns && wait_ready(ts, POLLOUT) < 0) {
            return -1;
        }
        int flags = MSG_NOSIGNAL | (ts->deadline_ns || ts->shared ? MSG_DONTWAIT : 0);
        ssize_t n = sendmsg(ts->fd, &msg, flags);
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            ts->push_gone = true;
        }
        if (n >= 0) {
            return n;
        }
        if (errno == EWOULDBLOCK) {
            errno = EAGAIN;
        }
        if (errno != EINTR && (errno != EAGAIN || ts->shared)) {
            return -1;
        }
    }
}

/*
 * The output queue.  In a shared session GnuTLS must never see a push
 * fail with EAGAIN: it would keep the record to resend when called again,
 * and a key update received meanwhile makes that call encrypt the same
 * data a second time (GnuTLS 3.7 sent the record twice).  So a push always
 * takes everything: what the socket does not take at once waits in wbuf,
 * [wpos, wlen), and the sending thread drains it between GnuTLS calls,
 * waiting for room without glock (queue_drain).
 *
 * GnuTLS pushes each record (at most 16 KiB of data) as it encrypts it,
 * so a 1 MiB reply took 64 sendmsg calls and woke the reader as often.
 * So while a thread sends more than one record (nbd_tls_send), its
 * records wait in the queue and go out WRITE_GATHER bytes at a time.
 */
#define WRITE_GATHER (64u * 1024)

/* Appends iov from byte skip on (caller holds glock); 0, or -1 with errno. */
static int queue_append(struct nbd_tls_session *ts, const struct iovec *iov, int iovcnt,
                        size_t skip)
{
    size_t len = iov_length(iov, iovcnt) - skip;

    if (ts->wlen + len > ts->wcap) {
        size_t cap = MAX(ts->wlen + len, (size_t)WRITE_GATHER + 2 * NBD_TLS_RECORD_MAX);
        uint8_t *p = realloc(ts->wbuf, cap);
        if (!p) {
            errno = ENOMEM;
            return -1;
        }
        ts->wbuf = p;
        ts->wcap = cap;
    }
    ts->wlen += iov_to_buf(iov, iovcnt, skip, ts->wbuf + ts->wlen, len);
    return 0;
}

/* Sends what the queue holds without waiting (caller holds glock): 0
 * when it is empty, -1 with errno (EAGAIN: the socket is full). */
static int queue_send(struct nbd_tls_session *ts)
{
    while (ts->wpos < ts->wlen) {
        ssize_t n = send_some(ts, &(struct iovec){ts->wbuf + ts->wpos, ts->wlen - ts->wpos}, 1);
        if (n < 0) {
            return -1;
        }
        ts->wpos += (size_t)n;
    }
    ts->wpos = ts->wlen = 0;
    return 0;
}

static ssize_t push_shared(struct nbd_tls_session *ts, const struct iovec *iov, int iovcnt)
{
    size_t total = iov_length(iov, iovcnt);
    ssize_t n = 0;

    if (!ts->gathering && ts->wpos == ts->wlen) {
        n = send_some(ts, iov, iovcnt);
        if (n < 0 && errno != EAGAIN) {
            return -1;
        }
        n = MAX(n, 0);
    }
    if ((size_t)n < total && queue_append(ts, iov, iovcnt, (size_t)n) < 0) {
        return -1;
    }
    return (ssize_t)total;
}

/* Called by GnuTLS only: under glock once the session is shared, and in
 * the handshake's one thread before. */
static ssize_t tls_push(gnutls_transport_ptr_t ptr, const giovec_t *iov, int iovcnt)
{
    struct nbd_tls_session *ts = ptr;

    if (ts->shared) {
        return push_shared(ts, (const struct iovec *)iov, iovcnt);
    }
    return send_some(ts, (const struct iovec *)iov, iovcnt);
}

void nbd_tls_set_deadline(struct nbd_tls_session *s, uint64_t deadline_ns)
{
    if (s) {
        s->deadline_ns = deadline_ns;
        if (!deadline_ns) {
            s->shared = true; /* before the threads that share it start */
        }
    }
}

/* Without glock, between GnuTLS calls of a shared session: until the
 * socket has room (POLLOUT) or data (POLLIN), or the deadline passes
 * (a goodbye's).  0, or -1 with errno. */
static int wait_outside(struct nbd_tls_session *ts, short events)
{
    if (ts->deadline_ns) {
        return wait_ready(ts, events);
    }
    for (;;) {
        struct pollfd p = {.fd = ts->fd, .events = events};
        int r = poll(&p, 1, -1);
        if (r > 0) {
            return 0;
        }
        if (r < 0 && errno != EINTR) {
            return -1;
        }
    }
}

/* Credentials and the checks of the peer, before the handshake. */
static void session_setup(struct nbd_tls *t, gnutls_session_t s)
{
    gnutls_priority_set(s, t->priority);
    if (!t->x509) {
        gnutls_credentials_set(s, GNUTLS_CRD_PSK,
                               t->server ? (void *)t->psk_server : (void *)t->psk_client);
        return;
    }
    gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, t->x509);
    if (t->server && t->verify_peer) {
        /* Require a certificate and verify it (CA, CRL, dates) inside the
         * handshake.  Our CA's name is not announced: a client would then
         * send no certificate rather than one from another CA, and the
         * message would say "no certificate" instead of "unknown CA". */
        gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
        gnutls_certificate_send_x509_rdn_sequence(s, 1);
        gnutls_session_set_verify_cert(s, NULL, 0);
    } else if (t->server) {
        gnutls_certificate_server_set_request(s, GNUTLS_CERT_IGNORE);
    } else {
        /* Verify the server against our CA (and its name when given). */
        gnutls_session_set_verify_cert(s, t->hostname, 0);
        if (t->hostname) {
            gnutls_server_name_set(s, GNUTLS_NAME_DNS, t->hostname, strlen(t->hostname));
        }
    }
}

/* After the handshake: the checks GnuTLS does not do for us.  The
 * certificate was verified in the handshake; verifying again costs little
 * and keeps a gap in that path from letting anyone in. */
static int check_peer(struct nbd_tls_session *ts, char *peer, size_t peer_len, int *alert)
{
    struct nbd_tls *t = ts->t;
    char who[512];

    if (!t->server) {
        return 0;
    }
    if (t->x509 && t->verify_peer) {
        unsigned status = 0;
        int g = gnutls_certificate_verify_peers2(ts->s, &status);
        if (g == GNUTLS_E_NO_CERTIFICATE_FOUND) {
            *alert = GNUTLS_A_CERTIFICATE_REQUIRED;
            return nbd_tls_why_handshake(ts, g);
        }
        if (g < 0 || status) {
            *alert = nbd_tls_status_alert(status);
            return nbd_tls_why_status(ts, g < 0 ? GNUTLS_CERT_INVALID : status);
        }
    }
    nbd_tls_peer_name(ts, who, sizeof who);
    str_escape_buf(peer, peer_len, who);
    if (!nbd_tls_authorized(t, who)) {
        *alert = GNUTLS_A_ACCESS_DENIED;
        return err_setx(EACCES, "TLS: client '%s' is not in the --tls-authz list", peer);
    }
    return 0;
}

/* After we refused the peer with an alert.  Closing at once can make the
 * client's next write fail with EPIPE before it reads the alert (under
 * TLS 1.3 its handshake may already be over), and it would report a broken
 * pipe instead of the reason.  So stop sending, and let it read while we
 * discard what it still sends, until it closes, for at most a second and
 * never past the deadline. */
#define LINGER_NS 1000000000ULL

static void linger(struct nbd_tls_session *ts)
{
    uint64_t until = clock_ns() + LINGER_NS;
    char scratch[4096];

    if (ts->deadline_ns && ts->deadline_ns < until) {
        until = ts->deadline_ns;
    }
    shutdown(ts->fd, SHUT_WR);
    for (;;) {
        uint64_t now = clock_ns();
        if (now >= until) {
            return;
        }
        struct pollfd p = {.fd = ts->fd, .events = POLLIN};
        int r = poll(&p, 1, (int)((until - now) / 1000000 + 1));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0 || recv(ts->fd, scratch, sizeof scratch, MSG_DONTWAIT) <= 0) {
            return;
        }
    }
}

int nbd_tls_handshake(struct nbd_tls *t, int fd, uint64_t deadline_ns, struct nbd_tls_session **out,
                      char *peer, size_t peer_len)
{
    struct nbd_tls_session *ts = calloc(1, sizeof *ts);
    gnutls_session_t s;
    int g, r = 0, alert = 0;

    if (!ts) {
        return err_set(ENOMEM, "TLS session");
    }
    g = gnutls_init(&s, t->server ? GNUTLS_SERVER : GNUTLS_CLIENT);
    if (g < 0) {
        free(ts);
        return err_setx(ENOMEM, "TLS: session: %s", gnutls_strerror(g));
    }
    pthread_mutex_init(&ts->glock, NULL);
    ts->s = s;
    ts->t = t;
    ts->fd = fd;
    ts->deadline_ns = deadline_ns;
    session_setup(t, s);
    gnutls_session_set_ptr(s, ts);
    gnutls_transport_set_ptr(s, ts);
    gnutls_transport_set_pull_function(s, tls_pull);
    gnutls_transport_set_pull_timeout_function(s, tls_pull_timeout);
    gnutls_transport_set_vec_push_function(s, tls_push);
    do {
        g = gnutls_handshake(s);
    } while (g < 0 && !gnutls_error_is_fatal(g) && !ts->interrupted);
    if (g < 0) {
        alert = ts->timed_out || ts->interrupted ? 0 : nbd_tls_alert_for(ts, g);
        r = nbd_tls_why_handshake(ts, g);
    } else {
        ts->established = true;
        peer[0] = '\0';
        r = check_peer(ts, peer, peer_len, &alert);
    }
    if (r < 0) {
        if (alert) {
            /* Tell the peer why, so that its message can say it too. */
            if (gnutls_alert_send(s, GNUTLS_AL_FATAL, (gnutls_alert_description_t)alert) == 0 &&
                t->server) {
                linger(ts);
            }
        }
        gnutls_deinit(s);
        pthread_mutex_destroy(&ts->glock);
        free(ts->rbuf);
        free(ts);
        return r;
    }
    *out = ts;
    return 0;
}

/* A shared session's reader, without glock, when GnuTLS has nothing
 * for it: waits for ciphertext and reads it ahead with one blocking recv,
 * as the transport did before the session was shared (rbuf, empty now,
 * is the reading thread's alone).  The pull sees again what a failed
 * recv saw. */
static void read_ahead_waiting(struct nbd_tls_session *ts)
{
    if (!ts->rbuf && !(ts->rbuf = malloc(READ_AHEAD))) {
        (void)wait_outside(ts, POLLIN);
        return;
    }
    ssize_t n = recv_noting_end(ts, ts->rbuf, READ_AHEAD, 0);
    if (n > 0) {
        ts->rpos = 0;
        ts->rlen = (size_t)n;
    }
}

/* One GnuTLS call, under glock.  GNUTLS_E_AGAIN from a shared session
 * whose pull found the socket empty means: wait for data without glock
 * and call again (fn then resumes what it began).  GnuTLS also says
 * GNUTLS_E_AGAIN after it handled a TLS 1.3 key update with records still
 * buffered, which poll() cannot see: then it is called again at once.  A
 * shared session's push never says EAGAIN (the output queue), and until
 * the session is shared the transport waits inside the call. */
static ssize_t record_call(struct nbd_tls_session *s,
                           ssize_t (*fn)(gnutls_session_t, void *, size_t), void *buf, size_t len)
{
    for (;;) {
        pthread_mutex_lock(&s->glock);
        s->would_block = false;
        ssize_t n = fn(s->s, buf, len);
        bool blocked = s->would_block;
        pthread_mutex_unlock(&s->glock);
        if ((n != GNUTLS_E_INTERRUPTED && n != GNUTLS_E_AGAIN) || s->interrupted) {
            return n;
        }
        if (n == GNUTLS_E_AGAIN && blocked) {
            read_ahead_waiting(s);
        }
    }
}

bool nbd_tls_pending(struct nbd_tls_session *s)
{
    pthread_mutex_lock(&s->glock);
    bool pending = s->rpos < s->rlen || gnutls_record_check_pending(s->s) > 0;
    pthread_mutex_unlock(&s->glock);
    return pending;
}

static ssize_t record_send(gnutls_session_t s, void *buf, size_t len)
{
    return gnutls_record_send(s, buf, len);
}

ssize_t nbd_tls_recv(struct nbd_tls_session *s, void *buf, size_t len)
{
    if (s->shared && !nbd_tls_pending(s)) {
        read_ahead_waiting(s); /* rather than a recv that says EAGAIN first */
    }
    ssize_t n = record_call(s, gnutls_record_recv, buf, len);

    if (n > 0) {
        s->got_data = true;
        return n;
    }
    if (n < 0 && (n != GNUTLS_E_PREMATURE_TERMINATION || s->timed_out)) {
        return nbd_tls_why_record(s, n, false);
    }
    /* The end of the stream (with or without a goodbye).  In the NBD
     * handshake, before a first record, the peer likely refused us. */
    return s->deadline_ns && !s->got_data ? nbd_tls_why_eof(s) : 0;
}

/* Sends the output queue until it is empty, waiting for room without
 * glock: 0, or -1 with errno. */
static int queue_drain(struct nbd_tls_session *s)
{
    for (;;) {
        pthread_mutex_lock(&s->glock);
        int r = queue_send(s);
        int err = errno;
        pthread_mutex_unlock(&s->glock);
        if (r == 0) {
            return 0;
        }
        if (err != EAGAIN || wait_outside(s, POLLOUT) < 0) {
            return -1;
        }
    }
}

/* The same for a sender, with a message when it fails. */
static int drain_for_send(struct nbd_tls_session *s)
{
    return queue_drain(s) < 0 ? nbd_tls_why_record(s, GNUTLS_E_PUSH_ERROR, true) : 0;
}

static bool queue_full(struct nbd_tls_session *s)
{
    pthread_mutex_lock(&s->glock);
    bool full = s->wlen - s->wpos >= WRITE_GATHER;
    pthread_mutex_unlock(&s->glock);
    return full;
}

/* One gnutls_record_send until all of it is sent. */
static int tls_send_all(struct nbd_tls_session *s, const uint8_t *p, size_t len)
{
    int r;

    while (len > 0) {
        ssize_t n = record_call(s, record_send, (void *)p, len);
        if (n < 0) {
            return nbd_tls_why_record(s, n, true);
        }
        p += n;
        len -= (size_t)n;
        if (s->shared && queue_full(s) && (r = drain_for_send(s)) < 0) {
            return r;
        }
    }
    return 0;
}

/* Small pieces (a reply header, a short payload) are gathered so they go
 * out as one record; a large payload is encrypted straight from its buffer
 * once the gathered part is full.  So a 1 MiB read reply costs one 16 KiB
 * copy, not the full copy that gnutls_record_cork would make. */
static int send_records(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt)
{
    uint8_t stage[NBD_TLS_RECORD_MAX];
    size_t used = 0;
    int r;

    for (int i = 0; i < iovcnt; i++) {
        const uint8_t *p = iov[i].iov_base;
        size_t left = iov[i].iov_len;
        while (left > 0) {
            if (used == 0 && left >= sizeof stage) {
                if ((r = tls_send_all(s, p, left)) < 0) {
                    return r;
                }
                break;
            }
            size_t n = MIN(left, sizeof stage - used);
            memcpy(stage + used, p, n);
            used += n;
            p += n;
            left -= n;
            if (used == sizeof stage) {
                if ((r = tls_send_all(s, stage, used)) < 0) {
                    return r;
                }
                used = 0;
            }
        }
    }
    return tls_send_all(s, stage, used);
}

int nbd_tls_try_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt, bool *taken)
{
    uint8_t stage[NBD_TLS_RECORD_MAX];
    size_t len = iov_length(iov, iovcnt);

    *taken = false;
    if (!s->shared || len > sizeof stage) {
        return -EAGAIN;
    }
    iov_to_buf(iov, iovcnt, 0, stage, len);
    pthread_mutex_lock(&s->glock);
    bool may_try = !s->gathering && s->wpos == s->wlen;
    ssize_t n = may_try ? gnutls_record_send(s->s, stage, len) : 0;
    bool queued = s->wpos < s->wlen;
    pthread_mutex_unlock(&s->glock);
    if (!may_try) {
        return -EAGAIN;
    }
    if (n < 0) {
        return nbd_tls_why_record(s, n, true);
    }
    /* The record is GnuTLS's; what the socket did not take is queued for
     * the next nbd_tls_send. */
    *taken = true;
    return queued ? -EAGAIN : 0;
}

int nbd_tls_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt)
{
    /* One record goes out as it is: gathering would only copy it. */
    bool gather = s->shared && iov_length(iov, iovcnt) > NBD_TLS_RECORD_MAX;
    int r;

    if (s->shared && (r = drain_for_send(s)) < 0) {
        return r; /* what a try or another push left goes first */
    }
    if (gather) {
        pthread_mutex_lock(&s->glock);
        s->gathering = true;
        pthread_mutex_unlock(&s->glock);
    }
    r = send_records(s, iov, iovcnt);
    if (gather) {
        pthread_mutex_lock(&s->glock);
        s->gathering = false;
        pthread_mutex_unlock(&s->glock);
    }
    if (r == 0 && s->shared) {
        r = drain_for_send(s);
    }
    return r;
}

static ssize_t bye_call(gnutls_session_t s, void *buf, size_t len)
{
    (void)buf, (void)len;
    return gnutls_bye(s, GNUTLS_SHUT_WR);
}

void nbd_tls_bye(struct nbd_tls_session *s)
{
    if (s && !s->bye_sent) {
        s->bye_sent = true;
        /* close_notify is a courtesy: a peer that reads nothing must not
         * hold the closing thread, so the send gets a second at most. */
        s->deadline_ns = clock_ns() + BYE_LIMIT_NS;
        if (record_call(s, bye_call, NULL, 0) >= 0 && s->shared) {
            (void)queue_drain(s);
        }
    }
}

void nbd_tls_session_close(struct nbd_tls_session *s)
{
    if (s) {
        nbd_tls_bye(s);
        gnutls_deinit(s->s);
        pthread_mutex_destroy(&s->glock);
        free(s->rbuf);
        free(s->wbuf);
        free(s);
    }
}
