/* block/file-posix-uring.c: the "io_uring" engine.  Each thread owns a
 * small ring (created on first use, freed when the thread exits), submits
 * one request and waits for it, so the engine keeps the blocking contract
 * of the threads engine while the kernel completes cached reads inline and
 * writes with RWF_DSYNC in sqe->rw_flags for native FUA.  It has to earn
 * its place against the threads engine in tests/bench/. */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/error.h"
#include "file-posix.h"

#define RING_ENTRIES 8

struct thread_ring {
    struct io_uring ring;
    bool ready;
};

static __thread struct thread_ring tl_ring;
static pthread_key_t ring_key;
static pthread_once_t ring_key_once = PTHREAD_ONCE_INIT;

static void ring_destroy(void *p)
{
    struct thread_ring *tr = p;

    if (tr && tr->ready) {
        io_uring_queue_exit(&tr->ring);
        tr->ready = false;
    }
}

static void ring_key_init(void)
{
    pthread_key_create(&ring_key, ring_destroy);
}

static int ring_init(struct io_uring *ring)
{
    /* Newer kernels let a ring skip cross-thread wakeups; older ones
     * refuse the flags with EINVAL. */
    int r = io_uring_queue_init(RING_ENTRIES, ring,
                                IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN);
    if (r == -EINVAL) {
        r = io_uring_queue_init(RING_ENTRIES, ring, 0);
    }
    return r;
}

static struct io_uring *ring_get(int *err)
{
    if (!tl_ring.ready) {
        int r;

        pthread_once(&ring_key_once, ring_key_init);
        r = ring_init(&tl_ring.ring);
        if (r < 0) {
            *err = r;
            return NULL;
        }
        tl_ring.ready = true;
        pthread_setspecific(ring_key, &tl_ring);
    }
    return &tl_ring.ring;
}

/* Submit the prepared SQE and wait for its completion. */
static ssize_t ring_run(struct io_uring *ring)
{
    struct io_uring_cqe *cqe;
    int r;

    do {
        r = io_uring_submit_and_wait(ring, 1);
    } while (r == -EINTR);
    if (r < 0) {
        return r;
    }
    do {
        r = io_uring_wait_cqe(ring, &cqe);
    } while (r == -EINTR);
    if (r < 0) {
        return r;
    }
    ssize_t res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return res;
}

static ssize_t uring_preadv(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    int err = 0;
    struct io_uring *ring = ring_get(&err);
    struct io_uring_sqe *sqe;

    if (!ring) {
        return err;
    }
    sqe = io_uring_get_sqe(ring);
    if (iovcnt == 1) {
        io_uring_prep_read(sqe, fd, iov[0].iov_base, (unsigned)iov[0].iov_len, off);
    } else {
        io_uring_prep_readv(sqe, fd, iov, (unsigned)iovcnt, off);
    }
    return ring_run(ring);
}

static ssize_t uring_pwritev(int fd, const struct iovec *iov, int iovcnt, uint64_t off, int rwf)
{
    int err = 0;
    struct io_uring *ring = ring_get(&err);
    struct io_uring_sqe *sqe;

    if (!ring) {
        return err;
    }
    sqe = io_uring_get_sqe(ring);
    if (iovcnt == 1) {
        io_uring_prep_write(sqe, fd, iov[0].iov_base, (unsigned)iov[0].iov_len, off);
    } else {
        io_uring_prep_writev(sqe, fd, iov, (unsigned)iovcnt, off);
    }
    sqe->rw_flags = rwf;
    return ring_run(ring);
}

static int uring_fdatasync(int fd)
{
    int err = 0;
    struct io_uring *ring = ring_get(&err);
    struct io_uring_sqe *sqe;

    if (!ring) {
        return err;
    }
    sqe = io_uring_get_sqe(ring);
    io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
    return (int)ring_run(ring);
}

static int uring_available(void)
{
    int err = 0;

    if (!ring_get(&err)) {
        return err_set(-err, "io_uring is not available (--aio=io_uring)");
    }
    return 0;
}

const struct file_engine file_engine_uring = {
    .name = "io_uring",
    .preadv = uring_preadv,
    .pwritev = uring_pwritev,
    .fdatasync = uring_fdatasync,
    .available = uring_available,
};
