/* formats/vmdk/descriptor.c: the VMDK text descriptor.  Pure functions
 * of its bytes: the probe, the parser (CID, parentCID, createType, the
 * parent hint and the extent lines) and the CID rewrite a writer does on
 * its first write.  Nothing here opens a file: extents.c decides which
 * named files may be opened.
 *
 * The text comes from the image, so every field is bounded: at most
 * VMDK_MAX_EXTENTS extents, sizes checked for overflow, names without
 * control characters; the DDB lines are not interpreted. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "vmdk.h"

#define CERTAIN 100

/* ---- probe ---- */

/* One line of a text descriptor at p: comments and lines of spaces may
 * come before "version=N" (N 1..3, LF or CRLF); an empty line may not
 * (qemu's rule).  Returns 1 for the version line, 0 for anything else,
 * -1 to go on at *next. */
static int probe_line(const char *p, const char *end, const char **next)
{
    if (*p == '#') {
        while (p < end && *p != '\n') {
            p++;
        }
        *next = p < end ? p + 1 : end;
        return -1;
    }
    if (*p == ' ') {
        while (p < end && *p == ' ') {
            p++;
        }
        if (p < end && *p == '\r') {
            p++;
        }
        if (p == end || *p != '\n') {
            return 0;
        }
        *next = p + 1;
        return -1;
    }
    for (const char *eol = "\n"; eol; eol = eol[0] == '\n' ? "\r\n" : NULL) {
        size_t n = strlen("version=X") + strlen(eol);
        if ((size_t)(end - p) >= n && memcmp(p, "version=", 8) == 0 && p[8] >= '1' && p[8] <= '3' &&
            memcmp(p + 9, eol, strlen(eol)) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A sparse extent ("KDMV", or "COWD" for VMware 3), or a text descriptor
 * whose first line that is not a comment or spaces is "version=1", "=2"
 * or "=3". */
int vmdk_probe(const uint8_t *buf, size_t len, const char *filename)
{
    const char *p = (const char *)buf, *end = p + len;

    (void)filename;
    if (len < 4) {
        return 0;
    }
    if (memcmp(buf, "KDMV", 4) == 0 || memcmp(buf, "COWD", 4) == 0) {
        return CERTAIN;
    }
    while (p < end) {
        const char *next = end;
        int r = probe_line(p, end, &next);
        if (r >= 0) {
            return r ? CERTAIN : 0;
        }
        p = next;
    }
    return 0;
}

/* ---- parser ---- */

struct line {
    const char *p;
    size_t len;
    unsigned no;
};

static bool next_line(const char **cur, const char *end, struct line *l)
{
    const char *p = *cur;

    if (p >= end) {
        return false;
    }
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *stop = nl ? nl : end;
    *cur = nl ? nl + 1 : end;
    while (stop > p && (stop[-1] == '\r' || stop[-1] == ' ' || stop[-1] == '\t')) {
        stop--;
    }
    while (p < stop && (*p == ' ' || *p == '\t')) {
        p++;
    }
    l->p = p;
    l->len = (size_t)(stop - p);
    l->no++;
    return true;
}

static bool starts(const struct line *l, const char *s)
{
    size_t n = strlen(s);
    return l->len >= n && memcmp(l->p, s, n) == 0;
}

/* key=value or key = "value": the value without quotes, as a new string. */
static int line_value(const struct line *l, const char *key, char **out)
{
    const char *p = l->p + strlen(key), *end = l->p + l->len;

    while (p < end && *p == ' ') {
        p++;
    }
    if (p == end || *p != '=') {
        return -EINVAL;
    }
    p++;
    while (p < end && *p == ' ') {
        p++;
    }
    if (p < end && *p == '"') {
        p++;
        if (end == p || end[-1] != '"') {
            return -EINVAL;
        }
        end--;
    }
    *out = strndup(p, (size_t)(end - p));
    return *out ? 0 : -ENOMEM;
}

static int parse_hex32(const char *s, uint32_t *out)
{
    char *endp;

    if (!*s || strlen(s) > 8) {
        return -EINVAL;
    }
    errno = 0;
    unsigned long v = strtoul(s, &endp, 16);
    if (errno || *endp || v > UINT32_MAX) {
        return -EINVAL;
    }
    *out = (uint32_t)v;
    return 0;
}

static int parse_u64(const char **p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    const char *q = *p;

    if (q == end || *q < '0' || *q > '9') {
        return -EINVAL;
    }
    while (q < end && *q >= '0' && *q <= '9') {
        if (v > (UINT64_MAX - 9) / 10) {
            return -ERANGE;
        }
        v = v * 10 + (uint64_t)(*q - '0');
        q++;
    }
    *p = q;
    *out = v;
    return 0;
}

static void skip_spaces(const char **p, const char *end)
{
    while (*p < end && (**p == ' ' || **p == '\t')) {
        (*p)++;
    }
}

static int desc_error(const char *what, unsigned line, const char *reason)
{
    return err_setx(EINVAL, "%s: vmdk: descriptor line %u: %s", what, line, reason);
}

/* "ACCESS SECTORS TYPE "NAME" [OFFSET]".  Returns 1 when the line is an
 * extent qemu reads (access RW), 0 for one it ignores. */
static int parse_extent(const struct line *l, const char *what, struct vmdk_desc_extent *x)
{
    const char *p = l->p, *end = l->p + l->len;
    static const struct {
        const char *name;
        int type; /* -1: a kind diskimg does not read */
    } types[] = {
        {"FLAT", VMDK_TYPE_FLAT}, {"VMFS", VMDK_TYPE_FLAT}, {"SPARSE", VMDK_TYPE_SPARSE},
        {"ZERO", VMDK_TYPE_ZERO}, {"VMFSSPARSE", -1},       {"SESPARSE", -1},
        {"VMFSRDM", -1},          {"VMFSRAW", -1},
    };
    bool rw = starts(l, "RW ");
    int r;

    p += rw ? 3 : starts(l, "RDONLY ") ? 7 : 9;
    skip_spaces(&p, end);
    if ((r = parse_u64(&p, end, &x->sectors)) < 0) {
        return desc_error(what, l->no, "the extent's size is not a number");
    }
    skip_spaces(&p, end);
    const char *t = p;
    while (p < end && *p != ' ' && *p != '\t') {
        p++;
    }
    int type = -2;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if ((size_t)(p - t) == strlen(types[i].name) &&
            memcmp(t, types[i].name, (size_t)(p - t)) == 0) {
            type = types[i].type;
        }
    }
    if (type == -2) {
        return desc_error(what, l->no, "unknown extent type");
    }
    if (!rw) {
        return 0; /* qemu reads only RW extents */
    }
    if (type == -1) {
        CLEANUP_FREE char *name = strndup(t, (size_t)(p - t));
        return err_setx(ENOTSUP, "%s: vmdk: descriptor line %u: %s extents are not supported", what,
                        l->no, name ? name : "these");
    }
    x->type = (enum vmdk_extent_type)type;
    skip_spaces(&p, end);
    if (p == end || *p != '"') {
        if (type == VMDK_TYPE_ZERO && p == end) {
            return 1; /* a ZERO extent needs no file */
        }
        return desc_error(what, l->no, "the extent's file name is not quoted");
    }
    const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
    if (!q) {
        return desc_error(what, l->no, "the extent's file name is not quoted");
    }
    x->name = strndup(p + 1, (size_t)(q - p - 1));
    if (!x->name) {
        return err_set(ENOMEM, "vmdk: descriptor");
    }
    p = q + 1;
    skip_spaces(&p, end);
    if (type == VMDK_TYPE_FLAT) {
        if ((r = parse_u64(&p, end, &x->offset)) < 0 || x->offset > (UINT64_MAX >> 10)) {
            return desc_error(what, l->no, "a FLAT extent needs an offset in sectors");
        }
        skip_spaces(&p, end);
    }
    if (p != end) {
        return desc_error(what, l->no, "unexpected text after the extent");
    }
    return 1;
}

/* printable ASCII only: what info may print and put in JSON as is */
static bool printable(const char *v)
{
    for (; *v; v++) {
        if ((unsigned char)*v < 0x20 || (unsigned char)*v >= 0x7f) {
            return false;
        }
    }
    return true;
}

/* Keys info shows as they are; a value that does not parse, or is not
 * printable ASCII, is left out (the DDB is VMware's to judge, not ours). */
static void keep_value(const struct line *l, struct vmdk_desc *d)
{
    const struct {
        const char *key;
        char **to;
    } keys[] = {
        {"encoding", &d->encoding},
        {"ddb.adapterType", &d->adapter_type},
        {"ddb.virtualHWVersion", &d->hw_version},
        {"ddb.longContentID", &d->long_content_id},
    };

    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        size_t n = strlen(keys[i].key);
        char *v = NULL;
        if (starts(l, keys[i].key) && l->len > n && (l->p[n] == ' ' || l->p[n] == '=') &&
            line_value(l, keys[i].key, &v) == 0) {
            if (!printable(v)) {
                free(v);
                continue;
            }
            free(*keys[i].to);
            *keys[i].to = v;
        }
    }
}

static int parse_line(const struct line *l, const char *what, struct vmdk_desc *d)
{
    CLEANUP_FREE char *v = NULL;
    int r;

    if (starts(l, "ddb.") || starts(l, "encoding")) {
        keep_value(l, d);
        return 0;
    }
    if (l->len == 0 || l->p[0] == '#' || starts(l, "version")) {
        return 0;
    }
    if (starts(l, "RW ") || starts(l, "RDONLY ") || starts(l, "NOACCESS ")) {
        if (d->n_extents >= VMDK_MAX_EXTENTS) {
            return desc_error(what, l->no, "too many extents");
        }
        struct vmdk_desc_extent x = {0};
        r = parse_extent(l, what, &x);
        if (r <= 0) {
            free(x.name);
            return r;
        }
        if (!d->extents) {
            d->extents = calloc(VMDK_MAX_EXTENTS, sizeof *d->extents);
            if (!d->extents) {
                free(x.name);
                return err_set(ENOMEM, "vmdk: descriptor");
            }
        }
        d->extents[d->n_extents++] = x;
        return 0;
    }
    if (starts(l, "parentCID")) {
        if (line_value(l, "parentCID", &v) < 0 || parse_hex32(v, &d->parent_cid) < 0) {
            return desc_error(what, l->no, "parentCID is not a hexadecimal number");
        }
        d->has_parent_cid = true;
    } else if (starts(l, "CID")) {
        if (line_value(l, "CID", &v) < 0 || parse_hex32(v, &d->cid) < 0) {
            return desc_error(what, l->no, "CID is not a hexadecimal number");
        }
        d->has_cid = true;
    } else if (starts(l, "createType")) {
        free(d->create_type);
        d->create_type = NULL;
        if (line_value(l, "createType", &d->create_type) < 0) {
            return desc_error(what, l->no, "bad createType");
        }
    } else if (starts(l, "parentFileNameHint")) {
        free(d->parent_hint);
        d->parent_hint = NULL;
        if (line_value(l, "parentFileNameHint", &d->parent_hint) < 0) {
            return desc_error(what, l->no, "bad parentFileNameHint");
        }
    }
    /* Anything else (VMware adds keys over the years) is not ours to judge. */
    return 0;
}

int vmdk_desc_parse(const char *text, size_t len, const char *what, struct vmdk_desc *d)
{
    const char *nul = memchr(text, '\0', len);
    const char *cur = text, *end = nul ? nul : text + len;
    struct line l = {0};
    int r = 0;

    memset(d, 0, sizeof *d);
    while (r == 0 && next_line(&cur, end, &l)) {
        if (memchr(l.p, '\0', l.len)) {
            r = desc_error(what, l.no, "a NUL byte");
            break;
        }
        r = parse_line(&l, what, d);
    }
    if (r == 0 && (!d->has_cid || !d->has_parent_cid)) {
        r = err_setx(EINVAL, "%s: vmdk: the descriptor has no %s", what,
                     d->has_cid ? "parentCID" : "CID");
    }
    if (r < 0) {
        vmdk_desc_free(d);
    }
    return r;
}

void vmdk_desc_free(struct vmdk_desc *d)
{
    for (unsigned i = 0; i < d->n_extents; i++) {
        free(d->extents[i].name);
    }
    free(d->extents);
    free(d->create_type);
    free(d->parent_hint);
    free(d->encoding);
    free(d->adapter_type);
    free(d->hw_version);
    free(d->long_content_id);
    memset(d, 0, sizeof *d);
}

/* "ddb.longContentID = \"" then 32 hex digits, a quote and the line's
 * end (LF or CRLF): the line as VMware and layout=vmware write it. */
#define LONG_ID_KEY "ddb.longContentID = \""
#define LONG_ID_PREFIX (sizeof LONG_ID_KEY - 1)
static bool long_content_id_line(const char *p, size_t n)
{
    size_t body = LONG_ID_PREFIX + 32 + 1; /* key, digits, quote */

    if (n < body + 1 || n > body + 2 || memcmp(p, LONG_ID_KEY, LONG_ID_PREFIX) != 0 ||
        p[body - 1] != '"' || p[n - 1] != '\n' || (n == body + 2 && p[body] != '\r')) {
        return false;
    }
    for (size_t i = LONG_ID_PREFIX; i < LONG_ID_PREFIX + 32; i++) {
        if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) {
            return false;
        }
    }
    return true;
}

