/* common/uuid.h: the IDs image formats store (VHD's UUID, VDI's UUIDs,
 * VHDX's GUIDs, VMDK's CID), random or derived.  Derived IDs make
 * reproducible output: the same seed and label always give the same
 * UUID, different labels different ones.  Unit-tested in
 * tests/unit/test-uuid.c. */
#ifndef DISKIMG_COMMON_UUID_H
#define DISKIMG_COMMON_UUID_H

#include <stdint.h>

#define UUID_LEN 16
#define UUID_SEED_LEN 32

/* A random UUID (RFC 4122 version 4), in RFC (big-endian) byte order.
 * Returns 0 or -errno with a message. */
int uuid_random(uint8_t u[UUID_LEN]);

/* A name-based UUID in RFC byte order: the first 16 bytes of
 * SHA-256("diskimg uuid v1", 0, seed, label), with version 8 and the
 * RFC 4122 variant set (RFC 9562 5.8 and its SHA-256 name-based
 * example).  Returns 0 or -errno with a message (no SHA-256 in this
 * build). */
int uuid_derive(const uint8_t seed[UUID_SEED_LEN], const char *label, uint8_t u[UUID_LEN]);

/* RFC byte order to the Microsoft GUID order VHDX and VDI store (the
 * first three fields little-endian), in place; its own inverse. */
void uuid_to_guid(uint8_t u[UUID_LEN]);

/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of RFC-order bytes into out. */
void uuid_format(const uint8_t u[UUID_LEN], char out[37]);

#endif
