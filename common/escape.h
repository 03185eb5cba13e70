/* common/escape.h: printable forms of strings that come from images and
 * peers (backing file names, snapshot, bitmap and export names, a
 * server's error text).  Such a string may hold terminal control
 * sequences or broken UTF-8; printed as it is, it could rewrite a user's
 * terminal or forge log lines.  Unit-tested in tests/unit/test-util.c.
 *
 * Escaped: bytes below 0x20, DEL, the C1 controls U+0080-U+009F, and
 * every byte of an invalid UTF-8 sequence, as \xHH; the backslash itself
 * as \\.  Valid UTF-8 text passes unchanged, so ordinary names print as
 * they are.  JSON output escapes through common/json.c instead.  Every
 * error and log message is also passed through str_neutralise, so a name
 * quoted into one unescaped still cannot reach a terminal raw. */
#ifndef DISKIMG_COMMON_ESCAPE_H
#define DISKIMG_COMMON_ESCAPE_H

#include <stddef.h>

/* The escaped form of s in out (cap bytes, always NUL-terminated when cap
 * > 0; an escape sequence is never cut in half).  Returns the length the
 * whole escaped string needs, excluding the NUL, like snprintf. */
size_t str_escape_buf(char *out, size_t cap, const char *s);

/* The escaped form of s, malloc'd; NULL only when out of memory.  s may
 * be NULL (gives "(null)"). */
char *str_escape(const char *s);

/* Replaces in place, with '?', each byte str_escape would escape except
 * the backslash: what is left prints as it is, text that was already
 * escaped is unchanged, and the length stays the same (so a fixed buffer
 * and a cut made before still fit).  The last line of defence for error
 * and log messages (common/error.c, common/log.c); quote with str_escape
 * where the exact bytes matter. */
void str_neutralise(char *s);

/* True if s prints as it is (str_escape would not change it). */
int str_is_printable(const char *s);

#endif
