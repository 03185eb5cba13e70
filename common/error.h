/* common/error.h: one convention for errors on every path.
 *
 * Functions return 0 (or a count) on success and -errno on failure.  The layer
 * that knows *why* something failed records a one-line message naming the
 * object and the cause; cmd/ prints it once, the NBD server logs it.  The
 * message is thread-local: an NBD request runs on one thread from start to
 * reply, so the message belongs to that request.  Middle layers pass the
 * return value through and leave the message alone.
 *
 * A stored message prints safely as it is: one line, no C0 or C1 control,
 * DEL or invalid UTF-8 byte (each becomes '?', see str_neutralise in
 * escape.h), whatever a caller quoted into it.  Quote names from images
 * and peers with str_escape all the same, so the user sees their bytes. */
#ifndef DISKIMG_COMMON_ERROR_H
#define DISKIMG_COMMON_ERROR_H

/* Stores "message: strerror(errnum)" and returns -errnum. */
int err_set(int errnum, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Stores "message" (validation errors that strerror would not explain) and
 * returns -errnum. */
int err_setx(int errnum, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "context: " to the current message (keeps the errno unchanged). */
void err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* This thread's last message, "" if none. */
const char *err_msg(void);
/* The message, or strerror(-r) when no layer recorded one. */
const char *err_msg_or(int r);
void err_clear(void);

#endif
