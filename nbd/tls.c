/* nbd/tls.c: see tls.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"
#include "tls.h"

#ifdef HAVE_GNUTLS
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

/* TLS 1.2 and newer only (the NBD spec requires 1.2 and advises against
 * anything older). */
#define DEFAULT_PRIORITY "NORMAL:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1"
#define DEFAULT_PRIORITY_PSK                                                                       \
    "NORMAL:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1:+ECDHE-PSK:+DHE-PSK:+PSK"
#define MAX_AUTHZ 256

struct nbd_tls {
    bool server, psk, verify_peer;
    gnutls_certificate_credentials_t x509;
    gnutls_psk_server_credentials_t psk_server;
    gnutls_psk_client_credentials_t psk_client;
    gnutls_priority_t priority;
    char *hostname;
    char *authz[MAX_AUTHZ];
    unsigned n_authz;
    bool have_authz;
};

struct nbd_tls_session {
    gnutls_session_t s;
    int fd;
    bool bye_sent;
};

bool nbd_tls_available(void)
{
    return true;
}

static int tls_err(int gerr, const char *what)
{
    return err_setx(EPROTO, "TLS: %s: %s", what, gnutls_strerror(gerr));
}

/* A credential file must exist and be readable; a private key must not be
 * readable by others. */
static int check_file(const char *path, bool private_key)
{
    struct stat st;

    if (stat(path, &st) < 0) {
        return err_set(errno, "TLS: %s", path);
    }
    if (access(path, R_OK) < 0) {
        return err_set(errno, "TLS: %s", path);
    }
    if (private_key && (st.st_mode & 077)) {
        return err_setx(EACCES,
                        "TLS: private key %s is readable by group or others (mode %03o); "
                        "chmod 600 it",
                        path, (unsigned)(st.st_mode & 0777));
    }
    return 0;
}

static int check_cert_dates(const char *path)
{
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0;
    gnutls_datum_t data = {0};
    int r = gnutls_load_file(path, &data), result = 0;

    if (r < 0) {
        return tls_err(r, path);
    }
    r = gnutls_x509_crt_list_import2(&crts, &n, &data, GNUTLS_X509_FMT_PEM, 0);
    gnutls_free(data.data);
    if (r < 0) {
        return tls_err(r, path);
    }
    time_t now = time(NULL);
    for (unsigned i = 0; i < n; i++) {
        if (result == 0 && gnutls_x509_crt_get_expiration_time(crts[i]) < now) {
            result = err_setx(EKEYEXPIRED, "TLS: certificate %s has expired", path);
        }
        if (result == 0 && gnutls_x509_crt_get_activation_time(crts[i]) > now) {
            result = err_setx(EKEYEXPIRED, "TLS: certificate %s is not valid yet", path);
        }
        gnutls_x509_crt_deinit(crts[i]);
    }
    gnutls_free(crts);
    return result;
}

static int load_x509(struct nbd_tls *t, const char *dir)
{
    char ca[4096], cert[4096], key[4096];
    bool have_cert;
    int r;

    snprintf(ca, sizeof ca, "%s/ca-cert.pem", dir);
    snprintf(cert, sizeof cert, "%s/%s-cert.pem", dir, t->server ? "server" : "client");
    snprintf(key, sizeof key, "%s/%s-key.pem", dir, t->server ? "server" : "client");
    r = gnutls_certificate_allocate_credentials(&t->x509);
    if (r < 0) {
        return tls_err(r, "credentials");
    }
    if ((r = check_file(ca, false)) < 0 || (r = check_cert_dates(ca)) < 0) {
        return r;
    }
    r = gnutls_certificate_set_x509_trust_file(t->x509, ca, GNUTLS_X509_FMT_PEM);
    if (r < 0) {
        return tls_err(r, ca);
    }
    /* A client certificate is optional; a server certificate is not. */
    have_cert = access(cert, F_OK) == 0;
    if (t->server || have_cert) {
        if ((r = check_file(cert, false)) < 0 || (r = check_file(key, true)) < 0 ||
            (r = check_cert_dates(cert)) < 0) {
            return r;
        }
        r = gnutls_certificate_set_x509_key_file(t->x509, cert, key, GNUTLS_X509_FMT_PEM);
        if (r < 0) {
            return tls_err(r, cert);
        }
    }
    return 0;
}

