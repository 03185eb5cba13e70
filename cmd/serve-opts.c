/* cmd/serve-opts.c: the command line of "diskimg serve": qemu-nbd's
 * spellings where the feature overlaps, nbdkit's for TLS, --image-opts and
 * --export specifications. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "common/error.h"
#include "common/log.h"
#include "common/util.h"
#include "nbd/protocol.h"
#include "serve.h"

void serve_usage(FILE *f)
{
    fprintf(
        f,
        "Usage: diskimg serve [OPTIONS] IMAGE\n"
        "       diskimg serve [OPTIONS] --export=name=NAME,file=PATH[,...] ...\n"
        "\n"
        "Export IMAGE (raw, qcow2, vpc, vmdk...) over NBD until interrupted.  Without -t\n"
        "the server exits when the last client disconnects, as qemu-nbd does.\n"
        "\n"
        "Where to listen:\n"
        "  -k, --socket=PATH        unix socket PATH (instead of TCP)\n"
        "  -b, --bind=ADDR          TCP address to listen on (default: all)\n"
        "  -p, --port=PORT          TCP port (default %d)\n"
        "\n"
        "What to export:\n"
        "  -f, --format=FMT         image format, diskimg-formats(7) (default: probe)\n"
        "  -x, --export-name=NAME   export name (default \"\")\n"
        "  -D, --description=TEXT   export description\n"
        "  -r, --read-only          export read-only\n"
        "  -U, --force-share        with -r: serve an image another process writes\n"
        "  -s, --snapshot           throw-away writes: the image is opened read-only and\n"
        "                           clients' writes go to a temporary overlay in $TMPDIR\n"
        "                           (default /var/tmp) that has no name and is gone at exit\n"
        "  -l, --load-snapshot=NAME qcow2: export internal snapshot NAME (or id), read-only\n"
        "  -B, --bitmap=NAME        qcow2: offer persistent bitmap NAME as the meta context\n"
        "                           qemu:dirty-bitmap:NAME (repeatable; an enabled bitmap\n"
        "                           needs -r, since diskimg does not record writes in it)\n"
        "      --export=SPEC        one more export (repeatable): name=NAME,file=PATH and\n"
        "                           optionally format=, read-only=on, description=,\n"
        "                           snapshot=, bitmap= (repeatable), force-share=on,\n"
        "                           throwaway=on (as -s),\n"
        "                           cache=, aio=, discard=, detect-zeroes=,\n"
        "                           l2-cache-size=, offset=, size=; the image options\n"
        "                           above are its defaults\n"
        "      --l2-cache-size=SIZE qcow2: L2 table cache (default: enough for the whole\n"
        "                           image, at most 32M); refcount cache is a quarter of it\n"
        "      --untrusted          open each image alone: refuse one with a backing file\n"
        "                           (or anything else it names); the format must be\n"
        "                           given or probed unambiguously (see diskimg(1))\n"
        "  -o, --offset=OFFSET      raw: export from OFFSET of the file\n"
        "      --size=SIZE          raw: export SIZE bytes (default: to the end)\n"
        "      --image-opts         IMAGE is driver=FMT,file.filename=PATH (or driver=PROTOCOL\n"
        "                           and its keys, diskimg(1)) [,KEY=VALUE...]\n"
        "                           [,size=N][,cache.direct=on|off][,cache.no-flush=on|off]\n"
        "                           [,aio=ENGINE][,l2-cache-size=SIZE][,read-only=on|off]\n"
        "\n"
        "Caching and I/O:\n"
        "      --cache=MODE         writeback (default), none, writethrough, directsync,\n"
        "                           unsafe: same meaning as qemu's cache=\n"
        "  -n, --nocache            same as --cache=none\n"
        "      --aio=ENGINE         threads (default) or io_uring\n"
        "      --discard=MODE       unmap (default: TRIM frees space) or ignore\n"
        "      --detect-zeroes=MODE off (default), on, unmap\n"
        "\n"
        "Clients and process:\n"
        "  -e, --shared=N           at most N clients at once, 0 = no limit but the caps\n"
        "                           below (default 1); more wait in the listen queue\n"
        "      --max-connections=N  the same as --shared\n"
        "      --idle-timeout=S     close connections idle (no request in flight) or not\n"
        "                           reading their replies for S seconds (default 0: never)\n"
        "      --connection-cap=N   never more than N connections, whatever -e says\n"
        "                           (default %d)\n"
        "      --thread-cap=N       never more than N threads serving clients (default %d)\n"
        "  -t, --persistent         keep serving after the last client disconnects\n"
        "      --threads=N          requests in flight per connection (default %d)\n"
        "      --handshake-limit=S  drop clients that have not finished the handshake\n"
        "                           in S seconds, reading our replies included; 0 = never\n"
        "                           (default %d)\n"
        "      --fork               run in the background once the socket is ready\n"
        "      --pid-file=PATH      write the server's process id to PATH\n"
        "      --stats=FILE         write statistics as JSON to FILE on SIGUSR1 and at exit\n"
        "  -v, --verbose            log more (repeat for more)\n"
        "      --debug=FLAG[=N]     developer flags: block.trace, nbd.requests,\n"
        "                           block.emulate-fua (FUA as write + flush),\n"
        "                           nbd.poll-us=N (busy-poll for the next request, default 50)\n"
        "\n"
        "TLS (GnuTLS):\n"
        "      --tls-creds=DIR      X.509: DIR/ca-cert.pem, server-cert.pem, server-key.pem,\n"
        "                           and ca-crl.pem (revoked certificates) if present\n"
        "      --tls-psk=FILE       pre-shared keys, psktool format (identity:hexkey)\n"
        "      --tls=MODE           off, on (clients choose) or require (default with\n"
        "                           credentials: nothing but STARTTLS before TLS)\n"
        "      --tls-verify-peer[=on|off]  X.509: require a client certificate signed by\n"
        "                           the CA (default: on); off serves clients without one\n"
        "      --tls-authz=FILE     allow only these client DNs (either RDN order) or PSK\n"
        "                           identities, one a line\n"
        "      --tls-priority=STR   GnuTLS priority string (default: TLS 1.2 and newer)\n"
        "\n"
        "  -h, --help               this help\n"
        "  -V, --version            the version\n"
        "\n"
        "Statistics go to stderr (syslog once forked) on SIGUSR1 and at exit.  SIGINT\n"
        "and SIGTERM stop accepting clients, finish requests in flight, give clients %d s\n"
        "to take their replies (then drop them), flush and exit 0.\n"
        "Images are locked as qemu-nbd locks them: a writable export keeps every other\n"
        "writer and reader out, a read-only one lets readers in.\n"
        "Exit status: 0 success, 1 failure (image, socket), 2 bad usage,\n" CMD_IN_USE_HELP ".\n"
        "See diskimg-serve(1).\n",
        NBD_DEFAULT_PORT, NBD_DEFAULT_CONNECTION_CAP, NBD_DEFAULT_THREAD_CAP, SERVE_DEFAULT_WORKERS,
        SERVE_DEFAULT_HANDSHAKE_LIMIT, NBD_SHUTDOWN_GRACE_S);
}

/* One image key of --image-opts or --export ("what" names the option in
 * messages): the block layer's own keys (format, file, cache, read-only...)
 * fill the generic fields; any other key goes to the image's drivers, which
 * check it (blk_kv_check). */
