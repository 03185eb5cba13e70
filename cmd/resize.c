/* cmd/resize.c: "diskimg resize", as qemu-img resize. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/escape.h"
#include "common/util.h"

static void resize_usage(FILE *f)
{
    fprintf(f,
            "Usage: diskimg resize [--shrink] [-f FMT | --image-opts] [-q] FILE [+|-]SIZE\n"
            "\n"
            "Change the virtual size of FILE to SIZE, or by +SIZE / -SIZE.\n"
            "\n"
            "  -f, --format=FMT  image format, diskimg-formats(7) (default: probe)\n"
            "      --shrink      allow making the image smaller; qcow2 refuses if data is\n"
            "                    stored past the new end\n"
            "  -q, --quiet       do not print 'Image resized.'\n" CMD_IMAGE_OPTS_HELP CMD_TLS_HELP
                CMD_UNTRUSTED_HELP "  -h, --help        this help\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 bad usage,\n" CMD_IN_USE_HELP "\n"
            "(resizing needs the image to itself).  See diskimg-resize(1).\n");
}

static int resize_run(int argc, char **argv)
{
    enum { OPT_SHRINK = 256 };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"shrink", no_argument, NULL, OPT_SHRINK},
        {"quiet", no_argument, NULL, 'q'},
        {"force-share", no_argument, NULL, 'U'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct blk_image_opts o = {.discard = BLK_DISCARD_UNMAP};
    struct blk_image *img = NULL;
    bool shrink = false, quiet = false, image_opts = false;
    uint64_t size, cur;
    int c, r, sign = 0;

    /* The size is the last argument, taken before option parsing so that
     * "-512k" is not mistaken for an option (as qemu-img does). */
    const char *size_arg = NULL;
    if (argc >= 3 && strcmp(argv[argc - 1], "--help") != 0 && strcmp(argv[argc - 1], "-h") != 0) {
        size_arg = argv[--argc];
    }
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:qU", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            resize_usage(stdout);
            return EXIT_OK;
        case 'f':
            o.format = optarg;
            break;
        case 'q':
            quiet = true;
            break;
        case OPT_SHRINK:
            shrink = true;
            break;
        case 'U':
            return cmd_usage_error("resize", "-U (--force-share) is for commands that only "
                                             "read; resize writes");
        default:
            if ((r = cmd_image_getopt("resize", c, argv, &image_opts, &o)) != 0) {
                return r;
            }
            break;
        }
    }
    if (optind < argc && strcmp(argv[optind], "--") == 0) {
        optind++;
    }
    if (argc - optind != 1 || !size_arg) {
        return cmd_usage_error("resize", "expected FILE and SIZE");
    }
    const char *arg = size_arg;
    if (arg[0] == '+' || arg[0] == '-') {
        sign = arg[0] == '+' ? 1 : -1;
        arg++;
    }
    if (cmd_parse_image_size("resize", arg, &size) != 0) {
        return EXIT_USAGE;
    }
    r = cmd_image_operand("resize", argv[optind], image_opts, 0, &o);
    if (r) {
        return r;
    }
    o.resize = true;
    r = blk_image_open(&img, &o);
    if (r < 0) {
        cmd_print_error(r);
        return cmd_status(r, EXIT_ERROR);
    }
    /* for messages, so escaped; outlives the image */
    CLEANUP_FREE char *name = str_escape(cmd_image_name(&o, img));
    cur = blk_image_size(img);
    if (sign < 0 && size > cur) {
        blk_image_close(img);
        fprintf(stderr, "diskimg: new size would be negative\n");
        return EXIT_ERROR;
    }
    if (sign > 0 && size > CMD_MAX_IMAGE_SIZE - cur) {
        blk_image_close(img);
        fprintf(stderr,
                "diskimg: %s: growing by %s would make the image larger than 8 EiB - 1 "
                "byte\n",
                name ? name : "?", size_arg + 1);
        return EXIT_ERROR;
    }
    size = sign > 0 ? cur + size : sign < 0 ? cur - size : size;
    if (size < cur && !shrink) {
        blk_image_close(img);
        fprintf(stderr,
                "diskimg: use the --shrink option to make %s smaller (%" PRIu64 " -> %" PRIu64
                " bytes)\n",
                name ? name : "?", cur, size);
        return EXIT_ERROR;
    }
    r = blk_image_truncate(img, size);
    int r2 = blk_image_close(img);
    if (r == 0) {
        r = r2;
    }
    if (r < 0) {
        cmd_print_error(r);
        return EXIT_ERROR;
    }
    if (!quiet) {
        printf("Image resized.\n");
    }
    return EXIT_OK;
}

const struct cmd cmd_resize = {
    .name = "resize",
    .summary = "change the virtual size of an image",
    .run = resize_run,
    .usage = resize_usage,
};
