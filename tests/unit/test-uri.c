/* tests/unit/test-uri.c: NBD URI parsing, good and hostile. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nbd/uri.h"

CHECK_GLOBALS

static void expect(const char *s, int ret, bool tls, bool unix_socket, const char *host,
                   const char *port, const char *sock, const char *exp)
{
    struct nbd_uri u;
    int r = nbd_uri_parse(s, &u);

    if (r != ret) {
        fprintf(stderr, "nbd_uri_parse(\"%s\") = %d, want %d\n", s, r, ret);
        check_failures++;
        if (r == 0) {
            nbd_uri_free(&u);
        }
        return;
    }
    if (r < 0) {
        return;
    }
    CHECK(u.tls == tls);
    CHECK(u.unix_socket == unix_socket);
    CHECK((!host && !u.host) || (host && u.host && strcmp(host, u.host) == 0));
    CHECK((!port && !u.port) || (port && u.port && strcmp(port, u.port) == 0));
    CHECK((!sock && !u.socket) || (sock && u.socket && strcmp(sock, u.socket) == 0));
    CHECK(strcmp(exp, u.export_name) == 0);
    nbd_uri_free(&u);
}

static void test_good(void)
{
    expect("nbd://localhost", 0, false, false, "localhost", "10809", NULL, "");
    expect("nbd://localhost/", 0, false, false, "localhost", "10809", NULL, "");
    expect("nbd://127.0.0.1:1234/disk", 0, false, false, "127.0.0.1", "1234", NULL, "disk");
    expect("nbd://[::1]:5000/a%20b", 0, false, false, "::1", "5000", NULL, "a b");
    expect("nbd://[::1]/x", 0, false, false, "::1", "10809", NULL, "x");
    expect("nbds://h/e", 0, true, false, "h", "10809", NULL, "e");
    expect("nbd+unix:///?socket=/tmp/s.sock", 0, false, true, NULL, NULL, "/tmp/s.sock", "");
    expect("nbd+unix:///exp?socket=/tmp/s.sock", 0, false, true, NULL, NULL, "/tmp/s.sock", "exp");
    expect("nbds+unix:///e?tls-certificates=x&socket=/a%2Fb", 0, true, true, NULL, NULL, "/a/b",
           "e");
    expect("nbd://h/dir/name", 0, false, false, "h", "10809", NULL, "dir/name");
}

/* qemu's older nbd: spelling. */
static void test_legacy(void)
{
    expect("nbd:unix:/tmp/s.sock", 0, false, true, NULL, NULL, "/tmp/s.sock", "");
    expect("nbd:unix:/tmp/s.sock:exportname=disk", 0, false, true, NULL, NULL, "/tmp/s.sock",
           "disk");
    expect("nbd:localhost:10810", 0, false, false, "localhost", "10810", NULL, "");
    expect("nbd:127.0.0.1:10810:exportname=a b", 0, false, false, "127.0.0.1", "10810", NULL,
           "a b");
    expect("nbd:[::1]:5000:exportname=x", 0, false, false, "::1", "5000", NULL, "x");
    expect("nbd:h", 0, false, false, "h", "10809", NULL, "");
    expect("nbd:", -EINVAL, false, false, NULL, NULL, NULL, "");
    expect("nbd:unix:", -EINVAL, false, false, NULL, NULL, NULL, "");
    expect("nbd:unix::exportname=x", -EINVAL, false, false, NULL, NULL, NULL, "");
    expect("nbd:h:0", -EINVAL, false, false, NULL, NULL, NULL, "");
    expect("nbd:h:port", -EINVAL, false, false, NULL, NULL, NULL, "");
    expect("nbd:[::1", -EINVAL, false, false, NULL, NULL, NULL, "");
    CHECK(nbd_uri_is("nbd:unix:/x"));
    CHECK(nbd_uri_is("nbd:h:1"));
}

/* The userinfo of a URI is the TLS (PSK) username; tls-username= wins. */
static void expect_user(const char *s, const char *host, const char *user)
{
    struct nbd_uri u;

    if (nbd_uri_parse(s, &u) < 0) {
        fprintf(stderr, "nbd_uri_parse(\"%s\") failed\n", s);
        check_failures++;
        return;
    }
    CHECK((!host && !u.host) || (host && u.host && strcmp(host, u.host) == 0));
    CHECK(u.tls_username && strcmp(u.tls_username, user) == 0);
    nbd_uri_free(&u);
}

static void test_userinfo(void)
{
    expect_user("nbds://alice@127.0.0.1/e?tls-psk-file=k", "127.0.0.1", "alice");
    expect_user("nbds://al%40ice@[::1]:99/e", "::1", "al@ice");
    expect_user("nbds+unix://bob@/?socket=/s&tls-psk-file=k", NULL, "bob");
    expect_user("nbds://alice@h/?tls-username=carol", "h", "carol");
    expect("nbds+unix://bob@host/?socket=/s", -EINVAL, 0, 0, 0, 0, 0, "");
}

static void test_bad(void)
{
    CHECK(nbd_uri_is("nbd://x"));
    CHECK(nbd_uri_is("nbd+unix:///?socket=x"));
    CHECK(!nbd_uri_is("file.img"));
    CHECK(!nbd_uri_is("http://x"));
    expect("http://x/", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://:10809/", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://h:0/", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://h:99999/", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://h:12x/", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://[::1/", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://[::1]x/", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd+unix:///", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd+unix:///?socket=", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd+unix://host/?socket=/s", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://h/%zz", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://h/a%00b", -EINVAL, 0, 0, 0, 0, 0, "");
    expect("nbd://h/%4", -EINVAL, 0, 0, 0, 0, 0, "");
}

/* The name qemu-img 7.2 prints for the connection, whatever the spelling. */
static void expect_qemu_name(const char *s, const char *want)
{
    struct nbd_uri u;

    CHECK(nbd_uri_parse(s, &u) == 0);
    char *name = nbd_uri_qemu_name(&u);
    if (!name || strcmp(name, want) != 0) {
        fprintf(stderr, "qemu name of \"%s\" = \"%s\", want \"%s\"\n", s, name ? name : "(null)",
                want);
        check_failures++;
    }
    free(name);
    nbd_uri_free(&u);
}

static void test_qemu_name(void)
{
    expect_qemu_name("nbd+unix:///?socket=/tmp/s", "nbd+unix://?socket=/tmp/s");
    expect_qemu_name("nbd+unix:///exp?socket=/tmp/s", "nbd+unix:///exp?socket=/tmp/s");
    expect_qemu_name("nbd:unix:/tmp/s", "nbd+unix://?socket=/tmp/s");
    expect_qemu_name("nbd:unix:/tmp/s:exportname=exp", "nbd+unix:///exp?socket=/tmp/s");
    expect_qemu_name("nbd://localhost/", "nbd://localhost:10809");
    expect_qemu_name("nbd://127.0.0.1:1234/disk", "nbd://127.0.0.1:1234/disk");
    expect_qemu_name("nbd:127.0.0.1:1234", "nbd://127.0.0.1:1234");
    expect_qemu_name("nbd://[::1]:1234", "nbd://::1:1234");

    struct nbd_uri u;
    CHECK(nbd_uri_parse("nbds://localhost/x", &u) == 0);
    CHECK(nbd_uri_qemu_name(&u) == NULL); /* qemu 7.2 has no nbds: */
    nbd_uri_free(&u);
}

int main(void)
{
    RUN(test_good);
    RUN(test_legacy);
    RUN(test_bad);
    RUN(test_userinfo);
    RUN(test_qemu_name);
    return check_exit();
}
