/* nbd/tls.c: TLS credentials, loaded and checked once at start (see
 * tls.h): the X.509 directory (CA, optional CRL, our certificate and
 * key), the PSK file, the --tls-authz list, the priority string.  The
 * sessions that use them are in tls-session.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/log.h"
#include "tls.h"

#ifdef HAVE_GNUTLS
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "tls-internal.h"

/* TLS 1.2 and newer only (the NBD spec requires 1.2 and advises against
 * anything older). */
#define DEFAULT_PRIORITY "NORMAL:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1"
#define DEFAULT_PRIORITY_PSK                                                                       \
    "NORMAL:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1:+ECDHE-PSK:+DHE-PSK:+PSK"

bool nbd_tls_available(void)
{
    return true;
}

static int tls_err(int gerr, const char *what)
{
    return err_setx(EPROTO, "TLS: %s: %s", what, gnutls_strerror(gerr));
}

/* A credential file must exist and be readable; a private key (or a PSK
 * file, what is private in it) must not be open to anyone but its owner.
 * The message says how to fix it. */
static int check_file(const char *path, const char *secret)
{
    struct stat st;

    if (stat(path, &st) < 0) {
        return err_set(errno, "TLS: %s", path);
    }
    if (access(path, R_OK) < 0) {
        return err_set(errno, "TLS: %s", path);
    }
    if (secret && (st.st_mode & 077)) {
        const char *how = st.st_mode & 044 ? "readable" : st.st_mode & 022 ? "writable" : "usable";
        return err_setx(EACCES,
                        "TLS: %s %s is %s by group or others (mode %03o); make it private to "
                        "its owner: chmod 600 '%s'",
                        secret, path, how, (unsigned)(st.st_mode & 0777), path);
    }
    return 0;
}

/* The certificates in a PEM file; the caller frees them. */
static int load_crts(const char *path, gnutls_x509_crt_t **crts, unsigned *n)
{
    gnutls_datum_t data = {0};
    int r = gnutls_load_file(path, &data);

    if (r < 0) {
        return tls_err(r, path);
    }
    r = gnutls_x509_crt_list_import2(crts, n, &data, GNUTLS_X509_FMT_PEM, 0);
    gnutls_free(data.data);
    return r < 0 ? tls_err(r, path) : 0;
}

static void free_crts(gnutls_x509_crt_t *crts, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        gnutls_x509_crt_deinit(crts[i]);
    }
    gnutls_free(crts);
}

static int check_cert_dates(const char *path)
{
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0;
    int r = load_crts(path, &crts, &n);
    time_t now = time(NULL);

    for (unsigned i = 0; r == 0 && i < n; i++) {
        if (gnutls_x509_crt_get_expiration_time(crts[i]) < now) {
            r = err_setx(EKEYEXPIRED, "TLS: certificate %s has expired", path);
        } else if (gnutls_x509_crt_get_activation_time(crts[i]) > now) {
            r = err_setx(EKEYEXPIRED, "TLS: certificate %s is not valid yet", path);
        }
    }
    free_crts(crts, n);
    return r;
}

/* A revocation list must come from our CA: GnuTLS would not apply one
 * from another CA, and the certificates it lists would get in.  One that
 * is out of date (or dated in the future: a clock off) still revokes what
 * it lists, as GnuTLS uses it, so it is only worth a warning. */
static int check_crl(const char *crl_path, const char *ca_path)
{
    gnutls_x509_crt_t *cas = NULL;
    gnutls_x509_crl_t *crls = NULL;
    unsigned n_ca = 0, n_crl = 0;
    gnutls_datum_t data = {0};
    time_t now = time(NULL);
    int r = load_crts(ca_path, &cas, &n_ca);

    if (r == 0 && (r = gnutls_load_file(crl_path, &data)) < 0) {
        r = tls_err(r, crl_path);
    }
    if (r == 0) {
        r = gnutls_x509_crl_list_import2(&crls, &n_crl, &data, GNUTLS_X509_FMT_PEM, 0);
        r = r < 0 ? tls_err(r, crl_path) : 0;
    }
    if (r == 0 && n_crl == 0) {
        r = err_setx(EINVAL, "TLS: %s holds no revocation list", crl_path);
    }
    for (unsigned i = 0; r == 0 && i < n_crl; i++) {
        unsigned st = 0;
        time_t next = gnutls_x509_crl_get_next_update(crls[i]);
        if (gnutls_x509_crl_get_this_update(crls[i]) > now) {
            log_warn("TLS: revocation list %s is dated in the future (is the clock right?); "
                     "the certificates it lists are refused",
                     crl_path);
        } else if (next != (time_t)-1 && next < now) {
            log_warn("TLS: revocation list %s is out of date (its next update was due); the "
                     "certificates it lists are refused, but issue a new one with certtool "
                     "--generate-crl",
                     crl_path);
        }
        int g = gnutls_x509_crl_verify(crls[i], cas, n_ca, 0, &st);
        st &= ~(unsigned)(GNUTLS_CERT_INVALID | GNUTLS_CERT_EXPIRED | GNUTLS_CERT_NOT_ACTIVATED |
                          GNUTLS_CERT_REVOCATION_DATA_SUPERSEDED |
                          GNUTLS_CERT_REVOCATION_DATA_ISSUED_IN_FUTURE); /* dates: above */
        if (g < 0 || (st & (GNUTLS_CERT_SIGNER_NOT_FOUND | GNUTLS_CERT_SIGNATURE_FAILURE))) {
            r = err_setx(EINVAL, "TLS: revocation list %s is not signed by the CA in %s", crl_path,
                         ca_path);
        } else if (st & GNUTLS_CERT_SIGNER_CONSTRAINTS_FAILURE) {
            r = err_setx(EINVAL,
                         "TLS: revocation list %s: the CA certificate %s does not allow signing "
                         "revocation lists (certtool template: crl_signing_key)",
                         crl_path, ca_path);
        } else if (st) {
            gnutls_datum_t out = {0};
            gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &out, 0);
            r = err_setx(EINVAL, "TLS: revocation list %s is not valid: %s", crl_path,
                         out.data ? (char *)out.data : "?");
            gnutls_free(out.data);
        }
    }
    for (unsigned i = 0; i < n_crl; i++) {
        gnutls_x509_crl_deinit(crls[i]);
    }
    gnutls_free(crls);
    gnutls_free(data.data);
    free_crts(cas, n_ca);
    return r;
}

