/* nbd/client-handshake.c: connecting to an NBD server and negotiating.
 *
 * Fixed newstyle with NBD_OPT_GO (asking for the block size constraints),
 * structured replies and base:allocation when the server has them, and
 * NBD_OPT_EXPORT_NAME for servers too old for GO.  Every wait is bounded
 * by a deadline, and every reply is validated before it is used. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"
#include "names.h"
#include "protocol.h"
#include "socket-buffer.h"
#include "tls.h"

#define POLL_SLICE_MS 200 /* how soon an interrupt is noticed */
#define MAX_OPTION_REPLY (64u << 10)
#define NBD_OLDSTYLE_MAGIC 0x00420281861253ULL

struct hs {
    int fd;
    struct nbd_tls *tls_creds;   /* for nbds:// */
    struct nbd_tls_session *tls; /* after STARTTLS */
    uint64_t deadline;
    const char *where; /* for messages */
    bool options;      /* in the option haggling (fixed newstyle) */
    bool refused;      /* the server refused an option: say goodbye */
    /* Until the first byte arrives: how long to wait for the greeting,
     * and how many connections this process already has to the server. */
    uint64_t greeting_deadline;
    unsigned ours;
    unsigned timeout_s;
    bool greeted;
};

/* No greeting: the server left us in its listen queue, which is what a
 * server does that allows fewer clients than it has (qemu-nbd and diskimg
 * serve take one unless started with -e). */
static int hs_no_greeting(struct hs *h)
{
    if (h->ours) {
        return err_setx(ETIMEDOUT,
                        "%s: the NBD server sent no greeting: it takes no more clients, and "
                        "this command already holds %u connection(s) to it (qemu-nbd and "
                        "diskimg serve take one client unless started with -e N / "
                        "--shared=N; give the server a higher -e to open several images or "
                        "exports of it at once)",
                        h->where, h->ours);
    }
    return err_setx(ETIMEDOUT,
                    "%s: the NBD server accepted the connection but sent no greeting within "
                    "%u s: it probably serves as many clients as it allows (qemu-nbd and "
                    "diskimg serve take one unless started with -e N / --shared=N)",
                    h->where, h->timeout_s);
}

static int hs_recv(struct hs *h, void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len > 0) {
        uint64_t now = clock_ns();
        uint64_t deadline = h->greeted ? h->deadline : MIN(h->deadline, h->greeting_deadline);
        if (now >= deadline) {
            if (!h->greeted) {
                return hs_no_greeting(h);
            }
            return err_setx(ETIMEDOUT, "%s: the NBD server did not answer the handshake", h->where);
        }
        if (diskimg_interrupted) {
            return err_setx(EINTR, "%s: interrupted", h->where);
        }
        struct pollfd pfd = {.fd = h->fd, .events = POLLIN};
        int wait_ms = (int)MIN((deadline - now) / 1000000 + 1, (uint64_t)POLL_SLICE_MS);
        int r = h->tls && nbd_tls_pending(h->tls) ? 1 : poll(&pfd, 1, wait_ms);
        if (r < 0 && errno != EINTR) {
            return err_set(errno, "%s: poll", h->where);
        }
        if (r <= 0) {
            continue;
        }
        ssize_t n = h->tls ? nbd_tls_recv(h->tls, p, len) : recv(h->fd, p, len, 0);
        if (n == 0) {
            return err_setx(ECONNRESET,
                            "%s: the NBD server closed the connection during the "
                            "handshake",
                            h->where);
        }
        if (n < 0 && h->tls) {
            err_prefix("%s", h->where); /* the TLS layer said why */
            return (int)n;
        }
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return err_set(errno, "%s: receiving from the NBD server", h->where);
        }
        p += n;
        len -= (size_t)n;
        h->greeted = true;
    }
    return 0;
}

static int hs_send(struct hs *h, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    if (h->tls) {
        int r = nbd_tls_send(h->tls, &(struct iovec){(void *)buf, len}, 1);
        if (r < 0) {
            err_prefix("%s", h->where); /* the TLS layer said why */
        }
        return r;
    }
    while (len > 0) {
        ssize_t n = send(h->fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return err_set(errno, "%s: sending to the NBD server", h->where);
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int connect_unix(const char *path, int *fd)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};

    if (strlen(path) >= sizeof sun.sun_path) {
        return err_setx(ENAMETOOLONG, "socket path %s is too long", path);
    }
    strcpy(sun.sun_path, path);
    *fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0) {
        return err_set(errno, "socket");
    }
    if (connect(*fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        return err_set(e, "cannot connect to %s", path);
    }
    nbd_socket_fit_sndbuf(*fd); /* a whole large write in one call */
    return 0;
}

static int connect_tcp(const char *host, const char *port, int *fd)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res), e = ECONNREFUSED;

    if (gai != 0) {
        return err_setx(EHOSTUNREACH, "cannot resolve %s: %s", host, gai_strerror(gai));
    }
    *fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0) {
            e = errno;
            continue;
        }
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
            int one = 1;
            setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            *fd = s;
            break;
        }
        e = errno;
        close(s);
    }
    freeaddrinfo(res);
    return *fd >= 0 ? 0 : err_set(e, "cannot connect to %s port %s", host, port);
}

