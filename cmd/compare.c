/* cmd/compare.c: "diskimg compare", as qemu-img compare: do two images
 * read the same?  Ranges that read as zeroes in both are never read, so
 * large holes cost nothing.  Exit codes are qemu-img's: 0 identical,
 * 1 different, 2 an image could not be opened, 3 block status failed,
 * 4 a read failed; and 5, an image is in use by another process.  Like
 * convert, a comparison is one pass: by default both images stream (what
 * is read cold leaves the page cache again). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "progress.h"
#include "common/cleanup.h"
#include "common/util.h"

#define CMP_CHUNK (4u << 20)
#define EXIT_CMP_DIFFERENT 1
#define EXIT_CMP_OPEN 2
#define EXIT_CMP_STATUS 3
#define EXIT_CMP_READ 4

static void compare_usage(FILE *f)
{
    fprintf(f, "Usage: diskimg compare [-f FMT] [-F FMT] [-s] [-p | --progress=json] [-q]\n"
               "                       [-T CACHE] IMAGE1 IMAGE2\n"
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
               "            data read into the page cache leaves it once read)\n" CMD_TLS_HELP
                   CMD_UNTRUSTED_HELP "  -h        this help\n"
               "\n"
               "Without -s, an image larger than the other is equal if its extra tail reads\n"
               "as zeroes, and a hole equals written zeroes.\n"
               "Exit status: 0 identical, 1 different, 2 cannot open, 3 block status failed,\n"
               "4 read failed, " CMD_IN_USE_HELP ".  See diskimg-compare(1).\n");
}

struct cmp {
    struct blk_image *a, *b;
    bool strict, quiet;
    uint8_t *ba, *bb;
    struct cmd_progress progress;
    uint64_t total;
};

/* What strict mode compares: qemu-img compare -s compares the whole block
 * status, so a hole differs from written zeroes, a zero cluster from an
 * unallocated one, and a preallocated cluster from both. */
#define STRICT_FLAGS (BLK_EXT_DATA | BLK_EXT_ZERO | BLK_EXT_ALLOCATED | BLK_EXT_OFFSET)

/* First differing offset in [off, off+len) of a and b, or len if none:
 * *status gets an exit code on failure. */
static int cmp_range(struct cmp *c, uint64_t off, uint64_t len, uint64_t *diff)
{
    struct blk_extent ea, eb;
    int r;

    *diff = UINT64_MAX;
    while (len > 0) {
        if ((r = blk_image_block_status(c->a, off, len, &ea)) < 0 ||
            (r = blk_image_block_status(c->b, off, len, &eb)) < 0) {
            cmd_print_failure(r, "block status at offset %" PRIu64, off);
            return EXIT_CMP_STATUS;
        }
        uint64_t n = MIN(MIN(ea.length, eb.length), (uint64_t)CMP_CHUNK);
        bool za = ea.flags & BLK_EXT_ZERO, zb = eb.flags & BLK_EXT_ZERO;
        cmd_progress_update(&c->progress, off, c->total);
        if (c->strict && (ea.flags & STRICT_FLAGS) != (eb.flags & STRICT_FLAGS)) {
            if (!c->quiet) {
                printf("Strict mode: Offset %" PRIu64 " block status mismatch!\n", off);
            }
            return EXIT_CMP_DIFFERENT;
        }
        if (!(za && zb)) {
            if ((!za && (r = blk_image_pread(c->a, off, c->ba, n)) < 0) ||
                (!zb && (r = blk_image_pread(c->b, off, c->bb, n)) < 0)) {
                cmd_print_failure(r, "reading at offset %" PRIu64, off);
                return EXIT_CMP_READ;
            }
            const uint8_t *pa = za ? NULL : c->ba, *pb = zb ? NULL : c->bb;
            for (uint64_t i = 0; i < n; i++) {
                uint8_t va = pa ? pa[i] : 0, vb = pb ? pb[i] : 0;
                if (va != vb) {
                    *diff = off + i;
                    return 0;
                }
            }
        }
        off += n;
        len -= n;
    }
    return 0;
}

