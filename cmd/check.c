/* cmd/check.c: "diskimg check", as qemu-img check: problems on stderr, a
 * summary on stdout (or JSON), and qemu-img's exit codes (0 clean, 1 check
 * not completed, 2 corruptions, 3 leaks only, 63 no check for the format),
 * and 5 when the image is in use. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/json.h"
#include "target.h"

static void check_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg check [-f FMT | --image-opts] [-r leaks|all] [--output=human|json]\n"
               "                     [-q] FILE\n"
               "       diskimg check --target=NAME [-f FMT] [--output=human|json] [-q] FILE\n"
               "\n"
               "Check FILE's metadata for consistency (qcow2), and repair it with -r.\n"
               "With --target, check instead that FILE meets a cloud's or hypervisor's\n"
               "rules: each rule it breaks is printed with its fix (diskimg-targets(7)).\n"
               "\n"
               "  -f, --format=FMT     image format, diskimg-formats(7) (default: probe)\n"
               "  -r, --repair=WHAT    leaks: free leaked clusters; all: also fix corruptions\n"
               "      --output=FMT     human (default) or json\n"
               "  -q, --quiet          print nothing, the exit status tells\n"
               "  -U, --force-share    check the image even while another process writes it\n"
               "                       (not with -r; what a writer changes meanwhile may\n"
               "                       show as errors)\n"
               "  -T CACHE             accepted for compatibility (the check reads "
               "metadata)\n" CMD_IMAGE_OPTS_HELP CMD_TLS_HELP CMD_UNTRUSTED_HELP
               "  -h, --help           this help\n"
               "      --target=NAME    lint FILE for target NAME (not with -r)\n"
               "\n"
               "Exit status: 0 no errors, 1 the check did not complete (or bad usage),\n"
               "2 corruptions, 3 leaked clusters only, " CMD_IN_USE_HELP ",\n"
               "63 the format has no check (raw).  With --target: 0 acceptable, 4 a rule is\n"
               "broken, 1 FILE could not be read.\n"
               "See diskimg-check(1).\n");
    fprintf(f, "Targets: %s.\n", target_names());
}

static int check_status(const struct blk_check_result *res)
{
    if (res->check_errors) {
        return EXIT_ERROR;
    }
    if (res->corruptions) {
        return EXIT_CHECK_CORRUPT;
    }
    if (res->leaks) {
        return EXIT_CHECK_LEAKS;
    }
    return EXIT_OK;
}

static void check_print_human(const struct blk_check_result *res)
{
    uint64_t corrupt = res->corruptions;
    uint64_t leaks = res->leaks;

    if (!corrupt && !leaks && !res->check_errors) {
        printf("No errors were found on the image.\n");
    } else {
        if (corrupt) {
            printf("\n%" PRIu64 " errors were found on the image.\n"
                   "Data may be corrupted, or further writes to the image may corrupt it.\n",
                   corrupt);
        }
        if (leaks) {
            printf("\n%" PRIu64 " leaked clusters were found on the image.\n"
                   "This means waste of disk space, but no harm to data.\n",
                   leaks);
        }
        if (res->check_errors) {
            printf("\n%" PRIu64 " internal errors have occurred during the check.\n",
                   res->check_errors);
        }
    }
    if (res->total_clusters && res->allocated_clusters) { /* as qemu-img prints it */
        double t = (double)res->total_clusters;
        printf("%" PRIu64 "/%" PRIu64 " = %0.2f%% allocated, %0.2f%% fragmented, %0.2f%% "
               "compressed clusters\n",
               res->allocated_clusters, res->total_clusters, 100.0 * res->allocated_clusters / t,
               res->allocated_clusters ? 100.0 * res->fragmented_clusters / res->allocated_clusters
                                       : 0.0,
               res->allocated_clusters ? 100.0 * res->compressed_clusters / res->allocated_clusters
                                       : 0.0);
    }
    if (res->image_end_offset) {
        printf("Image end offset: %" PRIu64 "\n", res->image_end_offset);
    }
}

static void check_print_json(const char *filename, const char *format,
                             const struct blk_check_result *res)
{
    struct json_writer w;

    json_init(&w, stdout, false);
    json_begin_object(&w, NULL);
    /* Optional fields are left out when 0, as qemu-img does, and the
     * fields come in qemu-img's order, which is that of its QDict's hash
     * buckets: fixed, but not the order of the QAPI schema. */
    if (res->image_end_offset) {
        json_uint(&w, "image-end-offset", res->image_end_offset);
    }
    if (res->compressed_clusters) {
        json_uint(&w, "compressed-clusters", res->compressed_clusters);
    }
    if (res->total_clusters) {
        json_uint(&w, "total-clusters", res->total_clusters);
    }
    if (res->corruptions) {
        json_uint(&w, "corruptions", res->corruptions);
    }
    if (res->corruptions_fixed) {
        json_uint(&w, "corruptions-fixed", res->corruptions_fixed);
    }
    json_uint(&w, "check-errors", res->check_errors);
    if (res->leaks) {
        json_uint(&w, "leaks", res->leaks);
    }
    if (res->leaks_fixed) {
        json_uint(&w, "leaks-fixed", res->leaks_fixed);
    }
    if (res->allocated_clusters) {
        json_uint(&w, "allocated-clusters", res->allocated_clusters);
    }
    json_str(&w, "filename", filename);
    json_str(&w, "format", format);
    if (res->fragmented_clusters) {
        json_uint(&w, "fragmented-clusters", res->fragmented_clusters);
    }
    json_end_object(&w);
    json_finish(&w);
}

