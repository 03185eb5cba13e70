/* protocols/http/loader.c: the "http" and "https" entries of the driver
 * registry, in the program; the driver itself (driver.c, conn.c) is a
 * module, diskimg-http.so, loaded when an http:// or https:// image is
 * first opened (protocols/module.h says why and where from).  libcurl and
 * the 18 libraries it brings, linked into the program, cost every run
 * about 5 ms and 2.7 MB, HTTP image or not.
 *
 * What stays here: the names the driver claims and the options it takes
 * (tls-creds is offered to every image, so every image's options are
 * checked against this table), and the pure helpers the tests use
 * (range.c, common/url-redact.c), which the module calls here. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/url-redact.h"
#include "protocols/module.h"

static const struct blk_opt_desc http_options[] = {
    {.key = "url", .type = BLK_OPT_STRING},
    {.key = "readahead", .type = BLK_OPT_SIZE},
    {.key = "timeout", .type = BLK_OPT_UINT},
    {.key = "sslverify", .type = BLK_OPT_STRING},
    /* the subcommands' --tls-creds, offered to every image as for nbd */
    {.key = "tls-creds", .type = BLK_OPT_STRING, .optional = true},
    {NULL},
};

/* Has the module's driver every op the registry's entries forward to? */
static bool has_forwarded_ops(const struct blk_driver *d)
{
    return d->open && d->close && d->preadv && d->get_length && d->block_status;
}

static struct proto_module http_module = PROTO_MODULE_INIT("http", "HTTP(S)", has_forwarded_ops);

/* The module's state becomes the node's, and the node keeps its driver,
 * the entry: the module's open reads its name ("https": https URLs
 * only).  NULL from the load: a message naming the URL as every HTTP
 * message does, without its query string or password. */
static int http_loader_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    const struct blk_driver *drv = proto_module_load(&http_module);

    if (!drv) {
        const char *url = opts->filename ? opts->filename : blk_kv_get(opts->options, "url");
        char *shown = url ? url_redact(url) : NULL;
        int r = err_setx(ENOTSUP, "%s: %s", shown ? shown : n->drv->name, http_module.error);
        free(shown);
        return r;
    }
    n->opaque = calloc(1, drv->state_size);
    if (!n->opaque) {
        return err_set(ENOMEM, "%s", n->drv->name);
    }
    return drv->open(n, opts);
}

/* The ops of an open node: the module is loaded (open succeeded). */
static void fwd_close(struct blk_node *n)
{
    http_module.driver->close(n);
}

static int fwd_preadv(struct blk_node *n, uint64_t off, const struct iovec *iov, int iovcnt)
{
    return http_module.driver->preadv(n, off, iov, iovcnt);
}

static int64_t fwd_get_length(struct blk_node *n)
{
    return http_module.driver->get_length(n);
}

static int fwd_block_status(struct blk_node *n, uint64_t off, uint64_t len, struct blk_extent *ext)
{
    return http_module.driver->block_status(n, off, len, ext);
}

static bool http_loader_claims(const char *filename)
{
    return http_url_is(filename);
}

/* What "http" and "https" share, with every op the module's driver has,
 * so that what the generic layer asks before opening anything (can it
 * write? is it remote?) gets the driver's answer. */
#define HTTP_ENTRY_OPS                                                                             \
    .remote = true, .options = http_options, .open = http_loader_open, .close = fwd_close,         \
    .preadv = fwd_preadv, .get_length = fwd_get_length, .block_status = fwd_block_status

static const struct blk_driver http_loader_driver = {
    .name = "http",
    .claims = http_loader_claims,
    .names_help = "HTTP(S) URLs (http://, https://; read-only)",
    HTTP_ENTRY_OPS,
};
BLK_REGISTER_DRIVER(http_loader_driver)

/* --image-opts driver=https: the same driver, for https URLs only.  It
 * claims no names: "http" claims both schemes. */
static const struct blk_driver https_loader_driver = {
    .name = "https",
    HTTP_ENTRY_OPS,
};
BLK_REGISTER_DRIVER(https_loader_driver)
