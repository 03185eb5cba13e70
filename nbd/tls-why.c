/* nbd/tls-why.c: why a TLS session failed, in words a person can act on.
 *
 * GnuTLS reports "Error in the pull function" or "A TLS fatal alert has
 * been received" where the cause was a missing client certificate, an
 * unknown CA or a wrong pre-shared key.  The functions here look at the
 * error, the verification status of the peer's certificate and the alert
 * the peer sent, and record one message naming the cause, from the side
 * we are on ("the client ..." on a server, "the NBD server ..." on a
 * client); and they choose the alert that tells the peer why we refused
 * it, so that its message can name the cause too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "tls-internal.h"

static const char *peer_word(const struct nbd_tls_session *ts)
{
    return ts->t->server ? "the client" : "the NBD server";
}

void nbd_tls_peer_name(struct nbd_tls_session *ts, char *buf, size_t len)
{
    buf[0] = '\0';
    if (ts->t->psk) {
        const char *u = ts->t->server ? gnutls_psk_server_get_username(ts->s) : ts->t->psk_identity;
        snprintf(buf, len, "%s", u ? u : "");
        return;
    }
    unsigned n = 0;
    const gnutls_datum_t *chain = gnutls_certificate_get_peers(ts->s, &n);
    gnutls_x509_crt_t crt;
    if (!chain || n == 0 || gnutls_x509_crt_init(&crt) < 0) {
        return;
    }
    if (gnutls_x509_crt_import(crt, &chain[0], GNUTLS_X509_FMT_DER) == 0) {
        size_t sz = len;
        if (gnutls_x509_crt_get_dn(crt, buf, &sz) < 0) {
            buf[0] = '\0';
        }
    }
    gnutls_x509_crt_deinit(crt);
}

/* "the client certificate 'O=Example,CN=ci'" or "the NBD server's
 * certificate 'CN=localhost'": whose certificate, and its name, escaped
 * since it comes from the peer. */
static void peer_cert(struct nbd_tls_session *ts, char *buf, size_t len)
{
    char dn[512];

    nbd_tls_peer_name(ts, dn, sizeof dn);
    CLEANUP_FREE char *esc = str_escape(dn);
    snprintf(buf, len, "%s%s%s%s",
             ts->t->server ? "the client certificate" : "the NBD server's certificate",
             dn[0] ? " '" : "", dn[0] ? esc : "", dn[0] ? "'" : "");
}

/* Our own certificate, for what the peer said about it. */
static void own_cert(const struct nbd_tls *t, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s-cert.pem", t->dir ? t->dir : ".", t->server ? "server" : "client");
}

int nbd_tls_why_status(struct nbd_tls_session *ts, unsigned st)
{
    const struct nbd_tls *t = ts->t;
    const char *dir = t->dir ? t->dir : ".";
    char who[600];
    CLEANUP_FREE char *host = t->hostname ? str_escape(t->hostname) : NULL;

    peer_cert(ts, who, sizeof who);
    if (st & GNUTLS_CERT_REVOKED) {
        return err_setx(EACCES, "TLS: %s is revoked (listed in %s/ca-crl.pem)", who, dir);
    }
    if (st & GNUTLS_CERT_SIGNER_NOT_FOUND) {
        return err_setx(EACCES, "TLS: %s is not signed by the CA in %s/ca-cert.pem (unknown CA)",
                        who, dir);
    }
    if (st & GNUTLS_CERT_EXPIRED) {
        return err_setx(EACCES, "TLS: %s has expired", who);
    }
    if (st & GNUTLS_CERT_NOT_ACTIVATED) {
        return err_setx(EACCES, "TLS: %s is not valid yet", who);
    }
    if (st & GNUTLS_CERT_UNEXPECTED_OWNER) {
        return err_setx(EACCES,
                        "TLS: %s does not name the host '%s' (wrong host name; tls-hostname= "
                        "names another)",
                        who, host ? host : "");
    }
    if (st &
        (GNUTLS_CERT_REVOCATION_DATA_SUPERSEDED | GNUTLS_CERT_REVOCATION_DATA_ISSUED_IN_FUTURE)) {
        return err_setx(EACCES,
                        "TLS: %s cannot be checked: the revocation list %s/ca-crl.pem is "
                        "out of date",
                        who, dir);
    }
    if (st & GNUTLS_CERT_SIGNER_NOT_CA) {
        return err_setx(EACCES, "TLS: %s is signed by a certificate that is not a CA", who);
    }
    if (st & GNUTLS_CERT_INSECURE_ALGORITHM) {
        return err_setx(EACCES, "TLS: %s is signed with an insecure algorithm", who);
    }
    if (st & GNUTLS_CERT_PURPOSE_MISMATCH) {
        return err_setx(EACCES, "TLS: %s is not meant for a TLS %s (key purpose)", who,
                        t->server ? "client" : "server");
    }
    gnutls_datum_t out = {0};
    if (gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &out, 0) == 0) {
        int r = err_setx(EACCES, "TLS: %s is not valid: %s", who, (char *)out.data);
        gnutls_free(out.data);
        return r;
    }
    return err_setx(EACCES, "TLS: %s is not valid (status 0x%x)", who, st);
}

