/* common/bufpool.h: a process-wide stash of large page-aligned buffers.
 *
 * A buffer of a few MiB handed back to malloc is usually handed back to
 * the kernel too (glibc trims and unmaps large blocks), so the next one
 * starts on fresh pages: a page fault per 4 KiB, and on a VM whose host
 * reclaims free guest memory (virtio-balloon free page reporting) a host
 * fault and a zeroed page each as well.  Buffers put here stay mapped for
 * the next request.  The stash keeps at most BUFPOOL_IDLE_MAX bytes idle;
 * beyond that buffers are freed, so memory stays bounded however many
 * connections come and go. */
#ifndef DISKIMG_COMMON_BUFPOOL_H
#define DISKIMG_COMMON_BUFPOOL_H

#include <stddef.h>

#define BUFPOOL_IDLE_MAX (32u << 20)

/* A buffer of at least len bytes, 4096-aligned; *cap gets its real size.
 * NULL when out of memory. */
void *bufpool_get(size_t len, size_t *cap);
/* Give a buffer from bufpool_get back (NULL is ignored). */
void bufpool_put(void *buf, size_t cap);
/* Bytes idle in the stash (tests, statistics). */
size_t bufpool_idle_bytes(void);

#endif