static int load_crl(struct nbd_tls *t, const char *crl, const char *ca)
{
    int r;

    if (access(crl, F_OK) < 0) {
        return 0; /* optional, as for qemu */
    }
    if ((r = check_file(crl, NULL)) < 0 || (r = check_crl(crl, ca)) < 0) {
        return r;
    }
    r = gnutls_certificate_set_x509_crl_file(t->x509, crl, GNUTLS_X509_FMT_PEM);
    if (r < 0) {
        return tls_err(r, crl);
    }
    t->have_crl = true;
    return 0;
}

/* qemu's tls-creds-x509 layout: ca-cert.pem, ca-crl.pem (optional),
 * server-cert.pem and server-key.pem, or client-cert.pem and
 * client-key.pem (optional on a client). */
static int load_x509(struct nbd_tls *t, const char *dir)
{
    char ca[4096], crl[4096], cert[4096], key[4096];
    const char *role = t->server ? "server" : "client";
    int r;

    snprintf(ca, sizeof ca, "%s/ca-cert.pem", dir);
    snprintf(crl, sizeof crl, "%s/ca-crl.pem", dir);
    snprintf(cert, sizeof cert, "%s/%s-cert.pem", dir, role);
    snprintf(key, sizeof key, "%s/%s-key.pem", dir, role);
    t->dir = strdup(dir);
    for (size_t n = t->dir ? strlen(t->dir) : 0; n > 1 && t->dir[n - 1] == '/'; n--) {
        t->dir[n - 1] = '\0'; /* "pki/" reads "pki/client-cert.pem" in messages */
    }
    r = gnutls_certificate_allocate_credentials(&t->x509);
    if (r < 0) {
        return tls_err(r, "credentials");
    }
    if ((r = check_file(ca, NULL)) < 0 || (r = check_cert_dates(ca)) < 0) {
        return r;
    }
    r = gnutls_certificate_set_x509_trust_file(t->x509, ca, GNUTLS_X509_FMT_PEM);
    if (r < 0) {
        return tls_err(r, ca);
    }
    if ((r = load_crl(t, crl, ca)) < 0) {
        return r;
    }
    /* A client certificate is optional; a server certificate is not. */
    t->have_cert = access(cert, F_OK) == 0;
    if (!t->server && !t->have_cert) {
        return 0;
    }
    if ((r = check_file(cert, NULL)) < 0 || (r = check_file(key, "private key")) < 0 ||
        (r = check_cert_dates(cert)) < 0) {
        return r;
    }
    r = gnutls_certificate_set_x509_key_file(t->x509, cert, key, GNUTLS_X509_FMT_PEM);
    return r < 0 ? tls_err(r, cert) : 0;
}

/* Every identity and key of a psktool file ("identity:hexkey" lines). */
static int read_psk_file(struct nbd_tls *t, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    unsigned lineno = 0;
    int r = 0;

    if (!f) {
        return err_set(errno, "TLS: %s", path);
    }
    while (r == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        char *colon = strchr(line, ':');
        if (!colon) {
            continue;
        }
        *colon = '\0';
        if (t->n_keys % 16 == 0) {
            struct nbd_tls_psk *k = realloc(t->keys, (t->n_keys + 16) * sizeof *k);
            if (!k) {
                r = err_set(ENOMEM, "TLS: %s", path);
                break;
            }
            t->keys = k;
        }
        struct nbd_tls_psk *k = &t->keys[t->n_keys];
        gnutls_datum_t hex = {(unsigned char *)colon + 1, (unsigned)strlen(colon + 1)};
        int g = gnutls_hex_decode2(&hex, &k->key);
        if (g < 0) {
            r = err_setx(EINVAL, "TLS: %s line %u: the key is not hexadecimal (%s)", path, lineno,
                         gnutls_strerror(g));
        } else if (!(k->id = strdup(line))) {
            gnutls_free(k->key.data);
            r = err_set(ENOMEM, "TLS: %s", path);
        } else {
            t->n_keys++;
        }
    }
    fclose(f);
    return r;
}

