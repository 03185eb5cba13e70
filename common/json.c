/* common/json.c: see json.h. */
#include <inttypes.h>
#include <stdio.h>

#include "json.h"

void json_init(struct json_writer *w, FILE *f, bool compact)
{
    w->f = f;
    w->depth = 0;
    w->first[0] = true;
    w->compact = compact;
}

static void json_string_literal(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        default:
            if (*p < 0x20) {
                fprintf(f, "\\u%04x", *p);
            } else {
                fputc(*p, f);
            }
        }
    }
    fputc('"', f);
}

/* Separator, newline and indentation before a new element, then its key. */
static void json_element(struct json_writer *w, const char *key)
{
    if (w->depth > 0) {
        if (!w->first[w->depth]) {
            fputc(',', w->f);
        }
        if (w->compact) {
            if (!w->first[w->depth]) {
                fputc(' ', w->f);
            }
        } else {
            fputc('\n', w->f);
            for (int i = 0; i < w->depth; i++) {
                fputs("    ", w->f);
            }
        }
        w->first[w->depth] = false;
    }
    if (key) {
        json_string_literal(w->f, key);
        fputs(": ", w->f);
    }
}

static void json_open(struct json_writer *w, const char *key, char c)
{
    json_element(w, key);
    fputc(c, w->f);
    if (w->depth + 1 < JSON_MAX_DEPTH) {
        w->depth++;
        w->first[w->depth] = true;
    }
}

/* Like qemu's pretty printer, an empty container too gets its closing
 * bracket on a line of its own. */
static void json_close(struct json_writer *w, char c)
{
    if (w->depth > 0) {
        w->depth--;
    }
    if (!w->compact) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; i++) {
            fputs("    ", w->f);
        }
    }
    fputc(c, w->f);
}

void json_begin_object(struct json_writer *w, const char *key)
{
    json_open(w, key, '{');
}

void json_end_object(struct json_writer *w)
{
    json_close(w, '}');
}

void json_begin_array(struct json_writer *w, const char *key)
{
    json_open(w, key, '[');
}

void json_end_array(struct json_writer *w)
{
    json_close(w, ']');
}

void json_str(struct json_writer *w, const char *key, const char *value)
{
    json_element(w, key);
    json_string_literal(w->f, value ? value : "");
}

void json_uint(struct json_writer *w, const char *key, uint64_t value)
{
    json_element(w, key);
    fprintf(w->f, "%" PRIu64, value);
}

void json_int(struct json_writer *w, const char *key, int64_t value)
{
    json_element(w, key);
    fprintf(w->f, "%" PRId64, value);
}

void json_double(struct json_writer *w, const char *key, double value)
{
    json_element(w, key);
    fprintf(w->f, "%.3f", value);
}

void json_bool(struct json_writer *w, const char *key, bool value)
{
    json_element(w, key);
    fputs(value ? "true" : "false", w->f);
}

void json_finish(struct json_writer *w)
{
    fputc('\n', w->f);
    fflush(w->f);
}
