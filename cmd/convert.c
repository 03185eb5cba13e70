/* cmd/convert.c: "diskimg convert", as qemu-img convert: any source to any
 * target among raw, qcow2 and NBD URIs, sparse-aware and parallel (the
 * copy itself is blk_copy in block/copy.c).  Unlike qemu-img, the target
 * is flushed once at the end, so a zero exit status means the data is
 * durable; -t unsafe skips that flush.
 *
 * A conversion reads and writes every byte once, so by default (no -t,
 * no -T) both images stream through the page cache: what is read cold
 * and what is written is given back as it goes, writeback starts at once
 * (block/file-posix-stream.c).  The page cache neither fills with data
 * nobody reads again nor needs fresh pages for it, and the final flush
 * has little left to write. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block/block.h"
#include "cmd.h"
#include "convert-bitmaps.h"
#include "progress.h"
#include "target.h"
#include "common/error.h"
#include "common/log.h"
#include "common/util.h"
#include "nbd/uri.h"

/* Stopped by a signal: 128 + its number, as a shell reports it (130 for
 * SIGINT, 143 for SIGTERM). */
static volatile sig_atomic_t convert_cancel;

static void convert_usage(FILE *f)
{
    fprintf(f,
            "Usage: diskimg convert [-f FMT | --image-opts] [-O FMT | --target-image-opts]\n"
            "                       [-o OPTIONS] [-c] [-p] [-q] [-n] [-U]\n"
            "                       [-S SIZE] [-t CACHE] [-T SRC_CACHE] [-W] [-m N] [-C]\n"
            "                       [-r RATE] [--salvage] [-B BACKING [-F FMT]]\n"
            "                       [-l SNAPSHOT] [--target-is-zero]\n"
            "                       [--progress=human|json] [--checksum] [--reproducible]\n"
            "                       [--target=NAME] [--bitmaps [--skip-broken-bitmaps]]\n"
            "                       SRC DST\n"
            "\n"
            "Copy image SRC into DST.  Either may be a file or an NBD URI\n"
            "(nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH).  Holes and zeroes\n"
            "are never read from SRC and not written to a DST that is known to be zero.\n"
            "\n"
            "  -f FMT            source format (default: probe)\n"
            "  -O FMT            target format: raw (default), qcow2, vpc, vmdk...\n"
            "  -o OPTIONS        target creation options; -O FMT -o help lists them\n"
            "  -c                compress the target (qcow2 zlib or -o compression_type=zstd,\n"
            "                    vmdk) on every usable CPU; writes stay in order unless -W\n"
            "  -n                do not create DST: it exists and is at least as large\n"
            "  -S SIZE           zero runs of at least SIZE become holes (default 4k);\n"
            "                    -S 0 writes everything\n"
            "  -t CACHE          target cache mode; one flush at the end unless unsafe\n"
            "                    (default: writeback, streaming: written pages leave the\n"
            "                    page cache as soon as they are on disk)\n"
            "  -T CACHE          source cache mode (default: writeback, streaming: data\n"
            "                    read into the page cache leaves it once read)\n"
            "  -W                allow out-of-order writes (into an NBD export, in-order\n"
            "                    writes are sent in order and overlap)\n"
            "  -m N              requests in flight, 1 to 64 (default %d; an NBD image\n"
            "                    gets each as 256 KiB pieces, several at once); workers:\n"
            "                    at least one per usable CPU (taskset, cgroup quota)\n"
            "  -r RATE           write at most RATE bytes a second (k, M, G... suffixes)\n"
            "  -C                copy offloading: the kernel copies data extents between\n"
            "                    files (copy_file_range, reflinks where the file system\n"
            "                    can); raw or qcow2 SRC, raw DST; else data is copied as\n"
            "                    usual.  Not with -c, -S or --salvage\n"
            "      --salvage     go on past read errors: each unreadable 512-byte sector\n"
            "                    is a warning on stderr (none with -q) and reads as zeroes\n"
            "  -B BACKING        give DST this backing file and copy only what SRC's top\n"
            "                    image holds; -F its format (qcow2, vmdk DST)\n"
            "  -l SNAPSHOT       copy an internal snapshot of SRC\n"
            "  -U, --force-share read SRC even while another process writes it\n"
            "      --target-is-zero   DST reads as zeroes already (with -n)\n"
            "      --bitmaps     copy SRC's persistent bitmaps (qcow2 to qcow2);\n"
            "      --skip-broken-bitmaps   but skip in-use ones instead of failing\n"
            "  -p                progress on stderr (percent, rate, time left)\n"
            "      --progress=json    progress as JSON lines on stderr, for CI logs\n"
            "      --checksum    print the checksum of DST's content (diskimg-checksum(1)),\n"
            "                    computed from what the copy reads: HASH  DST\n"
            "      --reproducible     the same SRC gives the same bytes, whatever -m: times\n"
            "                         from SOURCE_DATE_EPOCH (0 if unset), IDs from the\n"
            "                         content, writes in order (-W: raw only); on whenever\n"
            "                         SOURCE_DATE_EPOCH is set\n"
            "      --target=NAME      deliver to a cloud or hypervisor (%s):\n"
            "                         its format and options, its size rounding (printed);\n"
            "                         options that break its rules are refused; see\n"
            "                         diskimg-targets(7); gce writes OUT.tar.gz, disk.raw\n"
            "                         in an old-GNU sparse tar gzip'd on every core (- for\n"
            "                         stdout)\n"
            "  -q                quiet\n"
            "      --debug=FLAG[=N]   developer flags, as serve's: block.trace logs every\n"
            "                         driver call (and -C's bytes offloaded)\n"
            "      --image-opts       SRC is options: driver=FMT,file.filename=PATH\n"
            "                         [,KEY=VALUE...], or driver=PROTOCOL,KEY=VALUE...\n"
            "                         (diskimg(1)); not with -f\n"
            "      --target-image-opts  DST is options too (with -n, not with -O)\n" CMD_TLS_HELP
                CMD_UNTRUSTED_HELP "  -h, --help        this help\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 bad usage (or a malformed "
            "SOURCE_DATE_EPOCH),\n" CMD_IN_USE_HELP ", 130/143 SIGINT/SIGTERM.  A target\n"
            "that convert created is removed when it fails (never a device); one that\n"
            "another process uses is left alone.  See diskimg-convert(1).\n",
            BLK_COPY_DEFAULT_IN_FLIGHT, target_names());
}