static int image_key(struct blk_image_opts *img, const char *key, const char *value,
                     const char *what)
{
    bool b;
    int r = cmd_image_opts_key("serve", what, img, key, value);

    if (r != CMD_KEY_NOT_MINE) {
        return r;
    }
    if (strcmp(key, "aio") == 0 || strcmp(key, "file.aio") == 0) {
        if (blk_aio_parse(value, &img->aio) < 0) {
            return cmd_usage_error("serve", "%s: invalid aio '%s'", what, value);
        }
    } else if (strcmp(key, "cache") == 0) {
        if (blk_cache_mode_parse(value, &img->cache) < 0) {
            return cmd_usage_error("serve", "%s: invalid cache mode '%s'", what, value);
        }
    } else if (strcmp(key, "cache.direct") == 0) {
        if (parse_bool(value, &b) < 0) {
            return cmd_usage_error("serve", "%s: invalid cache.direct '%s'", what, value);
        }
        bool wt = blk_cache_mode_writethrough(img->cache);
        img->cache = b ? (wt ? BLK_CACHE_DIRECTSYNC : BLK_CACHE_NONE)
                       : (wt ? BLK_CACHE_WRITETHROUGH : BLK_CACHE_WRITEBACK);
    } else if (strcmp(key, "cache.no-flush") == 0) {
        if (parse_bool(value, &b) < 0) {
            return cmd_usage_error("serve", "%s: invalid cache.no-flush '%s'", what, value);
        }
        if (b) {
            img->cache = BLK_CACHE_UNSAFE;
        }
    } else if (strcmp(key, "read-only") == 0) {
        if (parse_bool(value, &img->read_only) < 0) {
            return cmd_usage_error("serve", "%s: invalid read-only '%s'", what, value);
        }
    } else if (strcmp(key, "throwaway") == 0) {
        if (parse_bool(value, &img->temp_overlay) < 0) {
            return cmd_usage_error("serve", "%s: invalid throwaway '%s'", what, value);
        }
    } else if (strcmp(key, "force-share") == 0) {
        if (parse_bool(value, &img->force_share) < 0) {
            return cmd_usage_error("serve", "%s: invalid force-share '%s'", what, value);
        }
    } else if (strcmp(key, "discard") == 0) {
        if (blk_discard_parse(value, &img->discard) < 0) {
            return cmd_usage_error("serve", "%s: invalid discard '%s'", what, value);
        }
    } else if (strcmp(key, "detect-zeroes") == 0) {
        if (blk_detect_zeroes_parse(value, &img->detect_zeroes) < 0) {
            return cmd_usage_error("serve", "%s: invalid detect-zeroes '%s'", what, value);
        }
    } else if (blk_kv_add(&img->options, cmd_image_opts_driver_key(key), value) < 0) {
        return cmd_usage_error("serve", "%s: %s", what, err_msg());
    }
    return 0;
}

