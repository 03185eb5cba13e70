/* protocols/http/range.h: the pieces of an HTTP answer the driver trusts
 * only after checking them, parsed by pure functions (no I/O, no state)
 * so that a unit test and a libFuzzer harness (tests/fuzz/fuzz-http-range.c)
 * can feed them anything a hostile server could send. */
#ifndef DISKIMG_PROTOCOLS_HTTP_RANGE_H
#define DISKIMG_PROTOCOLS_HTTP_RANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A Content-Range value (RFC 9110 14.4): "bytes FIRST-LAST/TOTAL",
 * "bytes FIRST-LAST/ *" (total unknown) or "bytes * /TOTAL" (the answer
 * to an unsatisfiable range, 416). */
struct http_content_range {
    bool has_range; /* first and last are set */
    bool has_total; /* total is set */
    uint64_t first, last, total;
};

/* Parse the value of a Content-Range header (len bytes, not necessarily
 * NUL-terminated; surrounding blanks allowed).  0, or -EINVAL when it is
 * not one of the forms above, a number overflows 64 bits, first > last,
 * or last >= total. */
int http_content_range_parse(const char *s, size_t len, struct http_content_range *out);

/* If the header line (len bytes, as libcurl hands it over: "Name: value"
 * with its CRLF) is the header 'name' (case-insensitive), return 1 and
 * its value without surrounding blanks in *value, *value_len (pointing
 * into line); else 0. */
int http_header_match(const char *line, size_t len, const char *name, const char **value,
                      size_t *value_len);

/* A strong entity tag ("..." of visible ASCII but '"', at most
 * HTTP_ETAG_MAX bytes) that can go back in an If-Match header as it is;
 * weak tags (W/"...") cannot, as If-Match compares strongly. */
#define HTTP_ETAG_MAX 256
bool http_etag_usable(const char *s, size_t len);

#endif