/* The tail of the larger image must read as zeroes. */
static int cmp_tail(struct cmp *c, struct blk_image *img, uint64_t off, uint64_t end,
                    uint64_t *diff)
{
    *diff = UINT64_MAX;
    while (off < end) {
        struct blk_extent e;
        cmd_progress_update(&c->progress, off, c->total);
        int r = blk_image_block_status(img, off, end - off, &e);
        if (r < 0) {
            cmd_print_failure(r, "block status at offset %" PRIu64, off);
            return EXIT_CMP_STATUS;
        }
        uint64_t n = MIN(e.length, (uint64_t)CMP_CHUNK);
        if (!(e.flags & BLK_EXT_ZERO)) {
            if ((r = blk_image_pread(img, off, c->ba, n)) < 0) {
                cmd_print_failure(r, "reading at offset %" PRIu64, off);
                return EXIT_CMP_READ;
            }
            for (uint64_t i = 0; i < n; i++) {
                if (c->ba[i]) {
                    *diff = off + i;
                    return 0;
                }
            }
        }
        off += n;
    }
    return 0;
}

static int compare_run(int argc, char **argv)
{
    struct blk_image_opts oa = {.read_only = true, .stream = true},
                          ob = {.read_only = true, .stream = true};
    struct cmp c = {0};
    uint64_t diff = UINT64_MAX;
    int ch, status = 0, r;
    bool progress = false, progress_json = false;
    enum { OPT_PROGRESS = 256 };

    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"progress", required_argument, NULL, OPT_PROGRESS},
        {"force-share", no_argument, NULL, 'U'},
        CMD_TLS_LONGOPTS,
        CMD_UNTRUSTED_LONGOPT,
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
            c.strict = true;
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
            c.quiet = true;
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
        case ':':
            return cmd_usage_error("compare", "option '%s' needs a value", argv[optind - 1]);
        default:
            if (cmd_image_option(ch, optarg, &oa)) {
                cmd_image_option(ch, optarg, &ob); /* either image may be nbds:// */
                break;
            }
            return cmd_usage_error("compare", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind != 2) {
        return cmd_usage_error("compare", "expected IMAGE1 and IMAGE2");
    }
    oa.filename = argv[optind];
    ob.filename = argv[optind + 1];
    if ((r = blk_image_open(&c.a, &oa)) < 0 || (r = blk_image_open(&c.b, &ob)) < 0) {
        cmd_print_open_error(r, true);
        blk_image_close(c.a);
        return cmd_status(r, EXIT_CMP_OPEN);
    }
    /* page-aligned for -T none (O_DIRECT) */
    c.ba = aligned_alloc(4096, CMP_CHUNK);
    c.bb = aligned_alloc(4096, CMP_CHUNK);
    uint64_t sa = blk_image_size(c.a), sb = blk_image_size(c.b);
    c.total = MAX(sa, sb);
    cmd_progress_start(&c.progress, progress && !c.quiet, progress_json);
    if (!c.ba || !c.bb) {
        status = EXIT_ERROR;
    } else if (c.strict && sa != sb) {
        if (!c.quiet) {
            printf("Strict mode: Image size mismatch!\n");
        }
        status = EXIT_CMP_DIFFERENT;
    } else {
        status = cmp_range(&c, 0, MIN(sa, sb), &diff);
        if (status == 0 && diff == UINT64_MAX && sa != sb) {
            if (!c.quiet) {
                printf("Warning: Image size mismatch!\n");
            }
            status = cmp_tail(&c, sa > sb ? c.a : c.b, MIN(sa, sb), MAX(sa, sb), &diff);
        }
        if (status == 0 && diff == UINT64_MAX) {
            cmd_progress_finish(&c.progress, c.total); /* compared to the end */
        } else {
            cmd_progress_abort(&c.progress);
        }
        if (status == 0 && diff != UINT64_MAX) {
            if (!c.quiet) {
                printf("Content mismatch at offset %" PRIu64 "!\n", diff);
            }
            status = EXIT_CMP_DIFFERENT;
        } else if (status == 0 && !c.quiet) {
            printf("Images are identical.\n");
        }
    }
    free(c.ba);
    free(c.bb);
    blk_image_close(c.a);
    blk_image_close(c.b);
    return status;
}

const struct cmd cmd_compare = {
    .name = "compare",
    .summary = "check whether two images have the same contents",
    .run = compare_run,
    .usage = compare_usage,
};
