/* nbd/tls.h: TLS for NBD with GnuTLS, X.509 or PSK, server and client.
 * Credentials are loaded and checked once (missing or unreadable files,
 * private keys open to others, expired certificates, a revocation list
 * from another CA are refused with a message that says what to fix); each
 * connection gets a session after NBD_OPT_STARTTLS.  A server with X.509
 * credentials requires a client certificate signed by its CA unless told
 * otherwise.  Every failure records a message naming its cause (no
 * certificate, unknown CA, revoked, expired, wrong host name, wrong PSK,
 * no common version, peer gone).  A session's recv and send may run at the
 * same time from two threads, as GnuTLS allows for the record layer. */
#ifndef DISKIMG_NBD_TLS_H
#define DISKIMG_NBD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct nbd_tls_config {
    const char *creds_dir;    /* X.509: ca-cert.pem, ca-crl.pem, server-* or client-* */
    const char *psk_file;     /* psktool format: identity:hexkey per line */
    const char *psk_identity; /* client: which identity (default: the first) */
    const char *priority;     /* GnuTLS priority string (NULL: our default) */
    bool no_verify_peer;      /* server, X.509: do not ask for a client certificate */
    const char *authz_file;   /* server: allowed client DNs or PSK identities, one per line */
    const char *hostname;     /* client: name the server certificate must carry (NULL: CA only) */
};

struct nbd_tls;
struct nbd_tls_session;

/* The most data one TLS record carries, and so the longest send that
 * nbd_tls_try_send tries. */
#define NBD_TLS_RECORD_MAX 16384

int nbd_tls_new(struct nbd_tls **out, const struct nbd_tls_config *c, bool server);
void nbd_tls_free(struct nbd_tls *t);
bool nbd_tls_available(void);

/* Handshake on fd; deadline 0 = none.  *peer gets the client's DN or PSK
 * identity (server side), for logs and authorization.  The deadline stays
 * on the session: every record read or written gives up at it (-ETIMEDOUT)
 * until nbd_tls_set_deadline changes it, so a peer that stalls inside a
 * record cannot hold the connection past the NBD handshake's limit. */
int nbd_tls_handshake(struct nbd_tls *t, int fd, uint64_t deadline_ns, struct nbd_tls_session **out,
                      char *peer, size_t peer_len);
/* A new deadline for the session's I/O (CLOCK_MONOTONIC ns), 0 = none:
 * the NBD handshake is over.  s may be NULL. */
void nbd_tls_set_deadline(struct nbd_tls_session *s, uint64_t deadline_ns);
/* Received bytes; 0 at the end of the stream; -errno with a message.
 * With a deadline set (the NBD handshake), a stream that ends before a
 * first record is -ECONNRESET with a message guessing why. */
ssize_t nbd_tls_recv(struct nbd_tls_session *s, void *buf, size_t len);
/* Sends all of iov (one or more records); 0 or -errno.  First it sends
 * what nbd_tls_try_send left. */
int nbd_tls_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt);
/* Sends iov as one record (at most NBD_TLS_RECORD_MAX bytes) if the
 * socket has room now: 0 when it went out, -EAGAIN when it did not, or
 * -errno with a message.  *taken says whether GnuTLS took the record:
 * after -EAGAIN with *taken, the rest of the record waits in the
 * session's output queue and the next nbd_tls_send sends it first;
 * without *taken, nothing of iov was sent (too long for one record, or
 * another send is under way). */
int nbd_tls_try_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt, bool *taken);
/* Decrypted bytes already buffered (poll() would not see them). */
bool nbd_tls_pending(struct nbd_tls_session *s);
/* Tell the peer we send no more (close_notify); at most once. */
void nbd_tls_bye(struct nbd_tls_session *s);
void nbd_tls_session_close(struct nbd_tls_session *s);

#endif
