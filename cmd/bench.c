/* cmd/bench.c: "diskimg bench", a load generator for images and NBD
 * exports: DEPTH threads keep requests in flight (reads, writes, FUA
 * writes, flushes every N writes), and the run reports IOPS, MB/s and
 * latency percentiles.  The same command measures a local file, our
 * server or any other NBD server, so "native FUA vs write + flush" is one
 * command line away. */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/histogram.h"
#include "common/json.h"
#include "common/util.h"

static void bench_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg bench [-f FMT] [-w] [--fua] [-d DEPTH] [-s SIZE] [-c COUNT]\n"
               "                     [-o OFFSET] [--flush-interval=N] [--pattern=seq|rand]\n"
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
               "      --output=FMT   human (default) or json\n" CMD_TLS_HELP CMD_UNTRUSTED_HELP
               "  -h, --help         this help\n"
               "\n"
               "Exit status: 0 success, 1 failure, 2 bad usage,\n" CMD_IN_USE_HELP ".\n"
               "See diskimg-bench(1).\n");
}

struct bench {
    struct blk_image *img;
    bool write, fua, rand;
    uint64_t size, count, offset, flush_interval, span;
    _Atomic uint64_t next;   /* requests handed out */
    _Atomic uint64_t writes; /* completed, for flush-interval */
    _Atomic int failed;
    pthread_mutex_t flush_lock;
    struct histogram lat;
    struct histogram flush_lat;
};

static uint64_t bench_offset(struct bench *b, uint64_t i, uint64_t *rng)
{
    uint64_t slots = b->span / b->size;

    if (b->rand) {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        return b->offset + (*rng % slots) * b->size;
    }
    return b->offset + (i % slots) * b->size;
}

static void *bench_worker(void *arg)
{
    struct bench *b = arg;
    void *buf = NULL;
    uint64_t rng = (uint64_t)(uintptr_t)&buf ^ clock_ns();

    if (posix_memalign(&buf, 4096, b->size) != 0) {
        atomic_store(&b->failed, 1);
        return NULL;
    }
    /* Non-zero data, so nothing is turned into a hole on the way. */
    memset(buf, 0xa5, b->size);
    for (;;) {
        uint64_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->count || atomic_load(&b->failed)) {
            break;
        }
        uint64_t off = bench_offset(b, i, &rng), t0 = clock_ns();
        int r = b->write ? blk_image_pwrite(b->img, off, buf, b->size, b->fua ? BLK_REQ_FUA : 0)
                         : blk_image_pread(b->img, off, buf, b->size);
        hist_record(&b->lat, clock_ns() - t0);
        if (r < 0) {
            cmd_print_error(r);
            atomic_store(&b->failed, 1);
            break;
        }
        if (b->write && b->flush_interval &&
            (atomic_fetch_add(&b->writes, 1) + 1) % b->flush_interval == 0) {
            uint64_t f0 = clock_ns();
            pthread_mutex_lock(&b->flush_lock);
            r = blk_image_flush(b->img);
            pthread_mutex_unlock(&b->flush_lock);
            hist_record(&b->flush_lat, clock_ns() - f0);
            if (r < 0) {
                cmd_print_error(r);
                atomic_store(&b->failed, 1);
                break;
            }
        }
    }
    free(buf);
    return NULL;
}

/* The options into b, o, depth and json; -1 to go on, or the exit status. */
static int bench_options(int argc, char **argv, struct bench *b, struct blk_image_opts *o,
                         uint64_t *depth, bool *json)
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
        CMD_TLS_LONGOPTS,
        CMD_UNTRUSTED_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    int c, r;

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
            if (parse_uint(optarg, 1, 1024, depth) < 0) {
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
        case ':':
            return cmd_usage_error("bench", "option '%s' needs a value", argv[optind - 1]);
        default:
            if (cmd_image_option(c, optarg, o)) {
                break;
            }
            return cmd_usage_error("bench", "unknown option '%s'", argv[optind - 1]);
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
    o->filename = argv[optind];
    o->read_only = !b->write;
    return -1;
}

/* The first line of a human report, before the requests go out. */
static void bench_announce(const struct bench *b, uint64_t depth)
{
    printf("Sending %" PRIu64 " %s requests, %" PRIu64 " bytes each, %" PRIu64
           " in parallel (%s, starting at offset %" PRIu64 ")%s\n",
           b->count, b->write ? "write" : "read", b->size, depth, b->rand ? "random" : "sequential",
           b->offset, b->fua ? ", FUA" : "");
}

/* Opens the image, keeps depth requests in flight until count are done,
 * flushes what was written and closes it; *secs gets the time the
 * requests took.  Returns EXIT_OK or the exit status of the failure. */
