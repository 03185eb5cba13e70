/* common/histogram.c: see histogram.h. */
#include <stdatomic.h>

#include "histogram.h"

static unsigned hist_index(uint64_t v)
{
    if (v < (1u << HIST_SUB_BITS)) {
        return (unsigned)v;
    }
    unsigned msb = 63 - (unsigned)__builtin_clzll(v);
    unsigned sub = (unsigned)(v >> (msb - HIST_SUB_BITS)) & ((1u << HIST_SUB_BITS) - 1);
    return ((msb - HIST_SUB_BITS + 1) << HIST_SUB_BITS) | sub;
}

/* Largest value that maps to bucket i. */
static uint64_t hist_upper(unsigned i)
{
    if (i < (1u << HIST_SUB_BITS)) {
        return i;
    }
    unsigned e = (i >> HIST_SUB_BITS) + HIST_SUB_BITS - 1;
    uint64_t sub = i & ((1u << HIST_SUB_BITS) - 1);
    uint64_t base = (1ULL << e) | (sub << (e - HIST_SUB_BITS));
    return base + (1ULL << (e - HIST_SUB_BITS)) - 1;
}

void hist_record(struct histogram *h, uint64_t value)
{
    atomic_fetch_add_explicit(&h->bucket[hist_index(value)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, value, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&h->max, memory_order_relaxed);
    while (value > m && !atomic_compare_exchange_weak_explicit(
                            &h->max, &m, value, memory_order_relaxed, memory_order_relaxed)) {
    }
}

uint64_t hist_quantile(const struct histogram *h, double q)
{
    uint64_t total = 0, seen = 0, rank;

    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        total += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
    }
    if (total == 0) {
        return 0;
    }
    rank = (uint64_t)(q * (double)total);
    if (rank >= total) {
        rank = total - 1;
    }
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (seen > rank) {
            uint64_t up = hist_upper(i);
            uint64_t max = atomic_load_explicit(&h->max, memory_order_relaxed);
            return up < max ? up : max;
        }
    }
    return atomic_load_explicit(&h->max, memory_order_relaxed);
}

uint64_t hist_mean(const struct histogram *h)
{
    uint64_t n = atomic_load_explicit(&h->count, memory_order_relaxed);

    return n ? atomic_load_explicit(&h->sum, memory_order_relaxed) / n : 0;
}
