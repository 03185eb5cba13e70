/* cmd/bitmap.c: "diskimg bitmap", as qemu-img bitmap: add, remove, clear,
 * enable, disable and merge persistent dirty bitmaps, several in one
 * call, applied in order.  Each operation is durable when the next one
 * starts; the first that fails stops the rest (those before it stay, as
 * with qemu-img, which saves them at close). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/bitmap.h"
#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"

#define BITMAP_MAX_ACTIONS 64

struct bitmap_action {
    enum blk_bitmap_op_kind kind;
    const char *source; /* --merge */
};

static const char *const action_names[] = {
    [BLK_BITMAP_ADD] = "add",       [BLK_BITMAP_REMOVE] = "remove",   [BLK_BITMAP_CLEAR] = "clear",
    [BLK_BITMAP_ENABLE] = "enable", [BLK_BITMAP_DISABLE] = "disable", [BLK_BITMAP_MERGE] = "merge",
};

static void bitmap_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg bitmap (--add | --remove | --clear | --enable | --disable |\n"
               "                       --merge SOURCE)... [-g GRANULARITY] [-b SOURCE_FILE\n"
               "                       [-F SOURCE_FMT]] [-f FMT] [--image-opts] [-q] IMAGE BITMAP\n"
               "\n"
               "Change the persistent dirty bitmap BITMAP of the qcow2 image IMAGE.  The\n"
               "operations run in the order given; each is on disk before the next.\n"
               "\n"
               "      --add            create BITMAP, empty and enabled (it records writes)\n"
               "      --remove         delete BITMAP\n"
               "      --clear          mark everything clean\n"
               "      --enable         record writes in BITMAP\n"
               "      --disable        stop recording writes (with --add: create it disabled)\n"
               "      --merge SOURCE   add SOURCE's dirty bits to BITMAP\n"
               "  -g, --granularity=N  bytes per bit for --add: a power of two, 512 to 2G\n"
               "                       (default: the cluster size, within 4k..64k)\n"
               "  -b SOURCE_FILE       --merge takes SOURCE from this image (read only)\n"
               "  -F SOURCE_FMT        its format (default: probe)\n"
               "  -f, --format=FMT     IMAGE's format (qcow2; default: probe)\n" CMD_IMAGE_OPTS_HELP
               "  -q, --quiet          print nothing but errors (bitmap prints nothing "
               "else)\n" CMD_TLS_HELP CMD_UNTRUSTED_HELP "  -h, --help           this help\n"
               "\n"
               "Exit status: 0 success, 1 an operation failed (its message says which),\n"
               "2 bad usage, " CMD_IN_USE_HELP ".  See diskimg-bitmap(1).\n");
}

/* The source of a merge: from IMAGE itself, or from -b's image. */
static int load_source(struct blk_image *img, struct blk_image *src_img, const char *name,
                       struct blk_bitmap **out)
{
    struct blk_image *from = src_img ? src_img : img;
    int r = blk_image_load_bitmap(from, name, out);

    if (r == -ENOENT) {
        err_clear();
        return err_setx(ENOENT, "Dirty bitmap '%s' not found", name);
    }
    return r;
}

static int run_actions(struct blk_image *img, struct blk_image *src_img,
                       const struct bitmap_action *acts, unsigned n, const char *name,
                       uint32_t granularity, bool add_disabled)
{
    for (unsigned i = 0; i < n; i++) {
        struct blk_bitmap_op op = {.kind = acts[i].kind, .name = name};
        struct blk_bitmap *src = NULL;
        int r = 0;

        if (op.kind == BLK_BITMAP_ADD) {
            op.granularity = granularity;
            op.disabled = add_disabled;
        }
        if (op.kind == BLK_BITMAP_MERGE) {
            r = load_source(img, src_img, acts[i].source, &src);
            op.source = src;
        }
        if (r == 0) {
            r = blk_image_bitmap_change(img, &op);
        }
        blk_bitmap_free(src);
        if (r < 0) {
            CLEANUP_FREE char *esc = str_escape(name);
            fprintf(stderr, "diskimg: Operation %s on bitmap %s failed: %s\n",
                    action_names[op.kind], esc ? esc : "?", err_msg());
            return cmd_status(r, EXIT_ERROR);
        }
    }
    return EXIT_OK;
}

/* What the command line asks for, beyond the image's options. */
struct bitmap_args {
    struct bitmap_action acts[BITMAP_MAX_ACTIONS];
    unsigned n_acts;
    const char *granularity, *source_file, *source_fmt;
    bool image_opts, add_disabled;
};

static int add_action(struct bitmap_args *a, enum blk_bitmap_op_kind kind, const char *source)
{
    if (a->n_acts == BITMAP_MAX_ACTIONS) {
        return cmd_usage_error("bitmap", "at most %d operations", BITMAP_MAX_ACTIONS);
    }
    a->acts[a->n_acts++] = (struct bitmap_action){kind, source};
    return 0;
}

