/* tests/unit/test-util.c: pure helpers in common/ and nbd/names.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/bufpool.h"
#include "common/bytes.h"
#include "common/cpus.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/histogram.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "nbd/names.h"
#include "nbd/protocol.h"

CHECK_GLOBALS

static void test_parse_size(void)
{
    static const struct {
        const char *in;
        int ret;
        uint64_t out;
    } rows[] = {
        {"0", 0, 0},
        {"4096", 0, 4096},
        {"1k", 0, 1024},
        {"1K", 0, 1024},
        {"64KiB", 0, 65536},
        {"64KB", 0, 65536},
        {"1M", 0, 1 << 20},
        {"1.5G", 0, 3ULL << 29},
        {"2T", 0, 2ULL << 40},
        {"1E", 0, 1ULL << 60},
        {"512b", 0, 512},
        {"16E", -ERANGE, 0},
        {"99999999999999999999", -ERANGE, 0},
        {"", -EINVAL, 0},
        {"-1", -EINVAL, 0},
        {"1x", -EINVAL, 0},
        {"1.5", -EINVAL, 0},
        {"1MM", -EINVAL, 0},
        {"k", -EINVAL, 0},
        {"1.G", -EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint64_t v = 12345;
        int r = parse_size(rows[i].in, &v);
        if (r != rows[i].ret || (r == 0 && v != rows[i].out)) {
            fprintf(stderr, "parse_size(\"%s\") = %d, %llu\n", rows[i].in, r,
                    (unsigned long long)v);
            CHECK(0);
        }
    }
}

static void test_parse_uint_bool(void)
{
    uint64_t v;
    bool b;

    CHECK_EQ(parse_uint("10809", 1, 65535, &v), 0);
    CHECK_EQ(v, 10809);
    CHECK_EQ(parse_uint("0", 1, 65535, &v), -ERANGE);
    CHECK_EQ(parse_uint("70000", 1, 65535, &v), -ERANGE);
    CHECK_EQ(parse_uint("12a", 1, 65535, &v), -EINVAL);
    CHECK_EQ(parse_uint("", 0, 1, &v), -EINVAL);
    CHECK_EQ(parse_bool("on", &b), 0);
    CHECK(b);
    CHECK_EQ(parse_bool("OFF", &b), 0);
    CHECK(!b);
    CHECK_EQ(parse_bool("maybe", &b), -EINVAL);
}

static void test_buffer_is_zero(void)
{
    static uint8_t buf[8192];

    CHECK(buffer_is_zero(buf, sizeof buf));
    CHECK(buffer_is_zero(buf, 0));
    CHECK(buffer_is_zero(buf, 7));
    size_t probes[] = {0, 1, 15, 16, 17, 4095, 4096, 8191};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        buf[probes[i]] = 1;
        CHECK(!buffer_is_zero(buf, sizeof buf));
        CHECK(buffer_is_zero(buf + probes[i] + 1, sizeof buf - probes[i] - 1));
        buf[probes[i]] = 0;
    }
}

static void test_iov(void)
{
    char a[3] = "abc", b[4] = "defg", out[7];
    struct iovec iov[2] = {{a, 3}, {b, 4}}, slice[2];

    CHECK_EQ(iov_length(iov, 2), 7);
    CHECK_EQ(iov_to_buf(iov, 2, 2, out, 4), 4);
    CHECK(memcmp(out, "cdef", 4) == 0);
    CHECK_EQ(iov_from_buf(iov, 2, 1, "XYZ", 3), 3);
    CHECK(memcmp(a, "aXY", 3) == 0 && b[0] == 'Z');
    CHECK_EQ(iov_slice(iov, 2, 2, 3, slice, 2), 2);
    CHECK_EQ(slice[0].iov_len, 1);
    CHECK_EQ(slice[1].iov_len, 2);
    CHECK_EQ(iov_slice(iov, 2, 0, 7, slice, 1), -1);
    iov_memset(iov, 2, 1, 0, 5);
    CHECK(a[0] == 'a' && a[1] == 0 && b[2] == 0 && b[3] == 'g');
}

/* The copies share one walk: an empty piece, a skip past whole pieces,
 * and an iovec that ends before len. */
