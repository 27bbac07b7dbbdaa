/* Data-parallel behaviour under MPI; run as `mpirun -np 2 test_dist` (and with 1 rank).
 *  - the shards of an epoch are disjoint across ranks and cover all but the dropped remainder;
 *  - gradients are averaged, not summed: every rank fed the same batch makes exactly the step
 *    one process makes (bit for bit: the sum of 2^k equal floats scaled by 2^-k is exact);
 *  - after steps on different shards every rank holds identical weights;
 *  - host memory, 2+ ranks: a gradient bucket started while backward goes on is summed while
 *    the caller makes no MPI call for a while (the progress thread, dist.h: HOST).
 *
 * Usage: test_dist [--device cpu|cuda|auto] [--out DIR]. Without --device everything runs on the
 * CPU backend and the steps on different shards reduce with one blocking allreduce each. With
 * it, on that backend (a rank's GPU: its node-local rank mod the GPUs visible, as in training),
 * every step reduces through dist_grads in the mode the job chooses for that memory (GPU
 * memory: STAGED through page-locked host memory, or DEVICE where opted in). On a GPU each
 * process times its own cuDNN algorithms, so the ranks' own gradients of one batch may differ in
 * their last bits (TF32: in more); the distributed step then matches the one-process step only
 * up to those differences, which tests/check_dist_files.py works out from the files --out
 * writes (raw float32 in the machine's byte order, little-endian on x86-64):
 *   DIR/meta.txt              "key value" lines: world, device, tf32, mode, lr, weight_decay,
 *                             nets (rank 0)
 *   DIR/NET.init.f32          the weights [P] before the same-batch step (rank 0)
 *   DIR/NET.dist.rankR.f32    rank R's weights after its distributed same-batch step
 *   DIR/NET.one.rankR.f32     rank R's weights after its one-process step on that batch
 *   DIR/NET.grads.rankR.f32   rank R's one-process gradients [P], then (loss, correct)
 *   DIR/NET.shards.rankR.f32  rank R's weights after the steps on different shards */
#include "../app/device.h"
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/shard.h"
#include "../dist/dist.h"
#include "../model/batches.h"
#include "../model/model.h"
#include "check.h"
#include "test_nets.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#define LR           0.05f
#define WEIGHT_DECAY 5e-4f

static struct dist d;
static const struct kernels *K; /* the backend */
static int device_mode, on_gpu; /* --device given; the backend's memory is a GPU's */
static const char *out_dir;     /* --out, or NULL */
static enum dist_grads_mode mode_seen;

static float *fnew(size_t n) { return XALLOC(n * sizeof(float)); }

static uint32_t crc_of(const float *p, size_t n) {
    return (uint32_t)crc32(0, (const Bytef *)p, (uInt)(n * sizeof(float)));
}

static int all_equal_u32(uint32_t v) {
    uint32_t *all = XALLOC((size_t)d.world * sizeof *all);
    MPI_Allgather(&v, 1, MPI_UINT32_T, all, 1, MPI_UINT32_T, MPI_COMM_WORLD);
    int eq = 1;
    for (int r = 0; r < d.world; r++) eq &= all[r] == all[0];
    free(all);
    return eq;
}

/* out_dir/NET.KIND.f32 (rank < 0) or out_dir/NET.KIND.rankR.f32: x[n], raw. */
static void write_floats(const char *net, const char *kind, int rank, const float *x, size_t n) {
    if (!out_dir) return;
    char path[1024];
    if (rank < 0) snprintf(path, sizeof path, "%s/%s.%s.f32", out_dir, net, kind);
    else snprintf(path, sizeof path, "%s/%s.%s.rank%d.f32", out_dir, net, kind, rank);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(x, sizeof(float), n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s: %s", path, strerror(errno));
        dist_fail(1, msg);
    }
}

