/* common/turns.h: workers that take turns in the order of numbered
 * claims (copy's in-order writes, commit's and rebase's chunks).
 *
 * Claim number seq waits on its own condition, cond[seq % n], and the
 * claim before it wakes only that one.  With n workers each holding one
 * claim, the claims waiting are consecutive numbers, so no two share a
 * condition; one condition for all would wake every waiting worker at
 * each turn (measured: ~15 futex calls per request on an NBD-to-NBD
 * copy).  The caller's mutex guards the turn itself. */
#ifndef DISKIMG_COMMON_TURNS_H
#define DISKIMG_COMMON_TURNS_H

#include <pthread.h>
#include <stdint.h>

#define TURNS_MAX 256 /* workers */

struct turns {
    pthread_cond_t cond[TURNS_MAX];
    unsigned n;
};

/* For n workers (1 to TURNS_MAX). */
void turns_init(struct turns *t, unsigned n);
void turns_destroy(struct turns *t);
/* Caller holds lock: sleep until woken (recheck the turn after). */
void turns_wait(struct turns *t, uint64_t seq, pthread_mutex_t *lock);
/* Caller holds the lock: claim seq is done with the turn; wake seq + 1. */
void turns_pass(struct turns *t, uint64_t seq);
/* Caller holds the lock: wake everyone (the work stopped). */
void turns_wake_all(struct turns *t);

#endif
