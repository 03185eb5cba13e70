/* cmd/cmd.h: what the subcommands share.  cmd/ parses options, opens
 * images, prints results and picks exit codes; it does no I/O of its own. */
#ifndef DISKIMG_CMD_CMD_H
#define DISKIMG_CMD_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>

/* Exit codes shared by every subcommand unless its man page says more. */
#define EXIT_OK 0
#define EXIT_ERROR 1 /* the operation failed (image, I/O, network) */
#define EXIT_USAGE 2 /* bad command line */
/* An image is in use by another process (its locks, qemu's, conflict
 * with what this command needs); distinct from every subcommand's own
 * codes (check: 0-3 and 63, compare: 0-4). */
#define EXIT_IN_USE 5

struct cmd {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
    void (*usage)(FILE *f);
};

/* check's own codes, as qemu-img check */
#define EXIT_CHECK_CORRUPT 2
#define EXIT_CHECK_LEAKS 3
#define EXIT_CHECK_UNSUPPORTED 63

extern const struct cmd cmd_serve;
extern const struct cmd cmd_create;
extern const struct cmd cmd_info;
extern const struct cmd cmd_check;
extern const struct cmd cmd_map;
extern const struct cmd cmd_resize;
extern const struct cmd cmd_convert;
extern const struct cmd cmd_compare;
extern const struct cmd cmd_bench;
extern const struct cmd cmd_checksum;
extern const struct cmd cmd_amend;
extern const struct cmd cmd_rebase;
extern const struct cmd cmd_commit;
extern const struct cmd cmd_snapshot;
extern const struct cmd cmd_measure;
extern const struct cmd cmd_dd;
extern const struct cmd cmd_bitmap;

