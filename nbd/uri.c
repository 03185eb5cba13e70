/* nbd/uri.c: see uri.h. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "uri.h"

static const struct {
    const char *scheme;
    bool tls, unix_socket;
} schemes[] = {
    {"nbd://", false, false},
    {"nbds://", true, false},
    {"nbd+unix://", false, true},
    {"nbds+unix://", true, true},
};

/* qemu's older spelling: nbd:unix:PATH or nbd:HOST[:PORT], then
 * optionally :exportname=NAME. */
static bool nbd_legacy_is(const char *s)
{
    return strncmp(s, "nbd:", 4) == 0 && strncmp(s, "nbd://", 6) != 0;
}

bool nbd_uri_is(const char *s)
{
    if (nbd_legacy_is(s)) {
        return true;
    }
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        if (strncmp(s, schemes[i].scheme, strlen(schemes[i].scheme)) == 0) {
            return true;
        }
    }
    return false;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decode [s, s+len) into a new string; NULL on a bad escape. */
static char *decode(const char *s, size_t len)
{
    char *out = malloc(len + 1), *o = out;

    if (!out) {
        return NULL;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            int hi = i + 2 < len ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < len ? hexval(s[i + 2]) : -1;
            /* %00 would cut the string short: refuse it */
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(out);
                return NULL;
            }
            *o++ = (char)(hi * 16 + lo);
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

void nbd_uri_free(struct nbd_uri *u)
{
    free(u->host);
    free(u->port);
    free(u->socket);
    free(u->export_name);
    free(u->tls_certificates);
    free(u->tls_psk_file);
    free(u->tls_username);
    free(u->tls_hostname);
    memset(u, 0, sizeof *u);
}

/* The value of key in a query string "a=b&c=d", decoded; NULL if absent. */
static int query_get(const char *q, const char *key, char **out)
{
    size_t kl = strlen(key);

    *out = NULL;
    while (q && *q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        if (len > kl && strncmp(q, key, kl) == 0 && q[kl] == '=') {
            *out = decode(q + kl + 1, len - kl - 1);
            return *out ? 0 : -EINVAL;
        }
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

/* host[:port] or [v6addr][:port] from [a, a_end) into u (port 10809 by
 * default); the URI and the legacy form share it.  s is for messages. */
static int parse_host_port(const char *s, const char *a, const char *a_end, struct nbd_uri *u)
{
    const char *colon = NULL;

    if (a < a_end && *a == '[') {
        const char *close = memchr(a, ']', (size_t)(a_end - a));
        if (!close) {
            return err_setx(EINVAL, "%s: unterminated [IPv6 address]", s);
        }
        u->host = decode(a + 1, (size_t)(close - a - 1));
        colon = close + 1 < a_end && close[1] == ':' ? close + 1 : NULL;
        if (close + 1 < a_end && !colon) {
            return err_setx(EINVAL, "%s: junk after the IPv6 address", s);
        }
    } else {
        colon = memchr(a, ':', (size_t)(a_end - a));
        u->host = decode(a, colon ? (size_t)(colon - a) : (size_t)(a_end - a));
    }
    if (!u->host || !u->host[0]) {
        return err_setx(EINVAL, "%s: the host is missing", s);
    }
    if (colon) {
        u->port = decode(colon + 1, (size_t)(a_end - colon - 1));
        char *end = NULL;
        long port = u->port ? strtol(u->port, &end, 10) : 0;
        if (!u->port || !*u->port || *end || port < 1 || port > 65535) {
            return err_setx(EINVAL, "%s: invalid port", s);
        }
    } else {
        u->port = strdup("10809");
    }
    return u->port ? 0 : -ENOMEM;
}

static int parse_legacy(const char *s, struct nbd_uri *u)
{
    const char *spec = s + 4;
    const char *exp = strstr(spec, ":exportname=");
    const char *spec_end = exp ? exp : spec + strlen(spec);
    int r;

    u->export_name = strdup(exp ? exp + strlen(":exportname=") : "");
    if (!u->export_name) {
        return -ENOMEM;
    }
    if (strncmp(spec, "unix:", 5) == 0) {
        u->unix_socket = true;
        u->socket = strndup(spec + 5, (size_t)(spec_end - spec - 5));
        if (!u->socket) {
            return -ENOMEM;
        }
        if (!u->socket[0]) {
            return err_setx(EINVAL, "%s: the socket path is missing (nbd:unix:PATH)", s);
        }
        return 0;
    }
    r = parse_host_port(s, spec, spec_end, u);
    if (r < 0 && r != -ENOMEM) {
        return err_setx(EINVAL,
                        "%s: expected nbd:unix:PATH or nbd:HOST[:PORT], optionally followed by "
                        ":exportname=NAME",
                        s);
    }
    return r;
}

int nbd_uri_parse(const char *s, struct nbd_uri *u)
{
    const char *p = NULL, *path, *query;
    size_t i;
    int r;

    memset(u, 0, sizeof *u);
    if (nbd_legacy_is(s)) {
        r = parse_legacy(s, u);
        if (r < 0) {
            nbd_uri_free(u);
        }
        return r;
    }
    for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        if (strncmp(s, schemes[i].scheme, strlen(schemes[i].scheme)) == 0) {
            p = s + strlen(schemes[i].scheme);
            u->tls = schemes[i].tls;
            u->unix_socket = schemes[i].unix_socket;
            break;
        }
    }
    if (!p) {
        return err_setx(EINVAL,
                        "%s: not an NBD URI (nbd://, nbd+unix://, nbds://, "
                        "nbds+unix://)",
                        s);
    }
    path = p + strcspn(p, "/?");
    query = strchr(path, '?');
    size_t authority_len = (size_t)(path - p);
    size_t path_len = query ? (size_t)(query - path) : strlen(path);

    /* Path: "/EXPORT" (one leading slash, the rest is the name). */
    if (path_len && path[0] == '/') {
        u->export_name = decode(path + 1, path_len - 1);
    } else {
        u->export_name = strdup("");
    }
    if (!u->export_name) {
        nbd_uri_free(u);
        return err_setx(EINVAL, "%s: bad escape in the export name", s);
    }
    /* Userinfo ("alice@"): the TLS PSK username, as libnbd reads it. */
    const char *at = memrchr(p, '@', authority_len);
    if (at) {
        u->tls_username = decode(p, (size_t)(at - p));
        if (!u->tls_username) {
            nbd_uri_free(u);
            return err_setx(EINVAL, "%s: bad escape in the user name", s);
        }
        authority_len -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    const char *q = query ? query + 1 : NULL;
    char *query_user = NULL;
    if (query_get(q, "tls-username", &query_user) < 0) {
        nbd_uri_free(u);
        return err_setx(EINVAL, "%s: bad escape in a query parameter", s);
    }
    if (query_user) {
        free(u->tls_username); /* the query parameter wins */
        u->tls_username = query_user;
    }
    if (query_get(q, "tls-certificates", &u->tls_certificates) < 0 ||
        query_get(q, "tls-psk-file", &u->tls_psk_file) < 0 ||
        query_get(q, "tls-hostname", &u->tls_hostname) < 0) {
        nbd_uri_free(u);
        return err_setx(EINVAL, "%s: bad escape in a query parameter", s);
    }
    if (u->unix_socket) {
        if (authority_len) {
            nbd_uri_free(u);
            return err_setx(EINVAL, "%s: a unix URI has no host (nbd+unix:///EXPORT?socket=PATH)",
                            s);
        }
        if (query_get(query ? query + 1 : NULL, "socket", &u->socket) < 0 || !u->socket ||
            !u->socket[0]) {
            nbd_uri_free(u);
            return err_setx(EINVAL, "%s: the socket=PATH parameter is missing", s);
        }
        return 0;
    }
    /* Authority: host, [v6addr], optional :port */
    r = parse_host_port(s, p, path, u);
    if (r < 0) {
        nbd_uri_free(u);
    }
    return r;
}

char *nbd_uri_qemu_name(const struct nbd_uri *u)
{
    const char *exp = u->export_name ? u->export_name : "";
    char *out = NULL;
    int n;

    if (u->tls) {
        return NULL;
    }
    /* qemu 7.2's rules: an empty export name is no export (no path at
     * all), and a host goes in as it is, an IPv6 one without brackets
     * (nbd://::1:10809). */
    if (u->unix_socket) {
        n = *exp ? asprintf(&out, "nbd+unix:///%s?socket=%s", exp, u->socket)
                 : asprintf(&out, "nbd+unix://?socket=%s", u->socket);
    } else {
        n = asprintf(&out, "nbd://%s:%s%s%s", u->host, u->port, *exp ? "/" : "", exp);
    }
    return n < 0 ? NULL : out;
}
