/* common/epoch.h: the one reading of SOURCE_DATE_EPOCH
 * (reproducible-builds.org/specs/source-date-epoch), for every writer
 * that stores a time: image headers (block/, formats/) and the GCE
 * tar.gz (tar and gzip mtimes).  Read it once, early, in cmd/, and pass
 * the result down, so one run uses one epoch everywhere. */
#ifndef DISKIMG_COMMON_EPOCH_H
#define DISKIMG_COMMON_EPOCH_H

#include <stdbool.h>
#include <stdint.h>

/* 9999-12-31T23:59:59Z: a larger value is refused as malformed.  Each
 * field that cannot hold the epoch clamps it (diskimg-formats(7)). */
#define EPOCH_MAX UINT64_C(253402300799)

struct repro_epoch {
    bool on;        /* reproducible output: SOURCE_DATE_EPOCH set, or --reproducible */
    uint64_t epoch; /* seconds since 1970-01-01 UTC: the variable's value, else 0 */
};

/* Decimal digits only, 0 to EPOCH_MAX: 0 and *out, or -EINVAL with a
 * message naming SOURCE_DATE_EPOCH and the value (escaped). */
int epoch_parse(const char *value, uint64_t *out);

/* Whether output is reproducible and its epoch: on when the variable
 * is set (even to 0) or flag (--reproducible) is true; the epoch is the
 * variable's value, or 0 when only the flag asks.  A set but malformed
 * variable (empty included) is an error, whatever flag says. */
int repro_epoch_get(bool flag, struct repro_epoch *out);

#endif
