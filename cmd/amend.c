/* cmd/amend.c: "diskimg amend", as qemu-img amend: change a qcow2 image's
 * format options (compat, lazy_refcounts, refcount_bits, size) in place.
 * The work is the format driver's (its amend op, block/amend.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/util.h"

static void amend_usage(FILE *f)
{
    fprintf(f,
            "Usage: diskimg amend [-f FMT] [-p] [-q] [-t CACHE] [--force] [--image-opts]\n"
            "                     [--untrusted] -o OPTIONS IMAGE\n"
            "\n"
            "Change the format options of IMAGE in place, as qemu-img amend: qcow2's\n"
            "compat=0.10|1.1, lazy_refcounts=on|off, refcount_bits=1..64 and size;\n"
            "backing_file and backing_fmt only as they are (use rebase to change them).\n"
            "'-o help' lists them.  Everything is checked before anything is written.\n"
            "\n"
            "  -f, --format=FMT  image format (default: probe); only qcow2 can amend\n"
            "  -o OPTIONS        KEY=VALUE[,KEY=VALUE...] (may be repeated)\n"
            "  -p, --progress    show progress: qemu-img's (NN.NN/100%%) line, on stderr\n"
            "  -q, --quiet       print nothing but errors\n"
            "  -t CACHE          cache mode (default: writeback)\n"
            "      --force       accepted for qemu-img compatibility (LUKS "
            "keyslots)\n" CMD_IMAGE_OPTS_HELP CMD_UNTRUSTED_HELP "  -h, --help        this help\n"
            "\n"
            "Exit status: 0 success, 1 failure (the image is left as it was), 2 bad "
            "usage,\n" CMD_IN_USE_HELP ".  See diskimg-amend(1).\n");
}

/* -o help: the format given, or the image's. */
static int print_help(const char *format, struct blk_image_opts *o, bool have_image)
{
    struct blk_image *img = NULL;
    int r;

    if (!format) {
        if (!have_image) {
            return cmd_usage_error("amend", "Expecting one image file name");
        }
        struct blk_image_opts ro = *o;
        ro.read_only = true;
        ro.force_share = true;
        ro.no_backing = true;
        r = blk_image_open(&img, &ro);
        if (r < 0) {
            cmd_print_open_error(r, true);
            return cmd_status(r, EXIT_ERROR);
        }
        format = blk_image_format(img);
    }
    const char *help = blk_amend_options_help(format);
    if (help) {
        printf("Amend options for '%s':\n%s", format, help);
    } else {
        cmd_print_error(-EINVAL);
    }
    if (img) {
        blk_image_close(img);
    }
    return help ? EXIT_OK : EXIT_ERROR;
}

/* -p: qemu-img's "    (42.00/100%)" line, on stderr, redrawn when the
 * hundredth of a percent changes.  No rate: the work is metadata. */
struct amend_progress_line {
    bool on;
    long last; /* hundredths of a percent drawn, -1: none */
};

static void progress_draw(struct amend_progress_line *p, long hundredths)
{
    if (p->on && hundredths != p->last) {
        fprintf(stderr, "    (%ld.%02ld/100%%)\r", hundredths / 100, hundredths % 100);
        fflush(stderr);
        p->last = hundredths;
    }
}

static void progress_cb(void *opaque, uint64_t done, uint64_t total)
{
    if (total) {
        progress_draw(opaque, (long)((double)MIN(done, total) * 10000.0 / (double)total));
    }
}

static bool has_help(const char *options)
{
    CLEANUP_FREE char *copy = strdup(options);

    for (char *save = NULL, *t = copy ? strtok_r(copy, ",", &save) : NULL; t;
         t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "help") == 0 || strcmp(t, "?") == 0) {
            return true;
        }
    }
    return false;
}

static int amend_run(int argc, char **argv)
{
    enum { OPT_FORCE = 256 };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"options", required_argument, NULL, 'o'},
        {"progress", no_argument, NULL, 'p'},
        {"quiet", no_argument, NULL, 'q'},
        {"cache", required_argument, NULL, 't'},
        {"force", no_argument, NULL, OPT_FORCE},
        {"image-opts", no_argument, NULL, CMD_OPT_IMAGE_OPTS},
        {"force-share", no_argument, NULL, 'U'},
        CMD_UNTRUSTED_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    struct blk_image_opts o = {.cache = BLK_CACHE_WRITEBACK};
    CLEANUP_FREE char *options = NULL;
    bool progress = false, quiet = false, force = false, image_opts = false;
    struct blk_image *img = NULL;
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:o:pqt:U", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            amend_usage(stdout);
            return EXIT_OK;
        case 'f':
            o.format = optarg;
            break;
        case 'o':
            if (!cmd_append_options(&options, optarg)) {
                return cmd_usage_error("amend", "out of memory");
            }
            break;
        case 'p':
            progress = true;
            break;
        case 'q':
            quiet = true;
            break;
        case 't':
            if (blk_cache_mode_parse(optarg, &o.cache) < 0) {
                return cmd_usage_error("amend", "invalid cache mode '%s'", optarg);
            }
            break;
        case OPT_FORCE:
            force = true;
            break;
        case 'U':
            return cmd_usage_error("amend", "-U (--force-share) is for commands that only "
                                            "read; amend writes");
        default:
            if ((r = cmd_image_getopt("amend", c, argv, &image_opts, &o)) != 0) {
                return r;
            }
            break;
        }
    }
    if (optind < argc && strcmp(argv[optind], "--") == 0) {
        optind++;
    }
    if (!options) {
        return cmd_usage_error("amend", "Must specify options (-o)");
    }
    if (argc - optind > 1) {
        return cmd_usage_error("amend", "Expecting one image file name");
    }
    if (optind < argc) {
        r = cmd_image_operand("amend", argv[optind], image_opts, CMD_IMAGE_OPTS_CACHE, &o);
        if (r) {
            return r;
        }
    }
    if (has_help(options)) {
        return print_help(o.format, &o, optind < argc);
    }
    if (optind == argc) {
        return cmd_usage_error("amend", "Expecting one image file name");
    }
    /* size= may change the virtual size. */
    CLEANUP_FREE char *lookup = malloc(strlen(options) + 2);
    if (lookup) {
        sprintf(lookup, ",%s", options);
        o.resize = strstr(lookup, ",size=") != NULL;
    }
    /* Metadata only: a file it names is not needed, and never opened
     * when the image is untrusted. */
    o.no_backing = o.untrusted;
    r = blk_image_open(&img, &o);
    if (r < 0) {
        cmd_print_open_error(r, false);
        return cmd_status(r, EXIT_ERROR);
    }
    struct amend_progress_line prog = {.on = progress && !quiet, .last = -1};
    progress_draw(&prog, 0);
    r = blk_image_amend(img, options, force, progress_cb, &prog);
    int r2 = blk_image_close(img);
    if (r == 0) {
        r = r2;
    }
    if (prog.on) {
        if (r == 0) {
            progress_draw(&prog, 10000);
        }
        fputc('\n', stderr);
    }
    if (r < 0) {
        cmd_print_error(r);
        return EXIT_ERROR;
    }
    return EXIT_OK;
}

const struct cmd cmd_amend = {
    .name = "amend",
    .summary = "change a qcow2 image's format options in place",
    .run = amend_run,
    .usage = amend_usage,
};
