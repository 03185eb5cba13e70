/* common/cpus.h: how many CPUs this process may run on, for sizing pools
 * of compute threads (compression, hashing). */
#ifndef DISKIMG_COMMON_CPUS_H
#define DISKIMG_COMMON_CPUS_H

/* The CPUs in this thread's affinity mask (taskset, cpusets), lowered to
 * a cgroup CPU quota (cpu.max, or cfs_quota_us in cgroup v1) rounded up
 * when one applies; at least 1.  Reads a few small files: call it once
 * per job, not per request. */
unsigned cpus_usable(void);

/* A quota of 'quota' per 'period' (microseconds, as cgroups write them)
 * in whole CPUs, rounded up; 0 when either is not positive (no quota). */
unsigned cpus_from_quota(long long quota, long long period);

#endif
