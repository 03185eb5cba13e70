/* tests/unit/test-driver-options.c: the key=value options of an image's
 * drivers (block/driver-options.c): the list (parse, lookup, duplicate
 * keys, a full list), the one error convention, the checks before open
 * (unknown key, bad value) and at open (a key the image's drivers do not
 * take), and a driver that plugs its own keys in from here, without
 * anything in block/ knowing of it. */
#include <errno.h>
#include <string.h>

#include "block/block.h"
#include "block/driver.h"
#include "check.h"
#include "common/error.h"

CHECK_GLOBALS

/* "kvtest": a format that takes "level" (0 to 3) and "greeting". */
static unsigned kvtest_level;
static const char *kvtest_greeting;

static const struct blk_opt_desc kvtest_options[] = {
    {.key = "level", .type = BLK_OPT_UINT},
    {.key = "greeting", .type = BLK_OPT_STRING},
    {NULL},
};

static int kvtest_open(struct blk_node *n, const struct blk_open_opts *opts)
{
    unsigned level = 1;
    int r = blk_opt_uint(opts->options, "kvtest", "level", &level);

    (void)n;
    if (r < 0) {
        return r;
    }
    if (level > 3) {
        return blk_opt_error("kvtest", "level", "%u is more than 3", level);
    }
    kvtest_level = level;
    kvtest_greeting = blk_kv_get(opts->options, "greeting");
    return 0;
}

static int64_t kvtest_get_length(struct blk_node *n)
{
    return blk_get_length(n->file);
}

static const struct blk_driver kvtest_driver = {
    .name = "kvtest",
    .is_format = true,
    .options = kvtest_options,
    .open = kvtest_open,
    .get_length = kvtest_get_length,
};
BLK_REGISTER_DRIVER(kvtest_driver)

static bool msg_is(const char *want)
{
    if (strcmp(err_msg(), want) != 0) {
        fprintf(stderr, "  message: '%s'\n  wanted:  '%s'\n", err_msg(), want);
        return false;
    }
    return true;
}

static void test_parse(void)
{
    struct blk_kvlist l = {0};
    char spec[] = "a=1,,b=two=2,c=";

    CHECK_EQ(blk_kv_parse(&l, spec), 0);
    CHECK_EQ(l.n, 3);
    CHECK(strcmp(l.kv[0].key, "a") == 0 && strcmp(l.kv[0].value, "1") == 0);
    CHECK(strcmp(l.kv[1].key, "b") == 0 && strcmp(l.kv[1].value, "two=2") == 0);
    CHECK(strcmp(l.kv[2].key, "c") == 0 && strcmp(l.kv[2].value, "") == 0);

    char bad[] = "a=1,flag";
    struct blk_kvlist m = {0};
    CHECK_EQ(blk_kv_parse(&m, bad), -EINVAL);
    CHECK(msg_is("'flag' is not key=value"));
    err_clear();
}

static void test_lookup(void)
{
    struct blk_kvlist l = {0};

    CHECK(blk_kv_get(NULL, "a") == NULL);
    CHECK(blk_kv_get(&l, "a") == NULL);
    CHECK_EQ(blk_kv_add(&l, "a", "1"), 0);
    CHECK_EQ(blk_kv_add(&l, "b", "2"), 0);
    CHECK(strcmp(blk_kv_get(&l, "a"), "1") == 0);
    CHECK(strcmp(blk_kv_get(&l, "b"), "2") == 0);
    CHECK(blk_kv_get(&l, "A") == NULL); /* keys are case-sensitive, as qemu's */
    CHECK(blk_kv_get(&l, "c") == NULL);
}

static void test_duplicate_key(void)
{
    struct blk_kvlist l = {0};
    char spec[] = "x=1,y=0,x=2";

    /* the last one given wins, and the list keeps the order */
    CHECK_EQ(blk_kv_parse(&l, spec), 0);
    CHECK_EQ(l.n, 3);
    CHECK(strcmp(blk_kv_get(&l, "x"), "2") == 0);
    /* a repeated flag replaces: one x left, after y */
    CHECK_EQ(blk_kv_set(&l, "x", "3"), 0);
    CHECK_EQ(l.n, 2);
    CHECK(strcmp(l.kv[0].key, "y") == 0);
    CHECK(strcmp(blk_kv_get(&l, "x"), "3") == 0);
}

static void test_full_list(void)
{
    struct blk_kvlist l = {0};

    for (int i = 0; i < BLK_KV_MAX; i++) {
        CHECK_EQ(blk_kv_add(&l, "k", "v"), 0);
    }
    CHECK_EQ(blk_kv_add(&l, "last", "v"), -E2BIG);
    CHECK(strstr(err_msg(), "'last'") != NULL);
    CHECK_EQ(l.n, BLK_KV_MAX);
    CHECK_EQ(blk_kv_set(&l, "k", "w"), 0); /* replacing makes room */
    CHECK_EQ(l.n, 1);
    err_clear();
}

