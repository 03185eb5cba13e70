/* formats/qcow2/backing.c: the backing file an image header names, and
 * how it is opened (or, with --untrusted, refused).
 *
 * Order (qcow2.h): above bitmap.c; calls no other qcow2 file. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "qcow2.h"

/* A backing file name: relative to the overlay's directory; protocols
 * ("json:", "nbd:") are not opened from an image's header. */
int qcow2_backing_path(struct qcow2_state *s, char **out)
{
    const char *name = s->hdr.backing_file;
    const char *colon = strchr(name, ':');
    const char *slash = strchr(name, '/');

    if (colon && (!slash || colon < slash)) {
        CLEANUP_FREE char *esc = str_escape(name);
        return err_setx(ENOTSUP,
                        "qcow2: backing file '%s' names a protocol, which is not "
                        "opened from an image header",
                        esc ? esc : "?");
    }
    if (name[0] == '/' || !strchr(s->node->filename, '/')) {
        /* absolute, or relative to an overlay in the current directory */
        *out = strdup(name);
    } else {
        CLEANUP_FREE char *copy = strdup(s->node->filename);
        if (!copy) {
            return err_set(ENOMEM, "qcow2: backing path");
        }
        const char *dir = dirname(copy);
        if (asprintf(out, "%s/%s", dir, name) < 0) {
            *out = NULL;
        }
    }
    return *out ? 0 : err_set(ENOMEM, "qcow2: backing path");
}

/* A chain that loops or is too deep fails at its bottom, and the message
 * names the file there; of the images above it only the top one adds its
 * name, or a deep chain would print every file in it. */
bool qcow2_chain_error_below(int r, const struct blk_open_opts *opts)
{
    return r == -ELOOP && opts->depth > 0;
}

int qcow2_open_backing(struct qcow2_state *s, const struct blk_open_opts *opts)
{
    CLEANUP_FREE char *path = NULL;
    struct blk_chain me = {0};
    struct stat st;
    int r = qcow2_backing_path(s, &path);

    if (r < 0) {
        return r;
    }
    if (stat(s->node->filename, &st) == 0) {
        me.dev = st.st_dev;
        me.ino = st.st_ino;
    }
    me.up = opts->chain;
    struct blk_open_opts bo = {
        .filename = path,
        .read_only = true,
        .direct = opts->direct,
        .stream = opts->stream,
        .aio = opts->aio,
        .no_flush = opts->no_flush,
        .depth = opts->depth + 1,
        .chain = &me,
        .force_share = opts->force_share,
    };
    blk_perm_for_backing(&opts->perms, &bo.perms);
    r = blk_open_stack(&s->backing, &bo, "file", s->hdr.backing_format);
    if (r < 0) {
        if (!qcow2_chain_error_below(r, opts)) {
            CLEANUP_FREE char *esc = str_escape(s->node->filename);
            err_prefix("qcow2: %s: backing file", esc ? esc : "?");
        }
        return r;
    }
    s->node->backing = s->backing;
    return 0;
}

/* --untrusted: the image is opened alone, and a command that would read
 * through to the backing file says which file it refused to open. */
int qcow2_refuse_backing(struct qcow2_state *s)
{
    CLEANUP_FREE char *esc = str_escape(s->hdr.backing_file);

    return err_setx(EPERM,
                    "qcow2: refusing to open backing file '%s' (--untrusted opens the image "
                    "alone)",
                    esc ? esc : "?");
}
