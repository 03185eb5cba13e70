/* cmd/image-opts.c: --image-opts, qemu-img's way of naming an image by
 * its options ("driver=qcow2,file.filename=disk.qcow2,KEY=VALUE"), for
 * every subcommand that takes it.  The keys every subcommand understands
 * fill struct blk_image_opts; the rest go to the image's drivers, which
 * check them (block.h, "Driver options").  serve, whose --image-opts and
 * --export take more keys, builds on the same pieces. */
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
    if (strcmp(key, "driver") == 0 || strcmp(key, "format") == 0) {
        o->format = value;
    } else if (strcmp(key, "file.filename") == 0 || strcmp(key, "filename") == 0 ||
               strcmp(key, "file") == 0) {
        o->filename = value;
    } else if (strcmp(key, "file.driver") == 0) {
        if (strcmp(value, "file") != 0) {
            return cmd_usage_error(sub, "%s: file.driver=%s is not supported", what, value);
        }
    } else {
        return CMD_KEY_NOT_MINE;
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
    if (blk_kv_add(&c->o->options, key, value) < 0) {
        return cmd_usage_error(c->sub, "--image-opts: %s", err_msg());
    }
    return 0;
}

int cmd_parse_image_opts(const char *sub, char *spec, unsigned keys, struct blk_image_opts *o)
{
    struct parse_ctx c = {.sub = sub, .keys = keys, .o = o};
    int r = cmd_kv_foreach(sub, "--image-opts", spec, parse_key, &c);

    if (r) {
        return r;
    }
    if (!o->filename) {
        return cmd_usage_error(sub, "--image-opts: file.filename is missing");
    }
    if (blk_kv_check(&o->options) < 0) {
        return cmd_usage_error(sub, "--image-opts: %s", err_msg());
    }
    return 0;
}

int cmd_image_operand(const char *sub, char *arg, bool image_opts, unsigned keys,
                      struct blk_image_opts *o)
{
    if (!image_opts) {
        o->filename = arg;
        return 0;
    }
    if (o->format) {
        return cmd_usage_error(sub, "--image-opts and -f are mutually exclusive");
    }
    o->filename = NULL; /* only file.filename= names the file */
    return cmd_parse_image_opts(sub, arg, keys, o);
}
