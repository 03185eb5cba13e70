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
#include "common/json.h"
#include "target.h"

/* Where violations go: printed as they come, kept for one JSON object
 * at the end (--output=json), or dropped (-q).  One lint per process. */
static struct {
    enum target_output mode;
    struct lint_item {
        enum target_severity sev;
        char *problem, *fix;
    } items[64];
    unsigned n;
} sink;

void target_print_violation(const char *name, enum target_severity sev, const char *problem,
                            const char *fix)
{
    if (sink.mode == TARGET_OUTPUT_HUMAN) {
        printf("%s: %s%s: %s\n", name, sev == TARGET_NOTE ? "note: " : "", problem, fix);
    } else if (sink.mode == TARGET_OUTPUT_JSON &&
               sink.n < sizeof sink.items / sizeof sink.items[0]) {
        sink.items[sink.n++] = (struct lint_item){sev, strdup(problem), strdup(fix)};
    }
}

/* The verdict: the human line when acceptable, or the JSON object. */
static void lint_done(const struct target *t, const char *filename, int status)
{
    CLEANUP_FREE char *esc = str_escape(filename);
    struct json_writer w;

    if (sink.mode == TARGET_OUTPUT_HUMAN && status == EXIT_OK) {
        printf("%s: acceptable for %s\n", esc ? esc : "?", t->name);
    }
    if (sink.mode == TARGET_OUTPUT_JSON) {
        json_init(&w, stdout, false);
        json_begin_object(&w, NULL);
        json_str(&w, "filename", filename);
        json_str(&w, "target", t->name);
        json_bool(&w, "acceptable", status == EXIT_OK);
        json_begin_array(&w, "violations");
        for (unsigned i = 0; i < sink.n; i++) {
            json_begin_object(&w, NULL);
            json_str(&w, "severity", sink.items[i].sev == TARGET_NOTE ? "note" : "must");
            json_str(&w, "problem", sink.items[i].problem ? sink.items[i].problem : "");
            json_str(&w, "fix", sink.items[i].fix ? sink.items[i].fix : "");
            json_end_object(&w);
        }
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    }
    for (unsigned i = 0; i < sink.n; i++) {
        free(sink.items[i].problem);
        free(sink.items[i].fix);
    }
    sink.n = 0;
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
                        const struct target_facts *f)
{
    char problem[512], fix[64];
    int broken = 0;

    snprintf(fix, sizeof fix, "convert with --target=%s", t->name);
    for (const struct target_rule *r = p->rules; r && r->what; r++) {
        if (!rule_broken(r, f, problem, sizeof problem)) {
            continue;
        }
        broken += r->severity == TARGET_MUST;
        target_print_violation(t->name, r->severity, problem, r->fix ? r->fix : fix);
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
static int open_failed(const struct target *t, const char *filename, int r)
{
    CLEANUP_FREE char *esc = str_escape(filename);
    char problem[1024], fix[64];

    if (r != -EINVAL && r != -ENOTSUP && r != -EFBIG) {
        cmd_print_open_error(r, true);
        return cmd_status(r, EXIT_ERROR);
    }
    snprintf(fix, sizeof fix, "convert with --target=%s", t->name);
    snprintf(problem, sizeof problem, "%s is no image %s reads: %s", esc ? esc : "?", t->name,
             err_msg());
    target_print_violation(t->name, TARGET_MUST, problem, fix);
    err_clear();
    return EXIT_CHECK_TARGET;
}

static int lint_image(const struct target *t, struct blk_image *img, const char *filename)
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
        char problem[256], fix[64];
        snprintf(problem, sizeof problem, "the image is %s, not %s", f.format, fmts);
        snprintf(fix, sizeof fix, "convert with --target=%s", t->name);
        target_print_violation(t->name, TARGET_MUST, problem, fix);
        blk_image_info_free(&info);
        return EXIT_CHECK_TARGET;
    }
    int broken = lint_profile(t, p, &f);
    blk_image_info_free(&info);
    return broken ? EXIT_CHECK_TARGET : EXIT_OK;
}

int target_lint(const char *name, const struct blk_image_opts *opts, enum target_output out)
{
    const struct target *t = target_find(name);
    struct blk_image *img = NULL;
    int r, status;

    if (!t) {
        cmd_usage_error("check", "unknown target '%s' (targets: %s)", name, target_names());
        return EXIT_ERROR; /* check's usage errors are 1: 2 means corruptions */
    }
    sink.mode = out;
    if (t->lint) {
        r = t->lint(name, opts->filename, out == TARGET_OUTPUT_QUIET);
        if (r < 0) {
            cmd_print_error(r);
            return EXIT_ERROR;
        }
        status = r ? EXIT_CHECK_TARGET : EXIT_OK;
    } else if ((r = blk_image_open(&img, opts)) < 0) {
        status = open_failed(t, opts->filename, r);
        if (status != EXIT_CHECK_TARGET) {
            return status; /* not read: no verdict */
        }
    } else {
        status = lint_image(t, img, opts->filename);
        blk_image_close(img);
    }
    if (status == EXIT_OK || status == EXIT_CHECK_TARGET) {
        lint_done(t, opts->filename, status);
    }
    return status;
}
