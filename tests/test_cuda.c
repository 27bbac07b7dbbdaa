/* The CUDA backend against the CPU backend (itself tested against double precision in
 * test_kernels): every op on random inputs, one full training step, a 200-step run whose
 * losses must track the CPU run's, bit-identical repeats on the GPU, and checkpoints written
 * from one device and scored on the other. Needs a GPU; without one (or in a CUDA=0 build) it
 * prints "skipped: no GPU" and passes nothing.
 *
 * TF32 is switched off (NVIDIA_TF32_OVERRIDE=0, set before CUDA starts) so both sides compute
 * in FP32 and differ only in summation order. Tolerances (relative L2 error, GPU vs CPU):
 *   exact (== 0): ReLU, max pool, input pipeline, argmax;
 *   1e-6: SGD update, softmax cross-entropy;
 *   1e-5: batch norm, linear (cuBLAS), convolution (cuDNN: FFT/Winograd algorithms);
 *   1e-4: the gradients of a whole step (errors compound through 22 layers);
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

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CIFAR10_CUDA

static const struct kernels *cpu, *gpu;

static float *fnew(size_t n) { return XALLOC(n * sizeof(float)); }

/* A device copy of host[n] floats (or ints, same size). */
static void *on_gpu(const void *host, size_t bytes) {
    void *d = gpu->alloc(bytes);
    gpu->upload(d, host, bytes);
    return d;
}

/* The GPU result d[n] next to the CPU result ref[n]: relative L2 error. */
static double gpu_err(const float *d, const float *ref, size_t n) {
    float *h = fnew(n);
    gpu->download(h, d, n * sizeof(float));
    double e = check_rel_l2f(h, ref, n);
    free(h);
    return e;
}

