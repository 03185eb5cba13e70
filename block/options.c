/* block/options.c: qemu's spellings for cache modes, aio engines,
 * detect-zeroes and discard, and what each cache mode means. */
#include <errno.h>
#include <string.h>

#include "block.h"

static const char *const cache_names[] = {
    [BLK_CACHE_WRITEBACK] = "writeback",
    [BLK_CACHE_NONE] = "none",
    [BLK_CACHE_WRITETHROUGH] = "writethrough",
    [BLK_CACHE_DIRECTSYNC] = "directsync",
    [BLK_CACHE_UNSAFE] = "unsafe",
};
static const char *const aio_names[] = {
    [BLK_AIO_THREADS] = "threads", [BLK_AIO_IO_URING] = "io_uring"};
static const char *const detect_names[] = {[BLK_DETECT_ZEROES_OFF] = "off",
                                           [BLK_DETECT_ZEROES_ON] = "on",
                                           [BLK_DETECT_ZEROES_UNMAP] = "unmap"};
static const char *const discard_names[] = {
    [BLK_DISCARD_IGNORE] = "ignore", [BLK_DISCARD_UNMAP] = "unmap"};

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            return i;
        }
    }
    return -EINVAL;
}

int blk_cache_mode_parse(const char *s, enum blk_cache_mode *out)
{
    int i = lookup(s, cache_names, 5);

    if (i < 0 && strcmp(s, "off") == 0) {
        i = BLK_CACHE_NONE; /* qemu accepts "off" for "none" */
    }
    if (i < 0) {
        return i;
    }
    *out = (enum blk_cache_mode)i;
    return 0;
}

const char *blk_cache_mode_name(enum blk_cache_mode m)
{
    return cache_names[m];
}

int blk_aio_parse(const char *s, enum blk_aio *out)
{
    int i = lookup(s, aio_names, 2);

    if (i < 0) {
        return i;
    }
    *out = (enum blk_aio)i;
    return 0;
}

const char *blk_aio_name(enum blk_aio a)
{
    return aio_names[a];
}

int blk_detect_zeroes_parse(const char *s, enum blk_detect_zeroes *out)
{
    int i = lookup(s, detect_names, 3);

    if (i < 0) {
        return i;
    }
    *out = (enum blk_detect_zeroes)i;
    return 0;
}

const char *blk_detect_zeroes_name(enum blk_detect_zeroes d)
{
    return detect_names[d];
}

int blk_discard_parse(const char *s, enum blk_discard_mode *out)
{
    int i = lookup(s, discard_names, 2);

    /* qemu's synonyms */
    if (i < 0 && strcmp(s, "off") == 0) {
        i = BLK_DISCARD_IGNORE;
    } else if (i < 0 && strcmp(s, "on") == 0) {
        i = BLK_DISCARD_UNMAP;
    }
    if (i < 0) {
        return i;
    }
    *out = (enum blk_discard_mode)i;
    return 0;
}

const char *blk_discard_name(enum blk_discard_mode d)
{
    return discard_names[d];
}

bool blk_cache_mode_direct(enum blk_cache_mode m)
{
    return m == BLK_CACHE_NONE || m == BLK_CACHE_DIRECTSYNC;
}

bool blk_cache_mode_writethrough(enum blk_cache_mode m)
{
    return m == BLK_CACHE_WRITETHROUGH || m == BLK_CACHE_DIRECTSYNC;
}

bool blk_aio_available(enum blk_aio a)
{
#ifdef HAVE_LIBURING
    (void)a;
    return true;
#else
    return a == BLK_AIO_THREADS;
#endif
}