static void test_iov_walk(void)
{
    char a[3] = "ab", b[4] = "cde", out[9] = "........";
    struct iovec iov[3] = {{a, 2}, {NULL, 0}, {b, 3}};

    CHECK_EQ(iov_to_buf(iov, 3, 1, out, 8), 4);
    CHECK(memcmp(out, "bcde....", 8) == 0);
    CHECK_EQ(iov_to_buf(iov, 3, 3, out, 1), 1);
    CHECK(out[0] == 'd');
    CHECK_EQ(iov_to_buf(iov, 3, 5, out, 1), 0);
    CHECK_EQ(iov_from_buf(iov, 3, 2, "XYZW", 4), 3);
    CHECK(memcmp(a, "ab", 2) == 0 && memcmp(b, "XYZ", 3) == 0);
    iov_memset(iov, 3, 1, 'q', 9);
    CHECK(a[0] == 'a' && a[1] == 'q' && memcmp(b, "qqq", 3) == 0);
}

static void test_histogram(void)
{
    static struct histogram h;

    CHECK_EQ(hist_quantile(&h, 0.5), 0);
    for (uint64_t v = 1; v <= 1000; v++) {
        hist_record(&h, v * 1000);
    }
    uint64_t p50 = hist_quantile(&h, 0.5), p99 = hist_quantile(&h, 0.99);
    /* within the histogram's 12.5% bucket width */
    CHECK(p50 >= 500000 && p50 <= 500000 * 1.13);
    CHECK(p99 >= 990000 && p99 <= 1000000);
    CHECK_EQ(hist_quantile(&h, 1.0), 1000000);
    CHECK_EQ(hist_mean(&h), 500500);
}

static void test_json(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    struct json_writer w;

    json_init(&w, f, false);
    json_begin_object(&w, NULL);
    json_str(&w, "name", "a\"b\\c\n");
    json_uint(&w, "size", 1024);
    json_begin_array(&w, "list");
    json_bool(&w, NULL, true);
    json_int(&w, NULL, -1);
    json_end_array(&w);
    json_begin_object(&w, "empty");
    json_end_object(&w);
    json_end_object(&w);
    json_finish(&w);
    fclose(f);
    CHECK(strcmp(text, "{\n    \"name\": \"a\\\"b\\\\c\\n\",\n    \"size\": 1024,\n"
                       "    \"list\": [\n        true,\n        -1\n    ],\n"
                       "    \"empty\": {\n    }\n}\n") == 0);
    free(text);
}

/* One JSON string as json_str writes it (compact, no key). */
static void expect_json_string(const char *in, const char *want)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    struct json_writer w;

    json_init(&w, f, true);
    json_str(&w, NULL, in);
    fclose(f);
    if (strcmp(text, want) != 0) {
        fprintf(stderr, "json string: got %s, want %s\n", text, want);
        check_failures++;
    }
    free(text);
}

/* Escaped as qemu's JSON writer escapes (outputs of qemu-img 7.2). */
static void test_json_strings(void)
{
    expect_json_string("plain ~", "\"plain ~\"");
    expect_json_string("\b\f\t\x01\x7f", "\"\\b\\f\\t\\u0001\\u007F\"");
    expect_json_string("\xc3\xbcn", "\"\\u00FCn\"");
    expect_json_string("emoji\xf0\x9f\x98\x80", "\"emoji\\uD83D\\uDE00\"");
    expect_json_string("bad\xff"
                       "byte",
                       "\"bad\\uFFFDbyte\"");
    expect_json_string("cut\xc3", "\"cut\\uFFFD\"");
    expect_json_string("over\xc0\xafx", "\"over\\uFFFDx\"");
    expect_json_string("nul\xc0\x80x", "\"nul\\u0000x\"");
    expect_json_string("surrogate\xed\xa0\x80x", "\"surrogate\\uFFFDx\"");
    expect_json_string("nonchar\xef\xbf\xbe", "\"nonchar\\uFFFD\"");
    expect_json_string("\xc3(", "\"\\uFFFD(\""); /* the byte after a bad lead is kept */
    expect_json_string("\xfd\xbf\xbf\xbf\xbf\xbf", "\"\\uFFFD\"");
}