const struct nbd_tls_psk *nbd_tls_psk_find(const struct nbd_tls *t, const char *id)
{
    for (unsigned i = 0; i < t->n_keys; i++) {
        if (!id || strcmp(t->keys[i].id, id) == 0) {
            return &t->keys[i];
        }
    }
    return NULL;
}

/* GnuTLS asks a server for the key of the identity a client offers.  We
 * look it up ourselves, rather than let GnuTLS read the file, so that the
 * session knows whether the identity was unknown or its key wrong. */
static int psk_lookup(gnutls_session_t s, const char *id, gnutls_datum_t *key)
{
    struct nbd_tls_session *ts = gnutls_session_get_ptr(s);
    const struct nbd_tls_psk *k = nbd_tls_psk_find(ts->t, id);

    snprintf(ts->psk_offered, sizeof ts->psk_offered, "%s", id);
    ts->psk_unknown = !k;
    if (!k || !(key->data = gnutls_malloc(k->key.size))) {
        return -1;
    }
    memcpy(key->data, k->key.data, k->key.size);
    key->size = k->key.size;
    return 0;
}

/* A client uses the first identity of the file, or the one asked for. */
static int load_psk(struct nbd_tls *t, const struct nbd_tls_config *c)
{
    int r = check_file(c->psk_file, "PSK file");

    if (r < 0 || (r = read_psk_file(t, c->psk_file)) < 0) {
        return r;
    }
    t->psk = true;
    t->psk_file = strdup(c->psk_file);
    if (t->n_keys == 0) {
        return err_setx(EINVAL, "TLS: %s holds no identity:key line (psktool writes them)",
                        c->psk_file);
    }
    if (t->server) {
        int g = gnutls_psk_allocate_server_credentials(&t->psk_server);
        if (g < 0) {
            return tls_err(g, c->psk_file);
        }
        gnutls_psk_set_server_credentials_function(t->psk_server, psk_lookup);
        return 0;
    }
    const struct nbd_tls_psk *k = nbd_tls_psk_find(t, c->psk_identity);
    if (!k) {
        return err_setx(ENOENT, "TLS: no PSK identity '%s' in %s", c->psk_identity, c->psk_file);
    }
    t->psk_identity = strdup(k->id);
    int g = gnutls_psk_allocate_client_credentials(&t->psk_client);
    if (g == 0) {
        g = gnutls_psk_set_client_credentials(t->psk_client, k->id, &k->key, GNUTLS_PSK_KEY_RAW);
    }
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
    while (fgets(line, sizeof line, f) && t->n_authz < NBD_TLS_MAX_AUTHZ) {
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
    int r = 0;

    if (!t) {
        return err_set(ENOMEM, "TLS");
    }
    t->server = server;
    t->verify_peer = server && c->creds_dir && !c->no_verify_peer;
    if (c->hostname) {
        t->hostname = strdup(c->hostname);
    }
    if (!!c->creds_dir == !!c->psk_file) {
        r = err_setx(EINVAL,
                     "TLS needs either X.509 credentials (--tls-creds) or a PSK file "
                     "(--tls-psk), not %s",
                     c->creds_dir ? "both" : "neither");
    } else if (server && c->creds_dir && c->authz_file && !t->verify_peer) {
        /* The names --tls-authz lists come from client certificates. */
        r = err_setx(EINVAL, "--tls-authz with X.509 needs client certificates "
                             "(--tls-verify-peer=on)");
    }
    if (r == 0) {
        r = c->creds_dir ? load_x509(t, c->creds_dir) : load_psk(t, c);
    }
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
    free(t->dir);
    free(t->psk_file);
    free(t->psk_identity);
    for (unsigned i = 0; i < t->n_keys; i++) {
        free(t->keys[i].id);
        gnutls_free(t->keys[i].key.data);
    }
    free(t->keys);
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

bool nbd_tls_authorized(const struct nbd_tls *t, const char *who)
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

void nbd_tls_set_deadline(struct nbd_tls_session *s, uint64_t deadline_ns)
{
    (void)s, (void)deadline_ns;
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

int nbd_tls_try_send(struct nbd_tls_session *s, const struct iovec *iov, int iovcnt, bool *taken)
{
    (void)s, (void)iov, (void)iovcnt;
    *taken = false;
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
