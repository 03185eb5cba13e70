/* cmd/dd.c: "diskimg dd", as qemu-img dd: copy count blocks of bs bytes
 * of an image, from block skip on, into a new image of the output format.
 * qemu-img's quirks are kept, because scripts depend on the sizes they
 * give: count counts from the start of the input, not from skip (so the
 * output holds count - skip blocks), a skip past the end gives an empty
 * output and a warning, and the output is created (or overwritten) at
 * exactly the size it will hold.  The copy itself is block/measure.c's
 * blk_dd_copy. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/util.h"

static void dd_usage(FILE *f)
{
    fprintf(f,
            "Usage: diskimg dd [-f FMT | --image-opts] [-O OUTPUT_FMT] [-U] [bs=BLOCK_SIZE]\n"
            "                  [count=BLOCKS] [skip=BLOCKS] if=INPUT of=OUTPUT\n"
            "\n"
            "Create OUTPUT (format OUTPUT_FMT, default raw; an existing file is\n"
            "overwritten) and copy INPUT's content into it, as qemu-img dd does.\n"
            "\n"
            "  bs=BLOCK_SIZE      the unit of count and skip, 1 byte to 2 GiB - 1\n"
            "                     (default 512; suffixes k, M, G...)\n"
            "  count=BLOCKS       copy up to block BLOCKS of INPUT, counted from its\n"
            "                     start as qemu-img counts (default: to the end)\n"
            "  skip=BLOCKS        start at block BLOCKS of INPUT (default 0); past\n"
            "                     the end: an empty OUTPUT and a warning\n"
            "  if=INPUT           the image to read\n"
            "  of=OUTPUT          the image to create\n"
            "  -f, --format=FMT   INPUT's format, diskimg-formats(7) (default: probe)\n"
            "  -O OUTPUT_FMT      OUTPUT's format (default raw), with its default options\n"
            "  -U, --force-share  read INPUT even while another process writes it\n"
            "      --image-opts   INPUT is options: driver=FMT,file.filename=PATH\n"
            "                     [,KEY=VALUE...], or driver=PROTOCOL,KEY=VALUE...\n"
            "                     (diskimg(1)); if= takes the rest of its argument\n"
            "  -h, --help         this help\n"
            "\n"
            "OUTPUT's virtual size is min(count * bs, INPUT's size) - skip * bs.\n"
            "\n"
            "Exit status: 0 success, 1 failure (OUTPUT is removed), 2 bad usage,\n" CMD_IN_USE_HELP
            ",\n128 + N stopped by signal N (OUTPUT is removed).\n"
            "See diskimg-dd(1).\n");
}

struct dd_args {
    struct blk_image_opts in;
    const char *out_name;
    const char *out_format;
    uint64_t bs, count, skip;
    bool count_given, skip_given;
    bool image_opts;
    char *in_spec; /* if=, a file name or with --image-opts its options */
};

/* A number with qemu-img's suffixes, in [min, max]: 0 or EXIT_USAGE. */
static int dd_number(const char *name, const char *value, uint64_t min, uint64_t max, uint64_t *out)
{
    int r = parse_size(value, out);

    if (r == -EINVAL) {
        return cmd_usage_error("dd",
                               "invalid %s '%s': a number, optionally with a suffix k, M, "
                               "G, T, P or E (powers of 1024)",
                               name, value);
    }
    if (r < 0 || *out < min || *out > max) {
        return cmd_usage_error("dd", "invalid %s '%s': it must be between %" PRIu64 " and %" PRIu64,
                               name, value, min, max);
    }
    return 0;
}

/* One operand KEY=VALUE: 0 or EXIT_USAGE. */
static int dd_operand(const char *arg, struct dd_args *a)
{
    const char *eq = strchr(arg, '=');
    size_t klen = eq ? (size_t)(eq - arg) : 0;
    const char *v = eq ? eq + 1 : NULL;

#define KEY_IS(k) (klen == strlen(k) && strncmp(arg, k, klen) == 0)
    if (!eq) {
        return cmd_usage_error("dd", "unrecognized operand '%s' (KEY=VALUE expected)", arg);
    } else if (KEY_IS("bs")) {
        return dd_number("bs", v, 1, INT32_MAX, &a->bs);
    } else if (KEY_IS("count")) {
        a->count_given = true;
        return dd_number("count", v, 0, INT64_MAX, &a->count);
    } else if (KEY_IS("skip")) {
        a->skip_given = true;
        return dd_number("skip", v, 0, INT64_MAX, &a->skip);
    } else if (KEY_IS("if")) {
        a->in_spec = (char *)v; /* inside argv, which is ours to split */
    } else if (KEY_IS("of")) {
        a->out_name = v;
    } else {
        return cmd_usage_error("dd", "unrecognized operand '%.*s' (bs, count, skip, if, of)",
                               (int)klen, arg);
    }
#undef KEY_IS
    return 0;
}

