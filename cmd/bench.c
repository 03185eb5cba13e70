/* cmd/bench.c: "diskimg bench", a load generator for images and NBD
 * exports: DEPTH threads keep requests in flight (reads, writes, FUA
 * writes, flushes every N writes), and the run reports IOPS, MB/s and
 * latency percentiles.  The same command measures a local file, our
 * server or any other NBD server, so "native FUA vs write + flush" is one
 * command line away.  Options, opening the image and printing are here;
 * the threads and their requests are block/bench.c's. */
#include <getopt.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/bench.h"
#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/escape.h"
#include "common/histogram.h"
#include "common/json.h"
#include "common/util.h"

static void bench_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg bench [-f FMT | --image-opts] [-w] [--fua] [-d DEPTH] [-s SIZE]\n"
               "                     [-c COUNT]"
               " [-o OFFSET] [--flush-interval=N] [--pattern=seq|rand]\n"
               "                     [-t CACHE] [--aio=ENGINE] [--output=human|json] IMAGE|URI\n"
               "\n"
               "Run COUNT requests of SIZE bytes against IMAGE with DEPTH in flight.\n"
               "\n"
               "  -w                 write (default: read); writes DESTROY the image's data\n"
               "      --fua          every write with FUA (durable when it completes)\n"
               "  -d DEPTH           requests in flight (default 64)\n"
               "  -s SIZE            bytes per request (default 4k)\n"
               "  -c COUNT           number of requests (default 75000)\n"
               "  -o OFFSET          start of the region requests fall in (default 0)\n"
               "      --flush-interval=N  a flush after every N writes (other writes may\n"
               "                     stay in flight meanwhile)\n"
               "      --pattern=P    seq (default) or rand: request offsets\n"
               "  -t CACHE           cache mode (default writeback): writethrough makes every\n"
               "                     write FUA, unsafe drops flushes, even over NBD\n"
               "      --aio=ENGINE   threads (default) or io_uring, for a local image\n"
               "  -U, --force-share  read an image another process writes (not with -w)\n"
               "      --output=FMT   human (default) or json\n" CMD_IMAGE_OPTS_HELP CMD_TLS_HELP
                   CMD_UNTRUSTED_HELP "  -h, --help         this help\n"
               "\n"
               "Exit status: 0 success, 1 failure, 2 bad usage,\n" CMD_IN_USE_HELP ".\n"
               "See diskimg-bench(1).\n");
}

