/* common/host-memory.h: whether this machine gives free memory back to
 * a host, which makes freshly allocated page-cache memory expensive. */
#ifndef DISKIMG_COMMON_HOST_MEMORY_H
#define DISKIMG_COMMON_HOST_MEMORY_H

#include <stdbool.h>

/* True on a VM whose virtio-balloon device does free page reporting:
 * memory the guest frees goes back to the host within seconds, and the
 * next touch of it is a host fault.  Read from sysfs once per process;
 * false wherever that cannot be told (bare metal, containers without
 * /sys, other hypervisors). */
bool host_reclaims_free_pages(void);

/* The parser behind it: FEATURES is a virtio device's "features" file, a
 * string of '0'/'1' with feature bit N at index N. */
bool virtio_balloon_reports_free_pages(const char *features);

#endif
