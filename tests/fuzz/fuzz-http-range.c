/* tests/fuzz/fuzz-http-range.c: libFuzzer harness for what the http
 * driver parses of a server's answer (protocols/http/range.c) and what
 * it prints of a URL (common/url-redact.c).  The input is a header line
 * as libcurl hands it over ("Content-Range: bytes 0-511/1024\r\n"): it is
 * matched as a header, its value and the whole input parsed as a
 * Content-Range (an ETag value checked as one), and the input redacted
 * as a URL.
 *
 * Besides the sanitizers, the harness traps when a parse that succeeds
 * breaks its promises (first <= last < total, a form without range has a
 * total), when a header value points outside the line, and when a
 * redacted URL keeps a control byte or grows without bound.
 *
 * Build and run: see tests/fuzz/README.md; tests/fuzz/replay.c replays
 * the committed corpus (tests/fuzz/corpus/http-range) in every build. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/url-redact.h"
#include "protocols/http/range.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why)
{
    fprintf(stderr, "fuzz-http-range: %s\n", why);
    __builtin_trap();
}

static void check_range(const char *s, size_t len)
{
    struct http_content_range r;

    if (http_content_range_parse(s, len, &r) < 0) {
        return;
    }
    if (!r.has_range && !r.has_total) {
        fail("accepted a range with neither bytes nor total");
    }
    if (r.has_range && r.first > r.last) {
        fail("accepted first > last");
    }
    if (r.has_range && r.has_total && r.last >= r.total) {
        fail("accepted last >= total");
    }
}

static void check_redact(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), *out;

    if (!s) {
        return;
    }
    memcpy(s, data, size);
    s[size] = '\0';
    out = url_redact(s);
    if (out) {
        size_t n = strlen(out);
        for (size_t i = 0; i < n; i++) {
            if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f) {
                fail("a control byte in a redacted URL");
            }
        }
        if (n > 4 * size + 8) {
            fail("a redacted URL longer than its escaped input");
        }
    }
    free(out);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *line = (const char *)data, *v;
    size_t vlen;

    if (http_header_match(line, size, "Content-Range", &v, &vlen)) {
        if (v < line || v + vlen > line + size) {
            fail("a header value outside its line");
        }
        check_range(v, vlen);
    }
    if (http_header_match(line, size, "ETag", &v, &vlen) && http_etag_usable(v, vlen)) {
        /* it goes back in a request header: never a control byte */
        for (size_t i = 0; i < vlen; i++) {
            if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e) {
                fail("an ETag with a byte that cannot go in a header");
            }
        }
    }
    check_range(line, size);
    check_redact(data, size);
    return 0;
}
