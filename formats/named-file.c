/* formats/named-file.c: resolving and opening the files an image names
 * (named-file.h says why there is one place for it). */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "named-file.h"

/* "nbd://...", "json:{...}": a colon before any slash. */
static bool names_protocol(const char *name)
{
    const char *colon = strchr(name, ':');
    const char *slash = strchr(name, '/');

    return colon && (!slash || colon < slash);
}

bool fmt_names_rbd(const char *name)
{
    return strncmp(name, "rbd:", 4) == 0;
}

/* "rbd:POOL/IMAGE", "rbd:POOL/NAMESPACE/IMAGE", each with "@SNAP" or not:
 * no ':' that would start an option (mon_host=, conf=, keyring=: where
 * to connect, which files to read), no '\\' escapes, no empty part. */
static bool plain_rbd_name(const char *name)
{
    const char *spec = name + 4;
    const char *at = strchr(spec, '@');

    if (spec[0] == '/' || !strchr(spec, '/') || strpbrk(spec, ":\\")) {
        return false;
    }
    for (const char *p = spec; *p; p++) {
        if ((unsigned char)*p < 0x20 || (p[0] == '/' && (p[1] == '/' || p[1] == '@' || !p[1]))) {
            return false;
        }
    }
    return !at || (at[1] && !strchr(at + 1, '@') && !strchr(at, '/'));
}