/* The options into b, o and json; -1 to go on, or the exit status. */
static int bench_options(int argc, char **argv, struct blk_bench_opts *b, struct blk_image_opts *o,
                         bool *json)
{
    enum { OPT_FUA = 256, OPT_FLUSH, OPT_PATTERN, OPT_AIO, OPT_OUTPUT };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"fua", no_argument, NULL, OPT_FUA},
        {"flush-interval", required_argument, NULL, OPT_FLUSH},
        {"pattern", required_argument, NULL, OPT_PATTERN},
        {"aio", required_argument, NULL, OPT_AIO},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"force-share", no_argument, NULL, 'U'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    int c, r;
    bool image_opts = false;

    b->depth = 64;
    b->size = 4096;
    b->count = 75000;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:wd:s:c:o:t:U", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            bench_usage(stdout);
            return EXIT_OK;
        case 'f':
            o->format = optarg;
            break;
        case 'w':
            b->write = true;
            break;
        case OPT_FUA:
            b->fua = true;
            break;
        case 'd':
            if (parse_uint(optarg, 1, 1024, &b->depth) < 0) {
                return cmd_usage_error("bench", "-d takes 1 to 1024");
            }
            break;
        case 's':
            if (parse_size(optarg, &b->size) < 0 || b->size == 0 || b->size > (32u << 20)) {
                return cmd_usage_error("bench", "-s takes 1 byte to 32M");
            }
            break;
        case 'c':
            if (parse_uint(optarg, 1, UINT64_MAX, &b->count) < 0) {
                return cmd_usage_error("bench", "invalid count '%s'", optarg);
            }
            break;
        case 'o':
            if (parse_size(optarg, &b->offset) < 0) {
                return cmd_usage_error("bench", "invalid offset '%s'", optarg);
            }
            break;
        case 't':
            if (blk_cache_mode_parse(optarg, &o->cache) < 0) {
                return cmd_usage_error("bench", "invalid cache mode '%s'", optarg);
            }
            break;
        case OPT_FLUSH:
            if (parse_uint(optarg, 1, UINT64_MAX, &v) < 0) {
                return cmd_usage_error("bench", "invalid flush interval '%s'", optarg);
            }
            b->flush_interval = v;
            break;
        case OPT_PATTERN:
            if (strcmp(optarg, "rand") != 0 && strcmp(optarg, "seq") != 0) {
                return cmd_usage_error("bench", "--pattern takes seq or rand");
            }
            b->rand = strcmp(optarg, "rand") == 0;
            break;
        case OPT_AIO:
            if (blk_aio_parse(optarg, &o->aio) < 0 || !blk_aio_available(o->aio)) {
                return cmd_usage_error("bench", "invalid aio engine '%s'", optarg);
            }
            break;
        case OPT_OUTPUT:
            if ((r = cmd_parse_output("bench", optarg, json)) != 0) {
                return r;
            }
            break;
        case 'U':
            o->force_share = true;
            break;
        default:
            if ((r = cmd_image_getopt("bench", c, argv, &image_opts, o)) != 0) {
                return r;
            }
            break;
        }
    }
    if (optind + 1 != argc) {
        return cmd_usage_error("bench", "expected one IMAGE");
    }
    if (b->fua && !b->write) {
        return cmd_usage_error("bench", "--fua needs -w");
    }
    if (o->force_share && b->write) {
        return cmd_usage_error("bench", "-U (--force-share) cannot be used with -w, which writes");
    }
    r = cmd_image_operand("bench", argv[optind], image_opts, CMD_IMAGE_OPTS_CACHE, o);
    if (r) {
        return r;
    }
    o->read_only = !b->write;
    return -1;
}

/* The first line of a human report, before the requests go out. */
static void bench_announce(const struct blk_bench_opts *b)
{
    printf("Sending %" PRIu64 " %s requests, %" PRIu64 " bytes each, %" PRIu64
           " in parallel (%s, starting at offset %" PRIu64 ")%s\n",
           b->count, b->write ? "write" : "read", b->size, b->depth,
           b->rand ? "random" : "sequential", b->offset, b->fua ? ", FUA" : "");
}

/* One line for every way the run can fail, naming the step when the
 * engine recorded no message of its own. */
static void bench_print_failure(enum blk_bench_failure step, int r, const char *filename)
{
    switch (step) {
    case BLK_BENCH_FAIL_REQUEST:
        cmd_print_failure(r, "a request to %s", filename);
        break;
    case BLK_BENCH_FAIL_FLUSH:
        cmd_print_failure(r, "flushing %s", filename);
        break;
    default:
        cmd_print_failure(r, "starting the benchmark on %s", filename);
        break;
    }
}

/* Opens the image, runs the requests (block/bench.c) and closes it; *res
 * gets what they measured.  Returns EXIT_OK or the exit status of the
 * failure. */
static int bench_execute(const struct blk_bench_opts *b, const struct blk_image_opts *o, bool json,
                         struct blk_bench_result *res)
{
    struct blk_image *img;
    int r = blk_image_open(&img, o);
    if (r < 0) {
        cmd_print_open_error(r, !b->write);
        return cmd_status(r, EXIT_ERROR);
    }
    /* for messages, so escaped; outlives the image */
    CLEANUP_FREE char *name = str_escape(cmd_image_name(o, img));
    uint64_t size = blk_image_size(img);
    if (b->offset >= size || size - b->offset < b->size) {
        blk_image_close(img);
        fprintf(stderr,
                "diskimg: %s is too small for %" PRIu64 "-byte requests at offset %" PRIu64 "\n",
                name ? name : "?", b->size, b->offset);
        return EXIT_ERROR;
    }
    if (!json) {
        bench_announce(b);
    }
    r = blk_bench(img, b, res);
    blk_image_close(img);
    if (r < 0) {
        bench_print_failure(res->failed, r, name ? name : "?");
        return EXIT_ERROR;
    }
    return EXIT_OK;
}

