/* common/bytes.h: fixed-width integers in on-disk byte order, read from
 * and written to any address.  Image formats keep their structures in
 * byte buffers and convert field by field with these, never by casting
 * a buffer to a packed struct: that is undefined on unaligned addresses
 * and hides the byte order from the reader. */
#ifndef DISKIMG_COMMON_BYTES_H
#define DISKIMG_COMMON_BYTES_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#define DEFINE_BYTES_ACCESSORS(bits, order)                                                        \
    static inline uint##bits##_t get_##order##bits(const void *p)                                  \
    {                                                                                              \
        uint##bits##_t v;                                                                          \
        memcpy(&v, p, sizeof(v));                                                                  \
        return order##bits##toh(v);                                                                \
    }                                                                                              \
    static inline void put_##order##bits(void *p, uint##bits##_t v)                                \
    {                                                                                              \
        v = hto##order##bits(v);                                                                   \
        memcpy(p, &v, sizeof(v));                                                                  \
    }

DEFINE_BYTES_ACCESSORS(16, le)
DEFINE_BYTES_ACCESSORS(32, le)
DEFINE_BYTES_ACCESSORS(64, le)
DEFINE_BYTES_ACCESSORS(16, be)
DEFINE_BYTES_ACCESSORS(32, be)
DEFINE_BYTES_ACCESSORS(64, be)

#undef DEFINE_BYTES_ACCESSORS

#endif
