/* cmd/image-opts.c: --image-opts, qemu-img's way of naming an image by
 * its options ("driver=qcow2,file.filename=disk.qcow2,KEY=VALUE"), for
 * the subcommands that take it (rebase, commit).  The keys every
 * subcommand understands fill struct blk_image_opts; the rest go to the
 * image's drivers, which check them (block.h, "Driver options"). */
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/error.h"

int cmd_parse_image_opts(const char *sub, char *spec, struct blk_image_opts *o)
{
    for (char *save = NULL, *kv = strtok_r(spec, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            return cmd_usage_error(sub, "--image-opts: '%s' is not key=value", kv);
        }
        *eq = '\0';
        const char *key = kv, *value = eq + 1;
        if (strcmp(key, "driver") == 0 || strcmp(key, "format") == 0) {
            o->format = value;
        } else if (strcmp(key, "file.filename") == 0 || strcmp(key, "filename") == 0 ||
                   strcmp(key, "file") == 0) {
            o->filename = value;
        } else if (strcmp(key, "file.driver") == 0) {
            if (strcmp(value, "file") != 0) {
                return cmd_usage_error(sub, "--image-opts: file.driver=%s is not supported", value);
            }
        } else if (blk_kv_add(&o->options, key, value) < 0) {
            return cmd_usage_error(sub, "--image-opts: %s", err_msg());
        }
    }
    if (!o->filename) {
        return cmd_usage_error(sub, "--image-opts: file.filename is missing");
    }
    if (blk_kv_check(&o->options) < 0) {
        return cmd_usage_error(sub, "--image-opts: %s", err_msg());
    }
    return 0;
}