static int send_option(struct hs *h, uint32_t opt, const void *data, uint32_t len)
{
    struct nbd_option_header oh = {htobe64(NBD_IHAVEOPT), htobe32(opt), htobe32(len)};
    int r = hs_send(h, &oh, sizeof oh);

    return r == 0 && len ? hs_send(h, data, len) : r;
}

/* One option reply; *data (malloc'd, NUL-terminated) holds its payload. */
static int recv_reply(struct hs *h, uint32_t opt, uint32_t *type, uint8_t **data, uint32_t *len)
{
    struct nbd_option_reply rep;
    int r = hs_recv(h, &rep, sizeof rep);

    *data = NULL;
    *type = 0;
    *len = 0;
    if (r < 0) {
        return r;
    }
    if (be64toh(rep.magic) != NBD_REP_MAGIC || be32toh(rep.option) != opt) {
        return err_setx(EPROTO, "%s: invalid reply to %s from the NBD server", h->where,
                        nbd_opt_name(opt));
    }
    *type = be32toh(rep.reply);
    *len = be32toh(rep.replylen);
    if (*len > MAX_OPTION_REPLY) {
        return err_setx(EPROTO, "%s: %" PRIu32 "-byte reply to %s", h->where, *len,
                        nbd_opt_name(opt));
    }
    *data = malloc((size_t)*len + 1);
    if (!*data) {
        return err_set(ENOMEM, "NBD option reply");
    }
    (*data)[*len] = '\0';
    r = hs_recv(h, *data, *len);
    if (r < 0) {
        free(*data);
        *data = NULL;
    }
    return r;
}

/* An error reply as a message: the server's text, or the error's name. */
static int option_error(struct hs *h, const struct nbd_uri *u, uint32_t opt, uint32_t type,
                        const uint8_t *data, uint32_t len)
{
    /* The server's text is printed escaped: it may hold control characters. */
    CLEANUP_FREE char *text = str_escape(len ? (const char *)data : nbd_rep_name(type));

    if (!text) {
        return err_set(ENOMEM, "%s", h->where);
    }

    h->refused = true;
    switch (type) {
    case NBD_REP_ERR_UNKNOWN:
        if (len && strstr(text, u->export_name) && u->export_name[0]) {
            return err_setx(ENOENT, "%s: %s", h->where, text); /* it names the export already */
        }
        return err_setx(ENOENT, "%s: export '%s' not found (%s)", h->where, u->export_name, text);
    case NBD_REP_ERR_TLS_REQD:
        return err_setx(EACCES, "%s: the NBD server requires TLS (use an nbds:// URI)", h->where);
    case NBD_REP_ERR_POLICY:
        return err_setx(EACCES, "%s: %s refused by the NBD server: %s", h->where, nbd_opt_name(opt),
                        text);
    default:
        return err_setx(EPROTO, "%s: %s failed: %s", h->where, nbd_opt_name(opt), text);
    }
}

/* NBD_OPT_GO.  Returns 1 if the server does not know GO. */
static int negotiate_go(struct hs *h, const struct nbd_uri *u, struct nbd_client_export *exp)
{
    uint32_t namelen = (uint32_t)strlen(u->export_name);
    CLEANUP_FREE uint8_t *req = malloc(4 + namelen + 4);
    uint32_t be32;
    uint16_t be16;
    bool have_export = false;
    int r;

    if (!req) {
        return err_set(ENOMEM, "NBD_OPT_GO");
    }
    be32 = htobe32(namelen);
    memcpy(req, &be32, 4);
    memcpy(req + 4, u->export_name, namelen);
    be16 = htobe16(1);
    memcpy(req + 4 + namelen, &be16, 2);
    be16 = htobe16(NBD_INFO_BLOCK_SIZE);
    memcpy(req + 6 + namelen, &be16, 2);
    r = send_option(h, NBD_OPT_GO, req, 8 + namelen);
    if (r < 0) {
        return r;
    }
    for (;;) {
        uint32_t type, len;
        CLEANUP_FREE uint8_t *d = NULL;

        r = recv_reply(h, NBD_OPT_GO, &type, &d, &len);
        if (r < 0) {
            return r;
        }
        if (type == NBD_REP_ACK) {
            if (!have_export) {
                return err_setx(EPROTO, "%s: the NBD server sent no export size", h->where);
            }
            return 0;
        }
        if (type == NBD_REP_ERR_UNSUP) {
            return 1;
        }
        if (type & NBD_REP_FLAG_ERROR) {
            return option_error(h, u, NBD_OPT_GO, type, d, len);
        }
        if (type != NBD_REP_INFO || len < 2) {
            continue; /* ignore what we did not ask for */
        }
        uint16_t info;
        memcpy(&info, d, 2);
        info = be16toh(info);
        if (info == NBD_INFO_EXPORT && len == 12) {
            uint64_t size;
            memcpy(&size, d + 2, 8);
            memcpy(&be16, d + 10, 2);
            exp->size = be64toh(size);
            exp->eflags = be16toh(be16);
            have_export = true;
        } else if (info == NBD_INFO_BLOCK_SIZE && len == 14) {
            uint32_t v[3];
            memcpy(v, d + 2, 12);
            exp->min_block = be32toh(v[0]);
            exp->pref_block = be32toh(v[1]);
            exp->max_block = be32toh(v[2]);
        }
    }
}

