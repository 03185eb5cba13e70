/* cmd/target-lint.c: check --target=NAME IMAGE.  Opens the image as
 * check does (read-only, metadata only), takes the profile of the
 * target whose format the image has, and tests each rule of it against
 * what the format driver reports (info's format-specific fields, the
 * virtual size, the file's length): nothing here reads the file's bytes.
 * A file the driver refuses to open because its content is wrong (a bad
 * checksum, a missing cookie) breaks the target's rules too. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "target.h"

void target_print_violation(const char *name, enum target_severity sev, const char *problem,
                            const char *fix)
{
    printf("%s: %s%s: %s\n", name, sev == TARGET_NOTE ? "note: " : "", problem, fix);
}

static const char *field_label(const struct target_rule *r)
{
    return r->key;
}

/* The value of a field as text, for messages (escaped: it comes from the
 * image). */
static void field_text(const struct blk_info_field *f, char *buf, size_t len)
{
    if (f->type == BLK_INFO_STR) {
        CLEANUP_FREE char *esc = str_escape(f->s);
        snprintf(buf, len, "\"%s\"", esc ? esc : "?");
    } else if (f->type == BLK_INFO_BOOL) {
        snprintf(buf, len, "%s", f->b ? "true" : "false");
    } else {
        snprintf(buf, len, "%" PRId64, f->i);
    }
}

/* Does f break rule r?  Writes the problem into buf when it does. */
static bool field_broken(const struct target_rule *r, const struct target_facts *f,
                         const struct blk_info_field *v, char *buf, size_t len)
{
    char have[160];

    if (!v) {
        snprintf(buf, len, "the %s driver reports no %s (%s)", f->format, field_label(r), r->what);
        return true;
    }
    field_text(v, have, sizeof have);
    switch (r->check) {
    case TARGET_FIELD_STR:
        if (v->type == BLK_INFO_STR && strcmp(v->s, r->str) == 0) {
            return false;
        }
        snprintf(buf, len, "%s is %s, not \"%s\" (%s)", field_label(r), have, r->str, r->what);
        return true;
    case TARGET_FIELD_NOT_STR:
        if (v->type != BLK_INFO_STR || strcmp(v->s, r->str) != 0) {
            return false;
        }
        snprintf(buf, len, "%s is %s (%s)", field_label(r), have, r->what);
        return true;
    case TARGET_FIELD_INT:
        if (v->type == BLK_INFO_INT && v->i == r->n) {
            return false;
        }
        snprintf(buf, len, "%s is %s, not %" PRId64 " (%s)", field_label(r), have, r->n, r->what);
        return true;
    case TARGET_FIELD_BITS:
        if (v->type == BLK_INFO_INT && (v->i & r->n) == r->n) {
            return false;
        }
        snprintf(buf, len, "%s 0x%" PRIx64 " lacks the bits 0x%" PRIx64 " (%s)", field_label(r),
                 (uint64_t)v->i, (uint64_t)r->n, r->what);
        return true;
    case TARGET_FIELD_TRUE:
        if (v->type == BLK_INFO_BOOL && v->b) {
            return false;
        }
        snprintf(buf, len, "%s is %s (%s)", field_label(r), have, r->what);
        return true;
    case TARGET_FIELD_IS_SIZE:
        if (v->type == BLK_INFO_INT && (uint64_t)v->i == f->virtual_size) {
            return false;
        }
        snprintf(buf, len, "%s %s differs from the virtual size %" PRIu64 " (%s)", field_label(r),
                 have, f->virtual_size, r->what);
        return true;
    default:
        return false;
    }
}

static bool size_broken(const struct target_rule *r, const struct target_facts *f, char *buf,
                        size_t len)
{
    uint64_t n = (uint64_t)r->n, n2 = (uint64_t)r->n2;

    switch (r->check) {
    case TARGET_SIZE_ALIGN:
        if (f->virtual_size % n == 0) {
            return false;
        }
        snprintf(buf, len, "virtual size %" PRIu64 " is not %s", f->virtual_size, r->what);
        return true;
    case TARGET_SIZE_MIN:
        if (f->virtual_size >= n) {
            return false;
        }
        snprintf(buf, len, "virtual size %" PRIu64 " is below %s", f->virtual_size, r->what);
        return true;
    case TARGET_SIZE_MAX:
        if (f->virtual_size <= n) {
            return false;
        }
        snprintf(buf, len, "virtual size %" PRIu64 " is above %s", f->virtual_size, r->what);
        return true;
    case TARGET_FILE_ALIGN:
        if (f->file_length >= n2 && (f->file_length - n2) % n == 0) {
            return false;
        }
        snprintf(buf, len, "file length %" PRIu64 " is not %s", f->file_length, r->what);
        return true;
    default:
        return false;
    }
}