static void write_meta(const char *const *nets, int nnets) {
    static const char *const modes[] = {[DIST_GRADS_LOCAL] = "local",
                                        [DIST_GRADS_HOST] = "host",
                                        [DIST_GRADS_DEVICE] = "device",
                                        [DIST_GRADS_STAGED] = "staged"};
    const char *override = getenv("NVIDIA_TF32_OVERRIDE");
    char path[1024];
    snprintf(path, sizeof path, "%s/meta.txt", out_dir);
    FILE *f = fopen(path, "w");
    if (!f) dist_fail(1, "cannot write meta.txt in the --out directory");
    fprintf(f, "world %d\ndevice %s\ntf32 %s\nmode %s\nlr %.9g\nweight_decay %.9g\nnets", d.world, K->name,
            !on_gpu                                  ? "n/a"
            : override && strcmp(override, "0") == 0 ? "off"
                                                     : "on",
            modes[mode_seen], (double)LR, (double)WEIGHT_DECAY);
    for (int i = 0; i < nnets; i++) fprintf(f, " %s", nets[i]);
    fprintf(f, "\n");
    if (fclose(f) != 0) dist_fail(1, "cannot write meta.txt in the --out directory");
}

static void test_shards(void) {
    int n = 1000, batch = 7, steps = shard_steps(n, d.world, batch);
    int *perm = XALLOC((size_t)n * sizeof(int)), *mine = XALLOC((size_t)steps * batch * sizeof(int));
    shard_permutation(11, 3, n, perm);
    for (int s = 0; s < steps; s++)
        memcpy(mine + s * batch, shard_slice(perm, s, d.rank, d.world, batch), (size_t)batch * sizeof(int));
    int total = steps * batch * d.world;
    int *all = d.rank == 0 ? XALLOC((size_t)total * sizeof(int)) : NULL;
    MPI_Gather(mine, steps * batch, MPI_INT, all, steps * batch, MPI_INT, 0, MPI_COMM_WORLD);
    if (d.rank == 0) {
        int *hits = XALLOC((size_t)n * sizeof(int)), dup = 0, covered = 0;
        for (int i = 0; i < total; i++) hits[all[i]]++;
        for (int i = 0; i < n; i++) dup += hits[i] > 1, covered += hits[i] == 1;
        EXPECT(dup == 0, "%d images in two shards", dup);
        EXPECT(covered == total && n - covered < d.world * batch, "covered %d of %d (dropped %d)", covered, n,
               n - covered);
        free(hits);
        free(all);
    }
    free(perm);
    free(mine);
}

/* Gathers images idx[0..B) of set into q's next batch (augmented with seed 5, epoch 0) and
 * submits it. */
static void submit(struct batches *q, const struct cifar_set *set, const int *idx, int B) {
    struct batch *b = batches_next(q);
    augment_gather(set, idx, B, 5, 0, 1, b->img, b->geom, b->labels);
    batches_submit(q, B);
}

/* Same batch on every rank: the distributed step (bucketed reduction overlapped with backward,
 * small buckets) on dm against the single-process step on lm. Both start from the same weights
 * and run the same plans, so lm's gradients are the ones dm contributed. */
static void same_batch_step(struct model *dm, struct batches *dq, struct model *lm, struct batches *lq,
                            struct dist_grads *g, const struct cifar_set *set, int B) {
    const char *name = dm->net->name;
    size_t P = dm->nparams;
    float *init = fnew(P), *dist_w = fnew(P), *one_w = fnew(P), *local = fnew(P + MODEL_STATS),
          stats[MODEL_STATS];
    model_get_state(dm, init, NULL, NULL);
    int same[4] = {0, 9, 17, 33};
    submit(dq, set, same, B);
    dist_grads_signal(g, (float)d.rank, 1.0f);
    check_forward_backward(dm, dq);
    dist_grads_finish(g, stats);
    dist_grads_signal(g, 0, 0);
    EXPECT(stats[2] == d.world * (d.world - 1) / 2 && stats[3] == d.world,
           "%s: signals summed to (%g, %g), want (%d, %d)", name, stats[2], stats[3],
           d.world * (d.world - 1) / 2, d.world);
    EXPECT(d.world == 1 || dist_grads_buckets(g) > 3, "%s: %d buckets", name, dist_grads_buckets(g));
    model_sgd_step(dm, LR, 0.9f, WEIGHT_DECAY, 1.0f / d.world);
    submit(lq, set, same, B);
    check_forward_backward(lm, lq);
    K->download(local, lm->grads, (P + MODEL_STATS) * sizeof(float));
    model_sgd_step(lm, LR, 0.9f, WEIGHT_DECAY, 1.0f);
    model_get_state(dm, dist_w, NULL, NULL);
    model_get_state(lm, one_w, NULL, NULL);
    /* The CPU computes the same in every process; a GPU may not (see the top). */
    int pow2 = (d.world & (d.world - 1)) == 0, same_grads = all_equal_u32(crc_of(local, P));
    EXPECT(same_grads || on_gpu, "%s: the ranks' gradients of one batch differ on the CPU", name);
    EXPECT(!pow2 || !same_grads || memcmp(dist_w, one_w, P * 4) == 0,
           "%s, rank %d: averaged step differs from the one-process step", name, d.rank);
    if (!same_grads && d.rank == 0)
        printf("test_dist: %s: the ranks' own gradients of the batch differ in rounding; "
               "tests/check_dist_files.py compares "
               "the steps in the --out files\n",
               name);
    float sum[2] = {local[P], local[P + 1]};
    dist_allreduce_sum(sum, 2);
    EXPECT(fabsf(stats[0] - sum[0]) <= 1e-6f * sum[0] && stats[1] == sum[1],
           "%s: loss, correct: %g, %g; summed over ranks %g, %g", name, stats[0], stats[1], sum[0], sum[1]);
    if (d.rank == 0) write_floats(name, "init", -1, init, P);
    write_floats(name, "dist", d.rank, dist_w, P);
    write_floats(name, "one", d.rank, one_w, P);
    write_floats(name, "grads", d.rank, local, P + 2); /* gradients, loss, correct */
    free(init), free(dist_w), free(one_w), free(local);
}

