/* nbd/internal.h: state shared by the server's files (server.c,
 * listen.c, conn.c, handshake.c, transmission.c, worker.c, reply.c, stats.c). */
#ifndef DISKIMG_NBD_INTERNAL_H
#define DISKIMG_NBD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/escape.h"
#include "common/histogram.h"
#include "meta.h"
#include "protocol.h"
#include "server.h"

struct blk_image;
struct nbd_tls_session;

#define NBD_MAX_LISTENERS 16
#define NBD_RBUF_SIZE (64u << 10) /* receive buffer per connection */
#define NBD_SEND_SLICE_S 1        /* a send blocks this long before it checks its limits */

struct nbd_export {
    char *name;
    char *description;
    struct blk_image *img;
    struct blk_bitmap *bitmaps[NBD_MAX_BITMAPS]; /* owned */
    unsigned n_bitmaps;
    /* Bytes written since the last flush started: bounds what a flush has
     * to write back, so worker.c knows whether it is short. */
    _Atomic uint64_t unflushed_bytes;
    struct nbd_export *next;
};

struct nbd_cmd_stats {
    _Atomic uint64_t count, errors, bytes;
    struct histogram latency_ns;
};

struct nbd_stats {
    struct nbd_cmd_stats cmd[NBD_CMD_COUNT + 1]; /* last slot: unknown commands */
    _Atomic uint64_t fua_requests;
    _Atomic uint64_t connections;
    _Atomic uint64_t handshake_failures;
    uint64_t start_ns;
};

struct nbd_conn;

struct nbd_server {
    struct nbd_server_config cfg;
    struct nbd_export *exports;
    int listen_fd[NBD_MAX_LISTENERS];
    unsigned n_listen;
    char *unix_path;     /* removed at exit */
    int wake_pipe[2];    /* signal handlers and closing connections wake the accept loop */
    bool accept_failing; /* accept() failed and was logged (main thread only) */

    pthread_mutex_t lock; /* protects the fields below */
    pthread_cond_t conn_done;
    struct nbd_conn *conns;
    unsigned active;
    unsigned next_conn_id;
    bool had_client;
    uint64_t stop_deadline_ns; /* stopping: replies wait for clients until then */
    uint64_t cap_logged_ns;    /* when a connection or thread cap was last logged */

    /* Failed requests are logged at most FAILLOG_BURST at once, then one
     * a second (limits.c). */
    pthread_mutex_t faillog_lock;
    uint64_t faillog_tat_ns;     /* when the next line is due, by the rate */
    uint64_t faillog_suppressed; /* lines not logged since the last one */

    _Atomic bool stopping;    /* SIGTERM/SIGINT: read no more requests */
    _Atomic unsigned threads; /* connection and worker threads running */
    _Atomic uint64_t thread_cap_logged_ns;

    struct nbd_stats stats;
};

/* One client connection.  Read side under read_lock, write side under
 * write_lock; a request is read, run and answered by one worker thread.
 * worker.c owns the locks and says in which order they are taken. */
struct nbd_conn {
    struct nbd_server *srv;
    int fd;
    unsigned id;
    char peer[128];
    char log_ctx[32];

    pthread_mutex_t read_lock;
    uint8_t *rbuf;
    size_t rpos, rlen;
    bool may_poll;                    /* transmission phase: busy-polling allowed */
    uint64_t poll_ns;                 /* current busy-poll window (adapted by conn.c) */
    _Atomic uint64_t last_service_ns; /* how long the last request took */
    _Atomic uint64_t deadline_ns;     /* handshake deadline, 0 = none */
    _Atomic uint64_t idle_ns;         /* --idle-timeout in transmission, 0 = none */
    _Atomic uint64_t last_active_ns;
    _Atomic unsigned inflight; /* requests read and not yet answered */

    pthread_mutex_t write_lock;
    /* Since when a send has been waiting for the client to take bytes
     * (a TLS send: since it started), 0 = no send waiting.  Read by the
     * watchdog (server.c). */
    _Atomic uint64_t send_wait_since;
    _Atomic int drop; /* enum nbd_drop_reason: why the connection is being dropped */

    struct nbd_tls_session *tls; /* after STARTTLS: all I/O goes through it */
    char tls_peer[256];          /* client DN or PSK identity */

    /* Negotiated during the handshake, read-only afterwards. */
    struct nbd_export *exp;
    bool structured;
    bool no_zeroes;
    uint16_t eflags;
    bool meta_selected[NBD_META_MAX]; /* by context index, for meta_export */
    char *meta_export;                /* export the selection was made for */

    /* Workers */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    unsigned nthreads;
    _Atomic unsigned waiting_readers;
    _Atomic bool dead; /* no more requests are read */
    uint64_t requests;

    struct nbd_conn *next; /* in srv->conns */
};

/* Why the server drops a connection (nbd_conn_drop). */
enum nbd_drop_reason {
    NBD_DROP_NONE,
    NBD_DROP_DEADLINE, /* the handshake outlived --handshake-limit */
    NBD_DROP_IDLE,     /* no reply went out for --idle-timeout: the client does not read */
    NBD_DROP_SHUTDOWN, /* replies not delivered within the shutdown grace */
};

/* A string a client chose (an export name, a TLS identity, a message
 * quoting one), escaped for a log line into buf (common/escape.h). */
static inline const char *nbd_log_str(const char *s, char *buf, size_t len)
{
    str_escape_buf(buf, len, s);
    return buf;
}