/* A server that requires a certificate got none. */
static int no_client_cert(void)
{
    return err_setx(EACCES, "TLS: the client sent no certificate, and this server requires one "
                            "signed by its CA (--tls-verify-peer)");
}

/* A PSK handshake failed on a key: on a server we know whether the
 * client's identity is in our file; a client knows what the alert says. */
static int wrong_psk(struct nbd_tls_session *ts, int alert)
{
    const struct nbd_tls *t = ts->t;
    CLEANUP_FREE char *id = str_escape(t->server ? ts->psk_offered : t->psk_identity);

    if (t->server && ts->psk_unknown) {
        return err_setx(EACCES,
                        "TLS: the client's PSK identity '%s' is not in %s (unknown identity)", id,
                        t->psk_file);
    }
    if (t->server) {
        return err_setx(EACCES,
                        "TLS: the client's pre-shared key for '%s' differs from the one in %s "
                        "(wrong PSK)",
                        id, t->psk_file);
    }
    if (alert == GNUTLS_A_UNKNOWN_PSK_IDENTITY) {
        return err_setx(EACCES,
                        "TLS: the NBD server does not know our PSK identity '%s' (unknown "
                        "identity)",
                        id);
    }
    if (alert == GNUTLS_A_DECRYPT_ERROR) {
        return err_setx(EACCES,
                        "TLS: the NBD server's pre-shared key for '%s' differs from ours in %s "
                        "(wrong PSK)",
                        id, t->psk_file);
    }
    return err_setx(EACCES,
                    "TLS: the NBD server refused our pre-shared key for '%s' (wrong PSK, or an "
                    "identity it does not know)",
                    id);
}

/* Did a PSK handshake fail on the key?  A binder (TLS 1.3) or a Finished
 * message (TLS 1.2) that does not check out, or an unknown identity. */
static bool psk_failure(const struct nbd_tls_session *ts, int gerr)
{
    if (!ts->t->psk) {
        return false;
    }
    if (ts->psk_unknown) {
        return true;
    }
    switch (gerr) {
    case GNUTLS_E_RECEIVED_ILLEGAL_PARAMETER:
    case GNUTLS_E_DECRYPTION_FAILED:
    case GNUTLS_E_ERROR_IN_FINISHED_PACKET:
    case GNUTLS_E_USER_ERROR:
        return ts->t->server ? ts->psk_offered[0] != '\0' : true;
    default:
        return false;
    }
}

/* The peer ended the handshake with a fatal alert: what it means from
 * our side.  On a client with TLS 1.3 this also arrives after our
 * handshake, on the first read, when the server refused our certificate. */
