/* cmd/snapshot.c: "diskimg snapshot", as qemu-img snapshot: list (-l),
 * create (-c), apply (-a) and delete (-d) internal snapshots.  The format
 * driver does the work (blk_image_snapshot); this file parses, opens the
 * image (read-only for -l, else writable and locked), prints the list as
 * qemu-img prints it and words failures as qemu-img does. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/json.h"
#include "common/util.h"

enum sn_action { SN_NONE, SN_LIST, SN_CREATE, SN_APPLY, SN_DELETE };

static void snapshot_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg snapshot (-l | -c NAME | -a NAME | -d NAME) [-f FMT] [-U] [-q]\n"
               "                        [--output=human|json] [--image-opts] [--untrusted] IMAGE\n"
               "\n"
               "List, create, apply or delete the internal snapshots of a qcow2 IMAGE.\n"
               "\n"
               "  -l                 list the snapshots (qemu-img's table, or with\n"
               "                     --output=json the 'snapshots' array of info's JSON)\n"
               "  -c NAME            create a snapshot NAME of the image as it is now\n"
               "  -a NAME            apply: the image becomes the snapshot with id NAME or\n"
               "                     else the name NAME (its size too)\n"
               "  -d NAME            delete the first snapshot named NAME\n"
               "  -f, --format=FMT   image format, diskimg-formats(7) (default: probe)\n"
               "  -U, --force-share  with -l: read the image while another process writes it\n"
               "  -q, --quiet        quiet (nothing is printed on success but the list)\n"
               "      --output=FMT   -l: human (default) or json\n" CMD_IMAGE_OPTS_HELP
                   CMD_UNTRUSTED_HELP CMD_TLS_HELP "  -h, --help         this help\n"
               "\n"
               "Changes are crash-safe: a kill or power loss at any point leaves the image\n"
               "as it was or with the change made, consistent (qemu-img check is clean).\n"
               "Exit status: 0 success, 1 failure (no such snapshot, no snapshots in the\n"
               "format, I/O), 2 bad usage,\n" CMD_IN_USE_HELP " (-c, -a and -d need the image\n"
               "to themselves).  See diskimg-snapshot(1).\n");
}

/* ---- listing ---- */

/* The ID and TAG columns as qemu-img prints them: "%-9s %-16s". */
static void list_human(const struct blk_image_info *in)
{
    if (in->n_snapshots == 0) {
        return; /* qemu-img prints nothing at all */
    }
    printf("Snapshot list:\n");
    printf("%-10s%-17s%8s%20s%13s%11s\n", "ID", "TAG", "VM SIZE", "DATE", "VM CLOCK", "ICOUNT");
    for (unsigned i = 0; i < in->n_snapshots; i++) {
        const struct blk_snapshot_info *sn = &in->snapshots[i];
        char size[32], date[32] = "", clock[48], icount[24] = "";
        time_t t = sn->date_sec;
        struct tm tm;
        uint64_t secs = sn->vm_clock_nsec / 1000000000ULL;

        cmd_size_str(sn->vm_state_size, size, sizeof size);
        if (localtime_r(&t, &tm)) {
            strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &tm);
        }
        snprintf(clock, sizeof clock, "%02" PRIu64 ":%02" PRIu64 ":%02" PRIu64 ".%03" PRIu64,
                 secs / 3600, secs / 60 % 60, secs % 60, sn->vm_clock_nsec / 1000000 % 1000);
        if (sn->icount >= 0) {
            snprintf(icount, sizeof icount, "%" PRId64, sn->icount);
        }
        CLEANUP_FREE char *id = str_escape(sn->id);
        CLEANUP_FREE char *name = str_escape(sn->name);
        printf("%-9s %-16s %8s%20s%13s%11s\n", id ? id : "?", name ? name : "?", size, date, clock,
               icount);
    }
}

/* qemu-img 7.2's snapshot has no --output: the JSON is the "snapshots"
 * array of its info --output=json, fields in its order (icount only when
 * recorded), an empty array when there are none. */
static void list_json(const struct blk_image_info *in)
{
    struct json_writer w;

    if (in->n_snapshots == 0) {
        printf("[]\n"); /* as qemu's JSON printer writes an empty list */
        return;
    }
    json_init(&w, stdout, false);
    json_begin_array(&w, NULL);
    for (unsigned i = 0; i < in->n_snapshots; i++) {
        const struct blk_snapshot_info *sn = &in->snapshots[i];
        json_begin_object(&w, NULL);
        if (sn->icount >= 0) {
            json_int(&w, "icount", sn->icount);
        }
        json_uint(&w, "vm-clock-nsec", sn->vm_clock_nsec % 1000000000ULL);
        json_str(&w, "name", sn->name);
        json_uint(&w, "date-sec", sn->date_sec);
        json_uint(&w, "date-nsec", sn->date_nsec);
        json_uint(&w, "vm-clock-sec", sn->vm_clock_nsec / 1000000000ULL);
        json_str(&w, "id", sn->id);
        json_int(&w, "vm-state-size", (int64_t)sn->vm_state_size); /* an int in qemu */
        json_end_object(&w);
    }
    json_end_array(&w);
    json_finish(&w);
}

static int snapshot_list(struct blk_image *img, bool json)
{
    struct blk_image_info in;
    int r = blk_image_get_info(img, &in);

    if (r < 0) {
        cmd_print_error(r);
        return EXIT_ERROR;
    }
    if (json) {
        list_json(&in);
    } else {
        list_human(&in);
    }
    blk_image_info_free(&in);
    return EXIT_OK;
}