/* Data-parallel steps of `net` on `set`, batches of B, gradient buckets of `bucket` bytes. */
static void test_steps(const struct net_def *net, const struct cifar_set *set, int B, size_t bucket) {
    int n = set->n;
    struct model dm, lm;
    struct batches dq, lq;
    model_init(&dm, net, K, B, 5);
    model_init(&lm, net, K, B, 5);
    batches_init(&dq, K, B), batches_init(&lq, K, B);
    size_t P = dm.nparams;
    struct dist_grads *g = dist_grads_attach(&dm, bucket, on_gpu);
    mode_seen = dist_grads_mode(g);
    enum dist_grads_mode want = d.world == 1 ? DIST_GRADS_LOCAL
                                : on_gpu     ? DIST_GRADS_STAGED
                                             : DIST_GRADS_HOST;
    EXPECT(mode_seen == want || (want == DIST_GRADS_STAGED && mode_seen == DIST_GRADS_DEVICE), "mode %s",
           dist_grads_mode_name(mode_seen));
    same_batch_step(&dm, &dq, &lm, &lq, g, set, B);

    /* Different shards per rank for 3 steps (on a GPU 5, as CUDA graphs split at the buckets from
     * the third: recorded, then run): local gradients differ, weights stay identical; the next
     * batch is submitted while the step runs, as in training. Through dist_grads (device_mode) a
     * mirror model from the same state takes the same steps op by op, its gradients summed by
     * one allreduce on the host: with 1 or 2 ranks (a sum of two floats has one order) it must
     * end bit for bit where the model does. */
    if (!device_mode) dist_grads_free(g), g = NULL;
    int *perm = XALLOC((size_t)n * sizeof(int)), steps = on_gpu ? 5 : 3;
    dm.graphs = on_gpu;
    CHECK(steps * d.world * B <= n);
    shard_permutation(5, 0, n, perm);
    struct model mm;
    struct batches mq;
    size_t S = dm.nbuffers ? dm.nbuffers : 1;
    float *mirror[3] = {fnew(P + MODEL_STATS), fnew(P), fnew(S)};
    if (g) {
        model_init(&mm, net, K, B, 5);
        batches_init(&mq, K, B);
        model_get_state(&dm, mirror[0], mirror[1], mirror[2]);
        model_set_state(&mm, mirror[0], mirror[1], mirror[2]);
    }
    int grads_differ = 0;
    submit(&dq, set, shard_slice(perm, 0, d.rank, d.world, B), B);
    for (int step = 0; step < steps; step++) {
        check_forward_backward(&dm, &dq);
        if (step + 1 < steps) submit(&dq, set, shard_slice(perm, step + 1, d.rank, d.world, B), B);
        float stats[MODEL_STATS];
        if (g) {
            dist_grads_finish(g, stats);
        } else {
            grads_differ |= !all_equal_u32(crc_of(dm.grads, P));
            dist_allreduce_sum(dm.grads, P + MODEL_STATS);
        }
        model_sgd_step(&dm, LR, 0.9f, WEIGHT_DECAY, 1.0f / d.world);
        if (!g) continue;
        submit(&mq, set, shard_slice(perm, step, d.rank, d.world, B), B);
        check_forward_backward(&mm, &mq);
        K->download(mirror[0], mm.grads, P * sizeof(float));
        dist_allreduce_sum(mirror[0], P);
        K->upload(mm.grads, mirror[0], P * sizeof(float));
        model_sgd_step(&mm, LR, 0.9f, WEIGHT_DECAY, 1.0f / d.world);
    }
    if (g && d.world <= 2) {
        float *w2 = fnew(P), *m2 = fnew(P);
        model_get_state(&dm, mirror[0], mirror[1], NULL);
        model_get_state(&mm, w2, m2, NULL);
        EXPECT(
            memcmp(mirror[0], w2, P * 4) == 0 && memcmp(mirror[1], m2, P * 4) == 0,
            "%s, rank %d: %d steps through dist_grads%s differ from the same steps reduced by one allreduce",
            net->name, d.rank, steps, on_gpu ? " (CUDA graphs split at the buckets)" : "");
        free(w2), free(m2);
    }
    if (g) batches_free(&mq), model_free(&mm);
    for (int i = 0; i < 3; i++) free(mirror[i]);
    EXPECT(g || d.world == 1 || grads_differ, "ranks saw identical gradients: the shards were not different");
    float *w = fnew(P), *mom = fnew(P), *one_w = fnew(P);
    model_get_state(&dm, w, mom, NULL);
    model_get_state(&lm, one_w, NULL, NULL);
    EXPECT(all_equal_u32(crc_of(w, P)) && all_equal_u32(crc_of(mom, P)), "%s: ranks hold different weights",
           net->name);
    EXPECT(memcmp(w, one_w, P * 4) != 0, "weights did not change");
    write_floats(net->name, "shards", d.rank, w, P);

    if (g) dist_grads_free(g);
    free(perm), free(w), free(mom), free(one_w);
    batches_free(&dq), batches_free(&lq);
    model_free(&dm), model_free(&lm);
}

