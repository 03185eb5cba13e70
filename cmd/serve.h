/* cmd/serve.h: what serve.c and serve-opts.c share. */
#ifndef DISKIMG_CMD_SERVE_H
#define DISKIMG_CMD_SERVE_H

#include <stdbool.h>
#include <stdio.h>

#include "block/block.h"
#include "nbd/server.h"
#include "nbd/tls.h"

#define SERVE_DEFAULT_WORKERS 16
#define SERVE_DEFAULT_HANDSHAKE_LIMIT 10
#define SERVE_MAX_EXPORTS 64

/* One export: a name, a description and how to open its image. */
struct serve_export {
    const char *name;
    const char *description;
    struct blk_image_opts img;
    const char *bitmaps[NBD_MAX_BITMAPS]; /* -B / bitmap=: exported dirty bitmaps */
    unsigned n_bitmaps;
    struct blk_image *opened;
};

struct serve_opts {
    struct blk_image_opts img; /* the positional IMAGE, and the defaults of --export */
    struct nbd_server_config srv;
    const char *socket_path;
    const char *bind_addr;
    const char *port;
    const char *export_name;
    const char *description;
    const char *bitmaps[NBD_MAX_BITMAPS]; /* -B, for the positional IMAGE */
    unsigned n_bitmaps;
    const char *pid_file;
    /* -l, -o, --size: keys for the positional IMAGE's drivers only (an
     * --export does not inherit them) */
    const char *snapshot;
    const char *offset;
    const char *size;
    bool image_opts;
    bool fork;
    struct nbd_tls_config tls;
    const char *tls_mode;                        /* NULL: require when credentials are given */
    bool tls_verify_peer_set;                    /* --tls-verify-peer given (on or off) */
    const char *export_specs[SERVE_MAX_EXPORTS]; /* --export, parsed once all options are known */
    unsigned n_specs;
    struct serve_export exports[SERVE_MAX_EXPORTS];
    unsigned n_exports;
    bool socket_activation; /* LISTEN_FDS from systemd */
};

void serve_usage(FILE *f);
/* Returns 0, -1 after --help/--version, or an exit code after a usage
 * error (printed). */
int serve_parse(struct serve_opts *o, int argc, char **argv);

#endif
