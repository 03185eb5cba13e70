/* cmd/rebase.c: "diskimg rebase", as qemu-img rebase: record another
 * backing file in an image.  Safe mode first writes into the image what
 * its guest would read differently through the new backing file
 * (block/rebase.c), then changes the header; -u changes only the header. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "block/block.h"
#include "block/chain.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"
#include "progress.h"

static volatile sig_atomic_t rebase_cancel;

static void rebase_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg rebase [-f FMT | --image-opts] [-t CACHE] [-T SRC_CACHE] [-p] [-u] "
               "[-U] [-q]\n"
               "                      -b BACKING [-F BACKING_FMT] FILE\n"
               "\n"
               "Make BACKING the backing file of FILE (qcow2).  Safe mode (the default) keeps\n"
               "what the guest reads: wherever FILE holds nothing itself, it gets the data its\n"
               "current backing chain and BACKING disagree on, then the header names BACKING.\n"
               "-b \"\" detaches FILE from any backing file.\n"
               "\n"
               "  -b BACKING        the new backing file, stored as given (a relative name is\n"
               "                    taken from FILE's directory); \"\" for none\n"
               "  -F BACKING_FMT    its format: needed with a non-empty -b, as in qemu-img\n"
               "  -f, --format=FMT  FILE's format (default: probe)\n"
               "  -u                unsafe: change only the header (the backing files are\n"
               "                    not opened; the guest view changes unless they agree)\n"
               "  -t CACHE          FILE's cache mode (default writeback)\n"
               "  -T SRC_CACHE      the backing files' cache mode (default writeback)\n"
               "  -U, --force-share open BACKING even when another process writes it\n"
               "  -p                progress on stderr\n"
               "  -q, --quiet       quiet\n" CMD_IMAGE_OPTS_HELP CMD_UNTRUSTED_HELP
               "  -h, --help        this help\n"
               "\n"
               "Exit status: 0 success, 1 failure (FILE unchanged but for data that keeps\n"
               "its guest view), 2 bad usage,\n" CMD_IN_USE_HELP ", 130/143 SIGINT/SIGTERM.\n"
               "See diskimg-rebase(1).\n");
}

static void on_signal(int sig)
{
    rebase_cancel = sig;
}

struct rebase_args {
    struct blk_image_opts img, backing;
    const char *name;   /* -b, NULL: not given */
    const char *format; /* -F */
    bool unsafe, progress, quiet, image_opts;
};

static int parse_cache(const char *arg, enum blk_cache_mode *out)
{
    if (blk_cache_mode_parse(arg, out) < 0) {
        return cmd_usage_error("rebase", "invalid cache mode '%s'", arg);
    }
    return 0;
}

static int rebase_parse(int argc, char **argv, struct rebase_args *a)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"quiet", no_argument, NULL, 'q'},
        {"force-share", no_argument, NULL, 'U'},
        {"progress", no_argument, NULL, 'p'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:F:b:ut:T:Upq", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            rebase_usage(stdout);
            return -1;
        case 'f':
            a->img.format = optarg;
            break;
        case 'F':
            a->format = optarg;
            break;
        case 'b':
            a->name = optarg;
            break;
        case 'u':
            a->unsafe = true;
            break;
        case 't':
            if ((r = parse_cache(optarg, &a->img.cache)) != 0) {
                return r;
            }
            break;
        case 'T':
            if ((r = parse_cache(optarg, &a->backing.cache)) != 0) {
                return r;
            }
            break;
        case 'U':
            a->backing.force_share = true;
            break;
        case 'p':
            a->progress = true;
            break;
        case 'q':
            a->quiet = true;
            break;
        default:
            if ((r = cmd_image_getopt("rebase", c, argv, &a->image_opts, &a->img)) != 0) {
                return r;
            }
            break;
        }
    }
    if ((r = cmd_one_image_operand("rebase", argc, argv, a->image_opts, 0, &a->img)) != 0) {
        return r;
    }
    if (!a->unsafe && !a->name) {
        return cmd_usage_error("rebase", "Must specify backing file (-b) or use unsafe mode (-u)");
    }
    return 0;
}

