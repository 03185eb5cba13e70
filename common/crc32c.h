/* common/crc32c.h: CRC-32C (Castagnoli), as VHDX, iSCSI and ext4 use it:
 * reflected polynomial 0x82f63b78, initial value and final xor all ones.
 * crc32c("123456789") == 0xe3069283.  Pure; unit-tested in
 * tests/unit/test-crc32c.c. */
#ifndef DISKIMG_COMMON_CRC32C_H
#define DISKIMG_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC over len more bytes: start with crc32c_update(0, ...)
 * and feed the previous result for the next piece. */
uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len);

static inline uint32_t crc32c(const void *buf, size_t len)
{
    return crc32c_update(0, buf, len);
}

#endif
