/* cmd/measure.c: "diskimg measure", as qemu-img measure: how large a file
 * an image of the output format needs, for a disk of a given size or to
 * hold a source image's content.  The arithmetic is each format's own
 * (its driver's measure op); this file parses options and prints qemu-img's
 * lines and JSON. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/error.h"

static void measure_usage(FILE *f)
{
    fprintf(
        f,
        "Usage: diskimg measure [--output=human|json] [-O OUTPUT_FMT] [-o OPTIONS]\n"
        "                       (--size N | [-f FMT | --image-opts] [-l SNAPSHOT] [-U] IMAGE)\n"
        "\n"
        "Print the file size an image of OUTPUT_FMT needs: for an empty disk of N\n"
        "bytes, or to hold IMAGE's content (its data clusters; ranges that read as\n"
        "zeroes need none).  The same numbers as qemu-img measure where it has them.\n"
        "\n"
        "  -O OUTPUT_FMT          the output format (default raw): raw, qcow2 (with\n"
        "                         qemu-img's numbers), vpc, vhdx, vdi, vmdk (qemu-img\n"
        "                         cannot: the size of the file diskimg convert writes;\n"
        "                         a bound for vmdk streamOptimized, deflated grains)\n"
        "  -o OPTIONS             the output format's creation options, as for create\n"
        "                         (qcow2: cluster_size, refcount_bits, extended_l2,\n"
        "                         compat, preallocation, backing_file change the\n"
        "                         numbers; the others: subformat, block_size...)\n"
        "      --size=N           measure an empty disk of N bytes (suffixes k, M, G...)\n"
        "  -f, --format=FMT       IMAGE's format, diskimg-formats(7) (default: probe)\n"
        "  -l SNAPSHOT            measure an internal snapshot of IMAGE\n"
        "  -U, --force-share      read IMAGE even while another process writes it\n"
        "      --output=FMT       human (default): 'required size: N', 'fully allocated\n"
        "                         size: N' and, for a qcow2 v3 IMAGE into qcow2 v3,\n"
        "                         'bitmaps size: N'; json: qemu-img's fields\n" CMD_IMAGE_OPTS_HELP
            CMD_TLS_HELP CMD_UNTRUSTED_HELP "  -h, --help             this help\n"
        "\n"
        "required: the file holding IMAGE's data (or an empty disk) with the metadata\n"
        "a fully allocated image has; fully allocated: every cluster allocated;\n"
        "bitmaps: IMAGE's persistent bitmaps, on top of required.\n"
        "\n"
        "Exit status: 0 success, 1 failure (also an unknown output format),\n"
        "2 bad usage, " CMD_IN_USE_HELP ".\n"
        "See diskimg-measure(1).\n");
}

struct measure_args {
    struct blk_image_opts img;
    struct blk_create_opts out;
    char *options; /* merged -o */
    bool json;
    bool size_given;
    bool image_opts;
    bool have_image;
    const char *snapshot;
};

static int measure_parse(int argc, char **argv, struct measure_args *a)
{
    enum { OPT_OUTPUT = 256, OPT_SIZE };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"size", required_argument, NULL, OPT_SIZE},
        {"force-share", no_argument, NULL, 'U'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:O:o:l:U", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            measure_usage(stdout);
            return -1;
        case 'f':
            a->img.format = optarg;
            break;
        case 'O':
            a->out.format = optarg;
            break;
        case 'o':
            if (!cmd_append_options(&a->options, optarg)) {
                fprintf(stderr, "diskimg: out of memory\n");
                return EXIT_ERROR;
            }
            break;
        case 'l':
            if ((r = cmd_snapshot_param("measure", optarg, &a->img)) != 0) {
                return r;
            }
            a->snapshot = optarg;
            break;
        case 'U':
            a->img.force_share = true;
            break;
        case OPT_OUTPUT:
            if ((r = cmd_parse_output("measure", optarg, &a->json)) != 0) {
                return r;
            }
            break;
        case OPT_SIZE:
            if ((r = cmd_parse_image_size("measure", optarg, &a->out.size)) != 0) {
                return r;
            }
            a->size_given = true;
            break;
        default:
            if ((r = cmd_image_getopt("measure", c, argv, &a->image_opts, &a->img)) != 0) {
                return r;
            }
            break;
        }
    }
    if (argc - optind > 1) {
        return cmd_usage_error("measure", "at most one IMAGE is allowed");
    }
    a->have_image = optind < argc;
    if (!a->have_image && (a->img.format || a->snapshot || a->image_opts)) {
        return cmd_usage_error("measure", "%s an IMAGE",
                               a->image_opts ? "--image-opts needs" : "-f and -l need");
    }
    if (a->have_image && a->size_given) {
        return cmd_usage_error("measure", "--size N cannot be used together with an IMAGE");
    }
    if (!a->have_image && !a->size_given) {
        return cmd_usage_error("measure", "either --size N or one IMAGE must be given");
    }
    if (a->have_image &&
        (r = cmd_image_operand("measure", argv[optind], a->image_opts, 0, &a->img)) != 0) {
        return r;
    }
    a->out.options = a->options;
    return 0;
}

static void measure_print(const struct blk_measure *m, bool json)
{
    if (json) {
        /* qemu-img's field order: bitmaps first. */
        printf("{\n");
        if (m->has_bitmaps) {
            printf("    \"bitmaps\": %" PRIu64 ",\n", m->bitmaps);
        }
        printf("    \"required\": %" PRIu64 ",\n", m->required);
        printf("    \"fully-allocated\": %" PRIu64 "\n}\n", m->fully_allocated);
        return;
    }
    printf("required size: %" PRIu64 "\n", m->required);
    printf("fully allocated size: %" PRIu64 "\n", m->fully_allocated);
    if (m->has_bitmaps) {
        printf("bitmaps size: %" PRIu64 "\n", m->bitmaps);
    }
}

static int measure_run(int argc, char **argv)
{
    struct measure_args a = {
        .img = {.read_only = true},
        .out = {.format = "raw"},
    };
    struct blk_image *src = NULL;
    struct blk_measure m;
    int r = measure_parse(argc, argv, &a);

    if (r != 0) {
        free(a.options);
        return r < 0 ? EXIT_OK : r;
    }
    if (a.have_image && (r = blk_image_open(&src, &a.img)) < 0) {
        cmd_print_open_error(r, true);
        free(a.options);
        return cmd_status(r, EXIT_ERROR);
    }
    r = blk_measure(&a.out, src, &m);
    if (r < 0) {
        cmd_print_error(r);
    } else {
        measure_print(&m, a.json);
    }
    blk_image_close(src);
    free(a.options);
    return r < 0 ? EXIT_ERROR : EXIT_OK;
}

const struct cmd cmd_measure = {
    .name = "measure",
    .summary = "show the file size a new image needs (like qemu-img measure)",
    .run = measure_run,
    .usage = measure_usage,
};
