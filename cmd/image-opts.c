/* cmd/image-opts.c: --image-opts, qemu-img's way of naming an image by
 * its options ("driver=qcow2,file.filename=disk.qcow2,KEY=VALUE"), for
 * every subcommand that takes it.  The keys every subcommand understands
 * fill struct blk_image_opts; the rest go to the image's drivers, which
 * check them (block.h, "Driver options").  serve, whose --image-opts and
 * --export take more keys, builds on the same pieces.
 *
 * The node tree qemu spells with dots has two levels here: the format
 * and its protocol.  driver= names either: a format (qcow2: its file is
 * file.driver=, "file" by default) or a protocol (file, nbd, rbd, http:
 * that node is the image, read as raw, as in qemu).  file.KEY=VALUE is
 * the protocol's KEY and reaches the drivers as KEY=VALUE: each key is
 * offered to both nodes and taken by the driver that declares it. */
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/error.h"

int cmd_kv_foreach(const char *sub, const char *what, char *spec, cmd_kv_fn fn, void *opaque)
{
    for (char *save = NULL, *kv = strtok_r(spec, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            return cmd_usage_error(sub, "%s: '%s' is not key=value", what, kv);
        }
        *eq = '\0';
        int r = fn(opaque, kv, eq + 1);
        if (r) {
            return r;
        }
    }
    return 0;
}

int cmd_image_opts_key(const char *sub, const char *what, struct blk_image_opts *o, const char *key,
                       const char *value)
{
    (void)sub;
    (void)what;
    if (strcmp(key, "driver") == 0 || strcmp(key, "format") == 0) {
        o->format = value; /* a format or a protocol: cmd_image_opts_finish decides */
    } else if (strcmp(key, "file.filename") == 0 || strcmp(key, "filename") == 0 ||
               strcmp(key, "file") == 0) {
        o->filename = value;
    } else if (strcmp(key, "file.driver") == 0) {
        o->protocol = value;
    } else {
        return CMD_KEY_NOT_MINE;
    }
    return 0;
}

const char *cmd_image_opts_driver_key(const char *key)
{
    return strncmp(key, "file.", 5) == 0 && key[5] ? key + 5 : key;
}

int cmd_image_opts_finish(const char *sub, const char *what, struct blk_image_opts *o)
{
    enum blk_driver_kind kind = o->format ? blk_driver_kind(o->format) : BLK_DRIVER_FORMAT;

    if (kind == BLK_DRIVER_NONE) {
        return cmd_usage_error(sub, "%s: unknown driver '%s'", what, o->format);
    }
    if (kind == BLK_DRIVER_PROTOCOL) {
        if (o->protocol) {
            return cmd_usage_error(sub, "%s: driver=%s is a protocol; file.driver=%s has no place",
                                   what, o->format, o->protocol);
        }
        o->protocol = o->format;
        o->format = "raw";
        o->protocol_image = true;
    } else if (o->protocol && blk_driver_kind(o->protocol) != BLK_DRIVER_PROTOCOL) {
        return cmd_usage_error(sub, "%s: unknown protocol driver '%s' (file.driver)", what,
                               o->protocol);
    }
    if (!o->filename && (!o->protocol || strcmp(o->protocol, "file") == 0)) {
        return cmd_usage_error(sub, "%s: file.filename is missing", what);
    }
    if (blk_kv_check(&o->options) < 0) {
        return cmd_usage_error(sub, "%s: %s", what, err_msg());
    }
    return 0;
}

struct parse_ctx {
    const char *sub;
    unsigned keys; /* CMD_IMAGE_OPTS_* */
    struct blk_image_opts *o;
};

static int parse_key(void *opaque, const char *key, const char *value)
{
    struct parse_ctx *c = opaque;
    int r = cmd_image_opts_key(c->sub, "--image-opts", c->o, key, value);

    if (r != CMD_KEY_NOT_MINE) {
        return r;
    }
    if ((c->keys & CMD_IMAGE_OPTS_CACHE) && strcmp(key, "cache") == 0) {
        if (blk_cache_mode_parse(value, &c->o->cache) < 0) {
            return cmd_usage_error(c->sub, "--image-opts: invalid cache mode '%s'", value);
        }
        return 0;
    }
    if (blk_kv_add(&c->o->options, cmd_image_opts_driver_key(key), value) < 0) {
        return cmd_usage_error(c->sub, "--image-opts: %s", err_msg());
    }
    return 0;
}

int cmd_parse_image_opts(const char *sub, char *spec, unsigned keys, struct blk_image_opts *o)
{
    struct parse_ctx c = {.sub = sub, .keys = keys, .o = o};
    int r = cmd_kv_foreach(sub, "--image-opts", spec, parse_key, &c);

    return r ? r : cmd_image_opts_finish(sub, "--image-opts", o);
}

int cmd_image_opts_refuse_format(const char *sub, const struct blk_image_opts *o)
{
    return o->format ? cmd_usage_error(sub, "--image-opts and -f are mutually exclusive") : 0;
}

int cmd_image_operand(const char *sub, char *arg, bool image_opts, unsigned keys,
                      struct blk_image_opts *o)
{
    if (!image_opts) {
        o->filename = arg;
        return 0;
    }
    int r = cmd_image_opts_refuse_format(sub, o);
    if (r) {
        return r;
    }
    o->filename = NULL; /* only file.filename= names the file */
    return cmd_parse_image_opts(sub, arg, keys, o);
}

int cmd_image_getopt(const char *sub, int c, char **argv, bool *image_opts,
                     struct blk_image_opts *o)
{
    if (c == CMD_OPT_IMAGE_OPTS && image_opts) {
        *image_opts = true;
        return 0;
    }
    if (c == ':') {
        return cmd_usage_error(sub, "option '%s' needs a value", argv[optind - 1]);
    }
    if (cmd_image_option(c, optarg, o)) {
        return 0;
    }
    return cmd_usage_error(sub, "unknown option '%s'", argv[optind - 1]);
}

int cmd_two_images_getopt(const char *sub, int c, char **argv, bool *image_opts,
                          struct blk_image_opts *a, struct blk_image_opts *b)
{
    int r = cmd_image_getopt(sub, c, argv, image_opts, a);

    if (r == 0) {
        cmd_image_option(c, optarg, b);
    }
    return r;
}

int cmd_one_image_operand(const char *sub, int argc, char **argv, bool image_opts, unsigned keys,
                          struct blk_image_opts *o)
{
    if (argc - optind != 1) {
        return cmd_usage_error(sub, "expected one FILE");
    }
    return cmd_image_operand(sub, argv[optind], image_opts, keys, o);
}

const char *cmd_image_name(const struct blk_image_opts *o, const struct blk_image *img)
{
    if (o->filename) {
        return o->filename;
    }
    return img ? blk_node_filename(blk_image_root(img)) : o->protocol;
}
