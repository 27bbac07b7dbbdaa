/* Whole models on the CUDA backend against the CPU backend (every op of both is tested against
 * double precision in test_ops), for every network (workshop-cnn and the test network): one
 * full training step, a 200-step run whose losses must track the CPU run's, bit-identical
 * repeats on the GPU, and checkpoints written from one device and scored on the other. Needs a
 * GPU; without one (or in a CUDA=0 build) it prints "skipped: no GPU" and passes nothing.
 *
 * TF32 is switched off (NVIDIA_TF32_OVERRIDE=0, set before CUDA starts) so both sides compute
 * in FP32 and differ only in summation order. Tolerances (relative L2 error, GPU vs CPU):
 *   exact: argmax;
 *   1e-5: the first step's loss, logits of a model scored on both devices;
 *   1e-4: the gradients of a whole step (errors compound through the layers);
 *   200 steps: the mean loss of every 20-step window within max(0.05, 10 %) of the CPU run's
 *   (single steps of two float32 runs drift apart chaotically; their course must not). */
#include "../app/checkpoint.h"
#include "../app/model.h"
#include "../common/err.h"
#include "../common/rng.h"
#include "../data/augment.h"
#include "../data/cifar.h"
#include "../kernels/kernels.h"
#include "check.h"
#include "test_nets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CIFAR10_CUDA

static const struct kernels *cpu, *gpu;

static float *fnew(size_t n) { return XALLOC(n * sizeof(float)); }

static void submit(struct model *m, const struct cifar_set *set, const int *idx, int B, int epoch) {
    struct batch *b = model_batch_next(m);
    augment_gather(set, idx, B, 3, epoch, 1, b->img, b->geom, b->labels);
    model_batch_submit(m, B);
}

/* Runs `steps` SGD steps of `net` with batch B from seed 11 on `k`; losses[steps]; final
 * params/buffers in host arrays when not NULL. */
static void train_run(const struct net_def *net, const struct kernels *k, const struct cifar_set *set, int B, int steps,
                      float *losses, float *params, float *bn, float *grads0) {
    struct model m;
    model_init(&m, net, k, B, 11);
    size_t P = m.nparams;
    int *idx = XALLOC((size_t)B * sizeof(int));
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < B; i++) idx[i] = (s * B + i) % set->n;
        submit(&m, set, idx, B, s / 8);
        model_forward_backward(&m);
        float stats[2];
        k->download(stats, m.grads + P, sizeof stats);
        losses[s] = stats[0];
        if (s == 0 && grads0) k->download(grads0, m.grads, P * sizeof(float));
        model_sgd_step(&m, 0.02f, 0.9f, 5e-4f, 1.0f);
    }
    model_get_state(&m, params, NULL, bn);
    free(idx);
    model_free(&m);
}

/* Parameter and buffer floats of net. */
static void sizes_of(const struct net_def *net, size_t *P, size_t *S) {
    struct model m;
    model_init(&m, net, cpu, 1, 0);
    *P = m.nparams, *S = m.nbuffers;
    model_free(&m);
}

static void test_training(const struct net_def *net) {
    uint8_t *raw;
    struct cifar_set set = check_learnable_set(512, &raw);
    size_t P, S;
    sizes_of(net, &P, &S);
    int B = 32, steps = 200;
    float *lc = fnew(steps), *lg = fnew(steps), *lg2 = fnew(steps), *gc = fnew(P), *gg = fnew(P);
    float *pc = fnew(P), *pg = fnew(P), *pg2 = fnew(P), *bc = fnew(S), *bg = fnew(S), *bg2 = fnew(S);
    train_run(net, cpu, &set, B, steps, lc, pc, bc, gc);
    train_run(net, gpu, &set, B, steps, lg, pg, bg, gg);
    /* one step */
    EXPECT(fabsf(lg[0] - lc[0]) < 1e-5f * lc[0], "step 1 loss: GPU %.7g, CPU %.7g", lg[0], lc[0]);
    double eg = check_rel_l2f(gg, gc, P);
    EXPECT(eg < 1e-4, "step 1 gradients: rel err %.3g", eg);
    /* 200 steps, in windows of 20 */
    int bad = 0;
    double first_c = 0, first_g = 0, last_c = 0, last_g = 0;
    for (int w = 0; w < steps / 20; w++) {
        double mc = 0, mg = 0;
        for (int s = 20 * w; s < 20 * (w + 1); s++) mc += lc[s] / 20.0, mg += lg[s] / 20.0;
        double tol = 0.1 * mc > 0.05 ? 0.1 * mc : 0.05;
        bad += fabs(mg - mc) > tol;
        if (w == 0) first_c = mc, first_g = mg;
        last_c = mc, last_g = mg;
    }
    printf("test_cuda: %d steps, mean loss of the first and last 20: CPU %.4f -> %.4f, GPU %.4f -> %.4f\n", steps,
           first_c, last_c, first_g, last_g);
    EXPECT(bad == 0, "%d of %d 20-step windows: GPU mean loss off the CPU's by more than max(0.05, 10%%)", bad, steps / 20);
    EXPECT(lc[steps - 1] < 0.7 * lc[0], "the CPU run did not learn (%.4f -> %.4f)", lc[0], lc[steps - 1]);
    /* bit-identical repeat on the GPU within a process (the same cuDNN plans; deterministic
     * algorithms, fixed reduction orders) */
    train_run(net, gpu, &set, B, 20, lg2, pg2, bg2, NULL);
    float *pg20 = fnew(P), *bg20 = fnew(S), *lg20 = fnew(20);
    train_run(net, gpu, &set, B, 20, lg20, pg20, bg20, NULL);
    EXPECT(memcmp(pg2, pg20, P * 4) == 0 && memcmp(bg2, bg20, S * 4) == 0 && memcmp(lg2, lg20, 20 * 4) == 0,
           "two GPU runs of 20 steps differ");
    free(lc), free(lg), free(lg2), free(gc), free(gg), free(pc), free(pg), free(pg2), free(bc), free(bg), free(bg2);
    free(pg20), free(bg20), free(lg20), free(set.records), free(raw);
}

