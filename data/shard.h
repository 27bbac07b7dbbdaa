/* Epoch order and data-parallel sharding.
 *
 * Each epoch uses a permutation of the n training images seeded by (seed, epoch), identical on
 * every rank. Step s of an epoch consumes the global batch perm[s*G .. (s+1)*G), G = world *
 * batch; rank r takes its own slice perm[s*G + r*batch .. + batch). All ranks run the same
 * number of steps, floor(n / G); the remainder that does not fill a global batch is dropped, so
 * an epoch's shards are disjoint and cover everything but that remainder. */
#ifndef DATA_SHARD_H
#define DATA_SHARD_H

#include <stdint.h>

/* perm[n] = a uniformly random permutation of 0..n-1 for (seed, epoch). */
void shard_permutation(uint64_t seed, int epoch, int n, int *perm);

/* Global batches (= optimizer steps) per epoch. */
int shard_steps(int n, int world, int batch);

/* The `batch` dataset indices rank `rank` processes at step `step`. */
const int *shard_slice(const int *perm, int step, int rank, int world, int batch);

#endif
