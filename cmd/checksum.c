/* cmd/checksum.c: "diskimg checksum": the content checksum of an image,
 * printed as sha256sum prints a file's ("HASH  NAME"), or as JSON.  The
 * value depends on the guest-visible bytes and the virtual size only, so
 * the same disk as raw, qcow2, vpc, vmdk, vhdx, vdi or over NBD gives
 * one value; the engine is block/checksum.c and the algorithm
 * (dkh1-sha256) is specified in diskimg-checksum(1).  Like convert, the
 * image is read once: by default it streams through the page cache. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "progress.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/url-redact.h"
#include "common/util.h"

static volatile sig_atomic_t checksum_cancel;

static void checksum_usage(FILE *f)
{
    fprintf(f,
            "Usage: diskimg checksum [-f FMT] [--output=human|json] [-T CACHE] [-m N]\n"
            "                        [-p | --progress=json] [-U] [--untrusted] IMAGE|URI\n"
            "\n"
            "Print the checksum of the image's guest-visible content, as sha256sum prints\n"
            "a file's: HASH  NAME.  It does not depend on the format, on allocation or on\n"
            "holes (the same disk as raw, qcow2, vpc, vmdk, vhdx, vdi or over NBD gives\n"
            "one value); the virtual size is part of it.  Algorithm " BLK_CHECKSUM_ALGORITHM
            ": SHA-256 of\n"
            "64 KiB blocks in a tree (see diskimg-checksum(1)); zeroes are never hashed\n"
            "byte by byte and data is hashed on every core.\n"
            "\n"
            "  -f FMT            image format (default: probe)\n"
            "      --output=FMT  human (default) or json\n"
            "  -T CACHE          cache mode (default: writeback, streaming: data read into\n"
            "                    the page cache leaves it once read)\n"
            "  -m N              threads reading and hashing, 1 to 64 (default: one per\n"
            "                    core, at least 8)\n"
            "  -p                progress on stderr (percent, rate, time left)\n"
            "      --progress=json    progress as JSON lines on stderr\n"
            "  -U, --force-share read the image even while another process writes it\n" CMD_TLS_HELP
                CMD_UNTRUSTED_HELP "  -h, --help        this help\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 bad usage,\n" CMD_IN_USE_HELP
            ", 130/143 SIGINT/SIGTERM.\n"
            "See diskimg-checksum(1).\n");
}

static void on_signal(int sig)
{
    checksum_cancel = sig;
    diskimg_interrupted = 1;
}

static void print_json(const uint8_t *sum, const char *name, uint64_t size)
{
    struct json_writer w;
    char hex[2 * BLK_CHECKSUM_LEN + 1];

    for (unsigned i = 0; i < BLK_CHECKSUM_LEN; i++) {
        snprintf(hex + 2 * i, 3, "%02x", sum[i]);
    }
    json_init(&w, stdout, false);
    json_begin_object(&w, NULL);
    json_str(&w, "algorithm", BLK_CHECKSUM_ALGORITHM);
    json_str(&w, "checksum", hex);
    json_uint(&w, "virtual-size", size);
    json_str(&w, "filename", name);
    json_end_object(&w);
    json_finish(&w);
}

struct checksum_args {
    struct blk_image_opts img;
    struct blk_checksum_opts sum;
    bool json, progress, progress_json;
};

static int checksum_parse(struct checksum_args *a, int argc, char **argv)
{
    enum { OPT_OUTPUT = 256, OPT_PROGRESS };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"progress", required_argument, NULL, OPT_PROGRESS},
        {"force-share", no_argument, NULL, 'U'},
        CMD_TLS_LONGOPTS,
        CMD_UNTRUSTED_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:T:m:pU", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            checksum_usage(stdout);
            return -1;
        case 'f':
            a->img.format = optarg;
            break;
        case OPT_OUTPUT:
            if ((r = cmd_parse_output("checksum", optarg, &a->json)) != 0) {
                return r;
            }
            break;
        case 'T':
            if (blk_cache_mode_parse(optarg, &a->img.cache) < 0) {
                return cmd_usage_error("checksum", "invalid cache mode '%s'", optarg);
            }
            a->img.stream = false; /* a mode asked for: exactly that mode */
            break;
        case 'm':
            if (parse_uint(optarg, 1, 64, &v) < 0) {
                return cmd_usage_error("checksum", "-m takes 1 to 64, not '%s'", optarg);
            }
            a->sum.workers = (unsigned)v;
            break;
        case 'p':
            a->progress = true;
            break;
        case OPT_PROGRESS:
            if (strcmp(optarg, "human") != 0 && strcmp(optarg, "json") != 0) {
                return cmd_usage_error("checksum", "--progress takes human or json");
            }
            a->progress = true;
            a->progress_json = strcmp(optarg, "json") == 0;
            break;
        case 'U':
            a->img.force_share = true;
            break;
        default: /* no --image-opts: IMAGE is a file name or URL */
            if ((r = cmd_image_getopt("checksum", c, argv, NULL, &a->img)) != 0) {
                return r;
            }
            break;
        }
    }
    if (argc - optind != 1) {
        return cmd_usage_error("checksum", "expected one IMAGE");
    }
    a->img.filename = argv[optind];
    return 0;
}

static int checksum_run(int argc, char **argv)
{
    struct checksum_args a = {
        .img = {.read_only = true,
                .cache = BLK_CACHE_WRITEBACK,
                .stream = true,
                .options = CMD_BULK_OPTIONS},
    };
    struct blk_image *img = NULL;
    struct cmd_progress prog;
    uint8_t sum[BLK_CHECKSUM_LEN];
    int r = checksum_parse(&a, argc, argv);

    if (r) {
        return r < 0 ? EXIT_OK : r;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if ((r = blk_image_open(&img, &a.img)) < 0) {
        cmd_print_open_error(r, true);
        return checksum_cancel ? 128 + checksum_cancel : cmd_status(r, EXIT_ERROR);
    }
    cmd_progress_start(&prog, a.progress, a.progress_json);
    a.sum.progress = cmd_progress_cb;
    a.sum.progress_opaque = &prog;
    a.sum.cancel = &checksum_cancel;
    r = blk_image_checksum(img, &a.sum, sum);
    if (r < 0) {
        cmd_progress_abort(&prog);
        cmd_print_error(r);
        blk_image_close(img);
        return checksum_cancel ? 128 + checksum_cancel : EXIT_ERROR;
    }
    cmd_progress_finish(&prog, blk_image_size(img));
    /* The name as given, but an http URL's signature or password stays
     * out of the output: a pre-signed URL's query is a secret. */
    CLEANUP_FREE char *shown =
        http_url_is(a.img.filename) ? url_redact(a.img.filename) : strdup(a.img.filename);
    if (!shown) {
        blk_image_close(img);
        return EXIT_ERROR;
    }
    if (a.json) {
        print_json(sum, shown, blk_image_size(img));
    } else {
        cmd_print_checksum(stdout, sum, shown);
    }
    blk_image_close(img);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_ERROR;
}

const struct cmd cmd_checksum = {
    .name = "checksum",
    .summary = "print the checksum of an image's content, whatever its format",
    .run = checksum_run,
    .usage = checksum_usage,
};
