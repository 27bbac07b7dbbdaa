#include "shard.h"

#include "../common/rng.h"

#include <stddef.h>

void shard_permutation(uint64_t seed, int epoch, int n, int *perm) {
    struct rng r = rng_make(seed, RNG_PERMUTE, (uint64_t)epoch, 0);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)rng_below(&r, (uint32_t)i + 1);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int shard_steps(int n, int world, int batch) { return n / (world * batch); }

const int *shard_slice(const int *perm, int step, int rank, int world, int batch) {
    return perm + ((size_t)step * world + rank) * batch;
}
