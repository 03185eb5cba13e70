/* cmd/output.c: printing helpers shared by the subcommands: --output
 * parsing, image sizes, qemu-img's human sizes. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block.h"
#include "cmd.h"
#include "common/error.h"
#include "common/url-redact.h"
#include "common/util.h"
#include "nbd/uri.h"

int cmd_parse_output(const char *sub, const char *arg, bool *json)
{
    if (strcmp(arg, "json") == 0) {
        *json = true;
    } else if (strcmp(arg, "human") == 0) {
        *json = false;
    } else {
        return cmd_usage_error(sub, "--output must be human or json, not '%s'", arg);
    }
    return 0;
}

int cmd_parse_image_size(const char *sub, const char *arg, uint64_t *out)
{
    int r = parse_size(arg, out);

    if (r == -ERANGE || (r == 0 && *out > CMD_MAX_IMAGE_SIZE)) {
        return cmd_usage_error(sub,
                               "size '%s' is too large: an image holds at most 8 EiB - 1 byte "
                               "(%" PRIu64 " bytes)",
                               arg, CMD_MAX_IMAGE_SIZE);
    }
    if (r < 0) {
        return cmd_usage_error(sub,
                               "invalid size '%s': a number of bytes, optionally with a suffix "
                               "k, M, G, T, P or E (powers of 1024)",
                               arg);
    }
    return 0;
}

int cmd_snapshot_param(const char *sub, char *arg, struct blk_image_opts *o)
{
    const char *id = NULL, *name = NULL;

    if (strncmp(arg, "snapshot.", 9) != 0) {
        blk_kv_set(&o->options, "snapshot", arg); /* for its format driver */
        return 0;
    }
    for (char *item = arg, *next; item; item = next) {
        next = strchr(item, ',');
        if (next) {
            *next++ = '\0';
        }
        if (strncmp(item, "snapshot.id=", 12) == 0) {
            id = item + 12;
        } else if (strncmp(item, "snapshot.name=", 14) == 0) {
            name = item + 14;
        } else {
            return cmd_usage_error(sub,
                                   "invalid snapshot parameter '%s' (snapshot.id=ID, "
                                   "snapshot.name=NAME, or an ID or name)",
                                   item);
        }
    }
    blk_kv_set(&o->options, "snapshot", name ? name : id ? id : "");
    return 0;
}

bool cmd_append_options(char **list, const char *more)
{
    size_t old = *list ? strlen(*list) : 0, add = strlen(more);
    char *p = realloc(*list, old + add + 2);

    if (!p) {
        return false;
    }
    if (old) {
        p[old++] = ',';
    }
    memcpy(p + old, more, add + 1);
    *list = p;
    return true;
}

bool cmd_image_option(int c, const char *arg, struct blk_image_opts *o)
{
    switch (c) {
    /* A repeated flag replaces its key, so the list cannot fill up. */
    case CMD_OPT_TLS_CREDS:
        blk_kv_set(&o->options, "tls-creds", arg);
        return true;
    case CMD_OPT_TLS_PSK:
        blk_kv_set(&o->options, "tls-psk", arg);
        return true;
    case CMD_OPT_TLS_USERNAME:
        blk_kv_set(&o->options, "tls-username", arg);
        return true;
    case CMD_OPT_UNTRUSTED:
        o->untrusted = true;
        return true;
    default:
        return false;
    }
}

void cmd_size_str(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double unit = 1;
    unsigned i = 0;

    /* Three significant digits, as qemu-img prints them: its size_to_str
     * takes the next unit from 1000 of the last one on ("0.977 MiB", not
     * "1e+03 KiB"). */
    while (i + 1 < sizeof units / sizeof units[0] && (double)bytes >= 1000.0 * unit) {
        unit *= 1024;
        i++;
    }
    snprintf(buf, len, "%0.3g %s", (double)bytes / unit, units[i]);
}

/* The name as sha256sum prints it: a name with a backslash, a newline or
 * a carriage return has them escaped and the line starts with '\'. */
void cmd_print_checksum(FILE *f, const uint8_t *sum, const char *name)
{
    bool esc = strpbrk(name, "\\\n\r") != NULL;

    if (esc) {
        fputc('\\', f);
    }
    for (unsigned i = 0; i < BLK_CHECKSUM_LEN; i++) {
        fprintf(f, "%02x", sum[i]);
    }
    fputs("  ", f);
    for (const char *p = name; *p; p++) {
        if (esc && *p == '\\') {
            fputs("\\\\", f);
        } else if (esc && *p == '\n') {
            fputs("\\n", f);
        } else if (esc && *p == '\r') {
            fputs("\\r", f);
        } else {
            fputc(*p, f);
        }
    }
    fputc('\n', f);
}

char *cmd_display_name(const char *name)
{
    struct nbd_uri u = {0};
    char *out = NULL;

    if (http_url_is(name)) {
        return url_redact(name); /* never a signature or a password */
    }
    if (nbd_uri_is(name) && nbd_uri_parse(name, &u) == 0) {
        out = nbd_uri_qemu_name(&u);
    }
    err_clear();
    nbd_uri_free(&u);
    return out ? out : strdup(name);
}
