/* tests/unit/test-host-memory.c: common/host-memory.c, reading a
 * virtio-balloon device's feature bits. */
#include "check.h"
#include "common/host-memory.h"

CHECK_GLOBALS

static void test_features(void)
{
    /* Read off a KVM guest with free page reporting: bits 1, 2, 5, 32. */
    CHECK(virtio_balloon_reports_free_pages(
        "0110010100000000000000000000000010000000000000000000000000000000\n"));
    /* The same device without VIRTIO_BALLOON_F_REPORTING. */
    CHECK(!virtio_balloon_reports_free_pages(
        "0110000100000000000000000000000010000000000000000000000000000000\n"));
    CHECK(virtio_balloon_reports_free_pages("000001"));
    CHECK(!virtio_balloon_reports_free_pages("00000")); /* too short */
    CHECK(!virtio_balloon_reports_free_pages(""));
    CHECK(!virtio_balloon_reports_free_pages("0x0021")); /* not the sysfs format */
    CHECK(!virtio_balloon_reports_free_pages("00 001"));
}

static void test_probe_is_stable(void)
{
    /* Whatever this machine is, the answer is read once and kept. */
    bool first = host_reclaims_free_pages();
    CHECK_EQ(host_reclaims_free_pages(), first);
}

int main(void)
{
    RUN(test_features);
    RUN(test_probe_is_stable);
    return check_exit();
}
