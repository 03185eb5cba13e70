/* common/json.c: see json.h. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "json.h"

void json_init(struct json_writer *w, FILE *f, bool compact)
{
    w->f = f;
    w->depth = 0;
    w->first[0] = true;
    w->compact = compact;
}

/* A code point qemu's JSON writer keeps (util/unicode.c's rules): not past
 * U+10FFFF, no surrogate, no noncharacter. */
static bool json_valid_code_point(uint32_t cp)
{
    return cp <= 0x10FFFF && (cp & 0xFFFFF800) != 0xD800 && !(cp >= 0xFDD0 && cp <= 0xFDEF) &&
           (cp & 0xFFFE) != 0xFFFE;
}

/* Decode one UTF-8 sequence at *p (bounded by its NUL) as qemu does:
 * the code point, or -1 for bytes that are not valid UTF-8 (an overlong
 * form but "\xC0\x80" for U+0000 included); *p moves past what was
 * used. */
static int32_t json_utf8_next(const unsigned char **p)
{
    static const uint32_t min_cp[5] = {0x80, 0x800, 0x10000, 0x200000, 0x4000000};
    unsigned byte = *(*p)++, len = 0, mask;
    uint32_t cp;

    if (byte < 0x80) {
        return (int32_t)byte;
    }
    if (byte >= 0xFE || !(byte & 0x40)) {
        return -1; /* impossible byte, or a continuation byte first */
    }
    for (mask = 0x80; byte & mask; mask >>= 1) {
        len++;
    }
    cp = byte & (mask - 1);
    for (unsigned i = 1; i < len; i++) {
        if ((**p & 0xC0) != 0x80) {
            return -1; /* a continuation byte is missing (the NUL stops it too) */
        }
        cp = cp << 6 | (*(*p)++ & 0x3F);
    }
    if (!json_valid_code_point(cp) || (cp < min_cp[len - 2] && !(cp == 0 && len == 2))) {
        return -1;
    }
    return (int32_t)cp;
}

/* A JSON string as qemu writes one: printable ASCII as it is, the usual
 * short escapes, and every other code point as \uXXXX (upper-case hex;
 * a surrogate pair past U+FFFF, U+FFFD for bytes that are not UTF-8), so
 * that the output is ASCII, byte for byte qemu-img's. */
static void json_string_literal(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int32_t cp = json_utf8_next(&p);
        switch (cp) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\b':
            fputs("\\b", f);
            break;
        case '\f':
            fputs("\\f", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (cp < 0) {
                cp = 0xFFFD;
            }
            if (cp > 0xFFFF) {
                fprintf(f, "\\u%04X\\u%04X", (unsigned)(0xD800 + ((cp - 0x10000) >> 10)),
                        (unsigned)(0xDC00 + ((cp - 0x10000) & 0x3FF)));
            } else if (cp < 0x20 || cp >= 0x7F) {
                fprintf(f, "\\u%04X", (unsigned)cp);
            } else {
                fputc(cp, f);
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
