/* cmd/cmd.h: what the subcommands share.  cmd/ parses options, opens
 * images, prints results and picks exit codes; it does no I/O of its own. */
#ifndef DISKIMG_CMD_CMD_H
#define DISKIMG_CMD_CMD_H

#include <stdio.h>

/* Exit codes shared by every subcommand unless its man page says more. */
#define EXIT_OK 0
#define EXIT_ERROR 1 /* the operation failed (image, I/O, network) */
#define EXIT_USAGE 2 /* bad command line */

struct cmd {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
    void (*usage)(FILE *f);
};

extern const struct cmd cmd_serve;

/* "diskimg SUBCOMMAND: message" to stderr, then returns EXIT_USAGE. */
int cmd_usage_error(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints err_msg() (or strerror(-r)) once, as "diskimg: message". */
void cmd_print_error(int r);

#endif