static int negotiate_export_name(struct hs *h, const struct nbd_uri *u, bool no_zeroes,
                                 struct nbd_client_export *exp)
{
    struct nbd_export_name_reply rep;
    int r = send_option(h, NBD_OPT_EXPORT_NAME, u->export_name, (uint32_t)strlen(u->export_name));

    if (r == 0) {
        r = hs_recv(h, &rep, no_zeroes ? 10 : sizeof rep);
    }
    if (r == -ECONNRESET) {
        return err_setx(ENOENT, "%s: the NBD server refused export '%s'", h->where, u->export_name);
    }
    if (r == 0) {
        exp->size = be64toh(rep.exportsize);
        exp->eflags = be16toh(rep.eflags);
    }
    return r;
}

static int negotiate_structured(struct hs *h, struct nbd_client_conn *c, const struct nbd_uri *u)
{
    uint32_t type, len;
    uint8_t *d = NULL;
    int r = send_option(h, NBD_OPT_STRUCTURED_REPLY, NULL, 0);

    if (r == 0) {
        r = recv_reply(h, NBD_OPT_STRUCTURED_REPLY, &type, &d, &len);
    }
    free(d);
    if (r < 0 || type != NBD_REP_ACK) {
        return r;
    }
    c->structured = true;

    /* base:allocation, for block status */
    static const char ctx[] = "base:allocation";
    uint32_t namelen = (uint32_t)strlen(u->export_name), be;
    size_t qlen = sizeof ctx - 1, total = 4 + namelen + 4 + 4 + qlen;
    CLEANUP_FREE uint8_t *req = malloc(total);
    if (!req) {
        return err_set(ENOMEM, "NBD_OPT_SET_META_CONTEXT");
    }
    be = htobe32(namelen);
    memcpy(req, &be, 4);
    memcpy(req + 4, u->export_name, namelen);
    be = htobe32(1);
    memcpy(req + 4 + namelen, &be, 4);
    be = htobe32((uint32_t)qlen);
    memcpy(req + 8 + namelen, &be, 4);
    memcpy(req + 12 + namelen, ctx, qlen);
    r = send_option(h, NBD_OPT_SET_META_CONTEXT, req, (uint32_t)total);
    while (r == 0) {
        r = recv_reply(h, NBD_OPT_SET_META_CONTEXT, &type, &d, &len);
        if (r == 0 && type == NBD_REP_META_CONTEXT && len == 4 + qlen &&
            memcmp(d + 4, ctx, qlen) == 0) {
            memcpy(&be, d, 4);
            c->base_alloc_id = be32toh(be); /* qemu-nbd uses id 0 */
            c->base_alloc = true;
        }
        free(d);
        d = NULL;
        if (r < 0 || type == NBD_REP_ACK || (type & NBD_REP_FLAG_ERROR)) {
            break; /* errors here only mean no block status */
        }
    }
    return r;
}

/* NBD_OPT_STARTTLS, then the TLS handshake on the same socket. */
static int negotiate_starttls(struct hs *h, bool fixed)
{
    uint32_t type, len;
    uint8_t *d = NULL;
    int r;

    if (!fixed) {
        return err_setx(EPROTO, "%s: the server is too old for TLS", h->where);
    }
    r = send_option(h, NBD_OPT_STARTTLS, NULL, 0);
    if (r == 0) {
        r = recv_reply(h, NBD_OPT_STARTTLS, &type, &d, &len);
    }
    if (r == 0 && type != NBD_REP_ACK) {
        CLEANUP_FREE char *why = len ? str_escape((char *)d) : NULL; /* the server's text */
        r = err_setx(EACCES, "%s: the NBD server does not offer TLS (%s%s%s)", h->where,
                     nbd_rep_name(type), why ? ": " : "", why ? why : "");
    }
    free(d);
    if (r == 0) {
        char peer[8];
        r = nbd_tls_handshake(h->tls_creds, h->fd, h->deadline, &h->tls, peer, sizeof peer);
        if (r < 0) {
            err_prefix("%s", h->where);
        }
    }
    return r;
}

