/* block/pread-many.c: see pread-many.h.  Threads are started per call:
 * a call reads megabytes, and starting a thread costs microseconds. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "block.h"
#include "common/cleanup.h"
#include "common/cpus.h"
#include "common/error.h"
#include "common/util.h"
#include "pread-many.h"

#define MIN_PIECE (256u << 10) /* below this, a thread is not worth it */
#define MAX_PIECES 256
#define MAX_THREADS 64u

struct piece {
    struct blk_image *img;
    uint64_t off, len;
    uint8_t *buf;
};

struct many {
    struct piece pieces[MAX_PIECES];
    unsigned n;
    atomic_uint next;
    pthread_mutex_t lock;
    int err; /* first error, under lock */
    char msg[512];
};

static void *read_pieces(void *arg)
{
    struct many *m = arg;

    for (;;) {
        unsigned i = atomic_fetch_add(&m->next, 1);
        if (i >= m->n) {
            break;
        }
        struct piece *p = &m->pieces[i];
        int r = blk_image_pread(p->img, p->off, p->buf, p->len);
        if (r < 0) {
            pthread_mutex_lock(&m->lock);
            if (!m->err) {
                m->err = r;
                snprintf(m->msg, sizeof m->msg, "%s", err_msg_or(r));
            }
            pthread_mutex_unlock(&m->lock);
            atomic_store(&m->next, m->n); /* the others stop too */
            break;
        }
    }
    return NULL;
}

/* Split a job into about 'want' pieces of whole clusters, at most 'cap'. */
static void split_job(struct many *m, const struct blk_pread_job *j, unsigned want, unsigned cap)
{
    unsigned last = m->n + cap - 1;

    uint64_t unit = MAX(blk_image_cluster_size(j->img), (uint64_t)(64u << 10));
    uint64_t piece = ROUND_UP(MAX(j->len / MAX(want, 1u), (uint64_t)MIN_PIECE), unit);

    for (uint64_t pos = 0; pos < j->len;) {
        /* piece ends on a cluster boundary of the image, not of the job */
        uint64_t end = MIN(ROUND_UP(j->off + pos + piece, unit) - j->off, j->len);
        if (m->n == last) {
            end = j->len; /* the last slot takes the rest */
        }
        m->pieces[m->n++] =
            (struct piece){j->img, j->off + pos, end - pos, (uint8_t *)j->buf + pos};
        pos = end;
    }
}

int blk_pread_many(const struct blk_pread_job *jobs, unsigned njobs, unsigned threads)
{
    static struct many zero_many;
    struct many *m = malloc(sizeof *m);
    pthread_t tid[MAX_THREADS];
    unsigned started = 0;
    int r;

    if (!m) {
        return err_set(ENOMEM, "parallel read");
    }
    *m = zero_many;
    if (!threads) {
        threads = cpus_usable();
    }
    threads = MIN(threads, MAX_THREADS);
    if (njobs > MAX_PIECES) {
        free(m);
        return err_setx(EINVAL, "parallel read of %u ranges", njobs);
    }
    for (unsigned i = 0; i < njobs; i++) {
        /* leave a piece for each job after this one */
        split_job(m, &jobs[i], threads, MAX_PIECES - m->n - (njobs - 1 - i));
    }
    pthread_mutex_init(&m->lock, NULL);
    for (unsigned i = 1; i < MIN(threads, m->n); i++) {
        if (pthread_create(&tid[started], NULL, read_pieces, m) != 0) {
            break; /* fewer threads: the pieces get read all the same */
        }
        started++;
    }
    read_pieces(m);
    for (unsigned i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
    }
    pthread_mutex_destroy(&m->lock);
    r = m->err;
    if (r) {
        err_setx(-r, "%s", m->msg);
    }
    free(m);
    return r;
}
