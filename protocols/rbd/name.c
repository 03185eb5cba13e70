/* protocols/rbd/name.c: parsing "rbd:" names the way qemu 7.2 does.
 *
 * qemu splits the name with a tokenizer that skips a backslash and the
 * character after it, then removes the backslashes of each piece.  Its
 * quirks are kept, since qemu-img is the judge of what a name means: the
 * snapshot separator is looked for with a plain search, so an '@'
 * anywhere (even escaped, even in an option) makes the image end at the
 * first unescaped '@'; "rbd:pool/ns/image" takes the part before the
 * first '/' of the image as its namespace. */
#include "name.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define PREFIX "rbd:"

bool rbd_name_is(const char *filename)
{
    return strncmp(filename, PREFIX, strlen(PREFIX)) == 0;
}

/* Cut s at the first delim not escaped by a backslash: returns s, and
 * *rest is what follows the delimiter (NULL when there is none). */
static char *next_token(char *s, char delim, char **rest)
{
    char *end = s;

    *rest = NULL;
    for (; *end; end++) {
        if (*end == delim) {
            *end = '\0';
            *rest = end + 1;
            break;
        }
        if (*end == '\\' && end[1] != '\0') {
            end++;
        }
    }
    return s;
}

/* Remove escaping backslashes in place ("a\:b" -> "a:b"; a trailing
 * backslash stays). */
static void unescape(char *s)
{
    char *out = s;

    for (; *s; s++) {
        if (*s == '\\' && s[1] != '\0') {
            s++;
        }
        *out++ = *s;
    }
    *out = '\0';
}

static int dup_into(char **dst, const char *src)
{
    free(*dst);
    *dst = strdup(src);
    return *dst ? 0 : err_set(ENOMEM, "rbd name");
}

/* One "key=value" option; the key decides where it goes. */
static int add_option(struct rbd_name *out, char *key, char *value)
{
    unescape(key);
    unescape(value);
    if (strcmp(key, "conf") == 0) {
        return dup_into(&out->conf, value);
    }
    if (strcmp(key, "id") == 0) {
        return dup_into(&out->user, value);
    }
    if (out->n_keys == RBD_NAME_MAX_KEYS) {
        return err_setx(EINVAL, "rbd name: more than %d options", RBD_NAME_MAX_KEYS);
    }
    /* qemu's legacy spelling of the list of accepted auth methods. */
    const char *k = strcmp(key, "auth_supported") == 0 ? "auth_client_required" : key;
    out->keys[out->n_keys] = strdup(k);
    out->values[out->n_keys] = strdup(value);
    out->n_keys++;
    if (!out->keys[out->n_keys - 1] || !out->values[out->n_keys - 1]) {
        return err_set(ENOMEM, "rbd name");
    }
    return 0;
}

