/* protocols/http/range.c: Content-Range and header lines, as a server
 * sends them.  Every byte here comes from the network: numbers are
 * checked for overflow, nothing is read past len, and anything unusual is
 * refused rather than guessed at. */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "range.h"

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* A run of decimal digits at s[*pos] as a number; false when there is no
 * digit or it does not fit in 64 bits. */
static bool parse_number(const char *s, size_t len, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = *pos;

    if (i >= len || s[i] < '0' || s[i] > '9') {
        return false;
    }
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *pos = i;
    *out = v;
    return true;
}

static bool expect_char(const char *s, size_t len, size_t *pos, char c)
{
    if (*pos < len && s[*pos] == c) {
        (*pos)++;
        return true;
    }
    return false;
}

int http_content_range_parse(const char *s, size_t len, struct http_content_range *out)
{
    struct http_content_range r = {0};
    size_t pos = 0;

    while (len > 0 && is_blank(s[len - 1])) {
        len--;
    }
    while (pos < len && is_blank(s[pos])) {
        pos++;
    }
    if (len - pos < 6 || strncasecmp(s + pos, "bytes", 5) != 0 || !is_blank(s[pos + 5])) {
        return -EINVAL;
    }
    pos += 6;
    while (pos < len && is_blank(s[pos])) {
        pos++;
    }
    if (expect_char(s, len, &pos, '*')) {
        /* an unsatisfiable range's answer: no range, a total is required */
    } else {
        if (!parse_number(s, len, &pos, &r.first) || !expect_char(s, len, &pos, '-') ||
            !parse_number(s, len, &pos, &r.last) || r.first > r.last) {
            return -EINVAL;
        }
        r.has_range = true;
    }
    if (!expect_char(s, len, &pos, '/')) {
        return -EINVAL;
    }
    if (r.has_range && expect_char(s, len, &pos, '*')) {
        /* total unknown */
    } else {
        if (!parse_number(s, len, &pos, &r.total)) {
            return -EINVAL;
        }
        r.has_total = true;
    }
    if (pos != len || (r.has_range && r.has_total && r.last >= r.total)) {
        return -EINVAL;
    }
    *out = r;
    return 0;
}

int http_header_match(const char *line, size_t len, const char *name, const char **value,
                      size_t *value_len)
{
    size_t n = strlen(name), start, end;

    if (len <= n || strncasecmp(line, name, n) != 0 || line[n] != ':') {
        return 0;
    }
    start = n + 1;
    end = len;
    while (end > start &&
           (line[end - 1] == '\r' || line[end - 1] == '\n' || is_blank(line[end - 1]))) {
        end--;
    }
    while (start < end && is_blank(line[start])) {
        start++;
    }
    *value = line + start;
    *value_len = end - start;
    return 1;
}

bool http_etag_usable(const char *s, size_t len)
{
    if (len < 2 || len > HTTP_ETAG_MAX || s[0] != '"' || s[len - 1] != '"') {
        return false;
    }
    for (size_t i = 1; i + 1 < len; i++) {
        if (s[i] < 0x21 || s[i] > 0x7e || s[i] == '"') {
            return false;
        }
    }
    return true;
}
