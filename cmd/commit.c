/* cmd/commit.c: "diskimg commit", as qemu-img commit: write what an
 * image holds into its backing file (or what every layer above BASE
 * holds into BASE), then empty the image unless -d (-b implies it).
 * The data step is block/commit.c; emptying is the driver's make_empty,
 * run only once the base is flushed. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "block/chain.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"
#include "progress.h"

static volatile sig_atomic_t commit_cancel;

static void commit_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg commit [-f FMT | --image-opts] [-t CACHE] [-b BASE] [-d] [-p] [-q] "
               "[-r RATE] FILE\n"
               "\n"
               "Write what FILE holds into its backing file, then empty FILE so that it\n"
               "reads through (unless -d).  With -b, everything the images above BASE in\n"
               "FILE's backing chain hold goes into BASE, and nothing is emptied.\n"
               "\n"
               "  -b BASE           the image of the chain to commit into (default: FILE's\n"
               "                    backing file); implies -d\n"
               "  -d                leave FILE as it is (do not empty it)\n"
               "  -f, --format=FMT  FILE's format (default: probe)\n"
               "  -t CACHE          cache mode (default writeback)\n"
               "  -r RATE           write at most RATE bytes a second (suffixes k, M, G)\n"
               "  -p                progress on stderr\n"
               "  -q, --quiet       do not print 'Image committed.'\n" CMD_IMAGE_OPTS_HELP
                   CMD_UNTRUSTED_HELP "  -h, --help        this help\n"
               "\n"
               "The base is written and flushed before FILE is emptied: stopped at any\n"
               "point, the chain reads as before or as committed.  An emptied qcow2 FILE\n"
               "is as small as qemu-img leaves it (rebuilt, or its clusters punched).\n"
               "\n"
               "Exit status: 0 success, 1 failure, 2 bad usage,\n" CMD_IN_USE_HELP
               ", 130/143 SIGINT/SIGTERM.\n"
               "See diskimg-commit(1).\n");
}

static void on_signal(int sig)
{
    commit_cancel = sig;
}

struct commit_args {
    struct blk_image_opts img;
    const char *base;
    bool drop, progress, quiet, image_opts;
    uint64_t rate;
};

static int commit_parse(int argc, char **argv, struct commit_args *a)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"quiet", no_argument, NULL, 'q'},
        {"progress", no_argument, NULL, 'p'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:t:b:dpqr:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            commit_usage(stdout);
            return -1;
        case 'f':
            a->img.format = optarg;
            break;
        case 't':
            if (blk_cache_mode_parse(optarg, &a->img.cache) < 0) {
                return cmd_usage_error("commit", "invalid cache mode '%s'", optarg);
            }
            break;
        case 'b':
            a->base = optarg;
            a->drop = true; /* as qemu-img: the layers above the base stay */
            break;
        case 'd':
            a->drop = true;
            break;
        case 'p':
            a->progress = true;
            break;
        case 'q':
            a->quiet = true;
            break;
        case 'r':
            if (parse_size(optarg, &a->rate) < 0 || a->rate == 0) {
                return cmd_usage_error("commit", "invalid rate limit '%s'", optarg);
            }
            break;
        default:
            if ((r = cmd_image_getopt("commit", c, argv, &a->image_opts, &a->img)) != 0) {
                return r;
            }
            break;
        }
    }
    return cmd_one_image_operand("commit", argc, argv, a->image_opts, 0, &a->img);
}

/* The depth of -b BASE in FILE's chain (1 without -b), or 0 after
 * printing why there is none.  Opens FILE as commit will (locked for
 * writing), without the base's write lock. */
static unsigned commit_base_depth(struct commit_args *a, int *status)
{
    struct blk_image *img = NULL;
    unsigned depth = 0;
    int r = blk_image_open(&img, &a->img);

    if (r < 0) {
        cmd_print_error(r);
        *status = cmd_status(r, EXIT_ERROR);
        return 0;
    }
    *status = EXIT_ERROR;
    if (!blk_image_has_backing(img)) {
        fprintf(stderr, "diskimg: Image does not have a backing file\n");
    } else if (!a->base) {
        depth = 1;
    } else if (!(depth = blk_image_chain_find(img, a->base))) {
        CLEANUP_FREE char *b = str_escape(a->base);
        CLEANUP_FREE char *f = str_escape(cmd_image_name(&a->img, img));
        fprintf(stderr, "diskimg: Did not find '%s' in the backing chain of '%s'\n", b ? b : "?",
                f ? f : "?");
    }
    blk_image_close(img);
    return depth;
}

static int commit_data(struct commit_args *a, struct blk_image *img, unsigned depth)
{
    struct cmd_progress progress;
    struct blk_chain_opts co = {
        .rate_limit = a->rate,
        .progress = cmd_progress_cb,
        .progress_opaque = &progress,
        .cancel = &commit_cancel,
    };
    int r;

    cmd_progress_start(&progress, a->progress && !a->quiet, false);
    r = blk_commit_data(img, depth, &co);
    if (r == 0 && !a->drop) {
        r = blk_image_make_empty(img);
        if (r == -ENOTSUP) {
            err_clear(); /* as qemu-img: the data is in the base, the image stays */
            r = 0;
        }
    }
    if (r == 0) {
        cmd_progress_finish(&progress, blk_image_size(img));
    } else {
        cmd_progress_abort(&progress);
    }
    return r;
}

static int commit_run(int argc, char **argv)
{
    struct commit_args a = {.img.discard = BLK_DISCARD_UNMAP};
    struct blk_image *img = NULL;
    int status, r = commit_parse(argc, argv, &a);
    unsigned depth;

    if (r != 0) {
        return r < 0 ? EXIT_OK : r;
    }
    depth = commit_base_depth(&a, &status);
    if (!depth) {
        return status;
    }
    a.img.write_backing_depth = depth;
    r = blk_image_open(&img, &a.img);
    if (r < 0) {
        cmd_print_error(r);
        return cmd_status(r, EXIT_ERROR);
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    r = commit_data(&a, img, depth);
    status = cmd_close_status(img, r, &commit_cancel);
    if (status == EXIT_OK && !a.quiet) {
        printf("Image committed.\n");
    }
    return status;
}

const struct cmd cmd_commit = {
    .name = "commit",
    .summary = "write an image's data into its backing file",
    .run = commit_run,
    .usage = commit_usage,
};