static void on_signal(int sig)
{
    convert_cancel = sig;
    diskimg_interrupted = 1; /* NBD handshakes in progress give up too */
}

struct convert_opts {
    struct blk_image_opts src, dst;
    struct blk_create_opts create;
    struct blk_copy_opts copy;
    char *options; /* merged -o */
    bool create_target;
    bool quiet;
    struct cmd_progress progress;
    bool progress_on, progress_json;
    uint8_t checksum[BLK_CHECKSUM_LEN];
    bool reproducible;   /* --reproducible */
    const char *target;  /* --target */
    bool format_given;   /* -O */
    bool image_opts;     /* --image-opts: SRC is options */
    bool tgt_image_opts; /* --target-image-opts: DST is options */
    bool sparse_given;   /* -S */
    uint64_t offloaded;  /* -C: bytes the kernel copied */

    /* --bitmaps, --skip-broken-bitmaps (convert-bitmaps.c) */
    bool bitmaps, skip_broken_bitmaps;
    struct target_choice choice;
};

/* --salvage: one warning per failing sector, qemu-img's words. */
static void convert_salvaged(void *opaque, uint64_t off, bool status, int err)
{
    const struct convert_opts *o = opaque;

    if (!o->quiet) {
        fprintf(stderr, "diskimg: warning: error while reading %soffset %" PRIu64 ": %s\n",
                status ? "block status at " : "", off, strerror(err));
    }
}

static int parse_cache(const char *arg, enum blk_cache_mode *out)
{
    if (blk_cache_mode_parse(arg, out) < 0) {
        return cmd_usage_error("convert", "invalid cache mode '%s'", arg);
    }
    return 0;
}

/* --target=NAME: the target's format and options, after checking what
 * the command line says against its rules (cmd/target.c). */