static int parse_options(struct rbd_name *out, char *p)
{
    while (p) {
        char *key = next_token(p, '=', &p);
        if (!p) {
            unescape(key);
            return err_setx(EINVAL, "rbd name: option '%.64s' has no value (KEY=VALUE)", key);
        }
        char *value = next_token(p, ':', &p);
        if (key[0] == '\0') {
            return err_setx(EINVAL, "rbd name: an option has no name (KEY=VALUE)");
        }
        int r = add_option(out, key, value);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

/* IMAGE[@SNAP] or NS/IMAGE[@SNAP], then the options. */
static int parse_image(struct rbd_name *out, char *p)
{
    char *image, *rest = NULL;
    int r;

    if (strchr(p, '@')) {
        image = next_token(p, '@', &p);
        if (p) {
            char *snap = next_token(p, ':', &rest);
            unescape(snap);
            if (snap[0] && (r = dup_into(&out->snap, snap)) < 0) {
                return r; /* "IMAGE@" is the image itself, as in qemu */
            }
        }
    } else {
        image = next_token(p, ':', &rest);
    }
    char *after_ns;
    char *ns = next_token(image, '/', &after_ns);
    if (after_ns) { /* an escaped '/' belongs to the image's name */
        unescape(ns);
        if ((r = dup_into(&out->ns, ns)) < 0) {
            return r;
        }
        image = after_ns;
    }
    unescape(image);
    if (image[0] == '\0') {
        return err_setx(EINVAL, "rbd name: no image name (rbd:POOL/IMAGE)");
    }
    if ((r = dup_into(&out->image, image)) < 0) {
        return r;
    }
    return parse_options(out, rest);
}

int rbd_name_parse(const char *filename, struct rbd_name *out)
{
    char *buf, *p;
    int r;

    memset(out, 0, sizeof *out);
    if (!rbd_name_is(filename)) {
        return err_setx(EINVAL, "rbd name: does not start with '" PREFIX "'");
    }
    buf = strdup(filename + strlen(PREFIX));
    out->ns = strdup("");
    if (!buf || !out->ns) {
        free(buf);
        return err_set(ENOMEM, "rbd name");
    }
    char *pool = next_token(buf, '/', &p);
    if (!p) {
        free(buf);
        return err_setx(EINVAL, "rbd name: no pool name (rbd:POOL/IMAGE)");
    }
    unescape(pool);
    if (pool[0] == '\0') {
        r = err_setx(EINVAL, "rbd name: the pool name is empty (rbd:POOL/IMAGE)");
    } else if ((r = dup_into(&out->pool, pool)) == 0) {
        r = parse_image(out, p);
    }
    free(buf);
    return r;
}

static int opt_dup(const struct blk_kvlist *options, const char *key, char **dst)
{
    const char *v = blk_kv_get(options, key);

    return v ? dup_into(dst, v) : 0;
}

int rbd_name_from_options(const struct blk_kvlist *options, struct rbd_name *out)
{
    int r;

    memset(out, 0, sizeof *out);
    if ((r = dup_into(&out->ns, "")) < 0 || (r = opt_dup(options, "pool", &out->pool)) < 0 ||
        (r = opt_dup(options, "namespace", &out->ns)) < 0 ||
        (r = opt_dup(options, "image", &out->image)) < 0 ||
        (r = opt_dup(options, "snapshot", &out->snap)) < 0 ||
        (r = opt_dup(options, "conf", &out->conf)) < 0 ||
        (r = opt_dup(options, "user", &out->user)) < 0) {
        return r;
    }
    if (!out->pool || !out->pool[0]) {
        return err_setx(EINVAL, "rbd: option 'pool' is required (--image-opts driver=rbd,"
                                "pool=POOL,image=IMAGE)");
    }
    if (!out->image || !out->image[0]) {
        return err_setx(EINVAL, "rbd: option 'image' is required (--image-opts driver=rbd,"
                                "pool=POOL,image=IMAGE)");
    }
    if (out->snap && !out->snap[0]) {
        free(out->snap);
        out->snap = NULL;
    }
    return 0;
}

/* Append s, with its separators escaped when escape is set, so that the
 * result parses back. */
static size_t put(char *out, size_t used, const char *s, bool escape)
{
    for (; *s; s++) {
        if (escape && strchr("\\/@:", *s)) {
            if (out) {
                out[used] = '\\';
            }
            used++;
        }
        if (out) {
            out[used] = *s;
        }
        used++;
    }
    return used;
}

static size_t display_into(const struct rbd_name *n, char *out)
{
    size_t used = 0;

    used = put(out, used, PREFIX, false);
    used = put(out, used, n->pool, true);
    used = put(out, used, "/", false);
    if (n->ns && n->ns[0]) {
        used = put(out, used, n->ns, true);
        used = put(out, used, "/", false);
    }
    used = put(out, used, n->image, true);
    if (n->snap) {
        used = put(out, used, "@", false);
        used = put(out, used, n->snap, true);
    }
    return used;
}

char *rbd_name_display(const struct rbd_name *n)
{
    size_t len = display_into(n, NULL);
    char *s = malloc(len + 1);

    if (s) {
        display_into(n, s);
        s[len] = '\0';
    }
    return s;
}

void rbd_name_free(struct rbd_name *n)
{
    free(n->pool);
    free(n->ns);
    free(n->image);
    free(n->snap);
    free(n->conf);
    free(n->user);
    for (unsigned i = 0; i < n->n_keys; i++) {
        free(n->keys[i]);
        free(n->values[i]);
    }
    memset(n, 0, sizeof *n);
}