static int parse_args(int argc, char **argv, struct bitmap_args *a, struct blk_image_opts *o)
{
    enum { OPT_ADD = 256, OPT_REMOVE, OPT_CLEAR, OPT_ENABLE, OPT_DISABLE, OPT_MERGE };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"add", no_argument, NULL, OPT_ADD},
        {"remove", no_argument, NULL, OPT_REMOVE},
        {"clear", no_argument, NULL, OPT_CLEAR},
        {"enable", no_argument, NULL, OPT_ENABLE},
        {"disable", no_argument, NULL, OPT_DISABLE},
        {"merge", required_argument, NULL, OPT_MERGE},
        {"granularity", required_argument, NULL, 'g'},
        {"source-file", required_argument, NULL, 'b'},
        {"source-format", required_argument, NULL, 'F'},
        {"format", required_argument, NULL, 'f'},
        {"quiet", no_argument, NULL, 'q'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    int c, r = 0;

    opterr = 0;
    while (r == 0 && (c = getopt_long(argc, argv, ":hg:b:F:f:q", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            bitmap_usage(stdout);
            return -1;
        case OPT_ADD:
            r = add_action(a, BLK_BITMAP_ADD, NULL);
            break;
        case OPT_REMOVE:
            r = add_action(a, BLK_BITMAP_REMOVE, NULL);
            break;
        case OPT_CLEAR:
            r = add_action(a, BLK_BITMAP_CLEAR, NULL);
            break;
        case OPT_ENABLE:
            r = add_action(a, BLK_BITMAP_ENABLE, NULL);
            break;
        case OPT_DISABLE:
            /* As qemu-img: any --disable also makes --add create it disabled. */
            a->add_disabled = true;
            r = add_action(a, BLK_BITMAP_DISABLE, NULL);
            break;
        case OPT_MERGE:
            r = add_action(a, BLK_BITMAP_MERGE, optarg);
            break;
        case 'g':
            a->granularity = optarg;
            break;
        case 'b':
            a->source_file = optarg;
            break;
        case 'F':
            a->source_fmt = optarg;
            break;
        case 'f':
            o->format = optarg;
            break;
        case 'q':
            break;
        default:
            r = cmd_image_getopt("bitmap", c, argv, &a->image_opts, o);
            break;
        }
    }
    return r;
}

/* The rules qemu-img checks before opening anything. */
static int check_args(const struct bitmap_args *a, uint32_t *granularity)
{
    bool add = false, merge = false;
    uint64_t g = 0;

    for (unsigned i = 0; i < a->n_acts; i++) {
        add |= a->acts[i].kind == BLK_BITMAP_ADD;
        merge |= a->acts[i].kind == BLK_BITMAP_MERGE;
    }
    if (a->n_acts == 0) {
        return cmd_usage_error("bitmap", "Need at least one of --add, --remove, --clear, "
                                         "--enable, --disable, or --merge");
    }
    if (a->granularity && !add) {
        return cmd_usage_error("bitmap", "granularity only supported with --add");
    }
    if (a->source_fmt && !a->source_file) {
        return cmd_usage_error("bitmap", "-F only supported with -b");
    }
    if (a->source_file && !merge) {
        return cmd_usage_error("bitmap", "Merge bitmap source file only supported with --merge");
    }
    if (a->granularity && parse_size(a->granularity, &g) < 0) {
        fprintf(stderr,
                "diskimg: bitmap: invalid granularity '%s': a size, with an optional "
                "k, M, G, T, P or E suffix\n",
                a->granularity);
        return EXIT_ERROR;
    }
    /* 0 is the default, as for qemu-img; too large is refused by the
     * format with its message, as anything not a power of two. */
    *granularity = g > UINT32_MAX ? 3 : (uint32_t)g;
    return 0;
}

static int open_images(const struct bitmap_args *a, struct blk_image_opts *o,
                       struct blk_image **img, struct blk_image **src)
{
    int r = blk_image_open(img, o);

    if (r < 0) {
        cmd_print_open_error(r, false);
        return cmd_status(r, EXIT_ERROR);
    }
    if (a->source_file && (!o->filename || strcmp(a->source_file, o->filename) != 0)) {
        struct blk_image_opts so = {
            .filename = a->source_file,
            .format = a->source_fmt,
            .read_only = true,
            .untrusted = o->untrusted,
            .options = o->options,
        };
        r = blk_image_open(src, &so);
        if (r < 0) {
            cmd_print_open_error(r, true);
            blk_image_close(*img);
            return cmd_status(r, EXIT_ERROR);
        }
    }
    return 0;
}

static int bitmap_run(int argc, char **argv)
{
    struct bitmap_args a = {0};
    struct blk_image_opts o = {0};
    struct blk_image *img = NULL, *src = NULL;
    uint32_t granularity = 0;
    int r;

    r = parse_args(argc, argv, &a, &o);
    if (r) {
        return r < 0 ? EXIT_OK : r;
    }
    if (optind < argc && strcmp(argv[optind], "--") == 0) {
        optind++;
    }
    if (argc - optind != 2) {
        return cmd_usage_error("bitmap", "Expecting filename and bitmap name");
    }
    r = check_args(&a, &granularity);
    if (r) {
        return r;
    }
    r = cmd_image_operand("bitmap", argv[optind], a.image_opts, 0, &o);
    if (r) {
        return r;
    }
    r = open_images(&a, &o, &img, &src);
    if (r) {
        return r;
    }
    r = run_actions(img, src, a.acts, a.n_acts, argv[optind + 1], granularity, a.add_disabled);
    if (src) {
        blk_image_close(src);
    }
    int r2 = blk_image_close(img);
    if (r == EXIT_OK && r2 < 0) {
        cmd_print_error(r2);
        r = EXIT_ERROR;
    }
    return r;
}

const struct cmd cmd_bitmap = {
    .name = "bitmap",
    .summary = "add, remove, clear, enable, disable or merge persistent dirty bitmaps",
    .run = bitmap_run,
    .usage = bitmap_usage,
};
