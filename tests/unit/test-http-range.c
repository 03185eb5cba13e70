/* tests/unit/test-http-range.c: what the http driver accepts from a
 * server (Content-Range, header lines) and what it prints of a URL. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/url-redact.h"
#include "protocols/http/range.h"

CHECK_GLOBALS

static int parse(const char *s, struct http_content_range *r)
{
    memset(r, 0xa5, sizeof *r);
    return http_content_range_parse(s, strlen(s), r);
}

static void test_content_range_good(void)
{
    struct http_content_range r;

    CHECK_EQ(parse("bytes 0-511/1048576", &r), 0);
    CHECK(r.has_range && r.has_total);
    CHECK_EQ(r.first, 0);
    CHECK_EQ(r.last, 511);
    CHECK_EQ(r.total, 1048576);
    CHECK_EQ(parse("  BYTES   7-7/8 \t", &r), 0); /* blanks and the unit's case */
    CHECK_EQ(r.first, 7);
    CHECK_EQ(r.last, 7);
    CHECK_EQ(parse("bytes 0-9/*", &r), 0); /* size unknown */
    CHECK(r.has_range && !r.has_total);
    CHECK_EQ(parse("bytes */0", &r), 0); /* 416 of an empty file */
    CHECK(!r.has_range && r.has_total);
    CHECK_EQ(r.total, 0);
    CHECK_EQ(parse("bytes 18446744073709551614-18446744073709551614/18446744073709551615", &r), 0);
    CHECK(r.last == UINT64_MAX - 1 && r.total == UINT64_MAX);
}

static void test_content_range_bad(void)
{
    static const char *const bad[] = {
        "",
        "bytes",
        "bytes ",
        "bytes 0-1",
        "bytes 0-1/",
        "bytes -1/2",
        "bytes 1-/2",
        "bytes 5-4/10",  /* first after last */
        "bytes 0-10/10", /* last at the total */
        "bytes */*",     /* nothing at all */
        "bytes 0-1/2 x", /* trailing junk */
        "bytes=0-1/2",   /* the request's spelling */
        "items 0-1/2",   /* another unit */
        "bytes +0-1/2",
        "bytes 0 - 1/2",
        "bytes 0-1 /2",
        "bytes 0x0-1/2",
        "bytes 0-18446744073709551616/18446744073709551617", /* overflow */
        "bytes 0-1/99999999999999999999999",
        "bytes\t0-1/2\r\n", /* a CR is not a blank */
    };
    struct http_content_range r;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (parse(bad[i], &r) != -EINVAL) {
            fprintf(stderr, "accepted \"%s\"\n", bad[i]);
            check_failures++;
        }
    }
    /* not NUL-terminated: nothing past len is read */
    char buf[13];
    memcpy(buf, "bytes 0-1/29", 12);
    buf[12] = '9';
    CHECK_EQ(http_content_range_parse(buf, 12, &r), 0);
    CHECK_EQ(r.total, 29);
}

static void test_header_match(void)
{
    const char *v;
    size_t n;
    const char *line = "content-range:  bytes 0-1/2 \r\n";

    CHECK_EQ(http_header_match(line, strlen(line), "Content-Range", &v, &n), 1);
    CHECK(n == 11 && memcmp(v, "bytes 0-1/2", 11) == 0);
    CHECK_EQ(http_header_match("Content-Ranges: x\r\n", 19, "Content-Range", &v, &n), 0);
    CHECK_EQ(http_header_match("Content-Range\r\n", 15, "Content-Range", &v, &n), 0);
    CHECK_EQ(http_header_match("Content-Range:", 14, "Content-Range", &v, &n), 1);
    CHECK_EQ(n, 0);
}

static void test_etag(void)
{
    CHECK(http_etag_usable("\"abc-123\"", 9));
    CHECK(http_etag_usable("\"\"", 2));       /* empty, but a valid tag */
    CHECK(!http_etag_usable("W/\"abc\"", 8)); /* weak: If-Match would never match */
    CHECK(!http_etag_usable("abc", 3));
    CHECK(!http_etag_usable("\"a\"b\"", 5));
    CHECK(!http_etag_usable("\"a\r\nX: y\"", 10)); /* no header injection */
    CHECK(!http_etag_usable("\"a b\"", 5));
    CHECK(!http_etag_usable("\"", 1));
    char big[HTTP_ETAG_MAX + 1];
    memset(big, 'a', sizeof big);
    big[0] = big[HTTP_ETAG_MAX - 1] = '"';
    CHECK(http_etag_usable(big, HTTP_ETAG_MAX)); /* exactly the maximum */
    big[HTTP_ETAG_MAX - 1] = 'a';
    big[HTTP_ETAG_MAX] = '"';
    CHECK(!http_etag_usable(big, HTTP_ETAG_MAX + 1)); /* one more */
}

static void expect_redact(const char *url, const char *want)
{
    char *got = url_redact(url);

    if (!got || strcmp(got, want) != 0) {
        fprintf(stderr, "url_redact(\"%s\") = \"%s\", want \"%s\"\n", url, got ? got : "NULL",
                want);
        check_failures++;
    }
    free(got);
}

static void test_redact(void)
{
    expect_redact("https://h/p/a.qcow2", "https://h/p/a.qcow2");
    expect_redact("HTTPS://h/a?X-Amz-Signature=abc&x=1", "https://h/a?...");
    expect_redact("http://user:secret@h:8080/a#frag", "http://h:8080/a");
    expect_redact("http://h?sig", "http://h?...");
    expect_redact("http://a@b@h/x?y@z", "http://h/x?...");
    expect_redact("http://h/\x1b[2Jx", "http://h/\\x1b[2Jx");
    CHECK(http_url_is("hTTp://x") && http_url_is("https://x") && !http_url_is("ftp://x"));
    CHECK(!http_url_is("http:/x") && http_url_is_https("HTTPS://") &&
          !http_url_is_https("http://"));
}

int main(void)
{
    RUN(test_content_range_good);
    RUN(test_content_range_bad);
    RUN(test_header_match);
    RUN(test_etag);
    RUN(test_redact);
    return check_exit();
}
