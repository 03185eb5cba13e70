/* tests/unit/test-uuid.c: random and derived UUIDs (common/uuid.c) and
 * the seeds of reproducible images (block/identity.c).  The vectors pin
 * the documented derivation (diskimg-formats(7)), computed with Python's
 * hashlib, so a change of it cannot pass unnoticed. */
#include <string.h>

#include "block/block.h"
#include "check.h"
#include "common/uuid.h"

CHECK_GLOBALS

static const char *hex(const uint8_t *p, size_t n)
{
    static char buf[2 * 64 + 1];

    for (size_t i = 0; i < n; i++) {
        snprintf(buf + 2 * i, 3, "%02x", p[i]);
    }
    return buf;
}

static void check_shape(const uint8_t u[16], unsigned version)
{
    CHECK_EQ(u[6] >> 4, version);
    CHECK_EQ(u[8] >> 6, 2); /* RFC 4122 variant */
}

static void test_derive_vectors(void)
{
    uint8_t seed[32], u[16];

    for (int i = 0; i < 32; i++) {
        seed[i] = (uint8_t)i;
    }
    CHECK_EQ(uuid_derive(seed, "vpc footer UUID", u), 0);
    CHECK(strcmp(hex(u, 16), "61bb55d7721e8478888c610ec6c31718") == 0);
    check_shape(u, 8);
    CHECK_EQ(uuid_derive(seed, "vdi image UUID", u), 0);
    CHECK(strcmp(hex(u, 16), "7fdf766232208eada49ef23626d58f0a") == 0);
    char s[37];
    uuid_format(u, s);
    CHECK(strcmp(s, "7fdf7662-3220-8ead-a49e-f23626d58f0a") == 0);
}

/* The same seed and label give the same UUID; any other seed or label,
 * another one, always of version 8. */
static void test_derive_distinct(void)
{
    static const char *const labels[] = {
        "vpc footer UUID",    "vdi image UUID",  "vdi modification UUID", "vhdx FileWriteGuid",
        "vhdx DataWriteGuid", "vhdx Page83Data", "vhdx SequenceNumber",   "vmdk CID"};
    const size_t n = sizeof labels / sizeof labels[0];
    uint8_t seed[32] = {0}, u[8][16], again[16];

    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(uuid_derive(seed, labels[i], u[i]), 0);
        check_shape(u[i], 8);
        CHECK_EQ(uuid_derive(seed, labels[i], again), 0);
        CHECK(memcmp(u[i], again, 16) == 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(memcmp(u[i], u[j], 16) != 0);
        }
    }
    seed[31] = 1;
    CHECK_EQ(uuid_derive(seed, labels[0], again), 0);
    CHECK(memcmp(u[0], again, 16) != 0);
}

static void test_random_and_guid(void)
{
    uint8_t a[16], b[16], g[16];

    CHECK_EQ(uuid_random(a), 0);
    CHECK_EQ(uuid_random(b), 0);
    check_shape(a, 4);
    CHECK(memcmp(a, b, 16) != 0);
    static const uint8_t rfc[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                    0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    static const uint8_t ms[16] = {0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66,
                                   0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    memcpy(g, rfc, 16);
    uuid_to_guid(g);
    CHECK(memcmp(g, ms, 16) == 0);
    uuid_to_guid(g);
    CHECK(memcmp(g, rfc, 16) == 0);
}

/* The seed: a documented function of format, options, backing file and
 * format, size and content; each changes it. */
static void test_seed(void)
{
    struct blk_create_opts o = {.format = "vpc", .options = "subformat=fixed"};
    uint8_t base[32], s[32], content[32] = {0};

    CHECK_EQ(blk_identity_seed(&o, 1u << 20, NULL, base), 0);
    CHECK(strcmp(hex(base, 32),
                 "9958116a8ebc411afbadd2e08aefff28f221236f769f344bea5643081e8ef9aa") == 0);
    CHECK_EQ(blk_identity_seed(&o, 2u << 20, NULL, s), 0);
    CHECK(memcmp(base, s, 32) != 0);
    CHECK_EQ(blk_identity_seed(&o, 1u << 20, content, s), 0);
    CHECK(memcmp(base, s, 32) != 0);
    uint8_t s2[32];
    content[0] = 1;
    CHECK_EQ(blk_identity_seed(&o, 1u << 20, content, s2), 0);
    CHECK(memcmp(s, s2, 32) != 0);
    o.options = NULL;
    CHECK_EQ(blk_identity_seed(&o, 1u << 20, NULL, s), 0);
    CHECK(memcmp(base, s, 32) != 0);
    o.options = "subformat=fixed";
    o.format = "vhdx";
    CHECK_EQ(blk_identity_seed(&o, 1u << 20, NULL, s), 0);
    CHECK(memcmp(base, s, 32) != 0);
    o.format = "vpc";
    o.backing_file = "b";
    CHECK_EQ(blk_identity_seed(&o, 1u << 20, NULL, s), 0);
    CHECK(memcmp(base, s, 32) != 0);
}

/* blk_create_uuid: derived under reproducible output, random without. */
static void test_create_uuid(void)
{
    struct blk_create_opts o = {.format = "vdi", .size = 1u << 20, .reproducible = true};
    uint8_t a[16], b[16];

    CHECK_EQ(blk_create_uuid(&o, "vdi image UUID", a), 0);
    CHECK_EQ(blk_create_uuid(&o, "vdi image UUID", b), 0);
    CHECK(memcmp(a, b, 16) == 0);
    check_shape(a, 8);
    o.reproducible = false;
    CHECK_EQ(blk_create_uuid(&o, "vdi image UUID", b), 0);
    CHECK(memcmp(a, b, 16) != 0);
    check_shape(b, 4);
}

int main(void)
{
    RUN(test_derive_vectors);
    RUN(test_derive_distinct);
    RUN(test_random_and_guid);
    RUN(test_seed);
    RUN(test_create_uuid);
    return check_exit();
}