static int bench_execute(struct bench *b, const struct blk_image_opts *o, uint64_t depth, bool json,
                         double *secs)
{
    int r = blk_image_open(&b->img, o);
    if (r < 0) {
        cmd_print_open_error(r, !b->write);
        return cmd_status(r, EXIT_ERROR);
    }
    uint64_t size = blk_image_size(b->img);
    if (b->offset >= size || size - b->offset < b->size) {
        blk_image_close(b->img);
        fprintf(stderr,
                "diskimg: %s is too small for %" PRIu64 "-byte requests at offset %" PRIu64 "\n",
                o->filename, b->size, b->offset);
        return EXIT_ERROR;
    }
    b->span = size - b->offset;
    pthread_mutex_init(&b->flush_lock, NULL);
    if (!json) {
        bench_announce(b, depth);
    }
    pthread_t *tid = calloc(depth, sizeof *tid);
    uint64_t started = 0, t0 = clock_ns();
    for (uint64_t i = 0; tid && i < depth; i++) {
        if (pthread_create(&tid[i], NULL, bench_worker, b) != 0) {
            break;
        }
        started++;
    }
    for (uint64_t i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
    }
    *secs = (double)(clock_ns() - t0) / 1e9;
    free(tid);
    if (!atomic_load(&b->failed) && b->write) {
        r = blk_image_flush(b->img);
    }
    blk_image_close(b->img);
    if (atomic_load(&b->failed) || started == 0 || r < 0) {
        return EXIT_ERROR;
    }
    return EXIT_OK;
}

static void bench_report_json(struct bench *b, uint64_t depth, double secs)
{
    double iops = (double)b->count / secs, mbps = iops * (double)b->size / 1e6;
    struct json_writer w;

    json_init(&w, stdout, false);
    json_begin_object(&w, NULL);
    json_str(&w, "operation", b->write ? (b->fua ? "write-fua" : "write") : "read");
    json_uint(&w, "requests", b->count);
    json_uint(&w, "request-size", b->size);
    json_uint(&w, "depth", depth);
    json_str(&w, "pattern", b->rand ? "rand" : "seq");
    json_double(&w, "seconds", secs);
    json_double(&w, "iops", iops);
    json_double(&w, "mbps", mbps);
    json_begin_object(&w, "latency-us");
    json_double(&w, "mean", (double)hist_mean(&b->lat) / 1e3);
    json_double(&w, "p50", (double)hist_quantile(&b->lat, 0.5) / 1e3);
    json_double(&w, "p90", (double)hist_quantile(&b->lat, 0.9) / 1e3);
    json_double(&w, "p99", (double)hist_quantile(&b->lat, 0.99) / 1e3);
    json_double(&w, "p99.9", (double)hist_quantile(&b->lat, 0.999) / 1e3);
    json_double(&w, "max", (double)atomic_load(&b->lat.max) / 1e3);
    json_end_object(&w);
    if (b->flush_interval) {
        json_uint(&w, "flushes", atomic_load(&b->flush_lat.count));
        json_double(&w, "flush-p50-us", (double)hist_quantile(&b->flush_lat, 0.5) / 1e3);
    }
    json_end_object(&w);
    json_finish(&w);
}

static void bench_report_human(struct bench *b, double secs)
{
    double iops = (double)b->count / secs, mbps = iops * (double)b->size / 1e6;

    printf("Run completed in %.3f seconds.\n", secs);
    printf("%.0f IOPS, %.1f MB/s; latency us: mean %.0f, p50 %.0f, p90 %.0f, p99 %.0f, "
           "p99.9 %.0f, max %.0f\n",
           iops, mbps, (double)hist_mean(&b->lat) / 1e3, (double)hist_quantile(&b->lat, 0.5) / 1e3,
           (double)hist_quantile(&b->lat, 0.9) / 1e3, (double)hist_quantile(&b->lat, 0.99) / 1e3,
           (double)hist_quantile(&b->lat, 0.999) / 1e3, (double)atomic_load(&b->lat.max) / 1e3);
    if (b->flush_interval) {
        printf("%" PRIu64 " flushes, p50 %.0f us\n", atomic_load(&b->flush_lat.count),
               (double)hist_quantile(&b->flush_lat, 0.5) / 1e3);
    }
}

static int bench_run(int argc, char **argv)
{
    struct blk_image_opts o = {
        .cache = BLK_CACHE_WRITEBACK, .discard = BLK_DISCARD_UNMAP, .options = CMD_BULK_OPTIONS};
    static struct bench b;
    uint64_t depth = 64;
    bool json = false;
    double secs = 0;

    int status = bench_options(argc, argv, &b, &o, &depth, &json);
    if (status >= 0) {
        return status;
    }
    status = bench_execute(&b, &o, depth, json, &secs);
    if (status != EXIT_OK) {
        return status;
    }
    if (json) {
        bench_report_json(&b, depth, secs);
    } else {
        bench_report_human(&b, secs);
    }
    return EXIT_OK;
}

const struct cmd cmd_bench = {
    .name = "bench",
    .summary = "measure IOPS, throughput and latency of an image or NBD export",
    .run = bench_run,
    .usage = bench_usage,
};
