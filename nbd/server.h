/* nbd/server.h: the NBD server as seen by cmd/serve.c.  The server knows
 * images only through block/block.h; it knows nothing of formats. */
#ifndef DISKIMG_NBD_SERVER_H
#define DISKIMG_NBD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct blk_image;
struct nbd_server;
struct nbd_tls;

/* TLS policy, as nbdkit spells it: off (no STARTTLS), on (clients may
 * upgrade), require (nothing but STARTTLS and ABORT before TLS). */
enum nbd_tls_mode { NBD_TLS_OFF, NBD_TLS_ON, NBD_TLS_REQUIRE };

/* Caps that hold whatever -e says (0 in the config: these defaults). */
#define NBD_DEFAULT_CONNECTION_CAP 1024
#define NBD_DEFAULT_THREAD_CAP 4096
/* After SIGTERM/SIGINT, replies wait this long for their clients to take
 * them; then those connections are dropped. */
#define NBD_SHUTDOWN_GRACE_S 5

struct nbd_server_config {
    unsigned workers_per_conn;  /* requests in flight per connection (default 16) */
    unsigned max_connections;   /* -e/--shared: 0 = unlimited (default 1, as qemu-nbd) */
    unsigned connection_cap;    /* --connection-cap: connections at once, in any case */
    unsigned thread_cap;        /* --thread-cap: threads serving clients, in all */
    bool persistent;            /* -t: keep serving after the last client leaves */
    unsigned handshake_limit_s; /* 0 = no limit (default 10) */
    unsigned idle_timeout_s;    /* 0 = never: close connections idle this long */
    const char *stats_file;     /* --stats: JSON written on SIGUSR1 and at exit */
    struct nbd_tls *tls;        /* credentials, NULL without TLS (not owned) */
    enum nbd_tls_mode tls_mode;
};

int nbd_server_new(struct nbd_server **out, const struct nbd_server_config *cfg);
#define NBD_MAX_BITMAPS 8 /* dirty bitmaps exported per export */

struct blk_bitmap;

/* The server does not own the image; it must outlive the server.  It
 * takes the n_bitmaps bitmaps (each offered as qemu:dirty-bitmap:NAME)
 * on success. */
int nbd_server_add_export(struct nbd_server *srv, const char *name, const char *description,
                          struct blk_image *img, struct blk_bitmap **bitmaps, unsigned n_bitmaps);
/* Listen on a unix socket (created; removed again at exit). */
int nbd_server_listen_unix(struct nbd_server *srv, const char *path);
/* A socket that already listens (systemd socket activation). */
int nbd_server_add_listen_fd(struct nbd_server *srv, int fd);
/* Listen on every address host (NULL = all) resolves to. */
int nbd_server_listen_tcp(struct nbd_server *srv, const char *host, const char *port);
/* Serve until asked to stop, or until the last client leaves when not
 * persistent.  In-flight requests finish before it returns. */
int nbd_server_run(struct nbd_server *srv);
/* Async-signal-safe requests to the running server. */
void nbd_server_signal_shutdown(struct nbd_server *srv);
void nbd_server_signal_stats(struct nbd_server *srv);
/* Human summary on stderr (syslog once daemonised), and the JSON file
 * when configured. */
void nbd_server_report_stats(struct nbd_server *srv);
void nbd_server_free(struct nbd_server *srv);

#endif
