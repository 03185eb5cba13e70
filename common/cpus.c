/* common/cpus.c: usable CPUs, from the affinity mask and the cgroup
 * quota.  A container limited to 2 CPUs on a 64-CPU host sees 64 CPUs in
 * its affinity mask; running 64 compressing threads there only adds
 * context switches, so the quota wins when it is lower. */
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cpus.h"

#define CGROUP_ROOT "/sys/fs/cgroup"

unsigned cpus_from_quota(long long quota, long long period)
{
    if (quota <= 0 || period <= 0) {
        return 0;
    }
    long long n = (quota + period - 1) / period;
    return n > 65536 ? 65536 : (unsigned)n;
}

static unsigned affinity_cpus(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) {
            return (unsigned)n;
        }
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* cgroup v2: "max 100000" or "200000 100000". */
static unsigned v2_quota(const char *dir)
{
    char path[4096], max[32];
    long long period = 0;
    unsigned n = 0;

    if (snprintf(path, sizeof path, "%s/cpu.max", dir) >= (int)sizeof path) {
        return 0;
    }
    FILE *f = fopen(path, "re");
    if (!f) {
        return 0;
    }
    if (fscanf(f, "%31s %lld", max, &period) == 2 && strcmp(max, "max") != 0) {
        long long quota = 0;
        if (sscanf(max, "%lld", &quota) == 1) {
            n = cpus_from_quota(quota, period);
        }
    }
    fclose(f);
    return n;
}

static long long read_ll(const char *dir, const char *name)
{
    char path[4096];
    long long v = 0;

    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        return 0;
    }
    FILE *f = fopen(path, "re");
    if (!f) {
        return 0;
    }
    if (fscanf(f, "%lld", &v) != 1) {
        v = 0;
    }
    fclose(f);
    return v;
}

static unsigned min_nonzero(unsigned a, unsigned b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

/* Is name one of the comma-separated controllers of a v1 hierarchy? */
static bool has_controller(const char *list, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0')) {
            return true;
        }
    }
    return false;
}

/* The lowest quota on the cgroup path or any of its ancestors (v2), or on
 * the process's own cpu cgroup (v1); 0 when none applies. */
static unsigned cgroup_quota(void)
{
    char line[4096], dir[4096];
    unsigned best = 0;
    FILE *f = fopen("/proc/self/cgroup", "re");

    if (!f) {
        return 0;
    }
    while (fgets(line, sizeof line, f)) {
        char *ctrl = strchr(line, ':'), *path;
        if (!ctrl || !(path = strchr(ctrl + 1, ':'))) {
            continue;
        }
        *path++ = '\0';
        ctrl++;
        path[strcspn(path, "\n")] = '\0';
        if (strcmp(line, "0") == 0 && *ctrl == '\0') {
            /* v2: every ancestor's cpu.max limits us too */
            for (;;) {
                if (snprintf(dir, sizeof dir, CGROUP_ROOT "%s", path) >= (int)sizeof dir) {
                    break;
                }
                best = min_nonzero(best, v2_quota(dir));
                char *slash = strrchr(path, '/');
                if (!slash || slash == path) {
                    best = min_nonzero(best, v2_quota(CGROUP_ROOT));
                    break;
                }
                *slash = '\0';
            }
        } else if (has_controller(ctrl, "cpu")) {
            static const char *const mounts[] = {CGROUP_ROOT "/cpu", CGROUP_ROOT "/cpu,cpuacct"};
            for (size_t i = 0; i < sizeof mounts / sizeof *mounts; i++) {
                if (snprintf(dir, sizeof dir, "%s%s", mounts[i], path) >= (int)sizeof dir) {
                    continue;
                }
                best = min_nonzero(best, cpus_from_quota(read_ll(dir, "cpu.cfs_quota_us"),
                                                         read_ll(dir, "cpu.cfs_period_us")));
            }
        }
    }
    fclose(f);
    return best;
}

unsigned cpus_usable(void)
{
    unsigned n = affinity_cpus();
    unsigned q = cgroup_quota();

    return q && q < n ? q : n;
}
