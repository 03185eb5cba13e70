/* cmd/main.c: the diskimg command, dispatching to one file per subcommand. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/error.h"
#include "common/log.h"

static const struct cmd *const commands[] = {
    &cmd_serve,   &cmd_create,   &cmd_info,     &cmd_check, &cmd_map,    &cmd_resize,
    &cmd_convert, &cmd_compare,  &cmd_checksum, &cmd_bench, &cmd_amend,  &cmd_rebase,
    &cmd_commit,  &cmd_snapshot, &cmd_measure,  &cmd_dd,    &cmd_bitmap,
};

int cmd_usage_error(const char *sub, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "diskimg %s: ", sub);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'diskimg %s --help' for more information.\n", sub);
    return EXIT_USAGE;
}

/* What a failure that no layer explained can truthfully say: strerror
 * for a negative errno, and for anything else (0, a count) only that it
 * failed.  A made-up -1 would pass for EPERM, so callers pass on what
 * the failing call returned. */
static const char *cmd_errno_text(int r)
{
    return r < 0 && r > -4096 ? strerror(-r) : NULL;
}

/* Each message is printed once: cleared after, so that a later failure
 * that records none cannot print it again as its own. */
void cmd_print_error(int r)
{
    const char *why = err_msg()[0] ? err_msg() : cmd_errno_text(r);

    fprintf(stderr, "diskimg: %s\n", why ? why : "failed");
    err_clear();
}

void cmd_print_failure(int r, const char *fmt, ...)
{
    const char *why = cmd_errno_text(r);
    va_list ap;

    if (err_msg()[0]) {
        cmd_print_error(r);
        return;
    }
    fputs("diskimg: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (why) {
        fprintf(stderr, ": %s\n", why);
    } else {
        fputs(" failed\n", stderr);
    }
}

void cmd_print_open_error(int r, bool reader)
{
    if (r == -BLK_E_IN_USE && reader) {
        fprintf(stderr, "diskimg: %s; -U (--force-share) reads it anyway\n", err_msg_or(r));
        err_clear();
        return;
    }
    cmd_print_error(r);
}

int cmd_status(int r, int other)
{
    return r == -BLK_E_IN_USE ? EXIT_IN_USE : other;
}

int cmd_close_status(struct blk_image *img, int r, const volatile sig_atomic_t *cancel)
{
    int r2 = blk_image_close(img);

    if (r == 0) {
        r = r2;
    }
    if (r >= 0) {
        return EXIT_OK;
    }
    cmd_print_error(r);
    return *cancel ? 128 + *cancel : cmd_status(r, EXIT_ERROR);
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: diskimg SUBCOMMAND [OPTIONS] ...\n"
               "       diskimg help [SUBCOMMAND]\n"
               "       diskimg --version\n"
               "\n"
               "Disk image tool and NBD server.\n"
               "\n"
               "Subcommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    }
    fprintf(f, "\nImages are locked as qemu locks them; exit status 5 from any subcommand means\n"
               "an image is in use by another process (see diskimg(1), LOCKING).\n"
               "Ceph RBD images are named rbd:POOL/IMAGE[@SNAP][:KEY=VALUE...] (diskimg-rbd(7)).\n"
               "Run 'diskimg SUBCOMMAND --help' or 'man diskimg-SUBCOMMAND' for details.\n");
}

static const struct cmd *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(commands[i]->name, name) == 0) {
            return commands[i];
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const struct cmd *c;

    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("diskimg %s\n", DISKIMG_VERSION);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return EXIT_OK;
        }
        c = find_command(argv[2]);
        if (!c) {
            fprintf(stderr, "diskimg: unknown subcommand '%s'\n", argv[2]);
            return EXIT_USAGE;
        }
        c->usage(stdout);
        return EXIT_OK;
    }
    c = find_command(argv[1]);
    if (!c && argv[1][0] == '-') {
        /* Options come after the subcommand: "diskimg info -U x". */
        fprintf(stderr,
                "diskimg: unknown option '%s': options go after the subcommand\n"
                "Try 'diskimg --help' for the subcommands.\n",
                argv[1]);
        return EXIT_USAGE;
    }
    if (!c) {
        fprintf(stderr, "diskimg: unknown subcommand '%s'\n", argv[1]);
        usage(stderr);
        return EXIT_USAGE;
    }
    log_progname = "diskimg";
    /* A peer that closes a socket (NBD, TLS) is an error to report, not a
     * reason to die: every write checks EPIPE. */
    signal(SIGPIPE, SIG_IGN);
    return c->run(argc - 1, argv + 1);
}
