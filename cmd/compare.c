/* cmd/compare.c: "diskimg compare", as qemu-img compare: do two images
 * read the same?  Options, opening the images and printing the verdict;
 * the comparison itself is block/compare.c's.  Exit codes are qemu-img's:
 * 0 identical, 1 different, 2 an image could not be opened, 3 block
 * status failed, 4 a read failed; and 5, an image is in use by another
 * process.  Like convert, a comparison is one pass: by default both images
 * stream (what is read cold leaves the page cache again). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "block/compare.h"
#include "cmd.h"
#include "progress.h"
#include "common/cleanup.h"

#define EXIT_CMP_DIFFERENT 1
#define EXIT_CMP_OPEN 2
#define EXIT_CMP_STATUS 3
#define EXIT_CMP_READ 4

static void compare_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg compare [-f FMT] [-F FMT | --image-opts] [-s]\n"
               "                       [-p | --progress=json] [-q] [-T CACHE] IMAGE1 IMAGE2\n"
               "\n"
               "Compare the contents of two images (files or NBD URIs).\n"
               "\n"
               "  -f FMT    format of IMAGE1 (default: probe)\n"
               "  -F FMT    format of IMAGE2 (default: probe)\n"
               "  -s        strict: sizes and block status (data, zero, allocated,\n"
               "            offset) must match too, as qemu-img compare -s\n"
               "  -p        progress on stderr (percent, rate, time left)\n"
               "  --progress=json  progress as JSON lines on stderr\n"
               "  -q        quiet: only the exit status\n"
               "  -U, --force-share  compare even while another process writes an image\n"
               "  -T CACHE  cache mode of both images (default: writeback, streaming:\n"
               "            data read into the page cache leaves it once read)\n"
               "      --image-opts       IMAGE1 and IMAGE2 are options: driver=FMT,\n"
               "                         file.filename=PATH[,KEY=VALUE...], or\n"
               "                         driver=PROTOCOL,KEY=VALUE... (diskimg(1))\n" CMD_TLS_HELP
                   CMD_UNTRUSTED_HELP "  -h        this help\n"
               "\n"
               "Without -s, an image larger than the other is equal if its extra tail reads\n"
               "as zeroes, and a hole equals written zeroes.\n"
               "Exit status: 0 identical, 1 different, 2 cannot open, 3 block status failed,\n"
               "4 read failed, " CMD_IN_USE_HELP ".  See diskimg-compare(1).\n");
}

/* The error line and exit code of a comparison that could not finish:
 * qemu-img's codes tell a failed block status from a failed read. */
static int compare_failure(int r, const struct blk_compare_result *res)
{
    if (res->failed == BLK_CMP_FAIL_STATUS) {
        cmd_print_failure(r, "block status at offset %" PRIu64, res->offset);
        return EXIT_CMP_STATUS;
    }
    if (res->failed == BLK_CMP_FAIL_READ) {
        cmd_print_failure(r, "reading at offset %" PRIu64, res->offset);
        return EXIT_CMP_READ;
    }
    cmd_print_error(r);
    return EXIT_ERROR;
}

/* qemu-img compare's lines and exit code for what blk_compare found. */
static int compare_report(int r, const struct blk_compare_result *res, bool quiet)
{
    if (res->tail_compared && !quiet) {
        printf("Warning: Image size mismatch!\n");
    }
    if (r < 0) {
        return compare_failure(r, res);
    }
    switch (res->verdict) {
    case BLK_CMP_IDENTICAL:
        if (!quiet) {
            printf("Images are identical.\n");
        }
        return EXIT_OK;
    case BLK_CMP_SIZE_DIFFERS:
        if (!quiet) {
            printf("Strict mode: Image size mismatch!\n");
        }
        break;
    case BLK_CMP_STATUS_DIFFERS:
        if (!quiet) {
            printf("Strict mode: Offset %" PRIu64 " block status mismatch!\n", res->offset);
        }
        break;
    case BLK_CMP_DATA_DIFFERS:
        if (!quiet) {
            printf("Content mismatch at offset %" PRIu64 "!\n", res->offset);
        }
        break;
    }
    return EXIT_CMP_DIFFERENT;
}

static int compare_run(int argc, char **argv)
{
    struct blk_image_opts oa = {.read_only = true, .stream = true},
                          ob = {.read_only = true, .stream = true};
    struct blk_image *a = NULL, *b = NULL;
    struct blk_compare_opts co = {0};
    struct blk_compare_result res;
    struct cmd_progress prog;
    int ch, status, r;
    bool quiet = false, progress = false, progress_json = false, image_opts = false;
    enum { OPT_PROGRESS = 256 };

    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"progress", required_argument, NULL, OPT_PROGRESS},
        {"force-share", no_argument, NULL, 'U'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };

    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":hf:F:spqUT:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            compare_usage(stdout);
            return EXIT_OK;
        case 'f':
            oa.format = optarg;
            break;
        case 'F':
            ob.format = optarg;
            break;
        case 's':
            co.strict = true;
            break;
        case 'p':
            progress = true;
            break;
        case OPT_PROGRESS:
            if (strcmp(optarg, "human") != 0 && strcmp(optarg, "json") != 0) {
                return cmd_usage_error("compare", "--progress takes human or json");
            }
            progress = true;
            progress_json = strcmp(optarg, "json") == 0;
            break;
        case 'q':
            quiet = true;
            break;
        case 'U':
            oa.force_share = ob.force_share = true;
            break;
        case 'T':
            if (blk_cache_mode_parse(optarg, &oa.cache) < 0) {
                return cmd_usage_error("compare", "invalid cache mode '%s'", optarg);
            }
            ob.cache = oa.cache;
            oa.stream = ob.stream = false;
            break;
        default:
            if ((r = cmd_two_images_getopt("compare", ch, argv, &image_opts, &oa, &ob)) != 0) {
                return r;
            }
            break;
        }
    }
    if (argc - optind != 2) {
        return cmd_usage_error("compare", "expected IMAGE1 and IMAGE2");
    }
    if (image_opts && ob.format && !oa.format) {
        return cmd_usage_error("compare", "--image-opts and -F are mutually exclusive");
    }
    if ((r = cmd_image_operand("compare", argv[optind], image_opts, 0, &oa)) != 0 ||
        (r = cmd_image_operand("compare", argv[optind + 1], image_opts, 0, &ob)) != 0) {
        return r;
    }
    if ((r = blk_image_open(&a, &oa)) < 0 || (r = blk_image_open(&b, &ob)) < 0) {
        cmd_print_open_error(r, true);
        blk_image_close(a);
        return cmd_status(r, EXIT_CMP_OPEN);
    }
    cmd_progress_start(&prog, progress && !quiet, progress_json);
    co.progress = cmd_progress_cb;
    co.progress_opaque = &prog;
    r = blk_compare(a, b, &co, &res);
    if (r == 0 && (res.verdict == BLK_CMP_IDENTICAL || res.verdict == BLK_CMP_DATA_DIFFERS)) {
        /* The comparison is over, at the end or at the first difference:
         * the last line says 100%, as the man page promises. */
        cmd_progress_finish(&prog, MAX(blk_image_size(a), blk_image_size(b)));
    } else if (r < 0 || res.verdict != BLK_CMP_SIZE_DIFFERS) {
        cmd_progress_abort(&prog); /* a line was drawn: end it */
    }
    status = compare_report(r, &res, quiet);
    blk_image_close(a);
    blk_image_close(b);
    return status;
}

const struct cmd cmd_compare = {
    .name = "compare",
    .summary = "check whether two images have the same contents",
    .run = compare_run,
    .usage = compare_usage,
};
