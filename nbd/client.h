/* nbd/client.h: the NBD client, shared by its files.
 *
 *   client-handshake.c  connect, fixed newstyle negotiation (GO, structured
 *                       replies, base:allocation), EXPORT_NAME fallback
 *   client.c            transmission: requests from many threads on one
 *                       connection, replies matched to requests by cookie
 *   client-driver.c     the "nbd" protocol driver of the block layer
 *
 * A request is sent under the connection's send lock (nbd_client_submit)
 * and collected by nbd_client_wait; a thread may send several before it
 * waits for them.  Replies are read by whichever thread holds the read
 * side (client.c says who, and why): read data lands straight in the
 * caller's iovec.  Any protocol violation by the server ends the
 * connection and fails every request in flight. */
#ifndef DISKIMG_NBD_CLIENT_H
#define DISKIMG_NBD_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "read-cover.h"
#include "uri.h"

#define NBD_CLIENT_SLOTS 64 /* requests in flight per connection */
#define NBD_CLIENT_MAX_CONNS 8

struct nbd_client_extent {
    uint64_t length;
    uint32_t flags; /* NBD_STATE_* */
};

struct nbd_client_slot {
    bool busy, done;
    bool waiting; /* its thread sleeps on cond for the reply */
    uint16_t generation;
    pthread_cond_t cond;
    uint16_t type;
    uint64_t offset;
    uint32_t count;
    const struct iovec *iov; /* READ destination */
    int iovcnt;
    struct nbd_cover cover; /* READ: which bytes the reply covered so far */
    int err;                /* errno, 0 = success */
    char msg[1024];
    struct nbd_client_extent *extents; /* BLOCK_STATUS result (malloc'd) */
    uint32_t n_extents;
};

struct nbd_tls;
struct nbd_tls_session;

struct nbd_client_conn {
    int fd;
    struct nbd_tls_session *tls; /* nbds:// once STARTTLS succeeded */
    pthread_mutex_t send_lock;
    pthread_mutex_t lock; /* slots, reading, dead */
    pthread_cond_t slot_free;
    struct nbd_client_slot slots[NBD_CLIENT_SLOTS];
    bool started;     /* in transmission (nbd_client_start) */
    bool reading;     /* a thread holds the read side */
    pthread_t reader; /* TLS: the thread that holds it for good */
    bool reader_running;
    bool dead;
    int dead_err;                      /* what requests fail with once dead: EIO for a violation */
    char dead_msg[1024];               /* "WHERE: what happened" */
    char proto_err[256];               /* the read side: what the server did wrong */
    char where[300];                   /* the server, for messages ("nbd+unix socket PATH") */
    struct nbd_client_conn *peer_next; /* in client.c's list of open connections */
    bool peer_listed;
    /* negotiated */
    bool structured;
    bool base_alloc; /* base:allocation negotiated, with this id */
    uint32_t base_alloc_id;
};

/* What the handshake learnt about the export (the same on every
 * connection of a node). */
struct nbd_client_export {
    uint64_t size;
    uint16_t eflags;
    uint32_t min_block, pref_block, max_block;
};

/* client-handshake.c: connect and negotiate within timeout_s seconds;
 * returns 0 or -errno with a message ("export 'x' not found", "the
 * server requires TLS"). */
#define NBD_CLIENT_HANDSHAKE_TIMEOUT_S 30
/* The greeting from a server this process already holds a connection to:
 * no greeting by then means its client limit is reached, by us. */
#define NBD_CLIENT_BUSY_TIMEOUT_S 3
int nbd_client_connect(const struct nbd_uri *u, struct nbd_tls *tls, unsigned timeout_s,
                       struct nbd_client_conn **out, struct nbd_client_export *exp);
void nbd_client_close(struct nbd_client_conn *c);

/* client.c */
/* A connection not yet connected (fd -1), for nbd_client_connect, or a
 * test's socket; nbd_client_close frees it. */
struct nbd_client_conn *nbd_client_conn_new(void);
/* Transmission begins: the handshake is over (c->fd, c->tls, c->structured
 * and c->where are set). */
int nbd_client_start(struct nbd_client_conn *c);
/* Open connections of this process to the server at where (the address
 * as client-handshake.c names it), and adding one to the count. */
unsigned nbd_client_peer_count(const char *where);
void nbd_client_peer_add(struct nbd_client_conn *c);
/* A request sent and not yet collected: nbd_client_wait must be called
 * for every ticket nbd_client_submit gives, since the slot, and for a
 * READ the caller's buffers, stay the request's until then. */
struct nbd_client_ticket {
    struct nbd_client_conn *c;
    int slot;
    uint16_t type;
};
/* Send one request without waiting for its reply.  When every slot of c
 * is taken: with wait_slot, wait for one; without, return -EAGAIN at
 * once, for a caller that holds tickets and must collect one first (the
 * slots could otherwise all be held by callers waiting for more).  A
 * failed send still gives a ticket; its wait reports the failure. */
int nbd_client_submit(struct nbd_client_conn *c, uint16_t type, uint16_t flags, uint64_t offset,
                      uint32_t count, const struct iovec *payload, int payload_cnt,
                      const struct iovec *read_iov, int read_cnt, bool wait_slot,
                      struct nbd_client_ticket *t);
/* The reply: 0 or -errno with the server's message; extents as for
 * nbd_client_request.  Frees the slot. */
int nbd_client_wait(const struct nbd_client_ticket *t, struct nbd_client_extent **extents,
                    uint32_t *n_extents);
/* One request and its reply.  payload: WRITE data; read_iov: READ
 * destination; extents: BLOCK_STATUS result (caller frees). */
int nbd_client_request(struct nbd_client_conn *c, uint16_t type, uint16_t flags, uint64_t offset,
                       uint32_t count, const struct iovec *payload, int payload_cnt,
                       const struct iovec *read_iov, int read_cnt,
                       struct nbd_client_extent **extents, uint32_t *n_extents);

#endif
