/* cmd/create.c: "diskimg create", as qemu-img create. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/escape.h"
#include "common/util.h"
#include "nbd/uri.h"

static void create_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg create [-f FMT] [-o OPTIONS] [-b BACKING [-F FMT]] [-u] [-q]\n"
               "                      [--reproducible] FILE [SIZE]\n"
               "\n"
               "Create a new image FILE (replacing an existing file).\n"
               "\n"
               "  -f, --format=FMT     raw (default), qcow2, vpc, vmdk, vhdx: diskimg-formats(7)\n"
               "  -o OPTIONS           format options, key=value,...; -o help lists them\n"
               "  -b BACKING           backing file (qcow2); SIZE defaults to its size\n"
               "  -F FMT               format of the backing file (probed if not given)\n"
               "  -u                   do not open the backing file (needs SIZE and -F)\n"
               "  -q                   quiet: do not print the 'Formatting' line\n"
               "      --untrusted      open the -b file alone, for its size only (nothing it\n"
               "                       names); its format must be given or unambiguous\n"
               "      --reproducible   the same command gives the same bytes: times from\n"
               "                       SOURCE_DATE_EPOCH (0 if unset), IDs from format,\n"
               "                       options and size; on whenever SOURCE_DATE_EPOCH is set\n"
               "  -h, --help           this help\n"
               "\n"
               "SIZE takes the suffixes k, M, G, T, P, E (powers of 1024).\n"
               "An existing FILE that another process uses (qemu's image locks) is left as it\n"
               "was.\n"
               "Exit status: 0 success, 1 failure, 2 bad usage (or a malformed "
               "SOURCE_DATE_EPOCH),\n" CMD_IN_USE_HELP ".\n"
               "See diskimg-create(1).\n");
}

static int create_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"force-share", no_argument, NULL, 'U'},
        CMD_UNTRUSTED_LONGOPT,
        CMD_REPRODUCIBLE_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    struct blk_create_opts o = {.format = "raw"};
    bool quiet = false, unsafe_backing = false, reproducible = false;
    char *summary = NULL;
    CLEANUP_FREE char *options = NULL;
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:o:b:F:uqU", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            create_usage(stdout);
            return EXIT_OK;
        case 'f':
            o.format = optarg;
            break;
        case 'o':
            if (!cmd_append_options(&options, optarg)) {
                return EXIT_ERROR;
            }
            o.options = options;
            break;
        case 'b':
            o.backing_file = optarg;
            break;
        case 'F':
            o.backing_format = optarg;
            break;
        case 'u':
            unsafe_backing = true;
            break;
        case 'q':
            quiet = true;
            break;
        case 'U':
            return cmd_usage_error("create", "-U (--force-share) is for commands that only "
                                             "read; create writes");
        case CMD_OPT_UNTRUSTED:
            o.untrusted = true;
            break;
        case CMD_OPT_REPRODUCIBLE:
            reproducible = true;
            break;
        case ':':
            return cmd_usage_error("create", "option '%s' needs a value", argv[optind - 1]);
        default:
            return cmd_usage_error("create", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (o.options && strcmp(o.options, "help") == 0) {
        const char *help = blk_create_options_help(o.format);
        if (!help) {
            return cmd_usage_error("create", "unknown format '%s'", o.format);
        }
        fputs(help, stdout);
        return EXIT_OK;
    }
    if (optind >= argc || argc - optind > 2) {
        return cmd_usage_error("create", "expected FILE [SIZE]");
    }
    o.filename = argv[optind];
    if (argc - optind == 2) {
        if (cmd_parse_image_size("create", argv[optind + 1], &o.size) != 0) {
            return EXIT_USAGE;
        }
        o.size_set = true;
    }
    if (unsafe_backing && (!o.size_set || !o.backing_format)) {
        return cmd_usage_error("create", "-u needs a SIZE and -F, since the backing file is not "
                                         "opened");
    }
    o.no_open_backing = unsafe_backing;
    if ((r = cmd_repro_setup(reproducible, &o)) != 0) {
        return r;
    }
    if (nbd_uri_is(o.filename)) {
        CLEANUP_FREE char *esc = str_escape(o.filename);
        fprintf(stderr,
                "diskimg: %s: an NBD export exists already and cannot be created; "
                "write into it with 'diskimg convert'\n",
                esc ? esc : "?");
        return EXIT_ERROR;
    }
    r = blk_create(&o, &summary);
    if (r < 0) {
        cmd_print_error(r);
        return cmd_status(r, EXIT_ERROR);
    }
    if (!quiet) {
        printf("Formatting '%s', %s\n", o.filename, summary ? summary : "");
    }
    free(summary);
    return EXIT_OK;
}

const struct cmd cmd_create = {
    .name = "create",
    .summary = "create a raw, qcow2 or other image (like qemu-img create)",
    .run = create_run,
    .usage = create_usage,
};