int vmdk_desc_set_cid(const char *text, size_t len, uint32_t cid, char *out, size_t cap)
{
    const char *nul = memchr(text, '\0', len);
    const char *cur = text, *end = nul ? nul : text + len;
    size_t used = 0;
    bool done = false;

    memset(out, 0, cap);
    while (cur < end) {
        const char *nl = memchr(cur, '\n', (size_t)(end - cur));
        size_t n = nl ? (size_t)(nl - cur) + 1 : (size_t)(end - cur);
        char buf[32];
        const char *src = cur;
        char idbuf[64];
        if (!done && n >= 4 && memcmp(cur, "CID=", 4) == 0) {
            n = (size_t)snprintf(buf, sizeof buf, "CID=%08" PRIx32 "\n", cid);
            src = buf;
            done = true;
        } else if (long_content_id_line(cur, n)) {
            /* VMware's longContentID ends with the CID: keep them in step */
            memcpy(idbuf, cur, n);
            snprintf(buf, sizeof buf, "%08" PRIx32, cid);
            memcpy(idbuf + LONG_ID_PREFIX + 24, buf, 8);
            src = idbuf;
        }
        if (used + n > cap) {
            return -ENOSPC;
        }
        memcpy(out + used, src, n);
        used += n;
        cur = nl ? nl + 1 : end;
    }
    return done ? 0 : -EINVAL;
}

void vmdk_desc_set_long_id_prefix(char *text, size_t len, const char prefix[24])
{
    for (char *cur = text, *end = text + len; cur < end;) {
        char *nl = memchr(cur, '\n', (size_t)(end - cur));
        size_t n = nl ? (size_t)(nl - cur) + 1 : (size_t)(end - cur);
        if (long_content_id_line(cur, n)) {
            memcpy(cur + LONG_ID_PREFIX, prefix, 24);
            return;
        }
        cur = nl ? nl + 1 : end;
    }
}