/* A tensor that stops training (model_stop_training: airbench94's first bias) keeps its slice of
 * the gradient buckets, which backward no longer writes: that slice must sum to 0 in the steps
 * after, not again and again to what it held (doubling on two ranks), and the tensor must stay
 * as it was while the rest trains. */
static void test_stopped_tensor(const struct cifar_set *set, int B) {
    struct model m;
    struct batches q;
    model_init(&m, &net_workshop_cnn, K, B, 5);
    batches_init(&q, K, B);
    struct dist_grads *g = dist_grads_attach(&m, 65536, on_gpu);
    const struct model_tensor *bias = &m.tensors[m.layers[0].bias], *w = &m.tensors[m.layers[0].weight];
    size_t P = m.nparams;
    float *grads = fnew(P), *before = fnew(P), *after = fnew(P), stats[MODEL_STATS];
    int *perm = XALLOC((size_t)set->n * sizeof(int));
    shard_permutation(7, 0, set->n, perm);
    for (int step = 0; step < 4; step++) {
        submit(&q, set, shard_slice(perm, step, d.rank, d.world, B), B);
        check_forward_backward(&m, &q);
        dist_grads_finish(g, stats);
        model_sgd_step(&m, LR, 0.9f, WEIGHT_DECAY, 1.0f / d.world);
        if (step == 0) model_stop_training(&m, m.layers[0].bias), model_get_state(&m, before, NULL, NULL);
    }
    model_get_state(&m, after, NULL, NULL);
    K->download(grads, m.grads, P * sizeof(float));
    size_t nonzero = 0, moved = 0;
    for (size_t i = 0; i < bias->numel; i++) nonzero += grads[bias->offset + i] != 0.0f;
    for (size_t i = 0; i < bias->numel; i++) moved += after[bias->offset + i] != before[bias->offset + i];
    EXPECT(nonzero == 0,
           "rank %d: %zu of the stopped bias's %zu gradients are not 0 three steps after its stop", d.rank,
           nonzero, bias->numel);
    EXPECT(moved == 0, "rank %d: %zu of the stopped bias's values moved", d.rank, moved);
    EXPECT(memcmp(after + w->offset, before + w->offset, w->numel * sizeof(float)) != 0,
           "rank %d: the first layer's weight stopped training too", d.rank);
    dist_grads_free(g);
    free(grads), free(before), free(after), free(perm);
    batches_free(&q);
    model_free(&m);
}

