/* cmd/serve.c: "diskimg serve", export images over NBD: open the
 * exports, listen (or take systemd's sockets), fork if asked, serve until a
 * signal, flush, report.  The command line is in serve-opts.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "block/bitmap.h"
#include "cmd.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/log.h"
#include "common/replace-file.h"
#include "nbd/protocol.h"
#include "serve.h"

static struct nbd_server *signal_server;

static void serve_on_signal(int sig)
{
    if (!signal_server) {
        return;
    }
    if (sig == SIGUSR1) {
        nbd_server_signal_stats(signal_server);
    } else {
        nbd_server_signal_shutdown(signal_server);
    }
}

static void serve_install_signals(struct nbd_server *srv)
{
    struct sigaction sa = {.sa_handler = serve_on_signal};

    signal_server = srv;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* --fork: the parent waits until the child reports that it listens (or
 * failed), so "diskimg serve --fork" returns only once clients can
 * connect.  Returns in the child with the pipe's write end, or exits. */
static int serve_fork(void)
{
    int p[2];
    pid_t pid;
    char status = 0;

    if (pipe2(p, O_CLOEXEC) < 0) {
        perror("diskimg serve: pipe");
        exit(EXIT_ERROR);
    }
    pid = fork();
    if (pid < 0) {
        perror("diskimg serve: fork");
        exit(EXIT_ERROR);
    }
    if (pid > 0) {
        close(p[1]);
        ssize_t n = read(p[0], &status, 1);
        /* 'o', or the child's exit status when it failed (EXIT_IN_USE) */
        exit(n != 1 ? EXIT_ERROR : status == 'o' ? EXIT_OK : status);
    }
    close(p[0]);
    setsid();
    return p[1];
}

static void serve_daemon_ready(int ready_fd)
{
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);

    if (write(ready_fd, "o", 1) != 1) {
        /* the parent is gone; nothing to tell */
    }
    close(ready_fd);
    /* A daemon has no terminal: log to syslog from now on. */
    log_use_syslog(true);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        dup2(devnull, STDERR_FILENO);
        close(devnull);
    }
}

/* Through a fresh temporary file renamed over path, so that a link
 * planted at path (a pid file often lives in a shared directory) is
 * replaced, never followed (common/replace-file.h). */
static int serve_write_pid_file(const char *path)
{
    struct replace_file rf;
    int r = replace_file_open(&rf, path);

    if (r < 0) {
        err_prefix("--pid-file");
        return r;
    }
    fprintf(rf.f, "%ld\n", (long)getpid());
    r = replace_file_commit(&rf);
    if (r < 0) {
        err_prefix("--pid-file");
    }
    return r;
}

/* The connection cap must fit the open file limit (one descriptor per
 * connection, and some for images, listeners and logs): raise the soft
 * limit as far as the hard one allows, and lower the cap if that is not
 * enough, saying so.  A cap above -e makes no difference; one below is
 * what holds. */
#define SERVE_FD_RESERVE 64

static void serve_fit_caps(struct nbd_server_config *cfg)
{
    struct rlimit rl;
    unsigned cap = cfg->connection_cap ? cfg->connection_cap : NBD_DEFAULT_CONNECTION_CAP;
    rlim_t want = (rlim_t)cap + SERVE_FD_RESERVE;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
            unsigned fit =
                rl.rlim_cur > SERVE_FD_RESERVE ? (unsigned)rl.rlim_cur - SERVE_FD_RESERVE : 1;
            log_warn("the open file limit (%llu) allows %u connections, not the %u of "
                     "--connection-cap",
                     (unsigned long long)rl.rlim_cur, fit, cap);
            cap = fit;
        }
    }
    cfg->connection_cap = cap;
    if (cfg->max_connections > cap) {
        log_warn("-e/--shared=%u is above the connection cap: at most %u clients at once "
                 "(see --connection-cap)",
                 cfg->max_connections, cap);
    }
}

