/* How many CPUs this process may really use: the CPUs in its affinity mask (what mpirun's
 * binding or taskset allow), capped by the cgroup CPU quota (a Kubernetes pod's CPU limit),
 * rounded up to whole CPUs. */
#ifndef COMMON_CPUS_H
#define COMMON_CPUS_H

#include <stdint.h>

struct cpus {
    int affinity;     /* CPUs in the affinity mask */
    double quota;     /* cgroup quota in CPUs, 0 when unlimited or unknown */
    int usable;       /* min(affinity, ceil(quota)), at least 1 */
    uint64_t mask_id; /* hash of the affinity mask: equal for processes bound alike */
};

void cpus_detect(struct cpus *c);

/* Parses a cgroup v2 "cpu.max" line ("max 100000" or "150000 100000"); returns the quota in
 * CPUs, or 0 for no limit or an unreadable line. Exposed for tests. */
double cpus_parse_cpu_max(const char *line);

#endif
