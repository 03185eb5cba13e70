/* common/log.c: stderr/syslog logging (see log.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "escape.h"
#include "log.h"

int log_verbosity;
const char *log_progname = "diskimg";
int debug_block_trace;
int debug_block_emulate_fua;
int debug_nbd_requests;
int debug_nbd_poll_us = 50;

static bool use_syslog;
static __thread char log_ctx[64];

void log_use_syslog(bool on)
{
    if (on && !use_syslog) {
        openlog(log_progname, LOG_PID, LOG_DAEMON);
    }
    use_syslog = on;
}

void log_set_context(const char *ctx)
{
    snprintf(log_ctx, sizeof log_ctx, "%s", ctx ? ctx : "");
}

/* Format one line and write it to syslog or stderr, HEAD first (and the
 * program name on stderr when NAMED).  One call per line, so lines from
 * threads never interleave. */
static void log_vline(int prio, bool named, const char *head, const char *fmt, va_list ap)
{
    int saved = errno;
    char msg[1024];

    vsnprintf(msg, sizeof msg, fmt, ap);
    /* Peer and image strings are escaped where they are quoted; this
     * catches any that were not, so no log line can be forged or carry
     * terminal escapes: controls (C0, DEL, C1) and invalid UTF-8 bytes,
     * including a sequence the 1024-byte cut left unfinished, become
     * '?' (as for error messages, common/error.c). */
    str_neutralise(msg);
    if (use_syslog) {
        syslog(prio, "%s%s", head, msg);
    } else {
        fprintf(stderr, "%s%s%s%s\n", named ? log_progname : "", named ? ": " : "", head, msg);
    }
    errno = saved;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    static const char *const prefix[] = {"error: ", "warning: ", "", "debug: "};
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    char head[sizeof log_ctx + 16];
    va_list ap;

    snprintf(head, sizeof head, "%s%s%s", log_ctx, log_ctx[0] ? ": " : "", prefix[level]);
    va_start(ap, fmt);
    log_vline(prio[level], true, head, fmt, ap);
    va_end(ap);
}

void log_report_line(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vline(LOG_INFO, false, "", fmt, ap);
    va_end(ap);
}

int debug_flag_set(const char *spec)
{
    static const struct {
        const char *name;
        int *flag;
    } flags[] = {
        {"block.trace", &debug_block_trace},
        {"block.emulate-fua", &debug_block_emulate_fua},
        {"nbd.requests", &debug_nbd_requests},
        {"nbd.poll-us", &debug_nbd_poll_us},
    };
    const char *eq = strchr(spec, '=');
    size_t len = eq ? (size_t)(eq - spec) : strlen(spec);

    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (strlen(flags[i].name) == len && strncmp(spec, flags[i].name, len) == 0) {
            *flags[i].flag = eq ? atoi(eq + 1) : 1;
            return 0;
        }
    }
    return -EINVAL;
}