static void test_nbd_errno(void)
{
    CHECK_EQ(nbd_errno_to_wire(0), 0);
    CHECK_EQ(nbd_errno_to_wire(ENOSPC), NBD_ENOSPC);
    CHECK_EQ(nbd_errno_to_wire(EDQUOT), NBD_ENOSPC);
    CHECK_EQ(nbd_errno_to_wire(EFBIG), NBD_ENOSPC);
    CHECK_EQ(nbd_errno_to_wire(EROFS), NBD_EPERM);
    CHECK_EQ(nbd_errno_to_wire(EPERM), NBD_EPERM);
    CHECK_EQ(nbd_errno_to_wire(EINVAL), NBD_EINVAL);
    CHECK_EQ(nbd_errno_to_wire(EOVERFLOW), NBD_EOVERFLOW);
    CHECK_EQ(nbd_errno_to_wire(ENOTSUP), NBD_ENOTSUP);
    CHECK_EQ(nbd_errno_to_wire(ESHUTDOWN), NBD_ESHUTDOWN);
    CHECK_EQ(nbd_errno_to_wire(ENOMEM), NBD_ENOMEM);
    CHECK_EQ(nbd_errno_to_wire(EBADF), NBD_EIO);
    CHECK(strcmp(nbd_cmd_name(NBD_CMD_WRITE_ZEROES), "NBD_CMD_WRITE_ZEROES") == 0);
    CHECK(strcmp(nbd_cmd_name(999), "unknown command") == 0);
    CHECK(strcmp(nbd_opt_name(NBD_OPT_GO), "NBD_OPT_GO") == 0);
    CHECK(strcmp(nbd_rep_name(NBD_REP_ERR_UNSUP), "NBD_REP_ERR_UNSUP") == 0);
}

static void test_bufpool(void)
{
    size_t cap1, cap2, cap3;
    void *a = bufpool_get(2u << 20, &cap1);

    CHECK(a != NULL);
    CHECK(cap1 >= (2u << 20));
    CHECK_EQ((uintptr_t)a % 4096, 0);
    memset(a, 0xab, cap1); /* the whole capacity is usable */
    bufpool_put(a, cap1);
    CHECK_EQ(bufpool_idle_bytes(), cap1);
    /* a request of similar size gets the same buffer back */
    void *b = bufpool_get((2u << 20) - 100, &cap2);
    CHECK(b == a);
    CHECK_EQ(cap2, cap1);
    CHECK_EQ(bufpool_idle_bytes(), 0);
    bufpool_put(b, cap2);
    /* a much smaller request does not tie up a big buffer */
    void *big = bufpool_get(8u << 20, &cap3);
    bufpool_put(big, cap3);
    size_t cap4;
    void *c = bufpool_get(100, &cap4);
    CHECK(c != big);
    CHECK(cap4 >= 100);
    bufpool_put(c, cap4);
    /* idle memory stays bounded: buffers beyond the limit are freed */
    enum { N = BUFPOOL_IDLE_MAX / (4u << 20) + 4 };
    void *bufs[N];
    size_t caps[N];
    for (int i = 0; i < N; i++) {
        bufs[i] = bufpool_get(4u << 20, &caps[i]);
        CHECK(bufs[i] != NULL);
    }
    for (int i = 0; i < N; i++) {
        bufpool_put(bufs[i], caps[i]);
    }
    CHECK(bufpool_idle_bytes() <= BUFPOOL_IDLE_MAX);
    bufpool_put(NULL, 0);
}

