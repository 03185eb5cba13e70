/* block/esc-name.h: names as messages quote them, for the generic layer
 * and every driver.
 *
 * A node's filename can come from an image (a backing file name, a data
 * file name, an extent name), so messages quote it escaped
 * (common/escape.h): bytes that are not printable show as \xHH, not as
 * the '?' that common/error.c's last line of defence would leave.  Not
 * for JSON output, which escapes through common/json.c. */
#ifndef DISKIMG_BLOCK_ESC_NAME_H
#define DISKIMG_BLOCK_ESC_NAME_H

#include "common/escape.h"

/* Room for a quoted name.  A message holds less than 1024 bytes
 * (common/error.c), so a longer name would be cut from it anyway; cut
 * here, it leaves room for the cause that follows it. */
#define BLK_NAME_MAX 1024

/* s escaped into buf (BLK_NAME_MAX bytes).  Returns buf. */
static inline const char *blk_esc_str(const char *s, char *buf)
{
    str_escape_buf(buf, BLK_NAME_MAX, s);
    return buf;
}

/* The buffer lives as long as the block around the message it is for,
 * so a message can quote several names without an allocation. */
#define ESC_STR(s) blk_esc_str((s), (char[BLK_NAME_MAX]){""})

/* A node's filename, escaped. */
#define ESC_NAME(n) ESC_STR((n)->filename)

#endif
