/* protocols/missing.c: the names of protocols this build left out.
 *
 * Without librbd or libcurl "rbd:pool/image" would be taken for a local
 * file and "https://..." refused as an unknown URL; a user is better
 * told which meson feature the build lacks. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "block/driver.h"
#include "block/esc-name.h"
#include "common/error.h"

#if !defined(HAVE_RBD) || !defined(HAVE_CURL)
static int missing_open(struct blk_node *n, const char *what, const char *feature,
                        const char *package)
{
    return err_setx(ENOTSUP,
                    "%s: this diskimg was built without %s support (meson feature '%s', "
                    "needs %s)",
                    n->filename ? ESC_NAME(n) : n->drv->name, what, feature, package);
}
#endif

#ifndef HAVE_RBD
static bool missing_rbd_claims(const char *filename)
{
    return strncmp(filename, "rbd:", 4) == 0;
}

static int missing_rbd_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    (void)opts;
    return missing_open(n, "Ceph RBD", "rbd", "librbd-dev");
}

static const struct blk_driver missing_rbd_driver = {
    .name = "rbd",
    .claims = missing_rbd_claims,
    .open = missing_rbd_open,
};
BLK_REGISTER_DRIVER(missing_rbd_driver)
#endif

#ifndef HAVE_CURL
static bool missing_http_claims(const char *filename)
{
    return strncasecmp(filename, "http://", 7) == 0 || strncasecmp(filename, "https://", 8) == 0;
}

static int missing_http_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    (void)opts;
    return missing_open(n, "HTTP(S)", "curl", "libcurl4-gnutls-dev");
}

static const struct blk_driver missing_http_driver = {
    .name = "http",
    .claims = missing_http_claims,
    .open = missing_http_open,
};
BLK_REGISTER_DRIVER(missing_http_driver)
#endif
