/* Data-parallel behaviour under MPI; run as `mpirun -np 2 test_dist` (and with 1 rank).
 *  - the shards of an epoch are disjoint across ranks and cover all but the dropped remainder;
 *  - gradients are averaged, not summed: every rank fed the same batch makes exactly the step
 *    one process makes (bit for bit: the sum of 2^k equal floats scaled by 2^-k is exact);
 *  - after steps on different shards every rank holds identical weights. */
#include "../app/dist.h"
#include "../app/model.h"
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/shard.h"
#include "check.h"
#include "test_nets.h"

#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static struct dist d;

static uint32_t crc_of(const float *p, size_t n) { return (uint32_t)crc32(0, (const Bytef *)p, (uInt)(n * sizeof(float))); }

static int all_equal_u32(uint32_t v) {
    uint32_t *all = XALLOC((size_t)d.world * sizeof *all);
    MPI_Allgather(&v, 1, MPI_UINT32_T, all, 1, MPI_UINT32_T, MPI_COMM_WORLD);
    int eq = 1;
    for (int r = 0; r < d.world; r++) eq &= all[r] == all[0];
    free(all);
    return eq;
}

static void test_shards(void) {
    int n = 1000, batch = 7, steps = shard_steps(n, d.world, batch);
    int *perm = XALLOC((size_t)n * sizeof(int)), *mine = XALLOC((size_t)steps * batch * sizeof(int));
    shard_permutation(11, 3, n, perm);
    for (int s = 0; s < steps; s++) memcpy(mine + s * batch, shard_slice(perm, s, d.rank, d.world, batch), (size_t)batch * sizeof(int));
    int total = steps * batch * d.world;
    int *all = d.rank == 0 ? XALLOC((size_t)total * sizeof(int)) : NULL;
    MPI_Gather(mine, steps * batch, MPI_INT, all, steps * batch, MPI_INT, 0, MPI_COMM_WORLD);
    if (d.rank == 0) {
        int *hits = XALLOC((size_t)n * sizeof(int)), dup = 0, covered = 0;
        for (int i = 0; i < total; i++) hits[all[i]]++;
        for (int i = 0; i < n; i++) dup += hits[i] > 1, covered += hits[i] == 1;
        EXPECT(dup == 0, "%d images in two shards", dup);
        EXPECT(covered == total && n - covered < d.world * batch, "covered %d of %d (dropped %d)", covered, n, n - covered);
        free(hits);
        free(all);
    }
    free(perm);
    free(mine);
}

/* Gathers images idx[0..B) of set into m's next batch (augmented with seed 5, epoch 0) and
 * submits it. */
static void submit(struct model *m, const struct cifar_set *set, const int *idx, int B) {
    struct batch *b = model_batch_next(m);
    augment_gather(set, idx, B, 5, 0, 1, b->img, b->geom, b->labels);
    model_batch_submit(m, B);
}

/* Data-parallel steps of `net` on `set`, batches of B, gradient buckets of `bucket` bytes. */
static void test_steps(const struct net_def *net, const struct cifar_set *set, int B, size_t bucket) {
    int n = set->n;
    /* Same batch on every rank: the distributed step (bucketed allreduce overlapped with
     * backward, small buckets) equals the single-process step. */
    struct model dm, lm;
    model_init(&dm, net, kernels_cpu(), B, 5);
    model_init(&lm, net, kernels_cpu(), B, 5);
    size_t P = dm.nparams;
    struct dist_grads *g = dist_grads_attach(&dm, bucket, 0);
    EXPECT(dist_grads_mode(g) == (d.world == 1 ? DIST_GRADS_LOCAL : DIST_GRADS_HOST), "mode %d", dist_grads_mode(g));
    int same[4] = {0, 9, 17, 33};
    submit(&dm, set, same, B);
    model_forward_backward(&dm);
    float stats[2], local[2];
    dist_grads_finish(g, stats);
    EXPECT(d.world == 1 || dist_grads_buckets(g) > 3, "%s: %d buckets of %zu bytes", net->name, dist_grads_buckets(g), bucket);
    model_sgd_step(&dm, 0.05f, 0.9f, 5e-4f, 1.0f / d.world);
    submit(&lm, set, same, B);
    model_forward_backward(&lm);
    memcpy(local, lm.grads + P, sizeof local);
    model_sgd_step(&lm, 0.05f, 0.9f, 5e-4f, 1.0f);
    int pow2 = (d.world & (d.world - 1)) == 0;
    EXPECT(!pow2 || memcmp(dm.params, lm.params, P * 4) == 0, "%s, rank %d: averaged step differs from the one-process step", net->name, d.rank);
    EXPECT(stats[0] == local[0] * d.world && stats[1] == local[1] * d.world, "loss, correct summed over ranks: %g, %g vs %g, %g x %d",
           stats[0], stats[1], local[0], local[1], d.world);

    /* Different shards per rank for 3 steps: local gradients differ, weights stay identical;
     * the next batch is submitted while the step runs, as in training. */
    dist_grads_free(g);
    int *perm = XALLOC((size_t)n * sizeof(int));
    shard_permutation(5, 0, n, perm);
    int grads_differ = 0;
    submit(&dm, set, shard_slice(perm, 0, d.rank, d.world, B), B);
    for (int step = 0; step < 3; step++) {
        model_forward_backward(&dm);
        if (step < 2) submit(&dm, set, shard_slice(perm, step + 1, d.rank, d.world, B), B);
        grads_differ |= !all_equal_u32(crc_of(dm.grads, P));
        dist_allreduce_sum(dm.grads, P + 2);
        model_sgd_step(&dm, 0.05f, 0.9f, 5e-4f, 1.0f / d.world);
    }
    EXPECT(d.world == 1 || grads_differ, "ranks saw identical gradients: the shards were not different");
    EXPECT(all_equal_u32(crc_of(dm.params, P)) && all_equal_u32(crc_of(dm.momentum, P)), "%s: ranks hold different weights", net->name);
    EXPECT(memcmp(dm.params, lm.params, P * 4) != 0, "weights did not change");

    free(perm);
    model_free(&dm), model_free(&lm);
}

int main(int argc, char **argv) {
    err_set_progname("test_dist");
    dist_init(&argc, &argv, 0, &d);
    omp_set_num_threads(1);
    test_shards();

    /* A small in-memory dataset of random images. */
    int n = 64, B = 4;
    uint8_t *raw = XALLOC((size_t)n * CIFAR_RECORD_BYTES);
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)n * CIFAR_RECORD_BYTES; i++) s = s * 1664525u + 1013904223u, raw[i] = (uint8_t)(s >> 24);
    struct cifar_set set = {.n = n, .records = XALLOC((size_t)n * sizeof(uint8_t *))};
    for (int i = 0; i < n; i++) raw[(size_t)i * CIFAR_RECORD_BYTES] %= 10, set.records[i] = raw + (size_t)i * CIFAR_RECORD_BYTES;
    test_steps(&net_workshop_cnn, &set, B, 65536);
    test_steps(&test_net, &set, B, 2048); /* frozen tensors: the ready ranges skip them */

    /* The job's verdict: any failure on any rank fails every rank. */
    char label[32];
    snprintf(label, sizeof label, "test_dist (rank %d of %d)", d.rank, d.world);
    int bad = check_summary(label), any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    dist_finalize();
    return any;
}