/* The first (or the named) identity and its key from a psktool file. */
static int read_psk(const char *path, const char *want, char **identity, gnutls_datum_t *key)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int r = err_setx(ENOENT, "TLS: no PSK identity %s%s%sin %s", want ? "'" : "", want ? want : "",
                     want ? "' " : "", path);

    if (!f) {
        return err_set(errno, "TLS: %s", path);
    }
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) {
            continue;
        }
        *colon = '\0';
        line[strcspn(line, "\r\n")] = '\0';
        char *hex = colon + 1;
        hex[strcspn(hex, "\r\n")] = '\0';
        if (want && strcmp(line, want) != 0) {
            continue;
        }
        gnutls_datum_t hexd = {(unsigned char *)hex, (unsigned)strlen(hex)};
        int g = gnutls_hex_decode2(&hexd, key);
        r = g < 0 ? tls_err(g, "PSK key") : 0;
        *identity = r == 0 ? strdup(line) : NULL;
        break;
    }
    fclose(f);
    return r;
}

static int load_psk(struct nbd_tls *t, const struct nbd_tls_config *c)
{
    int r = check_file(c->psk_file, true);

    if (r < 0) {
        return r;
    }
    t->psk = true;
    if (t->server) {
        r = gnutls_psk_allocate_server_credentials(&t->psk_server);
        if (r == 0) {
            r = gnutls_psk_set_server_credentials_file(t->psk_server, c->psk_file);
        }
        return r < 0 ? tls_err(r, c->psk_file) : 0;
    }
    CLEANUP_FREE char *identity = NULL;
    gnutls_datum_t key = {0};
    r = read_psk(c->psk_file, c->psk_identity, &identity, &key);
    if (r < 0) {
        return r;
    }
    int g = gnutls_psk_allocate_client_credentials(&t->psk_client);
    if (g == 0) {
        g = gnutls_psk_set_client_credentials(t->psk_client, identity, &key, GNUTLS_PSK_KEY_RAW);
    }
    gnutls_free(key.data);
    return g < 0 ? tls_err(g, c->psk_file) : 0;
}

static int load_authz(struct nbd_tls *t, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[1024];

    if (!f) {
        return err_set(errno, "--tls-authz %s", path);
    }
    t->have_authz = true;
    while (fgets(line, sizeof line, f) && t->n_authz < MAX_AUTHZ) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] && line[0] != '#') {
            t->authz[t->n_authz++] = strdup(line);
        }
    }
    fclose(f);
    return 0;
}

int nbd_tls_new(struct nbd_tls **out, const struct nbd_tls_config *c, bool server)
{
    struct nbd_tls *t = calloc(1, sizeof *t);
    const char *prio;
    const char *bad = NULL;
    int r;

    if (!t) {
        return err_set(ENOMEM, "TLS");
    }
    t->server = server;
    /* An authorization list of certificate names needs the certificate. */
    t->verify_peer = c->verify_peer || (server && c->authz_file && c->creds_dir);
    if (c->hostname) {
        t->hostname = strdup(c->hostname);
    }
    if (!!c->creds_dir == !!c->psk_file) {
        nbd_tls_free(t);
        return err_setx(EINVAL,
                        "TLS needs either X.509 credentials (--tls-creds) or a PSK file "
                        "(--tls-psk), not %s",
                        c->creds_dir ? "both" : "neither");
    }
    r = c->creds_dir ? load_x509(t, c->creds_dir) : load_psk(t, c);
    if (r == 0 && c->authz_file) {
        r = load_authz(t, c->authz_file);
    }
    if (r == 0) {
        prio = c->priority ? c->priority : t->psk ? DEFAULT_PRIORITY_PSK : DEFAULT_PRIORITY;
        int g = gnutls_priority_init(&t->priority, prio, &bad);
        if (g < 0) {
            r = err_setx(EINVAL, "TLS: priority string '%s' is invalid near '%s'", prio,
                         bad ? bad : "?");
        }
    }
    if (r < 0) {
        nbd_tls_free(t);
        return r;
    }
    *out = t;
    return 0;
}

