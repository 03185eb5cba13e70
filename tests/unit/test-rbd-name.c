/* tests/unit/test-rbd-name.c: "rbd:" names split as qemu-img 7.2 splits
 * them (each expectation was checked with qemu-img info against a real
 * cluster), --image-opts keys, and the display name. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/error.h"
#include "protocols/rbd/name.h"

CHECK_GLOBALS

static bool same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void expect(const char *s, const char *pool, const char *ns, const char *image,
                   const char *snap)
{
    struct rbd_name n;
    int r = rbd_name_parse(s, &n);

    if (r != 0) {
        fprintf(stderr, "rbd_name_parse(\"%s\") = %d (%s)\n", s, r, err_msg());
        check_failures++;
    } else if (!same(n.pool, pool) || !same(n.ns, ns) || !same(n.image, image) ||
               !same(n.snap, snap)) {
        fprintf(stderr, "rbd_name_parse(\"%s\"): pool '%s' ns '%s' image '%s' snap '%s'\n", s,
                n.pool, n.ns, n.image, n.snap ? n.snap : "(none)");
        check_failures++;
    }
    rbd_name_free(&n);
    err_clear();
}

static void expect_bad(const char *s)
{
    struct rbd_name n;
    int r = rbd_name_parse(s, &n);

    if (r != -EINVAL) {
        fprintf(stderr, "rbd_name_parse(\"%s\") = %d, want -EINVAL\n", s, r);
        check_failures++;
    }
    CHECK(err_msg()[0] != '\0');
    rbd_name_free(&n);
    err_clear();
}

static void test_names(void)
{
    expect("rbd:rbd/t1", "rbd", "", "t1", NULL);
    expect("rbd:rbd/t1@s1", "rbd", "", "t1", "s1");
    expect("rbd:rbd/t1@", "rbd", "", "t1", NULL); /* qemu: the image itself */
    expect("rbd:rbd/nons/t1", "rbd", "nons", "t1", NULL);
    expect("rbd:rbd/a/b/c", "rbd", "a", "b/c", NULL);
    expect("rbd:rbd/t\\@1", "rbd", "", "t@1", NULL);
    expect("rbd:rbd/x\\/y", "rbd", "", "x/y", NULL);
    expect("rbd:rb\\d/t1", "rbd", "", "t1", NULL);
    expect("rbd:rbd/t1@s1@x", "rbd", "", "t1", "s1@x");
    expect("rbd:rbd/t1\\", "rbd", "", "t1\\", NULL);
    expect("rbd:p\\/q/i\\:j@s\\:t", "p/q", "", "i:j", "s:t");
    /* qemu looks for '@' anywhere, options included */
    expect("rbd:rbd/t1:conf=/a@b", "rbd", "t1:conf=", "a", "b");
}

static void test_options(void)
{
    struct rbd_name n;

    CHECK(rbd_name_parse("rbd:rbd/t1@s:conf=/etc/c\\:x.conf:id=admin:keyring=/k:"
                         "auth_supported=cephx\\;none:mon_host=127.0.0.1\\:6789",
                         &n) == 0);
    CHECK(same(n.snap, "s"));
    CHECK(same(n.conf, "/etc/c:x.conf"));
    CHECK(same(n.user, "admin"));
    CHECK_EQ(n.n_keys, 3);
    CHECK(same(n.keys[0], "keyring") && same(n.values[0], "/k"));
    CHECK(same(n.keys[1], "auth_client_required") && same(n.values[1], "cephx;none"));
    CHECK(same(n.keys[2], "mon_host") && same(n.values[2], "127.0.0.1:6789"));
    rbd_name_free(&n);
}

static void test_bad(void)
{
    expect_bad("rbd:rbd");
    expect_bad("rbd:");
    expect_bad("rbd:/t1");
    expect_bad("rbd:rbd/t1:id");
    expect_bad("rbd:rbd/t1:");
    expect_bad("rbd:rbd/t1:=x");
    expect_bad("rbd:rbd/@s");
    expect_bad("rbd:rbd/");
    expect_bad("nbd:rbd/t1");
    char many[4096] = "rbd:p/i";
    for (int i = 0; i < 40; i++) {
        strcat(many, ":a=b");
    }
    expect_bad(many);
}

static void test_display(void)
{
    struct rbd_name n, back;

    CHECK(rbd_name_parse("rbd:p\\/q/ns/i\\:j\\@k@s\\:t:id=x:key=SECRET", &n) == 0);
    char *d = rbd_name_display(&n);
    CHECK(d && strcmp(d, "rbd:p\\/q/ns/i\\:j\\@k@s\\:t") == 0);
    CHECK(d && !strstr(d, "SECRET"));
    CHECK(d && rbd_name_parse(d, &back) == 0);
    CHECK(same(back.pool, "p/q") && same(back.ns, "ns") && same(back.image, "i:j@k") &&
          same(back.snap, "s:t"));
    free(d);
    rbd_name_free(&back);
    rbd_name_free(&n);
}

static void test_image_opts(void)
{
    struct blk_kvlist l = {0};
    struct rbd_name n;

    blk_kv_add(&l, "pool", "rbd");
    blk_kv_add(&l, "image", "img");
    CHECK(rbd_name_from_options(&l, &n) == 0);
    CHECK(same(n.pool, "rbd") && same(n.ns, "") && same(n.image, "img") && !n.snap);
    rbd_name_free(&n);
    blk_kv_add(&l, "namespace", "ns");
    blk_kv_add(&l, "snapshot", "s");
    blk_kv_add(&l, "user", "u");
    blk_kv_add(&l, "conf", "/c");
    CHECK(rbd_name_from_options(&l, &n) == 0);
    CHECK(same(n.ns, "ns") && same(n.snap, "s") && same(n.user, "u") && same(n.conf, "/c"));
    char *d = rbd_name_display(&n);
    CHECK(d && strcmp(d, "rbd:rbd/ns/img@s") == 0);
    free(d);
    rbd_name_free(&n);

    struct blk_kvlist no_image = {0};
    blk_kv_add(&no_image, "pool", "rbd");
    CHECK(rbd_name_from_options(&no_image, &n) == -EINVAL);
    rbd_name_free(&n);
    err_clear();
}

int main(void)
{
    RUN(test_names);
    RUN(test_options);
    RUN(test_bad);
    RUN(test_display);
    RUN(test_image_opts);
    return check_exit();
}
