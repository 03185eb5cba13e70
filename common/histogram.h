/* common/histogram.h: a lock-free log-linear latency histogram.
 *
 * Values (nanoseconds) land in buckets 2^e * (1 + k/8): percentiles are
 * accurate to about 12%, recording is two atomic adds, and a histogram is
 * a fixed 4 KiB, so it can be updated on the request path by any thread. */
#ifndef DISKIMG_COMMON_HISTOGRAM_H
#define DISKIMG_COMMON_HISTOGRAM_H

#include <stdint.h>

#define HIST_SUB_BITS 3
#define HIST_BUCKETS (64 << HIST_SUB_BITS)

struct histogram {
    _Atomic uint64_t count;
    _Atomic uint64_t sum;
    _Atomic uint64_t max;
    _Atomic uint64_t bucket[HIST_BUCKETS];
};

void hist_record(struct histogram *h, uint64_t value);
/* Value at quantile q in [0, 1] (upper bound of its bucket); 0 if empty. */
uint64_t hist_quantile(const struct histogram *h, double q);
uint64_t hist_mean(const struct histogram *h);

#endif
