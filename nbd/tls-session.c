/* nbd/tls-session.c: one TLS session on a connected socket (see tls.h):
 * the handshake with the checks of the peer (client certificate, CA, CRL,
 * --tls-authz), then records in and out.
 *
 * GnuTLS reads and writes the socket through our transport functions, not
 * its own, so that a deadline bounds every wait: during the NBD handshake
 * a client that sends half a TLS record and stalls, or stops reading, is
 * dropped at the connection's deadline instead of holding a slot.  With
 * no deadline (transmission) they block like plain recv and sendmsg. */
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

static ssize_t recv_once(struct nbd_tls_session *ts, void *buf, size_t len)
{
    if (ts->deadline_ns && wait_ready(ts, POLLIN) < 0) {
        return -1;
    }
    for (;;) {
        ssize_t n = recv(ts->fd, buf, len, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            ts->pull_gone = true;
        }
        if (n >= 0 || errno != EINTR) {
            return n;
        }
    }
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

/* Caller holds wlock.  A thread that tries a record (nbd_tls_try_send)
 * gets EAGAIN instead of a wait when the socket is full. */
static ssize_t send_some(struct nbd_tls_session *ts, const struct iovec *iov, int iovcnt)
{
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    bool trying = ts->trying && pthread_equal(ts->trier, pthread_self());

    for (;;) {
        if (ts->deadline_ns && wait_ready(ts, POLLOUT) < 0) {
            return -1;
        }
        int flags = MSG_NOSIGNAL | (ts->deadline_ns || trying ? MSG_DONTWAIT : 0);
        ssize_t n = sendmsg(ts->fd, &msg, flags);
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            ts->push_gone = true;
        }
        if (n < 0 && trying && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            errno = EAGAIN; /* GnuTLS keeps the rest: GNUTLS_E_AGAIN */
            return -1;
        }
        if (n >= 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
            return n;
        }
    }
}

/* The gathered records, all of them (caller holds wlock): 0, or -1 with
 * errno. */
static int flush_gathered(struct nbd_tls_session *ts)
{
    size_t done = 0;

    while (done < ts->wlen) {
        ssize_t n = send_some(ts, &(struct iovec){ts->wbuf + done, ts->wlen - done}, 1);
        if (n < 0) {
            ts->wlen = 0;
            return -1;
        }
        done += (size_t)n;
    }
    ts->wlen = 0;
    return 0;
}

/* GnuTLS pushes each record (at most 16 KiB of data) as it encrypts it,
 * so a 1 MiB reply took 64 sendmsg calls and woke the reader as often.
 * While a thread sends more than one record (nbd_tls_send), its records
 * are copied into wbuf instead and go out WRITE_GATHER bytes at a time,
 * the rest when the send ends.  A record another thread pushes meanwhile
 * (GnuTLS answering a TLS 1.3 key update while it receives) goes out
 * after the gathered ones, in the order GnuTLS numbered them. */
#define WRITE_GATHER (64u * 1024)

static ssize_t push_locked(struct nbd_tls_session *ts, const struct iovec *iov, int iovcnt)
{
    if (!ts->gathering || !pthread_equal(ts->gatherer, pthread_self())) {
        return flush_gathered(ts) < 0 ? -1 : send_some(ts, iov, iovcnt);
    }
    size_t total = iov_length(iov, iovcnt);
    if (ts->wlen + total > WRITE_GATHER && flush_gathered(ts) < 0) {
        return -1;
    }
    if (total > WRITE_GATHER) {
        return send_some(ts, iov, iovcnt);
    }
    ts->wlen += iov_to_buf(iov, iovcnt, 0, ts->wbuf + ts->wlen, total);
    return (ssize_t)total;
}

static ssize_t tls_push(gnutls_transport_ptr_t ptr, const giovec_t *iov, int iovcnt)
{
    struct nbd_tls_session *ts = ptr;

    pthread_mutex_lock(&ts->wlock);
    ssize_t n = push_locked(ts, (const struct iovec *)iov, iovcnt);
    pthread_mutex_unlock(&ts->wlock);
    return n;
}

void nbd_tls_set_deadline(struct nbd_tls_session *s, uint64_t deadline_ns)
{
    if (s) {
        s->deadline_ns = deadline_ns;
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
    pthread_mutex_init(&ts->wlock, NULL);
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
        pthread_mutex_destroy(&ts->wlock);
        free(ts->rbuf);
        free(ts);
        return r;
    }
    *out = ts;
    return 0;
}

