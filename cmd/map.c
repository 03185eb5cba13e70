/* cmd/map.c: "diskimg map", as qemu-img map: which ranges of the virtual
 * disk hold data, read as zeroes, or come from a backing file, and where
 * they are stored.  Same JSON fields and layout as qemu-img. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/escape.h"
#include "common/util.h"

static void map_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg map [-f FMT | --image-opts] [--output=human|json]\n"
               "                   [--start-offset=OFF] [--max-length=LEN] [-U] FILE\n"
               "\n"
               "Show how FILE's virtual disk maps to data, zeroes and backing files.\n"
               "\n"
               "  -f, --format=FMT     image format, diskimg-formats(7) (default: probe)\n"
               "  -U, --force-share    map the image even while another process writes it\n"
               "      --output=FMT     human (default): data ranges with their file offsets;\n"
               "                       json: every range with start, length, depth, present,\n"
               "                       zero, data and offset, as qemu-img map\n"
               "  -s, --start-offset=OFF   start there (default 0)\n"
               "  -l, --max-length=LEN     stop after LEN bytes\n"
               "      --detail         what diskimg knows where qemu-img's driver knows\n"
               "                       less (vpc, vhdx): holes inside blocks, "
               "offsets\n" CMD_IMAGE_OPTS_HELP CMD_TLS_HELP CMD_UNTRUSTED_HELP
               "  -h, --help           this help\n"
               "\n"
               "Exit status: 0 success, 1 failure, 2 bad usage,\n" CMD_IN_USE_HELP ".\n"
               "See diskimg-map(1).\n");
}

/* One output range, in qemu-img's terms. */
struct map_entry {
    uint64_t start, length;
    unsigned depth;
    bool present, zero, data, has_offset;
    uint64_t offset;
    const char *filename;
};

static bool map_mergeable(const struct map_entry *a, const struct map_entry *b)
{
    return a->depth == b->depth && a->present == b->present && a->zero == b->zero &&
           a->data == b->data && a->has_offset == b->has_offset &&
           (!a->has_offset || (a->offset + a->length == b->offset && a->filename == b->filename));
}

static int map_print(const struct map_entry *e, bool json, bool first)
{
    if (json) {
        printf("%s{ \"start\": %" PRIu64 ", \"length\": %" PRIu64 ", \"depth\": %u, \"present\": "
               "%s, \"zero\": %s, \"data\": %s",
               first ? "[" : ",\n", e->start, e->length, e->depth, e->present ? "true" : "false",
               e->zero ? "true" : "false", e->data ? "true" : "false");
        if (e->has_offset) {
            printf(", \"offset\": %" PRIu64, e->offset);
        }
        printf("}");
        return 0;
    }
    if (e->data && !e->has_offset) {
        /* qemu-img's words: data at no known offset (compressed, or a
         * driver that cannot say where) has no human line. */
        fprintf(stderr, "diskimg: File contains external, encrypted or compressed clusters.\n");
        return -1;
    }
    if (!e->data || e->zero) {
        return 0; /* only ranges with data stored in a file */
    }
    /* The file may be a backing file, named by the image: escaped. */
    CLEANUP_FREE char *shown = cmd_display_name(e->filename ? e->filename : "");
    CLEANUP_FREE char *file = str_escape(shown ? shown : "");
    printf("%#-16" PRIx64 "%#-16" PRIx64 "%#-16" PRIx64 "%s\n", e->start, e->length, e->offset,
           file ? file : "?");
    return 0;
}

static int map_run(int argc, char **argv)
{
    enum { OPT_OUTPUT = 256, OPT_DETAIL };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"start-offset", required_argument, NULL, 's'},
        {"max-length", required_argument, NULL, 'l'},
        {"force-share", no_argument, NULL, 'U'},
        {"detail", no_argument, NULL, OPT_DETAIL},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct blk_image_opts o = {.read_only = true};
    bool image_opts = false;
    struct blk_image *img = NULL;
    uint64_t start = 0, max_len = UINT64_MAX;
    bool json = false, first = true, have = false, detail = false;
    struct map_entry cur = {0};
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:s:l:U", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            map_usage(stdout);
            return EXIT_OK;
        case 'f':
            o.format = optarg;
            break;
        case OPT_OUTPUT:
            if ((r = cmd_parse_output("map", optarg, &json)) != 0) {
                return r;
            }
            break;
        case 's':
            if (parse_size(optarg, &start) < 0) {
                return cmd_usage_error("map", "invalid start offset '%s'", optarg);
            }
            break;
        case 'l':
            if (parse_size(optarg, &max_len) < 0) {
                return cmd_usage_error("map", "invalid length '%s'", optarg);
            }
            break;
        case 'U':
            o.force_share = true;
            break;
        case OPT_DETAIL:
            detail = true;
            break;
        default:
            if ((r = cmd_image_getopt("map", c, argv, &image_opts, &o)) != 0) {
                return r;
            }
            break;
        }
    }
    r = cmd_one_image_operand("map", argc, argv, image_opts, 0, &o);
    if (r) {
        return r;
    }
    r = blk_image_open(&img, &o);
    if (r < 0) {
        cmd_print_open_error(r, true);
        return cmd_status(r, EXIT_ERROR);
    }
    uint64_t size = blk_image_size(img);
    uint64_t end = start < size ? start + MIN(max_len, size - start) : start;
    if (!json) {
        printf("%-16s%-16s%-16s%s\n", "Offset", "Length", "Mapped to", "File");
    }
    for (uint64_t pos = start; pos < end && r == 0;) {
        struct blk_extent ext;
        r = detail ? blk_image_block_status(img, pos, end - pos, &ext)
                   : blk_image_map_status(img, pos, end - pos, &ext);
        if (r < 0) {
            cmd_print_error(r);
            break;
        }
        struct map_entry e = {
            .start = pos,
            .length = ext.length,
            .depth = ext.layer,
            .present = ext.flags & BLK_EXT_ALLOCATED,
            .zero = ext.flags & BLK_EXT_ZERO,
            .data = ext.flags & BLK_EXT_DATA,
            .has_offset = ext.flags & BLK_EXT_OFFSET,
            .offset = ext.offset,
            .filename = ext.filename,
        };
        if (have && map_mergeable(&cur, &e)) {
            cur.length += e.length;
        } else {
            if (have) {
                r = map_print(&cur, json, first);
                first = false;
            }
            cur = e;
            have = true;
        }
        pos += ext.length;
    }
    if (r == 0 && !have) {
        /* Nothing to map (a 0-byte image, a start past the end): qemu-img
         * still prints one empty entry there. */
        cur = (struct map_entry){.start = start};
        have = true;
    }
    if (r == 0 && have) {
        r = map_print(&cur, json, first);
        first = false;
    }
    if (json) {
        printf("%s]\n", first ? "[" : "");
    }
    blk_image_close(img);
    return r < 0 ? EXIT_ERROR : EXIT_OK;
}

const struct cmd cmd_map = {
    .name = "map",
    .summary = "show how the virtual disk maps to data, zeroes and files",
    .run = map_run,
    .usage = map_usage,
};
