/* cmd/info.c: "diskimg info", as qemu-img info: the same human lines and
 * the same JSON field names.  Backing files are never opened to answer
 * about the top image (its backing name is read from its header and
 * printed, escaped); --backing-chain opens each one in turn (by itself,
 * metadata only) and refuses loops. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/json.h"
#include "formats/named-file.h"

/* The top image and its backing files. */
#define MAX_CHAIN (BLK_MAX_CHAIN_DEPTH + 1)

/* Where the report goes: stdout, or with --backing-chain a buffer that
 * reaches stdout only when the whole chain could be read, as qemu-img
 * prints all of it or nothing. */
static FILE *info_out;

static void info_usage(FILE *f)
{
    fprintf(f,
            "Usage: diskimg info [-f FMT | --image-opts] [--output=human|json]\n"
            "                    [--backing-chain | --untrusted] [-U] FILE\n"
            "\n"
            "Show what FILE is: format, virtual and allocated size, backing file, snapshots\n"
            "and format-specific details (same fields as qemu-img info).\n"
            "\n"
            "  -f, --format=FMT     image format, diskimg-formats(7) (default: probe)\n"
            "  -U, --force-share    read the image even while another process writes it\n"
            "      --output=FMT     human (default) or json\n"
            "      --backing-chain  also show every backing file, top first\n" CMD_IMAGE_OPTS_HELP
                CMD_TLS_HELP CMD_UNTRUSTED_HELP "  -h, --help           this help\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 bad usage,\n" CMD_IN_USE_HELP ".\n"
            "See diskimg-info(1).\n");
}

/* Persistent bitmaps, as qemu-img lists them: flags in-use, then auto. */
static void info_bitmaps_json(struct json_writer *w, const struct blk_image_info *in)
{
    json_begin_array(w, "bitmaps");
    for (unsigned i = 0; i < in->n_bitmaps; i++) {
        const struct blk_bitmap_info *bm = &in->bitmaps[i];
        json_begin_object(w, NULL);
        json_begin_array(w, "flags");
        if (bm->in_use) {
            json_str(w, NULL, "in-use");
        }
        if (bm->enabled) {
            json_str(w, NULL, "auto");
        }
        json_end_array(w);
        json_str(w, "name", bm->name);
        json_uint(w, "granularity", bm->granularity);
        json_end_object(w);
    }
    json_end_array(w);
}

static void info_bitmaps_human(const struct blk_image_info *in)
{
    fprintf(info_out, "    bitmaps:\n");
    for (unsigned i = 0; i < in->n_bitmaps; i++) {
        const struct blk_bitmap_info *bm = &in->bitmaps[i];
        unsigned k = 0;
        fprintf(info_out, "        [%u]:\n            flags:\n", i);
        if (bm->in_use) {
            fprintf(info_out, "                [%u]: in-use\n", k++);
        }
        if (bm->enabled) {
            fprintf(info_out, "                [%u]: auto\n", k++);
        }
        CLEANUP_FREE char *name = str_escape(bm->name);
        fprintf(info_out, "            name: %s\n            granularity: %" PRIu64 "\n",
                name ? name : "?", bm->granularity);
    }
}