ssize_t nbd_tls_recv(struct nbd_tls_session *s, void *buf, size_t len)
{
    for (;;) {
        ssize_t n = gnutls_record_recv(s->s, buf, len);
        if ((n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN) && !s->interrupted) {
            continue;
        }
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
}

/* One gnutls_record_send until all of it is sent. */
static int tls_send_all(struct nbd_tls_session *s, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = gnutls_record_send(s->s, p, len);
        if ((n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN) && !s->interrupted) {
            continue;
        }
        if (n < 0) {
            return nbd_tls_why_record(s, n, true);
        }
        p += n;
        len -= (size_t)n;
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

/* The rest of a record nbd_tls_try_send left with GnuTLS, waiting for
 * room: GnuTLS resumes a send that said GNUTLS_E_AGAIN when called with
 * no new data. */
static int finish_pending_record(struct nbd_tls_session *s)
{
    while (s->record_pending) {
        ssize_t n = gnutls_record_send(s->s, NULL, 0);
        if ((n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN) && !s->interrupted) {
            continue;
        }
        s->record_pending = false;
        if (n < 0) {
            return nbd_tls_why_record(s, n, true);
        }
    }
    return 0;
}

int nbd_tls_try_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt, bool *taken)
{
    uint8_t stage[NBD_TLS_RECORD_MAX];
    size_t len = iov_length(iov, iovcnt);

    *taken = false;
    pthread_mutex_lock(&s->wlock);
    bool may_try = len <= sizeof stage && !s->record_pending && !s->gathering && s->wlen == 0;
    if (may_try) {
        s->trying = true;
        s->trier = pthread_self();
    }
    pthread_mutex_unlock(&s->wlock);
    if (!may_try) {
        return -EAGAIN;
    }
    iov_to_buf(iov, iovcnt, 0, stage, len);
    ssize_t n = gnutls_record_send(s->s, stage, len);
    pthread_mutex_lock(&s->wlock);
    s->trying = false;
    pthread_mutex_unlock(&s->wlock);
    if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
        /* GnuTLS took the record; nbd_tls_send sends what is left of it. */
        s->record_pending = true;
        *taken = true;
        return -EAGAIN;
    }
    if (n < 0) {
        return nbd_tls_why_record(s, n, true);
    }
    *taken = true;
    return 0;
}

int nbd_tls_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt)
{
    int r, flushed = 0;

    if ((r = finish_pending_record(s)) < 0) {
        return r;
    }
    /* One record goes out as it is: gathering would only copy it. */
    if (iov_length(iov, iovcnt) <= NBD_TLS_RECORD_MAX) {
        return send_records(s, iov, iovcnt);
    }
    pthread_mutex_lock(&s->wlock);
    if (!s->wbuf) {
        s->wbuf = malloc(WRITE_GATHER); /* without it, records go out one by one */
    }
    s->gathering = s->wbuf != NULL;
    s->gatherer = pthread_self();
    pthread_mutex_unlock(&s->wlock);
    r = send_records(s, iov, iovcnt);
    pthread_mutex_lock(&s->wlock);
    s->gathering = false;
    if (r < 0) {
        s->wlen = 0;
    } else {
        flushed = flush_gathered(s);
    }
    pthread_mutex_unlock(&s->wlock);
    return r < 0 ? r : flushed < 0 ? nbd_tls_why_record(s, GNUTLS_E_PUSH_ERROR, true) : 0;
}

bool nbd_tls_pending(struct nbd_tls_session *s)
{
    return s->rpos < s->rlen || gnutls_record_check_pending(s->s) > 0;
}

void nbd_tls_bye(struct nbd_tls_session *s)
{
    if (s && !s->bye_sent) {
        s->bye_sent = true;
        /* close_notify is a courtesy: a peer that reads nothing must not
         * hold the closing thread, so the send gets a second at most. */
        s->deadline_ns = clock_ns() + BYE_LIMIT_NS;
        (void)gnutls_bye(s->s, GNUTLS_SHUT_WR);
    }
}

void nbd_tls_session_close(struct nbd_tls_session *s)
{
    if (s) {
        nbd_tls_bye(s);
        gnutls_deinit(s->s);
        pthread_mutex_destroy(&s->wlock);
        free(s->rbuf);
        free(s->wbuf);
        free(s);
    }
}
