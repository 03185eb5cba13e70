/* block/registry.c: the driver registry.  Drivers add themselves from a
 * constructor (BLK_REGISTER_DRIVER), so block/ never names a format. */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "driver.h"
#include "esc-name.h"

#define BLK_MAX_DRIVERS 32

static const struct blk_driver *drivers[BLK_MAX_DRIVERS];
static size_t n_drivers;

void blk_register_driver(const struct blk_driver *drv)
{
    if (n_drivers < BLK_MAX_DRIVERS) {
        drivers[n_drivers++] = drv;
    }
}

const struct blk_driver *blk_driver_at(size_t i)
{
    return i < n_drivers ? drivers[i] : NULL;
}

const struct blk_driver *blk_find_driver(const char *name)
{
    for (size_t i = 0; i < n_drivers; i++) {
        if (strcmp(drivers[i]->name, name) == 0) {
            return drivers[i];
        }
    }
    return NULL;
}

enum blk_driver_kind blk_driver_kind(const char *name)
{
    const struct blk_driver *drv = blk_find_driver(name);

    return !drv ? BLK_DRIVER_NONE : drv->is_format ? BLK_DRIVER_FORMAT : BLK_DRIVER_PROTOCOL;
}

bool blk_format_can_compress(const char *format)
{
    const struct blk_driver *drv = blk_find_driver(format);

    return drv && drv->is_format && drv->compress && drv->pwrite_compressed;
}

bool blk_format_has_bitmaps(const char *format)
{
    const struct blk_driver *drv = format ? blk_find_driver(format) : NULL;

    return drv && drv->is_format && drv->bitmap_change;
}

/* Length of the scheme of a URL ("http" in "http://h/x"), or 0 when
 * filename does not start like one (RFC 3986: a letter, then letters,
 * digits, '+', '-' or '.', then "://"). */
static size_t url_scheme_len(const char *filename)
{
    size_t i = 0;

    if (!isalpha((unsigned char)filename[0])) {
        return 0;
    }
    while (isalnum((unsigned char)filename[i]) ||
           (filename[i] && strchr("+-.", filename[i]) != NULL)) {
        i++;
    }
    return strncmp(filename + i, "://", 3) == 0 ? i : 0;
}

const struct blk_driver *blk_protocol_for(const char *filename)
{
    size_t scheme;

    for (size_t i = 0; i < n_drivers; i++) {
        if (!drivers[i]->is_format && drivers[i]->claims && drivers[i]->claims(filename)) {
            return drivers[i];
        }
    }
    scheme = url_scheme_len(filename);
    if (scheme) {
        /* Not a file that happens to be missing: say which names work. */
        char known[256] = "local files";
        for (size_t i = 0; i < n_drivers; i++) {
            if (drivers[i]->names_help) {
                size_t used = strlen(known);
                snprintf(known + used, sizeof known - used, ", %s", drivers[i]->names_help);
            }
        }
        err_setx(EPROTONOSUPPORT, "%s: diskimg cannot open %.*s:// URLs; it opens %s",
                 ESC_STR(filename), (int)scheme, filename, known);
        return NULL;
    }
    return blk_find_driver("file");
}

/* Every format scores the bytes; a format that scores 1 takes anything
 * (raw does), so it wins only when nothing else claims them. */
void blk_probe_all(const uint8_t *buf, size_t len, const char *filename, struct blk_probe *out)
{
    blk_probe_all_tail(buf, len, NULL, 0, filename, out);
}

void blk_probe_all_tail(const uint8_t *buf, size_t len, const uint8_t *tail, size_t tail_len,
                        const char *filename, struct blk_probe *out)
{
    const struct blk_driver *anything = NULL;

    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n_drivers; i++) {
        if (!drivers[i]->is_format || !drivers[i]->probe) {
            continue;
        }
        int score = drivers[i]->probe(buf, len, filename);
        if (tail && drivers[i]->probe_tail) {
            score = MAX(score, drivers[i]->probe_tail(tail, tail_len, filename));
        }
        if (score == 1 && !anything) {
            anything = drivers[i];
        }
        if (score <= 1) {
            continue;
        }
        if (score > out->score) {
            out->other = out->best;
            out->tie = false;
            out->best = drivers[i];
            out->score = score;
        } else {
            if (!out->other || score == out->score) {
                out->other = drivers[i];
            }
            out->tie = out->tie || score == out->score;
        }
    }
    if (!out->best && anything) {
        out->best = anything;
        out->score = 1;
    }
}

const struct blk_driver *blk_probe_format(const uint8_t *buf, size_t len, const char *filename)
{
    return blk_probe_format_tail(buf, len, NULL, 0, filename);
}

const struct blk_driver *blk_probe_format_tail(const uint8_t *buf, size_t len, const uint8_t *tail,
                                               size_t tail_len, const char *filename)
{
    struct blk_probe p;

    blk_probe_all_tail(buf, len, tail, tail_len, filename, &p);
    return p.tie ? NULL : p.best;
}
