/* cmd/progress.h: progress of long work on stderr, as qemu-img -p draws it
 * ("    (42.00/100%)") plus rate and time left, or as JSON lines for CI logs.
 * Updates may come from several threads; they are rate-limited (5 a second
 * on a terminal, 1 a second otherwise). */
#ifndef DISKIMG_CMD_PROGRESS_H
#define DISKIMG_CMD_PROGRESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct cmd_progress {
    bool on, json, tty;
    uint64_t start_ns, last_ns;
    pthread_mutex_t lock;
};

/* Starts the clock; does nothing visible when !on. */
void cmd_progress_start(struct cmd_progress *p, bool on, bool json);
/* done of total bytes; safe to call from any thread. */
void cmd_progress_update(struct cmd_progress *p, uint64_t done, uint64_t total);
/* The final 100% line. */
void cmd_progress_finish(struct cmd_progress *p, uint64_t total);
/* Work failed: end a half-drawn terminal line so an error starts clean. */
void cmd_progress_abort(struct cmd_progress *p);
/* For callbacks that take (opaque, done, total). */
void cmd_progress_cb(void *opaque, uint64_t done, uint64_t total);

#endif