/* conn.c: transport.  Return 0 or -errno (-ECONNRESET on end of stream). */
int nbd_conn_recv(struct nbd_conn *c, void *buf, size_t len);
/* Bytes of another request are already here (buffered or on the socket). */
bool nbd_conn_input_pending(struct nbd_conn *c);
int nbd_conn_discard(struct nbd_conn *c, uint64_t len);
/* Caller holds write_lock (or is in the handshake, which is single-threaded). */
int nbd_conn_send(struct nbd_conn *c, struct iovec *iov, int iovcnt);
/* Send what the socket takes without waiting: 0 once all of it went out,
 * -EAGAIN when the socket buffer is full (*iov and *iovcnt then describe
 * the rest; always on TLS), or -errno.  Caller is the connection's only
 * sender (worker.c). */
int nbd_conn_try_send(struct nbd_conn *c, struct iovec **iov, int *iovcnt);
int nbd_conn_send_buf(struct nbd_conn *c, const void *buf, size_t len);
void nbd_conn_kill(struct nbd_conn *c);
/* End the connection for a reason: sends and receives fail from now on
 * (blocked ones wake up).  Returns false if it was dropped already. */
bool nbd_conn_drop(struct nbd_conn *c, enum nbd_drop_reason why);
/* The first half of nbd_conn_drop: record why, without ending it yet
 * (the caller logs, then calls nbd_conn_kill).  False if dropped already. */
bool nbd_conn_claim_drop(struct nbd_conn *c, enum nbd_drop_reason why);

/* handshake.c: returns 0 once in transmission phase, <0 to drop the client. */
int nbd_handshake(struct nbd_conn *c);
uint16_t nbd_export_flags(const struct nbd_conn *c, const struct nbd_export *exp);
struct nbd_export *nbd_find_export(struct nbd_server *srv, const char *name);

/* One worker thread of a connection in transmission (worker.c). */
struct nbd_worker {
    struct nbd_conn *c;
    /* Holds read_lock: it reads the next request, or runs the only
     * request in flight (a short one, which it keeps the read side for). */
    bool has_read_side;
    void *buf; /* payloads and read data, kept between requests if small */
    size_t cap;
};

/* worker.c: the worker loop; returns when the connection is done. */
void nbd_transmission(struct nbd_conn *c);
/* Send one whole reply of w's request (iov is consumed), taking the locks
 * it needs; a reply that cannot be sent ends the connection. */
int nbd_worker_send(struct nbd_worker *w, struct iovec *iov, int iovcnt);
/* A buffer of at least len bytes, 4 KiB aligned, the worker's until the
 * next call (or the end of the request, for large ones); NULL: no memory. */
void *nbd_worker_buf(struct nbd_worker *w, size_t len);

/* transmission.c, for the worker loop.  Read one request and its payload
 * (caller holds read_lock).  Returns <0 when the connection must end,
 * else 0 with the stream in sync and in *verdict 0 (run the request) or
 * the -errno to answer it with instead, its message recorded. */
struct nbd_req;
int nbd_read_request(struct nbd_worker *w, struct nbd_req *req, void **payload, uint64_t *start_ns,
                     int *verdict);
/* Run the request (verdict 0) or answer its refusal, and count it. */
void nbd_finish_request(struct nbd_worker *w, const struct nbd_req *req, int verdict, void *payload,
                        uint64_t start_ns);

/* reply.c: build a reply and send it with nbd_worker_send. */
int nbd_reply_simple(struct nbd_worker *w, uint64_t cookie, uint32_t nbd_err);
int nbd_reply_error(struct nbd_worker *w, uint64_t cookie, uint32_t nbd_err, const char *msg);
int nbd_reply_read(struct nbd_worker *w, uint64_t cookie, uint64_t off, const void *buf,
                   uint32_t len, bool df);
/* The most bytes nbd_reply_read sends for a read of len bytes. */
size_t nbd_reply_read_max(const struct nbd_conn *c, uint32_t len);
struct nbd_extent_list {
    struct nbd_block_descriptor *desc; /* big-endian, ready to send */
    uint32_t n, cap;
};
int nbd_reply_block_status(struct nbd_worker *w, uint64_t cookie, const uint32_t *ctx_ids,
                           struct nbd_extent_list *lists, unsigned nlists);

/* stats.c */
void nbd_stats_record(struct nbd_stats *st, uint16_t cmd, bool error, uint64_t bytes,
                      uint64_t latency_ns);

/* server.c */
void nbd_server_conn_finished(struct nbd_server *srv, struct nbd_conn *c);

/* limits.c: the caps and the watchdog.  A thread serving clients is
 * counted against --thread-cap: reserve before creating it (false: the
 * cap is reached; for a worker that is logged), release when it ends. */
bool nbd_thread_reserve(struct nbd_server *srv, bool for_worker);
void nbd_thread_release(struct nbd_server *srv);
/* May a failed request be logged now?  *suppressed gets how many were
 * not logged since the last one that was. */
bool nbd_failure_log_allowed(struct nbd_server *srv, uint64_t *suppressed);
/* Caller holds srv->lock for these. */
const char *nbd_server_full(struct nbd_server *srv);
void nbd_server_log_full(struct nbd_server *srv, const char *why);
void nbd_watchdog(struct nbd_server *srv);
int nbd_watchdog_interval_ms(struct nbd_server *srv);
/* Caller does not hold srv->lock: stop reading requests, wait for the
 * connections to end (dropping those whose replies wait for the client
 * past NBD_SHUTDOWN_GRACE_S). */
void nbd_server_stop(struct nbd_server *srv);

#endif