static void info_json(struct json_writer *w, const char *filename, const struct blk_image_info *in)
{
    json_begin_object(w, NULL);
    if (in->backing_format) { /* first, as qemu-img's QDict orders it */
        json_str(w, "backing-filename-format", in->backing_format);
    }
    if (in->n_snapshots) {
        json_begin_array(w, "snapshots");
        for (unsigned i = 0; i < in->n_snapshots; i++) {
            const struct blk_snapshot_info *sn = &in->snapshots[i];
            json_begin_object(w, NULL);
            if (sn->icount >= 0) { /* not recorded: no member, as qemu-img */
                json_int(w, "icount", sn->icount);
            }
            json_uint(w, "vm-clock-nsec", sn->vm_clock_nsec % 1000000000ULL);
            json_str(w, "name", sn->name);
            json_uint(w, "date-sec", sn->date_sec);
            json_uint(w, "date-nsec", sn->date_nsec);
            json_uint(w, "vm-clock-sec", sn->vm_clock_nsec / 1000000000ULL);
            json_str(w, "id", sn->id);
            json_int(w, "vm-state-size", (int64_t)sn->vm_state_size); /* an int in qemu */
            json_end_object(w);
        }
        json_end_array(w);
    }
    json_uint(w, "virtual-size", in->virtual_size);
    json_str(w, "filename", filename);
    if (in->cluster_size) {
        json_uint(w, "cluster-size", in->cluster_size);
    }
    json_str(w, "format", in->format);
    if (in->actual_size >= 0) {
        json_int(w, "actual-size", in->actual_size);
    }
    if (in->n_fields || in->specific) {
        bool depth[BLK_INFO_MAX_FIELDS]; /* true: an array */
        int nest = 0;
        json_begin_object(w, "format-specific");
        json_str(w, "type", in->format);
        json_begin_object(w, "data");
        for (unsigned i = 0; i < in->n_fields; i++) {
            const struct blk_info_field *f = &in->fields[i];
            switch (f->type) {
            case BLK_INFO_STR:
                json_str(w, f->key, f->s);
                break;
            case BLK_INFO_INT:
                json_int(w, f->key, f->i);
                break;
            case BLK_INFO_BOOL:
                json_bool(w, f->key, f->b);
                break;
            case BLK_INFO_BITMAPS:
                info_bitmaps_json(w, in);
                break;
            case BLK_INFO_ARRAY:
                json_begin_array(w, f->key);
                depth[nest++] = true;
                break;
            case BLK_INFO_OBJECT:
                json_begin_object(w, NULL);
                depth[nest++] = false;
                break;
            case BLK_INFO_END:
                if (nest > 0) {
                    if (depth[--nest]) {
                        json_end_array(w);
                    } else {
                        json_end_object(w);
                    }
                }
                break;
            }
        }
        json_end_object(w);
        json_end_object(w);
    }
    if (in->backing_file) {
        if (in->full_backing_file) {
            json_str(w, "full-backing-filename", in->full_backing_file);
        }
        json_str(w, "backing-filename", in->backing_file);
    }
    if (!in->dirty_unknown) {
        json_bool(w, "dirty-flag", in->dirty);
    }
    json_end_object(w);
}

static void info_snapshots_human(const struct blk_image_info *in)
{
    fprintf(info_out, "Snapshot list:\n");
    fprintf(info_out, "%-9s %-16s %8s%20s%13s%11s\n", "ID", "TAG", "VM SIZE", "DATE", "VM CLOCK",
            "ICOUNT");
    for (unsigned i = 0; i < in->n_snapshots; i++) {
        const struct blk_snapshot_info *sn = &in->snapshots[i];
        char size[32], date[32], clock[32], icount[24] = "";
        time_t t = sn->date_sec;
        struct tm tm;
        uint64_t ms = sn->vm_clock_nsec / 1000000ULL;

        cmd_size_str(sn->vm_state_size, size, sizeof size);
        localtime_r(&t, &tm);
        strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &tm);
        snprintf(clock, sizeof clock, "%02" PRIu64 ":%02" PRIu64 ":%02" PRIu64 ".%03" PRIu64,
                 ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, ms % 1000);
        if (sn->icount >= 0) {
            snprintf(icount, sizeof icount, "%" PRId64, sn->icount);
        }
        CLEANUP_FREE char *id = str_escape(sn->id);
        CLEANUP_FREE char *name = str_escape(sn->name);
        fprintf(info_out, "%-9s %-16s %8s%20s%13s%11s\n", id ? id : "?", name ? name : "?", size,
                date, clock, icount);
    }
}

/* Strings from the image (and, down a backing chain, its file names)
 * are printed escaped: a name may hold terminal control sequences. */
static void info_line(const char *label, const char *value)
{
    CLEANUP_FREE char *esc = str_escape(value);

    fprintf(info_out, "%s: %s\n", label, esc ? esc : "?");
}