static int convert_target(struct convert_opts *o, bool nbd_target)
{
    struct target_request req = {.format = o->format_given ? o->create.format : NULL,
                                 .options = o->options,
                                 .compress = o->copy.compress,
                                 .existing = !o->create_target || nbd_target,
                                 .backing = o->create.backing_file != NULL};
    int r = target_choose(o->target, &req, &o->choice);

    if (r == 0) {
        o->create.format = o->dst.format = o->choice.profile->format;
        o->create.options = o->choice.options;
    }
    return r;
}

/* SRC and DST: names, or with --image-opts / --target-image-opts their
 * options (qemu-img's rules: an existing target only, not with -O). */
static int convert_operands(struct convert_opts *o, char *src, char *dst)
{
    int r = cmd_image_operand("convert", src, o->image_opts, 0, &o->src);

    if (r || !o->tgt_image_opts) {
        o->dst.filename = o->create.filename = dst;
        return r;
    }
    if (o->create_target) {
        return cmd_usage_error("convert", "--target-image-opts requires use of -n flag");
    }
    if (o->format_given || o->target) {
        return cmd_usage_error("convert", "--target-image-opts and %s are mutually exclusive",
                               o->target ? "--target" : "-O");
    }
    o->dst.format = NULL;
    return cmd_image_operand("convert", dst, true, 0, &o->dst);
}

