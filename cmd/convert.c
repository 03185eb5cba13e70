/* cmd/convert.c: "diskimg convert", as qemu-img convert: any source to any
 * target among raw, qcow2 and NBD URIs, sparse-aware and parallel (the
 * copy itself is blk_copy in block/copy.c).  Unlike qemu-img, the target
 * is flushed once at the end by default (-t writeback), so a zero exit
 * status means the data is durable; -t unsafe skips that flush. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/block.h"
#include "cmd.h"
#include "common/error.h"
#include "common/util.h"
#include "nbd/uri.h"

#define DEFAULT_WORKERS 8
#define EXIT_INTERRUPTED 130

static volatile int convert_cancel;

static void convert_usage(FILE *f)
{
    fprintf(f,
            "Usage: diskimg convert [-f FMT] [-O raw|qcow2] [-o OPTIONS] [-c] [-p] [-q] [-n]\n"
            "                       [-S SIZE] [-t CACHE] [-T SRC_CACHE] [-W] [-m N]\n"
            "                       [-B BACKING [-F FMT]] [-l SNAPSHOT] [--target-is-zero]\n"
            "                       [--progress=human|json] SRC DST\n"
            "\n"
            "Copy image SRC into DST.  Either may be a file or an NBD URI\n"
            "(nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH).  Holes and zeroes\n"
            "are never read from SRC and not written to a DST that is known to be zero.\n"
            "\n"
            "  -f FMT            source format (default: probe)\n"
            "  -O FMT            target format: raw (default) or qcow2\n"
            "  -o OPTIONS        target creation options (see diskimg create -o help)\n"
            "  -c                compress the target (qcow2), on all cores\n"
            "  -n                do not create DST: it exists and is at least as large\n"
            "  -S SIZE           zero runs of at least SIZE become holes (default 4k);\n"
            "                    -S 0 writes everything\n"
            "  -t CACHE          target cache mode (default writeback: one flush at the end;\n"
            "                    unsafe: no flush; writethrough: every write durable)\n"
            "  -T CACHE          source cache mode (default writeback)\n"
            "  -W                allow out-of-order writes\n"
            "  -m N              requests in flight, 1 to 64 (default %d)\n"
            "  -B BACKING        give DST this backing file and copy only what SRC's top\n"
            "                    image holds; -F its format\n"
            "  -l SNAPSHOT       copy an internal snapshot of SRC\n"
            "      --target-is-zero   DST reads as zeroes already (with -n)\n"
            "  -p                progress on stderr (percent, rate, time left)\n"
            "      --progress=json    progress as JSON lines on stderr, for CI logs\n"
            "  -q                quiet\n" CMD_TLS_HELP "  -h, --help        this help\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 bad usage, 130 interrupted.  A target\n"
            "that convert created is removed when it fails.  See diskimg-convert(1).\n",
            DEFAULT_WORKERS);
}

struct progress {
    bool on, json, tty;
    uint64_t start_ns, last_ns;
    pthread_mutex_t lock;
};

static void progress_print(struct progress *p, uint64_t done, uint64_t total, bool final)
{
    uint64_t now = clock_ns();
    double secs = (double)(now - p->start_ns) / 1e9;
    double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    double rate = secs > 0 ? (double)done / secs / 1e6 : 0;
    double eta = rate > 0 && done < total ? (double)(total - done) / 1e6 / rate : 0;

    if (p->json) {
        fprintf(stderr,
                "{\"progress\": %.2f, \"bytes\": %" PRIu64 ", \"total\": %" PRIu64
                ", \"elapsed-s\": %.1f, \"rate-mbps\": %.1f, \"eta-s\": %.0f%s}\n",
                pct, done, total, secs, rate, eta, final ? ", \"done\": true" : "");
    } else {
        fprintf(stderr, "    (%.2f/100%%)  %.1f MB/s  ETA %d:%02d%s", pct, rate, (int)eta / 60,
                (int)eta % 60,
                final    ? "\n"
                : p->tty ? "\r"
                         : "\n");
    }
    fflush(stderr);
}

static void progress_cb(void *opaque, uint64_t done, uint64_t total)
{
    struct progress *p = opaque;
    uint64_t now = clock_ns();
    uint64_t every = p->json || !p->tty ? 1000000000ULL : 200000000ULL;

    pthread_mutex_lock(&p->lock);
    if (now - p->last_ns >= every && done < total) {
        p->last_ns = now;
        progress_print(p, done, total, false);
    }
    pthread_mutex_unlock(&p->lock);
}

static void on_signal(int sig)
{
    (void)sig;
    convert_cancel = 1;
}

struct convert_opts {
    struct blk_image_opts src, dst;
    struct blk_create_opts create;
    struct blk_copy_opts copy;
    char *options; /* merged -o */
    bool create_target;
    bool quiet;
    struct progress progress;
};

