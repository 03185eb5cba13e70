/* cmd/progress.c: see progress.h. */
#include "progress.h"

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "common/util.h"

void cmd_progress_start(struct cmd_progress *p, bool on, bool json)
{
    p->on = on;
    p->json = json;
    p->tty = isatty(STDERR_FILENO);
    p->start_ns = clock_ns();
    p->last_ns = 0;
    pthread_mutex_init(&p->lock, NULL);
}

static void progress_print(struct cmd_progress *p, uint64_t done, uint64_t total, bool final)
{
    uint64_t now = clock_ns();
    double secs = (double)(now - p->start_ns) / 1e9;
    double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    double rate = secs > 0 ? (double)done / secs / 1e6 : 0;
    double eta = rate > 0 && done < total ? (double)(total - done) / 1e6 / rate : 0;

    if (p->json) {
        fprintf(stderr,
                "{\"progress\": %.2f, \"bytes\": %" PRIu64 ", \"total\": %" PRIu64
                ", \"elapsed-s\": %.1f, \"rate-bytes-per-s\": %.0f, \"eta-s\": %.0f%s}\n",
                pct, done, total, secs, rate * 1e6, eta, final ? ", \"done\": true" : "");
    } else {
        fprintf(stderr, "    (%.2f/100%%)  %.1f MB/s  ETA %d:%02d%s", pct, rate, (int)eta / 60,
                (int)eta % 60,
                final    ? "\n"
                : p->tty ? "\r"
                         : "\n");
    }
    fflush(stderr);
}

void cmd_progress_update(struct cmd_progress *p, uint64_t done, uint64_t total)
{
    uint64_t now = clock_ns();
    uint64_t every = p->json || !p->tty ? 1000000000ULL : 200000000ULL;

    if (!p->on) {
        return;
    }
    pthread_mutex_lock(&p->lock);
    if (now - p->last_ns >= every && done < total) {
        p->last_ns = now;
        progress_print(p, done, total, false);
    }
    pthread_mutex_unlock(&p->lock);
}

void cmd_progress_cb(void *opaque, uint64_t done, uint64_t total)
{
    cmd_progress_update(opaque, done, total);
}

void cmd_progress_finish(struct cmd_progress *p, uint64_t total)
{
    if (p->on) {
        progress_print(p, total, total, true);
    }
}

void cmd_progress_abort(struct cmd_progress *p)
{
    if (p->on && p->tty && !p->json) {
        fputc('\n', stderr);
    }
}