static int convert_parse(struct convert_opts *o, int argc, char **argv)
{
    enum {
        OPT_TARGET_IS_ZERO = 256,
        OPT_PROGRESS,
        OPT_CHECKSUM,
        OPT_TARGET,
        OPT_SALVAGE,
        OPT_DEBUG
    };
    enum { OPT_BITMAPS = 0x300, OPT_SKIP_BROKEN, OPT_TARGET_IMAGE_OPTS };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"target-is-zero", no_argument, NULL, OPT_TARGET_IS_ZERO},
        {"progress", required_argument, NULL, OPT_PROGRESS},
        {"checksum", no_argument, NULL, OPT_CHECKSUM},
        {"target", required_argument, NULL, OPT_TARGET},
        {"bitmaps", no_argument, NULL, OPT_BITMAPS},
        {"skip-broken-bitmaps", no_argument, NULL, OPT_SKIP_BROKEN},
        {"force-share", no_argument, NULL, 'U'},
        {"target-image-opts", no_argument, NULL, OPT_TARGET_IMAGE_OPTS},
        {"salvage", no_argument, NULL, OPT_SALVAGE},
        {"debug", required_argument, NULL, OPT_DEBUG},
        CMD_IMAGE_LONGOPTS,
        CMD_REPRODUCIBLE_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    int c, r;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:O:o:cpqnS:t:T:Wm:B:F:l:UCr:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            convert_usage(stdout);
            return -1;
        case 'f':
            o->src.format = optarg;
            break;
        case 'O':
            o->create.format = optarg;
            o->dst.format = optarg;
            o->format_given = true;
            break;
        case 'o':
            if (!cmd_append_options(&o->options, optarg)) {
                return EXIT_ERROR;
            }
            o->create.options = o->options;
            break;
        case 'c':
            o->copy.compress = true;
            break;
        case 'p':
            o->progress_on = true;
            break;
        case 'q':
            o->quiet = true;
            break;
        case 'n':
            o->create_target = false;
            break;
        case OPT_TARGET_IMAGE_OPTS:
            o->tgt_image_opts = true;
            break;
        case 'S':
            if (parse_size(optarg, &v) < 0 || v % 512 || v > (16u << 20)) {
                return cmd_usage_error("convert",
                                       "-S takes a multiple of 512 bytes, at most "
                                       "16M, not '%s'",
                                       optarg);
            }
            o->copy.min_sparse = v;
            o->sparse_given = true;
            break;
        case 'r':
            if (parse_size(optarg, &v) < 0 || v > INT64_MAX) {
                return cmd_usage_error("convert",
                                       "invalid rate limit '%s': a number of bytes a second, "
                                       "with k, M, G, T, P or E suffixes",
                                       optarg);
            }
            o->copy.rate_limit = v; /* 0: none, as qemu-img */
            break;
        case 'C':
            o->copy.offload = true;
            break;
        case OPT_SALVAGE:
            o->copy.salvage = true;
            break;
        case OPT_DEBUG:
            if (debug_flag_set(optarg) < 0) {
                return cmd_usage_error("convert", "unknown debug flag '%s'", optarg);
            }
            log_verbosity = log_verbosity ? log_verbosity : 1;
            break;
        case 't':
            if ((r = parse_cache(optarg, &o->dst.cache)) != 0) {
                return r;
            }
            o->dst.stream = false; /* a mode asked for: exactly that mode */
            break;
        case 'T':
            if ((r = parse_cache(optarg, &o->src.cache)) != 0) {
                return r;
            }
            o->src.stream = false;
            break;
        case 'W':
            o->copy.out_of_order = true;
            break;
        case 'm':
            if (parse_uint(optarg, 1, 64, &v) < 0) {
                return cmd_usage_error("convert", "-m takes 1 to 64, not '%s'", optarg);
            }
            o->copy.workers = (unsigned)v;
            break;
        case 'B':
            o->create.backing_file = optarg;
            o->copy.top_only = true;
            break;
        case 'F':
            o->create.backing_format = optarg;
            break;
        case 'l':
            if ((r = cmd_snapshot_param("convert", optarg, &o->src)) != 0) {
                return r;
            }
            break;
        case 'U':
            o->src.force_share = true; /* the target is written: never shared */
            break;
        case OPT_TARGET_IS_ZERO:
            o->copy.target_is_zero = true;
            break;
        case OPT_TARGET:
            o->target = optarg;
            break;
        case OPT_BITMAPS:
            o->bitmaps = true;
            break;
        case OPT_SKIP_BROKEN:
            o->skip_broken_bitmaps = true;
            break;
        case OPT_PROGRESS:
            if (strcmp(optarg, "json") != 0 && strcmp(optarg, "human") != 0) {
                return cmd_usage_error("convert", "--progress takes human or json");
            }
            o->progress_on = true;
            o->progress_json = strcmp(optarg, "json") == 0;
            break;
        case OPT_CHECKSUM:
            o->copy.checksum = o->checksum;
            break;
        case CMD_OPT_REPRODUCIBLE:
            o->reproducible = true;
            break;
        default:
            r = cmd_two_images_getopt("convert", c, argv, &o->image_opts, &o->src, &o->dst);
            if (r != 0) {
                return r;
            }
            break;
        }
    }
    if (o->options && strcmp(o->options, "help") == 0) {
        const char *help = blk_create_options_help(
            target_help_format(o->target, o->create.format, o->format_given));
        if (!help) {
            return cmd_usage_error("convert", "unknown format '%s'", o->create.format);
        }
        fputs(help, stdout);
        return -1; /* done, successfully */
    }
    /* qemu-img's refusals of -C, with its words: offloading copies data
     * extents whole, neither compressing, scanning for zeroes nor
     * salvaging them. */
    if (o->copy.offload && (o->copy.compress || o->sparse_given || o->copy.salvage)) {
        return cmd_usage_error("convert", "%s",
                               o->copy.compress  ? "Cannot enable copy offloading when -c is used"
                               : o->sparse_given ? "Cannot enable copy offloading when -S is used"
                                                 : "Cannot use copy offloading in salvaging mode");
    }
    if (argc - optind != 2) {
        return cmd_usage_error("convert", "expected SRC and DST");
    }
    if ((r = convert_operands(o, argv[optind], argv[optind + 1])) != 0) {
        return r;
    }
    bool nbd_target = o->dst.filename && nbd_uri_is(o->dst.filename);
    if (nbd_target) {
        o->create_target = false; /* -n is implied: an export exists already */
        o->dst.format = o->dst.format ? o->dst.format : "raw";
    }
    if (o->target && (r = convert_target(o, nbd_target)) != 0) {
        return r;
    }
    if (!o->dst.format) {
        o->dst.format = o->create.format; /* -O, raw by default, as qemu-img: never probed */
    }
    const char *existing = nbd_target ? "an NBD export" : "an existing target (-n)";
    if (o->skip_broken_bitmaps && !o->bitmaps) {
        return cmd_usage_error("convert", "Use of --skip-broken-bitmaps requires --bitmaps");
    }
    if (o->copy.target_is_zero && o->create_target) {
        return cmd_usage_error("convert", "--target-is-zero needs -n");
    }
    if (o->copy.target_is_zero && o->create.backing_file) {
        return cmd_usage_error("convert", "--target-is-zero cannot be used with -B: the target "
                                          "reads its backing file, not zeroes");
    }
    if (!o->create_target && o->create.options) {
        return cmd_usage_error("convert", "-o sets creation options, which %s does not take",
                               existing);
    }
    if (!o->create_target && (o->create.backing_file || o->create.backing_format)) {
        return cmd_usage_error("convert",
                               "-B and -F set the backing file of a new target, "
                               "which %s does not take",
                               existing);
    }
    if (o->create.backing_format && !o->create.backing_file) {
        return cmd_usage_error("convert", "-F names the format of the -B backing file");
    }
    if (o->copy.checksum && o->copy.top_only) {
        return cmd_usage_error("convert", "--checksum cannot be used with -B: the target's "
                                          "content includes its backing file, which convert "
                                          "does not read");
    }
    if (o->src.untrusted && o->create.backing_file) {
        return cmd_usage_error("convert", "-B gives the target a backing file to read, which "
                                          "--untrusted does not open");
    }
    /* --untrusted: the source is opened alone; so is an existing target
     * (it may be a download too), while a target made here is ours. */
    o->dst.untrusted = o->src.untrusted && !o->create_target;
    if (o->copy.compress && !blk_format_can_compress(o->create.format)) {
        return cmd_usage_error("convert",
                               "-c needs a format with compression, such as -O qcow2 "
                               "(%s has none)",
                               o->create.format);
    }
    r = cmd_repro_setup(o->reproducible, &o->create);
    if (r == 0) {
        cmd_repro_order(&o->create, o->dst.format, o->quiet, &o->copy.out_of_order);
    }
    return r;
}