static int parse_cache(const char *arg, enum blk_cache_mode *out)
{
    if (blk_cache_mode_parse(arg, out) < 0) {
        return cmd_usage_error("convert", "invalid cache mode '%s'", arg);
    }
    return 0;
}

static int convert_parse(struct convert_opts *o, int argc, char **argv)
{
    enum { OPT_TARGET_IS_ZERO = 256, OPT_PROGRESS };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"target-is-zero", no_argument, NULL, OPT_TARGET_IS_ZERO},
        {"progress", required_argument, NULL, OPT_PROGRESS},
        CMD_TLS_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:O:o:cpqnS:t:T:Wm:B:F:l:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            convert_usage(stdout);
            return -1;
        case 'f':
            o->src.format = optarg;
            break;
        case 'O':
            o->create.format = optarg;
            o->dst.format = optarg;
            break;
        case 'o':
            if (!cmd_append_options(&o->options, optarg)) {
                return EXIT_ERROR;
            }
            o->create.options = o->options;
            break;
        case 'c':
            o->copy.compress = true;
            break;
        case 'p':
            o->progress.on = true;
            break;
        case 'q':
            o->quiet = true;
            break;
        case 'n':
            o->create_target = false;
            break;
        case 'S':
            if (parse_size(optarg, &v) < 0 || v % 512 || v > (16u << 20)) {
                return cmd_usage_error("convert",
                                       "-S takes a multiple of 512 bytes, at most "
                                       "16M, not '%s'",
                                       optarg);
            }
            o->copy.min_sparse = v;
            break;
        case 't':
            if ((r = parse_cache(optarg, &o->dst.cache)) != 0) {
                return r;
            }
            break;
        case 'T':
            if ((r = parse_cache(optarg, &o->src.cache)) != 0) {
                return r;
            }
            break;
        case 'W':
            o->copy.out_of_order = true;
            break;
        case 'm':
            if (parse_uint(optarg, 1, 64, &v) < 0) {
                return cmd_usage_error("convert", "-m takes 1 to 64, not '%s'", optarg);
            }
            o->copy.workers = (unsigned)v;
            break;
        case 'B':
            o->create.backing_file = optarg;
            o->copy.top_only = true;
            break;
        case 'F':
            o->create.backing_format = optarg;
            break;
        case 'l':
            o->src.snapshot = optarg;
            break;
        case OPT_TARGET_IS_ZERO:
            o->copy.target_is_zero = true;
            break;
        case OPT_PROGRESS:
            if (strcmp(optarg, "json") != 0 && strcmp(optarg, "human") != 0) {
                return cmd_usage_error("convert", "--progress takes human or json");
            }
            o->progress.on = true;
            o->progress.json = strcmp(optarg, "json") == 0;
            break;
        case ':':
            return cmd_usage_error("convert", "option '%s' needs a value", argv[optind - 1]);
        default:
            if (cmd_tls_option(c, optarg, &o->src)) {
                cmd_tls_option(c, optarg, &o->dst); /* both ends may be nbds:// */
                break;
            }
            return cmd_usage_error("convert", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind != 2) {
        return cmd_usage_error("convert", "expected SRC and DST");
    }
    o->src.filename = argv[optind];
    o->dst.filename = o->create.filename = argv[optind + 1];
    if (nbd_uri_is(o->dst.filename)) {
        o->create_target = false; /* an export exists already */
        o->dst.format = o->dst.format ? o->dst.format : "raw";
    }
    if (o->copy.target_is_zero && o->create_target) {
        return cmd_usage_error("convert", "--target-is-zero needs -n");
    }
    if (!o->create_target && o->create.options) {
        return cmd_usage_error("convert", "-o has no effect without creating the target (-n)");
    }
    if (o->copy.compress && strcmp(o->create.format, "qcow2") != 0) {
        return cmd_usage_error("convert", "-c needs -O qcow2 (%s has no compression)",
                               o->create.format);
    }
    return 0;
}