/* The keys the image's drivers will get: does a driver take each one, with
 * a value it can parse?  Checked before anything is opened. */
static int check_driver_keys(const struct blk_image_opts *img, const char *what)
{
    if (blk_kv_check(&img->options) < 0) {
        return cmd_usage_error("serve", "%s%s%s", what ? what : "", what ? ": " : "", err_msg());
    }
    return 0;
}

static int image_opts_key(void *opaque, const char *key, const char *value)
{
    return image_key(opaque, key, value, "--image-opts");
}

static int add_bitmap(const char **list, unsigned *n, const char *name)
{
    if (*n == NBD_MAX_BITMAPS) {
        return cmd_usage_error("serve", "at most %d bitmaps per export", NBD_MAX_BITMAPS);
    }
    list[(*n)++] = name;
    return 0;
}

static int export_key(void *opaque, const char *key, const char *value)
{
    struct serve_export *e = opaque;

    if (strcmp(key, "name") == 0) {
        e->name = value;
        return 0;
    }
    if (strcmp(key, "description") == 0) {
        e->description = value;
        return 0;
    }
    if (strcmp(key, "bitmap") == 0) {
        return add_bitmap(e->bitmaps, &e->n_bitmaps, value);
    }
    return image_key(&e->img, key, value, "--export");
}

/* --export name=NAME,file=PATH[,format=..][,read-only=on][,description=..]
 * [,snapshot=..][,cache=..]...: the image options given on the command
 * line are its defaults. */