static int check_usage_error(void)
{
    return EXIT_ERROR; /* 2 would read as "corruptions", as in qemu-img */
}

static int check_run(int argc, char **argv)
{
    enum { OPT_OUTPUT = 256, OPT_TARGET };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"repair", required_argument, NULL, 'r'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"target", required_argument, NULL, OPT_TARGET},
        {"quiet", no_argument, NULL, 'q'},
        {"force-share", no_argument, NULL, 'U'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct blk_image_opts o = {.read_only = true, .no_backing = true, .for_check = true};
    enum blk_repair repair = BLK_REPAIR_NONE;
    struct blk_check_result res, fixed = {0};
    struct blk_image *img = NULL;
    bool json = false, quiet = false, image_opts = false;
    const char *target = NULL;
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:r:qUT:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            check_usage(stdout);
            return EXIT_OK;
        case 'f':
            o.format = optarg;
            break;
        case 'r':
            if (strcmp(optarg, "leaks") == 0) {
                repair = BLK_REPAIR_LEAKS;
            } else if (strcmp(optarg, "all") == 0) {
                repair = BLK_REPAIR_ALL;
            } else {
                cmd_usage_error("check", "-r must be leaks or all, not '%s'", optarg);
                return check_usage_error();
            }
            break;
        case OPT_OUTPUT:
            if (cmd_parse_output("check", optarg, &json) != 0) {
                return check_usage_error();
            }
            break;
        case 'q':
            quiet = true;
            break;
        case OPT_TARGET:
            target = optarg;
            break;
        case 'U':
            o.force_share = true;
            break;
        case 'T':
            break;
        default:
            if (cmd_image_getopt("check", c, argv, &image_opts, &o) != 0) {
                return check_usage_error();
            }
            break;
        }
    }
    if (optind + 1 != argc) {
        cmd_usage_error("check", "expected one FILE");
        return check_usage_error();
    }
    if (o.force_share && repair != BLK_REPAIR_NONE) {
        cmd_usage_error("check", "-U (--force-share) cannot be used with -r, which writes");
        return check_usage_error();
    }
    if (target && image_opts) {
        cmd_usage_error("check", "--target lints a FILE, not --image-opts");
        return check_usage_error();
    }
    /* qemu-img's JSON names the image as given: the option string too */
    CLEANUP_FREE char *given = strdup(argv[optind]);
    if (!given || cmd_image_operand("check", argv[optind], image_opts, 0, &o) != 0) {
        return check_usage_error();
    }
    if (target) {
        if (repair != BLK_REPAIR_NONE) {
            cmd_usage_error("check", "--target lints: it takes no -r");
            return check_usage_error();
        }
        return target_lint(target, &o,
                           quiet  ? TARGET_OUTPUT_QUIET
                           : json ? TARGET_OUTPUT_JSON
                                  : TARGET_OUTPUT_HUMAN);
    }
    o.read_only = repair == BLK_REPAIR_NONE;
    r = blk_image_open(&img, &o);
    if (r < 0) {
        cmd_print_open_error(r, o.read_only);
        return cmd_status(r, EXIT_ERROR);
    }
    r = blk_image_check(img, repair, quiet ? NULL : stderr, &res);
    if (r == -ENOTSUP) {
        if (!quiet) {
            fprintf(stderr, "diskimg: this image format (%s) does not support checks\n",
                    blk_image_format(img));
        }
        blk_image_close(img);
        return EXIT_CHECK_UNSUPPORTED;
    }
    if (r == 0 && repair != BLK_REPAIR_NONE && (res.corruptions_fixed || res.leaks_fixed)) {
        /* Say what was fixed, then check again and report that. */
        fixed = res;
        if (!quiet && !json) {
            printf("The following inconsistencies were found and repaired:\n\n"
                   "    %" PRIu64 " leaked clusters\n    %" PRIu64 " corruptions\n\n"
                   "Double checking the fixed image now...\n",
                   fixed.leaks_fixed, fixed.corruptions_fixed);
        }
        /* What remains is what the second check finds; the first one's
         * repairs are reported next to it, as qemu-img does. */
        r = blk_image_check(img, BLK_REPAIR_NONE, quiet ? NULL : stderr, &res);
        res.leaks_fixed = fixed.leaks_fixed;
        res.corruptions_fixed = fixed.corruptions_fixed;
    }
    if (r < 0) {
        /* A check that could not finish has no summary, as in qemu-img. */
        cmd_print_error(r);
        blk_image_close(img);
        return EXIT_ERROR;
    }
    if (!quiet) {
        if (json) {
            check_print_json(given, blk_image_format(img), &res);
        } else {
            check_print_human(&res);
        }
    }
    r = blk_image_close(img);
    if (r < 0) {
        cmd_print_error(r);
        return EXIT_ERROR;
    }
    if (res.check_errors) {
        fprintf(stderr, "diskimg: Check failed\n");
    }
    return check_status(&res);
}

const struct cmd cmd_check = {
    .name = "check",
    .summary = "check (and repair) an image's metadata",
    .run = check_run,
    .usage = check_usage,
};