static int why_alert(struct nbd_tls_session *ts, int alert)
{
    const struct nbd_tls *t = ts->t;
    const char *name = gnutls_alert_get_name((gnutls_alert_description_t)alert);
    const char *peer = peer_word(ts);
    char mine[4200];

    own_cert(t, mine, sizeof mine);
    name = name ? name : "unknown";
    switch (alert) {
    case GNUTLS_A_CERTIFICATE_REQUIRED:
    case GNUTLS_A_SSL3_NO_CERTIFICATE:
        if (!t->server && !t->psk && !t->have_cert) {
            return err_setx(EACCES,
                            "TLS: the NBD server requires a client certificate, and %s/ has no "
                            "client-cert.pem (no client certificate)",
                            t->dir);
        }
        return err_setx(EACCES, "TLS: %s requires a certificate it did not get (%s)", peer, name);
    case GNUTLS_A_UNKNOWN_CA:
        return err_setx(EACCES,
                        "TLS: %s does not trust the CA that signed our certificate %s "
                        "(unknown CA)",
                        peer, mine);
    case GNUTLS_A_CERTIFICATE_REVOKED:
        return err_setx(EACCES, "TLS: %s says our certificate %s is revoked", peer, mine);
    case GNUTLS_A_CERTIFICATE_EXPIRED:
        return err_setx(EACCES, "TLS: %s says our certificate %s has expired or is not valid yet",
                        peer, mine);
    case GNUTLS_A_BAD_CERTIFICATE:
    case GNUTLS_A_CERTIFICATE_UNKNOWN:
    case GNUTLS_A_UNSUPPORTED_CERTIFICATE:
        return err_setx(EACCES,
                        "TLS: %s refused our certificate %s (%s: not signed by a CA it trusts%s)",
                        peer, mine, name, t->server ? ", or without the host name it dialled" : "");
    case GNUTLS_A_ACCESS_DENIED:
        return err_setx(EACCES, "TLS: %s does not admit our %s (access denied)", peer,
                        t->psk ? "PSK identity" : "certificate's name");
    case GNUTLS_A_UNKNOWN_PSK_IDENTITY:
    case GNUTLS_A_DECRYPT_ERROR:
    case GNUTLS_A_BAD_RECORD_MAC:
    case GNUTLS_A_ILLEGAL_PARAMETER:
        if (t->psk && !t->server) {
            return wrong_psk(ts, alert);
        }
        break;
    case GNUTLS_A_PROTOCOL_VERSION:
    case GNUTLS_A_INSUFFICIENT_SECURITY:
        return err_setx(EPROTO, "TLS: no TLS version or cipher suite in common with %s (%s)", peer,
                        name);
    case GNUTLS_A_HANDSHAKE_FAILURE:
        if (!t->server && !t->psk && !t->have_cert) {
            return err_setx(EACCES,
                            "TLS: the NBD server refused the handshake (%s): it may require a "
                            "client certificate, and %s/ has no client-cert.pem",
                            name, t->dir);
        }
        return err_setx(EPROTO,
                        "TLS: %s refused the handshake (%s): no TLS version, cipher suite or "
                        "credentials in common",
                        peer, name);
    default:
        break;
    }
    return err_setx(EPROTO, "TLS: %s ended the TLS session with the alert '%s'", peer, name);
}

/* The peer closed or reset the connection without saying why.  Servers
 * that send no alert do that when they refuse our credentials, and
 * clients when they refuse our certificate: the message guesses so. */
static int peer_gone(struct nbd_tls_session *ts, int errnum, const char *when)
{
    const struct nbd_tls *t = ts->t;
    char hint[600] = "";

    if (t->server && !t->psk) {
        snprintf(hint, sizeof hint, " (did it refuse our certificate?)");
    } else if (!t->server && t->psk) {
        CLEANUP_FREE char *id = str_escape(t->psk_identity);
        snprintf(hint, sizeof hint, " (did it refuse our PSK identity '%s' or its key?)", id);
    } else if (!t->server && t->have_cert) {
        snprintf(hint, sizeof hint, " (did it refuse our client certificate %s/client-cert.pem?)",
                 t->dir);
    } else if (!t->server) {
        snprintf(hint, sizeof hint,
                 " (does it require a client certificate? %s/ has no client-cert.pem)", t->dir);
    }
    return err_setx(errnum, "TLS: %s closed the connection %s%s", peer_word(ts), when, hint);
}

int nbd_tls_why_eof(struct nbd_tls_session *ts)
{
    return peer_gone(ts, ECONNRESET, "right after the TLS handshake");
}