/* Returns 0, -1 after --help, or an exit status. */
static int dd_parse(int argc, char **argv, struct dd_args *a)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, 'f'},
        {"force-share", no_argument, NULL, 'U'},
        {"image-opts", no_argument, NULL, CMD_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:O:U", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            dd_usage(stdout);
            return -1;
        case 'f':
            a->in.format = optarg;
            break;
        case 'O':
            a->out_format = optarg;
            break;
        case 'U':
            a->in.force_share = true;
            break;
        default:
            if ((r = cmd_image_getopt("dd", c, argv, &a->image_opts, &a->in)) != 0) {
                return r;
            }
            break;
        }
    }
    for (int i = optind; i < argc; i++) {
        if ((r = dd_operand(argv[i], a)) != 0) {
            return r;
        }
    }
    if (!a->in_spec || !a->out_name) {
        return cmd_usage_error("dd", "both if=INPUT and of=OUTPUT must be given");
    }
    return cmd_image_operand("dd", a->in_spec, a->image_opts, 0, &a->in);
}

/* The input window [*off, *off + *len), with qemu-img's arithmetic;
 * false when skip lies past the end (an empty output). */
static bool dd_window(const struct dd_args *a, uint64_t in_size, uint64_t *off, uint64_t *len)
{
    uint64_t end = in_size;

    if (a->count_given && a->count <= INT64_MAX / a->bs && a->count * a->bs < end) {
        end = a->count * a->bs;
    }
    if (a->skip_given && (a->skip > INT64_MAX / a->bs || end < a->skip * a->bs)) {
        *off = end;
        *len = 0;
        return false;
    }
    *off = a->skip_given ? a->skip * a->bs : 0;
    *len = end - *off;
    return true;
}

/* Ctrl-C or a kill: stop, and remove the output (exit 128 + signal). */
static volatile sig_atomic_t dd_cancel;

static void on_signal(int sig)
{
    dd_cancel = sig;
    diskimg_interrupted = 1; /* an NBD handshake in progress gives up too */
}

static bool regular_file(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Creating OUTPUT empties it: it must not be INPUT (a link to it either). */
static int same_file_check(const char *in, const char *out)
{
    struct stat a, b;

    if (in && stat(in, &a) == 0 && stat(out, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
        return err_setx(EINVAL, "%s and %s are the same file", in, out);
    }
    return 0;
}

static int dd_copy(struct dd_args *a, struct blk_image *src, bool *created)
{
    struct blk_file_lock *hold = NULL;
    struct blk_image *dst = NULL;
    uint64_t off, len;
    bool in_range = dd_window(a, blk_image_size(src), &off, &len);
    struct blk_create_opts co = {
        .filename = a->out_name,
        .format = a->out_format,
        .size = len,
        .size_set = true,
        .keep_lock = &hold,
    };
    struct blk_image_opts oo = {.filename = a->out_name, .format = a->out_format};
    char *summary = NULL;
    bool zero = false;
    int r = blk_create(&co, &summary);

    free(summary);
    if (r < 0) {
        return r;
    }
    *created = regular_file(a->out_name) || blk_create_makes_own(a->out_name);
    if (!in_range) {
        CLEANUP_FREE char *esc = str_escape(cmd_image_name(&a->in, src));
        fprintf(stderr,
                "diskimg: %s: cannot skip to the offset asked for (%" PRIu64 " * %" PRIu64
                " bytes): the output is empty\n",
                esc ? esc : "?", a->skip, a->bs);
    }
    r = blk_image_open(&dst, &oo);
    if (r == 0 && blk_image_reads_as_zero(dst, &zero) < 0) {
        err_clear(); /* unknown: write the zeroes too */
        zero = false;
    }
    if (r == 0) {
        r = blk_dd_copy(src, off, len, dst, zero, &dd_cancel);
    }
    if (r == 0) {
        r = blk_image_flush(dst);
    }
    int r2 = blk_image_close(dst);
    if (r == 0) {
        r = r2;
    }
    if (r < 0 && *created) {
        blk_create_remove(a->out_name); /* never leave a half-written image we made */
        *created = false;
    }
    blk_file_lock_release(hold); /* (after the removal: nobody else had it meanwhile) */
    return r;
}

static int dd_run(int argc, char **argv)
{
    struct dd_args a = {
        .in = {.read_only = true, .stream = true},
        .out_format = "raw",
        .bs = 512,
    };
    struct blk_image *src = NULL;
    bool created = false;
    int r = dd_parse(argc, argv, &a);

    if (r != 0) {
        return r < 0 ? EXIT_OK : r;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    r = same_file_check(a.in.filename, a.out_name);
    if (r < 0) {
        cmd_print_error(r);
        return EXIT_ERROR;
    }
    r = blk_image_open(&src, &a.in);
    if (r < 0) {
        cmd_print_open_error(r, true);
        return cmd_status(r, EXIT_ERROR);
    }
    r = dd_copy(&a, src, &created);
    if (r < 0) {
        cmd_print_error(r);
    }
    blk_image_close(src);
    if (r < 0 && dd_cancel) {
        return 128 + dd_cancel; /* interrupted, wherever it happened */
    }
    return r < 0 ? cmd_status(r, EXIT_ERROR) : EXIT_OK;
}

const struct cmd cmd_dd = {
    .name = "dd",
    .summary = "copy part of an image into a new image (like qemu-img dd)",
    .run = dd_run,
    .usage = dd_usage,
};
