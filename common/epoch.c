/* common/epoch.c: SOURCE_DATE_EPOCH (see epoch.h).  Strict on purpose:
 * the spec asks a tool to fail on a malformed value rather than guess,
 * since a guessed time silently breaks the reproducibility asked for. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "epoch.h"
#include "error.h"
#include "escape.h"
#include "util.h"

int epoch_parse(const char *value, uint64_t *out)
{
    uint64_t v;

    if (parse_uint(value, 0, EPOCH_MAX, &v) == 0) {
        *out = v;
        return 0;
    }
    char *esc = str_escape(value);
    int r = err_setx(EINVAL,
                     "SOURCE_DATE_EPOCH='%s' is not a whole number of seconds since 1970 "
                     "(0 to %" PRIu64 ")",
                     esc ? esc : "?", EPOCH_MAX);
    free(esc);
    return r;
}

int repro_epoch_get(bool flag, struct repro_epoch *out)
{
    const char *v = getenv("SOURCE_DATE_EPOCH");

    out->on = flag || v != NULL;
    out->epoch = 0;
    return v ? epoch_parse(v, &out->epoch) : 0;
}
