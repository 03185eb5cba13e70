/* common/host-memory.c: telling a VM with free page reporting from
 * everything else, at run time, so tuning for it (block/file-posix.c)
 * stays off on bare metal, in containers and on other hypervisors. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "host-memory.h"

/* VIRTIO_BALLOON_F_REPORTING in the virtio 1.2 specification. */
#define BALLOON_F_REPORTING 5
#define BALLOON_DRIVER_DIR "/sys/bus/virtio/drivers/virtio_balloon"

bool virtio_balloon_reports_free_pages(const char *features)
{
    for (size_t i = 0; i < BALLOON_F_REPORTING; i++) {
        if (features[i] != '0' && features[i] != '1') {
            return false; /* too short, or not the expected format */
        }
    }
    return features[BALLOON_F_REPORTING] == '1';
}

static bool reclaims;
static pthread_once_t reclaims_once = PTHREAD_ONCE_INIT;

static void probe_reclaims(void)
{
    DIR *d = opendir(BALLOON_DRIVER_DIR);
    struct dirent *e;

    if (!d) {
        return;
    }
    while (!reclaims && (e = readdir(d)) != NULL) {
        char path[512], features[256];
        FILE *f;
        if (strncmp(e->d_name, "virtio", 6) != 0) {
            continue;
        }
        snprintf(path, sizeof path, "%s/%s/features", BALLOON_DRIVER_DIR, e->d_name);
        f = fopen(path, "re");
        if (!f) {
            continue;
        }
        if (fgets(features, sizeof features, f)) {
            reclaims = virtio_balloon_reports_free_pages(features);
        }
        fclose(f);
    }
    closedir(d);
}

bool host_reclaims_free_pages(void)
{
    pthread_once(&reclaims_once, probe_reclaims);
    return reclaims;
}