static int convert_run(int argc, char **argv)
{
    struct convert_opts o = {
        .src = {.read_only = true, .cache = BLK_CACHE_WRITEBACK},
        .dst = {.cache = BLK_CACHE_WRITEBACK, .discard = BLK_DISCARD_UNMAP},
        .create = {.format = "raw"},
        .copy = {.workers = DEFAULT_WORKERS, .min_sparse = 4096},
        .create_target = true,
    };
    struct blk_image *src = NULL, *dst = NULL;
    bool created = false;
    int r, status = EXIT_ERROR;
    char *summary = NULL;

    r = convert_parse(&o, argc, argv);
    if (r) {
        free(o.options);
        return r < 0 ? EXIT_OK : r;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    r = blk_image_open(&src, &o.src);
    if (r < 0) {
        goto out;
    }
    if (o.create_target) {
        o.create.size = blk_image_size(src);
        o.create.size_set = true;
        o.dst.format = o.create.format;
        r = blk_create(&o.create, &summary);
        if (r < 0) {
            goto out;
        }
        created = true;
        /* A new image without a backing file reads as zeroes. */
        o.copy.target_is_zero = !o.create.backing_file;
    }
    r = blk_image_open(&dst, &o.dst);
    if (r < 0) {
        goto out;
    }
    o.progress.tty = isatty(STDERR_FILENO);
    o.progress.start_ns = clock_ns();
    pthread_mutex_init(&o.progress.lock, NULL);
    if (o.progress.on && !o.quiet) {
        o.copy.progress = progress_cb;
        o.copy.progress_opaque = &o.progress;
    }
    o.copy.cancel = &convert_cancel;
    r = blk_copy(src, dst, &o.copy);
    if (r == 0) {
        r = blk_image_flush(dst); /* durable before we say so */
    }
    if (r == 0 && o.progress.on && !o.quiet) {
        progress_print(&o.progress, blk_image_size(src), blk_image_size(src), true);
    }
    status = r == 0 ? EXIT_OK : r == -EINTR ? EXIT_INTERRUPTED : EXIT_ERROR;

out:
    if (r < 0) {
        if (o.progress.on && o.progress.tty && !o.progress.json) {
            fputc('\n', stderr);
        }
        cmd_print_error(r);
    }
    if (dst) {
        int r2 = blk_image_close(dst);
        if (r2 < 0 && status == EXIT_OK) {
            cmd_print_error(r2);
            status = EXIT_ERROR;
        }
    }
    blk_image_close(src);
    free(o.options);
    if (status != EXIT_OK && created) {
        unlink(o.create.filename); /* never leave a half-written image we made */
    }
    free(summary);
    return status;
}

const struct cmd cmd_convert = {
    .name = "convert",
    .summary = "copy an image into another format, file or NBD export",
    .run = convert_run,
    .usage = convert_usage,
};