/* ---- changing ---- */

/* qemu-img's words for each failure, then ours for the cause. */
static void print_change_error(enum sn_action a, const char *name, int r)
{
    CLEANUP_FREE char *esc = str_escape(name);
    const char *msg = err_msg();
    const char *verb = a == SN_CREATE ? "create" : a == SN_APPLY ? "apply" : "delete";

    fprintf(stderr, "diskimg: Could not %s snapshot '%s': ", verb, esc ? esc : "?");
    if (a == SN_CREATE) {
        fprintf(stderr, "%d (%s)%s%s\n", r, strerror(-r), *msg ? ": " : "", msg);
    } else if (a == SN_DELETE && (r == -ENOENT || r == -ENOTSUP)) {
        fprintf(stderr, "snapshot not found%s%s%s\n", r == -ENOTSUP ? " (" : "",
                r == -ENOTSUP ? msg : "", r == -ENOTSUP ? ")" : "");
    } else if (*msg) {
        fprintf(stderr, "%s\n", msg);
    } else {
        fprintf(stderr, "%s\n", strerror(-r));
    }
    err_clear();
}

static int snapshot_change(struct blk_image_opts *o, enum sn_action a, const char *name)
{
    static const enum blk_snapshot_op ops[] = {
        [SN_CREATE] = BLK_SNAPSHOT_CREATE,
        [SN_APPLY] = BLK_SNAPSHOT_APPLY,
        [SN_DELETE] = BLK_SNAPSHOT_DELETE,
    };
    struct blk_image *img = NULL;
    int r = blk_image_open(&img, o);

    if (r == -ENOTSUP) {
        /* A format or feature that cannot have snapshots (an external
         * data file): qemu-img's -95, with the reason. */
        print_change_error(a, name, r);
        return EXIT_ERROR;
    }
    if (r < 0) {
        cmd_print_open_error(r, false);
        return cmd_status(r, EXIT_ERROR);
    }
    r = blk_image_snapshot(img, ops[a], name);
    if (r < 0) {
        print_change_error(a, name, r);
        blk_image_close(img);
        return EXIT_ERROR;
    }
    r = blk_image_close(img);
    if (r < 0) {
        cmd_print_error(r);
        return EXIT_ERROR;
    }
    return EXIT_OK;
}

/* ---- options ---- */

static int set_action(enum sn_action *a, enum sn_action want, const char **name, const char *arg)
{
    if (*a != SN_NONE) {
        return cmd_usage_error("snapshot", "cannot mix '-l', '-a', '-c', '-d'");
    }
    *a = want;
    *name = arg;
    return 0;
}

static int snapshot_run(int argc, char **argv)
{
    enum { OPT_OUTPUT = 256 };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"force-share", no_argument, NULL, 'U'},
        {"quiet", no_argument, NULL, 'q'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct blk_image_opts o = {.no_backing = true};
    enum sn_action action = SN_NONE;
    const char *name = NULL;
    bool json = false, with_image_opts = false;
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hlc:a:d:f:Uq", longopts, NULL)) != -1) {
        r = 0;
        switch (c) {
        case 'h':
            snapshot_usage(stdout);
            return EXIT_OK;
        case 'l':
            r = set_action(&action, SN_LIST, &name, NULL);
            break;
        case 'c':
            r = set_action(&action, SN_CREATE, &name, optarg);
            break;
        case 'a':
            r = set_action(&action, SN_APPLY, &name, optarg);
            break;
        case 'd':
            r = set_action(&action, SN_DELETE, &name, optarg);
            break;
        case 'f':
            o.format = optarg;
            break;
        case 'U':
            o.force_share = true;
            break;
        case 'q':
            break; /* nothing but the list is ever printed on success */
        case OPT_OUTPUT:
            r = cmd_parse_output("snapshot", optarg, &json);
            break;
        default:
            r = cmd_image_getopt("snapshot", c, argv, &with_image_opts, &o);
            break;
        }
        if (r) {
            return r;
        }
    }
    if (action == SN_NONE) {
        return cmd_usage_error("snapshot", "one of -l, -c, -a or -d is required");
    }
    if (argc - optind != 1) {
        return cmd_usage_error("snapshot", "expected one IMAGE");
    }
    if (o.force_share && action != SN_LIST) {
        return cmd_usage_error("snapshot", "-U (--force-share) is only for -l: -c, -a and -d "
                                           "write the image");
    }
    if (json && action != SN_LIST) {
        return cmd_usage_error("snapshot", "--output applies to -l only");
    }
    r = cmd_image_operand("snapshot", argv[optind], with_image_opts, 0, &o);
    if (r) {
        return r;
    }
    if (action != SN_LIST) {
        return snapshot_change(&o, action, name);
    }
    struct blk_image *img = NULL;
    o.read_only = true;
    r = blk_image_open(&img, &o);
    if (r < 0) {
        cmd_print_open_error(r, true);
        return cmd_status(r, EXIT_ERROR);
    }
    r = snapshot_list(img, json);
    blk_image_close(img);
    return r;
}

const struct cmd cmd_snapshot = {
    .name = "snapshot",
    .summary = "list, create, apply or delete internal snapshots",
    .run = snapshot_run,
    .usage = snapshot_usage,
};
