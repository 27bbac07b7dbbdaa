#include "cpus.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double cpus_parse_cpu_max(const char *line) {
    char quota[32];
    long period = 0;
    if (sscanf(line, "%31s %ld", quota, &period) != 2 || period <= 0) return 0;
    if (strcmp(quota, "max") == 0) return 0;
    char *end;
    long q = strtol(quota, &end, 10);
    if (*end != '\0' || q <= 0) return 0;
    return (double)q / (double)period;
}

static double read_quota(void) {
    char line[128];
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r"); /* cgroup v2 (inside the pod's namespace) */
    if (f) {
        double q = fgets(line, sizeof line, f) ? cpus_parse_cpu_max(line) : 0;
        fclose(f);
        return q;
    }
    long quota = -1, period = 0; /* cgroup v1 */
    f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
    if (f) {
        if (fscanf(f, "%ld", &quota) != 1) quota = -1;
        fclose(f);
    }
    f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
    if (f) {
        if (fscanf(f, "%ld", &period) != 1) period = 0;
        fclose(f);
    }
    return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

void cpus_detect(struct cpus *c) {
    cpu_set_t set;
    CPU_ZERO(&set);
    c->affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the mask bits */
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) h = (h ^ (uint64_t)i) * 1099511628211ULL;
    c->mask_id = h;
    c->quota = read_quota();
    c->usable = c->affinity > 0 ? c->affinity : 1;
    if (c->quota > 0 && (int)ceil(c->quota - 1e-9) < c->usable) c->usable = (int)ceil(c->quota - 1e-9);
    if (c->usable < 1) c->usable = 1;
}