static int serve_parse_export(struct serve_opts *o, const struct blk_image_opts *defaults,
                              char *spec)
{
    struct serve_export *e = &o->exports[o->n_exports];
    int r;

    if (o->n_exports == SERVE_MAX_EXPORTS) {
        return cmd_usage_error("serve", "at most %d exports", SERVE_MAX_EXPORTS);
    }
    *e = (struct serve_export){.img = *defaults};
    e->img.filename = NULL;
    r = cmd_kv_foreach("serve", "--export", spec, export_key, e);
    if (r) {
        return r;
    }
    if (!e->name || (!e->img.filename && !e->img.protocol && !e->img.format)) {
        return cmd_usage_error("serve", "--export needs name=NAME and file=PATH");
    }
    r = cmd_image_opts_finish("serve", "--export", &e->img);
    if (r) {
        return r;
    }
    o->n_exports++;
    return 0;
}

enum {
    OPT_CACHE = 256,
    OPT_AIO,
    OPT_DISCARD,
    OPT_DETECT_ZEROES,
    OPT_FORK,
    OPT_PID_FILE,
    OPT_IMAGE_OPTS,
    OPT_SIZE,
    OPT_THREADS,
    OPT_HANDSHAKE_LIMIT,
    OPT_STATS,
    OPT_DEBUG,
    OPT_L2_CACHE,
    OPT_TLS,
    OPT_TLS_CREDS,
    OPT_TLS_PSK,
    OPT_TLS_VERIFY_PEER,
    OPT_TLS_AUTHZ,
    OPT_TLS_PRIORITY,
    OPT_EXPORT,
    OPT_IDLE_TIMEOUT,
    OPT_UNTRUSTED,
    OPT_CONNECTION_CAP,
    OPT_THREAD_CAP,
};

static const struct option serve_long_opts[] = {
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"socket", required_argument, NULL, 'k'},
    {"bind", required_argument, NULL, 'b'},
    {"port", required_argument, NULL, 'p'},
    {"format", required_argument, NULL, 'f'},
    {"export-name", required_argument, NULL, 'x'},
    {"description", required_argument, NULL, 'D'},
    {"read-only", no_argument, NULL, 'r'},
    {"force-share", no_argument, NULL, 'U'},
    {"snapshot", no_argument, NULL, 's'},
    {"load-snapshot", required_argument, NULL, 'l'},
    {"bitmap", required_argument, NULL, 'B'},
    {"l2-cache-size", required_argument, NULL, OPT_L2_CACHE},
    {"offset", required_argument, NULL, 'o'},
    {"size", required_argument, NULL, OPT_SIZE},
    {"image-opts", no_argument, NULL, OPT_IMAGE_OPTS},
    {"cache", required_argument, NULL, OPT_CACHE},
    {"nocache", no_argument, NULL, 'n'},
    {"aio", required_argument, NULL, OPT_AIO},
    {"discard", required_argument, NULL, OPT_DISCARD},
    {"detect-zeroes", required_argument, NULL, OPT_DETECT_ZEROES},
    {"shared", required_argument, NULL, 'e'},
    {"persistent", no_argument, NULL, 't'},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"handshake-limit", required_argument, NULL, OPT_HANDSHAKE_LIMIT},
    {"fork", no_argument, NULL, OPT_FORK},
    {"pid-file", required_argument, NULL, OPT_PID_FILE},
    {"stats", required_argument, NULL, OPT_STATS},
    {"verbose", no_argument, NULL, 'v'},
    {"debug", required_argument, NULL, OPT_DEBUG},
    {"tls", required_argument, NULL, OPT_TLS},
    {"tls-creds", required_argument, NULL, OPT_TLS_CREDS},
    {"tls-certificates", required_argument, NULL, OPT_TLS_CREDS}, /* nbdkit's spelling */
    {"tls-psk", required_argument, NULL, OPT_TLS_PSK},
    {"tls-verify-peer", optional_argument, NULL, OPT_TLS_VERIFY_PEER},
    {"tls-authz", required_argument, NULL, OPT_TLS_AUTHZ},
    {"tls-priority", required_argument, NULL, OPT_TLS_PRIORITY},
    {"export", required_argument, NULL, OPT_EXPORT},
    {"max-connections", required_argument, NULL, 'e'},
    {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
    {"untrusted", no_argument, NULL, OPT_UNTRUSTED},
    {"connection-cap", required_argument, NULL, OPT_CONNECTION_CAP},
    {"thread-cap", required_argument, NULL, OPT_THREAD_CAP},
    {NULL, 0, NULL, 0},
};

