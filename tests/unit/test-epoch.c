/* tests/unit/test-epoch.c: common/epoch.c, SOURCE_DATE_EPOCH's one
 * reading: what it accepts, what it refuses and with which message. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/epoch.h"
#include "common/error.h"

CHECK_GLOBALS

static void test_parse(void)
{
    uint64_t v = 7;

    CHECK_EQ(epoch_parse("0", &v), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(epoch_parse("1700000000", &v), 0);
    CHECK_EQ(v, 1700000000);
    CHECK_EQ(epoch_parse("253402300799", &v), 0);
    static const char *const bad[] = {
        "",    "-1",   "+5",  " 5",           "5 ",
        "1e9", "0x10", "12a", "253402300800", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        CHECK_EQ(epoch_parse(bad[i], &v), -EINVAL);
        CHECK_EQ(v, 7);
        CHECK(strstr(err_msg(), "SOURCE_DATE_EPOCH") != NULL);
        CHECK(strchr(err_msg(), '\n') == NULL);
    }
    CHECK_EQ(epoch_parse("1\n2", &v), -EINVAL);
    CHECK(strstr(err_msg(), "1\\x0a2") != NULL); /* escaped, one line */
}

static void test_env(void)
{
    struct repro_epoch e;

    unsetenv("SOURCE_DATE_EPOCH");
    CHECK_EQ(repro_epoch_get(false, &e), 0);
    CHECK(!e.on);
    CHECK_EQ(repro_epoch_get(true, &e), 0);
    CHECK(e.on);
    CHECK_EQ(e.epoch, 0);
    setenv("SOURCE_DATE_EPOCH", "1234", 1);
    CHECK_EQ(repro_epoch_get(false, &e), 0);
    CHECK(e.on);
    CHECK_EQ(e.epoch, 1234);
    setenv("SOURCE_DATE_EPOCH", "0", 1);
    CHECK_EQ(repro_epoch_get(false, &e), 0);
    CHECK(e.on); /* set to 0 is set */
    setenv("SOURCE_DATE_EPOCH", "", 1);
    CHECK_EQ(repro_epoch_get(true, &e), -EINVAL);
    unsetenv("SOURCE_DATE_EPOCH");
}

int main(void)
{
    RUN(test_parse);
    RUN(test_env);
    return check_exit();
}