static int handshake(struct hs *h, struct nbd_client_conn *c, const struct nbd_uri *u,
                     struct nbd_client_export *exp)
{
    uint64_t magic[2];
    uint16_t gflags;
    uint32_t cflags;
    int r = hs_recv(h, magic, sizeof magic);

    if (r < 0) {
        return r;
    }
    if (be64toh(magic[0]) != NBD_MAGIC) {
        return err_setx(EPROTO, "%s: not an NBD server", h->where);
    }
    if (be64toh(magic[1]) == NBD_OLDSTYLE_MAGIC) {
        return err_setx(EPROTO,
                        "%s: the server speaks the oldstyle NBD protocol, which is not "
                        "supported",
                        h->where);
    }
    if (be64toh(magic[1]) != NBD_IHAVEOPT) {
        return err_setx(EPROTO, "%s: unknown NBD handshake", h->where);
    }
    r = hs_recv(h, &gflags, 2);
    if (r < 0) {
        return r;
    }
    gflags = be16toh(gflags);
    bool fixed = gflags & NBD_FLAG_FIXED_NEWSTYLE, no_zeroes = gflags & NBD_FLAG_NO_ZEROES;
    cflags =
        htobe32((fixed ? NBD_FLAG_C_FIXED_NEWSTYLE : 0) | (no_zeroes ? NBD_FLAG_C_NO_ZEROES : 0));
    r = hs_send(h, &cflags, 4);
    if (r < 0) {
        return r;
    }
    if (u->tls) {
        r = negotiate_starttls(h, fixed);
        if (r < 0) {
            return r;
        }
        c->tls = h->tls;
    }
    if (!fixed) {
        return negotiate_export_name(h, u, no_zeroes, exp);
    }
    h->options = true;
    r = negotiate_structured(h, c, u);
    if (r == 0) {
        r = negotiate_go(h, u, exp);
    }
    if (r == 1) {
        /* A server without GO.  Structured replies, once acked, stay on
         * in transmission whatever ends the handshake; block status we
         * leave alone, since no context was confirmed for this export. */
        c->base_alloc = false;
        r = negotiate_export_name(h, u, no_zeroes, exp);
    }
    return r;
}

int nbd_client_connect(const struct nbd_uri *u, struct nbd_tls *tls, unsigned timeout_s,
                       struct nbd_client_conn **out, struct nbd_client_export *exp)
{
    struct nbd_client_conn *c = nbd_client_conn_new();
    char where[300];
    int r;

    if (!c) {
        return err_set(ENOMEM, "NBD connection");
    }
    if (u->unix_socket) {
        snprintf(where, sizeof where, "nbd+unix socket %s", u->socket);
        r = connect_unix(u->socket, &c->fd);
    } else {
        snprintf(where, sizeof where, "nbd://%s:%s", u->host, u->port);
        r = connect_tcp(u->host, u->port, &c->fd);
    }
    snprintf(c->where, sizeof c->where, "%s", where);
    if (r == 0) {
        struct hs h = {.fd = c->fd,
                       .tls_creds = tls,
                       .deadline = clock_ns() + timeout_s * 1000000000ULL,
                       .where = where,
                       .ours = nbd_client_peer_count(where),
                       .timeout_s = timeout_s};
        /* Waiting behind our own connection would never end. */
        h.greeting_deadline =
            h.ours ? clock_ns() + NBD_CLIENT_BUSY_TIMEOUT_S * 1000000000ULL : h.deadline;
        if (u->tls && !tls) {
            r = err_setx(EINVAL,
                         "%s: nbds:// needs TLS credentials (--tls-creds=DIR, "
                         "--tls-psk=FILE, or tls-certificates= / tls-psk-file= in the URI)",
                         where);
        }
        memset(exp, 0, sizeof *exp);
        if (r == 0) {
            r = handshake(&h, c, u, exp);
        }
        if (r < 0 && h.options && h.refused) {
            /* A graceful goodbye after a refusal, as the spec asks; the
             * refusal stays the error reported. */
            char why[512];
            snprintf(why, sizeof why, "%s", err_msg());
            (void)send_option(&h, NBD_OPT_ABORT, NULL, 0);
            r = err_setx(-r, "%s", why);
        }
        if (r < 0 && h.tls && !c->tls) {
            nbd_tls_session_close(h.tls);
        }
    }
    if (r < 0) {
        nbd_client_close(c);
        return r;
    }
    nbd_tls_set_deadline(c->tls, 0); /* the handshake is over */
    nbd_client_peer_add(c);
    *out = c;
    return 0;
}