/* Converting a file onto itself would destroy it before it is read
 * (qemu-img refuses through its image locks). */
static int same_file_check(const char *src, const char *dst)
{
    struct stat a, b;

    if (src && dst && stat(src, &a) == 0 && stat(dst, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
        return err_setx(EINVAL, "%s and %s are the same file", src, dst);
    }
    return 0;
}

static int convert_run(int argc, char **argv)
{
    struct convert_opts o = {
        .src = {.read_only = true,
                .cache = BLK_CACHE_WRITEBACK,
                .stream = true,
                .options = CMD_BULK_OPTIONS},
        .dst = {.cache = BLK_CACHE_WRITEBACK,
                .stream = true,
                .discard = BLK_DISCARD_UNMAP,
                .options = CMD_BULK_OPTIONS},
        .create = {.format = "raw"},
        .copy = {.workers = 0, .min_sparse = 4096},
        .create_target = true,
    };
    struct blk_image *src = NULL, *dst = NULL;
    struct blk_file_lock *hold = NULL; /* the new target's, from creation to open */
    bool created = false, src_failed = false;
    int r, status = EXIT_ERROR;
    char *summary = NULL;

    r = convert_parse(&o, argc, argv);
    if (r) {
        free(o.options);
        target_choice_free(&o.choice);
        return r < 0 ? EXIT_OK : r;
    }
    /* A target whose output is no block format writes it itself. */
    target_write_fn write_out = o.choice.profile ? o.choice.profile->write : NULL;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    r = same_file_check(o.src.filename, o.dst.filename);
    if (r == 0) {
        r = blk_image_open(&src, &o.src);
        src_failed = r < 0;
    }
    if (r < 0) {
        goto out;
    }
    if (o.bitmaps) {
        status = convert_bitmaps_check(src,
                                       write_out         ? NULL
                                       : o.create_target ? o.create.format
                                                         : o.dst.format,
                                       o.skip_broken_bitmaps);
        if (status) {
            blk_image_close(src);
            free(o.options);
            target_choice_free(&o.choice);
            return status;
        }
        status = EXIT_ERROR;
    }
    o.create.size = blk_image_size(src);
    if (o.target) {
        r = target_size(&o.choice, o.create.size, o.quiet, &o.create.size);
        if (r < 0) {
            goto out;
        }
        /* The hook makes DST: removed if it fails ("-" is stdout). */
        created = write_out != NULL && strcmp(o.dst.filename, "-") != 0;
    }
    if (o.create_target && !write_out) {
        o.create.size_set = true;
        o.create.keep_lock = &hold;
        o.dst.format = o.create.format;
        r = blk_create(&o.create, &summary);
        if (r < 0) {
            goto out;
        }
        created = true;
    }
    r = write_out ? 0 : blk_image_open(&dst, &o.dst);
    if (r < 0) {
        goto out;
    }
    if (write_out) {
        /* nothing to open: the hook writes DST */
    } else if (created) {
        /* A new image reads as zeroes, unless it has a backing file (from
         * -B or -o backing_file); preallocated or not, zeroes need no
         * writing (writing them could undo the preallocation). */
        o.copy.target_is_zero = !blk_image_has_backing(dst);
    } else if (!o.copy.target_is_zero && !o.copy.top_only) {
        /* An existing target (-n, an NBD export) that block status says
         * reads as zeroes needs no zeroes written either. */
        bool zero = false;
        if (blk_image_reads_as_zero(dst, &zero) < 0) {
            err_clear(); /* unknown: write the zeroes */
        }
        o.copy.target_is_zero = zero;
    }
    cmd_progress_start(&o.progress, o.progress_on && !o.quiet, o.progress_json);
    o.copy.progress = cmd_progress_cb;
    o.copy.progress_opaque = &o.progress;
    o.copy.cancel = &convert_cancel;
    o.copy.salvaged = convert_salvaged;
    o.copy.salvaged_opaque = &o;
    o.copy.offloaded = &o.offloaded;
    /* Reproducible output derives the target's IDs from its content
     * checksum, which the copy computes as it reads (as for --checksum);
     * with -B it reads only the top image, so the checksum comes after.
     * A format without IDs (raw, qcow2) needs neither. */
    bool identity = o.create.reproducible && dst && blk_image_has_identity(dst);
    uint8_t content[BLK_CHECKSUM_LEN];
    struct blk_copy_opts copy = o.copy;
    if (identity && !copy.checksum && !copy.top_only) {
        copy.checksum = content;
    }
    if (write_out) {
        r = write_out(o.choice.profile, src, o.dst.filename, o.create.size, &copy, &o.create);
    } else {
        r = blk_copy(src, dst, &copy);
        if (r == 0 && o.bitmaps) {
            r = convert_bitmaps_copy(src, dst);
        }
        if (r == 0 && identity) {
            r = cmd_repro_identity(&o.create, dst, copy.checksum);
        }
        if (r == 0) {
            r = blk_image_flush(dst); /* durable before we say so */
        }
    }
    if (r == 0) {
        cmd_progress_finish(&o.progress, blk_image_size(src));
    }
    if (o.copy.offload) {
        log_debug("copy offloading (-C): %" PRIu64 " bytes copied by the kernel", o.offloaded);
    }
    status = r == 0 ? EXIT_OK : r == -EINTR ? 128 + convert_cancel : EXIT_ERROR;

out:
    if (r < 0 && convert_cancel) {
        status = 128 + convert_cancel; /* interrupted, wherever it happened */
    }
    if (r < 0) {
        cmd_progress_abort(&o.progress);
        cmd_print_open_error(r, src_failed);
        status = cmd_status(r, status);
    }
    if (dst) {
        int r2 = blk_image_close(dst);
        if (r2 < 0 && status == EXIT_OK) {
            cmd_print_error(r2);
            status = EXIT_ERROR;
        }
    }
    blk_image_close(src);
    free(o.options);
    target_choice_free(&o.choice);
    if (status != EXIT_OK && created) {
        blk_create_remove(o.create.filename); /* never leave a half-written image we made */
    }
    blk_file_lock_release(hold); /* (after the removal: nobody else had it meanwhile) */
    free(summary);
    if (status == EXIT_OK && o.copy.checksum) {
        /* (an archive written to stdout keeps it to itself) */
        const char *name = cmd_image_name(&o.dst, NULL);
        cmd_print_checksum(strcmp(name, "-") == 0 ? stderr : stdout, o.checksum, name);
    }
    return status;
}

const struct cmd cmd_convert = {
    .name = "convert",
    .summary = "copy an image into another format, file or NBD export",
    .run = convert_run,
    .usage = convert_usage,
};