/* systemd socket activation: LISTEN_PID is us, LISTEN_FDS sockets from
 * fd 3 on.  Returns how many were taken (0: not activated). */
static int serve_take_activated(struct nbd_server *srv)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    int n, r;

    if (!pid || !fds || atol(pid) != (long)getpid()) {
        return 0;
    }
    n = atoi(fds);
    for (int i = 0; i < n; i++) {
        r = nbd_server_add_listen_fd(srv, 3 + i);
        if (r < 0) {
            return r;
        }
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return n;
}

static int serve_listen(struct nbd_server *srv, const struct serve_opts *o)
{
    int n = serve_take_activated(srv);

    if (n != 0) {
        if (n > 0 && (o->socket_path || o->bind_addr || o->port)) {
            return err_setx(EINVAL, "socket activation cannot be combined with -k, -b or -p");
        }
        return n < 0 ? n : 0;
    }
    if (o->socket_path) {
        return nbd_server_listen_unix(srv, o->socket_path);
    }
    char port[16];
    snprintf(port, sizeof port, "%d", NBD_DEFAULT_PORT);
    return nbd_server_listen_tcp(srv, o->bind_addr, o->port ? o->port : port);
}

/* Load the bitmaps an export offers.  An enabled bitmap of a writable
 * image is the live one the format keeps up to date: the export shows
 * the writes of this session too, as qemu-nbd's does. */
