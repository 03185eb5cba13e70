/* nbd/tls-internal.h: what the TLS files share, GnuTLS builds only.
 * tls.c loads and checks the credentials, tls-why.c turns a failure into
 * a sentence that names its cause, tls-session.c runs the sessions (and
 * calls the other two). */
#ifndef DISKIMG_NBD_TLS_INTERNAL_H
#define DISKIMG_NBD_TLS_INTERNAL_H

#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define NBD_TLS_MAX_AUTHZ 256

struct nbd_tls_psk {
    char *id;
    gnutls_datum_t key;
};

struct nbd_tls {
    bool server, psk;
    bool verify_peer; /* server, X.509: require and verify a client certificate */
    gnutls_certificate_credentials_t x509;
    gnutls_psk_server_credentials_t psk_server;
    gnutls_psk_client_credentials_t psk_client;
    gnutls_priority_t priority;
    char *hostname; /* client: the name the server certificate must carry */
    char *authz[NBD_TLS_MAX_AUTHZ];
    unsigned n_authz;
    bool have_authz;

    /* For messages: where the credentials came from. */
    char *dir;                /* X.509 directory */
    char *psk_file;           /* PSK file */
    char *psk_identity;       /* client: the identity we use */
    struct nbd_tls_psk *keys; /* the PSK file's identities and keys */
    unsigned n_keys;
    bool have_cert; /* client: we present DIR/client-cert.pem */
    bool have_crl;  /* DIR/ca-crl.pem was loaded */
};

struct nbd_tls_session {
    gnutls_session_t s;
    struct nbd_tls *t;
    int fd;
    uint64_t deadline_ns; /* 0: none (see nbd_tls_set_deadline) */
    bool timed_out;       /* the transport gave up at the deadline */
    bool interrupted;     /* ... or at Ctrl-C (diskimg_interrupted) */
    /* The transport saw the end of the stream or a reset, reading or
     * writing (two flags: a reader and a writer may run at once). */
    bool pull_gone, push_gone;
    bool bye_sent;
    bool established; /* the TLS handshake completed */
    bool got_data;    /* a record with data arrived */
    /* Transmission: threads share the session, so every GnuTLS call
     * holds glock and the transport never waits (tls-session.c).  Set
     * once, before those threads start. */
    bool shared;
    pthread_mutex_t glock;
    bool would_block; /* the pull found the socket empty (shared session) */
    /* Ciphertext read ahead of what GnuTLS asked for (see tls_pull):
     * bytes [rpos, rlen) of rbuf are next on the stream. */
    uint8_t *rbuf;
    size_t rpos, rlen;
    /* The output queue (see tls_push): bytes [wpos, wlen) of wbuf (wcap
     * long) are still to go; gathering: a send of several records is
     * under way, so its records wait there to go out together. */
    uint8_t *wbuf;
    size_t wpos, wlen, wcap;
    bool gathering;
    /* Server, PSK: the identity the client offered, and whether it is in
     * our file (to tell an unknown identity from a wrong key). */
    char psk_offered[256];
    bool psk_unknown;
};

/* tls.c: is this peer (certificate DN or PSK identity) in --tls-authz? */
bool nbd_tls_authorized(const struct nbd_tls *t, const char *who);
/* tls.c: the key of identity id (NULL: the first), or NULL. */
const struct nbd_tls_psk *nbd_tls_psk_find(const struct nbd_tls *t, const char *id);

/* tls-why.c: each records a message naming the cause (the peer is "the
 * client" on a server, "the NBD server" on a client) and returns -errno. */

/* The handshake failed with GnuTLS error gerr. */
int nbd_tls_why_handshake(struct nbd_tls_session *ts, int gerr);
/* The handshake succeeded, but the peer's certificate does not pass our
 * own checks (a server that verifies the client after the fact). */
int nbd_tls_why_status(struct nbd_tls_session *ts, unsigned status);
/* The peer closed the connection after the handshake, before any data. */
int nbd_tls_why_eof(struct nbd_tls_session *ts);
/* gnutls_record_recv or _send failed after the handshake. */
int nbd_tls_why_record(struct nbd_tls_session *ts, ssize_t gerr, bool sending);
/* The alert to send the peer when our side refused it (0: none), after
 * GnuTLS error gerr, or for a certificate with verification status st. */
int nbd_tls_alert_for(struct nbd_tls_session *ts, int gerr);
int nbd_tls_status_alert(unsigned st);
/* The peer's certificate DN (or PSK identity) into buf, "" if none. */
void nbd_tls_peer_name(struct nbd_tls_session *ts, char *buf, size_t len);

#endif
