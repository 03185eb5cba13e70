/* block/driver-options.c: the key=value options of an image's drivers,
 * qemu's --image-opts shape.  The generic layer carries one ordered list
 * per image and offers it to every node of the stack (format and
 * protocol, not backing files); each driver declares the keys it takes
 * (struct blk_opt_desc) and reads and validates their values itself.
 * Here: the list, the typed readers drivers share, the one error
 * convention, and the checks that every key has a taker.  Which keys
 * exist is the drivers' business: nothing here names a driver or a key. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/util.h"
#include "driver.h"

int blk_kv_add(struct blk_kvlist *l, const char *key, const char *value)
{
    if (l->n == BLK_KV_MAX) {
        return err_setx(E2BIG, "too many options (at most %d): '%s' is one too many", BLK_KV_MAX,
                        key);
    }
    l->kv[l->n].key = key;
    l->kv[l->n].value = value;
    l->n++;
    return 0;
}

int blk_kv_set(struct blk_kvlist *l, const char *key, const char *value)
{
    unsigned kept = 0;

    for (unsigned i = 0; i < l->n; i++) {
        if (strcmp(l->kv[i].key, key) != 0) {
            l->kv[kept++] = l->kv[i];
        }
    }
    l->n = kept;
    return blk_kv_add(l, key, value);
}

int blk_kv_parse(struct blk_kvlist *l, char *spec)
{
    for (char *save = NULL, *kv = strtok_r(spec, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        int r;

        if (!eq) {
            return err_setx(EINVAL, "'%s' is not key=value", kv);
        }
        *eq = '\0';
        r = blk_kv_add(l, kv, eq + 1);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

const char *blk_kv_get(const struct blk_kvlist *l, const char *key)
{
    if (!l) {
        return NULL;
    }
    for (unsigned i = l->n; i-- > 0;) {
        if (strcmp(l->kv[i].key, key) == 0) {
            return l->kv[i].value; /* the last one given wins */
        }
    }
    return NULL;
}

int blk_opt_error(const char *driver, const char *key, const char *fmt, ...)
{
    char reason[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (driver) {
        return err_setx(EINVAL, "%s: option '%s': %s", driver, key, reason);
    }
    return err_setx(EINVAL, "option '%s': %s", key, reason);
}

static const struct blk_opt_desc *blk_opt_find(const struct blk_driver *drv, const char *key)
{
    for (const struct blk_opt_desc *d = drv ? drv->options : NULL; d && d->key; d++) {
        if (strcmp(d->key, key) == 0) {
            return d;
        }
    }
    return NULL;
}

/* Parse value as type; 0 or -EINVAL with the message of the convention. */
static int blk_opt_parse(const char *driver, const char *key, enum blk_opt_type type,
                         const char *value, uint64_t *out)
{
    switch (type) {
    case BLK_OPT_STRING:
        return 0;
    case BLK_OPT_SIZE:
        if (parse_size(value, out) < 0) {
            return blk_opt_error(driver, key, "invalid size '%s'", value);
        }
        return 0;
    case BLK_OPT_UINT:
        if (parse_uint(value, 0, UINT32_MAX, out) < 0) {
            return blk_opt_error(driver, key, "invalid number '%s'", value);
        }
        return 0;
    }
    return blk_opt_error(driver, key, "has no type");
}

int blk_opt_size(const struct blk_kvlist *l, const char *driver, const char *key, uint64_t *out)
{
    const char *v = blk_kv_get(l, key);
    uint64_t x;
    int r;

    if (!v) {
        return 0;
    }
    r = blk_opt_parse(driver, key, BLK_OPT_SIZE, v, &x);
    if (r < 0) {
        return r;
    }
    *out = x;
    return 1;
}

int blk_opt_uint(const struct blk_kvlist *l, const char *driver, const char *key, unsigned *out)
{
    const char *v = blk_kv_get(l, key);
    uint64_t x;
    int r;

    if (!v) {
        return 0;
    }
    r = blk_opt_parse(driver, key, BLK_OPT_UINT, v, &x);
    if (r < 0) {
        return r;
    }
    *out = (unsigned)x;
    return 1;
}

/* Is key a default that every image is offered (some driver says so)? */
static bool blk_opt_optional(const char *key)
{
    const struct blk_driver *drv;

    for (size_t i = 0; (drv = blk_driver_at(i)) != NULL; i++) {
        const struct blk_opt_desc *d = blk_opt_find(drv, key);
        if (d && d->optional) {
            return true;
        }
    }
    return false;
}

int blk_kv_check(const struct blk_kvlist *l)
{
    for (unsigned i = 0; i < l->n; i++) {
        const char *key = l->kv[i].key;
        const struct blk_driver *drv;
        bool known = false;

        for (size_t j = 0; (drv = blk_driver_at(j)) != NULL; j++) {
            const struct blk_opt_desc *d = blk_opt_find(drv, key);
            uint64_t v;
            if (!d) {
                continue;
            }
            known = true;
            int r = blk_opt_parse(drv->name, key, d->type, l->kv[i].value, &v);
            if (r < 0) {
                return r;
            }
        }
        if (!known) {
            return blk_opt_error(NULL, key, "no driver takes it");
        }
    }
    return 0;
}

int blk_opts_check_stack(const struct blk_kvlist *l, const struct blk_driver *fmt,
                         const struct blk_driver *proto)
{
    for (unsigned i = 0; l && i < l->n; i++) {
        const char *key = l->kv[i].key;

        if (blk_opt_find(fmt, key) || blk_opt_find(proto, key) || blk_opt_optional(key)) {
            continue;
        }
        return blk_opt_error(fmt->name, key, "neither %s nor %s takes it", fmt->name, proto->name);
    }
    return 0;
}