int nbd_tls_why_handshake(struct nbd_tls_session *ts, int gerr)
{
    if (ts->interrupted) {
        return err_setx(EINTR, "interrupted");
    }
    if (ts->timed_out) {
        return err_setx(ETIMEDOUT, "TLS: the handshake did not finish in time");
    }
    if ((ts->pull_gone || ts->push_gone) && gerr != GNUTLS_E_FATAL_ALERT_RECEIVED) {
        /* whatever GnuTLS made of a record cut short */
        return peer_gone(ts, ECONNRESET, "during the TLS handshake");
    }
    switch (gerr) {
    case GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR:
        return nbd_tls_why_status(ts, gnutls_session_get_verify_cert_status(ts->s));
    case GNUTLS_E_CERTIFICATE_REQUIRED:
    case GNUTLS_E_NO_CERTIFICATE_FOUND:
        /* Up to TLS 1.2, GnuTLS says "no certificate" also when the
         * client sent an alert where its certificate belonged. */
        if (ts->t->server && gnutls_alert_get(ts->s) > GNUTLS_A_CLOSE_NOTIFY) {
            return why_alert(ts, gnutls_alert_get(ts->s));
        }
        if (ts->t->server) {
            return no_client_cert();
        }
        break;
    case GNUTLS_E_FATAL_ALERT_RECEIVED:
        return why_alert(ts, gnutls_alert_get(ts->s));
    default:
        break;
    }
    if (psk_failure(ts, gerr)) {
        return wrong_psk(ts, 0);
    }
    switch (gerr) {
    case GNUTLS_E_UNSUPPORTED_VERSION_PACKET:
    case GNUTLS_E_NO_CIPHER_SUITES:
    case GNUTLS_E_UNKNOWN_CIPHER_SUITE:
    case GNUTLS_E_INSUFFICIENT_CREDENTIALS:
    case GNUTLS_E_NO_COMMON_KEY_SHARE:
    case GNUTLS_E_NO_PRIORITIES_WERE_SET:
        return err_setx(EPROTO, "TLS: no TLS version or cipher suite in common with %s (%s)",
                        peer_word(ts), gnutls_strerror(gerr));
    case GNUTLS_E_PREMATURE_TERMINATION:
    case GNUTLS_E_PULL_ERROR:
    case GNUTLS_E_PUSH_ERROR:
        return peer_gone(ts, ECONNRESET, "during the TLS handshake");
    default:
        break;
    }
    return err_setx(EPROTO, "TLS: handshake failed: %s", gnutls_strerror(gerr));
}

int nbd_tls_why_record(struct nbd_tls_session *ts, ssize_t gerr, bool sending)
{
    if (ts->interrupted) {
        return err_setx(EINTR, "interrupted");
    }
    if (ts->timed_out) {
        return err_setx(ETIMEDOUT, "TLS: the NBD handshake did not finish in time");
    }
    if (gerr == GNUTLS_E_FATAL_ALERT_RECEIVED) {
        return why_alert(ts, gnutls_alert_get(ts->s));
    }
    if (gerr == GNUTLS_E_PULL_ERROR || gerr == GNUTLS_E_PUSH_ERROR ||
        gerr == GNUTLS_E_PREMATURE_TERMINATION) {
        return peer_gone(ts, sending ? EPIPE : ECONNRESET, "after the TLS handshake");
    }
    /* Anything else received is a record the peer should not have sent
     * (a forged or damaged record, too many key updates): a protocol
     * violation, which the server logs, unlike a peer that just left. */
    return err_setx(sending ? EPIPE : EPROTO, "TLS: %s: %s", sending ? "sending" : "receiving",
                    gnutls_strerror((int)gerr));
}

int nbd_tls_status_alert(unsigned st)
{
    if (st & GNUTLS_CERT_REVOKED) {
        return GNUTLS_A_CERTIFICATE_REVOKED;
    }
    if (st & GNUTLS_CERT_SIGNER_NOT_FOUND) {
        return GNUTLS_A_UNKNOWN_CA;
    }
    if (st & (GNUTLS_CERT_EXPIRED | GNUTLS_CERT_NOT_ACTIVATED)) {
        return GNUTLS_A_CERTIFICATE_EXPIRED;
    }
    return GNUTLS_A_BAD_CERTIFICATE;
}

int nbd_tls_alert_for(struct nbd_tls_session *ts, int gerr)
{
    int level = 0;

    if (ts->t->server && psk_failure(ts, gerr)) {
        return ts->psk_unknown ? GNUTLS_A_UNKNOWN_PSK_IDENTITY : GNUTLS_A_DECRYPT_ERROR;
    }
    switch (gerr) {
    case GNUTLS_E_FATAL_ALERT_RECEIVED:
    case GNUTLS_E_PREMATURE_TERMINATION:
    case GNUTLS_E_PULL_ERROR:
    case GNUTLS_E_PUSH_ERROR:
        return 0; /* the peer is gone or already knows */
    case GNUTLS_E_CERTIFICATE_REQUIRED:
    case GNUTLS_E_NO_CERTIFICATE_FOUND:
        return gnutls_protocol_get_version(ts->s) == GNUTLS_TLS1_3 ? GNUTLS_A_CERTIFICATE_REQUIRED
                                                                   : GNUTLS_A_HANDSHAKE_FAILURE;
    case GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR:
        return nbd_tls_status_alert(gnutls_session_get_verify_cert_status(ts->s));
    default:
        break;
    }
    int alert = gnutls_error_to_alert(gerr, &level);
    return alert >= 0 && level == GNUTLS_AL_FATAL ? alert : 0;
}