static void test_conv(int N, int C, int K, int H, int W) {
    size_t nx = (size_t)N * C * H * W, ny = (size_t)N * K * H * W, nw = (size_t)K * C * 9;
    float *x = fnew(nx), *w = fnew(nw), *b = fnew(K), *dy = fnew(ny), *mask = fnew(nx);
    check_fill(x, nx, -1, 1, 1), check_fill(w, nw, -0.3f, 0.3f, 2), check_fill(b, K, -1, 1, 3);
    check_fill(dy, ny, -1, 1, 4), check_fill(mask, nx, -1, 1, 5);
    float *y = fnew(ny), *dx = fnew(nx), *dw = fnew(nw), *db = fnew(K);
    void *ws = XALLOC(cpu->conv3x3_workspace(N, C, K, H, W) + 64);
    cpu->conv3x3_forward(x, w, b, y, N, C, K, H, W, 1, ws);
    cpu->conv3x3_backward(x, w, dy, dx, dw, db, N, C, K, H, W, mask, ws);
    float *gx = on_gpu(x, nx * 4), *gw = on_gpu(w, nw * 4), *gb = on_gpu(b, K * 4), *gdy = on_gpu(dy, ny * 4);
    float *gmask = on_gpu(mask, nx * 4), *gy = gpu->alloc(ny * 4), *gdx = gpu->alloc(nx * 4);
    float *gdw = gpu->alloc(nw * 4), *gdb = gpu->alloc(K * 4);
    void *gws = gpu->alloc(gpu->conv3x3_workspace(N, C, K, H, W) + 64);
    gpu->conv3x3_forward(gx, gw, gb, gy, N, C, K, H, W, 1, gws);
    gpu->conv3x3_backward(gx, gw, gdy, gdx, gdw, gdb, N, C, K, H, W, gmask, gws);
    double ey = gpu_err(gy, y, ny), edx = gpu_err(gdx, dx, nx), edw = gpu_err(gdw, dw, nw), edb = gpu_err(gdb, db, K);
    EXPECT(ey < 1e-5 && edx < 1e-5 && edw < 1e-5 && edb < 1e-5,
           "conv %d->%d %dx%d N=%d: rel err y %.3g dx %.3g dw %.3g db %.3g", C, K, H, W, N, ey, edx, edw, edb);
    /* without dx (layer 0) and without the fused ReLU */
    cpu->conv3x3_forward(x, w, b, y, N, C, K, H, W, 0, ws);
    gpu->conv3x3_forward(gx, gw, gb, gy, N, C, K, H, W, 0, gws);
    gpu->conv3x3_backward(gx, gw, gdy, NULL, gdw, gdb, N, C, K, H, W, NULL, gws);
    EXPECT(gpu_err(gy, y, ny) < 1e-5 && gpu_err(gdw, dw, nw) < 1e-5, "conv %d->%d without ReLU / dx", C, K);
    void *all[] = {gx, gw, gb, gdy, gmask, gy, gdx, gdw, gdb, gws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->free(all[i]);
    free(x), free(w), free(b), free(dy), free(mask), free(y), free(dx), free(dw), free(db), free(ws);
}

static void test_linear(int N, int I, int O) {
    size_t nx = (size_t)N * I, ny = (size_t)N * O, nw = (size_t)O * I;
    float *x = fnew(nx), *w = fnew(nw), *b = fnew(O), *dy = fnew(ny), *y = fnew(ny), *dx = fnew(nx), *dw = fnew(nw),
          *db = fnew(O);
    check_fill(x, nx, -1, 1, 6), check_fill(w, nw, -0.1f, 0.1f, 7), check_fill(b, O, -1, 1, 8), check_fill(dy, ny, -1, 1, 9);
    void *ws = XALLOC(cpu->linear_workspace(N, I, O) + 64);
    cpu->linear_forward(x, w, b, y, N, I, O, ws);
    cpu->linear_backward(x, w, dy, dx, dw, db, N, I, O, ws);
    float *gx = on_gpu(x, nx * 4), *gw = on_gpu(w, nw * 4), *gb = on_gpu(b, O * 4), *gdy = on_gpu(dy, ny * 4);
    float *gy = gpu->alloc(ny * 4), *gdx = gpu->alloc(nx * 4), *gdw = gpu->alloc(nw * 4), *gdb = gpu->alloc(O * 4);
    void *gws = gpu->alloc(gpu->linear_workspace(N, I, O) + 64);
    gpu->linear_forward(gx, gw, gb, gy, N, I, O, gws);
    gpu->linear_backward(gx, gw, gdy, gdx, gdw, gdb, N, I, O, gws);
    double ey = gpu_err(gy, y, ny), edx = gpu_err(gdx, dx, nx), edw = gpu_err(gdw, dw, nw), edb = gpu_err(gdb, db, O);
    EXPECT(ey < 1e-5 && edx < 1e-5 && edw < 1e-5 && edb < 1e-5, "linear %d->%d N=%d: rel err y %.3g dx %.3g dw %.3g db %.3g",
           I, O, N, ey, edx, edw, edb);
    void *all[] = {gx, gw, gb, gdy, gy, gdx, gdw, gdb, gws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->free(all[i]);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(ws);
}

static void test_elementwise(void) {
    int N = 3, C = 5, H = 6, W = 8;
    size_t n = (size_t)N * C * H * W, np = n / 4;
    float *x = fnew(n), *dy = fnew(n), *y = fnew(n), *dx = fnew(n), *py = fnew(np), *pdy = fnew(np);
    check_fill(x, n, -1, 1, 10), check_fill(dy, n, -1, 1, 11), check_fill(pdy, np, -1, 1, 12);
    x[1] = x[0], x[W] = x[0]; /* ties: the first maximum wins on both */
    float *gx = on_gpu(x, n * 4), *gdy = on_gpu(dy, n * 4), *gpdy = on_gpu(pdy, np * 4), *gy = gpu->alloc(n * 4);
    float *gdx = gpu->alloc(n * 4), *gpy = gpu->alloc(np * 4);
    cpu->relu_forward(x, y, n), gpu->relu_forward(gx, gy, n);
    cpu->relu_backward(x, dy, dx, n), gpu->relu_backward(gx, gdy, gdx, n);
    EXPECT(gpu_err(gy, y, n) == 0 && gpu_err(gdx, dx, n) == 0, "relu");
    cpu->maxpool2_forward(x, py, N, C, H, W), gpu->maxpool2_forward(gx, gpy, N, C, H, W);
    EXPECT(gpu_err(gpy, py, np) == 0, "maxpool forward");
    for (int relu = 0; relu < 2; relu++) {
        cpu->maxpool2_backward(x, pdy, dx, N, C, H, W, relu), gpu->maxpool2_backward(gx, gpdy, gdx, N, C, H, W, relu);
        EXPECT(gpu_err(gdx, dx, n) == 0, "maxpool backward (relu %d)", relu);
    }
    /* SGD over an odd length */
    size_t m = 1001;
    float *p = fnew(m), *g = fnew(m), *mo = fnew(m);
    check_fill(p, m, -1, 1, 13), check_fill(g, m, -1, 1, 14), check_fill(mo, m, -1, 1, 15);
    float *gp = on_gpu(p, m * 4), *gg = on_gpu(g, m * 4), *gmo = on_gpu(mo, m * 4);
    for (int s = 0; s < 3; s++) {
        cpu->sgd_update(p, g, mo, m, 0.05f, 0.9f, 5e-4f, 0.5f);
        gpu->sgd_update(gp, gg, gmo, m, 0.05f, 0.9f, 5e-4f, 0.5f);
    }
    EXPECT(gpu_err(gp, p, m) < 1e-6 && gpu_err(gmo, mo, m) < 1e-6, "sgd: params %.3g momentum %.3g", gpu_err(gp, p, m),
           gpu_err(gmo, mo, m));
    /* softmax cross-entropy, N = 300 (more rows than threads) */
    int B = 300, *lab = XALLOC(B * sizeof(int));
    float *z = fnew((size_t)B * 10), *dz = fnew((size_t)B * 10), out[2], gout[2];
    check_fill(z, (size_t)B * 10, -4, 4, 16);
    for (int i = 0; i < B; i++) lab[i] = (i * 7) % 10;
    float *gz = on_gpu(z, (size_t)B * 40), *gdz = gpu->alloc((size_t)B * 40), *go = gpu->alloc(8);
    int *glab = on_gpu(lab, B * sizeof(int));
    cpu->softmax_xent(z, lab, dz, out, B, 10), gpu->softmax_xent(gz, glab, gdz, go, B, 10);
    gpu->download(gout, go, 8);
    EXPECT(fabsf(gout[0] - out[0]) <= 1e-6f * fabsf(out[0]) && gout[1] == out[1] && gpu_err(gdz, dz, (size_t)B * 10) < 1e-6,
           "softmax xent: loss %.8g vs %.8g, correct %g vs %g", gout[0], out[0], gout[1], out[1]);
    /* the input pipeline: every crop offset and flip */
    int Ni = 18;
    unsigned char *img = XALLOC((size_t)Ni * 3072);
    int *geom = XALLOC((size_t)Ni * 3 * sizeof(int));
    for (size_t i = 0; i < (size_t)Ni * 3072; i++) img[i] = (unsigned char)(i * 2654435761u >> 24);
    for (int i = 0; i < Ni; i++) geom[3 * i] = i % 9, geom[3 * i + 1] = (i * 5) % 9, geom[3 * i + 2] = i / 9;
    float scale[3], shift[3], *xin = fnew((size_t)Ni * 3072);
    augment_scale_shift(scale, shift);
    unsigned char *gimg = on_gpu(img, (size_t)Ni * 3072);
    int *ggeom = on_gpu(geom, (size_t)Ni * 3 * sizeof(int));
    float *gxin = gpu->alloc((size_t)Ni * 3072 * 4);
    cpu->input_prepare(img, geom, xin, Ni, scale, shift), gpu->input_prepare(gimg, ggeom, gxin, Ni, scale, shift);
    EXPECT(gpu_err(gxin, xin, (size_t)Ni * 3072) < 1e-7, "input pipeline: rel err %.3g", gpu_err(gxin, xin, (size_t)Ni * 3072));
    void *all[] = {gx, gdy, gpdy, gy, gdx, gpy, gp, gg, gmo, gz, gdz, go, glab, gimg, ggeom, gxin};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->free(all[i]);
    free(x), free(dy), free(y), free(dx), free(py), free(pdy), free(p), free(g), free(mo), free(lab), free(z), free(dz);
    free(img), free(geom), free(xin);
}

static void test_batchnorm(int N, int C, int HW) {
    size_t n = (size_t)N * C * HW;
    float *x = fnew(n), *dy = fnew(n), *gam = fnew(C), *bet = fnew(C), *y = fnew(n), *dx = fnew(n);
    float *sm = fnew(C), *si = fnew(C), *rm = fnew(C), *rv = fnew(C), *dg = fnew(C), *dbt = fnew(C);
    check_fill(x, n, -2, 3, 17), check_fill(dy, n, -1, 1, 18), check_fill(gam, C, 0.5f, 1.5f, 19);
    check_fill(bet, C, -0.5f, 0.5f, 20), check_fill(rm, C, -0.1f, 0.1f, 21), check_fill(rv, C, 0.9f, 1.1f, 22);
    float *gxx = on_gpu(x, n * 4), *gdy = on_gpu(dy, n * 4), *ggam = on_gpu(gam, C * 4), *gbet = on_gpu(bet, C * 4);
    float *grm = on_gpu(rm, C * 4), *grv = on_gpu(rv, C * 4), *gy = gpu->alloc(n * 4), *gdx = gpu->alloc(n * 4);
    float *gsm = gpu->alloc(C * 4), *gsi = gpu->alloc(C * 4), *gdg = gpu->alloc(C * 4), *gdb = gpu->alloc(C * 4);
    cpu->batchnorm_forward_train(x, gam, bet, y, sm, si, rm, rv, 0.1f, 1e-5f, N, C, HW);
    gpu->batchnorm_forward_train(gxx, ggam, gbet, gy, gsm, gsi, grm, grv, 0.1f, 1e-5f, N, C, HW);
    cpu->batchnorm_backward(x, dy, gam, sm, si, dx, dg, dbt, N, C, HW);
    gpu->batchnorm_backward(gxx, gdy, ggam, gsm, gsi, gdx, gdg, gdb, N, C, HW);
    double e[] = {gpu_err(gy, y, n), gpu_err(gsm, sm, C), gpu_err(gsi, si, C), gpu_err(grm, rm, C), gpu_err(grv, rv, C),
                  gpu_err(gdx, dx, n), gpu_err(gdg, dg, C), gpu_err(gdb, dbt, C)};
    double worst = 0;
    for (int i = 0; i < 8; i++) worst = e[i] > worst ? e[i] : worst;
    EXPECT(worst < 1e-5, "batchnorm N=%d C=%d HW=%d: rel err y %.2g mean %.2g invstd %.2g running %.2g/%.2g dx %.2g dgamma %.2g dbeta %.2g",
           N, C, HW, e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
    cpu->batchnorm_forward_eval(x, gam, bet, rm, rv, 1e-5f, y, N, C, HW);
    gpu->batchnorm_forward_eval(gxx, ggam, gbet, grm, grv, 1e-5f, gy, N, C, HW);
    EXPECT(gpu_err(gy, y, n) < 1e-5, "batchnorm eval: rel err %.3g", gpu_err(gy, y, n));
    void *all[] = {gxx, gdy, ggam, gbet, grm, grv, gy, gdx, gsm, gsi, gdg, gdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->free(all[i]);
    free(x), free(dy), free(gam), free(bet), free(y), free(dx), free(sm), free(si), free(rm), free(rv), free(dg), free(dbt);
}

/* A synthetic labelled set of n images whose label is a function of the image, so training
 * lowers the loss. */
static struct cifar_set make_set(int n, uint8_t **raw) {
    *raw = XALLOC((size_t)n * CIFAR_RECORD_BYTES);
    struct rng r = rng_make(9, RNG_INIT, 77, 0);
    struct cifar_set set = {.n = n, .records = XALLOC((size_t)n * sizeof(uint8_t *))};
    for (int i = 0; i < n; i++) {
        uint8_t *rec = *raw + (size_t)i * CIFAR_RECORD_BYTES;
        int label = (int)rng_below(&r, 10);
        rec[0] = (uint8_t)label;
        for (int p = 0; p < CIFAR_IMAGE_BYTES; p++)
            rec[1 + p] = (uint8_t)(rng_below(&r, 96) + (p / 1024 == label % 3 ? 24 * (label / 3) : 0) + (p % 32 < 16) * 40);
        set.records[i] = rec;
    }
    return set;
}

static void submit(struct model *m, const struct cifar_set *set, const int *idx, int B, int epoch) {
    struct model_batch *b = model_batch_next(m);
    augment_gather(set, idx, B, 3, epoch, 1, b->img, b->geom, b->labels);
    model_batch_submit(m, B);
}

/* Runs `steps` SGD steps of batch B from seed 11 on `k`; losses[steps]; final params/bn in
 * host arrays when not NULL. */
static void train_run(const struct kernels *k, const struct cifar_set *set, int B, int steps, float *losses,
                      float *params, float *bn, float *grads0) {
    struct model m;
    model_init(&m, k, B, 11);
    size_t P = model_param_count();
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

static void test_training(void) {
    uint8_t *raw;
    struct cifar_set set = make_set(512, &raw);
    size_t P = model_param_count(), S = model_bn_stats_count();
    int B = 32, steps = 200;
    float *lc = fnew(steps), *lg = fnew(steps), *lg2 = fnew(steps), *gc = fnew(P), *gg = fnew(P);
    float *pc = fnew(P), *pg = fnew(P), *pg2 = fnew(P), *bc = fnew(S), *bg = fnew(S), *bg2 = fnew(S);
    train_run(cpu, &set, B, steps, lc, pc, bc, gc);
    train_run(gpu, &set, B, steps, lg, pg, bg, gg);
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
    train_run(gpu, &set, B, 20, lg2, pg2, bg2, NULL);
    float *pg20 = fnew(P), *bg20 = fnew(S), *lg20 = fnew(20);
    train_run(gpu, &set, B, 20, lg20, pg20, bg20, NULL);
    EXPECT(memcmp(pg2, pg20, P * 4) == 0 && memcmp(bg2, bg20, S * 4) == 0 && memcmp(lg2, lg20, 20 * 4) == 0,
           "two GPU runs of 20 steps differ");
    free(lc), free(lg), free(lg2), free(gc), free(gg), free(pc), free(pg), free(pg2), free(bc), free(bg), free(bg2);
    free(pg20), free(bg20), free(lg20), free(set.records), free(raw);
}

/* A model trained on one device, written to a file, scored on the other: same predictions,
 * logits within 1e-5. */
static void test_cross_device(void) {
    uint8_t *raw;
    struct cifar_set set = make_set(64, &raw);
    size_t P = model_param_count(), S = model_bn_stats_count();
    char dir[256], path[512];
    check_tmpdir("cuda", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    int B = 32, idx[32];
    for (int i = 0; i < B; i++) idx[i] = i;
    const struct kernels *from[2] = {gpu, cpu}, *to[2] = {cpu, gpu};
    for (int dir_i = 0; dir_i < 2; dir_i++) {
        float *losses = fnew(5);
        struct model_state st = {fnew(P), NULL, fnew(S), 5};
        train_run(from[dir_i], &set, B, 5, losses, st.params, st.bn_stats, NULL);
        struct run_info info = {.kind = "model", .run_id = "cross", .config = "{}"};
        struct err e = {""};
        EXPECT(checkpoint_write(path, &st, &info, &e) == 0, "write: %s", e.msg);
        struct model_state in = {fnew(P), NULL, fnew(S), 0};
        EXPECT(checkpoint_read(path, &in, &info, &e) == 0, "read: %s", e.msg);
        float logits[2][32 * 10];
        int pred[2][32];
        const struct kernels *ks[2] = {from[dir_i], to[dir_i]};
        for (int j = 0; j < 2; j++) {
            struct model m;
            model_init(&m, ks[j], B, 0);
            model_set_state(&m, j == 0 ? st.params : in.params, NULL, j == 0 ? st.bn_stats : in.bn_stats);
            struct model_batch *b = model_batch_next(&m);
            augment_gather(&set, idx, B, 0, 0, 0, b->img, b->geom, b->labels);
            model_batch_submit(&m, B);
            model_predict(&m, pred[j], logits[j]);
            model_free(&m);
        }
        double el = check_rel_l2f(logits[1], logits[0], 32 * 10);
        EXPECT(el < 1e-5 && memcmp(pred[0], pred[1], sizeof pred[0]) == 0, "model trained on %s, scored on %s: logits rel err %.3g",
               from[dir_i]->name, to[dir_i]->name, el);
        free(losses), free(st.params), free(st.bn_stats), free(in.params), free(in.bn_stats);
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
    test_elementwise();
    test_batchnorm(4, 3, 10);
    test_batchnorm(64, 64, 256); /* many splits per channel */
    test_linear(9, 70, 33);
    test_linear(128, 4096, 512);
    test_conv(2, 3, 32, 32, 32);
    test_conv(5, 16, 32, 8, 8);
    test_conv(8, 128, 256, 8, 8);
    test_conv(3, 7, 5, 5, 3); /* odd sizes */
    test_training();
    test_cross_device();
    return check_summary("test_cuda");
}

#else

int main(void) {
    printf("test_cuda: skipped: no GPU (this build has no CUDA backend: CUDA=0 or no nvcc)\n");
    return check_summary("test_cuda");
}

#endif