static void info_human(const char *filename, const struct blk_image_info *in)
{
    char vsize[32], dsize[32];

    cmd_size_str(in->virtual_size, vsize, sizeof vsize);
    info_line("image", filename);
    info_line("file format", in->format);
    fprintf(info_out, "virtual size: %s (%" PRIu64 " bytes)\n", vsize, in->virtual_size);
    if (in->actual_size >= 0) {
        cmd_size_str((uint64_t)in->actual_size, dsize, sizeof dsize);
        fprintf(info_out, "disk size: %s\n", dsize);
    } else {
        fprintf(info_out, "disk size: unavailable\n");
    }
    if (in->cluster_size) {
        fprintf(info_out, "cluster_size: %" PRIu64 "\n", in->cluster_size);
    }
    if (in->dirty) {
        fprintf(info_out, "cleanly shut down: no\n");
    }
    if (in->backing_file) {
        CLEANUP_FREE char *name = str_escape(in->backing_file);
        CLEANUP_FREE char *full = str_escape(in->full_backing_file);
        fprintf(info_out, "backing file: %s", name ? name : "?");
        if (!in->full_backing_file) {
            fprintf(info_out, " (cannot determine actual path)"); /* relative, over NBD */
        } else if (strcmp(in->backing_file, in->full_backing_file) != 0) {
            fprintf(info_out, " (actual path: %s)", full ? full : "?");
        }
        fprintf(info_out, "\n");
        if (in->backing_format) {
            info_line("backing file format", in->backing_format);
        }
    }
    if (in->n_snapshots) {
        info_snapshots_human(in);
    }
    if (in->n_fields || in->specific) {
        int ind = 4; /* the indent, 4 more per nesting level */
        fprintf(info_out, "Format specific information:\n");
        for (unsigned i = 0; i < in->n_fields; i++) {
            const struct blk_info_field *f = &in->fields[i];
            switch (f->type) {
            case BLK_INFO_STR: {
                CLEANUP_FREE char *v = str_escape(f->s);
                fprintf(info_out, "%*s%s: %s\n", ind, "", f->label, v ? v : "?");
                break;
            }
            case BLK_INFO_INT:
                fprintf(info_out, "%*s%s: %" PRId64 "\n", ind, "", f->label, f->i);
                break;
            case BLK_INFO_BOOL:
                fprintf(info_out, "%*s%s: %s\n", ind, "", f->label, f->b ? "true" : "false");
                break;
            case BLK_INFO_BITMAPS:
                info_bitmaps_human(in);
                break;
            case BLK_INFO_ARRAY:
                fprintf(info_out, "%*s%s:\n", ind, "", f->label);
                ind += 4;
                break;
            case BLK_INFO_OBJECT:
                fprintf(info_out, "%*s[%" PRId64 "]:\n", ind, "", f->i);
                ind += 4;
                break;
            case BLK_INFO_END:
                ind = ind > 4 ? ind - 4 : 4;
                break;
            }
        }
    }
}

/* "nbd://x", "json:{...}": a colon before any slash. */
static bool backing_is_protocol(const char *name)
{
    const char *colon = strchr(name, ':'), *slash = strchr(name, '/');

    return colon && (!slash || colon < slash);
}

/* Open one image of the chain, metadata only; *shown (malloc'd) gets
 * the name its root node has (a protocol named by keys names itself). */
static int info_open(const struct blk_image_opts *base, struct blk_image_info *in, char **shown)
{
    struct blk_image_opts o = *base;
    struct blk_image *img = NULL;
    int r;

    o.read_only = true;
    o.no_backing = true;
    r = blk_image_open(&img, &o);
    if (r < 0) {
        return r;
    }
    r = blk_image_get_info(img, in);
    *shown = strdup(blk_node_filename(blk_image_root(img)));
    blk_image_close(img);
    if (r == 0 && !*shown) {
        blk_image_info_free(in);
        r = -ENOMEM;
    }
    return r;
}

