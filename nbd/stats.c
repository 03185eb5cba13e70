/* nbd/stats.c: per-command counters and latency, and the reports printed
 * at exit, on SIGUSR1 and written as JSON with --stats=FILE.  Together with
 * the block layer's per-node counters they show which durability path a
 * request took (native FUA, emulated FUA, flushes reaching the file). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/block.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "common/replace-file.h"
#include "common/util.h"
#include "internal.h"
#include "names.h"

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void nbd_stats_record(struct nbd_stats *st, uint16_t cmd, bool error, uint64_t bytes,
                      uint64_t latency_ns)
{
    struct nbd_cmd_stats *cs = &st->cmd[cmd < NBD_CMD_COUNT ? cmd : NBD_CMD_COUNT];

    atomic_fetch_add_explicit(&cs->count, 1, memory_order_relaxed);
    if (error) {
        atomic_fetch_add_explicit(&cs->errors, 1, memory_order_relaxed);
    }
    if (bytes) {
        atomic_fetch_add_explicit(&cs->bytes, bytes, memory_order_relaxed);
    }
    hist_record(&cs->latency_ns, latency_ns);
}

static const char *stats_cmd_name(unsigned i)
{
    return i < NBD_CMD_COUNT ? nbd_cmd_name((uint16_t)i) : "unknown";
}

static void stats_json(struct nbd_server *srv, FILE *f)
{
    struct nbd_stats *st = &srv->stats;
    struct json_writer w;

    json_init(&w, f, false);
    json_begin_object(&w, NULL);
    json_double(&w, "uptime-s", (double)(clock_ns() - st->start_ns) / 1e9);
    json_uint(&w, "connections", LOAD(st->connections));
    json_uint(&w, "handshake-failures", LOAD(st->handshake_failures));
    json_uint(&w, "fua-requests", LOAD(st->fua_requests));
    json_begin_object(&w, "commands");
    for (unsigned i = 0; i <= NBD_CMD_COUNT; i++) {
        struct nbd_cmd_stats *cs = &st->cmd[i];
        if (LOAD(cs->count) == 0) {
            continue;
        }
        json_begin_object(&w, stats_cmd_name(i));
        json_uint(&w, "count", LOAD(cs->count));
        json_uint(&w, "errors", LOAD(cs->errors));
        json_uint(&w, "bytes", LOAD(cs->bytes));
        json_begin_object(&w, "latency-us");
        json_double(&w, "mean", (double)hist_mean(&cs->latency_ns) / 1e3);
        json_double(&w, "p50", (double)hist_quantile(&cs->latency_ns, 0.50) / 1e3);
        json_double(&w, "p90", (double)hist_quantile(&cs->latency_ns, 0.90) / 1e3);
        json_double(&w, "p99", (double)hist_quantile(&cs->latency_ns, 0.99) / 1e3);
        json_double(&w, "p99.9", (double)hist_quantile(&cs->latency_ns, 0.999) / 1e3);
        json_double(&w, "max", (double)LOAD(cs->latency_ns.max) / 1e3);
        json_end_object(&w);
        json_end_object(&w);
    }
    json_end_object(&w);
    json_begin_array(&w, "exports");
    for (struct nbd_export *e = srv->exports; e; e = e->next) {
        struct blk_image_totals t;

        blk_image_totals(e->img, &t);
        json_begin_object(&w, NULL);
        json_str(&w, "name", e->name);
        json_str(&w, "format", blk_image_format(e->img));
        json_str(&w, "cache", blk_cache_mode_name(blk_image_cache_mode(e->img)));
        json_uint(&w, "fua-native", t.fua_native);
        json_uint(&w, "fua-emulated", t.fua_emulated);
        json_uint(&w, "file-flushes", t.file_flushes);
        json_uint(&w, "flushes-shared", t.flushes_shared);
        json_uint(&w, "flushes-skipped", t.flushes_skipped);
        blk_image_stats_json(e->img, &w);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
}

/* Write the JSON to a fresh temporary file and rename it over path
 * (common/replace-file.h): a reader never sees half a document, and a
 * link planted at path is replaced, not followed. */
static void stats_write_file(struct nbd_server *srv, const char *path)
{
    struct replace_file rf;

    if (replace_file_open(&rf, path) < 0) {
        log_error("--stats: %s", err_msg());
        return;
    }
    stats_json(srv, rf.f);
    if (replace_file_commit(&rf) < 0) {
        log_error("--stats: %s", err_msg());
    }
}

void nbd_server_report_stats(struct nbd_server *srv)
{
    struct nbd_stats *st = &srv->stats;

    log_report_line("%s: statistics after %.1f s, %" PRIu64 " connection(s)", log_progname,
                    (double)(clock_ns() - st->start_ns) / 1e9, LOAD(st->connections));
    for (unsigned i = 0; i <= NBD_CMD_COUNT; i++) {
        struct nbd_cmd_stats *cs = &st->cmd[i];
        if (LOAD(cs->count) == 0) {
            continue;
        }
        log_report_line("  %-21s %10" PRIu64 " requests %6" PRIu64 " errors %14" PRIu64
                        " bytes  latency us p50 %.0f p99 %.0f max %.0f",
                        stats_cmd_name(i), LOAD(cs->count), LOAD(cs->errors), LOAD(cs->bytes),
                        (double)hist_quantile(&cs->latency_ns, 0.5) / 1e3,
                        (double)hist_quantile(&cs->latency_ns, 0.99) / 1e3,
                        (double)LOAD(cs->latency_ns.max) / 1e3);
    }
    for (struct nbd_export *e = srv->exports; e; e = e->next) {
        struct blk_image_totals t;

        blk_image_totals(e->img, &t);
        log_report_line("  export '%s' (%s, cache=%s): FUA requests %" PRIu64 ", native %" PRIu64
                        ", emulated %" PRIu64 "; flushes to the file %" PRIu64 " (shared %" PRIu64
                        ", skipped %" PRIu64 ")",
                        e->name, blk_image_format(e->img),
                        blk_cache_mode_name(blk_image_cache_mode(e->img)), LOAD(st->fua_requests),
                        t.fua_native, t.fua_emulated, t.file_flushes, t.flushes_shared,
                        t.flushes_skipped);
    }
    if (srv->cfg.stats_file) {
        stats_write_file(srv, srv->cfg.stats_file);
    }
}
