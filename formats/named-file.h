/* formats/named-file.h: opening the files an image names.
 *
 * A backing file (qcow2), a parent (VHD), an extent (VMDK) is a path
 * written by whoever made the image, which may be a download.  Every
 * format opens such files through here, so that the rules are one set:
 * names are relative to the image's directory, names with a protocol
 * ("nbd:", "json:") are never opened (but for a plain rbd:POOL/IMAGE
 * backing file, on conditions: fmt_open_backing), extents stay in the image's
 * directory, the file driver accepts only regular files and block
 * devices, backing chains are checked for loops and depth, the locks
 * are qemu's, and --untrusted refuses all of it with one message. */
#ifndef DISKIMG_FORMATS_NAMED_FILE_H
#define DISKIMG_FORMATS_NAMED_FILE_H

#include "block/driver.h"

/* fmt_named_path flags. */
enum {
    /* The name must be a plain file name: no '/', not "." or "..", so the
     * file is in the image's own directory (VMDK extents). */
    FMT_NAME_SAME_DIR = 1u << 0,
    /* The name may be a plain "rbd:POOL/IMAGE[@SNAP]", with no options
     * (qcow2 backing files); *out is then the name itself. */
    FMT_NAME_MAY_RBD = 1u << 1,
};

/* Does the name start with "rbd:"? */
bool fmt_names_rbd(const char *name);

/* The path of the file 'name' that the image 'image' names, in *out
 * (malloc'd): relative to the image's directory unless absolute.
 * 'driver' and 'what' ("backing file", "extent") name it in messages:
 * "DRIVER: WHAT 'NAME' names a protocol, ...".  -ENOTSUP or -EPERM with
 * a message when the name is refused; -ENOTDIR when it is relative and
 * the image is no local file (an NBD export) with a directory to resolve
 * it in; -EPERM for any other name when the image comes from a server
 * (its protocol driver is 'remote': http, NBD). */
int fmt_named_path(const char *driver, const char *what, const char *image, const char *name,
                   unsigned flags, char **out);

/* May an image name the rbd: backing file 'name' (formats/named-file.c
 * and diskimg(1), IMAGES, say why)?  0, or -EPERM with a message naming
 * the reason: options in the name, no recorded backing format (format
 * NULL), or the naming image's own format probed.  'driver' is that
 * image's format, for the message. */
int fmt_rbd_backing_allowed(const char *driver, const char *name, const char *format, bool probed);

/* The name to open an image-named rbd: backing file 'name' (plain, see
 * fmt_rbd_backing_allowed) with, in *out (malloc'd): name plus
 * ":conf=FILE", FILE being $CEPH_CONF, /etc/ceph/ceph.conf or
 * ~/.ceph/ceph.conf, the first that is set or exists.  Ceph's own search
 * ends with ./ceph.conf, which may have come with the image, naming
 * another cluster and key.  -ENOENT with a message when none is found. */
int fmt_rbd_backing_conf(const char *name, char **out);

/* --untrusted: the message and error for a file that is not opened. */
int fmt_refuse_named(const char *driver, const char *what, const char *name);

/* Open the backing image at path (from fmt_named_path) below node n,
 * which opts opened: read-only, with a backing file's permissions, one
 * deeper in the chain (read-write and locked for writing when it is
 * opts->write_depth, commit's base).  format NULL: probed.  A path naming
 * rbd opens over the rbd protocol, and only when format is given and n's
 * own format was not probed (-EPERM).  On failure the message
 * names n's file unless the error belongs to an image further down. */
int fmt_open_backing(struct blk_node *n, const struct blk_open_opts *opts, const char *path,
                     const char *format, struct blk_node **out);

/* A chain that loops or is too deep fails at its bottom, whose message
 * names the file there; images above it add nothing (true: leave the
 * message alone). */
bool fmt_chain_error_below(int r, const struct blk_open_opts *opts);

/* Open the data file at path (from fmt_named_path) for node n, which
 * opts opened: a protocol node with the same access and locks as n's
 * own file (n's driver's child_perm). */
int fmt_open_extent(struct blk_node *n, const struct blk_open_opts *opts, const char *path,
                    struct blk_node **out);

#endif
