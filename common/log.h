/* common/log.h: diagnostics for people, never on the data path by default.
 *
 * log_error() always prints; log_info() at default verbosity (one line per
 * event such as a connection); log_debug() only with -v.  Lines look like
 * "diskimg: [conn 3]: error: message".  To stderr, or syslog when
 * daemonised.  Logging functions preserve errno.  A line prints safely
 * whatever a caller quoted into it: controls and invalid UTF-8 bytes in
 * the message become '?' (str_neutralise, common/escape.h). */
#ifndef DISKIMG_COMMON_LOG_H
#define DISKIMG_COMMON_LOG_H

#include <stdbool.h>

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

extern int log_verbosity; /* 0 = errors/warnings/info, 1+ = debug */
extern const char *log_progname;

/* Developer debug flags (--debug=name=1); plain globals, no cost when off. */
extern int debug_block_trace;       /* log every driver call with its flags */
extern int debug_block_emulate_fua; /* files: no native FUA (measure write + flush) */
extern int debug_nbd_requests;      /* log every NBD request */
extern int debug_nbd_poll_us;       /* longest busy-poll for the next request (µs) */

void log_use_syslog(bool on);
/* Set this thread's context, shown in brackets ("conn 3"); NULL clears. */
void log_set_context(const char *ctx);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_verbosity > 0) {                                                                   \
            log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__);                                                 \
        }                                                                                          \
    } while (0)

/* One line of a multi-line report (statistics), without the program
 * prefix: to stderr as it is, or to syslog at info level once
 * daemonised. */
void log_report_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parse "name=value" for -D; returns 0 or -EINVAL for an unknown name. */
int debug_flag_set(const char *spec);

#endif
