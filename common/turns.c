/* common/turns.c: see turns.h. */
#include "turns.h"

void turns_init(struct turns *t, unsigned n)
{
    t->n = n;
    for (unsigned i = 0; i < n; i++) {
        pthread_cond_init(&t->cond[i], NULL);
    }
}

void turns_destroy(struct turns *t)
{
    for (unsigned i = 0; i < t->n; i++) {
        pthread_cond_destroy(&t->cond[i]);
    }
}

void turns_wait(struct turns *t, uint64_t seq, pthread_mutex_t *lock)
{
    pthread_cond_wait(&t->cond[seq % t->n], lock);
}

void turns_pass(struct turns *t, uint64_t seq)
{
    pthread_cond_signal(&t->cond[(seq + 1) % t->n]);
}

void turns_wake_all(struct turns *t)
{
    for (unsigned i = 0; i < t->n; i++) {
        pthread_cond_broadcast(&t->cond[i]);
    }
}
