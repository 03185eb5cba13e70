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

static ssize_t tls_pull(gnutls_transport_ptr_t ptr, void *buf, size_t len)
{
    struct nbd_tls_session *ts = ptr;

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

/* GnuTLS asks whether data arrives within ms (TLS 1.3 uses it): > 0 yes,
 * 0 not in time, -1 an error (the deadline passed, or Ctrl-C). */
static int tls_pull_timeout(gnutls_transport_ptr_t ptr, unsigned ms)
{
    struct nbd_tls_session *ts = ptr;
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

static ssize_t tls_push(gnutls_transport_ptr_t ptr, const giovec_t *iov, int iovcnt)
{
    struct nbd_tls_session *ts = ptr;
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};

    for (;;) {
        if (ts->deadline_ns && wait_ready(ts, POLLOUT) < 0) {
            return -1;
        }
        ssize_t n = sendmsg(ts->fd, &msg, MSG_NOSIGNAL | (ts->deadline_ns ? MSG_DONTWAIT : 0));
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            ts->push_gone = true;
        }
        if (n >= 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
            return n;
        }
    }
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
int nbd_tls_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt)
{
    uint8_t stage[16384]; /* the TLS maximum record payload */
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

bool nbd_tls_pending(struct nbd_tls_session *s)
{
    return gnutls_record_check_pending(s->s) > 0;
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
        free(s);
    }
}
