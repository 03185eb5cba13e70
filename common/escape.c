/* common/escape.c: see escape.h. */
#include "escape.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid, printable UTF-8 sequence at p (1-4), or 0 if the
 * byte at p must be escaped. */
static size_t printable_seq(const unsigned char *p)
{
    unsigned char c = p[0];
    uint32_t cp;
    size_t n;

    if (c >= 0x20 && c < 0x7f) {
        return c == '\\' ? 0 : 1;
    }
    if (c < 0xc2 || c > 0xf4) {
        return 0; /* controls, DEL, stray continuations, overlong leads */
    }
    n = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    cp = c & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0; /* also stops at the NUL */
        }
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f)) {
        return 0; /* overlong, out of range, surrogates, C1 controls */
    }
    return n;
}

size_t str_escape_buf(char *out, size_t cap, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(s ? s : "(null)");
    size_t need = 0, written = 0;
    bool full = !out || cap == 0;

    if (!full) {
        out[0] = '\0';
    }
    while (*p) {
        char esc[4];
        const char *piece = (const char *)p;
        size_t n = printable_seq(p), advance = n;

        if (n == 0) {
            advance = 1;
            esc[0] = '\\';
            if (*p == '\\') {
                esc[1] = '\\';
                n = 2;
            } else {
                esc[1] = 'x';
                esc[2] = hex[*p >> 4];
                esc[3] = hex[*p & 15];
                n = 4;
            }
            piece = esc;
        }
        /* Once a piece does not fit, nothing more is written: the output
         * is a prefix of whole pieces. */
        if (!full && written + n < cap) {
            memcpy(out + written, piece, n);
            written += n;
            out[written] = '\0';
        } else {
            full = true;
        }
        need += n;
        p += advance;
    }
    return need;
}

char *str_escape(const char *s)
{
    size_t len = str_escape_buf(NULL, 0, s);
    char *out = malloc(len + 1);

    if (out) {
        str_escape_buf(out, len + 1, s);
    }
    return out;
}

void str_neutralise(char *s)
{
    unsigned char *p = (unsigned char *)s;

    while (*p) {
        size_t n = *p == '\\' ? 1 : printable_seq(p);
        if (n == 0) {
            *p++ = '?'; /* the next byte is judged on its own */
        } else {
            p += n;
        }
    }
}

int str_is_printable(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    while (*p) {
        size_t n = printable_seq(p);
        if (n == 0) {
            return 0;
        }
        p += n;
    }
    return 1;
}