static int serve_load_bitmaps(const struct serve_export *e, struct blk_bitmap **bms)
{
    for (unsigned i = 0; i < e->n_bitmaps; i++) {
        int r = blk_image_load_bitmap(e->opened, e->bitmaps[i], &bms[i]);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

/* Whether -U could open every export: they are all read-only. */
static bool serve_all_read_only(const struct serve_opts *o)
{
    for (unsigned i = 0; i < o->n_exports; i++) {
        if (!o->exports[i].img.read_only) {
            return false;
        }
    }
    return true;
}

/* As qemu-nbd does: a guessed raw format is a risk the user should
 * know of, and the guard it brings can refuse a client's writes. */
static void serve_warn_probed_raw(const struct serve_export *e)
{
    if (!blk_image_format_probed(e->opened) || strcmp(blk_image_format(e->opened), "raw") != 0 ||
        blk_image_read_only(e->opened)) {
        return;
    }
    log_warn("%s: format not given and probed as raw: writes that would make its first sector "
             "look like another image format are refused; name the format (-f raw, or "
             "format=raw in --export) to lift that",
             cmd_image_name(&e->img, e->opened));
}

/* Open every export's image and hand it to the server. */
static int serve_open_exports(struct serve_opts *o, struct nbd_server *srv)
{
    for (unsigned i = 0; i < o->n_exports; i++) {
        struct serve_export *e = &o->exports[i];
        struct blk_bitmap *bms[NBD_MAX_BITMAPS] = {NULL};
        int r = blk_image_open(&e->opened, &e->img);
        if (r == 0) {
            r = serve_load_bitmaps(e, bms);
        }
        if (r == 0) {
            r = nbd_server_add_export(srv, e->name, e->description, e->opened, bms, e->n_bitmaps);
        }
        if (r < 0) {
            for (unsigned k = 0; k < e->n_bitmaps; k++) {
                blk_bitmap_free(bms[k]);
            }
            return r;
        }
    }
    return 0;
}

/* Flush (before the statistics, so they count it) and close the images. */
static int serve_close_exports(struct serve_opts *o, bool flush)
{
    int status = 0;

    for (unsigned i = 0; i < o->n_exports; i++) {
        struct serve_export *e = &o->exports[i];
        if (!e->opened || !flush || e->img.read_only) {
            continue;
        }
        int r = blk_image_flush(e->opened);
        if (r < 0) {
            CLEANUP_FREE char *esc = str_escape(cmd_image_name(&e->img, e->opened));
            cmd_print_failure(r, "flushing %s", esc ? esc : "?");
            status = -1;
        }
    }
    return status;
}

static int serve_free_exports(struct serve_opts *o)
{
    int status = 0;

    for (unsigned i = 0; i < o->n_exports; i++) {
        int r = blk_image_close(o->exports[i].opened);
        if (r < 0) {
            CLEANUP_FREE char *esc = str_escape(cmd_image_name(&o->exports[i].img, NULL));
            cmd_print_failure(r, "closing %s", esc ? esc : "?");
            status = -1;
        }
        o->exports[i].opened = NULL;
    }
    return status;
}

static int serve_run(int argc, char **argv)
{
    struct serve_opts o = {
        /* The exports of one server may share a file (windows of one disk,
         * a snapshot beside the live image); block/ still refuses two
         * writers of one qcow2 file. */
        .img = {.cache = BLK_CACHE_WRITEBACK,
                .discard = BLK_DISCARD_UNMAP,
                .share_in_process = true},
        .srv = {.workers_per_conn = SERVE_DEFAULT_WORKERS,
                .max_connections = 1,
                .handshake_limit_s = SERVE_DEFAULT_HANDSHAKE_LIMIT},
        .export_name = "",
    };
    struct nbd_server *srv = NULL;
    struct nbd_tls *tls = NULL;
    int ready_fd = -1, r, status = EXIT_ERROR;
    bool pid_written = false;

    r = serve_parse(&o, argc, argv);
    if (r) {
        return r < 0 ? EXIT_OK : r;
    }
    serve_fit_caps(&o.srv);
    if (o.fork) {
        ready_fd = serve_fork();
    }
    if (o.srv.tls_mode != NBD_TLS_OFF) {
        r = nbd_tls_new(&tls, &o.tls, true);
        if (r < 0) {
            goto out;
        }
        o.srv.tls = tls;
    }
    r = nbd_server_new(&srv, &o.srv);
    if (r == 0) {
        r = serve_open_exports(&o, srv);
    }
    /* The pid file before the socket: whoever sees the socket can read
     * the pid file too. */
    if (r == 0 && o.pid_file) {
        r = serve_write_pid_file(o.pid_file);
        pid_written = r == 0;
    }
    if (r == 0) {
        r = serve_listen(srv, &o);
    }
    if (r < 0) {
        goto out;
    }
    /* Only once the server is up: one that fails to start says only why. */
    for (unsigned i = 0; i < o.n_exports; i++) {
        serve_warn_probed_raw(&o.exports[i]);
    }
    serve_install_signals(srv);
    if (ready_fd >= 0) {
        serve_daemon_ready(ready_fd);
        ready_fd = -1;
    }
    r = nbd_server_run(srv);
    if (r == 0 && serve_close_exports(&o, true) < 0) {
        r = -EIO;
    }
    nbd_server_report_stats(srv);
    status = r < 0 ? EXIT_ERROR : EXIT_OK;

out:
    if (r < 0 && r != -EIO) {
        cmd_print_open_error(r, serve_all_read_only(&o));
        status = cmd_status(r, status);
    }
    signal_server = NULL;
    nbd_server_free(srv);
    if (serve_free_exports(&o) < 0) {
        status = EXIT_ERROR;
    }
    nbd_tls_free(tls);
    if (pid_written) {
        unlink(o.pid_file); /* ours: never one we failed to write */
    }
    if (ready_fd >= 0) {
        char c = (char)status; /* the parent exits with it (EOF: 1) */
        if (status != EXIT_ERROR && write(ready_fd, &c, 1) != 1) {
            /* the parent is gone */
        }
        close(ready_fd);
    }
    return status;
}

const struct cmd cmd_serve = {
    .name = "serve",
    .summary = "export an image over NBD (like qemu-nbd)",
    .run = serve_run,
    .usage = serve_usage,
};