static bool rule_broken(const struct target_rule *r, const struct target_facts *f, char *buf,
                        size_t len)
{
    if (r->check <= TARGET_FIELD_IS_SIZE) {
        return field_broken(r, f, blk_info_find(f->info, r->key), buf, len);
    }
    return size_broken(r, f, buf, len);
}

/* Each rule of p against f; returns the number of MUST rules broken. */
static int lint_profile(const struct target *t, const struct target_profile *p,
                        const struct target_facts *f, bool quiet)
{
    char problem[512], fix[64];
    int broken = 0;

    snprintf(fix, sizeof fix, "convert with --target=%s", t->name);
    for (const struct target_rule *r = p->rules; r && r->what; r++) {
        if (!rule_broken(r, f, problem, sizeof problem)) {
            continue;
        }
        broken += r->severity == TARGET_MUST;
        if (!quiet) {
            target_print_violation(t->name, r->severity, problem, r->fix ? r->fix : fix);
        }
    }
    return broken;
}

static const struct target_profile *profile_for(const struct target *t, const char *format)
{
    for (const struct target_profile *p = t->profiles; p->format; p++) {
        if (strcmp(p->format, format) == 0) {
            return p;
        }
    }
    return NULL;
}

/* The image could not be opened: its content breaks the format's rules
 * (EINVAL, ENOTSUP, EFBIG: a violation), or it could not be read. */
static int open_failed(const struct target *t, const char *filename, int r, bool quiet)
{
    char fix[64];

    if (r != -EINVAL && r != -ENOTSUP && r != -EFBIG) {
        cmd_print_open_error(r, true);
        return cmd_status(r, EXIT_ERROR);
    }
    if (!quiet) {
        CLEANUP_FREE char *esc = str_escape(filename);
        snprintf(fix, sizeof fix, "convert with --target=%s", t->name);
        printf("%s: %s is no image %s reads: %s: %s\n", t->name, esc ? esc : "?", t->name,
               err_msg(), fix);
    }
    err_clear();
    return EXIT_CHECK_TARGET;
}

static int lint_image(const struct target *t, struct blk_image *img, const char *filename,
                      bool quiet)
{
    struct blk_image_info info;
    struct target_facts f = {.filename = filename, .info = &info};
    const struct target_profile *p;
    char fmts[128];
    int r = blk_image_get_info(img, &info);

    if (r < 0) {
        cmd_print_error(r);
        return EXIT_ERROR;
    }
    f.format = blk_image_format(img);
    f.virtual_size = blk_image_size(img);
    struct blk_node *file = blk_node_child(blk_image_root(img));
    int64_t flen = file ? blk_get_length(file) : -1;
    f.file_length = flen < 0 ? 0 : (uint64_t)flen;
    p = profile_for(t, f.format);
    if (!p) {
        size_t n = 0;
        for (const struct target_profile *q = t->profiles; q->format && n < sizeof fmts; q++) {
            n += (size_t)snprintf(fmts + n, sizeof fmts - n, "%s%s", n ? " or " : "", q->describe);
        }
        if (!quiet) {
            char problem[256];
            snprintf(problem, sizeof problem, "the image is %s, not %s", f.format, fmts);
            char fix[64];
            snprintf(fix, sizeof fix, "convert with --target=%s", t->name);
            target_print_violation(t->name, TARGET_MUST, problem, fix);
        }
        blk_image_info_free(&info);
        return EXIT_CHECK_TARGET;
    }
    int broken = lint_profile(t, p, &f, quiet);
    blk_image_info_free(&info);
    if (broken) {
        return EXIT_CHECK_TARGET;
    }
    if (!quiet) {
        CLEANUP_FREE char *esc = str_escape(filename);
        printf("%s: acceptable for %s\n", esc ? esc : "?", t->name);
    }
    return EXIT_OK;
}

int target_lint(const char *name, const struct blk_image_opts *opts, bool quiet)
{
    const struct target *t = target_find(name);
    struct blk_image *img = NULL;
    int r, status;

    if (!t) {
        cmd_usage_error("check", "unknown target '%s' (targets: %s)", name, target_names());
        return EXIT_ERROR; /* check's usage errors are 1: 2 means corruptions */
    }
    if (t->lint) {
        r = t->lint(name, opts->filename, quiet);
        if (r < 0) {
            cmd_print_error(r);
            return EXIT_ERROR;
        }
        if (r == 0 && !quiet) {
            CLEANUP_FREE char *esc = str_escape(opts->filename);
            printf("%s: acceptable for %s\n", esc ? esc : "?", t->name);
        }
        return r ? EXIT_CHECK_TARGET : EXIT_OK;
    }
    r = blk_image_open(&img, opts);
    if (r < 0) {
        return open_failed(t, opts->filename, r, quiet);
    }
    status = lint_image(t, img, opts->filename, quiet);
    blk_image_close(img);
    return status;
}