static void bench_report_json(const struct blk_bench_opts *b, struct blk_bench_result *res,
                              double secs)
{
    double iops = (double)b->count / secs, mbps = iops * (double)b->size / 1e6;
    struct json_writer w;

    json_init(&w, stdout, false);
    json_begin_object(&w, NULL);
    json_str(&w, "operation", b->write ? (b->fua ? "write-fua" : "write") : "read");
    json_uint(&w, "requests", b->count);
    json_uint(&w, "request-size", b->size);
    json_uint(&w, "depth", b->depth);
    json_str(&w, "pattern", b->rand ? "rand" : "seq");
    json_double(&w, "seconds", secs);
    json_double(&w, "iops", iops);
    json_double(&w, "mbps", mbps);
    json_begin_object(&w, "latency-us");
    json_double(&w, "mean", (double)hist_mean(&res->lat) / 1e3);
    json_double(&w, "p50", (double)hist_quantile(&res->lat, 0.5) / 1e3);
    json_double(&w, "p90", (double)hist_quantile(&res->lat, 0.9) / 1e3);
    json_double(&w, "p99", (double)hist_quantile(&res->lat, 0.99) / 1e3);
    json_double(&w, "p99.9", (double)hist_quantile(&res->lat, 0.999) / 1e3);
    json_double(&w, "max", (double)atomic_load(&res->lat.max) / 1e3);
    json_end_object(&w);
    if (b->flush_interval) {
        json_uint(&w, "flushes", atomic_load(&res->flush_lat.count));
        json_double(&w, "flush-p50-us", (double)hist_quantile(&res->flush_lat, 0.5) / 1e3);
    }
    json_end_object(&w);
    json_finish(&w);
}

static void bench_report_human(const struct blk_bench_opts *b, struct blk_bench_result *res,
                               double secs)
{
    double iops = (double)b->count / secs, mbps = iops * (double)b->size / 1e6;

    printf("Run completed in %.3f seconds.\n", secs);
    printf("%.0f IOPS, %.1f MB/s; latency us: mean %.0f, p50 %.0f, p90 %.0f, p99 %.0f, "
           "p99.9 %.0f, max %.0f\n",
           iops, mbps, (double)hist_mean(&res->lat) / 1e3,
           (double)hist_quantile(&res->lat, 0.5) / 1e3, (double)hist_quantile(&res->lat, 0.9) / 1e3,
           (double)hist_quantile(&res->lat, 0.99) / 1e3,
           (double)hist_quantile(&res->lat, 0.999) / 1e3, (double)atomic_load(&res->lat.max) / 1e3);
    if (b->flush_interval) {
        printf("%" PRIu64 " flushes, p50 %.0f us\n", atomic_load(&res->flush_lat.count),
               (double)hist_quantile(&res->flush_lat, 0.5) / 1e3);
    }
}

static int bench_run(int argc, char **argv)
{
    struct blk_image_opts o = {
        .cache = BLK_CACHE_WRITEBACK, .discard = BLK_DISCARD_UNMAP, .options = CMD_BULK_OPTIONS};
    struct blk_bench_opts b = {0};
    static struct blk_bench_result res;
    bool json = false;

    int status = bench_options(argc, argv, &b, &o, &json);
    if (status >= 0) {
        return status;
    }
    status = bench_execute(&b, &o, json, &res);
    if (status != EXIT_OK) {
        return status;
    }
    double secs = (double)res.ns / 1e9;
    if (json) {
        bench_report_json(&b, &res, secs);
    } else {
        bench_report_human(&b, &res, secs);
    }
    return EXIT_OK;
}

const struct cmd cmd_bench = {
    .name = "bench",
    .summary = "measure IOPS, throughput and latency of an image or NBD export",
    .run = bench_run,
    .usage = bench_usage,
};