static bool plain_file_name(const char *name)
{
    return name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

/* An image read from someone else's server names nothing of this host:
 * a web server must not make a copy of its image carry /home/x/.ssh/id_rsa
 * or a disk of the user's Ceph cluster along as backing data. */
static int refuse_name_from_remote(const char *driver, const char *what, const char *image,
                                   const char *name)
{
    const struct blk_driver *proto = blk_protocol_for(image);

    err_clear(); /* blk_protocol_for's message for a URL nobody claims */
    if (!proto || !proto->remote) {
        return 0;
    }
    CLEANUP_FREE char *esc = str_escape(name);
    return err_setx(EPERM,
                    "%s: %s '%s' is not opened: an image read from a server (%s) may not name "
                    "files or images of this host (download it first)",
                    driver, what, esc ? esc : "?", proto->name);
}

int fmt_named_path(const char *driver, const char *what, const char *image, const char *name,
                   unsigned flags, char **out)
{
    *out = NULL;
    if ((flags & FMT_NAME_MAY_RBD) && fmt_names_rbd(name)) {
        if (!plain_rbd_name(name)) {
            CLEANUP_FREE char *esc = str_escape(name);
            return err_setx(
                EPERM,
                "%s: %s '%s' is not a plain rbd:POOL/IMAGE[@SNAP] name: an image "
                "may not say where or as whom to connect (the cluster comes from CEPH_CONF)",
                driver, what, esc ? esc : "?");
        }
        if (refuse_name_from_remote(driver, what, image, name) < 0) {
            return -EPERM;
        }
        *out = strdup(name);
        return *out ? 0 : err_set(ENOMEM, "%s: %s path", driver, what);
    }
    if (names_protocol(name)) {
        CLEANUP_FREE char *esc = str_escape(name);
        return err_setx(ENOTSUP,
                        "%s: %s '%s' names a protocol, which is not opened from an image "
                        "header",
                        driver, what, esc ? esc : "?");
    }
    if ((flags & FMT_NAME_SAME_DIR) && !plain_file_name(name)) {
        CLEANUP_FREE char *esc = str_escape(name);
        return err_setx(EPERM, "%s: %s '%s' is not a file in the image's own directory", driver,
                        what, esc ? esc : "?");
    }
    const struct blk_driver *proto = name[0] == '/' ? NULL : blk_protocol_for(image);
    if (name[0] != '/' && (!proto || strcmp(proto->name, "file") != 0)) {
        /* qemu: "Cannot generate a base directory for NBD nodes" */
        CLEANUP_FREE char *esc = str_escape(name);
        err_clear();
        return err_setx(ENOTDIR,
                        "%s: %s '%s' is relative, and an image that is no local file "
                        "has no directory to find it in",
                        driver, what, esc ? esc : "?");
    }
    if (refuse_name_from_remote(driver, what, image, name) < 0) {
        return -EPERM;
    }
    if (name[0] == '/' || !strchr(image, '/')) {
        /* absolute, or relative to an image in the current directory */
        *out = strdup(name);
    } else {
        CLEANUP_FREE char *copy = strdup(image);
        if (!copy) {
            return err_set(ENOMEM, "%s: %s path", driver, what);
        }
        if (asprintf(out, "%s/%s", dirname(copy), name) < 0) {
            *out = NULL;
        }
    }
    return *out ? 0 : err_set(ENOMEM, "%s: %s path", driver, what);
}

int fmt_refuse_named(const char *driver, const char *what, const char *name)
{
    CLEANUP_FREE char *esc = str_escape(name);

    return err_setx(EPERM, "%s: refusing to open %s '%s' (--untrusted opens the image alone)",
                    driver, what, esc ? esc : "?");
}

bool fmt_chain_error_below(int r, const struct blk_open_opts *opts)
{
    return r == -ELOOP && opts->depth > 0;
}

int fmt_rbd_backing_allowed(const char *driver, const char *name, const char *format, bool probed)
{
    CLEANUP_FREE char *plain = NULL;
    int r = fmt_named_path(driver, "backing file", "", name, FMT_NAME_MAY_RBD, &plain);
    if (r < 0) {
        return r;
    }
    CLEANUP_FREE char *esc = str_escape(name);
    if (!format) {
        return err_setx(EPERM,
                        "%s: backing file '%s' is opened only with its format recorded "
                        "(create or rebase it with -F)",
                        driver, esc ? esc : "?");
    }
    if (probed) {
        return err_setx(EPERM,
                        "%s: backing file '%s' is opened only when the image's format is "
                        "named (-f %s), not probed",
                        driver, esc ? esc : "?", driver);
    }
    return 0;
}

/* path with every character the rbd: name syntax splits at escaped. */
static char *rbd_escape(const char *path)
{
    char *out = malloc(2 * strlen(path) + 1), *o = out;

    for (const char *p = path; out && *p; p++) {
        if (strchr(":@/=\\", *p)) {
            *o++ = '\\';
        }
        *o++ = *p;
    }
    if (out) {
        *o = '\0';
    }
    return out;
}

int fmt_rbd_backing_conf(const char *name, char **out)
{
    const char *env = getenv("CEPH_CONF"), *home = getenv("HOME");
    CLEANUP_FREE char *in_home = NULL;
    const char *conf = NULL;

    *out = NULL;
    if (env && env[0]) {
        conf = env;
    } else if (access("/etc/ceph/ceph.conf", F_OK) == 0) {
        conf = "/etc/ceph/ceph.conf";
    } else if (home && asprintf(&in_home, "%s/.ceph/ceph.conf", home) >= 0 &&
               access(in_home, F_OK) == 0) {
        conf = in_home;
    }
    if (!conf) {
        CLEANUP_FREE char *esc = str_escape(name);
        return err_setx(ENOENT,
                        "backing file '%s': no Ceph configuration (CEPH_CONF, "
                        "/etc/ceph/ceph.conf, ~/.ceph/ceph.conf); an image's rbd: backing file "
                        "never reads ./ceph.conf",
                        esc ? esc : "?");
    }
    CLEANUP_FREE char *esc_conf = rbd_escape(conf);
    if (!esc_conf || asprintf(out, "%s:conf=%s", name, esc_conf) < 0) {
        *out = NULL;
        return err_set(ENOMEM, "rbd backing file name");
    }
    return 0;
}

int fmt_open_backing(struct blk_node *n, const struct blk_open_opts *opts, const char *path,
                     const char *format, struct blk_node **out)
{
    struct blk_chain me = {0};
    struct stat st;
    bool rbd = fmt_names_rbd(path);

    CLEANUP_FREE char *rbd_path = NULL;
    if (rbd) {
        int r = fmt_rbd_backing_allowed(n->drv->name, path, format, opts->probed);
        if (r == 0) {
            r = fmt_rbd_backing_conf(path, &rbd_path);
        }
        if (r < 0) {
            return r;
        }
        path = rbd_path;
    }

    if (stat(n->filename, &st) == 0) {
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
        .write_depth = opts->write_depth,
    };
    blk_perm_for_backing(&opts->perms, &bo.perms);
    if (opts->write_depth == bo.depth) {
        /* commit's base: written and grown, by nobody else meanwhile */
        bo.read_only = false;
        bo.force_share = false;
        bo.perms.perm |= BLK_PERM_WRITE | BLK_PERM_RESIZE;
        bo.perms.shared &= ~(unsigned)(BLK_PERM_WRITE | BLK_PERM_RESIZE);
        bo.perms.shared_here &= ~(unsigned)(BLK_PERM_WRITE | BLK_PERM_RESIZE);
    }
    int r = blk_open_stack(out, &bo, rbd ? "rbd" : "file", format);
    if (r < 0 && !fmt_chain_error_below(r, opts)) {
        CLEANUP_FREE char *esc = str_escape(n->filename);
        err_prefix("%s: %s: backing file", n->drv->name, esc ? esc : "?");
    }
    return r;
}

int fmt_open_extent(struct blk_node *n, const struct blk_open_opts *opts, const char *path,
                    struct blk_node **out)
{
    const struct blk_driver *file = blk_find_driver("file");
    struct blk_open_opts eo = {
        .filename = path,
        .read_only = opts->read_only,
        .direct = opts->direct,
        .stream = opts->stream,
        .aio = opts->aio,
        .no_flush = opts->no_flush,
        .force_share = opts->force_share,
        .perms = opts->perms,
    };

    if (!file) {
        return err_setx(ENOTSUP, "%s: no file driver for extent", n->drv->name);
    }
    if (n->drv->child_perm) {
        n->drv->child_perm(opts, &eo.perms);
    }
    int r = blk_node_open(out, file, NULL, &eo);
    if (r < 0) {
        CLEANUP_FREE char *esc = str_escape(n->filename);
        err_prefix("%s: %s: extent", n->drv->name, esc ? esc : "?");
        return r;
    }
    (*out)->no_flush = opts->no_flush;
    return 0;
}
