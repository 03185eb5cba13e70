/* cmd/target-gce.c: the gce target's hooks for the target table
 * (cmd/target.c).  Its output is no block format but an archive, a
 * gzip'd old-GNU tar holding disk.raw (block/archive-gce.h), so it writes
 * the file itself; and it lints archives with its own reader
 * (common/gce-lint.h) rather than through the block layer.  Options,
 * messages and the file's life (created, synced, removed on failure)
 * live here; the bytes are the block layer's. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "block/archive-gce.h"
#include "cmd.h"
#include "target-gce.h"
#include "common/error.h"

/* The tar member's and the gzip header's time: the epoch under
 * reproducible output (SOURCE_DATE_EPOCH or --reproducible), else now. */
static uint64_t gce_mtime(const struct blk_create_opts *create)
{
    return create->reproducible ? create->epoch : (uint64_t)time(NULL);
}

/* "-" is standard output (a pipe into an upload): not a terminal. */
static int open_output(const char *path, int *fd, bool *created)
{
    *created = false;
    if (strcmp(path, "-") == 0) {
        if (isatty(STDOUT_FILENO)) {
            return err_setx(EINVAL, "gce: will not write a compressed archive to a terminal");
        }
        *fd = STDOUT_FILENO;
        return 0;
    }
    *fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (*fd < 0) {
        return err_set(errno, "%s", path);
    }
    *created = true;
    return 0;
}

/* Durable before convert says so, as its other targets are (a pipe
 * needs nothing). */
static int sync_output(const char *path, int fd)
{
    struct stat st;

    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fdatasync(fd) < 0) {
        return err_set(errno, "%s: fdatasync", path);
    }
    return 0;
}

int target_gce_write(const struct target_profile *p, struct blk_image *src, const char *out,
                     uint64_t size, const struct blk_copy_opts *copy,
                     const struct blk_create_opts *create)
{
    struct blk_gce_opts g = {
        .workers = copy->workers,
        .mtime = gce_mtime(create),
        .progress = copy->progress,
        .progress_opaque = copy->progress_opaque,
        .cancel = copy->cancel,
    };
    struct blk_gce_result res;
    bool created = false;
    int fd = -1, r;

    (void)p;
    if (size != blk_gce_disk_size(blk_image_size(src))) {
        return err_setx(EINVAL, "gce: disk.raw must be %" PRIu64 " bytes, not %" PRIu64,
                        blk_gce_disk_size(blk_image_size(src)), size);
    }
    r = open_output(out, &fd, &created);
    if (r == 0) {
        r = blk_gce_write(src, fd, &g, &res);
    }
    if (r == 0) {
        r = sync_output(out, fd);
    }
    if (r == 0 && copy->checksum) {
        /* disk.raw's content: the source read once more, padded */
        struct blk_checksum_opts co = {
            .workers = copy->workers, .cancel = copy->cancel, .size = size};
        r = blk_image_checksum(src, &co, copy->checksum);
    }
    if (created && close(fd) < 0 && r == 0) {
        r = err_set(errno, "%s: close", out);
    }
    if (r < 0 && created) {
        unlink(out); /* convert removes it too; a pipe has nothing to remove */
    }
    return r;
}

struct lint_print {
    const char *name;
};

static void print_violation(void *opaque, const char *problem, const char *fix)
{
    struct lint_print *lp = opaque;

    target_print_violation(lp->name, TARGET_MUST, problem, fix);
}

static void print_nothing(void *opaque, const char *problem, const char *fix)
{
    (void)opaque;
    (void)problem;
    (void)fix;
}

int target_gce_lint(const char *name, const char *filename, bool quiet)
{
    struct lint_print lp = {name};

    return blk_gce_lint(filename, quiet ? print_nothing : print_violation, &lp);
}
