/* cmd/target.h: cloud and hypervisor targets (--target=NAME) for convert
 * and check: one table (cmd/target.c) says, per target, which formats it
 * takes, with which creation options, how the virtual size is rounded,
 * which options the user may not change, and the rules a finished file
 * must meet (the lint, cmd/target-lint.c).  diskimg-targets(7) prints
 * the same table with the source of every rule.
 *
 * A target is a list of profiles, one per output format it accepts; the
 * first is the default.  A profile whose output is no block format (an
 * archive) writes it with its own hook instead of create + copy, and a
 * target whose files the block layer cannot open lints them with its own
 * hook. */
#ifndef DISKIMG_CMD_TARGET_H
#define DISKIMG_CMD_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/block.h"

/* check --target: the file breaks a rule of the target (distinct from
 * check's other codes: 0-3, 5 and 63). */
#define EXIT_CHECK_TARGET 4

/* An option the target fixes: given with another value, convert refuses
 * (EXIT_USAGE), naming the rule. */
enum target_value { TARGET_STR, TARGET_BOOL, TARGET_SIZE };
struct target_pin {
    const char *key;
    const char *value;
    enum target_value kind;
    const char *why; /* "Azure takes fixed VHDs only" */
};

/* ---- the lint ---- */

/* A rule that fails makes the file unacceptable; a note is printed and
 * does not (advice: the service accepts the file and adjusts it). */
enum target_severity { TARGET_MUST, TARGET_NOTE };

/* What a rule looks at; every fact comes from the block layer (the
 * format driver's info fields), not from the file's bytes.  The checks
 * of an info field come first, up to TARGET_FIELD_IS_SIZE: the lint
 * tells the two kinds apart by that order. */
enum target_check {
    TARGET_FIELD_STR,     /* info field key is the string str */
    TARGET_FIELD_NOT_STR, /* info field key is not the string str */
    TARGET_FIELD_INT,     /* info field key is n */
    TARGET_FIELD_BITS,    /* info field key has every bit of n */
    TARGET_FIELD_TRUE,    /* boolean info field key is true */
    TARGET_FIELD_IS_SIZE, /* info field key equals the virtual size */
    TARGET_SIZE_ALIGN,    /* the virtual size is a multiple of n */
    TARGET_SIZE_MIN,      /* the virtual size is at least n */
    TARGET_SIZE_MAX,      /* the virtual size is at most n */
    TARGET_FILE_ALIGN,    /* (file length - n2) is a multiple of n */
};

struct target_rule {
    enum target_severity severity;
    enum target_check check;
    const char *key;
    const char *str;
    int64_t n, n2;
    /* The broken rule in words, completing "<what> <value> is not ...":
     * "a whole number of MiB".  The fix is "convert with --target=NAME"
     * unless fix says otherwise. */
    const char *what;
    const char *fix;
    const char *source; /* where the rule comes from (diskimg-targets(7)) */
};

struct target_facts {
    const char *filename;
    const char *format;
    uint64_t virtual_size;
    uint64_t file_length;
    const struct blk_image_info *info;
};

/* ---- the table ---- */

struct blk_copy_opts;
struct target_profile;

/* A profile whose output is no block format (an archive): write OUT from
 * src, of virtual size size (rounded already), with create's times
 * (reproducible output); return 0 or -errno with a message.  convert
 * removes OUT when it fails. */
typedef int (*target_write_fn)(const struct target_profile *p, struct blk_image *src,
                               const char *out, uint64_t size, const struct blk_copy_opts *copy,
                               const struct blk_create_opts *create);
/* A target whose files are no block image: print each violation on
 * stdout (target_print_violation) and return how many there were, or
 * -errno when the file could not be read. */
typedef int (*target_lint_fn)(const char *name, const char *filename, bool quiet);

struct target_profile {
    const char *format;  /* -O */
    const char *options; /* default -o; the user's options come after */
    const struct target_pin *pins;
    uint64_t align;         /* virtual size rounded up to a multiple of this (0: none) */
    const char *align_what; /* "a whole number of MiB" */
    const char *size_what;  /* what is rounded, for the message (NULL: "virtual size") */
    uint64_t min_size;      /* rounded up to at least this (0: none) */
    uint64_t max_size;      /* a larger source is an error (0: the writer's limit) */
    const char *max_why;    /* names the limit */
    /* The format always compresses (streamOptimized): -c is refused as
     * implied; otherwise -c is refused because the target cannot take
     * compressed data. */
    bool compressed;
    const char *describe; /* "a fixed VHD" */
    target_write_fn write;
    const struct target_rule *rules; /* ends with what == NULL */
};

struct target {
    const char *name;
    const char *summary;                   /* for --help: "fixed VHD, size a whole MiB" */
    const struct target_profile *profiles; /* ends with format == NULL */
    target_lint_fn lint;                   /* NULL: lint the profiles' rules */
};

extern const struct target targets[]; /* ends with name == NULL */

/* "azure, aws, ..." for messages and --help. */
const char *target_names(void);
const struct target *target_find(const char *name);

/* ---- convert ---- */

struct target_choice {
    const struct target *target;
    const struct target_profile *profile;
    char *options; /* malloc'd: the profile's options, then the user's */
};

/* What convert's command line asked for. */
struct target_request {
    const char *format;  /* -O, NULL when not given */
    const char *options; /* -o, merged; NULL when none */
    bool compress;       /* -c */
    bool existing;       /* -n, or an NBD export */
    bool backing;        /* -B */
};

/* Pick target name's profile for req and check req against its rules:
 * 0, or EXIT_USAGE after printing the rule broken (unknown target, a
 * format it does not take, an option it fixes otherwise). */
int target_choose(const char *name, const struct target_request *req, struct target_choice *out);
void target_choice_free(struct target_choice *c);
/* The format whose options -o help lists: -O when given (or no target),
 * else the target's default format. */
const char *target_help_format(const char *name, const char *format, bool format_given);
/* The target's virtual size for a source of src_size, rounded up as the
 * target wants (said on stderr unless quiet); -EFBIG with a message
 * naming the limit when the source is larger than the target takes. */
int target_size(const struct target_choice *c, uint64_t src_size, bool quiet, uint64_t *out);

/* ---- check --target (cmd/target-lint.c) ---- */

/* Lint filename for target name: 0 acceptable, EXIT_CHECK_TARGET with
 * each violation on stdout (as lines, or one JSON object), or check's
 * error codes. */
enum target_output { TARGET_OUTPUT_HUMAN, TARGET_OUTPUT_JSON, TARGET_OUTPUT_QUIET };
int target_lint(const char *name, const struct blk_image_opts *opts, enum target_output out);
/* A violation: "NAME: PROBLEM: FIX" on stdout (notes say "NAME: note:
 * ..."), kept for the JSON verdict with --output=json, dropped with -q. */
void target_print_violation(const char *name, enum target_severity sev, const char *problem,
                            const char *fix);

#endif