void nbd_tls_free(struct nbd_tls *t)
{
    if (!t) {
        return;
    }
    if (t->x509) {
        gnutls_certificate_free_credentials(t->x509);
    }
    if (t->psk_server) {
        gnutls_psk_free_server_credentials(t->psk_server);
    }
    if (t->psk_client) {
        gnutls_psk_free_client_credentials(t->psk_client);
    }
    if (t->priority) {
        gnutls_priority_deinit(t->priority);
    }
    for (unsigned i = 0; i < t->n_authz; i++) {
        free(t->authz[i]);
    }
    free(t->hostname);
    free(t);
}

#define MAX_RDNS 32

/* Split a distinguished name in place into its RDNs, trimmed of spaces;
 * a comma escaped with a backslash stays inside its RDN.  Returns how many
 * (0 when there are too many). */
static unsigned dn_split(char *dn, char **rdn)
{
    unsigned n = 0;
    char *start = dn;

    for (char *p = dn;; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            continue;
        }
        if (*p != ',' && *p != '\0') {
            continue;
        }
        bool end = *p == '\0';
        char *e = p;
        *p = '\0';
        while (*start == ' ') {
            start++;
        }
        while (e > start && e[-1] == ' ') {
            *--e = '\0';
        }
        if (n == MAX_RDNS) {
            return 0;
        }
        rdn[n++] = start;
        if (end) {
            return n;
        }
        start = p + 1;
    }
}

/* Does a --tls-authz entry name this client certificate?  GnuTLS prints
 * DNs in RFC 4514 order (most significant RDN last: "O=Example,CN=host"),
 * certtool -i and most people write them the other way round: both
 * orders match, spaces after commas do not matter. */
static bool dn_matches(const char *want, const char *have)
{
    char a[1024], b[1024];
    char *ra[MAX_RDNS], *rb[MAX_RDNS];
    unsigned na, nb;
    bool fwd = true, rev = true;

    if (strcmp(want, have) == 0) {
        return true;
    }
    snprintf(a, sizeof a, "%s", want);
    snprintf(b, sizeof b, "%s", have);
    na = dn_split(a, ra);
    nb = dn_split(b, rb);
    if (na == 0 || na != nb) {
        return false;
    }
    for (unsigned i = 0; i < na; i++) {
        fwd &= strcmp(ra[i], rb[i]) == 0;
        rev &= strcmp(ra[i], rb[na - 1 - i]) == 0;
    }
    return fwd || rev;
}

static bool authorized(const struct nbd_tls *t, const char *who)
{
    if (!t->have_authz) {
        return true;
    }
    for (unsigned i = 0; i < t->n_authz; i++) {
        if (t->psk ? strcmp(t->authz[i], who) == 0 : dn_matches(t->authz[i], who)) {
            return true;
        }
    }
    return false;
}

/* Who is on the other side: the certificate's DN or the PSK identity. */
static int peer_identity(struct nbd_tls *t, gnutls_session_t s, char *peer, size_t len)
{
    peer[0] = '\0';
    if (t->psk) {
        const char *u = gnutls_psk_server_get_username(s);
        snprintf(peer, len, "%s", u ? u : "");
        return 0;
    }
    unsigned n = 0;
    const gnutls_datum_t *chain = gnutls_certificate_get_peers(s, &n);
    if (!chain || n == 0) {
        return 0;
    }
    gnutls_x509_crt_t crt;
    if (gnutls_x509_crt_init(&crt) < 0) {
        return -ENOMEM;
    }
    if (gnutls_x509_crt_import(crt, &chain[0], GNUTLS_X509_FMT_DER) == 0) {
        size_t sz = len;
        if (gnutls_x509_crt_get_dn(crt, peer, &sz) < 0) {
            peer[0] = '\0';
        }
    }
    gnutls_x509_crt_deinit(crt);
    return 0;
}