static void test_error_convention(void)
{
    CHECK_EQ(blk_opt_error("drv", "key", "why %d", 3), -EINVAL);
    CHECK(msg_is("drv: option 'key': why 3"));
    CHECK_EQ(blk_opt_error(NULL, "key", "why"), -EINVAL);
    CHECK(msg_is("option 'key': why"));
    err_clear();
}

static void test_typed_readers(void)
{
    struct blk_kvlist l = {0};
    uint64_t size = 7;
    unsigned n = 7;

    CHECK_EQ(blk_opt_size(&l, "d", "size", &size), 0);
    CHECK_EQ(size, 7);
    CHECK_EQ(blk_opt_uint(NULL, "d", "n", &n), 0);
    CHECK_EQ(n, 7);
    blk_kv_add(&l, "size", "64k");
    blk_kv_add(&l, "n", "12");
    CHECK_EQ(blk_opt_size(&l, "d", "size", &size), 1);
    CHECK_EQ(size, 65536);
    CHECK_EQ(blk_opt_uint(&l, "d", "n", &n), 1);
    CHECK_EQ(n, 12);
    blk_kv_set(&l, "size", "lots");
    blk_kv_set(&l, "n", "-1");
    CHECK_EQ(blk_opt_size(&l, "d", "size", &size), -EINVAL);
    CHECK(msg_is("d: option 'size': invalid size 'lots'"));
    CHECK_EQ(blk_opt_uint(&l, "d", "n", &n), -EINVAL);
    CHECK(msg_is("d: option 'n': invalid number '-1'"));
    CHECK_EQ(size, 65536);
    CHECK_EQ(n, 12);
    err_clear();
}

/* Before open: the registered drivers' declarations decide. */
static void test_check_unknown_and_bad(void)
{
    struct blk_kvlist l = {0};

    CHECK_EQ(blk_kv_check(&l), 0);
    blk_kv_add(&l, "level", "2");
    blk_kv_add(&l, "greeting", "hello");
    CHECK_EQ(blk_kv_check(&l), 0);

    blk_kv_add(&l, "bogus", "1");
    CHECK_EQ(blk_kv_check(&l), -EINVAL);
    CHECK(msg_is("option 'bogus': no driver takes it"));

    l.n = 0;
    blk_kv_add(&l, "level", "high");
    CHECK_EQ(blk_kv_check(&l), -EINVAL);
    CHECK(msg_is("kvtest: option 'level': invalid number 'high'"));
    err_clear();
}

static int open_kv(const char *format, const char *spec_in, struct blk_image **img)
{
    struct blk_image_opts o = {
        .filename = "size=65536", .protocol = "rec", .format = format, .read_only = true};
    char spec[128];

    snprintf(spec, sizeof spec, "%s", spec_in);
    CHECK_EQ(blk_kv_parse(&o.options, spec), 0);
    *img = NULL;
    return blk_image_open(img, &o);
}

/* At open: each driver takes its own keys; one no driver of the image
 * takes is refused, naming the key and the driver. */
static void test_open_takes_own_keys(void)
{
    struct blk_image *img;

    CHECK_EQ(open_kv("kvtest", "level=3,greeting=hi", &img), 0);
    CHECK_EQ(kvtest_level, 3);
    CHECK(kvtest_greeting && strcmp(kvtest_greeting, "hi") == 0);
    blk_image_close(img);

    /* the driver validates the value itself */
    CHECK_EQ(open_kv("kvtest", "level=4", &img), -EINVAL);
    CHECK(msg_is("kvtest: option 'level': 4 is more than 3"));
    CHECK(img == NULL);

    /* another driver's key */
    CHECK_EQ(open_kv("kvtest", "offset=4096", &img), -EINVAL);
    CHECK(msg_is("size=65536: kvtest: option 'offset': neither kvtest nor rec takes it"));
    CHECK_EQ(open_kv("raw", "level=1", &img), -EINVAL);
    CHECK(msg_is("size=65536: raw: option 'level': neither raw nor rec takes it"));

    /* a key some driver declares optional is a default: ignored here */
    CHECK_EQ(open_kv("kvtest", "tls-creds=/nowhere,l2-cache-size=1M", &img), 0);
    blk_image_close(img);
    err_clear();
}

int main(void)
{
    RUN(test_parse);
    RUN(test_lookup);
    RUN(test_duplicate_key);
    RUN(test_full_list);
    RUN(test_error_convention);
    RUN(test_typed_readers);
    RUN(test_check_unknown_and_bad);
    RUN(test_open_takes_own_keys);
    return check_exit();
}