/* HOST mode: the first of two buckets starts as a layer hands its gradients over, then the
 * caller computes for 0.5 s without calling MPI, as a long layer's backward does. Open MPI moves
 * a collective only inside MPI calls, and the ring's second round waits for one: the bucket's
 * sums are in place at the end of those 0.5 s only if the progress thread drove it. */
static void test_progress_thread(void) {
    int level;
    MPI_Query_thread(&level);
    if (d.world < 2 || on_gpu || level < MPI_THREAD_SERIALIZED) return; /* no thread then */
    struct model m;
    model_init(&m, &net_workshop_cnn, K, 4, 5);
    size_t P = m.nparams, total = P + MODEL_STATS, half = P / 2;
    struct dist_grads *g = dist_grads_attach(&m, 1 << 20, 0);
    for (size_t i = 0; i < total; i++) m.grads[i] = (float)(d.rank + 1);
    m.grads_ready(m.grads_ready_ctx, half, total); /* 6 MB: a bucket, started at once */
    const struct timespec compute = {0, 500000000L};
    nanosleep(&compute, NULL);
    int seen = dist_grads_progress_seen(g);
    EXPECT(seen == 1, "rank %d: the bucket started before 0.5 s without MPI calls is not through", d.rank);
    float want = (float)(d.world * (d.world + 1) / 2);
    size_t wrong = 0;
    for (size_t i = half; seen == 1 && i < P; i++) wrong += m.grads[i] != want; /* complete: readable */
    EXPECT(wrong == 0, "rank %d: %zu of the bucket's %zu sums are wrong", d.rank, wrong, P - half);
    m.grads_ready(m.grads_ready_ctx, 0, half);
    float stats[MODEL_STATS];
    dist_grads_finish(g, stats);
    size_t wrong_after = 0;
    for (size_t i = 0; i < P; i++) wrong_after += m.grads[i] != want;
    EXPECT(wrong_after == 0 && stats[0] == want, "rank %d: after finish, %zu sums wrong", d.rank,
           wrong_after);
    dist_grads_free(g);
    model_free(&m);
}

/* --device and --out; the backend in K. Exits every rank with one message on a bad argument
 * or an unusable device. */
static void parse_args(int argc, char **argv) {
    enum device_kind want = DEVICE_CPU;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            device_mode = 1;
            bad |= device_parse(argv[++i], &want) != 0;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out_dir = argv[++i];
        } else {
            bad = 1;
        }
    }
    dist_agree(bad ? 2 : 0, "usage: test_dist [--device cpu|cuda|auto] [--out DIR]");
    char desc[512];
    struct err e = {""};
    K = device_select(want, PRECISION_FP32, 0, d.local_rank, desc, sizeof desc, &e);
    dist_agree(K ? 0 : 1, e.msg);
    on_gpu = !K->host;
    if (device_mode) dist_print_all(desc);
}

int main(int argc, char **argv) {
    err_set_progname("test_dist");
    dist_init(&argc, &argv, 0, &d);
    parse_args(argc, argv);
    omp_set_num_threads(1);
    test_shards();
    test_progress_thread();

    /* A small in-memory dataset of random images. */
    int n = 64, B = 4;
    uint8_t *raw;
    struct cifar_set set = check_random_set(n, 12345, &raw);
    test_steps(&net_workshop_cnn, &set, B, 65536);
    test_steps(&test_net, &set, B, 2048); /* frozen tensors: the ready ranges skip them */
    test_stopped_tensor(&set, B);
    const char *nets[] = {net_workshop_cnn.name, test_net.name};
    if (out_dir && d.rank == 0) write_meta(nets, 2);
    free(set.records), free(raw);

    /* The job's verdict: any failure on any rank fails every rank. */
    char label[32];
    snprintf(label, sizeof label, "test_dist (rank %d of %d)", d.rank, d.world);
    int bad = check_summary(label), any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    dist_finalize();
    K->shutdown(); /* after MPI_Finalize: see kernels.h */
    return any;
}