int nbd_tls_handshake(struct nbd_tls *t, int fd, uint64_t deadline_ns, struct nbd_tls_session **out,
                      char *peer, size_t peer_len)
{
    struct nbd_tls_session *ts = calloc(1, sizeof *ts);
    gnutls_session_t s;
    int g, r = 0;

    if (!ts) {
        return err_set(ENOMEM, "TLS session");
    }
    g = gnutls_init(&s, t->server ? GNUTLS_SERVER : GNUTLS_CLIENT);
    if (g < 0) {
        free(ts);
        return tls_err(g, "session");
    }
    ts->s = s;
    ts->fd = fd;
    gnutls_priority_set(s, t->priority);
    if (t->x509) {
        gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, t->x509);
        if (t->server) {
            gnutls_certificate_server_set_request(s, t->verify_peer ? GNUTLS_CERT_REQUIRE
                                                                    : GNUTLS_CERT_IGNORE);
        } else {
            /* Verify the server against our CA (and its name when given). */
            gnutls_session_set_verify_cert(s, t->hostname, 0);
            if (t->hostname) {
                gnutls_server_name_set(s, GNUTLS_NAME_DNS, t->hostname, strlen(t->hostname));
            }
        }
    } else {
        gnutls_credentials_set(s, GNUTLS_CRD_PSK,
                               t->server ? (void *)t->psk_server : (void *)t->psk_client);
    }
    gnutls_transport_set_int(s, fd);
    if (deadline_ns) {
        uint64_t now = clock_ns();
        unsigned ms = deadline_ns > now ? (unsigned)((deadline_ns - now) / 1000000) + 1 : 1;
        gnutls_handshake_set_timeout(s, ms);
    }
    do {
        g = gnutls_handshake(s);
    } while (g < 0 && !gnutls_error_is_fatal(g));
    if (g < 0) {
        r = tls_err(g, "handshake failed");
    }
    if (r == 0 && t->server && t->x509 && t->verify_peer) {
        unsigned status = 0;
        g = gnutls_certificate_verify_peers2(s, &status);
        if (g < 0 || status) {
            r = err_setx(EACCES, "TLS: the client certificate is not signed by our CA or is "
                                 "invalid");
        }
    }
    if (r == 0 && t->server) {
        peer_identity(t, s, peer, peer_len);
        if (!authorized(t, peer)) {
            r = err_setx(EACCES, "TLS: client '%s' is not in the --tls-authz list", peer);
        }
    }
    if (r < 0) {
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
        if (n >= 0) {
            return n;
        }
        if (n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN) {
            continue;
        }
        if (n == GNUTLS_E_PREMATURE_TERMINATION) {
            return 0; /* peer went away without a goodbye: end of stream */
        }
        return -ECONNRESET;
    }
}

/* One gnutls_record_send until all of it is sent. */
static int tls_send_all(struct nbd_tls_session *s, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = gnutls_record_send(s->s, p, len);
        if (n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN) {
            continue;
        }
        if (n < 0) {
            return -EPIPE;
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

    for (int i = 0; i < iovcnt; i++) {
        const uint8_t *p = iov[i].iov_base;
        size_t left = iov[i].iov_len;
        while (left > 0) {
            if (used == 0 && left >= sizeof stage) {
                if (tls_send_all(s, p, left) < 0) {
                    return -EPIPE;
                }
                break;
            }
            size_t n = MIN(left, sizeof stage - used);
            memcpy(stage + used, p, n);
            used += n;
            p += n;
            left -= n;
            if (used == sizeof stage) {
                if (tls_send_all(s, stage, used) < 0) {
                    return -EPIPE;
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

#else /* !HAVE_GNUTLS */

bool nbd_tls_available(void)
{
    return false;
}

int nbd_tls_new(struct nbd_tls **out, const struct nbd_tls_config *c, bool server)
{
    (void)out;
    (void)c;
    (void)server;
    return err_setx(ENOTSUP, "this diskimg was built without TLS (GnuTLS)");
}

void nbd_tls_free(struct nbd_tls *t)
{
    (void)t;
}

int nbd_tls_handshake(struct nbd_tls *t, int fd, uint64_t deadline_ns, struct nbd_tls_session **out,
                      char *peer, size_t peer_len)
{
    (void)t, (void)fd, (void)deadline_ns, (void)out, (void)peer, (void)peer_len;
    return -ENOTSUP;
}

ssize_t nbd_tls_recv(struct nbd_tls_session *s, void *buf, size_t len)
{
    (void)s, (void)buf, (void)len;
    return -ENOTSUP;
}

int nbd_tls_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt)
{
    (void)s, (void)iov, (void)iovcnt;
    return -ENOTSUP;
}

bool nbd_tls_pending(struct nbd_tls_session *s)
{
    (void)s;
    return false;
}

void nbd_tls_bye(struct nbd_tls_session *s)
{
    (void)s;
}

void nbd_tls_session_close(struct nbd_tls_session *s)
{
    (void)s;
}
#endif