static void test_escape(void)
{
    static const struct {
        const char *in, *out;
    } rows[] = {
        {"plain name", "plain name"},
        {"", ""},
        {"tab\there", "tab\\x09here"},
        {"\x1b[2Jcls", "\\x1b[2Jcls"},
        {"back\\slash", "back\\\\slash"},
        {"del\x7f", "del\\x7f"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"c1 \xc2\x9b csi", "c1 \\xc2\\x9b csi"}, /* U+009B */
        {"cut \xe2\x82", "cut \\xe2\\x82"},       /* truncated sequence */
        {"lone \x80 cont", "lone \\x80 cont"},
        {"overlong \xc0\xaf", "overlong \\xc0\\xaf"},
        {"overlong3 \xe0\x80\xaf", "overlong3 \\xe0\\x80\\xaf"},
        {"surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80"},
        {"too big \xf4\x90\x80\x80", "too big \\xf4\\x90\\x80\\x80"},
        {"nl\nforged log line", "nl\\x0aforged log line"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char *e = str_escape(rows[i].in);
        CHECK(e && strcmp(e, rows[i].out) == 0);
        if (e && strcmp(e, rows[i].out) != 0) {
            fprintf(stderr, "  row %zu: got '%s'\n", i, e);
        }
        CHECK_EQ(str_is_printable(rows[i].in), strcmp(rows[i].in, rows[i].out) == 0);
        CHECK_EQ(str_escape_buf(NULL, 0, rows[i].in), strlen(rows[i].out));
        free(e);
    }
    char *n = str_escape(NULL);
    CHECK(n && strcmp(n, "(null)") == 0);
    free(n);

    /* A short buffer holds a prefix of whole pieces, never half an escape. */
    char buf[8];
    CHECK_EQ(str_escape_buf(buf, sizeof buf,
                            "ab\x1b"
                            "cdef"),
             10);
    CHECK(strcmp(buf, "ab\\x1bc") == 0);
    CHECK_EQ(str_escape_buf(buf, 5,
                            "ab\x1b"
                            "cdef"),
             10);
    CHECK(strcmp(buf, "ab") == 0);
    CHECK_EQ(str_escape_buf(buf, 1, "abc"), 3);
    CHECK(buf[0] == '\0');
}

static void test_error_chain(void)
{
    char cause[64];

    /* A backing chain's worth of prefixes keeps both ends. */
    err_setx(ELOOP, "l33.qcow2: backing chain deeper than 32 backing files");
    for (int i = 32; i >= 0; i--) {
        err_prefix("qcow2: /tmp/some/long/directory/name/l%02d.qcow2: backing file", i);
    }
    CHECK(strlen(err_msg()) < 1024);
    CHECK(strncmp(err_msg(), "qcow2: /tmp/some/long/directory/name/l00.qcow2: backing file: ",
                  strlen("qcow2: /tmp/some/long/directory/name/l00.qcow2: backing file: ")) == 0);
    snprintf(cause, sizeof cause, "l33.qcow2: backing chain deeper than 32 backing files");
    CHECK(strlen(err_msg()) > strlen(cause) &&
          strcmp(err_msg() + strlen(err_msg()) - strlen(cause), cause) == 0);
    CHECK(strstr(err_msg(), " [...] ") != NULL);

    /* A long message keeps its strerror. */
    char longname[3000];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CHECK_EQ(err_set(ENOENT, "%s", longname), -ENOENT);
    const char *tail = strerror(ENOENT);
    CHECK(strcmp(err_msg() + strlen(err_msg()) - strlen(tail), tail) == 0);

    /* Short ones are untouched; UTF-8 is never split. */
    err_setx(EINVAL, "short");
    err_prefix("ctx");
    CHECK(strcmp(err_msg(), "ctx: short") == 0);
    char utf[1500] = "";
    for (int i = 0; i < 400; i++) {
        strcat(utf, "\xc3\xa9");
    }
    err_setx(EINVAL, "%s", utf);
    err_prefix("%s", utf);
    CHECK(str_is_printable(err_msg()));
    err_clear();
    CHECK(err_msg()[0] == '\0');
}

/* An error message stays one line with no control character, even when
 * a caller quoted an unescaped string into it. */
static void test_error_one_line(void)
{
    CHECK_EQ(err_setx(EINVAL, "a\nb\033[2Jc\x7f"), -EINVAL);
    CHECK(strcmp(err_msg(), "a?b?[2Jc?") == 0);
    err_prefix("x\ty");
    CHECK(strcmp(err_msg(), "x?y: a?b?[2Jc?") == 0);
    err_set(ENOENT, "name\r");
    CHECK(strncmp(err_msg(), "name?: ", 7) == 0);
    /* Escaped text passes as it is. */
    err_setx(EINVAL, "%s", "ba\\x1b[31m\xc3\xa9");
    CHECK(strcmp(err_msg(), "ba\\x1b[31m\xc3\xa9") == 0);
    err_clear();
}

/* What str_escape escapes (but the backslash) becomes '?', byte by byte,
 * in every message: a raw 0x9b is a CSI on an 8-bit terminal, and U+009B
 * one on a UTF-8 terminal. */
static void test_error_not_utf8(void)
{
    static const struct {
        const char *in, *out;
    } rows[] = {
        {"c0 \x01\x1b[2J", "c0 ??[2J"},
        {"del \x7f", "del ?"},
        {"c1 \xc2\x9b"
         "31m \xc2\x80",
         "c1 ??31m ??"},
        {"csi \x9b"
         "31m",
         "csi ?31m"},
        {"cut2 \xc3", "cut2 ?"},
        {"cut4 \xf0\x9f\x98", "cut4 ???"},
        {"lone \x80 \xbf", "lone ? ?"},
        {"overlong \xc0\xaf \xc1\xbf", "overlong ?? ??"},
        {"overlong3 \xe0\x80\xaf", "overlong3 ???"},
        {"overlong4 \xf0\x80\x80\xaf", "overlong4 ????"},
        {"surrogate \xed\xa0\x80", "surrogate ???"},
        {"too big \xf4\x90\x80\x80 \xf5\x80", "too big ???? ??"},
        {"caf\xc3\xa9 \xe2\x82\xac \xe4\xb8\xad \xf0\x9f\x98\x80",
         "caf\xc3\xa9 \xe2\x82\xac \xe4\xb8\xad \xf0\x9f\x98\x80"},
        {"nbsp \xc2\xa0, \xc3\x9b", "nbsp \xc2\xa0, \xc3\x9b"}, /* U+00A0, U+00DB */
        {"escaped \\x9b \\\\", "escaped \\x9b \\\\"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        err_setx(EINVAL, "%s", rows[i].in);
        CHECK(strcmp(err_msg(), rows[i].out) == 0);
        if (strcmp(err_msg(), rows[i].out) != 0) {
            fprintf(stderr, "  row %zu: got '%s'\n", i, err_msg());
        }
    }
    err_set(ENOENT, "node \xc2\x9b");
    err_prefix("backing \x9b");
    CHECK(strncmp(err_msg(), "backing ?: node ??: ", 20) == 0);
    err_clear();
}

/* A long message of stray continuation bytes is cut like any other:
 * the cut must not walk over them and lose the head or the tail. */
static void test_error_cut_not_utf8(void)
{
    char name[1600];
    const char *tail = strerror(ENOENT);
    size_t len;

    memset(name, 0x80, sizeof name - 1);
    name[sizeof name - 1] = '\0';
    err_set(ENOENT, "front %s back", name);
    len = strlen(err_msg());
    CHECK_EQ(len, 1023);
    CHECK(strncmp(err_msg(), "front ????", 10) == 0);
    CHECK(strstr(err_msg(), "?? [...] ??") != NULL);
    CHECK(len > strlen(tail) + 10 &&
          strncmp(err_msg() + len - strlen(tail) - 10, "??? back: ", 10) == 0);

    /* The same through err_prefix, with the name in both parts. */
    err_setx(EINVAL, "%.600s cause", name);
    err_prefix("front %.600s back", name);
    len = strlen(err_msg());
    CHECK_EQ(len, 1023);
    CHECK(strncmp(err_msg(), "front ????", 10) == 0);
    CHECK(strcmp(err_msg() + len - 7, "? cause") == 0);
    CHECK(str_is_printable(err_msg()));
    err_clear();
}

/* A log line is one line with no control character, whatever a caller
 * quoted into it: what a peer sends cannot forge a line of its own, nor
 * hold a C1 control or invalid UTF-8, even where the line is cut. */
static void test_log_one_line(void)
{
    char path[] = "/tmp/diskimg-test-log.XXXXXX";
    static char line[2048], want[2048], longer[1100];
    int fd = mkstemp(path);
    int saved = dup(STDERR_FILENO);

    /* 1024 bytes of line buffer end inside the last "é". */
    memset(longer, 'a', 1022);
    strcpy(longer + 1022, "\xc3\xa9");
    CHECK(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    log_msg(LOG_LEVEL_INFO, "export '%s' not found", "a\r\nforged: b\033[2J");
    log_report_line("%s", "c1 \xc2\x9b"
                          "2J csi \x9b"
                          "2J caf\xc3\xa9 \\x9b \xe2\x82");
    log_report_line("%s", longer);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *f = fdopen(fd, "r");
    CHECK(f != NULL);
    rewind(f);
    CHECK(fgets(line, sizeof line, f) != NULL);
    CHECK(strcmp(line, "diskimg: export 'a??forged: b?[2J' not found\n") == 0);
    CHECK(fgets(line, sizeof line, f) != NULL);
    CHECK(strcmp(line, "c1 ??2J csi ?2J caf\xc3\xa9 \\x9b ??\n") == 0);
    CHECK(fgets(line, sizeof line, f) != NULL);
    memset(want, 'a', 1022);
    strcpy(want + 1022, "?\n");
    CHECK(strcmp(line, want) == 0);
    CHECK(fgets(line, sizeof line, f) == NULL);
    fclose(f);
    unlink(path);
}

static void test_bytes(void)
{
    uint8_t b[9] = {0};
    put_le32(b + 1, 0x11223344u); /* unaligned on purpose */
    CHECK(b[1] == 0x44 && b[4] == 0x11 && get_le32(b + 1) == 0x11223344u);
    put_be64(b + 1, 0x0102030405060708ull);
    CHECK(b[1] == 0x01 && b[8] == 0x08 && get_be64(b + 1) == 0x0102030405060708ull);
    put_le16(b, 0xabcd);
    CHECK(b[0] == 0xcd && get_le16(b) == 0xabcd);
    put_be16(b, 0xabcd);
    CHECK(b[0] == 0xab && get_be16(b) == 0xabcd);
    put_be32(b, 1);
    CHECK(b[3] == 1 && get_be32(b) == 1);
    put_le64(b, 1);
    CHECK(b[0] == 1 && b[7] == 0 && get_le64(b) == 1);
}

static void test_cpus(void)
{
    CHECK(cpus_from_quota(200000, 100000) == 2);
    CHECK(cpus_from_quota(150000, 100000) == 2); /* rounded up */
    CHECK(cpus_from_quota(50000, 100000) == 1);
    CHECK(cpus_from_quota(-1, 100000) == 0); /* v1: no quota */
    CHECK(cpus_from_quota(100000, 0) == 0);
    unsigned n = cpus_usable();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(n >= 1 && (online <= 0 || n <= (unsigned)online));
}

int main(void)
{
    RUN(test_parse_size);
    RUN(test_parse_uint_bool);
    RUN(test_buffer_is_zero);
    RUN(test_bytes);
    RUN(test_cpus);
    RUN(test_iov);
    RUN(test_iov_walk);
    RUN(test_histogram);
    RUN(test_json);
    RUN(test_json_strings);
    RUN(test_nbd_errno);
    RUN(test_bufpool);
    RUN(test_escape);
    RUN(test_error_chain);
    RUN(test_error_one_line);
    RUN(test_error_not_utf8);
    RUN(test_error_cut_not_utf8);
    RUN(test_log_one_line);
    return check_exit();
}
