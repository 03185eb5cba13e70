/* formats/vpc/parent.c: the parent of a differencing image.  Its name is
 * taken from the parent locators, Windows relative (W2ru) then absolute
 * (W2ku) paths in UTF-16LE, and failing those from the parent's Unicode
 * name in the dynamic header (UTF-16BE), read as a file beside the
 * image.  The parent is opened as a VHD under the backing-file rules
 * every format shares (formats/named-file.h): a regular file or block
 * device, relative to the image's directory, not at all under
 * --untrusted, and within the chain's loop and depth limits.
 * qemu 7.2 ignores the parent and reads its sectors as zeroes.
 *
 * Order (vpc.h): above footer.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "block/esc-name.h"
#include "common/bytes.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "formats/named-file.h"
#include "vpc.h"

#define LOC_W2RU 0x57327275u /* "W2ru" */
#define LOC_W2KU 0x57326b75u /* "W2ku" */
/* A path longer than this (UTF-16 bytes) is not a path. */
#define LOC_MAX_BYTES 8192u

static size_t put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* UTF-16 (n bytes, either byte order) up to the first NUL, as UTF-8 with
 * '\' turned into '/'; NULL when it is empty or not valid UTF-16. */
static char *utf16_path(const uint8_t *p, size_t n, bool big_endian)
{
    char *out = malloc(n / 2 * 3 + 1);
    size_t len = 0;

    if (!out) {
        return NULL;
    }
    for (size_t i = 0; i + 1 < n; i += 2) {
        uint32_t u = big_endian ? get_be16(p + i) : get_le16(p + i);
        if (u == 0) {
            break;
        }
        if (u >= 0xdc00 && u <= 0xdfff) {
            goto bad; /* a low surrogate first */
        }
        if (u >= 0xd800 && u <= 0xdbff) {
            if (i + 3 >= n) {
                goto bad;
            }
            uint32_t lo = big_endian ? get_be16(p + i + 2) : get_le16(p + i + 2);
            if (lo < 0xdc00 || lo > 0xdfff) {
                goto bad;
            }
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            i += 2;
        }
        len += put_utf8(out + len, u == '\\' ? '/' : u);
    }
    if (len == 0) {
        goto bad;
    }
    out[len] = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

/* A name from the image, relative to the image's directory unless
 * absolute, under the rules of every name an image holds
 * (formats/named-file.h); NULL when it names nothing here: a Windows
 * path with a drive letter, or a name those rules refuse. */
static char *resolve(const struct vpc_state *s, const char *name)
{
    char *path = NULL;

    if (name[0] && name[1] == ':') {
        return NULL;
    }
    while (name[0] == '.' && name[1] == '/') {
        name += 2; /* ".\\parent.vhd", as Windows writes relative names */
    }
    if (fmt_named_path("vpc", "parent image", s->node->filename, name, 0, &path) < 0) {
        err_clear();
        return NULL;
    }
    return path;
}

/* A locator's path in *out, or NULL when it names nothing usable; an
 * error only for an entry that lies outside the file. */
static int read_locator(struct vpc_state *s, const struct vpc_locator *l, int64_t flen, char **out)
{
    *out = NULL;
    if (l->length == 0) {
        return 0; /* an empty entry, as some writers leave: names nothing */
    }
    if (l->length > LOC_MAX_BYTES || l->offset > (uint64_t)flen ||
        l->length > (uint64_t)flen - l->offset) {
        return err_setx(EINVAL,
                        "%s: vpc: parent locator of %" PRIu32 " bytes at offset %" PRIu64
                        " lies outside the file or is too long",
                        ESC_NAME(s->node), l->length, l->offset);
    }
    CLEANUP_FREE uint8_t *buf = malloc(l->length);
    if (!buf) {
        return err_set(ENOMEM, "vpc: parent locator");
    }
    int r = blk_pread(s->file, l->offset, buf, l->length);
    if (r < 0) {
        return r;
    }
    *out = utf16_path(buf, l->length, false);
    return 0;
}

/* Does the candidate exist?  Never asked under --untrusted (look false),
 * where even a stat() of a path the image chose would tell a caller which
 * of the host's files exist: the first name is the one refused. */
static bool usable(const char *path, bool look)
{
    struct stat st;

    return look && path && stat(path, &st) == 0;
}

/* Take name (owned) as the parent if its file exists, or as the one to
 * name in the error when nothing better comes. */
static void consider(struct vpc_state *s, char *name, bool look)
{
    char *path = name ? resolve(s, name) : NULL;

    if (path && (!s->parent_path || usable(path, look))) {
        free(s->parent_name);
        free(s->parent_path);
        s->parent_name = name;
        s->parent_path = path;
        return;
    }
    free(name);
    free(path);
}

int vpc_find_parent(struct vpc_state *s, const struct vpc_dyn_header *h, bool look)
{
    static const uint32_t order[] = {LOC_W2RU, LOC_W2KU};
    int64_t flen = blk_get_length(s->file);

    if (flen < 0) {
        return (int)flen;
    }
    for (size_t o = 0; o < 2 && !usable(s->parent_path, look); o++) {
        for (int i = 0; i < 8 && !usable(s->parent_path, look); i++) {
            if (h->loc[i].code != order[o]) {
                continue;
            }
            char *name = NULL;
            int r = read_locator(s, &h->loc[i], flen, &name);
            if (r < 0) {
                return r;
            }
            consider(s, name, look);
        }
    }
    if (!usable(s->parent_path, look)) {
        /* The Unicode name: the parent's file name, beside the image. */
        char *name = utf16_path(h->parent_name, 512, true);
        if (name && strchr(name, '/')) {
            char *base = strdup(strrchr(name, '/') + 1);
            free(name);
            name = base && base[0] ? base : (free(base), NULL);
        }
        consider(s, name, look);
    }
    if (!s->parent_name) {
        return err_setx(EINVAL, "%s: vpc: differencing image names no parent it can use",
                        ESC_NAME(s->node));
    }
    return 0;
}

int vpc_refuse_parent(struct vpc_state *s)
{
    return fmt_refuse_named("vpc", "parent image", s->parent_name);
}

int vpc_open_parent(struct vpc_state *s, const struct blk_open_opts *opts, const uint8_t uuid[16])
{
    static const uint8_t none[16];
    int r = fmt_open_backing(s->node, opts, s->parent_path, "vpc", &s->parent);

    if (r < 0) {
        return r;
    }
    const struct vpc_state *ps = s->parent->opaque;
    if (memcmp(uuid, none, 16) != 0 && memcmp(uuid, ps->footer.uuid, 16) != 0) {
        CLEANUP_FREE char *esc = str_escape(s->parent_name);
        blk_node_close(s->parent);
        s->parent = NULL;
        return err_setx(EINVAL,
                        "%s: vpc: parent image '%s' is not the one this image was made from "
                        "(its unique id differs)",
                        ESC_NAME(s->node), esc ? esc : "?");
    }
    s->node->backing = s->parent;
    return 0;
}