/* A model trained on one device, written to a file, scored on the other: same predictions,
 * logits within 1e-5. */
static void test_cross_device(const struct net_def *net) {
    uint8_t *raw;
    struct cifar_set set = check_learnable_set(64, &raw);
    size_t P, S;
    sizes_of(net, &P, &S);
    char dir[256], path[512];
    check_tmpdir("cuda", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    int B = 32, idx[32];
    for (int i = 0; i < B; i++) idx[i] = i;
    const struct kernels *from[2] = {gpu, cpu}, *to[2] = {cpu, gpu};
    for (int dir_i = 0; dir_i < 2; dir_i++) {
        float *losses = fnew(5);
        struct model_state st = {fnew(P), NULL, fnew(S), 5};
        train_run(net, from[dir_i], &set, B, 5, losses, st.params, st.buffers, NULL);
        struct run_info info = {.kind = "model", .run_id = "cross", .config = "{}"};
        struct err e = {""};
        struct model shape; /* the tensor table */
        model_init(&shape, net, cpu, 1, 0);
        EXPECT(checkpoint_write(path, &shape, &st, &info, &e) == 0, "write: %s", e.msg);
        struct model_state in = {fnew(P), NULL, fnew(S), 0};
        EXPECT(checkpoint_read(path, &shape, &in, &info, &e) == 0, "read: %s", e.msg);
        model_free(&shape);
        float logits[2][32 * 10];
        int pred[2][32];
        const struct kernels *ks[2] = {from[dir_i], to[dir_i]};
        for (int j = 0; j < 2; j++) {
            struct model m;
            model_init(&m, net, ks[j], B, 0);
            model_set_state(&m, j == 0 ? st.params : in.params, NULL, j == 0 ? st.buffers : in.buffers);
            struct batch *b = model_batch_next(&m);
            augment_gather(&set, idx, B, 0, 0, 0, b->img, b->geom, b->labels);
            model_batch_submit(&m, B);
            model_predict(&m, pred[j], logits[j]);
            model_free(&m);
        }
        double el = check_rel_l2f(logits[1], logits[0], 32 * 10);
        EXPECT(el < 1e-5 && memcmp(pred[0], pred[1], sizeof pred[0]) == 0, "%s trained on %s, scored on %s: logits rel err %.3g",
               net->name, from[dir_i]->name, to[dir_i]->name, el);
        free(losses), free(st.params), free(st.buffers), free(in.params), free(in.buffers);
    }
    check_rmdir(dir);
    free(set.records), free(raw);
}

int main(void) {
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1); /* before CUDA starts: FP32 everywhere */
    struct err why;
    if (kernels_cuda_devices(&why) == 0) {
        printf("test_cuda: skipped: no GPU (%s)\n", why.msg);
        return check_summary("test_cuda");
    }
    cpu = kernels_cpu();
    gpu = kernels_cuda(0);
    char name[256];
    kernels_cuda_describe(name, sizeof name);
    printf("test_cuda: GPU 0: %s\n", name);
    const struct net_def *nets[] = {&net_workshop_cnn, &test_net};
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
        printf("test_cuda: %s\n", nets[i]->name);
        test_training(nets[i]);
        test_cross_device(nets[i]);
    }
    return check_summary("test_cuda");
}

#else

int main(void) {
    printf("test_cuda: skipped: no GPU (this build has no CUDA backend: CUDA=0 or no nvcc)\n");
    return check_summary("test_cuda");
}

#endif
