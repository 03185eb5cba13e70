/* tests/unit/test-named-file.c: how a name recorded in an image becomes a
 * path (formats/named-file.c), and which names are refused. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/error.h"
#include "formats/named-file.h"

CHECK_GLOBALS

/* The path for name, or NULL when it is refused (then *r is the error). */
static char *path_of(const char *image, const char *name, unsigned flags, int *r)
{
    char *out = NULL;

    *r = fmt_named_path("vmdk", "extent", image, name, flags, &out);
    return out;
}

static void expect_path(const char *image, const char *name, unsigned flags, const char *want)
{
    int r;
    char *got = path_of(image, name, flags, &r);

    CHECK(r == 0 && got && strcmp(got, want) == 0);
    free(got);
}

static void expect_refused(const char *name, unsigned flags, int err, const char *msg_part)
{
    int r;
    char *got = path_of("dir/a.vmdk", name, flags, &r);

    CHECK(r == -err && got == NULL);
    CHECK(strstr(err_msg(), msg_part) != NULL);
}

static void test_relative_to_the_image(void)
{
    expect_path("dir/sub/a.img", "b.img", 0, "dir/sub/b.img");
    expect_path("a.img", "b.img", 0, "b.img");
    expect_path("/x/a.img", "../b.img", 0, "/x/../b.img");
    expect_path("dir/a.img", "/abs/b.img", 0, "/abs/b.img");
    expect_path("dir/a.vmdk", "a-flat.vmdk", FMT_NAME_SAME_DIR, "dir/a-flat.vmdk");
}

static void test_refused_names(void)
{
    expect_refused("nbd://host/x", 0, ENOTSUP, "names a protocol");
    expect_refused("json:{}", 0, ENOTSUP, "vmdk: extent 'json:{}'");
    expect_refused("../a-flat.vmdk", FMT_NAME_SAME_DIR, EPERM, "image's own directory");
    expect_refused("/etc/passwd", FMT_NAME_SAME_DIR, EPERM, "image's own directory");
    expect_refused("..", FMT_NAME_SAME_DIR, EPERM, "image's own directory");
    expect_refused("", FMT_NAME_SAME_DIR, EPERM, "image's own directory");
    /* the name is escaped in the message */
    expect_refused("a\nb/c", FMT_NAME_SAME_DIR, EPERM, "a\\x0ab/c");
}

/* A qcow2 backing file may be a plain rbd name: no options that say
 * where to connect or which files to read. */
static void test_rbd_names(void)
{
    const char *plain[] = {"rbd:pool/base", "rbd:pool/ns/base", "rbd:pool/base@gold",
                           "rbd:p/n/i@s"};
    const char *refused[] = {"rbd:pool/base:conf=/etc/x.conf",
                             "rbd:pool/base:mon_host=10.0.0.1",
                             "rbd:pool/b\\:x",
                             "rbd:base",
                             "rbd:/base",
                             "rbd:pool//base",
                             "rbd:pool/base/",
                             "rbd:pool/@s",
                             "rbd:pool/base@",
                             "rbd:pool/base@a@b",
                             "rbd:pool@s/base",
                             "rbd:pool/ba\nse"};
    int r;

    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
        char *out = NULL;
        r = fmt_named_path("qcow2", "backing file", "dir/o.qcow2", plain[i], FMT_NAME_MAY_RBD,
                           &out);
        CHECK(r == 0 && out && strcmp(out, plain[i]) == 0);
        free(out);
        /* without the flag (vpc, vmdk) a protocol as before */
        out = path_of("dir/o.vmdk", plain[i], 0, &r);
        CHECK(r == -ENOTSUP && !out);
    }
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char *out = NULL;
        r = fmt_named_path("qcow2", "backing file", "dir/o.qcow2", refused[i], FMT_NAME_MAY_RBD,
                           &out);
        CHECK(r == -EPERM && !out && strstr(err_msg(), "not a plain rbd:POOL/IMAGE"));
    }
    CHECK(fmt_names_rbd("rbd:x") && !fmt_names_rbd("./rbd:x") && !fmt_names_rbd("nbd://h/x"));
}

/* The configuration an image-named rbd: backing file reads: never
 * Ceph's last resort, ./ceph.conf. */
static void test_rbd_conf(void)
{
    char *out = NULL;
    const char *home = getenv("HOME");
    char *saved_home = home ? strdup(home) : NULL;

    setenv("CEPH_CONF", "/etc/a:b@c=d.conf", 1);
    CHECK(fmt_rbd_backing_conf("rbd:p/i@s", &out) == 0);
    CHECK(out && strcmp(out, "rbd:p/i@s:conf=\\/etc\\/a\\:b\\@c\\=d.conf") == 0);
    free(out);
    unsetenv("CEPH_CONF");
    setenv("HOME", "/nonexistent-home", 1);
    if (access("/etc/ceph/ceph.conf", F_OK) != 0) {
        CHECK(fmt_rbd_backing_conf("rbd:p/i", &out) == -ENOENT && out == NULL);
        CHECK(strstr(err_msg(), "never reads ./ceph.conf") != NULL);
    }
    if (saved_home) {
        setenv("HOME", saved_home, 1);
    }
    free(saved_home);
}

static void test_untrusted_message(void)
{
    CHECK(fmt_refuse_named("vpc", "parent", "p.vhd") == -EPERM);
    CHECK(strcmp(err_msg(), "vpc: refusing to open parent 'p.vhd' (--untrusted opens the image "
                            "alone)") == 0);
}

int main(void)
{
    RUN(test_relative_to_the_image);
    RUN(test_refused_names);
    RUN(test_rbd_names);
    RUN(test_rbd_conf);
    RUN(test_untrusted_message);
    return check_exit();
}