static int info_run(int argc, char **argv)
{
    enum { OPT_OUTPUT = 256, OPT_BACKING_CHAIN };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"backing-chain", no_argument, NULL, OPT_BACKING_CHAIN},
        {"force-share", no_argument, NULL, 'U'},
        CMD_IMAGE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    const char *format = NULL;
    struct blk_image_opts tls = {0}; /* only the TLS keys, force_share and untrusted */
    bool json = false, chain = false, image_opts = false;
    struct json_writer w;
    struct {
        dev_t dev;
        ino_t ino;
    } seen[MAX_CHAIN];
    unsigned nseen = 0;
    int c, r = 0, status = EXIT_ERROR;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:U", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            info_usage(stdout);
            return EXIT_OK;
        case 'f':
            format = optarg;
            break;
        case 'U':
            tls.force_share = true;
            break;
        case OPT_OUTPUT:
            if ((r = cmd_parse_output("info", optarg, &json)) != 0) {
                return r;
            }
            break;
        case OPT_BACKING_CHAIN:
            chain = true;
            break;
        default:
            if ((r = cmd_image_getopt("info", c, argv, &image_opts, &tls)) != 0) {
                return r;
            }
            break;
        }
    }
    if (optind + 1 != argc) {
        return cmd_usage_error("info", "expected one FILE");
    }
    if (chain && tls.untrusted) {
        return cmd_usage_error("info", "--backing-chain opens the backing files, which "
                                       "--untrusted does not");
    }
    /* The top image: FILE, or with --image-opts the image FILE spells. */
    struct blk_image_opts top = tls;
    top.format = format;
    r = cmd_image_operand("info", argv[optind], image_opts, 0, &top);
    if (r) {
        return r;
    }
    char *buf = NULL;
    size_t buf_len = 0;
    info_out = chain ? open_memstream(&buf, &buf_len) : stdout;
    if (!info_out) {
        cmd_print_error(-errno);
        return EXIT_ERROR;
    }
    json_init(&w, info_out, false);
    if (json && chain) {
        json_begin_array(&w, NULL);
    }
    char *name = top.filename ? strdup(top.filename) : NULL;
    char *fmt = NULL;
    for (unsigned depth = 0; name || depth == 0; depth++) {
        struct blk_image_info in;
        struct stat st;

        if (name && stat(name, &st) == 0) {
            for (unsigned i = 0; i < nseen; i++) {
                if (seen[i].dev == st.st_dev && seen[i].ino == st.st_ino) {
                    CLEANUP_FREE char *esc = str_escape(name);
                    fprintf(stderr, "diskimg: backing file '%s' creates an infinite loop\n",
                            esc ? esc : "?");
                    r = -1;
                }
            }
            if (nseen < MAX_CHAIN) {
                seen[nseen].dev = st.st_dev;
                seen[nseen++].ino = st.st_ino;
            }
        }
        if (r == 0 && depth >= MAX_CHAIN) {
            CLEANUP_FREE char *esc = str_escape(cmd_image_name(&top, NULL));
            fprintf(stderr, "diskimg: backing chain of %s is deeper than %d backing files\n",
                    esc ? esc : "?", BLK_MAX_CHAIN_DEPTH);
            r = -1;
        }
        /* an rbd: backing file connects as the image opens it */
        CLEANUP_FREE char *rbd_name = NULL;
        if (r == 0 && depth && name && fmt_names_rbd(name) &&
            fmt_rbd_backing_conf(name, &rbd_name) < 0) {
            fprintf(stderr, "diskimg: %s\n", err_msg());
            r = -1;
            break;
        }
        struct blk_image_opts below = {.filename = rbd_name ? rbd_name : name,
                                       .format = fmt,
                                       .force_share = tls.force_share,
                                       .untrusted = tls.untrusted,
                                       .options = tls.options};
        CLEANUP_FREE char *node_name = NULL;
        if (r == 0 && (r = info_open(depth ? &below : &top, &in, &node_name)) < 0) {
            cmd_print_open_error(r, true);
            status = cmd_status(r, EXIT_ERROR);
        }
        if (r < 0) {
            break;
        }
        if (chain && in.backing_file && !in.full_backing_file) {
            /* a relative name in an NBD export: qemu-img's words */
            CLEANUP_FREE char *esc = str_escape(in.backing_file);
            fprintf(stderr,
                    "diskimg: Could not determine absolute backing filename, but backing "
                    "filename '%s' present\n",
                    esc ? esc : "?");
            blk_image_info_free(&in);
            r = -1;
            break;
        }
        if (depth == 0 && (!name || image_opts)) {
            /* as qemu-img: the name the image's node has */
            free(name);
            name = strdup(node_name);
        }
        CLEANUP_FREE char *shown = name ? cmd_display_name(name) : NULL;
        if (json) {
            info_json(&w, shown ? shown : node_name, &in);
        } else {
            if (depth) {
                fprintf(info_out, "\n");
            }
            info_human(shown ? shown : node_name, &in);
        }
        bool probed = depth ? fmt == NULL : top.format == NULL;
        free(name);
        free(fmt);
        if (chain && in.backing_file && fmt_names_rbd(in.backing_file) &&
            fmt_rbd_backing_allowed(in.format ? in.format : "?", in.backing_file, in.backing_format,
                                    probed) < 0) {
            /* the rules of opening it (formats/named-file.h) */
            fprintf(stderr, "diskimg: %s\n", err_msg());
            blk_image_info_free(&in);
            name = fmt = NULL;
            r = -1;
            break;
        }
        if (chain && in.backing_file && backing_is_protocol(in.backing_file) &&
            !fmt_names_rbd(in.backing_file)) {
            /* The same rule as opening: a header never makes us connect. */
            CLEANUP_FREE char *esc = str_escape(in.backing_file);
            fprintf(stderr,
                    "diskimg: backing file '%s' names a protocol, which is not opened "
                    "from an image header\n",
                    esc ? esc : "?");
            blk_image_info_free(&in);
            name = fmt = NULL;
            r = -1;
            break;
        }
        name = chain && in.full_backing_file ? strdup(in.full_backing_file) : NULL;
        fmt = chain && in.backing_format ? strdup(in.backing_format) : NULL;
        blk_image_info_free(&in);
    }
    free(name);
    free(fmt);
    if (json && chain) {
        json_end_array(&w);
    }
    if (json && r == 0) {
        json_finish(&w); /* nothing printed, nothing to end */
    }
    if (chain) {
        fclose(info_out);
        if (r == 0 && buf) {
            fwrite(buf, 1, buf_len, stdout);
        }
        free(buf);
    }
    return r < 0 ? status : EXIT_OK;
}

const struct cmd cmd_info = {
    .name = "info",
    .summary = "show an image's format, sizes, backing file and snapshots",
    .run = info_run,
    .usage = info_usage,
};
