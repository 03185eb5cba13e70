/* tests/unit/test-crc32c.c: common/crc32c.c against the published check
 * value and the iSCSI vectors of RFC 3720 B.4, and the sliced loop against
 * a bit-at-a-time reference at every length and alignment up to 64. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "common/crc32c.h"

CHECK_GLOBALS

static uint32_t crc_bitwise(const uint8_t *p, size_t len)
{
    uint32_t c = 0xffffffffu;
    while (len--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        }
    }
    return ~c;
}

static void test_vectors(void)
{
    uint8_t b[32];

    CHECK_EQ(crc32c("123456789", 9), 0xe3069283u);
    CHECK_EQ(crc32c("", 0), 0);
    memset(b, 0, sizeof b);
    CHECK_EQ(crc32c(b, sizeof b), 0x8a9136aau);
    memset(b, 0xff, sizeof b);
    CHECK_EQ(crc32c(b, sizeof b), 0x62a8ab43u);
    for (int i = 0; i < 32; i++) {
        b[i] = (uint8_t)i;
    }
    CHECK_EQ(crc32c(b, sizeof b), 0x46dd794eu);
    for (int i = 0; i < 32; i++) {
        b[i] = (uint8_t)(31 - i);
    }
    CHECK_EQ(crc32c(b, sizeof b), 0x113fdb5cu);
}

static void test_slicing_matches_reference(void)
{
    uint8_t b[80];

    for (size_t i = 0; i < sizeof b; i++) {
        b[i] = (uint8_t)(i * 37 + 11);
    }
    for (size_t off = 0; off < 8; off++) {
        for (size_t len = 0; len + off <= 72; len++) {
            CHECK_EQ(crc32c(b + off, len), crc_bitwise(b + off, len));
        }
    }
    /* In pieces, as a caller feeding a log entry sector by sector. */
    uint32_t c = crc32c_update(0, b, 13);
    c = crc32c_update(c, b + 13, 50);
    CHECK_EQ(c, crc32c(b, 63));
}

int main(void)
{
    RUN(test_vectors);
    RUN(test_slicing_matches_reference);
    return check_exit();
}