/* Returns 0, or an exit code (EXIT_USAGE) after printing why; -1 for --help. */
int serve_parse(struct serve_opts *o, int argc, char **argv)
{
    uint64_t v;
    int c;

    opterr = 0; /* our own messages, in our own format */
    while ((c = getopt_long(argc, argv, ":hVk:b:p:f:x:D:rUsl:B:o:ne:tv", serve_long_opts, NULL)) !=
           -1) {
        switch (c) {
        case 'h':
            serve_usage(stdout);
            return -1;
        case 'V':
            printf("diskimg %s\n", DISKIMG_VERSION);
            return -1;
        case ':':
            return cmd_usage_error("serve", "option '%s' needs a value", argv[optind - 1]);
        case '?':
            return cmd_usage_error("serve", "unknown option '%s'", argv[optind - 1]);
        case 'k':
            o->socket_path = optarg;
            break;
        case 'b':
            o->bind_addr = optarg;
            break;
        case 'p':
            if (parse_uint(optarg, 1, 65535, &v) < 0) {
                return cmd_usage_error("serve", "invalid port '%s'", optarg);
            }
            o->port = optarg;
            break;
        case 'f':
            o->img.format = optarg;
            break;
        case 'x':
            o->export_name = optarg;
            break;
        case 'D':
            o->description = optarg;
            break;
        case 'r':
            o->img.read_only = true;
            break;
        case 'U':
            o->img.force_share = true;
            break;
        case 's':
            o->img.temp_overlay = true;
            break;
        case OPT_UNTRUSTED:
            o->img.untrusted = true;
            break;
        case 'l':
            o->snapshot = optarg; /* served read-only: see below */
            break;
        case 'B': {
            int r = add_bitmap(o->bitmaps, &o->n_bitmaps, optarg);
            if (r) {
                return r;
            }
            break;
        }
        case OPT_L2_CACHE:
            /* A default of every export (0 is refused here, where the key
             * of an --export takes it as "the default size"). */
            if (parse_size(optarg, &v) < 0 || v == 0) {
                return cmd_usage_error("serve", "invalid --l2-cache-size '%s'", optarg);
            }
            blk_kv_set(&o->img.options, "l2-cache-size", optarg);
            break;
        case 'o':
            o->offset = optarg;
            break;
        case OPT_SIZE:
            o->size = optarg;
            break;
        case OPT_IMAGE_OPTS:
            o->image_opts = true;
            break;
        case OPT_CACHE:
            if (blk_cache_mode_parse(optarg, &o->img.cache) < 0) {
                return cmd_usage_error(
                    "serve",
                    "invalid cache mode '%s' (writeback, none, writethrough, directsync, unsafe)",
                    optarg);
            }
            break;
        case 'n':
            o->img.cache = BLK_CACHE_NONE;
            break;
        case OPT_AIO:
            if (blk_aio_parse(optarg, &o->img.aio) < 0) {
                return cmd_usage_error("serve", "invalid aio engine '%s' (threads, io_uring)",
                                       optarg);
            }
            break;
        case OPT_DISCARD:
            if (blk_discard_parse(optarg, &o->img.discard) < 0) {
                return cmd_usage_error("serve", "invalid discard mode '%s' (ignore, unmap)",
                                       optarg);
            }
            break;
        case OPT_DETECT_ZEROES:
            if (blk_detect_zeroes_parse(optarg, &o->img.detect_zeroes) < 0) {
                return cmd_usage_error("serve", "invalid detect-zeroes mode '%s' (off, on, unmap)",
                                       optarg);
            }
            break;
        case 'e':
            if (parse_uint(optarg, 0, 1u << 20, &v) < 0) {
                return cmd_usage_error("serve", "invalid number of clients '%s'", optarg);
            }
            o->srv.max_connections = (unsigned)v;
            break;
        case 't':
            o->srv.persistent = true;
            break;
        case OPT_THREADS:
            if (parse_uint(optarg, 1, 1024, &v) < 0) {
                return cmd_usage_error("serve", "invalid --threads '%s' (1 to 1024)", optarg);
            }
            o->srv.workers_per_conn = (unsigned)v;
            break;
        case OPT_HANDSHAKE_LIMIT:
            if (parse_uint(optarg, 0, 86400, &v) < 0) {
                return cmd_usage_error("serve", "invalid --handshake-limit '%s'", optarg);
            }
            o->srv.handshake_limit_s = (unsigned)v;
            break;
        case OPT_FORK:
            o->fork = true;
            break;
        case OPT_PID_FILE:
            o->pid_file = optarg;
            break;
        case OPT_STATS:
            o->srv.stats_file = optarg;
            break;
        case 'v':
            log_verbosity++;
            break;
        case OPT_TLS:
            if (strcmp(optarg, "off") && strcmp(optarg, "on") && strcmp(optarg, "require")) {
                return cmd_usage_error("serve", "--tls takes off, on or require");
            }
            o->tls_mode = optarg;
            break;
        case OPT_TLS_CREDS:
            o->tls.creds_dir = optarg;
            break;
        case OPT_TLS_PSK:
            o->tls.psk_file = optarg;
            break;
        case OPT_TLS_VERIFY_PEER: {
            bool on = true;
            if (optarg && parse_bool(optarg, &on) < 0) {
                return cmd_usage_error("serve", "--tls-verify-peer takes on or off, not '%s'",
                                       optarg);
            }
            o->tls.no_verify_peer = !on;
            o->tls_verify_peer_set = true;
            break;
        }
        case OPT_TLS_AUTHZ:
            o->tls.authz_file = optarg;
            break;
        case OPT_TLS_PRIORITY:
            o->tls.priority = optarg;
            break;
        case OPT_EXPORT:
            if (o->n_specs == SERVE_MAX_EXPORTS) {
                return cmd_usage_error("serve", "at most %d exports", SERVE_MAX_EXPORTS);
            }
            o->export_specs[o->n_specs++] = optarg;
            break;
        case OPT_IDLE_TIMEOUT:
            if (parse_uint(optarg, 0, 86400 * 365, &v) < 0) {
                return cmd_usage_error("serve", "invalid --idle-timeout '%s'", optarg);
            }
            o->srv.idle_timeout_s = (unsigned)v;
            break;
        case OPT_CONNECTION_CAP:
            if (parse_uint(optarg, 1, 1u << 20, &v) < 0) {
                return cmd_usage_error("serve", "invalid --connection-cap '%s' (1 to 1048576)",
                                       optarg);
            }
            o->srv.connection_cap = (unsigned)v;
            break;
        case OPT_THREAD_CAP:
            if (parse_uint(optarg, 1, 1u << 20, &v) < 0) {
                return cmd_usage_error("serve", "invalid --thread-cap '%s' (1 to 1048576)", optarg);
            }
            o->srv.thread_cap = (unsigned)v;
            break;
        case OPT_DEBUG:
            if (debug_flag_set(optarg) < 0) {
                return cmd_usage_error("serve", "unknown debug flag '%s'", optarg);
            }
            log_verbosity = log_verbosity ? log_verbosity : 1;
            break;
        default:
            return cmd_usage_error("serve", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind + 1 < argc) {
        return cmd_usage_error("serve", "only one IMAGE can be given; use --export for more");
    }
    if (optind == argc && o->n_specs == 0) {
        return cmd_usage_error("serve", "an IMAGE (or --export) is required");
    }
    /* What --export inherits: the command line's image options, not what
     * --image-opts says about IMAGE. */
    const struct blk_image_opts defaults = o->img;
    if (optind < argc) {
        /* The positional IMAGE: export -x NAME (default "").  Its flags
         * are keys for its drivers, before --image-opts (which wins). */
        int r = 0;
        if (o->snapshot) {
            r = blk_kv_set(&o->img.options, "snapshot", o->snapshot);
        }
        if (r == 0 && o->offset) {
            r = blk_kv_set(&o->img.options, "offset", o->offset);
        }
        if (r == 0 && o->size) {
            r = blk_kv_set(&o->img.options, "size", o->size);
        }
        if (r < 0) {
            return cmd_usage_error("serve", "%s", err_msg());
        }
        if (o->image_opts) {
            r = cmd_image_opts_refuse_format("serve", &o->img);
            if (r == 0) {
                r = cmd_kv_foreach("serve", "--image-opts", argv[optind], image_opts_key, &o->img);
            }
            if (r) {
                return r;
            }
            r = cmd_image_opts_finish("serve", "--image-opts", &o->img);
        } else {
            o->img.filename = argv[optind];
            r = check_driver_keys(&o->img, NULL);
        }
        if (r) {
            return r;
        }
        struct serve_export *e = &o->exports[o->n_exports++];
        *e = (struct serve_export){
            .name = o->export_name, .description = o->description, .img = o->img};
        memcpy(e->bitmaps, o->bitmaps, sizeof e->bitmaps);
        e->n_bitmaps = o->n_bitmaps;
    } else if (o->n_bitmaps || o->snapshot) {
        return cmd_usage_error("serve", "%s applies to IMAGE; give --export a %s= key instead",
                               o->n_bitmaps ? "-B" : "-l", o->n_bitmaps ? "bitmap" : "snapshot");
    }
    for (unsigned i = 0; i < o->n_specs; i++) {
        int r = serve_parse_export(o, &defaults, (char *)o->export_specs[i]);
        if (r) {
            return r;
        }
    }
    for (unsigned i = 0; i < o->n_exports; i++) {
        struct serve_export *e = &o->exports[i];
        /* -l, snapshot=: a snapshot is served read-only, whatever read-only= says */
        e->img.read_only |= blk_kv_get(&e->img.options, "snapshot") != NULL;
        if (e->img.force_share && !e->img.read_only) {
            return cmd_usage_error("serve",
                                   "-U (--force-share) needs -r (read-only=on): a writable "
                                   "export never shares its image (export '%s')",
                                   e->name);
        }
    }
    if (o->socket_path && (o->bind_addr || o->port)) {
        return cmd_usage_error("serve", "--socket cannot be combined with --bind or --port");
    }
    if (o->img.detect_zeroes == BLK_DETECT_ZEROES_UNMAP && o->img.discard != BLK_DISCARD_UNMAP) {
        return cmd_usage_error("serve", "--detect-zeroes=unmap requires --discard=unmap");
    }
    bool creds = o->tls.creds_dir || o->tls.psk_file;
    if (o->tls.creds_dir && o->tls.psk_file) {
        return cmd_usage_error("serve", "--tls-creds and --tls-psk exclude each other");
    }
    if (o->tls_mode && strcmp(o->tls_mode, "off") != 0 && !creds) {
        return cmd_usage_error("serve", "--tls=%s needs --tls-creds=DIR or --tls-psk=FILE",
                               o->tls_mode);
    }
    if (o->tls.authz_file && o->tls_mode && strcmp(o->tls_mode, "require") != 0) {
        return cmd_usage_error("serve", "--tls-authz needs --tls=require: a plaintext client "
                                        "has no identity to check");
    }
    if ((o->tls_verify_peer_set || o->tls.authz_file || o->tls.priority) && !creds) {
        return cmd_usage_error("serve", "TLS options need --tls-creds=DIR or --tls-psk=FILE");
    }
    if (o->tls.authz_file && o->tls.creds_dir && o->tls.no_verify_peer) {
        return cmd_usage_error("serve", "--tls-authz with --tls-creds checks the names of client "
                                        "certificates: it needs --tls-verify-peer=on");
    }
    o->srv.tls_mode = !creds || (o->tls_mode && strcmp(o->tls_mode, "off") == 0) ? NBD_TLS_OFF
                      : o->tls_mode && strcmp(o->tls_mode, "on") == 0            ? NBD_TLS_ON
                                                                                 : NBD_TLS_REQUIRE;
    if (!blk_aio_available(o->img.aio)) {
        return cmd_usage_error("serve", "--aio=%s: not built into this diskimg",
                               blk_aio_name(o->img.aio));
    }
    return 0;
}