/* name as the overlay's guest will find it: relative to its directory. */
static char *backing_path(const char *overlay, const char *name)
{
    const char *slash = overlay ? strrchr(overlay, '/') : NULL; /* NULL: named by keys */
    char *out = NULL;

    if (name[0] == '/' || !slash || strstr(name, "://")) {
        return strdup(name);
    }
    if (asprintf(&out, "%.*s/%s", (int)(slash - overlay), overlay, name) < 0) {
        return NULL;
    }
    return out;
}

/* Would the image become its own backing file?  Refused in both modes:
 * qemu-img -u writes such a header, which no tool can open again. */
static bool names_itself(const char *overlay, const char *name)
{
    CLEANUP_FREE char *path = backing_path(overlay, name);
    struct stat a, b;

    return path && overlay && stat(overlay, &a) == 0 && stat(path, &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Safe mode's data step, with the new backing file open. */
static int rebase_data(struct rebase_args *a, struct blk_image *img)
{
    struct blk_image *newb = NULL;
    struct cmd_progress progress;
    unsigned new_depth = 0;
    char *path = NULL;
    int r = 0;

    if (a->name) {
        path = backing_path(a->img.filename, a->name);
        if (!path) {
            return err_set(ENOMEM, "backing file name");
        }
        new_depth = blk_image_chain_find(img, path);
        a->backing.filename = path;
        a->backing.format = a->format;
        a->backing.read_only = true;
        a->backing.untrusted = a->img.untrusted;
        r = blk_image_open(&newb, &a->backing);
        if (r < 0) {
            CLEANUP_FREE char *esc = str_escape(a->name);
            err_prefix("Could not open new backing file '%s'", esc ? esc : "?");
            free(path);
            return r;
        }
    }
    cmd_progress_start(&progress, a->progress && !a->quiet, false);
    struct blk_chain_opts co = {
        .progress = cmd_progress_cb,
        .progress_opaque = &progress,
        .cancel = &rebase_cancel,
    };
    r = blk_rebase_data(img, newb, new_depth, &co);
    if (r == 0) {
        cmd_progress_finish(&progress, blk_image_size(img));
    } else {
        cmd_progress_abort(&progress);
    }
    blk_image_close(newb);
    free(path);
    return r;
}

static int rebase_run(int argc, char **argv)
{
    struct rebase_args a = {.img.discard = BLK_DISCARD_UNMAP};
    struct blk_image *img = NULL;
    int r = rebase_parse(argc, argv, &a);

    if (r != 0) {
        return r < 0 ? EXIT_OK : r;
    }
    if (a.name && !a.name[0]) {
        a.name = NULL; /* -b "": no backing file (a format is then ignored) */
    }
    if (a.name && !a.format) {
        /* qemu-img 7.2 refuses too, but only after safe mode's copy. */
        CLEANUP_FREE char *esc = str_escape(a.name);
        fprintf(stderr,
                "diskimg: Could not change the backing file to '%s': backing format must be "
                "specified (-F)\n",
                esc ? esc : "?");
        return EXIT_ERROR;
    }
    if (a.name && names_itself(a.img.filename, a.name)) {
        CLEANUP_FREE char *esc = str_escape(a.name);
        fprintf(stderr,
                "diskimg: Could not change the backing file to '%s': that is the image itself\n",
                esc ? esc : "?");
        return EXIT_ERROR;
    }
    a.img.no_backing = a.unsafe; /* -u: the old chain is not read */
    r = blk_image_open(&img, &a.img);
    if (r < 0) {
        cmd_print_error(r);
        return cmd_status(r, EXIT_ERROR);
    }
    if (!blk_image_can_change_backing(img)) {
        CLEANUP_FREE char *esc = str_escape(a.name ? a.name : "");
        fprintf(stderr,
                "diskimg: Could not change the backing file to '%s': Operation not supported "
                "(%s images record no backing file diskimg can change)\n",
                esc ? esc : "?", blk_image_format(img));
        blk_image_close(img);
        return EXIT_ERROR;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (!a.unsafe) {
        r = rebase_data(&a, img);
    }
    if (r == 0) {
        r = blk_image_change_backing(img, a.name, a.format);
    }
    return cmd_close_status(img, r, &rebase_cancel);
}

const struct cmd cmd_rebase = {
    .name = "rebase",
    .summary = "change the backing file of an image",
    .run = rebase_run,
    .usage = rebase_usage,
};
