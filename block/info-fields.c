/* block/info-fields.c: building and reading the format-specific fields of
 * struct blk_image_info.  Drivers add facts with blk_info_add_* (a full
 * list drops the rest: info is advisory); callers above the block layer
 * (info, the target lint) look them up by key with blk_info_find. */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

static void add(struct blk_image_info *info, struct blk_info_field f)
{
    if (info->n_fields < BLK_INFO_MAX_FIELDS) {
        info->fields[info->n_fields++] = f;
    } else {
        free(f.owned);
    }
}

void blk_info_add_int(struct blk_image_info *info, const char *key, const char *label, int64_t v)
{
    add(info, (struct blk_info_field){key, label, BLK_INFO_INT, .i = v});
}

void blk_info_add_bool(struct blk_image_info *info, const char *key, const char *label, bool v)
{
    add(info, (struct blk_info_field){key, label, BLK_INFO_BOOL, .b = v});
}

void blk_info_add_str(struct blk_image_info *info, const char *key, const char *label,
                      const char *v)
{
    char *copy = strdup(v ? v : "");

    add(info,
        (struct blk_info_field){key, label, BLK_INFO_STR, .s = copy ? copy : "", .owned = copy});
}

const struct blk_info_field *blk_info_find(const struct blk_image_info *info, const char *key)
{
    int nest = 0;

    for (unsigned i = 0; i < info->n_fields; i++) {
        const struct blk_info_field *f = &info->fields[i];
        if (f->type == BLK_INFO_ARRAY || f->type == BLK_INFO_OBJECT) {
            nest++;
        } else if (f->type == BLK_INFO_END) {
            nest--;
        } else if (nest == 0 && f->key && strcmp(f->key, key) == 0) {
            return f;
        }
    }
    return NULL;
}