/* "diskimg SUBCOMMAND: message" to stderr, then returns EXIT_USAGE. */
int cmd_usage_error(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the message the failing layer recorded, once, as "diskimg:
 * message"; without one, strerror(-r), or "failed" when r is no errno.
 * r is what the failing call returned: a made-up -1 would print
 * "Operation not permitted". */
void cmd_print_error(int r);
/* The same, naming the operation when no message was recorded:
 * "diskimg: WHAT: strerror(-r)" (or "diskimg: WHAT failed"). */
void cmd_print_failure(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same for a failure to open an image; for a command that only reads
 * (reader), an image in use gets a hint at -U. */
void cmd_print_open_error(int r, bool reader);
/* EXIT_IN_USE when r says an image is in use, else 'other'. */
int cmd_status(int r, int other);
/* The end of a subcommand that changes an image, r being how its work
 * went: closes img (a failed close fails work that succeeded) and
 * prints the error once.  EXIT_OK; 128 + *cancel when a signal handler
 * set it (read after the close); else cmd_status(r, EXIT_ERROR). */
struct blk_image;
int cmd_close_status(struct blk_image *img, int r, const volatile sig_atomic_t *cancel);
/* How every --help words exit status 5. */
#define CMD_IN_USE_HELP "5 an image is in use by another process"

/* Sizes are off_t: a file, and so an image, holds at most 2^63 - 1 bytes. */
#define CMD_MAX_IMAGE_SIZE ((uint64_t)INT64_MAX)
/* An image size on the command line ("20G"); returns 0 or EXIT_USAGE after
 * printing why (bad syntax, or more than CMD_MAX_IMAGE_SIZE). */
int cmd_parse_image_size(const char *sub, const char *arg, uint64_t *out);

struct blk_image_opts;
/* -l SNAPSHOT (convert, measure), as qemu-img takes it: an ID or a name,
 * or "snapshot.id=ID[,snapshot.name=NAME]" (split in place; the name
 * wins when both are given); sets the image's "snapshot" key.  Returns 0
 * or EXIT_USAGE after printing why. */
int cmd_snapshot_param(const char *sub, char *arg, struct blk_image_opts *o);
/* --output=human|json; returns 0 or EXIT_USAGE after printing why. */
int cmd_parse_output(const char *sub, const char *arg, bool *json);
/* Append a repeated -o: "a=1" then "b=2" gives "a=1,b=2" (qemu-img merges
 * them too).  *list is malloc'd (or NULL).  Returns false on no memory. */
bool cmd_append_options(char **list, const char *more);
/* TLS credentials for nbds:// and https:// images, shared by every subcommand that
 * opens images: --tls-creds=DIR, --tls-psk=FILE, --tls-username=NAME. */
enum { CMD_OPT_TLS_CREDS = 0x4000, CMD_OPT_TLS_PSK, CMD_OPT_TLS_USERNAME };
#define CMD_TLS_LONGOPTS                                                                           \
    {"tls-creds", required_argument, NULL, CMD_OPT_TLS_CREDS},                                     \
        {"tls-psk", required_argument, NULL, CMD_OPT_TLS_PSK},                                     \
    {                                                                                              \
        "tls-username", required_argument, NULL, CMD_OPT_TLS_USERNAME                              \
    }
/* --untrusted, shared by the same subcommands: open each image alone
 * (no backing file, no data file, nothing it names), with its format
 * given or probed unambiguously.  See "Handling untrusted images" in
 * diskimg(1). */
enum { CMD_OPT_UNTRUSTED = 0x4100 };
#define CMD_UNTRUSTED_LONGOPT                                                                      \
    {                                                                                              \
        "untrusted", no_argument, NULL, CMD_OPT_UNTRUSTED                                          \
    }
#define CMD_UNTRUSTED_HELP                                                                         \
    "      --untrusted        open the image alone, never its backing file or\n"                   \
    "                         anything else it names (for downloaded images)\n"
struct blk_image_opts;
/* Applies an option every image-opening subcommand shares (TLS,
 * --untrusted) to o; returns true if c was one.  The TLS flags become
 * keys of o->options that the image's drivers may take (nbds:// does). */
bool cmd_image_option(int c, const char *arg, struct blk_image_opts *o);
#define CMD_TLS_HELP                                                                               \
    "      --tls-creds=DIR    nbds:// X.509: DIR/ca-cert.pem, client-cert.pem and\n"               \
    "                         client-key.pem (a server may require them), ca-crl.pem;\n"           \
    "                         https://: DIR/ca-cert.pem instead of the system's CAs\n"             \
    "      --tls-psk=FILE     nbds:// pre-shared keys (psktool format)\n"                          \
    "      --tls-username=ID  PSK identity (default: the file's first)\n"

/* --image-opts IMAGE (cmd/image-opts.c): "driver=FMT,file.filename=PATH,
 * KEY=VALUE..." split in place into o (format, filename, driver keys);
 * 0, or EXIT_USAGE after printing why.  For subcommand sub's messages;
 * keys (CMD_IMAGE_OPTS_*) names the extra generic keys sub takes. */
enum { CMD_OPT_IMAGE_OPTS = 0x4300 };
#define CMD_IMAGE_OPTS_HELP                                                                        \
    "      --image-opts       the image operand is options: driver=FMT,file.filename=PATH\n"       \
    "                         [,KEY=VALUE...], or driver=PROTOCOL,KEY=VALUE... (diskimg(1))\n"
#define CMD_IMAGE_OPTS_CACHE 1u /* cache=MODE sets o->cache */
int cmd_parse_image_opts(const char *sub, char *spec, unsigned keys, struct blk_image_opts *o);
/* The IMAGE operand arg: with --image-opts (image_opts), its options
 * (refused beside -f), else the file name; 0 or EXIT_USAGE. */
int cmd_image_operand(const char *sub, char *arg, bool image_opts, unsigned keys,
                      struct blk_image_opts *o);
/* The long options cmd_image_getopt takes: TLS, --image-opts, --untrusted. */
#define CMD_IMAGE_LONGOPTS                                                                         \
    CMD_TLS_LONGOPTS, {"image-opts", no_argument, NULL, CMD_OPT_IMAGE_OPTS}, CMD_UNTRUSTED_LONGOPT
/* The default branch of the getopt switch (optstring starting with ':')
 * of a subcommand that opens one image: --image-opts sets *image_opts
 * (NULL for a subcommand without it), the options cmd_image_option
 * takes go into o; 0 for those, else EXIT_USAGE after naming the option
 * that needs a value or is unknown.  A subcommand lists only the long
 * options it takes (CMD_IMAGE_LONGOPTS or some of them): the rest are
 * unknown to getopt and so here. */
int cmd_image_getopt(const char *sub, int c, char **argv, bool *image_opts,
                     struct blk_image_opts *o);
/* The same for a subcommand that opens two images (compare, convert):
 * the options cmd_image_option takes go into both a and b, since either
 * may be an nbds:// or https:// image. */
int cmd_two_images_getopt(const char *sub, int c, char **argv, bool *image_opts,
                          struct blk_image_opts *a, struct blk_image_opts *b);
/* After the options: exactly one IMAGE operand, taken as
 * cmd_image_operand takes it; 0 or EXIT_USAGE. */
int cmd_one_image_operand(const char *sub, int argc, char **argv, bool image_opts, unsigned keys,
                          struct blk_image_opts *o);
/* The pieces it is made of, for a parser taking more keys (serve):
 * cmd_kv_foreach calls fn on each "key=value" of spec (split in place),
 * stopping at fn's first non-zero return; messages name option what.
 * cmd_image_opts_key takes the keys every subcommand understands (driver,
 * format, file.filename, filename, file, file.driver): 0, EXIT_USAGE
 * after printing why, or CMD_KEY_NOT_MINE for any other key. */
#define CMD_KEY_NOT_MINE (-1)
typedef int (*cmd_kv_fn)(void *opaque, const char *key, const char *value);
int cmd_kv_foreach(const char *sub, const char *what, char *spec, cmd_kv_fn fn, void *opaque);
int cmd_image_opts_key(const char *sub, const char *what, struct blk_image_opts *o, const char *key,
                       const char *value);
/* --image-opts names the format with driver=: a -f beside it (o->format
 * set) is refused; 0 or EXIT_USAGE after printing why. */
int cmd_image_opts_refuse_format(const char *sub, const struct blk_image_opts *o);
/* The key a driver gets for key: file.KEY is the protocol's KEY. */
const char *cmd_image_opts_driver_key(const char *key);
/* After the keys: driver= resolved to a format or to a protocol that is
 * the image (protocol_image), file.driver= checked, the filename required
 * unless a protocol other than file builds its image from its keys, the
 * driver keys checked; 0 or EXIT_USAGE. */
int cmd_image_opts_finish(const char *sub, const char *what, struct blk_image_opts *o);
struct blk_image;
/* The image's name for messages: its filename, else what its protocol
 * node calls itself once open (img), else the protocol's name. */
const char *cmd_image_name(const struct blk_image_opts *o, const struct blk_image *img);

/* A content checksum (BLK_CHECKSUM_LEN bytes) as sha256sum prints one:
 * "HASH  NAME", NAME escaped as sha256sum escapes it. */
void cmd_print_checksum(FILE *f, const uint8_t *sum, const char *name);
/* Reproducible output (convert, create; cmd/repro-output.c): on with
 * --reproducible (flag) or whenever SOURCE_DATE_EPOCH is set; sets
 * o->reproducible and o->epoch (the variable, else 0).  Returns 0, or
 * EXIT_USAGE after one line naming a malformed SOURCE_DATE_EPOCH. */
struct blk_create_opts;
int cmd_repro_setup(bool flag, struct blk_create_opts *o);
/* Reproducible output writes every target but raw in order: clears
 * *out_of_order (-W) for them, saying so unless quiet. */
void cmd_repro_order(const struct blk_create_opts *o, const char *format, bool quiet,
                     bool *out_of_order);
/* After convert's copy: the target's IDs from its content checksum
 * (content, BLK_CHECKSUM_LEN bytes; NULL: computed here by reading the
 * target), the creation options and its size. */
struct blk_image;
int cmd_repro_identity(const struct blk_create_opts *o, struct blk_image *dst,
                       const uint8_t *content);
enum { CMD_OPT_REPRODUCIBLE = 0x4200 };
#define CMD_REPRODUCIBLE_LONGOPT                                                                   \
    {                                                                                              \
        "reproducible", no_argument, NULL, CMD_OPT_REPRODUCIBLE                                    \
    }

/* "64 MiB", "196 KiB": three significant digits, binary units. */
void cmd_size_str(uint64_t bytes, char *buf, size_t len);
/* The image name as qemu-img prints it: an NBD URI as qemu names the
 * connection (nbd:unix:S is nbd+unix://?socket=S), anything else as given.
 * malloc'd; NULL only without memory. */
char *cmd_display_name(const char *name);

/* NBD connections for bulk work (convert, bench) where the server
 * allows multi-conn; metadata commands use one.  A default offered to
 * every image, as the "connections" key its drivers may take. */
#define CMD_NBD_CONNECTIONS "4"
#define CMD_BULK_OPTIONS                                                                           \
    {                                                                                              \
        .kv = {{.key = "connections", .value = CMD_NBD_CONNECTIONS}}, .n = 1                       \
    }

#endif
